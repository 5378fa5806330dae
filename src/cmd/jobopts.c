/* jobopts.c - the job options that `eddy run` and `eddy submit` share. */
#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "jobopts.h"
#include "src/common/idset.h"
#include "src/common/jobspec.h"

extern char **environ;

enum {
    OPT_TASKS_PER_NODE = 256,
    OPT_EXCLUSIVE,
    OPT_ENV,
    OPT_ENV_REMOVE,
    OPT_CWD,
    OPT_JOB_NAME,
    OPT_OUTPUT,
    OPT_ERROR,
    OPT_INPUT,
    OPT_INPUT_RANKS,
    OPT_STOP,
    OPT_DEBUG,
};

static const struct option long_opts[] = {
    {"nodes", required_argument, NULL, 'N'},
    {"ntasks", required_argument, NULL, 'n'},
    {"cores-per-task", required_argument, NULL, 'c'},
    {"tasks-per-node", required_argument, NULL, OPT_TASKS_PER_NODE},
    {"exclusive", no_argument, NULL, OPT_EXCLUSIVE},
    {"env", required_argument, NULL, OPT_ENV},
    {"env-remove", required_argument, NULL, OPT_ENV_REMOVE},
    {"cwd", required_argument, NULL, OPT_CWD},
    {"time-limit", required_argument, NULL, 't'},
    {"job-name", required_argument, NULL, OPT_JOB_NAME},
    {"label-io", no_argument, NULL, 'l'},
    {"output", required_argument, NULL, OPT_OUTPUT},
    {"error", required_argument, NULL, OPT_ERROR},
    {"input", required_argument, NULL, OPT_INPUT},
    {"input-ranks", required_argument, NULL, OPT_INPUT_RANKS},
    {"stop", required_argument, NULL, OPT_STOP},
    {"debug", no_argument, NULL, OPT_DEBUG},
    {"setopt", required_argument, NULL, 'o'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};
static const char short_opts[] = "+N:n:c:t:lo:h";

/* -o KEY=VALUE: shell options.  Only plugin=PATH[,ARGS] so far (a
 * relative PATH is taken from our working directory). */
static void setopt_option(const char *cmd, eddy_jobspec_t *js, const char *arg)
{
    char cwd[PATH_MAX];
    eddy_error_t err;
    json_t *p;
    const char *args = NULL;

    if (strncmp(arg, "plugin=", 7) != 0)
        cmd_die(cmd, "-o %s: unknown option (use -o plugin=PATH[,ARGS])", arg);
    if (!getcwd(cwd, sizeof(cwd)))
        cmd_die(cmd, "-o %s: getcwd: %s", arg, strerror(errno));
    if (jobspec_plugin_parse(arg + 7, cwd, &p, &err) < 0)
        cmd_die(cmd, "-o %s", err.text);
    (void)json_unpack(p, "{s?s}", "args", &args);
    if (eddy_jobspec_add_plugin(
            js, json_string_value(json_object_get(p, "path")), args) < 0)
        cmd_die(cmd, "-o %s: %s", arg,
                errno == EINVAL ? "more than 32 plugins" : strerror(errno));
    json_decref(p);
}

/* "--nodes" for 'N': how messages name an option. */
static const char *option_name(int c)
{
    static char buf[64];

    for (const struct option *o = long_opts; o->name; o++) {
        if (o->val == c) {
            snprintf(buf, sizeof(buf), "--%s", o->name);
            return buf;
        }
    }
    snprintf(buf, sizeof(buf), "-%c", c);
    return buf;
}

/* One environment change, applied in command-line order. */
struct envop {
    char *name;
    char *value; /* NULL: remove */
};

struct envops {
    struct envop *ops;
    size_t n;
};

static void envops_push(const char *cmd,
                        struct envops *e,
                        const char *name,
                        size_t namelen,
                        const char *value)
{
    struct envop *p = realloc(e->ops, (e->n + 1) * sizeof(*p));

    if (!p)
        cmd_die(cmd, "out of memory");
    e->ops = p;
    p[e->n].name = strndup(name, namelen);
    p[e->n].value = value ? strdup(value) : NULL;
    if (!p[e->n].name || (value && !p[e->n].value))
        cmd_die(cmd, "out of memory");
    e->n++;
}

/* --env=K=V, --env=-K, --env=K */
static void env_option(const char *cmd, struct envops *e, const char *arg)
{
    const char *eq = strchr(arg, '=');

    if (arg[0] == '-') {
        if (arg[1] == '\0' || strchr(arg + 1, '='))
            cmd_die(cmd, "--env=%s: expected --env=-NAME", arg);
        envops_push(cmd, e, arg + 1, strlen(arg + 1), NULL);
    } else if (eq) {
        if (eq == arg)
            cmd_die(cmd, "--env=%s: empty variable name", arg);
        envops_push(cmd, e, arg, (size_t)(eq - arg), eq + 1);
    } else {
        const char *v = getenv(arg);
        if (arg[0] == '\0')
            cmd_die(cmd, "--env: empty variable name");
        if (v)
            envops_push(cmd, e, arg, strlen(arg), v);
    }
}

/* --env-remove=GLOB: every variable of ours, or set by an earlier --env,
 * whose name matches. */
static void env_remove_option(const char *cmd,
                              struct envops *e,
                              const char *pattern)
{
    size_t nset = e->n;
    char name[1024];

    for (char **ep = environ; *ep; ep++) {
        const char *eq = strchr(*ep, '=');
        size_t len = eq ? (size_t)(eq - *ep) : strlen(*ep);
        if (len == 0 || len >= sizeof(name))
            continue;
        memcpy(name, *ep, len);
        name[len] = '\0';
        if (fnmatch(pattern, name, 0) == 0)
            envops_push(cmd, e, name, len, NULL);
    }
    for (size_t i = 0; i < nset; i++)
        if (e->ops[i].value && fnmatch(pattern, e->ops[i].name, 0) == 0)
            envops_push(cmd, e, e->ops[i].name, strlen(e->ops[i].name), NULL);
}

static void envops_apply(const char *cmd, struct envops *e, eddy_jobspec_t *js)
{
    for (size_t i = 0; i < e->n; i++) {
        if (eddy_jobspec_setenv(js, e->ops[i].name, e->ops[i].value) < 0)
            cmd_die(cmd, "--env: %s: %s", e->ops[i].name, strerror(errno));
        free(e->ops[i].name);
        free(e->ops[i].value);
    }
    free(e->ops);
    e->ops = NULL;
    e->n = 0;
}

static int parse_count(const char *cmd, const char *opt, const char *s)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno || v < 1 || v > INT_MAX)
        cmd_die(cmd, "%s: '%s' is not a positive number", opt, s);
    return (int)v;
}

