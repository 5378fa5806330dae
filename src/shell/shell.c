/* shell.c - eddy-shell's job state: tasks, reports to job-exec, commands.
 *
 * The shell is single-threaded on its handle's libuv loop.  It reaps its
 * own children (task.h leaves that to us) from a SIGCHLD watcher with
 * waitpid(-1): the shell has no other children.
 *
 * Startup barriers and PMI-1 are described in docs/jobs-protocol.md; the
 * PMI wire protocol itself is pmi_server.c's (docs/pmi.md).
 *
 * Plugins (plugin.h, docs/plugins.md) are loaded once the jobspec is
 * decoded.  When one registered shell.start, the start is split in two:
 * shell_start() forks the tasks held and sends this node's process table
 * as kvs.fence number 1 of the job (the PMI barriers then use 2, 3, ...);
 * the answer, the whole job's table, arrives in the loop, shell.start
 * runs, and start_continue() goes on as without plugins (release, or
 * wait at the job's startup barrier).  Without such a plugin nothing
 * waits.  A plugin that fails at shell.init or shell.start fails every
 * local task with an exception naming it (the held ones never run); one
 * that fails later sends an "abort" with status -1, which the job manager
 * turns into an exception with that note without touching the tasks'
 * statuses.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>

#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/jobslice.h"
#include "src/common/jobspec.h"
#include "src/common/log.h"
#include "src/common/proctable.h"
#include "src/common/rmtree.h"
#include "src/shell/io.h"
#include "src/shell/plugin.h"
#include "src/shell/pmi_server.h"
#include "src/shell/shell.h"
#include "src/shell/task.h"
#include "src/shell/taskenv.h"

extern char **environ;

struct stask {
    task_t *t;
    uint32_t rank;
    uint32_t local_rank;
    bool forked;   /* a process exists or existed: it must be reaped */
    bool exited;   /* reaped (by us or by the task engine) */
    bool reported; /* its "exit" or "exception" was sent */
    bool detached; /* stop=exec: seen at its exec stop and detached */
    bool stopped;  /* ... and seen stopped (SIGSTOP) after that, or let go */
    /* PMI: our end of the task's PMI_FD socket */
    struct shell *sh;
    int pmi_fd; /* until handed to pmi_pipe; -1 */
    uv_pipe_t pmi_pipe;
    bool pmi_open;    /* pmi_pipe initialized and not closed */
    bool pmi_reading; /* still fed to the engine */
    char head[9];     /* stop=init: start of the current request line */
    size_t headlen;
    bool head_done; /* head full: skip to the end of the line */
    bool init_seen; /* it sent cmd=init */
    bool pmi_lost;  /* left PMI before finalize: report once reaped */
};

/* The PMI_FD a task sees. */
#define SHELL_PMI_FD 3

/* Where the tasks wait for a release (jobspec shell option "stop"). */
enum stop_mode {
    STOP_NONE = 0,
    STOP_FORK, /* forked, held before exec */
    STOP_EXEC, /* stopped (SIGSTOP) at the program's first instruction */
    STOP_INIT, /* running, PMI init answer withheld */
};

static const char *const stop_names[] = {"", "fork", "exec", "init"};

struct shell {
    uint64_t id;
    eddy_t *h;
    uv_loop_t *loop;
    eddy_future_t *hello;
    struct jobslice *slice;
    jobspec_t *js;
    struct stask *tasks;
    uint32_t ntasks;
    shell_io_t *io;
    uv_signal_t sigchld, sigterm;
    bool signals_on;
    unsigned events; /* shell-event requests not yet answered */
    bool lost;       /* broker connection lost */
    bool failed;     /* something could not be reported */
    bool running;    /* shell_run() is in its loop */
    enum stop_mode stop;
    uint32_t nstopped; /* stop=exec: tasks seen at their exec stop */
    bool held;         /* "held" was reported */
    bool released;     /* a release command came (or no stop mode) */
    bool started;      /* "started" was reported */
    json_t *exits;     /* [rank, status] pairs not yet sent (one reap pass) */
    pmi_server_t *pmi;
    char *ranks;       /* broker ranks of the job (JOBSLICE "ranks") */
    int64_t fence_seq; /* last kvs.fence sent */
    eddy_future_t *fence;
    uint32_t ninit; /* tasks that sent cmd=init */
    /* plugins */
    eddy_shell_t *plugins;
    uint32_t broker_rank;    /* ours, for the process table */
    eddy_future_t *pl_fence; /* the process table exchange */
    bool pl_waiting;         /* forked, waiting for the exchange */
    bool pl_failed;          /* a plugin failed the job */
    bool pl_exit_done;       /* shell.exit was called */
    unsigned pl_logs;        /* log lines to the job's output unanswered */
};

/* Log lines of plugins in flight to the job's output at most; beyond,
 * they only reach the broker log. */
#define SHELL_PLUGIN_LOGS_MAX 64

/* --- reports ------------------------------------------------------------ */

static void check_done(struct shell *sh);

static void on_event_answer(eddy_future_t *f, void *arg)
{
    struct shell *sh = arg;

    if (eddy_rpc_get(f, NULL) < 0) {
        fprintf(stderr, "eddy-shell: job %ju: report refused: %s\n",
                (uintmax_t)sh->id, eddy_future_error_string(f));
        sh->failed = true;
    }
    sh->events--;
    eddy_future_destroy(f);
    check_done(sh);
}

/* Send a shell event (body stolen; "id" is added). */
static void send_event(struct shell *sh, json_t *o)
{
    eddy_future_t *f = NULL;
    char *text = NULL;

    if (!o ||
        json_object_set_new(o, "id", json_integer((json_int_t)sh->id)) < 0 ||
        !(text = json_dumps(o, JSON_COMPACT)))
        goto error;
    if (!(f = eddy_rpc(sh->h, "job-exec.shell-event", EDDY_RANK_ANY, 0, text,
                       NULL, 0)) ||
        eddy_future_then(f, -1, on_event_answer, sh) < 0)
        goto error;
    sh->events++;
    free(text);
    json_decref(o);
    return;
error:
    fprintf(stderr, "eddy-shell: job %ju: cannot report: %s\n",
            (uintmax_t)sh->id, strerror(errno));
    sh->failed = true;
    eddy_future_destroy(f);
    free(text);
    json_decref(o);
}

static void report_exception(struct shell *sh,
                             struct stask *st,
                             int errnum,
                             const char *why)
{
    /* The note is stored with the job, so it need not name it; 'why'
     * already names the task rank, the program and the error. */
    st->reported = true;
    send_event(sh,
               json_pack("{s:s s:I s:i s:s}", "type", "exception", "rank",
                         (json_int_t)st->rank, "errnum", errnum, "note", why));
}

/* Send the exits gathered so far as one event: at 1024 tasks one message
 * per reap() pass rather than one per task. */
static void flush_exits(struct shell *sh)
{
    json_t *exits = sh->exits;

    if (!exits)
        return;
    sh->exits = NULL;
    if (json_array_size(exits) == 0) {
        json_decref(exits);
        return;
    }
    send_event(sh, json_pack("{s:s s:o}", "type", "exits", "tasks", exits));
}

static void report_exit(struct shell *sh, struct stask *st)
{
    int code = task_exit_code(task_status(st->t));

    if (st->reported)
        return;
    st->reported = true;
    if ((sh->exits || (sh->exits = json_array())) &&
        json_array_append_new(
            sh->exits, json_pack("[I,i]", (json_int_t)st->rank, code)) == 0)
        return;
    /* out of memory for the batch: this one on its own */
    send_event(sh, json_pack("{s:s s:I s:i}", "type", "exit", "rank",
                             (json_int_t)st->rank, "status", code));
}

static void report_started(struct shell *sh);
static void report_lost(struct shell *sh, struct stask *st);
static void shell_pmi_release(struct shell *sh);

/* The tasks are all at the barrier: tell rank 0 (once). */
static void report_held(struct shell *sh, uint32_t count)
{
    if (sh->held || sh->released)
        return;
    sh->held = true;
    send_event(sh, json_pack("{s:s s:s s:I}", "type", "held", "where",
                             stop_names[sh->stop], "count", (json_int_t)count));
}

/* --- the end ------------------------------------------------------------ */

static bool all_reaped(const struct shell *sh)
{
    for (uint32_t i = 0; i < sh->ntasks; i++)
        if (sh->tasks[i].forked && !sh->tasks[i].exited)
            return false;
    return true;
}

