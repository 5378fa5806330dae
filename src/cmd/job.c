/* eddy job - look at and control one job: info, attach, wait, kill,
 * cancel, release, eventlog, proctable, tmpdir (nested subcommands from
 * one table). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "eddy/mpir.h"
#include "eddy/tmpdir.h"
#include "cmd.h"
#include "jobopts.h"
#include "mpir.h"
#include "src/common/idset.h"

static const char *const usage_text =
    "Usage: eddy job info ID [--json]\n"
    "       eddy job attach [-l] [-n] [--debug] ID\n"
    "       eddy job proctable ID [--json]\n"
    "       eddy job tmpdir ID [--json]\n"
    "       eddy job wait ID\n"
    "       eddy job kill [-s SIGNAL] [--ranks=IDSET] ID\n"
    "       eddy job cancel ID\n"
    "       eddy job release [--untraced] ID\n"
    "       eddy job eventlog [--follow] [--json] ID\n"
    "\n"
    "info: state, name, status, exception, times, the job's nodes and\n"
    "  hostnames, and per task rank: node, hostname, pid, appnum, exit\n"
    "  status and executable; for a job submitted with --stop, its\n"
    "  startup barrier (where, how many tasks are held, released or not).\n"
    "attach: print the job's output from its start, then live until it\n"
    "  ends; our stdin goes to its tasks; Ctrl-C sends SIGINT, twice within\n"
    "  a second cancels the job.  Exit status: the job's.  Output beyond\n"
    "  the instance's output log cap that was not seen live is reported\n"
    "  as dropped.  With --debug, attach is an MPIR starter for a\n"
    "  debugger (docs/mpir.md): it fills MPIR_proctable with the job's\n"
    "  tasks (waiting for them to start), calls MPIR_Breakpoint(), then\n"
    "  goes on as above; the job is not released or otherwise touched.\n"
    "proctable: per task rank: node, hostname, pid, appnum and executable,\n"
    "  gathered from the nodes (the table MPIR debuggers read); an error\n"
    "  until every task started (or is held at a startup barrier).\n"
    "tmpdir: per task rank: node, hostname and the path of the job's\n"
    "  private directory on that node (EDDY_JOB_TMPDIR of the task); the\n"
    "  directories exist from just before the tasks start (also while the\n"
    "  job is held) until its last task on the node ended.\n"
    "wait: wait until the job is finished; exit status: the job's (the\n"
    "  largest task exit code, 128+N for signal N; 1 if it never ran).\n"
    "kill: send SIGNAL (name or number, default TERM) to the job's tasks\n"
    "  (all, or the task ranks in IDSET).\n"
    "cancel: end the job: an exception is recorded, its tasks get SIGTERM,\n"
    "  then SIGKILL after a grace period; a queued job is dropped.\n"
    "release: let a job held at its startup barrier (run/submit --stop)\n"
    "  go; an error if the job is not held at one.  With --untraced (stop\n"
    "  mode exec), tasks a debugger is attached to stay stopped for it.\n"
    "eventlog: print the job's events (timestamp, name, context); with\n"
    "  --follow, keep printing until the job is cleaned up.\n"
    "\n"
    "  -j, --json        print JSON with the fields of docs/jobs-protocol.md\n"
    "  -l, --label-io    (attach) prefix output lines with 'RANK: '\n"
    "  -n, --no-stdin    (attach) do not send our stdin (nor its EOF)\n"
    "  -d, --debug       (attach) be an MPIR starter\n"
    "  -u, --untraced    (release) only tasks no debugger is attached to\n"
    "  -s, --signal=SIG  (kill) the signal to send\n"
    "  -r, --ranks=IDSET (kill) the task ranks to signal\n"
    "  -f, --follow      (eventlog) follow until the job ends\n"
    "  -h, --help        show this help\n";

/* Parse a nested command's options (from 'opts'/'shortopts', plus -h),
 * calling 'opt' for each, then its one ID operand. */