/* "90", "90s", "1.5m", "2h", "1d" -> seconds */
static double parse_duration(const char *cmd, const char *s)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0)
        goto bad;
    if (*end == '\0' || !strcmp(end, "s"))
        return v;
    if (!strcmp(end, "m"))
        return v * 60;
    if (!strcmp(end, "h"))
        return v * 3600;
    if (!strcmp(end, "d"))
        return v * 86400;
bad:
    cmd_die(cmd,
            "--time-limit: '%s' is not a duration (seconds, or a number "
            "with s, m, h or d)",
            s);
}

/* Only {{id}}, {{rank}} and {{node}} may appear in a file template. */
static void check_template(const char *cmd, const char *opt, const char *t)
{
    const char *p = t;

    if (*t == '\0')
        cmd_die(cmd, "%s: empty file name", opt);
    while ((p = strstr(p, "{{"))) {
        if (strncmp(p, "{{id}}", 6) && strncmp(p, "{{rank}}", 8) &&
            strncmp(p, "{{node}}", 8)) {
            const char *q = strstr(p, "}}");
            int len = q ? (int)(q - p) + 2 : (int)strlen(p);
            cmd_die(cmd,
                    "%s: unknown template '%.*s' (use {{id}}, {{rank}} or "
                    "{{node}})",
                    opt, len, p);
        }
        p += 2;
    }
}

/* Index of the next ':' separator at or after 'from', or argc. */
static int next_separator(int argc, char **argv, int from)
{
    for (int i = from; i < argc; i++)
        if (!strcmp(argv[i], ":"))
            return i;
    return argc;
}