/* Stop the loop once the job is over here: every task reaped and
 * reported, output flushed, reports answered (or, with the broker gone,
 * just every task reaped). */
static void plugins_exit(struct shell *sh);

static void check_done(struct shell *sh)
{
    if (!sh->running || !all_reaped(sh))
        return;
    if (!sh->lost) {
        for (uint32_t i = 0; i < sh->ntasks; i++)
            if (!sh->tasks[i].reported)
                return;
    }
    plugins_exit(sh); /* may send one more report */
    if (!sh->lost && (sh->events > 0 || !shell_io_done(sh->io)))
        return;
    uv_stop(sh->loop);
}

static void on_io_done(void *arg)
{
    check_done(arg);
}

/* --- signals and reaping ------------------------------------------------ */

static void kill_all(struct shell *sh, int signum)
{
    for (uint32_t i = 0; i < sh->ntasks; i++)
        if (sh->tasks[i].forked && !sh->tasks[i].exited)
            (void)task_kill(sh->tasks[i].t, signum);
}

static struct stask *find_pid(struct shell *sh, pid_t pid)
{
    for (uint32_t i = 0; i < sh->ntasks; i++)
        if (sh->tasks[i].forked && task_pid(sh->tasks[i].t) == pid)
            return &sh->tasks[i];
    return NULL;
}

/* A detached task is really stopped (or was let go): once all are, the
 * tasks are held and their pids final. */
static void stop_confirmed(struct shell *sh, struct stask *st)
{
    if (st->stopped)
        return;
    st->stopped = true;
    if (++sh->nstopped == sh->ntasks) {
        report_started(sh);
        report_held(sh, sh->ntasks);
    }
}

/* stop=exec: a traced task stopped, normally with the SIGTRAP of its
 * exec.  Detach leaving it in SIGSTOP for a debugger (or running, if the
 * release already came). */
static void exec_stopped(struct shell *sh, struct stask *st, int sig)
{
    int deliver;

    if (st->detached || sh->stop != STOP_EXEC)
        return; /* not traced (any more): a plain stop */
    if (sh->released)
        deliver = sig == SIGTRAP ? 0 : sig;
    else
        deliver = sig == SIGTRAP ? SIGSTOP : sig;
    if (task_trace_detach(st->t, deliver) < 0)
        fprintf(stderr, "eddy-shell: job %ju: rank %u: cannot detach: %s\n",
                (uintmax_t)sh->id, st->rank, strerror(errno));
    st->detached = true;
    /* The SIGSTOP takes effect when the task next runs: it is held (for a
     * debugger to find it stopped) once reap() sees that stop. */
    if (deliver != SIGSTOP)
        stop_confirmed(sh, st);
}

static void plugins_task_exit(struct shell *sh, struct stask *st);

static void reap(struct shell *sh)
{
    struct stask *st;
    pid_t pid;
    int status;

    /* WUNTRACED: the SIGSTOP of a task detached at its exec stop */
    while ((pid = waitpid(-1, &status, WNOHANG | WUNTRACED)) > 0) {
        if (!(st = find_pid(sh, pid))) {
            (void)plugins_reaped(sh->plugins, pid, status);
            continue;
        }
        if (st->exited)
            continue;
        if (WIFSTOPPED(status)) {
            if (st->detached && WSTOPSIG(status) == SIGSTOP)
                stop_confirmed(sh, st);
            else
                exec_stopped(sh, st, WSTOPSIG(status));
            continue;
        }
        if (!WIFEXITED(status) && !WIFSIGNALED(status))
            continue;
        (void)task_set_exited(st->t, status);
        st->exited = true;
        shell_io_stdin_close(sh->io, st->rank);
        if (!sh->lost) {
            report_exit(sh, st);
            report_lost(sh, st);
        }
        plugins_task_exit(sh, st);
    }
    flush_exits(sh);
    check_done(sh);
}

static void on_sigchld(uv_signal_t *h, int signum)
{
    reap(h->data);
}

/* The broker stops us (shutdown): pass it on to the tasks, whose exits
 * are then reported as usual. */
static void on_sigterm(uv_signal_t *h, int signum)
{
    kill_all(h->data, SIGTERM);
}

/* --- commands from job-exec --------------------------------------------- */

/* A signal that ends a task by default: while held, such a kill (e.g.
 * a cancel) ends the held task without ever running the program. */
static bool is_ending(int signum)
{
    return signum == SIGTERM || signum == SIGKILL || signum == SIGINT ||
           signum == SIGHUP || signum == SIGQUIT;
}

/* Signal one task, minding the barrier: a fork-held task is cancelled
 * (it exits TASK_EXIT_CANCELLED), an exec-stopped one would not see
 * SIGTERM before a SIGCONT, so it gets SIGKILL. */
static void task_signal(struct shell *sh, struct stask *st, int signum)
{
    if (!sh->released && is_ending(signum)) {
        if (sh->stop == STOP_FORK && task_state(st->t) == TASK_HELD) {
            task_cancel(st->t);
            return;
        }
        if (sh->stop == STOP_EXEC)
            signum = SIGKILL;
    }
    (void)task_kill(st->t, signum);
}

static void do_kill(struct shell *sh, int signum, const char *ranks)
{
    idset_t *set = NULL;

    if (ranks && !(set = idset_decode(ranks, NULL))) {
        fprintf(stderr, "eddy-shell: job %ju: kill: bad ranks '%.32s'\n",
                (uintmax_t)sh->id, ranks);
        return;
    }
    for (uint32_t i = 0; i < sh->ntasks; i++) {
        struct stask *st = &sh->tasks[i];
        if (st->forked && !st->exited && (!set || idset_test(set, st->rank)))
            task_signal(sh, st, signum);
    }
    idset_destroy(set);
}

/* True if a tracer (a debugger) is attached to 'pid': /proc says who.
 * An unreadable status counts as untraced, so the task is not left
 * stopped for a debugger that is not there. */
static bool is_traced(pid_t pid)
{
    char path[64], line[256];
    long tracer = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "re")))
        return false;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "TracerPid: %ld", &tracer) == 1)
            break;
    }
    fclose(f);
    return tracer > 0;
}

/* The release command: let the held tasks go.  A task that then fails
 * to exec is reported as an exception and the others are killed, as at
 * an ordinary start.  'untraced' (MPIR partial attach): with stop=exec,
 * leave the tasks a debugger attached to for the debugger to continue,
 * and only resume the others. */
static void do_release(struct shell *sh, bool untraced)
{
    eddy_error_t e;
    bool failed = false;
    uint32_t i;

    if (sh->stop == STOP_NONE || sh->released) {
        fprintf(stderr, "eddy-shell: job %ju: release: not held\n",
                (uintmax_t)sh->id);
        return;
    }
    sh->released = true;
    switch (sh->stop) {
    case STOP_FORK:
        for (i = 0; i < sh->ntasks; i++)
            if (sh->tasks[i].forked && !sh->tasks[i].exited)
                (void)task_release_begin(sh->tasks[i].t, NULL);
        for (i = 0; i < sh->ntasks; i++) {
            struct stask *st = &sh->tasks[i];
            if (!st->forked || st->exited || st->reported)
                continue;
            if (task_release_end(st->t, &e) < 0 && errno != EINVAL &&
                errno != ESRCH) {
                if (task_state(st->t) == TASK_EXITED)
                    st->exited = true;
                report_exception(sh, st, errno, e.text);
                failed = true;
            }
        }
        if (failed)
            kill_all(sh, SIGKILL);
        break;
    case STOP_EXEC:
        /* those not yet at their exec stop are detached running */
        for (i = 0; i < sh->ntasks; i++) {
            struct stask *st = &sh->tasks[i];
            if (!st->detached || st->exited)
                continue;
            /* a SIGCONT also cancels a SIGSTOP not yet taken */
            stop_confirmed(sh, st);
            if (untraced && is_traced(task_pid(st->t)))
                continue;
            (void)task_kill(st->t, SIGCONT);
        }
        break;
    case STOP_INIT:
        shell_pmi_release(sh);
        break;
    default:
        break;
    }
    check_done(sh);
}

/* The broker connection is gone: nobody can hear us any more, so the
 * tasks must not outlive us. */
