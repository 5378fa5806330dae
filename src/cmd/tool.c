/* eddy tool - tool daemons beside a job: launch, attach, kill, list
 * (eddy/tool.h, docs/tools.md). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eddy/tool.h"
#include "cmd.h"
#include "jobopts.h"
#include "lineout.h"
#include "src/common/idset.h"

static const char *const usage_text =
    "Usage: eddy tool launch [-r NODES] [--env=NAME=VALUE]... [--cwd=DIR]\n"
    "                        [--keep] [-d] [-n] ID -- COMMAND [ARG...]\n"
    "       eddy tool attach [-n] TOOLID\n"
    "       eddy tool kill [-s SIGNAL] [-r NODES] TOOLID\n"
    "       eddy tool list [--json] [ID]\n"
    "\n"
    "launch: start COMMAND once on each node of job ID (or on NODES, an\n"
    "  idset of the job's broker ranks), beside its tasks: as you, in the\n"
    "  job's tmpdir (or DIR, relative to it), with EDDY_JOB_ID,\n"
    "  EDDY_JOB_TMPDIR, EDDY_TOOL_ID, EDDY_TOOL_RANK, EDDY_TOOL_SIZE and\n"
    "  EDDY_TOOL_TASKS (the node's tasks, RANK:PID,...) set.  The job must\n"
    "  run or be held at its startup barrier.  Then, as attach does, print\n"
    "  the daemons' output until they all exited.  -d (--detach): print\n"
    "  the tool ID and return at once.  When the job ends its daemons get\n"
    "  SIGTERM, then SIGKILL; with --keep they run on until they exit.\n"
    "attach: print a launch's output from its start, each line after its\n"
    "  node's rank ('3: ...'; -n: unlabelled), then live until every daemon\n"
    "  exited.  One line per daemon that failed or was killed.  Exit\n"
    "  status: 0 if every daemon exited 0, else the largest exit code\n"
    "  (128+N for signal N; 1 for a daemon that could not start).\n"
    "kill: send SIGNAL (name or number, default TERM) to the launch's\n"
    "  daemons (all, or those on NODES).\n"
    "list: the launches of job ID (or of every job): tool ID, job, nodes,\n"
    "  nodes still running, and command; --json: the instance's answer.\n";

static int run(int argc, char **argv);

const struct cmd cmd_tool = {
    .name = "tool",
    .summary = "start and control tool daemons beside a job",
    .usage = usage_text,
    .run = run,
};

#define CMD "tool"

/* --- attach ------------------------------------------------------------- */

struct node_out {
    uint32_t node;
    struct lineout lo[2];
};

static struct attach_state {
    bool label;
    struct node_out *nodes;
    size_t nnodes;
    int status;
    bool output_failed;
} A;

static struct node_out *node_get(uint32_t node)
{
    struct node_out *n;

    for (size_t i = 0; i < A.nnodes; i++)
        if (A.nodes[i].node == node)
            return &A.nodes[i];
    if (!(n = realloc(A.nodes, (A.nnodes + 1) * sizeof(*n))))
        cmd_die(CMD, "out of memory");
    A.nodes = n;
    n = &A.nodes[A.nnodes++];
    memset(n, 0, sizeof(*n));
    n->node = node;
    return n;
}

static void output_failed(void)
{
    if (errno == ENOMEM)
        cmd_die(CMD, "out of memory");
    if (!A.output_failed)
        cmd_warn(CMD, "cannot write output: %s", strerror(errno));
    A.output_failed = true;
}

static void raise_status(int status)
{
    if (status > A.status)
        A.status = status;
}

static void on_event(eddy_toolid_t tool,
                     const struct eddy_tool_event *ev,
                     void *arg)
{
    struct node_out *n = node_get(ev->node);
    char prefix[32];

    (void)arg;
    snprintf(prefix, sizeof(prefix), "%" PRIu32 ": ", ev->node);
    switch (ev->type) {
    case EDDY_TOOL_OUTPUT: {
        int idx = ev->stream == EDDY_JOB_STDERR ? 1 : 0;
        int fd = idx ? STDERR_FILENO : STDOUT_FILENO;

        if (!A.label) {
            if (ev->len && lineout_write_all(fd, ev->data, ev->len) < 0)
                output_failed();
        } else if ((ev->len && lineout_label(&n->lo[idx], fd, prefix, ev->data,
                                             ev->len) < 0) ||
                   (!ev->len && lineout_flush(&n->lo[idx], fd, prefix) < 0))
            output_failed();
        break;
    }
    case EDDY_TOOL_EXIT:
        if (WIFSIGNALED(ev->status)) {
            cmd_warn(CMD,
                     "tool %" PRIu64 ": rank %" PRIu32 " (%s): killed by "
                     "signal %d",
                     tool, ev->node, ev->host, WTERMSIG(ev->status));
            raise_status(128 + WTERMSIG(ev->status));
        } else if (WEXITSTATUS(ev->status) != 0) {
            cmd_warn(CMD,
                     "tool %" PRIu64 ": rank %" PRIu32 " (%s): exited with "
                     "status %d",
                     tool, ev->node, ev->host, WEXITSTATUS(ev->status));
            raise_status(WEXITSTATUS(ev->status));
        }
        break;
    case EDDY_TOOL_FAILED: {
        char who[32];
        int n = snprintf(who, sizeof(who), "rank %" PRIu32, ev->node);

        /* the node's own message names it already */
        if (!strncmp(ev->errstr, who, (size_t)n) &&
            (ev->errstr[n] == ' ' || ev->errstr[n] == ':'))
            cmd_warn(CMD, "tool %" PRIu64 ": %s", tool, ev->errstr);
        else
            cmd_warn(CMD, "tool %" PRIu64 ": %s: %s", tool, who, ev->errstr);
        raise_status(1);
        break;
    }
    }
}

