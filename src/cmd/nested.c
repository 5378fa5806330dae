/* nested.c - nested instances: the broker job and its URI (nested.h). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "jobopts.h"
#include "nested.h"

/* The announcement eddy start --print-uri writes on rank 0's stderr. */
#define NESTED_URI_PREFIX "EDDY_URI="
/* Longest output line we look at: a URI is a path plus a few bytes. */
#define NESTED_LINE_MAX (PATH_MAX + 64)
/* How long the shutdown request may take to be answered. */
#define NESTED_SHUTDOWN_WAIT 10.0

const char *nested_self(void)
{
    static char self[PATH_MAX];
    ssize_t n;

    if (self[0])
        return self;
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        snprintf(self, sizeof(self), "eddy");
        return self;
    }
    self[n] = '\0';
    return self;
}

static double parse_seconds(const char *cmd, const char *what, const char *s)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || v > 1e9)
        cmd_die(cmd, "%s '%s' is not a number of seconds", what, s);
    return v;
}

void nested_parse(const char *cmd,
                  const char *usage,
                  int argc,
                  char **argv,
                  struct nested_opts *o)
{
    enum { OPT_JOB_NAME = 256, OPT_TIMEOUT };
    static const struct option opts[] = {
        {"nodes", required_argument, NULL, 'N'},
        {"time-limit", required_argument, NULL, 't'},
        {"job-name", required_argument, NULL, OPT_JOB_NAME},
        {"broker-opt", required_argument, NULL, 'o'},
        {"verbose", no_argument, NULL, 'v'},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char *end;
    long v;
    int c;

    memset(o, 0, sizeof(*o));
    o->nodes = 1;
    o->timeout = 60;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+N:t:o:vh", opts, NULL)) != -1) {
        switch (c) {
        case 'N':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || v < 1 || v > 1 << 20)
                cmd_die(cmd, "-N '%s' must be a number of nodes >= 1", optarg);
            o->nodes = (int)v;
            break;
        case 't':
            o->time_limit = parse_seconds(cmd, "time limit", optarg);
            break;
        case OPT_JOB_NAME:
            o->name = optarg;
            break;
        case 'o':
            if (o->nbroker_opts == NESTED_MAX_BROKER_OPTS)
                cmd_die(cmd, "more than %d --broker-opt",
                        NESTED_MAX_BROKER_OPTS);
            o->broker_opts[o->nbroker_opts++] = optarg;
            break;
        case 'v':
            o->verbose = true;
            break;
        case OPT_TIMEOUT:
            o->timeout = parse_seconds(cmd, "timeout", optarg);
            break;
        case 'h':
            fputs(usage, stdout);
            exit(0);
        default:
            fputs(usage, stderr);
            exit(1);
        }
    }
}

eddy_jobid_t nested_submit(const char *cmd,
                           eddy_t *h,
                           const struct nested_opts *o,
                           int script_argc,
                           char **script_argv)
{
    char *argv[8 + 2 * NESTED_MAX_BROKER_OPTS + 1];
    char **full = NULL;
    int ac = 0, n;
    eddy_jobspec_t *js;
    eddy_future_t *f;
    eddy_error_t err;
    json_int_t id;
    char *text;

    argv[ac++] = (char *)nested_self();
    argv[ac++] = (char *)"start";
    argv[ac++] = (char *)"--pmi";
    argv[ac++] = (char *)"--print-uri";
    for (int i = 0; i < o->nbroker_opts; i++) {
        argv[ac++] = (char *)"-o";
        argv[ac++] = (char *)o->broker_opts[i];
    }
    argv[ac++] = (char *)"--";
    n = ac + (script_argc > 0 ? script_argc : 0);
    if (!(full = calloc((size_t)n + 1, sizeof(*full))))
        cmd_die(cmd, "out of memory");
    memcpy(full, argv, (size_t)ac * sizeof(*full));
    for (int i = 0; i < script_argc; i++)
        full[ac + i] = script_argv[i];
    /* One broker per node, each with the whole node: the nested instance
     * schedules the allocation's cores itself. */
    if (!(js = eddy_jobspec_create()) ||
        eddy_jobspec_add_group(js, n, full, 0) < 0 ||
        eddy_jobspec_set_nodes(js, o->nodes) < 0 ||
        eddy_jobspec_set_tasks_per_node(js, 1) < 0 ||
        eddy_jobspec_set_exclusive(js, true) < 0 ||
        eddy_jobspec_set_name(js, o->name ? o->name : cmd) < 0 ||
        (o->time_limit > 0 &&
         eddy_jobspec_set_duration(js, o->time_limit) < 0) ||
        eddy_jobspec_set_stdin(js, false) < 0)
        cmd_die(cmd, "cannot describe the job: %s", strerror(errno));
    free(full);
    if (!(f = eddy_job_submit(h, js))) {
        if (errno == EINVAL && !(text = eddy_jobspec_encode(js, &err)))
            cmd_die(cmd, "%s", err.text);
        cmd_die(cmd, "cannot submit the job: %s", strerror(errno));
    }
    if (eddy_rpc_get_unpack(f, "{s:I}", "id", &id) < 0)
        cmd_die(cmd, "%s", eddy_future_error_string(f));
    if (id < 0)
        cmd_die(cmd, "job.submit answered a negative job ID");
    eddy_future_destroy(f);
    eddy_jobspec_destroy(js);
    return (eddy_jobid_t)id;
}

