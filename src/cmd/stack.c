/* eddy stack - a merged stack trace of every task of a job, STAT-style.
 *
 * Built only from the tool path: the sampling daemon (eddy-stackd,
 * src/tools/) is shipped into the job's tmpdir with eddy_job_bcast()
 * when asked to (--ship), launched on every node of the job with
 * eddy_tool_launch(), samples its node's tasks and writes their merged
 * call tree (stacktree encoding) to its stdout; the trees come back
 * through the launch's output log and are merged here.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eddy/bcast.h"
#include "eddy/tool.h"
#include "cmd.h"
#include "jobopts.h"
#include "lineout.h"
#include "src/common/stacktree.h"

static const char *const usage_text =
    "Usage: eddy stack [--json|--dot] [--method=auto|unwind|gdb] [--ship]\n"
    "                  [--timeout=SECONDS] ID\n"
    "\n"
    "Print one call tree of every task of job ID (e.g. a hung one), each\n"
    "path labelled with the task ranks that share it:\n"
    "  main > solve > MPI_Allreduce  [0-3,5-7]\n"
    "  main > solve > compute  [4]\n"
    "Each node's tasks are sampled by a tool daemon (eddy-stackd: libunwind\n"
    "over ptrace, or gdb in batch mode; --method, default auto) that stops\n"
    "each task only while it reads its stack, then lets it run on.\n"
    "  --json         the tree as JSON\n"
    "  --dot          the tree as a Graphviz graph\n"
    "  --method=M     how the daemons sample (auto, unwind, gdb)\n"
    "  --ship         copy eddy-stackd into the job's tmpdir on every node\n"
    "                 first (eddy bcast), for nodes where it is not\n"
    "                 installed\n"
    "  --timeout=S    give up on tasks not sampled within S seconds (60)\n"
    "Exit status: 0 if every task was sampled; 1 if some were not (each\n"
    "said on stderr by its node) or the job could not be reached.\n";

static int run(int argc, char **argv);

const struct cmd cmd_stack = {
    .name = "stack",
    .summary = "print a merged stack trace of every task of a job",
    .usage = usage_text,
    .run = run,
};

#define CMD "stack"

/* What one node's daemon printed on stdout: its encoded tree. */
struct node_tree {
    uint32_t node;
    char *data;
    size_t len;
    struct lineout err; /* its stderr, by lines */
};

static struct {
    struct node_tree *nodes;
    size_t nnodes;
    int status;
} S;

static struct node_tree *node_get(uint32_t node)
{
    struct node_tree *n;

    for (size_t i = 0; i < S.nnodes; i++)
        if (S.nodes[i].node == node)
            return &S.nodes[i];
    if (!(n = realloc(S.nodes, (S.nnodes + 1) * sizeof(*n))))
        cmd_die(CMD, "out of memory");
    S.nodes = n;
    n = &S.nodes[S.nnodes++];
    memset(n, 0, sizeof(*n));
    n->node = node;
    return n;
}