void jobopts_parse(const char *cmd, int argc, char **argv, struct jobopts *o)
{
    struct envops env = {0};
    int c, end, ngroups = 0, nodes = 0, ntasks = 0, cores = 0, tpn = 0;
    int first_ntasks = 0;
    bool exclusive = false;
    const char *cwd = NULL, *name = NULL;
    const char **plugins = NULL; /* -o arguments, applied in order */
    size_t nplugins = 0;
    double duration = 0;
    int seg = 0, segc;
    char **segv;
    struct {
        int argc;
        char **argv;
        int ntasks;
    } *groups = NULL;

    memset(o, 0, sizeof(*o));

    /* 1. the first segment: job options, then the first command */
    end = next_separator(argc, argv, 1);
    segc = end;
    segv = argv;
    for (;;) {
        int group_ntasks = 0;
        void *p;

        optind = 0; /* full re-initialisation of getopt for each segment */
        while ((c = getopt_long(segc, segv, short_opts, long_opts, NULL)) !=
               -1) {
            if (seg > 0 && c != 'n') {
                if (c == '?')
                    exit(1);
                cmd_die(cmd,
                        "'%s' applies to the whole job: give it before "
                        "the first command",
                        option_name(c));
            }
            switch (c) {
            case 'N':
                nodes = parse_count(cmd, "--nodes", optarg);
                break;
            case 'n':
                group_ntasks = parse_count(cmd, "--ntasks", optarg);
                break;
            case 'c':
                cores = parse_count(cmd, "--cores-per-task", optarg);
                break;
            case OPT_TASKS_PER_NODE:
                tpn = parse_count(cmd, "--tasks-per-node", optarg);
                break;
            case OPT_EXCLUSIVE:
                exclusive = true;
                break;
            case OPT_ENV:
                env_option(cmd, &env, optarg);
                break;
            case OPT_ENV_REMOVE:
                env_remove_option(cmd, &env, optarg);
                break;
            case OPT_CWD:
                cwd = optarg;
                break;
            case 't':
                duration = parse_duration(cmd, optarg);
                break;
            case OPT_JOB_NAME:
                name = optarg;
                break;
            case 'l':
                o->label = true;
                break;
            case OPT_OUTPUT:
                check_template(cmd, "--output", optarg);
                o->output = optarg;
                break;
            case OPT_ERROR:
                check_template(cmd, "--error", optarg);
                o->error = optarg;
                break;
            case OPT_INPUT:
                o->input = optarg;
                break;
            case OPT_INPUT_RANKS: {
                eddy_error_t err;
                idset_t *ids = idset_decode(optarg, &err);
                if (!ids)
                    cmd_die(cmd, "--input-ranks: %s", err.text);
                if (idset_count(ids) == 0)
                    cmd_die(cmd, "--input-ranks: no ranks in '%s'", optarg);
                idset_destroy(ids);
                o->input_ranks = optarg;
                break;
            }
            case OPT_STOP:
                if (strcmp(optarg, "fork") && strcmp(optarg, "exec") &&
                    strcmp(optarg, "init"))
                    cmd_die(cmd,
                            "--stop: '%s' is not a stop mode (use fork, "
                            "exec or init)",
                            optarg);
                o->stop = optarg;
                break;
            case OPT_DEBUG:
                o->debug = true;
                break;
            case 'o':
                if (!(plugins =
                          realloc(plugins, (nplugins + 1) * sizeof(*plugins))))
                    cmd_die(cmd, "out of memory");
                plugins[nplugins++] = optarg;
                break;
            default:
                fprintf(stderr, "Try 'eddy %s -h' for help.\n", cmd);
                exit(1);
            }
        }
        if (optind >= segc) {
            if (seg == 0)
                cmd_die(cmd, "no command given (see 'eddy %s -h')", cmd);
            cmd_die(cmd, "no command after ':' (group %d)", seg);
        }
        if (!(p = realloc(groups, (size_t)(ngroups + 1) * sizeof(*groups))))
            cmd_die(cmd, "out of memory");
        groups = p;
        groups[ngroups].argc = segc - optind;
        groups[ngroups].argv = segv + optind;
        groups[ngroups].ntasks = group_ntasks;
        if (seg == 0)
            first_ntasks = group_ntasks;
        ngroups++;

        /* 2. the next segment: its argv[0] is the ':' before it */
        if (end >= argc)
            break;
        seg++;
        segv = argv + end;
        end = next_separator(argc, argv, end + 1);
        segc = (int)(argv + end - segv);
    }

    /* 3. build the description */
    if (!(o->js = eddy_jobspec_create()))
        cmd_die(cmd, "out of memory");
    ntasks = ngroups == 1 ? first_ntasks : 0;
    for (int g = 0; g < ngroups; g++) {
        int n = ngroups == 1 ? 0 : (groups[g].ntasks ? groups[g].ntasks : 1);
        if (eddy_jobspec_add_group(o->js, groups[g].argc, groups[g].argv, n) <
            0)
            cmd_die(cmd, "group %d: %s", g, strerror(errno));
    }
    free(groups);
    if ((nodes && eddy_jobspec_set_nodes(o->js, nodes) < 0) ||
        (ntasks && eddy_jobspec_set_tasks(o->js, ntasks) < 0) ||
        (cores && eddy_jobspec_set_cores_per_task(o->js, cores) < 0) ||
        (tpn && eddy_jobspec_set_tasks_per_node(o->js, tpn) < 0) ||
        (exclusive && eddy_jobspec_set_exclusive(o->js, true) < 0) ||
        (duration > 0 && eddy_jobspec_set_duration(o->js, duration) < 0) ||
        (name && eddy_jobspec_set_name(o->js, name) < 0) ||
        (o->stop && eddy_jobspec_set_stop(o->js, o->stop) < 0))
        cmd_die(cmd, "%s", strerror(errno));
    for (size_t i = 0; i < nplugins; i++)
        setopt_option(cmd, o->js, plugins[i]);
    free(plugins);
    if (cwd) {
        char buf[PATH_MAX], *path = NULL;
        if (cwd[0] != '/') {
            if (!getcwd(buf, sizeof(buf)))
                cmd_die(cmd, "--cwd: %s", strerror(errno));
            if (asprintf(&path, "%s/%s", buf, cwd) < 0)
                cmd_die(cmd, "out of memory");
            cwd = path;
        }
        if (eddy_jobspec_set_cwd(o->js, cwd) < 0)
            cmd_die(cmd, "--cwd=%s: %s", cwd, strerror(errno));
        free(path);
    }
    envops_apply(cmd, &env, o->js);

    /* 4. refuse a wrong shape before talking to the instance */
    {
        eddy_error_t err;
        char *text = eddy_jobspec_encode(o->js, &err);
        if (!text)
            cmd_die(cmd, "%s", err.text);
        free(text);
    }
}