static void broker_lost(struct shell *sh, const char *why)
{
    if (sh->lost)
        return;
    fprintf(stderr,
            "eddy-shell: job %ju: broker connection lost (%s):"
            " killing tasks\n",
            (uintmax_t)sh->id, why);
    sh->lost = true;
    sh->failed = true;
    /* with the broker gone, only the SIGCHLD watcher keeps the loop up
     * until the tasks are reaped (check_done() stops it then) */
    if (sh->signals_on)
        uv_ref((uv_handle_t *)&sh->sigchld);
    kill_all(sh, SIGKILL);
    for (uint32_t i = 0; i < sh->ntasks; i++)
        if (sh->tasks[i].forked && !sh->tasks[i].exited)
            task_cancel(sh->tasks[i].t);
    check_done(sh);
}

static void on_hello(eddy_future_t *f, void *arg)
{
    struct shell *sh = arg;
    const char *type = NULL, *ranks = NULL;
    json_int_t signum = 0, rank = -1;
    int eof = 0, untraced = 0;
    const void *data = NULL;
    size_t len = 0;

    if (eddy_rpc_get_unpack(f, "{s:s s?I s?s s?I s?b s?b}", "type", &type,
                            "signum", &signum, "ranks", &ranks, "rank", &rank,
                            "eof", &eof, "untraced", &untraced) < 0) {
        if (errno == EPROTO) {
            fprintf(stderr, "eddy-shell: job %ju: bad command: %s\n",
                    (uintmax_t)sh->id, eddy_future_error_string(f));
            eddy_future_reset(f);
            return;
        }
        broker_lost(sh, errno == ENODATA ? "stream ended"
                                         : eddy_future_error_string(f));
        return;
    }
    if (!strcmp(type, "kill") && signum > 0 && signum < NSIG)
        do_kill(sh, (int)signum, ranks);
    else if (!strcmp(type, "release"))
        do_release(sh, untraced);
    else if (!strcmp(type, "stdin") && rank >= 0 &&
             eddy_rpc_get_raw(f, &data, &len) == 0) {
        if (shell_io_stdin(sh->io, (uint32_t)rank, data, len, eof) < 0 &&
            errno != EPIPE)
            fprintf(stderr, "eddy-shell: job %ju: stdin for rank %jd: %s\n",
                    (uintmax_t)sh->id, (intmax_t)rank, strerror(errno));
    } else
        fprintf(stderr, "eddy-shell: job %ju: unknown command '%.32s'\n",
                (uintmax_t)sh->id, type);
    eddy_future_reset(f);
}

/* --- create ------------------------------------------------------------- */

static void pmi_close_all(struct shell *sh);

void shell_destroy(struct shell *sh)
{
    int saved_errno = errno;

    if (!sh)
        return;
    json_decref(sh->exits);
    sh->exits = NULL;
    /* no more commands: the loop runs again below, to finish closes */
    eddy_future_destroy(sh->hello);
    sh->hello = NULL;
    for (uint32_t i = 0; i < sh->ntasks; i++) {
        if (sh->tasks[i].forked && !sh->tasks[i].exited)
            (void)task_kill(sh->tasks[i].t, SIGKILL);
        task_destroy(sh->tasks[i].t);
        /* the loop runs again below: a late SIGCHLD (a plugin's helper
         * killed) must not find this task */
        sh->tasks[i].t = NULL;
        sh->tasks[i].forked = false;
    }
    eddy_future_destroy(sh->fence);
    sh->fence = NULL;
    eddy_future_destroy(sh->pl_fence);
    sh->pl_fence = NULL;
    /* kills what plugins spawned and still runs */
    plugins_destroy(sh->plugins);
    sh->plugins = NULL;
    pmi_close_all(sh);
    free(sh->tasks);
    pmi_server_destroy(sh->pmi);
    free(sh->ranks);
    shell_io_destroy(sh->io);
    if (sh->signals_on) {
        uv_close((uv_handle_t *)&sh->sigchld, NULL);
        uv_close((uv_handle_t *)&sh->sigterm, NULL);
        uv_run(sh->loop, UV_RUN_NOWAIT);
    }
    jobspec_destroy(sh->js);
    jobslice_destroy(sh->slice);
    eddy_close(sh->h);
    free(sh);
    errno = saved_errno;
}

struct shell *shell_create(uint64_t id, eddy_error_t *err)
{
    struct shell *sh;
    const char *text;
    json_t *o = NULL;
    eddy_error_t e;
    uint32_t r, i;

    if (!(sh = calloc(1, sizeof(*sh)))) {
        errprintf(err, "out of memory");
        return NULL;
    }
    sh->id = id;
    if (!(sh->h = eddy_open(NULL, 0, &e))) {
        errprintf(err, "cannot connect to the broker: %s", e.text);
        goto error;
    }
    sh->loop = eddy_get_loop(sh->h);
    if (!(sh->hello = eddy_rpc_pack(sh->h, "job-exec.shell-hello",
                                    EDDY_RANK_ANY, EDDY_RPC_STREAMING, "{s:I}",
                                    "id", (json_int_t)id)) ||
        eddy_future_wait_for(sh->hello, SHELL_HELLO_TIMEOUT) < 0 ||
        eddy_rpc_get(sh->hello, &text) < 0) {
        errprintf(err, "job-exec.shell-hello: %s",
                  sh->hello ? eddy_future_error_string(sh->hello)
                            : strerror(errno));
        goto error;
    }
    o = json_loads(text, 0, NULL);
    if (!o || !(sh->slice = jobslice_decode(o, &e))) {
        errno = EPROTO;
        errprintf(err, "%s", o ? e.text : "JOBSLICE: not JSON");
        goto error;
    }
    /* The job's broker ranks, for the PMI exchange (kvs.fence). */
    if (sh->slice->ranks && !(sh->ranks = strdup(sh->slice->ranks))) {
        errprintf(err, "out of memory");
        goto error;
    }
    json_decref(o);
    o = NULL;
    if (sh->slice->id != id) {
        errno = EPROTO;
        errprintf(err, "JOBSLICE: for job %ju, not %ju",
                  (uintmax_t)sh->slice->id, (uintmax_t)id);
        goto error;
    }
    sh->ntasks = (uint32_t)idset_count(sh->slice->tasks);
    if (!(sh->tasks = calloc(sh->ntasks, sizeof(*sh->tasks)))) {
        errprintf(err, "out of memory");
        goto error;
    }
    for (r = idset_first(sh->slice->tasks), i = 0; r != IDSET_INVALID;
         r = idset_next(sh->slice->tasks, r), i++) {
        sh->tasks[i].rank = r;
        sh->tasks[i].local_rank = i;
        sh->tasks[i].sh = sh;
        sh->tasks[i].pmi_fd = -1;
    }
    if (!(sh->io =
              shell_io_create(sh->h, id, SHELL_IO_WINDOW, on_io_done, sh))) {
        errprintf(err, "out of memory");
        goto error;
    }
    eddy_future_reset(sh->hello);
    return sh;
error:
    json_decref(o);
    shell_destroy(sh);
    return NULL;
}

/* --- start -------------------------------------------------------------- */

static int pmi_create(struct shell *sh, eddy_error_t *err);
static int plugins_init(struct shell *sh, eddy_error_t *err);
static int plugins_exchange(struct shell *sh);
static void plugins_fail_start(struct shell *sh, int errnum, const char *note);
static void start_continue(struct shell *sh);

/* The jobspec's stop mode (rank 0 checked it at submit). */
static int stop_mode(struct shell *sh, eddy_error_t *err)
{
    json_t *o = json_object_get(jobspec_shell_options(sh->js), "stop");
    const char *s = json_string_value(o);

    sh->stop = STOP_NONE;
    sh->released = true;
    if (!o)
        return 0;
    for (int m = STOP_FORK; s && m <= STOP_INIT; m++) {
        if (!strcmp(s, stop_names[m])) {
            sh->stop = (enum stop_mode)m;
            sh->released = false;
            return 0;
        }
    }
    errno = EINVAL;
    return errprintf(err, "shell option stop: must be fork, exec or init");
}

/* EDDY_JOB_CORES=IDSET (this node's cores of the job) in 'env', or no
 * such variable when the slice names no cores. */
static int task_env_cores(struct shell *sh, char ***env)
{
    char *cores;
    int rc;

    if (idset_count(sh->slice->cores) == 0)
        return taskenv_unset(*env, "EDDY_JOB_CORES");
    if (!(cores = idset_encode(sh->slice->cores)))
        return -1;
    rc = taskenv_set(env, "EDDY_JOB_CORES", cores);
    free(cores);
    return rc;
}

/* Create and fork one task, held.  -1 with errno and 'err' on failure
 * (nothing forked, or a child the engine already reaped). */