static void on_event(eddy_toolid_t tool,
                     const struct eddy_tool_event *ev,
                     void *arg)
{
    struct node_tree *n = node_get(ev->node);
    char prefix[32];
    char *p;

    (void)tool;
    (void)arg;
    snprintf(prefix, sizeof(prefix), "%" PRIu32 ": ", ev->node);
    switch (ev->type) {
    case EDDY_TOOL_OUTPUT:
        if (ev->stream == EDDY_JOB_STDERR) {
            if ((ev->len && lineout_label(&n->err, STDERR_FILENO, prefix,
                                          ev->data, ev->len) < 0) ||
                (!ev->len && lineout_flush(&n->err, STDERR_FILENO, prefix) < 0))
                cmd_die(CMD, "cannot write: %s", strerror(errno));
        } else if (ev->len) {
            /* a tree per node: its size is the node's, never the job's */
            if (n->len + ev->len > STACKTREE_NODES_MAX * (size_t)64 ||
                !(p = realloc(n->data, n->len + ev->len)))
                cmd_die(CMD, "rank %" PRIu32 ": tree too large", ev->node);
            n->data = p;
            memcpy(n->data + n->len, ev->data, ev->len);
            n->len += ev->len;
        }
        break;
    case EDDY_TOOL_EXIT:
        if (!WIFEXITED(ev->status) || WEXITSTATUS(ev->status) > 1) {
            if (WIFSIGNALED(ev->status))
                cmd_warn(CMD,
                         "rank %" PRIu32 " (%s): eddy-stackd killed by "
                         "signal %d",
                         ev->node, ev->host, WTERMSIG(ev->status));
            else
                cmd_warn(CMD,
                         "rank %" PRIu32 " (%s): eddy-stackd exited "
                         "with status %d",
                         ev->node, ev->host, WEXITSTATUS(ev->status));
        }
        if (!WIFEXITED(ev->status) || WEXITSTATUS(ev->status) != 0)
            S.status = 1;
        break;
    case EDDY_TOOL_FAILED:
        cmd_warn(CMD, "%s", ev->errstr);
        S.status = 1;
        break;
    }
}

/* eddy-stackd beside this command (build tree and install alike);
 * $EDDY_STACKD overrides. */
static void find_stackd(char *buf, size_t size)
{
    const char *env = getenv("EDDY_STACKD");
    char self[PATH_MAX];
    ssize_t n;
    char *slash;

    if (env && *env) {
        snprintf(buf, size, "%s", env);
        return;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        if ((slash = strrchr(self, '/'))) {
            *slash = '\0';
            snprintf(buf, size, "%.*s/eddy-stackd", PATH_MAX - 16, self);
            return;
        }
    }
    snprintf(buf, size, "eddy-stackd");
}

/* Copy the daemon into the job's tmpdir on every node (replacing what an
 * earlier --ship left there). */
static void ship(eddy_t *h, eddy_jobid_t id, const char *path)
{
    eddy_future_t *f;
    size_t nfailed, i;
    uint32_t rank;
    int fd, errnum;
    const char *why;

    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        cmd_die(CMD, "%s: %s", path, strerror(errno));
    if (!(f = eddy_job_bcast(h, id, fd, "eddy-stackd", 0,
                             EDDY_BCAST_PRESERVE | EDDY_BCAST_OVERWRITE)))
        cmd_die(CMD, "job %" PRIu64 ": bcast: %s", id, strerror(errno));
    if (eddy_job_bcast_get(f, NULL, &nfailed) < 0)
        jobid_die(CMD, id, f);
    for (i = 0; i < nfailed; i++)
        if (eddy_job_bcast_failure(f, i, &rank, &errnum, &why) == 0)
            cmd_warn(CMD, "rank %" PRIu32 ": cannot ship eddy-stackd: %s", rank,
                     why);
    if (nfailed)
        exit(1);
    eddy_future_destroy(f);
    close(fd);
}

static stacktree_t *merge_nodes(void)
{
    stacktree_t *all = stacktree_create(), *t;
    eddy_error_t err;

    if (!all)
        cmd_die(CMD, "out of memory");
    for (size_t i = 0; i < S.nnodes; i++) {
        struct node_tree *n = &S.nodes[i];

        if (lineout_flush(&n->err, STDERR_FILENO, "") < 0)
            cmd_die(CMD, "cannot write: %s", strerror(errno));
        if (n->len == 0)
            continue; /* it said why on stderr */
        if (!(t = stacktree_decode(n->data, n->len, &err))) {
            cmd_warn(CMD, "rank %" PRIu32 ": malformed tree: %s", n->node,
                     err.text);
            S.status = 1;
            free(n->data);
            continue;
        }
        if (stacktree_merge(all, t) < 0)
            cmd_die(CMD, "cannot merge the trees: %s", strerror(errno));
        stacktree_destroy(t);
        free(n->data);
    }
    free(S.nodes);
    return all;
}