struct uriwatch {
    bool forward;
    char *uri;
    /* rank 0's stderr, the line in progress */
    char line[NESTED_LINE_MAX];
    size_t len;
    bool overlong; /* the line in progress is past NESTED_LINE_MAX */
};

static void take_line(struct uriwatch *w)
{
    size_t plen = strlen(NESTED_URI_PREFIX);

    w->line[w->len] = '\0';
    if (!w->uri && !w->overlong && !strncmp(w->line, NESTED_URI_PREFIX, plen) &&
        w->line[plen] != '\0') {
        w->uri = strdup(w->line + plen);
    } else if (w->forward) {
        fprintf(stderr, "%s%s\n", w->line, w->overlong ? "..." : "");
    }
    w->len = 0;
    w->overlong = false;
}

static void output_cb(eddy_jobid_t id,
                      uint32_t rank,
                      int stream,
                      const void *data,
                      size_t len,
                      bool eof,
                      void *arg)
{
    struct uriwatch *w = arg;
    const char *p = data;

    (void)id;
    if (rank != 0 || stream != EDDY_JOB_STDERR) {
        if (w->forward && len > 0)
            fwrite(data, 1, len, stderr);
        return;
    }
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '\n') {
            take_line(w);
            continue;
        }
        if (w->len < sizeof(w->line) - 1)
            w->line[w->len++] = p[i];
        else
            w->overlong = true;
    }
    if (eof && w->len > 0)
        take_line(w);
}

static bool job_running(eddy_t *h, eddy_jobid_t id)
{
    eddy_future_t *f = eddy_job_info(h, id);
    eddy_jobinfo_t *info = f ? eddy_job_info_get(f) : NULL;
    const char *state = info ? eddy_jobinfo_state(info) : NULL;
    bool running = state && !strcmp(state, "RUN");

    eddy_jobinfo_destroy(info);
    eddy_future_destroy(f);
    return running;
}

char *nested_uri_wait(eddy_t *h, eddy_jobid_t id, double timeout, bool forward)
{
    struct uriwatch *w;
    eddy_future_t *f;
    double deadline = cmd_now() + timeout;
    char *uri = NULL;
    int errnum = 0;

    if (!(w = calloc(1, sizeof(*w)))) {
        errno = ENOMEM;
        return NULL;
    }
    w->forward = forward;
    if (!(f = eddy_job_attach(h, id, output_cb, w))) {
        errnum = errno;
        goto done;
    }
    while (!w->uri) {
        if (eddy_future_is_ready(f)) {
            /* all output delivered and the job ended without a URI */
            errnum = eddy_rpc_get(f, NULL) == 0 ? ESRCH : errno;
            break;
        }
        if (timeout > 0 && cmd_now() > deadline) {
            errnum = ETIMEDOUT;
            break;
        }
        (void)eddy_future_wait_for(f, 0.01);
    }
    uri = w->uri;
    eddy_future_destroy(f);
    /* The announcement stays in the job's output after the job ended. */
    if (uri && !job_running(h, id)) {
        free(uri);
        uri = NULL;
        errnum = ESRCH;
    }
done:
    free(w);
    if (!uri)
        errno = errnum ? errnum : EPROTO;
    return uri;
}

int nested_shutdown(const char *uri)
{
    eddy_error_t err;
    eddy_future_t *f;
    eddy_t *h;
    int rc = -1;

    if (!(h = eddy_open(uri, 0, &err)))
        return -1;
    if ((f = eddy_rpc(h, "broker.shutdown", 0, 0, NULL, NULL, 0)) &&
        eddy_future_wait_for(f, NESTED_SHUTDOWN_WAIT) == 0 &&
        eddy_rpc_get(f, NULL) == 0)
        rc = 0;
    eddy_future_destroy(f);
    eddy_close(h);
    return rc;
}