static int task_fork(struct shell *sh, struct stask *st, eddy_error_t *err)
{
    int g = jobspec_task_group(sh->js, st->rank);
    struct taskenv_ids ids = {
        .jobid = sh->id,
        .rank = st->rank,
        .local_rank = st->local_rank,
        .size = sh->slice->size,
        .nnodes = sh->slice->nnodes,
        .uri = getenv("EDDY_URI"),
    };
    struct task_spec spec = {0};
    struct task_fdmap fdmap;
    const char *tmpdir = getenv("EDDY_JOB_TMPDIR");
    char **env;
    char num[3][16];
    int sv[2] = {-1, -1};
    int rc;

    if (g < 0) {
        errno = EINVAL;
        return errprintf(err, "rank %u: not a task of the jobspec", st->rank);
    }
    if (!(env = taskenv_create(jobspec_environment(sh->js),
                               (const char *const *)environ, &ids, err)))
        return -1;
    /* the job's tmpdir on this node: job-exec made it and put it in our
     * environment; it wins over one in the job's environment (a job
     * submitted from inside another job) */
    if (tmpdir && taskenv_set(&env, "EDDY_JOB_TMPDIR", tmpdir) < 0) {
        errprintf(err, "rank %u: environment: %s", st->rank, strerror(errno));
        taskenv_destroy(env);
        return -1;
    }
    /* the job's core ids on this node, so that a program that schedules
     * (a nested instance: eddy start --pmi) knows its share; like the
     * tmpdir it wins over a value inherited from the submitter */
    if (task_env_cores(sh, &env) < 0) {
        errprintf(err, "rank %u: environment: %s", st->rank, strerror(errno));
        taskenv_destroy(env);
        return -1;
    }
    /* what plugins set at shell.init comes last: they may override */
    if (plugins_env_apply(sh->plugins, &env) < 0) {
        errprintf(err, "rank %u: environment: %s", st->rank, strerror(errno));
        taskenv_destroy(env);
        return -1;
    }
    /* PMI-1 over an inherited socket (docs/pmi.md) */
    snprintf(num[0], sizeof(num[0]), "%d", SHELL_PMI_FD);
    snprintf(num[1], sizeof(num[1]), "%u", st->rank);
    snprintf(num[2], sizeof(num[2]), "%u", sh->slice->size);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 ||
        taskenv_set(&env, "PMI_FD", num[0]) < 0 ||
        taskenv_set(&env, "PMI_RANK", num[1]) < 0 ||
        taskenv_set(&env, "PMI_SIZE", num[2]) < 0 ||
        taskenv_set(&env, "PMI_SPAWNED", "0") < 0) {
        errprintf(err, "rank %u: PMI socket: %s", st->rank, strerror(errno));
        taskenv_destroy(env);
        if (sv[0] >= 0) {
            close(sv[0]);
            close(sv[1]);
        }
        return -1;
    }
    fdmap.fd = sv[1];
    fdmap.target = SHELL_PMI_FD;
    spec.fds = &fdmap;
    spec.nfds = 1;
    spec.rank = st->rank;
    spec.argv = jobspec_group_argv(sh->js, (uint32_t)g);
    spec.envp = (const char *const *)env;
    spec.cwd = jobspec_cwd(sh->js);
    spec.io[0].kind = sh->slice->has_stdin ? TASK_IO_PIPE : TASK_IO_NULL;
    spec.io[1].kind = TASK_IO_PIPE;
    spec.io[2].kind = TASK_IO_PIPE;
    spec.hold = true;
    spec.pgrp = true;
    spec.trace_exec = sh->stop == STOP_EXEC;
    if (plugins_has(sh->plugins, "task.init")) {
        spec.pre_exec = plugins_task_init;
        spec.pre_exec_arg = plugins_task_arg(sh->plugins, st->local_rank);
    }
    st->t = task_create(&spec, err);
    taskenv_destroy(env);
    if (!st->t) {
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    st->pmi_fd = sv[0];
    rc = task_start(st->t, err);
    close(sv[1]); /* the task has its end, or never will */
    if (rc < 0) {
        if (task_state(st->t) == TASK_EXITED)
            st->forked = st->exited = true;
        return -1;
    }
    st->forked = true;
    plugins_task_forked(sh->plugins, st->local_rank, st->t);
    return 0;
}

static int pmi_open(struct shell *sh, struct stask *st);

/* Hand the task's pipes to the I/O forwarder and its PMI socket to the
 * PMI engine. */
static int task_io(struct shell *sh, struct stask *st)
{
    if (pmi_open(sh, st) < 0)
        return -1;
    return shell_io_add_task(sh->io, st->rank, task_take_fd(st->t, 0),
                             task_take_fd(st->t, 1), task_take_fd(st->t, 2));
}

/* Index of 'path' in the array of strings 'exes', appended if new (the
 * local tasks run few distinct programs: a linear scan is enough). */
/* The program task 'st' runs, as an absolute path without "." or empty
 * components ("/work/./a.out" -> "/work/a.out"): what debuggers read as
 * the executable's name.  A relative program ran from the task's cwd.
 * Symlinks are kept (the name the user gave).  Returns 'buf', the path as
 * the task engine has it if it cannot be made absolute, or NULL if the
 * task has none. */
static const char *task_abs_path(struct shell *sh,
                                 struct stask *st,
                                 char *buf,
                                 size_t size)
{
    const char *path = task_path(st->t), *p;
    char joined[PATH_MAX];
    size_t len = 0;

    if (!path)
        return NULL;
    if (path[0] == '/')
        snprintf(joined, sizeof(joined), "%s", path);
    else if (!jobspec_cwd(sh->js) ||
             snprintf(joined, sizeof(joined), "%s/%s", jobspec_cwd(sh->js),
                      path) >= (int)sizeof(joined))
        return path;
    for (p = joined; *p;) {
        size_t n;

        while (*p == '/')
            p++;
        n = strcspn(p, "/");
        if (n == 0 || (n == 1 && p[0] == '.')) {
            p += n;
            continue;
        }
        if (len + 1 + n + 1 > size)
            return path;
        buf[len++] = '/';
        memcpy(buf + len, p, n);
        len += n;
        p += n;
    }
    if (len == 0)
        buf[len++] = '/';
    buf[len] = '\0';
    return buf;
}

static int exe_index(json_t *exes, const char *path)
{
    size_t i;
    json_t *v;

    json_array_foreach(exes, i, v)
    {
        if (!strcmp(json_string_value(v), path))
            return (int)i;
    }
    if (json_array_append_new(exes, json_string(path)) < 0)
        return -1;
    return (int)json_array_size(exes) - 1;
}

/* Tell rank 0 each local task's pid, appnum and the program it runs (the
 * resolved path: debuggers read symbols from it), once, as
 * {"tasks": [[rank, pid, appnum, exe], ...], "executables": [path, ...]}
 * with 'exe' an index into "executables". */
static void report_started(struct shell *sh)
{
    json_t *tasks, *exes;

    if (sh->started)
        return;
    sh->started = true;
    tasks = json_array();
    exes = json_array();

    for (uint32_t i = 0; tasks && exes && i < sh->ntasks; i++) {
        struct stask *st = &sh->tasks[i];
        char abs[PATH_MAX];
        const char *path = task_abs_path(sh, st, abs, sizeof(abs));
        int exe;

        exe = exe_index(exes, path ? path : "");
        if (exe < 0 ||
            json_array_append_new(
                tasks, json_pack("[I,I,i,i]", (json_int_t)st->rank,
                                 (json_int_t)task_pid(st->t),
                                 jobspec_task_group(sh->js, st->rank), exe)) <
                0) {
            json_decref(tasks);
            tasks = NULL;
        }
    }
    if (!tasks || !exes) {
        json_decref(tasks);
        json_decref(exes);
        errno = ENOMEM;
        fprintf(stderr, "eddy-shell: job %ju: cannot report started\n",
                (uintmax_t)sh->id);
        sh->failed = true;
        return;
    }
    send_event(sh, json_pack("{s:s s:o s:o}", "type", "started", "tasks", tasks,
                             "executables", exes));
}