eddy_jobid_t jobspec_submit(const char *cmd, eddy_t *h, eddy_jobspec_t *js)
{
    eddy_future_t *f;
    eddy_error_t err;
    json_int_t id;
    char *s;

    if (!(f = eddy_job_submit(h, js))) {
        /* the description itself is wrong: let the encoder say where */
        if (errno == EINVAL && !(s = eddy_jobspec_encode(js, &err)))
            cmd_die(cmd, "%s", err.text);
        cmd_die(cmd, "cannot submit the job: %s", strerror(errno));
    }
    if (eddy_rpc_get_unpack(f, "{s:I}", "id", &id) < 0)
        cmd_die(cmd, "%s", eddy_future_error_string(f));
    if (id < 0)
        cmd_die(cmd, "job.submit answered a negative job ID");
    eddy_future_destroy(f);
    return (eddy_jobid_t)id;
}

eddy_jobid_t jobopts_submit(const char *cmd,
                            eddy_t *h,
                            const struct jobopts *o,
                            bool with_stdin)
{
    if (eddy_jobspec_set_stdin(o->js, with_stdin) < 0)
        cmd_die(cmd, "cannot submit the job: %s", strerror(errno));
    return jobspec_submit(cmd, h, o->js);
}

void jobopts_release(struct jobopts *o)
{
    eddy_jobspec_destroy(o->js);
    o->js = NULL;
}

eddy_jobid_t jobid_parse(const char *cmd, const char *s)
{
    char *end;
    uintmax_t v;

    errno = 0;
    v = strtoumax(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno || v > UINT64_MAX)
        cmd_die(cmd, "'%s' is not a job ID", s);
    return (eddy_jobid_t)v;
}

void jobid_die(const char *cmd, eddy_jobid_t id, eddy_future_t *f)
{
    const char *text = eddy_future_error_string(f);
    char prefix[32];
    int n = snprintf(prefix, sizeof(prefix), "job %" PRIu64, id);

    if (!text || !*text)
        text = eddy_strerror(errno);
    if (!strncmp(text, prefix, (size_t)n) && (text[n] == ':' || text[n] == ' '))
        cmd_die(cmd, "%s", text);
    cmd_die(cmd, "%s: %s", prefix, text);
}
