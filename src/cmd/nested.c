/* nested.c - nested instances: the broker job and its URI (nested.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd.h"
#include "jobopts.h"
#include "nested.h"
#include "src/common/hex.h"
#include "src/common/token.h"

/* got_term: the last SIGTERM/SIGHUP/SIGINT caught; pending: not yet
 * passed on to the command of nested_run(). */
static volatile sig_atomic_t got_term, pending;

/* The announcements eddy start --print-uri writes on rank 0's stderr, the
 * tcp:// one first. */
#define NESTED_URI_PREFIX "EDDY_URI="
#define NESTED_TCP_PREFIX "EDDY_TCP_URI="
/* Where a nested rank 0 keeps its token (eddy start --pmi --listen). */
#define NESTED_TOKEN_NAME "token"
/* A sealed token in hex, and a newline. */
#define NESTED_SEALED_HEX (2 * (crypto_box_SEALBYTES + TOKEN_SIZE))
/* Bytes of the sealer's stderr kept for the message, and the bound on
 * its stdout (anything longer is not a sealed token). */
#define NESTED_SEAL_ERR_MAX 512
#define NESTED_SEAL_OUT_MAX (NESTED_SEALED_HEX + 2)
/* How long fetching the token may take (one exec.run). */
#define NESTED_SEAL_WAIT 30.0
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
    enum { OPT_JOB_NAME = 256, OPT_TIMEOUT, OPT_TCP };
    static const struct option opts[] = {
        {"nodes", required_argument, NULL, 'N'},
        {"ntasks", required_argument, NULL, 'n'},
        {"tcp", no_argument, NULL, OPT_TCP},
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
    while ((c = getopt_long(argc, argv, "+N:n:t:o:vh", opts, NULL)) != -1) {
        switch (c) {
        case 'N':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || v < 1 || v > 1 << 20)
                cmd_die(cmd, "-N '%s' must be a number of nodes >= 1", optarg);
            o->nodes = (int)v;
            break;
        case 'n':
            errno = 0;
            v = strtol(optarg, &end, 10);
            if (errno || end == optarg || *end || v < 1 || v > 1 << 24)
                cmd_die(cmd, "-n '%s' must be a number of cores >= 1", optarg);
            o->cores = (int)v;
            break;
        case OPT_TCP:
            o->tcp = true;
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
    /* One broker per node, so the cores must split evenly: a jobspec
     * gives every task (broker) the same cores. */
    if (o->cores > 0 && o->cores % o->nodes != 0)
        cmd_die(cmd,
                "-n %d cores do not split evenly over -N %d nodes (one "
                "broker per node, each with the same cores)",
                o->cores, o->nodes);
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
    eddy_jobid_t id;

    argv[ac++] = (char *)nested_self();
    argv[ac++] = (char *)"start";
    argv[ac++] = (char *)"--pmi";
    argv[ac++] = (char *)"--print-uri";
    argv[ac++] = (char *)"--listen=auto";
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
    /* One broker per node, each with the whole node (or with -n, its
     * share of the cores): the nested instance schedules them itself,
     * told how many by the shell (EDDY_JOB_CORES, eddy start --pmi). */
    if (!(js = eddy_jobspec_create()) ||
        eddy_jobspec_add_group(js, n, full, 0) < 0 ||
        eddy_jobspec_set_nodes(js, o->nodes) < 0 ||
        eddy_jobspec_set_tasks_per_node(js, 1) < 0 ||
        eddy_jobspec_set_exclusive(js, o->cores == 0) < 0 ||
        (o->cores > 0 &&
         eddy_jobspec_set_cores_per_task(js, o->cores / o->nodes) < 0) ||
        eddy_jobspec_set_name(js, o->name ? o->name : cmd) < 0 ||
        (o->time_limit > 0 &&
         eddy_jobspec_set_duration(js, o->time_limit) < 0) ||
        eddy_jobspec_set_stdin(js, false) < 0)
        cmd_die(cmd, "cannot describe the job: %s", strerror(errno));
    free(full);
    id = jobspec_submit(cmd, h, js);
    eddy_jobspec_destroy(js);
    return id;
}

struct uriwatch {
    bool forward;
    char *uri;
    char *tcp;
    /* rank 0's stderr, the line in progress */
    char line[NESTED_LINE_MAX];
    size_t len;
    bool overlong; /* the line in progress is past NESTED_LINE_MAX */
};

static void take_line(struct uriwatch *w)
{
    size_t plen = strlen(NESTED_URI_PREFIX);
    size_t tlen = strlen(NESTED_TCP_PREFIX);

    w->line[w->len] = '\0';
    if (!w->uri && !w->overlong && !strncmp(w->line, NESTED_URI_PREFIX, plen) &&
        w->line[plen] != '\0') {
        w->uri = strdup(w->line + plen);
    } else if (!w->uri && !w->tcp && !w->overlong &&
               !strncmp(w->line, NESTED_TCP_PREFIX, tlen) &&
               w->line[tlen] != '\0') {
        w->tcp = strdup(w->line + tlen);
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

char *nested_uri_wait(
    eddy_t *h, eddy_jobid_t id, double timeout, bool forward, char **tcp_uri)
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
        if (got_term) {
            errnum = EINTR;
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
    if (uri && tcp_uri) {
        *tcp_uri = w->tcp;
        w->tcp = NULL;
    }
    free(w->tcp);
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

bool nested_local_ok(const char *local)
{
    eddy_error_t err;
    eddy_t *h;

    if (!local || strncmp(local, "local://", 8) != 0)
        return false;
    if (!(h = eddy_open(local, 0, &err)))
        return false;
    eddy_close(h);
    return true;
}

/* The parent broker rank that runs task 0 (the nested rank 0) of 'id'. */
static int rank0_node(const char *cmd,
                      eddy_t *h,
                      eddy_jobid_t id,
                      uint32_t *node)
{
    eddy_future_t *f = eddy_job_info(h, id);
    eddy_jobinfo_t *info = f ? eddy_job_info_get(f) : NULL;
    struct eddy_taskinfo task;
    int rc = -1;

    if (!info)
        cmd_warn(cmd, "job %" PRIu64 ": %s", id,
                 f ? eddy_future_error_string(f) : strerror(errno));
    else if (eddy_jobinfo_task(info, 0, &task) < 0)
        cmd_warn(cmd, "job %" PRIu64 ": no task 0", id);
    else {
        *node = task.node;
        rc = 0;
    }
    eddy_jobinfo_destroy(info);
    eddy_future_destroy(f);
    return rc;
}

/* Append up to 'max' bytes of 'data' to 'buf' (NUL-terminated, 'max' + 1
 * bytes); true if some did not fit. */
static bool append_bounded(
    char *buf, size_t *len, size_t max, const void *data, size_t n)
{
    size_t room = max - *len;
    bool over = n > room;

    memcpy(buf + *len, data, over ? room : n);
    *len += over ? room : n;
    buf[*len] = '\0';
    return over;
}

/* Run `eddy proxy --seal-token=PK PATH` on parent rank 'node' through the
 * exec service and collect its stdout (the sealed token in hex) into
 * 'out'.  0, or -1 after saying why. */
static int run_sealer(const char *cmd,
                      eddy_t *h,
                      uint32_t node,
                      const char *pkhex,
                      const char *path,
                      char out[NESTED_SEAL_OUT_MAX + 1])
{
    char arg[2 * crypto_box_PUBLICKEYBYTES + 32];
    char errbuf[NESTED_SEAL_ERR_MAX + 1] = "";
    const char *msg;
    size_t olen = 0, elen = 0;
    bool over = false;
    json_int_t status = -1;
    eddy_future_t *f;
    int rc = -1;

    out[0] = '\0';
    snprintf(arg, sizeof(arg), "--seal-token=%s", pkhex);
    if (!(f = eddy_rpc_pack(h, "exec.run", node, EDDY_RPC_STREAMING,
                            "{s:[ssss]}", "cmd", nested_self(), "proxy", arg,
                            path))) {
        cmd_warn(cmd, "exec.run on rank %" PRIu32 ": %s", node,
                 strerror(errno));
        return -1;
    }
    for (;;) {
        const char *type = NULL, *stream = NULL;
        const void *data;
        size_t len;

        if (eddy_future_wait_for(f, NESTED_SEAL_WAIT) < 0) {
            cmd_warn(cmd, "rank %" PRIu32 ": no token within %.0f s", node,
                     NESTED_SEAL_WAIT);
            goto done;
        }
        if (eddy_rpc_get_unpack(f, "{s:s s?s s?I}", "type", &type, "stream",
                                &stream, "status", &status) < 0) {
            cmd_warn(cmd, "rank %" PRIu32 ": cannot run %s: %s", node,
                     nested_self(), eddy_future_error_string(f));
            goto done;
        }
        if (!strcmp(type, "exit"))
            break;
        if (!strcmp(type, "output") && stream &&
            eddy_rpc_get_raw(f, &data, &len) == 0) {
            if (!strcmp(stream, "stdout"))
                over |=
                    append_bounded(out, &olen, NESTED_SEAL_OUT_MAX, data, len);
            else
                (void)append_bounded(errbuf, &elen, NESTED_SEAL_ERR_MAX, data,
                                     len);
        }
        eddy_future_reset(f);
    }
    errbuf[strcspn(errbuf, "\n")] = '\0';
    /* the sealer's message, without its own "eddy proxy: " */
    msg = errbuf;
    if (!strncmp(msg, "eddy proxy: ", strlen("eddy proxy: ")))
        msg += strlen("eddy proxy: ");
    if (status != 0)
        cmd_warn(cmd, "rank %" PRIu32 " of this instance: %s", node,
                 msg[0] ? msg : "the token could not be read");
    else if (over)
        cmd_warn(cmd, "rank %" PRIu32 ": the sealed token is too long", node);
    else
        rc = 0;
done:
    eddy_future_destroy(f);
    return rc;
}

/* Fetch the nested rank 0's token sealed to a key pair made for this one
 * call, and open it.  0, or -1 after saying why. */
static int fetch_token(const char *cmd,
                       eddy_t *h,
                       eddy_jobid_t id,
                       const char *local,
                       unsigned char token[TOKEN_SIZE])
{
    unsigned char pk[crypto_box_PUBLICKEYBYTES], sk[crypto_box_SECRETKEYBYTES];
    unsigned char sealed[crypto_box_SEALBYTES + TOKEN_SIZE];
    char pkhex[2 * crypto_box_PUBLICKEYBYTES + 1];
    char out[NESTED_SEAL_OUT_MAX + 1];
    char path[PATH_MAX];
    const char *rundir = local + strlen("local://");
    const char *slash = strrchr(rundir, '/');
    uint32_t node;
    int rc = -1;

    /* the token beside rank 0's socket: local://RUNDIR/local-0 */
    if (!slash || slash == rundir ||
        (size_t)snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - rundir),
                         rundir, NESTED_TOKEN_NAME) >= sizeof(path)) {
        cmd_warn(cmd, "job %" PRIu64 ": unexpected URI %s", id, local);
        return -1;
    }
    if (sodium_init() < 0 || rank0_node(cmd, h, id, &node) < 0)
        return -1;
    crypto_box_keypair(pk, sk);
    sodium_bin2hex(pkhex, sizeof(pkhex), pk, sizeof(pk));
    if (run_sealer(cmd, h, node, pkhex, path, out) < 0)
        goto done;
    out[strcspn(out, "\n")] = '\0';
    if (hex_decode(out, strlen(out), sealed, sizeof(sealed)) < 0 ||
        crypto_box_seal_open(token, sealed, sizeof(sealed), pk, sk) < 0) {
        cmd_warn(cmd, "rank %" PRIu32 ": the sealed token does not open", node);
        goto done;
    }
    rc = 0;
done:
    sodium_memzero(sk, sizeof(sk));
    return rc;
}

/* A new private directory (0700) for the token copy: in
 * $XDG_RUNTIME_DIR (the user's own tmpfs) if set, else $TMPDIR or /tmp. */
static char *make_tokdir(void)
{
    const char *base = getenv("XDG_RUNTIME_DIR");
    char path[PATH_MAX];

    if (!base || base[0] != '/' || access(base, W_OK | X_OK) < 0)
        base = getenv("TMPDIR");
    if (!base || base[0] != '/')
        base = "/tmp";
    if ((size_t)snprintf(path, sizeof(path), "%s/eddy-proxy-XXXXXX", base) >=
            sizeof(path) ||
        !mkdtemp(path))
        return NULL;
    return strdup(path);
}

/* Write 'token' as a token file (64 hex digits, newline) at 'path', mode
 * 0600 from its creation. */
static int write_token(const char *path, const unsigned char token[TOKEN_SIZE])
{
    char hex[2 * TOKEN_SIZE + 2];
    ssize_t n;
    int fd, saved;

    sodium_bin2hex(hex, sizeof(hex), token, TOKEN_SIZE);
    hex[2 * TOKEN_SIZE] = '\n';
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    errno = 0; /* a short write sets none */
    n = write(fd, hex, 2 * TOKEN_SIZE + 1);
    sodium_memzero(hex, sizeof(hex));
    saved = n != 2 * TOKEN_SIZE + 1 ? (errno ? errno : EIO) : 0;
    if (close(fd) < 0 && !saved)
        saved = errno;
    if (saved) {
        unlink(path);
        errno = saved;
        return -1;
    }
    return 0;
}

int nested_connect(const char *cmd,
                   eddy_t *h,
                   eddy_jobid_t id,
                   const char *local,
                   const char *tcp,
                   bool want_tcp,
                   struct nested_conn *c)
{
    unsigned char token[TOKEN_SIZE];
    eddy_error_t err;
    eddy_t *nh;

    memset(c, 0, sizeof(*c));
    if (!want_tcp && nested_local_ok(local)) {
        if (!(c->uri = strdup(local))) {
            cmd_warn(cmd, "out of memory");
            return -1;
        }
        return 0;
    }
    if (!tcp) {
        /* not reachable and no other way: say why the local one failed */
        if (!want_tcp && !(nh = eddy_open(local, 0, &err))) {
            cmd_warn(cmd,
                     "job %" PRIu64 ": %s (and it announced no tcp:// URI)", id,
                     err.text);
            return -1;
        }
        if (!want_tcp)
            eddy_close(nh);
        cmd_warn(cmd, "job %" PRIu64 ": the instance announced no tcp:// URI",
                 id);
        return -1;
    }
    if (!(c->uri = strdup(tcp)) || !(c->tokdir = make_tokdir()) ||
        asprintf(&c->tokfile, "%s/%s", c->tokdir, NESTED_TOKEN_NAME) < 0) {
        c->tokfile = NULL;
        cmd_warn(cmd, "cannot make a private directory for the token: %s",
                 strerror(errno));
        goto error;
    }
    if (fetch_token(cmd, h, id, local, token) < 0) {
        cmd_warn(cmd, "job %" PRIu64 ": cannot get the token of %s", id, tcp);
        goto error;
    }
    if (write_token(c->tokfile, token) < 0 ||
        setenv("EDDY_TOKEN_FILE", c->tokfile, 1) < 0) {
        cmd_warn(cmd, "cannot write the token copy: %s", strerror(errno));
        sodium_memzero(token, sizeof(token));
        goto error;
    }
    sodium_memzero(token, sizeof(token));
    /* Fail here, with the reason, rather than in every command of CMD. */
    if (!(nh = eddy_open(c->uri, 0, &err))) {
        cmd_warn(cmd, "job %" PRIu64 ": %s", id, err.text);
        goto error;
    }
    eddy_close(nh);
    return 0;
error:
    nested_conn_release(c);
    return -1;
}

void nested_conn_release(struct nested_conn *c)
{
    int saved = errno;

    if (!c)
        return;
    if (c->tokfile)
        unlink(c->tokfile);
    if (c->tokdir)
        rmdir(c->tokdir);
    free(c->tokfile);
    free(c->tokdir);
    free(c->uri);
    memset(c, 0, sizeof(*c));
    errno = saved;
}

static void on_term(int sig)
{
    got_term = sig;
    pending = sig;
}

/* SIGINT too: a Ctrl-C while the allocation starts must cancel it, not
 * leave it running with nobody to end it (nested_run() ignores SIGINT
 * while the command runs: the command gets it from the terminal). */
void nested_catch_signals(void)
{
    struct sigaction sa = {.sa_handler = on_term};

    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int nested_got_signal(void)
{
    return got_term;
}

int nested_run(const char *cmd, const char *uri, int argc, char **argv)
{
    const char *shell = getenv("SHELL");
    char *shargv[] = {(char *)(shell && *shell ? shell : "/bin/sh"), NULL};
    char **cmdv = argc > 0 ? argv : shargv;
    struct sigaction ign = {.sa_handler = SIG_IGN}, old_int, old_quit;
    int status = 0;
    pid_t pid, w;

    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    if ((pid = fork()) < 0)
        cmd_die(cmd, "fork: %s", strerror(errno));
    if (pid == 0) {
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGQUIT, &old_quit, NULL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        setenv("EDDY_URI", uri, 1);
        execvp(cmdv[0], cmdv);
        fprintf(stderr, "eddy %s: cannot run %s: %s\n", cmd, cmdv[0],
                strerror(errno));
        _exit(errno == ENOENT ? 127 : 126);
    }
    if (pending) { /* caught before the command existed */
        kill(pid, pending);
        pending = 0;
    }
    for (;;) {
        w = waitpid(pid, &status, 0);
        if (w == pid)
            break;
        if (errno != EINTR)
            break;
        if (pending) {
            kill(pid, pending);
            pending = 0;
        }
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    return status;
}

int nested_seal_token(const char *pubkey_hex, const char *path)
{
    unsigned char pk[crypto_box_PUBLICKEYBYTES], token[TOKEN_SIZE];
    unsigned char sealed[crypto_box_SEALBYTES + TOKEN_SIZE];
    char hex[2 * sizeof(sealed) + 1];
    eddy_error_t err;

    if (sodium_init() < 0 ||
        hex_decode(pubkey_hex, strlen(pubkey_hex), pk, sizeof(pk)) < 0) {
        fprintf(stderr, "eddy proxy: --seal-token: expected a public key of "
                        "64 hex digits\n");
        return 1;
    }
    if (token_read(path, token, &err) < 0) {
        fprintf(stderr, "eddy proxy: %s\n", err.text);
        return 1;
    }
    crypto_box_seal(sealed, token, sizeof(token), pk);
    sodium_memzero(token, sizeof(token));
    sodium_bin2hex(hex, sizeof(hex), sealed, sizeof(sealed));
    printf("%s\n", hex);
    return fflush(stdout) == 0 ? 0 : 1;
}