static eddy_jobid_t parse_args(const char *cmd,
                               int argc,
                               char **argv,
                               const char *shortopts,
                               const struct option *opts,
                               void (*opt)(const char *cmd, int c, void *arg),
                               void *arg)
{
    int c;

    optind = 0;
    while ((c = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            exit(0);
        }
        if (c == '?' || c == ':' || !opt) {
            fputs(usage_text, stderr);
            exit(1);
        }
        opt(cmd, c, arg);
    }
    if (optind >= argc)
        cmd_die(cmd, "no job ID given (see 'eddy job -h')");
    if (optind + 1 < argc)
        cmd_die(cmd, "unexpected argument '%s'", argv[optind + 1]);
    return jobid_parse(cmd, argv[optind]);
}

static const struct option help_only[] = {
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* --- info --------------------------------------------------------------- */

static void print_time(const char *label, double t)
{
    char buf[64];
    time_t secs = (time_t)t;
    struct tm tm;

    if (t <= 0)
        return;
    localtime_r(&secs, &tm);
    strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
    printf("%-10s%s.%03d\n", label, buf, (int)((t - (double)secs) * 1000));
}

static void print_info(const eddy_jobinfo_t *info)
{
    const char *exc = eddy_jobinfo_exception(info);
    const char *name = eddy_jobinfo_name(info);
    const char *reason = eddy_jobinfo_reason(info);
    double start = eddy_jobinfo_time(info, "start");
    double end = eddy_jobinfo_time(info, "finish");
    struct eddy_taskinfo t;
    const char *host, *where;
    uint32_t rank, held;
    bool released;
    int status;

    printf("%-10s%" PRIu64 "\n", "job", eddy_jobinfo_id(info));
    printf("%-10s%s\n", "name", name && *name ? name : "-");
    printf("%-10s%s\n", "state", eddy_jobinfo_state(info));
    if (reason && *reason)
        printf("%-10s%s\n", "reason", reason);
    if (eddy_jobinfo_status(info, &status) == 0)
        printf("%-10s%d\n", "status", status);
    else
        printf("%-10s%s\n", "status", "-");
    printf("%-10s%s\n", "exception", exc ? exc : "-");
    printf("%-10s%" PRIu32 "\n", "ntasks", eddy_jobinfo_ntasks(info));
    printf("%-10s%" PRIu32 "\n", "nnodes", eddy_jobinfo_nnodes(info));
    if (eddy_jobinfo_barrier(info, &where, &held, &released) == 0)
        printf("%-10s%s: %" PRIu32 " of %" PRIu32 " tasks held, %s\n",
               "barrier", where, held, eddy_jobinfo_ntasks(info),
               released ? "released" : "not released");
    print_time("submit", eddy_jobinfo_time(info, "submit"));
    print_time("alloc", eddy_jobinfo_time(info, "alloc"));
    print_time("start", start);
    print_time("finish", end);
    print_time("clean", eddy_jobinfo_time(info, "clean"));
    if (start > 0 && end > 0)
        printf("%-10s%.3f s\n", "runtime", end - start);
    printf("%-10s", "nodes");
    for (uint32_t i = 0; eddy_jobinfo_node(info, i, &rank, &host) == 0; i++)
        printf("%s%" PRIu32 " (%s)", i ? ", " : "", rank, host ? host : "?");
    printf("\n");
    printf("\n%-6s %-6s %-16s %-8s %-6s %-6s %s\n", "RANK", "NODE", "HOSTNAME",
           "PID", "APPNUM", "STATUS", "EXECUTABLE");
    for (uint32_t r = 0; eddy_jobinfo_task(info, r, &t) == 0; r++) {
        char pid[16] = "-", st[16] = "-";
        if (t.pid > 0)
            snprintf(pid, sizeof(pid), "%ld", (long)t.pid);
        if (t.exited)
            snprintf(st, sizeof(st), "%d", t.status);
        printf("%-6" PRIu32 " %-6" PRIu32 " %-16s %-8s %-6d %-6s %s\n", t.rank,
               t.node, t.hostname ? t.hostname : "?", pid, t.appnum, st,
               t.executable ? t.executable : "?");
    }
}

static void json_opt(const char *cmd, int c, void *arg)
{
    *(bool *)arg = true; /* --json */
}

/* The ID and --json of a query command (info, proctable, tmpdir). */
static eddy_jobid_t parse_json(const char *cmd,
                               int argc,
                               char **argv,
                               bool *json_out)
{
    static const struct option opts[] = {
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };

    return parse_args(cmd, argc, argv, "jh", opts, json_opt, json_out);
}

static int job_info(int argc, char **argv)
{
    bool json_out = false;
    eddy_jobid_t id = parse_json("job info", argc, argv, &json_out);
    eddy_t *h = cmd_open("job info");
    eddy_future_t *f;
    eddy_jobinfo_t *info;

    if (!(f = eddy_job_info(h, id)) || !(info = eddy_job_info_get(f)))
        jobid_die("job info", id, f);
    if (json_out)
        printf("%s\n", eddy_jobinfo_json(info));
    else
        print_info(info);
    eddy_jobinfo_destroy(info);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

/* --- attach ------------------------------------------------------------- */

static void attach_opt(const char *cmd, int c, void *arg)
{
    struct jobio *io = arg;

    if (c == 'n')
        io->forward_stdin = false;
    else if (c == 'd')
        io->on_fatal = mpir_aborting; /* --debug */
    else
        io->label = true; /* -l */
}

static int job_attach(int argc, char **argv)
{
    static const struct option opts[] = {
        {"label-io", no_argument, NULL, 'l'},
        {"no-stdin", no_argument, NULL, 'n'},
        {"debug", no_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct jobio io = {.forward_stdin = true, .signals = true};
    eddy_jobid_t id =
        parse_args("job attach", argc, argv, "lndh", opts, attach_opt, &io);
    eddy_t *h = cmd_open("job attach");
    int status;

    /* as an MPIR starter (attach mode): show the debugger the job as it
     * is, then follow it like any attach */
    if (mpir_wanted(io.on_fatal != NULL)) {
        io.on_fatal = mpir_aborting;
        mpir_acquire("job attach", h, id, true);
        mpir_spawned("job attach", h, id);
    }
    status = jobio_attach("job attach", h, id, &io);

    eddy_close(h);
    return status;
}

/* --- wait --------------------------------------------------------------- */

static int job_wait(int argc, char **argv)
{
    eddy_jobid_t id =
        parse_args("job wait", argc, argv, "h", help_only, NULL, NULL);
    eddy_t *h = cmd_open("job wait");
    eddy_future_t *f;
    const char *exception = NULL;
    int status;

    if (!(f = eddy_job_wait(h, id)) ||
        eddy_job_wait_get(f, &status, &exception) < 0)
        jobid_die("job wait", id, f);
    if (exception)
        cmd_warn("job wait", "job %" PRIu64 ": %s", id, exception);
    if (status < 0)
        status = 1;
    eddy_future_destroy(f);
    eddy_close(h);
    return status;
}

/* --- kill and cancel ---------------------------------------------------- */

struct killopts {
    int signum;
    const char *ranks;
};

/* "TERM", "SIGTERM", "term" or "15" */
static void kill_opt(const char *cmd, int c, void *arg)
{
    struct killopts *k = arg;
    eddy_error_t err;
    idset_t *ids;

    if (c == 's') {
        k->signum = cmd_parse_signal(cmd, optarg);
    } else if (c == 'r') {
        if (!(ids = idset_decode(optarg, &err)))
            cmd_die(cmd, "--ranks: %s", err.text);
        if (idset_count(ids) == 0)
            cmd_die(cmd, "--ranks: no ranks in '%s'", optarg);
        idset_destroy(ids);
        k->ranks = optarg;
    }
}

static int job_kill(int argc, char **argv)
{
    static const struct option opts[] = {
        {"signal", required_argument, NULL, 's'},
        {"ranks", required_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct killopts k = {.signum = SIGTERM};
    eddy_jobid_t id =
        parse_args("job kill", argc, argv, "s:r:h", opts, kill_opt, &k);
    eddy_t *h = cmd_open("job kill");
    eddy_future_t *f;

    if (!(f = eddy_job_signal(h, id, k.signum, k.ranks)) ||
        eddy_rpc_get(f, NULL) < 0)
        jobid_die("job kill", id, f);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

static int job_cancel(int argc, char **argv)
{
    eddy_jobid_t id =
        parse_args("job cancel", argc, argv, "h", help_only, NULL, NULL);
    eddy_t *h = cmd_open("job cancel");
    eddy_future_t *f;

    if (!(f = eddy_job_cancel(h, id)) || eddy_rpc_get(f, NULL) < 0)
        jobid_die("job cancel", id, f);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

static void release_opt(const char *cmd, int c, void *arg)
{
    *(bool *)arg = true; /* --untraced */
}

static int job_release(int argc, char **argv)
{
    static const struct option opts[] = {
        {"untraced", no_argument, NULL, 'u'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    bool untraced = false;
    eddy_jobid_t id = parse_args("job release", argc, argv, "uh", opts,
                                 release_opt, &untraced);
    eddy_t *h = cmd_open("job release");
    eddy_future_t *f;

    f = untraced ? eddy_job_release_untraced(h, id) : eddy_job_release(h, id);
    if (!f || eddy_rpc_get(f, NULL) < 0)
        jobid_die("job release", id, f);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

/* --- proctable ---------------------------------------------------------- */

static json_t *proctable_json(const eddy_proctable_t *pt)
{
    json_t *a = json_array();
    struct eddy_procdesc d;

    for (uint32_t r = 0; a && eddy_proctable_entry(pt, r, &d) == 0; r++) {
        if (json_array_append_new(
                a, json_pack("{s:I s:I s:s s:I s:i s:s}", "rank",
                             (json_int_t)d.rank, "node",
                             (json_int_t)d.broker_rank, "hostname", d.hostname,
                             "pid", (json_int_t)d.pid, "appnum", d.appnum,
                             "executable", d.executable)) < 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static int job_proctable(int argc, char **argv)
{
    bool json_out = false;
    eddy_jobid_t id = parse_json("job proctable", argc, argv, &json_out);
    eddy_t *h = cmd_open("job proctable");
    eddy_future_t *f;
    eddy_proctable_t *pt;
    struct eddy_procdesc d;

    if (!(f = eddy_job_proctable(h, id)) || !(pt = eddy_job_proctable_get(f)))
        jobid_die("job proctable", id, f);
    if (json_out) {
        json_t *a = proctable_json(pt);
        char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
        if (!text)
            cmd_die("job proctable", "out of memory");
        printf("%s\n", text);
        free(text);
        json_decref(a);
    } else {
        printf("%-6s %-6s %-16s %-8s %-6s %s\n", "RANK", "NODE", "HOSTNAME",
               "PID", "APPNUM", "EXECUTABLE");
        for (uint32_t r = 0; eddy_proctable_entry(pt, r, &d) == 0; r++)
            printf("%-6" PRIu32 " %-6" PRIu32 " %-16s %-8ld %-6d %s\n", d.rank,
                   d.broker_rank, d.hostname, (long)d.pid, d.appnum,
                   d.executable);
    }
    eddy_proctable_destroy(pt);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

/* --- tmpdir ------------------------------------------------------------- */

static int job_tmpdir(int argc, char **argv)
{
    bool json_out = false;
    eddy_jobid_t id = parse_json("job tmpdir", argc, argv, &json_out);
    eddy_t *h = cmd_open("job tmpdir");
    eddy_future_t *f;
    eddy_tmpdirs_t *t;
    struct eddy_tmpdir d;

    if (!(f = eddy_job_tmpdir(h, id)) || !(t = eddy_job_tmpdir_get(f)))
        jobid_die("job tmpdir", id, f);
    if (json_out) {
        printf("%s\n", eddy_tmpdirs_json(t));
    } else {
        printf("%-6s %-6s %-16s %s\n", "RANK", "NODE", "HOSTNAME", "PATH");
        for (uint32_t r = 0; eddy_tmpdirs_task(t, r, &d) == 0; r++)
            printf("%-6" PRIu32 " %-6" PRIu32 " %-16s %s\n", r, d.node,
                   d.hostname, d.path);
    }
    eddy_tmpdirs_destroy(t);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

/* --- eventlog ----------------------------------------------------------- */

struct evopts {
    bool follow;
    bool json;
};

static void eventlog_opt(const char *cmd, int c, void *arg)
{
    struct evopts *e = arg;

    if (c == 'f')
        e->follow = true;
    else if (c == 'j')
        e->json = true;
}

static void print_event(bool json_out,
                        double ts,
                        const char *name,
                        const char *context)
{
    json_t *ctx, *o;
    char *s;

    if (!json_out) {
        printf("%.6f %s %s\n", ts, name, context ? context : "{}");
        fflush(stdout);
        return;
    }
    if (!(ctx = json_loads(context ? context : "{}", 0, NULL)))
        ctx = json_object();
    if (!(o = json_pack("{s:f s:s s:o}", "timestamp", ts, "name", name,
                        "context", ctx)) ||
        !(s = json_dumps(o, JSON_COMPACT)))
        cmd_die("job eventlog", "out of memory");
    printf("%s\n", s);
    fflush(stdout);
    free(s);
    json_decref(o);
}

static int job_eventlog(int argc, char **argv)
{
    static const struct option opts[] = {
        {"follow", no_argument, NULL, 'f'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct evopts e = {0};
    eddy_jobid_t id =
        parse_args("job eventlog", argc, argv, "fjh", opts, eventlog_opt, &e);
    eddy_t *h = cmd_open("job eventlog");
    eddy_future_t *f;
    const char *name, *context;
    double ts;

    if (!(f = eddy_job_event_watch(h, id,
                                   e.follow ? EDDY_JOB_EVENT_FOLLOW : 0)))
        cmd_die("job eventlog", "job %" PRIu64 ": %s", id, strerror(errno));
    while (eddy_job_event_get(f, &ts, &name, &context) == 0) {
        print_event(e.json, ts, name, context);
        eddy_future_reset(f);
    }
    if (errno != ENODATA)
        jobid_die("job eventlog", id, f);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

/* --- the table ---------------------------------------------------------- */

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} job_cmds[] = {
    {"info", job_info},         {"attach", job_attach},
    {"wait", job_wait},         {"kill", job_kill},
    {"cancel", job_cancel},     {"release", job_release},
    {"eventlog", job_eventlog}, {"proctable", job_proctable},
    {"tmpdir", job_tmpdir},
};

static int job_run(int argc, char **argv)
{
    for (size_t i = 0; argc >= 2 && i < sizeof(job_cmds) / sizeof(job_cmds[0]);
         i++) {
        if (!strcmp(argv[1], job_cmds[i].name))
            return job_cmds[i].run(argc - 1, argv + 1);
    }
    if (argc >= 2)
        cmd_warn("job", "'%s' is not a job command", argv[1]);
    fputs(usage_text, stderr);
    return 1;
}

const struct cmd cmd_job = {
    .name = "job",
    .summary = "look at and control one job (info, attach, wait, kill, ...)",
    .usage = usage_text,
    .run = job_run,
};