int shell_start(struct shell *sh, eddy_error_t *err)
{
    eddy_error_t e;
    uint32_t i;
    int errnum;
    bool failed = false;

    /* reaping and SIGTERM first, so that no child is missed */
    uv_signal_init(sh->loop, &sh->sigchld);
    uv_signal_init(sh->loop, &sh->sigterm);
    sh->signals_on = true;
    sh->sigchld.data = sh->sigterm.data = sh;
    if (uv_signal_start(&sh->sigchld, on_sigchld, SIGCHLD) < 0 ||
        uv_signal_start(&sh->sigterm, on_sigterm, SIGTERM) < 0) {
        errno = EAGAIN;
        return errprintf(err, "cannot watch signals");
    }
    uv_unref((uv_handle_t *)&sh->sigchld);
    uv_unref((uv_handle_t *)&sh->sigterm);

    if (!(sh->js = jobspec_decode(sh->slice->jobspec, &e))) {
        errnum = errno;
        for (i = 0; i < sh->ntasks; i++)
            report_exception(sh, &sh->tasks[i], errnum, e.text);
        return 0;
    }
    if (stop_mode(sh, &e) < 0 || pmi_create(sh, &e) < 0) {
        errnum = errno;
        for (i = 0; i < sh->ntasks; i++)
            report_exception(sh, &sh->tasks[i], errnum, e.text);
        return 0;
    }
    if (plugins_init(sh, &e) < 0) {
        plugins_fail_start(sh, errno, e.text);
        return 0;
    }
    /* fork every task held; the first that cannot start stops the rest */
    for (i = 0; i < sh->ntasks && !failed; i++) {
        struct stask *st = &sh->tasks[i];
        if (task_fork(sh, st, &e) < 0) {
            report_exception(sh, st, errno, e.text);
            failed = true;
        } else if (task_io(sh, st) < 0) {
            snprintf(e.text, sizeof(e.text), "rank %u: pipes: %s", st->rank,
                     strerror(errno));
            report_exception(sh, st, errno, e.text);
            failed = true;
        }
    }
    if (failed) {
        /* the held ones never run; the others never forked */
        for (i = 0; i < sh->ntasks; i++) {
            struct stask *st = &sh->tasks[i];
            if (st->forked && !st->exited)
                task_cancel(st->t);
            else if (!st->forked && !st->reported)
                report_exception(sh, st, ECANCELED,
                                 "not started: another task failed");
        }
        return 0;
    }
    /* every task of the job forked and held before shell.start */
    if (plugins_has(sh->plugins, "shell.start"))
        return plugins_exchange(sh);
    plugins_started(sh->plugins);
    start_continue(sh);
    return 0;
}

/* The tasks are forked and held: go on as the stop mode says. */
static void start_continue(struct shell *sh)
{
    eddy_error_t e;
    uint32_t i;
    bool failed = false;

    if (sh->stop == STOP_FORK) {
        /* every pid is known and every task held: wait for release */
        report_started(sh);
        report_held(sh, sh->ntasks);
        return;
    }
    /* release them together, then see which ones made it to exec (with
     * stop=exec: to their exec stop, which reap() sees) */
    for (i = 0; i < sh->ntasks; i++)
        (void)task_release_begin(sh->tasks[i].t, NULL);
    for (i = 0; i < sh->ntasks; i++) {
        struct stask *st = &sh->tasks[i];
        if (task_release_end(st->t, &e) < 0) {
            if (task_state(st->t) == TASK_EXITED)
                st->exited = true;
            report_exception(sh, st, errno, e.text);
            failed = true;
        }
    }
    if (failed)
        kill_all(sh, SIGKILL);
    else if (sh->stop != STOP_EXEC)
        report_started(sh);
}

/* --- run ---------------------------------------------------------------- */

/* The job's tmpdir on this node belongs to job-exec, which removes it
 * once it reaped us.  If our broker went away (killed), nobody will:
 * the last of the job here removes it.  (Should the broker live on after
 * all, its own removal finds nothing, which it accepts.) */
static void orphan_tmpdir(struct shell *sh)
{
    const char *tmpdir = getenv("EDDY_JOB_TMPDIR");
    eddy_error_t err = {{0}};

    if (!tmpdir || !*tmpdir || !sh->lost || !all_reaped(sh))
        return;
    if (rmtree(tmpdir, &err) < 0 && errno != ENOENT)
        fprintf(stderr,
                "eddy-shell: job %ju: cannot remove the job tmpdir: %s\n",
                (uintmax_t)sh->id, err.text);
}

int shell_run(struct shell *sh)
{
    if (eddy_future_then(sh->hello, -1, on_hello, sh) < 0)
        broker_lost(sh, strerror(errno));
    sh->running = true;
    reap(sh); /* children that exited before the watcher saw them */
    check_done(sh);
    if (!sh->lost || !all_reaped(sh))
        uv_run(sh->loop, UV_RUN_DEFAULT);
    sh->running = false;
    orphan_tmpdir(sh);
    return sh->failed ? 1 : 0;
}

/* --- PMI ---------------------------------------------------------------- */

/* Each task's PMI_FD socket is read with libuv and fed to the PMI-1
 * engine (pmi_server.h); its answers are written back.  The key exchange
 * at a barrier is kvs.fence to our broker, a collective over the job's
 * brokers; a job on one node needs none.  A task whose socket misbehaves
 * is cut off and logged; the others go on. */

struct pmi_write {
    uv_write_t req;
    char data[];
};

static void pmi_log(int client, const char *text, void *arg)
{
    struct shell *sh = arg;

    fprintf(stderr, "eddy-shell: job %ju: rank %u: PMI: %s\n",
            (uintmax_t)sh->id, sh->tasks[client].rank, text);
}

static void on_pmi_written(uv_write_t *req, int status)
{
    free(req->data);
}

static void pmi_send(int client, const char *line, size_t len, void *arg)
{
    struct shell *sh = arg;
    struct stask *st = &sh->tasks[client];
    struct pmi_write *w;
    uv_buf_t buf;

    if (!st->pmi_open || uv_is_closing((uv_handle_t *)&st->pmi_pipe))
        return;
    if (!(w = malloc(sizeof(*w) + len))) {
        pmi_log(client, "out of memory: answer lost", sh);
        return;
    }
    memcpy(w->data, line, len);
    w->req.data = w;
    buf = uv_buf_init(w->data, (unsigned int)len);
    if (uv_write(&w->req, (uv_stream_t *)&st->pmi_pipe, &buf, 1,
                 on_pmi_written) < 0) {
        pmi_log(client, "cannot write an answer", sh);
        free(w);
    }
}

static int kv_cmp(const void *a, const void *b)
{
    const struct pmi_kv *x = a, *y = b;

    return strcmp(x->key, y->key);
}

/* Decode the whole job's records "KEY\0VALUE\0" ('count' of them, as the
 * broker says) into '*out' (pointers into 'data'; free() the array).  A
 * key put twice is refused here: every shell gets the same bytes, so all
 * of them refuse it.  0, or -1 with 'err' set. */
static int fence_decode(const char *data,
                        size_t len,
                        json_int_t count,
                        struct pmi_kv **out,
                        eddy_error_t *err)
{
    const char *p = data, *end = len ? data + len : data, *nul;
    struct pmi_kv *kvs, *sorted = NULL;
    size_t n = 0;

    /* each record takes at least 2 bytes: bound the allocation */
    if (count < 0 || (size_t)count > len / 2 + 1)
        return errprintf(err, "bad answer: %jd records in %zu bytes",
                         (intmax_t)count, len);
    if (!(kvs = calloc((size_t)count + 1, sizeof(*kvs))))
        return errprintf(err, "out of memory");
    while (p < end) {
        if (n == (size_t)count || !(nul = memchr(p, '\0', (size_t)(end - p))))
            goto bad;
        kvs[n].key = p;
        p = nul + 1;
        if (p >= end || !(nul = memchr(p, '\0', (size_t)(end - p))))
            goto bad;
        kvs[n].value = p;
        p = nul + 1;
        n++;
    }
    if (n != (size_t)count)
        goto bad;
    if (n > 1) {
        if (!(sorted = malloc(n * sizeof(*sorted)))) {
            free(kvs);
            return errprintf(err, "out of memory");
        }
        memcpy(sorted, kvs, n * sizeof(*sorted));
        qsort(sorted, n, sizeof(*sorted), kv_cmp);
        for (size_t i = 1; i < n; i++) {
            if (strcmp(sorted[i - 1].key, sorted[i].key) == 0) {
                errprintf(err, "key '%.64s' put twice", sorted[i].key);
                free(sorted);
                free(kvs);
                return -1;
            }
        }
        free(sorted);
    }
    *out = kvs;
    return 0;
bad:
    free(kvs);
    return errprintf(err, "bad answer: malformed records (%jd expected)",
                     (intmax_t)count);
}