static int run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"dot", no_argument, NULL, 'd'},
        {"method", required_argument, NULL, 'm'},
        {"ship", no_argument, NULL, 's'},
        {"timeout", required_argument, NULL, 't'},
        {NULL, 0, NULL, 0},
    };
    char stackd[PATH_MAX], method[32] = "--method=auto", timeout[48] = "";
    const char *argv_d[6];
    const char *format = "text";
    bool do_ship = false;
    eddy_jobid_t id;
    eddy_toolid_t tool;
    eddy_future_t *f;
    stacktree_t *tree;
    eddy_t *h;
    char *out;
    size_t n = 0;
    int c;

    if (cmd_wants_help(&cmd_stack, argc, argv))
        return 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'j':
            format = "json";
            break;
        case 'd':
            format = "dot";
            break;
        case 'm':
            if (strcmp(optarg, "auto") && strcmp(optarg, "unwind") &&
                strcmp(optarg, "gdb"))
                cmd_die(CMD, "--method: '%s' is not auto, unwind or gdb",
                        optarg);
            snprintf(method, sizeof(method), "--method=%s", optarg);
            break;
        case 's':
            do_ship = true;
            break;
        case 't': {
            char *end;
            double v = strtod(optarg, &end);
            if (!*optarg || *end || !(v > 0))
                cmd_die(CMD, "--timeout: '%s' is not a number of seconds",
                        optarg);
            snprintf(timeout, sizeof(timeout), "--timeout=%s", optarg);
            break;
        }
        default:
            cmd_die(CMD, "see 'eddy stack -h'");
        }
    }
    if (optind != argc - 1)
        cmd_die(CMD, "expected one job ID");
    id = jobid_parse(CMD, argv[optind]);
    find_stackd(stackd, sizeof(stackd));
    h = cmd_open(CMD);
    if (do_ship)
        ship(h, id, stackd);
    argv_d[n++] = do_ship ? "./eddy-stackd" : stackd;
    argv_d[n++] = method;
    argv_d[n++] = "--format=encoded";
    if (*timeout)
        argv_d[n++] = timeout;
    argv_d[n] = NULL;
    if (!(f = eddy_tool_launch(h, id, argv_d, NULL)))
        cmd_die(CMD, "%s", strerror(errno));
    if (eddy_tool_launch_get(f, &tool) < 0)
        jobid_die(CMD, id, f);
    eddy_future_destroy(f);
    if (!(f = eddy_tool_attach(h, tool, on_event, NULL)))
        cmd_die(CMD, "%s", strerror(errno));
    if (eddy_rpc_get(f, NULL) < 0)
        cmd_die(CMD, "tool %" PRIu64 ": %s", tool, eddy_future_error_string(f));
    /* a tree with a gap in it would decode as garbage, or not at all */
    if (eddy_tool_attach_dropped(f) > 0)
        cmd_die(CMD,
                "tool %" PRIu64 ": the instance dropped %zu bytes of the "
                "daemons' output (output log cap): no tree to show",
                tool, eddy_tool_attach_dropped(f));
    eddy_future_destroy(f);
    eddy_close(h);
    tree = merge_nodes();
    if (!strcmp(format, "json"))
        out = stacktree_json(tree);
    else if (!strcmp(format, "dot"))
        out = stacktree_dot(tree);
    else
        out = stacktree_text(tree);
    if (!out)
        cmd_die(CMD, "out of memory");
    if (lineout_write_all(STDOUT_FILENO, out, strlen(out)) < 0 ||
        (!strcmp(format, "json") && lineout_write_all(STDOUT_FILENO, "\n", 1)))
        cmd_die(CMD, "cannot write: %s", strerror(errno));
    free(out);
    stacktree_destroy(tree);
    return S.status;
}
