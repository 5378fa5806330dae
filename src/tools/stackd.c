/* eddy-stackd - the tool daemon of `eddy stack`: sample the call stacks
 * of a job's tasks on this node and print them merged, as one tree of
 * rank sets (stacktree.h).  Started on each node of a job by a tool
 * launch, which names the node's tasks in EDDY_TOOL_TASKS; it can also be
 * run by hand with --tasks (docs/man/eddy-stackd.1.md).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/common/stacktree.h"
#include "src/common/tasklist.h"
#include "src/tools/sampler.h"

/* Long enough for gdb to read the debug info of a big application on a
 * slow file system; a hung job's front end can always ask for less. */
#define TIMEOUT_DEFAULT 60.0
#define TIMEOUT_MAX 86400.0

static const char usage[] =
    "Usage: eddy-stackd [--method=auto|unwind|gdb] [--tasks=RANK:PID,...]\n"
    "                   [--timeout=SECONDS] [--format=encoded|text|json]\n"
    "Sample the call stack of every thread of the given tasks (default:\n"
    "$EDDY_TOOL_TASKS) and print them merged into one call tree whose\n"
    "nodes are labelled with task ranks.  Tasks are paused only while their\n"
    "stacks are read.\n"
    "  --method=M     unwind (libunwind over ptrace), gdb (one gdb in batch\n"
    "                 mode), or auto (unwind, then gdb for the tasks unwind\n"
    "                 could not read at all; the default).  A stack read in\n"
    "                 part starts with \"...\" where its outer frames are\n"
    "  --tasks=LIST   the tasks, RANK:PID,... (default: $EDDY_TOOL_TASKS)\n"
    "  --timeout=S    give up on tasks not sampled after S seconds (60)\n"
    "  --format=F     encoded (stacktree bytes, for `eddy stack`; the\n"
    "                 default), text or json\n"
    "  -v, --verbose  also say why a stack was read only in part\n"
    "Exit status: 0 if every task was sampled, 1 if some were not (one line\n"
    "each on stderr), 2 for a usage error.\n";

enum method { METHOD_AUTO, METHOD_UNWIND, METHOD_GDB };
enum format { FORMAT_ENCODED, FORMAT_TEXT, FORMAT_JSON };

struct args {
    enum method method;
    enum format format;
    const char *tasks;
    double timeout;
    bool verbose;
};

static volatile sig_atomic_t cancelled;

static void on_signal(int sig)
{
    (void)sig;
    cancelled = 1;
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "eddy-stackd: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nTry 'eddy-stackd --help'.\n");
    return -1;
}

/* Fill 'a' from the command line.  0 to go on, 1 after --help, -1 after
 * a usage message. */
static int parse_args(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        {"method", required_argument, NULL, 'm'},
        {"tasks", required_argument, NULL, 't'},
        {"timeout", required_argument, NULL, 'T'},
        {"format", required_argument, NULL, 'f'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char *end;
    int c;

    a->method = METHOD_AUTO;
    a->format = FORMAT_ENCODED;
    a->tasks = NULL;
    a->timeout = TIMEOUT_DEFAULT;
    a->verbose = false;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "hv", opts, NULL)) != -1) {
        switch (c) {
        case 'v':
            a->verbose = true;
            break;
        case 'm':
            if (strcmp(optarg, "auto") == 0)
                a->method = METHOD_AUTO;
            else if (strcmp(optarg, "unwind") == 0)
                a->method = METHOD_UNWIND;
            else if (strcmp(optarg, "gdb") == 0)
                a->method = METHOD_GDB;
            else
                return bad_usage("--method: '%s' is not auto, unwind or gdb",
                                 optarg);
            break;
        case 't':
            a->tasks = optarg;
            break;
        case 'T':
            errno = 0;
            a->timeout = strtod(optarg, &end);
            if (errno || end == optarg || *end || !isfinite(a->timeout) ||
                a->timeout <= 0 || a->timeout > TIMEOUT_MAX)
                return bad_usage("--timeout: '%s' is not a number of seconds "
                                 "above 0 (at most 86400)",
                                 optarg);
            break;
        case 'f':
            if (strcmp(optarg, "encoded") == 0)
                a->format = FORMAT_ENCODED;
            else if (strcmp(optarg, "text") == 0)
                a->format = FORMAT_TEXT;
            else if (strcmp(optarg, "json") == 0)
                a->format = FORMAT_JSON;
            else
                return bad_usage("--format: '%s' is not encoded, text or json",
                                 optarg);
            break;
        case 'h':
            fputs(usage, stdout);
            return 1;
        default:
            return bad_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return bad_usage("unexpected argument '%s'", argv[optind]);
    if (!a->tasks && !(a->tasks = getenv("EDDY_TOOL_TASKS")))
        return bad_usage("%sno tasks: give --tasks or set EDDY_TOOL_TASKS", "");
    return 0;
}

/* SIGTERM (the job ended, the launch was killed), SIGINT and SIGHUP make
 * the samplers give up, so the tasks are let go before we exit. */
static void catch_signals(void)
{
    struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART */
    struct sigaction ign = {.sa_handler = SIG_IGN};

    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGPIPE, &ign, NULL); /* a closed stdout is an EPIPE */
}

/* auto: the tasks libunwind could not unwind at all are sampled again
 * with gdb; gdb's result wins unless it is worse.  A task unwound only in
 * part (a thread whose outermost frames libunwind cannot reach, e.g.
 * UCX's progress thread in every MPICH task here) is kept as it is, its
 * cut path starting with "...": retrying it with gdb costs ~0.2 s per
 * task, which would make a 64-task job take seconds instead of
 * milliseconds. */