static void on_fence(eddy_future_t *f, void *arg)
{
    struct shell *sh = arg;
    struct pmi_kv *kvs = NULL;
    const void *data;
    size_t len;
    json_int_t count;
    eddy_error_t e;

    if (eddy_rpc_get_unpack(f, "{s:I}", "count", &count) < 0 ||
        eddy_rpc_get_raw(f, &data, &len) < 0) {
        fprintf(stderr, "eddy-shell: job %ju: PMI barrier: kvs.fence: %s\n",
                (uintmax_t)sh->id, eddy_future_error_string(f));
        goto fail;
    }
    if (fence_decode(data, len, count, &kvs, &e) < 0) {
        fprintf(stderr, "eddy-shell: job %ju: PMI barrier: %s\n",
                (uintmax_t)sh->id, e.text);
        goto fail;
    }
    if (pmi_server_fence_done(sh->pmi, kvs, (size_t)count, &e) < 0)
        fprintf(stderr, "eddy-shell: job %ju: PMI barrier: %s\n",
                (uintmax_t)sh->id, e.text);
    free(kvs);
    eddy_future_destroy(f);
    sh->fence = NULL;
    return;
fail:
    eddy_future_destroy(f);
    sh->fence = NULL;
    (void)pmi_server_fence_failed(sh->pmi);
}

/* Every local task is in the barrier: exchange this node's puts with the
 * job's other shells.  They travel as the raw payload, records
 * "KEY\0VALUE\0" (docs/kvs-fence.md): bulk data stays out of JSON. */
static void pmi_fence(const struct pmi_kv *kvs, size_t count, void *arg)
{
    struct shell *sh = arg;
    eddy_error_t e;
    json_t *o = NULL;
    char *text = NULL, *buf = NULL;
    size_t len = 0, off = 0;

    if (sh->slice->nnodes <= 1) {
        if (pmi_server_fence_done(sh->pmi, kvs, count, &e) < 0)
            fprintf(stderr, "eddy-shell: job %ju: PMI barrier: %s\n",
                    (uintmax_t)sh->id, e.text);
        return;
    }
    /* keys and values are bounded by the PMI server: no overflow */
    for (size_t i = 0; i < count; i++)
        len += strlen(kvs[i].key) + strlen(kvs[i].value) + 2;
    if (len && (buf = malloc(len))) {
        for (size_t i = 0; i < count; i++) {
            size_t kl = strlen(kvs[i].key) + 1;
            size_t vl = strlen(kvs[i].value) + 1;
            memcpy(buf + off, kvs[i].key, kl);
            memcpy(buf + off + kl, kvs[i].value, vl);
            off += kl + vl;
        }
    }
    if (!sh->ranks || (len && !buf) ||
        !(o = json_pack("{s:I s:I s:s}", "id", (json_int_t)sh->id, "seq",
                        (json_int_t)(sh->fence_seq + 1), "ranks", sh->ranks)) ||
        !(text = json_dumps(o, JSON_COMPACT)) ||
        !(sh->fence =
              eddy_rpc(sh->h, "kvs.fence", EDDY_RANK_ANY, 0, text, buf, len)) ||
        eddy_future_then(sh->fence, -1, on_fence, sh) < 0) {
        fprintf(stderr, "eddy-shell: job %ju: PMI barrier: cannot send%s\n",
                (uintmax_t)sh->id,
                sh->ranks ? "" : " (no broker ranks in the JOBSLICE)");
        eddy_future_destroy(sh->fence);
        sh->fence = NULL;
        (void)pmi_server_fence_failed(sh->pmi);
    } else
        sh->fence_seq++;
    free(buf);
    free(text);
    json_decref(o);
}

/* MPI_Abort and the like: rank 0 ends the whole job with this exit code
 * and an exception naming the rank. */
static void pmi_abort(int client, int code, const char *msg, void *arg)
{
    struct shell *sh = arg;

    send_event(sh, json_pack("{s:s s:I s:i s:s}", "type", "abort", "rank",
                             (json_int_t)sh->tasks[client].rank, "status",
                             code < 0 ? 1 : code, "note", msg ? msg : ""));
}

/* A task left PMI in the middle (no finalize, or during a barrier): the
 * other tasks would wait for it forever, so the job ends.  Said after its
 * exit report, so that a task that was killed or crashed shows as such;
 * "status" -1: the job's status stays the tasks' own. */
static void report_lost(struct shell *sh, struct stask *st)
{
    char note[128];

    if (!st->pmi_lost || !st->exited || sh->lost)
        return;
    st->pmi_lost = false;
    flush_exits(sh); /* rank 0 sees the exit first */
    snprintf(note, sizeof(note),
             "rank %u exited (status %d) without PMI finalize", st->rank,
             task_exit_code(task_status(st->t)));
    send_event(sh, json_pack("{s:s s:I s:i s:s}", "type", "abort", "rank",
                             (json_int_t)st->rank, "status", -1, "note", note));
}

static void pmi_lost(int client, void *arg)
{
    struct shell *sh = arg;

    sh->tasks[client].pmi_lost = true;
    report_lost(sh, &sh->tasks[client]);
}

static int pmi_create(struct shell *sh, eddy_error_t *err)
{
    static const struct pmi_server_ops ops = {
        .send = pmi_send,
        .fence = pmi_fence,
        .abort = pmi_abort,
        .log = pmi_log,
        .lost = pmi_lost,
    };
    struct pmi_server_params p = {0};
    char kvsname[64];
    int *appnum;

    if (sh->ntasks == 0)
        return 0;
    if (!(appnum = calloc(sh->ntasks, sizeof(*appnum)))) {
        errno = ENOMEM;
        return errprintf(err, "out of memory");
    }
    for (uint32_t i = 0; i < sh->ntasks; i++) {
        int g = jobspec_task_group(sh->js, sh->tasks[i].rank);
        appnum[i] = g < 0 ? 0 : g;
    }
    snprintf(kvsname, sizeof(kvsname), "eddy-%ju", (uintmax_t)sh->id);
    p.kvsname = kvsname;
    p.universe_size = (int)sh->slice->size;
    p.nclients = (int)sh->ntasks;
    p.appnum = appnum;
    p.hold_init = sh->stop == STOP_INIT;
    sh->pmi = pmi_server_create(&p, &ops, sh, err);
    free(appnum);
    if (!sh->pmi)
        return -1;
    /* MPICH learns which ranks share a node from PMI_process_mapping
     * (and uses shared memory between them).  Tasks are laid out in
     * blocks, one per node in node order; with the same count on every
     * node the mapping is one block.  Otherwise leave it out: MPICH then
     * assumes nothing is shared, which is slower but correct. */
    if (sh->slice->size % sh->slice->nnodes == 0) {
        char map[64];
        snprintf(map, sizeof(map), "(vector,(0,%u,%u))", sh->slice->nnodes,
                 sh->slice->size / sh->slice->nnodes);
        if (pmi_server_kvs_put(sh->pmi, "PMI_process_mapping", map, err) < 0)
            return -1;
    }
    return 0;
}

static void shell_pmi_release(struct shell *sh)
{
    if (sh->pmi)
        (void)pmi_server_release(sh->pmi);
}

/* stop=init: note each task's first cmd=init (the engine withholds the
 * answer); once every local task sent one, they are held.  Only the first
 * bytes of each line are looked at. */
static bool is_init(const char *head, size_t len)
{
    return len >= 8 && !strncmp(head, "cmd=init", 8) &&
           (len == 8 || head[8] == ' ' || head[8] == '\t');
}

static void pmi_watch_init(struct shell *sh,
                           struct stask *st,
                           const char *p,
                           size_t len)
{
    for (size_t i = 0; i < len && !st->init_seen; i++) {
        bool init = false;

        if (p[i] == '\n') {
            init = !st->head_done && is_init(st->head, st->headlen);
            st->headlen = 0;
            st->head_done = false;
        } else if (!st->head_done) {
            st->head[st->headlen++] = p[i];
            if (st->headlen == sizeof(st->head)) {
                init = is_init(st->head, st->headlen);
                st->head_done = true; /* the rest of the line is not ours */
            }
        }
        if (init) {
            st->init_seen = true;
            if (++sh->ninit == sh->ntasks)
                report_held(sh, sh->ntasks);
        }
    }
}

static void on_pmi_closed(uv_handle_t *h)
{
}

static void pmi_close(struct stask *st)
{
    if (st->pmi_open && !uv_is_closing((uv_handle_t *)&st->pmi_pipe))
        uv_close((uv_handle_t *)&st->pmi_pipe, on_pmi_closed);
    if (st->pmi_fd >= 0) {
        close(st->pmi_fd);
        st->pmi_fd = -1;
    }
}