/* Print a launch's output until every daemon is done; the exit status. */
static int attach(eddy_t *h, eddy_toolid_t tool, bool label)
{
    eddy_future_t *f;
    size_t dropped;

    A.label = label;
    if (!(f = eddy_tool_attach(h, tool, on_event, NULL)))
        cmd_die(CMD, "tool %" PRIu64 ": %s", tool, strerror(errno));
    if (eddy_rpc_get(f, NULL) < 0)
        cmd_die(CMD, "tool %" PRIu64 ": %s", tool, eddy_future_error_string(f));
    if ((dropped = eddy_tool_attach_dropped(f)))
        cmd_warn(CMD,
                 "tool %" PRIu64 ": %zu bytes of output were dropped (output "
                 "log cap)",
                 tool, dropped);
    eddy_future_destroy(f);
    for (size_t i = 0; i < A.nnodes; i++) {
        char prefix[32];

        snprintf(prefix, sizeof(prefix), "%" PRIu32 ": ", A.nodes[i].node);
        for (int s = 0; s < 2; s++)
            if (lineout_flush(&A.nodes[i].lo[s],
                              s ? STDERR_FILENO : STDOUT_FILENO, prefix) < 0)
                output_failed();
    }
    free(A.nodes);
    return A.output_failed && A.status == 0 ? 1 : A.status;
}

static eddy_toolid_t toolid_parse(const char *s)
{
    char *end;
    unsigned long long v;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (!*s || *end || errno || s[0] == '-' || v > INT64_MAX)
        cmd_die(CMD, "'%s' is not a tool ID", s);
    return (eddy_toolid_t)v;
}

static void check_nodes(const char *s)
{
    eddy_error_t err;
    idset_t *ids = idset_decode(s, &err);

    if (!ids)
        cmd_die(CMD, "-r: %s", err.text);
    idset_destroy(ids);
}

/* --- subcommands -------------------------------------------------------- */