static void retry_with_gdb(struct sample *s,
                           size_t n,
                           const struct sampler_opts *opts)
{
    struct sample *sub;
    size_t *idx, m = 0, i;

    if (!(sub = calloc(n, sizeof(*sub))) || !(idx = calloc(n, sizeof(*idx)))) {
        free(sub);
        return; /* keep what unwind gave */
    }
    for (i = 0; i < n; i++) {
        if (s[i].errnum == EIO) {
            sample_init(&sub[m], s[i].rank, s[i].pid);
            idx[m++] = i;
        }
    }
    if (m > 0 && !cancelled)
        (void)sampler_gdb(sub, m, opts);
    for (i = 0; i < m; i++) {
        struct sample *u = &s[idx[i]], *g = &sub[i];

        if (g->errnum == 0 && (!g->partial || u->errnum != 0)) {
            sample_release(u);
            *u = *g;
            continue;
        }
        if (u->errnum != 0) {
            /* both failed: say both */
            char buf[sizeof(u->err.text)];
            snprintf(buf, sizeof(buf), "unwind: %.100s; gdb: %.100s",
                     u->err.text, g->err.text);
            memcpy(u->err.text, buf, sizeof(buf));
        }
        sample_release(g);
    }
    free(idx);
    free(sub);
}

/* Run the chosen method on every task. */
static void sample_tasks(struct sample *s, size_t n, const struct args *a)
{
    struct sampler_opts opts = {.cancel = &cancelled,
                                .gdb = getenv("EDDY_STACKD_GDB")};
    double whole, frac = modf(a->timeout, &whole);

    clock_gettime(CLOCK_MONOTONIC, &opts.deadline);
    opts.deadline.tv_sec += (time_t)whole;
    opts.deadline.tv_nsec += (long)(frac * 1e9);
    if (opts.deadline.tv_nsec >= 1000000000L) {
        opts.deadline.tv_sec++;
        opts.deadline.tv_nsec -= 1000000000L;
    }
    if (a->method == METHOD_GDB) {
        (void)sampler_gdb(s, n, &opts);
        return;
    }
    (void)sampler_unwind(s, n, &opts);
    if (a->method == METHOD_AUTO)
        retry_with_gdb(s, n, &opts);
}

/* One line on stderr per task not sampled (or sampled only in part).
 * Returns how many were not sampled. */
static size_t report(const struct sample *s, size_t n, bool verbose)
{
    size_t i, failed = 0;

    for (i = 0; i < n; i++) {
        if (s[i].errnum) {
            fprintf(stderr, "eddy-stackd: rank %u (pid %d): %s\n", s[i].rank,
                    (int)s[i].pid, s[i].err.text);
            failed++;
        } else if (s[i].partial && verbose) {
            fprintf(stderr, "eddy-stackd: rank %u (pid %d): warning: %s\n",
                    s[i].rank, (int)s[i].pid, s[i].warn.text);
        }
    }
    return failed;
}

static int write_all(const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t w = write(STDOUT_FILENO, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* Merge the sampled tasks and print the tree.  -1 with a message. */
static int print_tree(const struct sample *s, size_t n, enum format format)
{
    stacktree_t *t = stacktree_create();
    void *buf = NULL;
    size_t len = 0, i;
    int rc = -1;

    if (!t)
        goto error;
    for (i = 0; i < n; i++)
        if (s[i].errnum == 0 && s[i].tree && stacktree_merge(t, s[i].tree) < 0)
            goto error;
    if (format == FORMAT_ENCODED) {
        if (stacktree_encode(t, &buf, &len) < 0)
            goto error;
    } else {
        if (!(buf = format == FORMAT_TEXT ? stacktree_text(t)
                                          : stacktree_json(t)))
            goto error;
        len = strlen(buf);
        if (format == FORMAT_JSON)
            ((char *)buf)[len++] = '\n'; /* over the NUL */
    }
    if (write_all(buf, len) < 0)
        goto error;
    rc = 0;
error:
    if (rc < 0)
        fprintf(stderr, "eddy-stackd: cannot print the tree: %s\n",
                strerror(errno));
    free(buf);
    stacktree_destroy(t);
    return rc;
}

int main(int argc, char **argv)
{
    eddy_error_t err = {{0}};
    struct args a;
    tasklist_t *tl;
    struct sample *s;
    size_t n, i, failed;
    int r;

    /* options */
    if ((r = parse_args(argc, argv, &a)) != 0)
        return r > 0 ? 0 : 2;
    /* the tasks of this node */
    if (!(tl = tasklist_decode(a.tasks, &err))) {
        fprintf(stderr, "eddy-stackd: %s\n", err.text);
        return 2;
    }
    n = tasklist_count(tl);
    if (!(s = calloc(n ? n : 1, sizeof(*s)))) {
        fprintf(stderr, "eddy-stackd: out of memory\n");
        tasklist_destroy(tl);
        return 1;
    }
    for (i = 0; i < n; i++)
        sample_init(&s[i], tasklist_tasks(tl)[i].rank,
                    tasklist_tasks(tl)[i].pid);
    tasklist_destroy(tl);
    /* sample them, letting each go as soon as it is read */
    catch_signals();
    sample_tasks(s, n, &a);
    /* say which could not be sampled, then print the others' tree */
    failed = report(s, n, a.verbose);
    r = print_tree(s, n, a.format);
    for (i = 0; i < n; i++)
        sample_release(&s[i]);
    free(s);
    return failed || r < 0 ? 1 : 0;
}