static void on_pmi_shutdown(uv_shutdown_t *req, int status)
{
    struct stask *st = req->data;

    pmi_close(st);
    free(req);
}

/* Stop feeding the engine; close once what is queued was written. */
static void pmi_cut(struct stask *st)
{
    uv_shutdown_t *req;

    if (!st->pmi_reading)
        return;
    st->pmi_reading = false;
    uv_read_stop((uv_stream_t *)&st->pmi_pipe);
    (void)pmi_server_client_gone(st->sh->pmi, (int)st->local_rank);
    if ((req = calloc(1, sizeof(*req)))) {
        req->data = st;
        if (uv_shutdown(req, (uv_stream_t *)&st->pmi_pipe, on_pmi_shutdown) ==
            0)
            return;
        free(req);
    }
    pmi_close(st);
}

static void pmi_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    static char chunk[PMI_SERVER_LINE_MAX];

    /* one read at a time in this one thread: a static buffer is enough */
    *buf = uv_buf_init(chunk, sizeof(chunk));
}

static void on_pmi_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct stask *st = s->data;
    struct shell *sh = st->sh;

    if (nread == 0)
        return;
    if (nread < 0) {
        if (nread != UV_EOF)
            pmi_log((int)st->local_rank, uv_strerror((int)nread), sh);
        pmi_cut(st);
        return;
    }
    if (sh->stop == STOP_INIT && !st->init_seen)
        pmi_watch_init(sh, st, buf->base, (size_t)nread);
    if (pmi_server_feed(sh->pmi, (int)st->local_rank, buf->base,
                        (size_t)nread) < 0) {
        if (errno != EPROTO)
            pmi_log((int)st->local_rank, strerror(errno), sh);
        pmi_cut(st);
    }
}

static int pmi_open(struct shell *sh, struct stask *st)
{
    int rc;

    if (!sh->pmi || st->pmi_fd < 0)
        return 0;
    if ((rc = uv_pipe_init(sh->loop, &st->pmi_pipe, 0)) < 0) {
        errno = -rc;
        return -1;
    }
    st->pmi_open = true;
    st->pmi_pipe.data = st;
    if ((rc = uv_pipe_open(&st->pmi_pipe, st->pmi_fd)) < 0) {
        pmi_close(st);
        errno = -rc;
        return -1;
    }
    st->pmi_fd = -1; /* the pipe owns it */
    if ((rc = uv_read_start((uv_stream_t *)&st->pmi_pipe, pmi_alloc,
                            on_pmi_read)) < 0) {
        pmi_close(st);
        errno = -rc;
        return -1;
    }
    st->pmi_reading = true;
    /* the loop may end while tasks keep their socket open */
    uv_unref((uv_handle_t *)&st->pmi_pipe);
    return 0;
}

static void pmi_close_all(struct shell *sh)
{
    bool any = false;

    for (uint32_t i = 0; sh->tasks && i < sh->ntasks; i++) {
        any = any || sh->tasks[i].pmi_open;
        pmi_close(&sh->tasks[i]);
    }
    if (any)
        uv_run(sh->loop, UV_RUN_NOWAIT);
}

/* --- plugins ------------------------------------------------------------ */

static void on_log_answer(eddy_future_t *f, void *arg)
{
    struct shell *sh = arg;

    /* refused once the stream is at EOF: the broker log still has it */
    sh->pl_logs--;
    sh->events--;
    eddy_future_destroy(f);
    check_done(sh);
}

/* A plugin's log line into the job's stderr output, as the output of our
 * first task rank. */
static void plugin_log_job(const char *line, void *arg)
{
    struct shell *sh = arg;
    eddy_future_t *f = NULL;
    json_t *o;
    char *text = NULL;

    if (sh->lost || sh->ntasks == 0 || sh->pl_logs >= SHELL_PLUGIN_LOGS_MAX)
        return;
    if (!(o = json_pack("{s:I s:I s:s}", "id", (json_int_t)sh->id, "rank",
                        (json_int_t)sh->tasks[0].rank, "stream", "stderr")) ||
        !(text = json_dumps(o, JSON_COMPACT)) ||
        !(f = eddy_rpc(sh->h, "job-io.write", 0, 0, text, line,
                       strlen(line))) ||
        eddy_future_then(f, -1, on_log_answer, sh) < 0) {
        eddy_future_destroy(f);
    } else {
        sh->pl_logs++;
        sh->events++;
    }
    free(text);
    json_decref(o);
}

/* A plugin's log line, for `eddy dmesg` on our broker too.  Fire and
 * forget: a lost line is not worth holding the shell for. */
static void plugin_log_broker(int level, const char *line, void *arg)
{
    struct shell *sh = arg;
    eddy_future_t *f;

    if (sh->lost)
        return;
    level = level < LOG_LEVEL_ERR     ? LOG_LEVEL_ERR
            : level > LOG_LEVEL_DEBUG ? LOG_LEVEL_DEBUG
                                      : level;
    f = eddy_rpc_pack(sh->h, "broker.log", EDDY_RANK_ANY, EDDY_RPC_NORESPONSE,
                      "{s:i s:s}", "level", level, "text", line);
    eddy_future_destroy(f);
}

/* A plugin failed once the tasks were running (or at shell.exit): the
 * job ends with an exception carrying 'note'; what plugins spawned dies.
 * Only the first failure is reported. */
static void plugins_fail_async(struct shell *sh, const char *note)
{
    fprintf(stderr, "eddy-shell: job %ju: %s\n", (uintmax_t)sh->id, note);
    plugins_kill_spawned(sh->plugins);
    if (sh->pl_failed || sh->lost || sh->ntasks == 0)
        return;
    sh->pl_failed = true;
    flush_exits(sh); /* rank 0 sees the exits first */
    send_event(sh, json_pack("{s:s s:I s:i s:s}", "type", "abort", "rank",
                             (json_int_t)sh->tasks[0].rank, "status", -1,
                             "note", note));
}

static void plugin_fail_cb(const char *note, void *arg)
{
    plugins_fail_async(arg, note);
}

/* A plugin failed before any task ran (shell.init, shell.start, or the
 * process table exchange): the first local task carries the exception,
 * the others are not started (never forked) or cancelled (held: they
 * exit TASK_EXIT_CANCELLED without running the program). */
static void plugins_fail_start(struct shell *sh, int errnum, const char *note)
{
    bool first = true;

    fprintf(stderr, "eddy-shell: job %ju: %s\n", (uintmax_t)sh->id, note);
    sh->pl_failed = true;
    sh->pl_waiting = false;
    plugins_kill_spawned(sh->plugins);
    plugins_started(sh->plugins);
    for (uint32_t i = 0; i < sh->ntasks; i++) {
        struct stask *st = &sh->tasks[i];
        if (st->forked && !st->exited)
            task_cancel(st->t);
        if (st->reported)
            continue;
        if (first)
            report_exception(sh, st, errnum, note);
        else if (!st->forked)
            report_exception(sh, st, ECANCELED, "not started: a plugin failed");
        first = false;
    }
}

/* The job's broker rank at our node index (the JOBSLICE's "ranks" in
 * order); the node index if the slice has none. */
static uint32_t broker_rank_of(const struct shell *sh)
{
    idset_t *set;
    uint32_t r, i = 0, rank = sh->slice->node_index;

    if (!sh->ranks || !(set = idset_decode(sh->ranks, NULL)))
        return rank;
    for (r = idset_first(set); r != IDSET_INVALID; r = idset_next(set, r))
        if (i++ == sh->slice->node_index) {
            rank = r;
            break;
        }
    idset_destroy(set);
    return rank;
}

/* Load the instance's plugins, then the job's, and call shell.init.
 * Without any, no plugin context exists. */
