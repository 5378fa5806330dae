/* shell.c - eddy-shell's job state: tasks, reports to job-exec, commands.
 *
 * The shell is single-threaded on its handle's libuv loop.  It reaps its
 * own children (task.h leaves that to us) from a SIGCHLD watcher with
 * waitpid(-1): the shell has no other children.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>

#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/jobslice.h"
#include "src/common/jobspec.h"
#include "src/shell/io.h"
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
};

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
};

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

static void report_exit(struct shell *sh, struct stask *st)
{
    if (st->reported)
        return;
    st->reported = true;
    send_event(sh, json_pack("{s:s s:I s:i}", "type", "exit", "rank",
                             (json_int_t)st->rank, "status",
                             task_exit_code(task_status(st->t))));
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
static void check_done(struct shell *sh)
{
    if (!sh->running || !all_reaped(sh))
        return;
    if (!sh->lost) {
        for (uint32_t i = 0; i < sh->ntasks; i++)
            if (!sh->tasks[i].reported)
                return;
        if (sh->events > 0 || !shell_io_done(sh->io))
            return;
    }
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

static void reap(struct shell *sh)
{
    struct stask *st;
    pid_t pid;
    int status;

    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        if (!(st = find_pid(sh, pid)) || st->exited)
            continue;
        if (!WIFEXITED(status) && !WIFSIGNALED(status))
            continue; /* a stop: not ours to handle yet */
        (void)task_set_exited(st->t, status);
        st->exited = true;
        shell_io_stdin_close(sh->io, st->rank);
        if (!sh->lost)
            report_exit(sh, st);
    }
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
            (void)task_kill(st->t, signum);
    }
    idset_destroy(set);
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
    int eof = 0;
    const void *data = NULL;
    size_t len = 0;

    if (eddy_rpc_get_unpack(f, "{s:s s?I s?s s?I s?b}", "type", &type, "signum",
                            &signum, "ranks", &ranks, "rank", &rank, "eof",
                            &eof) < 0) {
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

void shell_destroy(struct shell *sh)
{
    int saved_errno = errno;

    if (!sh)
        return;
    /* no more commands: the loop runs again below, to finish closes */
    eddy_future_destroy(sh->hello);
    sh->hello = NULL;
    for (uint32_t i = 0; i < sh->ntasks; i++) {
        if (sh->tasks[i].forked && !sh->tasks[i].exited)
            (void)task_kill(sh->tasks[i].t, SIGKILL);
        task_destroy(sh->tasks[i].t);
    }
    free(sh->tasks);
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
    if (!(o = json_loads(text, 0, NULL)) ||
        !(sh->slice = jobslice_decode(o, &e))) {
        errno = EPROTO;
        errprintf(err, "%s", o ? e.text : "JOBSLICE: not JSON");
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
    char **env;

    if (g < 0) {
        errno = EINVAL;
        return errprintf(err, "rank %u: not a task of the jobspec", st->rank);
    }
    if (!(env = taskenv_create(jobspec_environment(sh->js),
                               (const char *const *)environ, &ids, err)))
        return -1;
    spec.rank = st->rank;
    spec.argv = jobspec_group_argv(sh->js, (uint32_t)g);
    spec.envp = (const char *const *)env;
    spec.cwd = jobspec_cwd(sh->js);
    spec.io[0].kind = sh->slice->has_stdin ? TASK_IO_PIPE : TASK_IO_NULL;
    spec.io[1].kind = TASK_IO_PIPE;
    spec.io[2].kind = TASK_IO_PIPE;
    spec.hold = true;
    spec.pgrp = true;
    st->t = task_create(&spec, err);
    taskenv_destroy(env);
    if (!st->t)
        return -1;
    if (task_start(st->t, err) < 0) {
        if (task_state(st->t) == TASK_EXITED)
            st->forked = st->exited = true;
        return -1;
    }
    st->forked = true;
    return 0;
}

/* Hand the task's pipes to the I/O forwarder. */
static int task_io(struct shell *sh, struct stask *st)
{
    return shell_io_add_task(sh->io, st->rank, task_take_fd(st->t, 0),
                             task_take_fd(st->t, 1), task_take_fd(st->t, 2));
}

static void report_started(struct shell *sh)
{
    json_t *tasks = json_array();

    for (uint32_t i = 0; tasks && i < sh->ntasks; i++) {
        if (json_array_append_new(
                tasks, json_pack("[I,I]", (json_int_t)sh->tasks[i].rank,
                                 (json_int_t)task_pid(sh->tasks[i].t))) < 0) {
            json_decref(tasks);
            tasks = NULL;
        }
    }
    if (!tasks) {
        errno = ENOMEM;
        fprintf(stderr, "eddy-shell: job %ju: cannot report started\n",
                (uintmax_t)sh->id);
        sh->failed = true;
        return;
    }
    send_event(sh, json_pack("{s:s s:o}", "type", "started", "tasks", tasks));
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
    /* release them together, then see which ones made it to exec */
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
    else
        report_started(sh);
    return 0;
}

/* --- run ---------------------------------------------------------------- */

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
    return sh->failed ? 1 : 0;
}