static int launch_cmd(int argc, char **argv)
{
    static const struct option opts[] = {
        {"nodes", required_argument, NULL, 'r'},
        {"env", required_argument, NULL, 'e'},
        {"cwd", required_argument, NULL, 'c'},
        {"keep", no_argument, NULL, 'k'},
        {"detach", no_argument, NULL, 'd'},
        {"no-label", no_argument, NULL, 'n'},
        {NULL, 0, NULL, 0},
    };
    struct eddy_tool_options o = {0};
    const char **env = NULL;
    size_t nenv = 0;
    bool detach = false, label = true;
    eddy_jobid_t id;
    eddy_toolid_t tool;
    eddy_future_t *f;
    eddy_t *h;
    int c, rc;

    optind = 1;
    while ((c = getopt_long(argc, argv, "+r:e:c:kdn", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            check_nodes(optarg);
            o.nodes = optarg;
            break;
        case 'e': {
            const char **p;

            if (!strchr(optarg, '=') || optarg[0] == '=')
                cmd_die(CMD, "--env: expected NAME=VALUE, not '%s'", optarg);
            if (!(p = realloc(env, (nenv + 2) * sizeof(*env))))
                cmd_die(CMD, "out of memory");
            env = p;
            env[nenv++] = optarg;
            env[nenv] = NULL;
            break;
        }
        case 'c':
            o.cwd = optarg;
            break;
        case 'k':
            o.flags |= EDDY_TOOL_KEEP;
            break;
        case 'd':
            detach = true;
            break;
        case 'n':
            label = false;
            break;
        default:
            cmd_die(CMD, "see 'eddy tool -h'");
        }
    }
    o.env = env;
    if (optind >= argc)
        cmd_die(CMD, "launch: expected a job ID and -- COMMAND");
    id = jobid_parse(CMD, argv[optind++]);
    if (optind < argc && !strcmp(argv[optind], "--"))
        optind++;
    if (optind >= argc)
        cmd_die(CMD, "launch: expected a COMMAND after the job ID");
    h = cmd_open(CMD);
    if (!(f = eddy_tool_launch(h, id, (const char *const *)&argv[optind], &o)))
        cmd_die(CMD, "launch: %s", strerror(errno));
    if (eddy_tool_launch_get(f, &tool) < 0)
        jobid_die(CMD, id, f);
    eddy_future_destroy(f);
    free(env);
    if (detach) {
        printf("%" PRIu64 "\n", tool);
        eddy_close(h);
        return 0;
    }
    rc = attach(h, tool, label);
    eddy_close(h);
    return rc;
}

static int attach_cmd(int argc, char **argv)
{
    bool label = true;
    eddy_toolid_t tool;
    eddy_t *h;
    int c, rc;

    optind = 1;
    while ((c = getopt(argc, argv, "n")) != -1) {
        if (c == 'n')
            label = false;
        else
            cmd_die(CMD, "see 'eddy tool -h'");
    }
    if (optind != argc - 1)
        cmd_die(CMD, "attach: expected one tool ID");
    tool = toolid_parse(argv[optind]);
    h = cmd_open(CMD);
    rc = attach(h, tool, label);
    eddy_close(h);
    return rc;
}

static int kill_cmd(int argc, char **argv)
{
    int signum = SIGTERM, c;
    const char *nodes = NULL;
    eddy_toolid_t tool;
    eddy_future_t *f;
    eddy_t *h;

    optind = 1;
    while ((c = getopt(argc, argv, "s:r:")) != -1) {
        if (c == 's')
            signum = cmd_parse_signal(CMD, optarg);
        else if (c == 'r') {
            check_nodes(optarg);
            nodes = optarg;
        } else
            cmd_die(CMD, "see 'eddy tool -h'");
    }
    if (optind != argc - 1)
        cmd_die(CMD, "kill: expected one tool ID");
    tool = toolid_parse(argv[optind]);
    h = cmd_open(CMD);
    if (!(f = eddy_tool_kill(h, tool, signum, nodes)) ||
        eddy_rpc_get(f, NULL) < 0)
        cmd_die(CMD, "kill: %s",
                f ? eddy_future_error_string(f) : strerror(errno));
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

static int list_cmd(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    bool json = false;
    eddy_jobid_t id = 0;
    eddy_future_t *f;
    const char *text;
    json_t *o, *tools, *t;
    size_t i;
    eddy_t *h;
    int c;

    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'j')
            json = true;
        else
            cmd_die(CMD, "see 'eddy tool -h'");
    }
    if (optind < argc - 1)
        cmd_die(CMD, "list: expected at most one job ID");
    if (optind == argc - 1)
        id = jobid_parse(CMD, argv[optind]);
    h = cmd_open(CMD);
    if (!(f = eddy_tool_list(h, id)) || eddy_rpc_get(f, &text) < 0)
        cmd_die(CMD, "list: %s",
                f ? eddy_future_error_string(f) : strerror(errno));
    if (json) {
        printf("%s\n", text);
    } else if (!(o = json_loads(text, 0, NULL)) ||
               !json_is_array(tools = json_object_get(o, "tools"))) {
        cmd_die(CMD, "list: malformed answer");
    } else {
        printf("%-6s %-8s %-12s %-12s %s\n", "TOOL", "JOB", "NODES", "RUNNING",
               "COMMAND");
        json_array_foreach(tools, i, t)
        {
            json_int_t tid = 0, jid = 0;
            const char *nodes = "", *running = "";
            json_t *cmd = NULL, *arg;
            size_t j;

            (void)json_unpack(t, "{s:I s:I s:s s:s s:o}", "tool", &tid, "id",
                              &jid, "nodes", &nodes, "running", &running, "cmd",
                              &cmd);
            printf("%-6lld %-8lld %-12s %-12s", (long long)tid, (long long)jid,
                   nodes, *running ? running : "-");
            json_array_foreach(cmd, j, arg)
            {
                printf(" %s", json_string_value(arg));
            }
            printf("\n");
        }
        json_decref(o);
    }
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

static int run(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } subs[] = {
        {"launch", launch_cmd},
        {"attach", attach_cmd},
        {"kill", kill_cmd},
        {"list", list_cmd},
    };

    if (cmd_wants_help(&cmd_tool, argc, argv))
        return 0;
    if (argc < 2)
        cmd_die(CMD, "expected a subcommand: launch, attach, kill or list");
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        if (!strcmp(argv[1], subs[i].name))
            return subs[i].fn(argc - 1, argv + 1);
    cmd_die(CMD, "unknown subcommand '%s' (launch, attach, kill or list)",
            argv[1]);
}