static int plugins_init(struct shell *sh, eddy_error_t *err)
{
    static const struct plugins_ops ops = {
        .log_job = plugin_log_job,
        .log_broker = plugin_log_broker,
        .fail = plugin_fail_cb,
    };
    json_t *list = json_object_get(jobspec_shell_options(sh->js), "plugins");
    const char *dirs = getenv(PLUGIN_DIRS_ENV);
    struct plugins_info info = {0};
    uint32_t *ranks;
    size_t i;
    json_t *v;

    if (json_array_size(list) == 0 && (!dirs || !*dirs))
        return 0;
    sh->broker_rank = broker_rank_of(sh);
    if (!(ranks = calloc(sh->ntasks + 1, sizeof(*ranks)))) {
        errno = ENOMEM;
        return errprintf(err, "plugins: out of memory");
    }
    for (uint32_t t = 0; t < sh->ntasks; t++)
        ranks[t] = sh->tasks[t].rank;
    info.jobid = sh->id;
    info.ntasks = sh->slice->size;
    info.nnodes = sh->slice->nnodes;
    info.node_index = sh->slice->node_index;
    info.node_rank = sh->broker_rank;
    info.nlocal = sh->ntasks;
    info.local_ranks = ranks;
    sh->plugins = plugins_create(&info, &ops, sh);
    free(ranks);
    if (!sh->plugins)
        return errprintf(err, "plugins: %s", strerror(errno));
    if (plugins_load_dirs(sh->plugins, dirs, err) < 0)
        return -1;
    /* jobspec_decode() checked the shape of the list */
    json_array_foreach(list, i, v)
    {
        const char *path = json_string_value(json_object_get(v, "path"));
        const char *args = json_string_value(json_object_get(v, "args"));
        if (plugins_load(sh->plugins, path, args, err) < 0)
            return -1;
    }
    return plugins_call(sh->plugins, "shell.init", -1, err);
}

/* This node's part of the process table, as report_started() tells rank
 * 0 (absolute executable paths). */
static proctable_t *local_proctable(struct shell *sh, eddy_error_t *err)
{
    char host[256] = "";
    proctable_t *pt;

    if (gethostname(host, sizeof(host) - 1) < 0 || !host[0])
        snprintf(host, sizeof(host), "rank%u", sh->broker_rank);
    if (!(pt = proctable_create())) {
        errprintf(err, "out of memory");
        return NULL;
    }
    for (uint32_t i = 0; i < sh->ntasks; i++) {
        struct stask *st = &sh->tasks[i];
        char abs[PATH_MAX];
        const char *path = task_abs_path(sh, st, abs, sizeof(abs));
        struct proctable_entry e = {0};

        e.rank = st->rank;
        e.broker_rank = sh->broker_rank;
        e.appnum = jobspec_task_group(sh->js, st->rank);
        e.pid = (int32_t)task_pid(st->t);
        e.hostname = host;
        e.executable = path && *path ? path : "?";
        if (proctable_add(pt, &e) < 0) {
            errprintf(err, "rank %u: %s", st->rank, strerror(errno));
            proctable_destroy(pt);
            return NULL;
        }
    }
    return pt;
}

/* Every task of the job is forked and held and the table is known: call
 * shell.start, then go on as without plugins.  If a task is already gone
 * (the job is being killed while we waited), nothing is started. */
static void plugins_shell_start(struct shell *sh)
{
    eddy_error_t e;
    bool gone = sh->lost;

    sh->pl_waiting = false;
    for (uint32_t i = 0; i < sh->ntasks; i++)
        if (sh->tasks[i].exited || task_state(sh->tasks[i].t) != TASK_HELD)
            gone = true;
    if (gone) {
        for (uint32_t i = 0; i < sh->ntasks; i++)
            if (sh->tasks[i].forked && !sh->tasks[i].exited)
                task_cancel(sh->tasks[i].t);
        plugins_started(sh->plugins);
        return;
    }
    if (plugins_call(sh->plugins, "shell.start", -1, &e) < 0) {
        plugins_fail_start(sh, errno, e.text);
        return;
    }
    plugins_started(sh->plugins);
    start_continue(sh);
}

static void on_pl_fence(eddy_future_t *f, void *arg)
{
    struct shell *sh = arg;
    proctable_t *pt = NULL;
    json_int_t count;
    const void *data;
    size_t len;
    eddy_error_t e, why;

    if (eddy_rpc_get_unpack(f, "{s:I}", "count", &count) < 0 ||
        eddy_rpc_get_raw(f, &data, &len) < 0) {
        errprintf(&e, "node %u: shell.start: process table exchange: %s",
                  sh->broker_rank, eddy_future_error_string(f));
        goto fail;
    }
    if (!(pt = proctable_create())) {
        errprintf(&e, "node %u: shell.start: out of memory", sh->broker_rank);
        goto fail;
    }
    if (plugin_pt_merge(pt, data, len, &why) < 0) {
        errprintf(&e, "node %u: shell.start: %s", sh->broker_rank, why.text);
        goto fail;
    }
    if (!proctable_is_complete(pt, sh->slice->size)) {
        errno = EPROTO;
        errprintf(&e,
                  "node %u: shell.start: process table exchange: %zu of %u "
                  "tasks",
                  sh->broker_rank, proctable_count(pt), sh->slice->size);
        goto fail;
    }
    eddy_future_destroy(f);
    sh->pl_fence = NULL;
    plugins_set_proctable(sh->plugins, pt);
    plugins_shell_start(sh);
    check_done(sh);
    return;
fail:
    proctable_destroy(pt);
    eddy_future_destroy(f);
    sh->pl_fence = NULL;
    plugins_fail_start(sh, errno ? errno : EPROTO, e.text);
    check_done(sh);
}

/* Exchange the local process tables of the job's shells (kvs.fence, the
 * collective of the PMI barrier, as fence number 1), then shell.start.
 * Failures fail the job (an exception), not the shell: 0. */
static int plugins_exchange(struct shell *sh)
{
    proctable_t *pt;
    char *key = NULL, *value = NULL, *buf = NULL, *text = NULL;
    size_t klen, vlen;
    json_t *o = NULL;
    eddy_error_t e, why;

    if (!(pt = local_proctable(sh, &why))) {
        errprintf(&e, "node %u: shell.start: process table: %s",
                  sh->broker_rank, why.text);
        goto fail;
    }
    if (sh->slice->nnodes <= 1) {
        plugins_set_proctable(sh->plugins, pt);
        plugins_shell_start(sh);
        return 0;
    }
    if (plugin_pt_record(pt, sh->slice->node_index, &key, &value) < 0) {
        proctable_destroy(pt);
        errprintf(&e, "node %u: shell.start: process table: %s",
                  sh->broker_rank, strerror(errno));
        goto fail;
    }
    proctable_destroy(pt);
    klen = strlen(key) + 1;
    vlen = strlen(value) + 1;
    if (!sh->ranks || !(buf = malloc(klen + vlen))) {
        errno = sh->ranks ? ENOMEM : EPROTO;
        errprintf(&e, "node %u: shell.start: %s", sh->broker_rank,
                  sh->ranks ? "out of memory" : "no broker ranks in the slice");
        goto fail;
    }
    memcpy(buf, key, klen);
    memcpy(buf + klen, value, vlen);
    if (!(o = json_pack("{s:I s:I s:s}", "id", (json_int_t)sh->id, "seq",
                        (json_int_t)(sh->fence_seq + 1), "ranks", sh->ranks)) ||
        !(text = json_dumps(o, JSON_COMPACT)) ||
        !(sh->pl_fence = eddy_rpc(sh->h, "kvs.fence", EDDY_RANK_ANY, 0, text,
                                  buf, klen + vlen)) ||
        eddy_future_then(sh->pl_fence, -1, on_pl_fence, sh) < 0) {
        errprintf(&e, "node %u: shell.start: cannot send the process table: %s",
                  sh->broker_rank, strerror(errno));
        eddy_future_destroy(sh->pl_fence);
        sh->pl_fence = NULL;
        goto fail;
    }
    sh->fence_seq++;
    sh->pl_waiting = true;
    free(key);
    free(value);
    free(buf);
    free(text);
    json_decref(o);
    return 0;
fail:
    free(key);
    free(value);
    free(buf);
    free(text);
    json_decref(o);
    plugins_fail_start(sh, errno ? errno : EIO, e.text);
    return 0;
}

/* A task was reaped: tell the plugins. */
static void plugins_task_exit(struct shell *sh, struct stask *st)
{
    eddy_error_t e;

    if (!sh->plugins)
        return;
    plugins_task_exited(sh->plugins, st->local_rank,
                        task_exit_code(task_status(st->t)));
    if (plugins_call(sh->plugins, "task.exit", (int)st->local_rank, &e) < 0)
        plugins_fail_async(sh, e.text);
}

/* Every local task is over: shell.exit, once, then what plugins spawned
 * and still runs is killed. */
static void plugins_exit(struct shell *sh)
{
    eddy_error_t e;
    int rc;

    if (!sh->plugins || sh->pl_exit_done)
        return;
    sh->pl_exit_done = true;
    rc = plugins_call(sh->plugins, "shell.exit", -1, &e);
    plugins_kill_spawned(sh->plugins);
    if (rc < 0)
        plugins_fail_async(sh, e.text);
}
