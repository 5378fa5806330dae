/* task.h - fork and exec one task of a job, optionally held before exec.
 *
 * eddy-shell runs one task_t per task on its node.  The engine forks and
 * execs; it never waits for children in the background: the shell's reaper
 * (a SIGCHLD watcher calling waitpid) owns that, and tells the task what it
 * found with task_set_exited().
 *
 * Lifecycle:
 *  1. task_create() copies a spec (argv, environment, cwd, stdio, extra
 *     fds, flags).  No process exists yet.  State TASK_CREATED.
 *  2. task_start() resolves the program in the parent (PATH of the task's
 *     own environment), creates the stdio pipes and forks.  The pid is
 *     known as soon as it returns.  In the child: signal dispositions are
 *     reset, the process group is made, stdio and extra fds are put in
 *     place, every other fd is closed, the cwd is entered.
 *  3. Held (spec.hold): the child then waits on the hold channel, not yet
 *     running the program.  State TASK_HELD.  Without hold the child goes
 *     straight on and task_start() returns only once execve() succeeded or
 *     failed.
 *     task_setenv() on a held task queues an environment change that
 *     the release carries to the child.
 *  4. task_release() lets a held child execve() and reports whether it
 *     did (after the spec's pre_exec hook, if any, ran in the child).
 * task_release_begin() on every task then task_release_end() on every task
 * releases many tasks in parallel.  task_cancel() (or task_destroy()) instead
 * makes a held child _exit with TASK_EXIT_CANCELLED without running the
 * program.
 *  5. Running: state TASK_RUNNING.  task_kill() signals it (also while
 *     held); the output pipes carry its stdout/stderr.
 *  6. Exited: the caller's reaper calls task_set_exited(t, wstatus);
 *     task_exit_code() turns the status into a shell-style code.
 *  7. task_destroy() closes the pipes the caller did not take and frees.
 *     It neither kills nor reaps.
 *
 * Failures: before the fork (bad spec, program not found on PATH, no
 * pipes) a call fails with no side effect.  After the fork (chdir, dup2 or
 * execve failed in the child) the child reports errno and the failing step
 * on a close-on-exec pipe and exits 127 (ENOENT) or 126; the failing call
 * (task_start without hold, task_release with hold) then reaps the child
 * itself, records its status (state TASK_EXITED) and returns -1 with errno
 * and a message such as "rank 3: cannot run 'nosuch': No such file or
 * directory" (for a failed pre_exec hook: "rank 3: " and the hook's
 * message; exit code 126).  The caller's reaper therefore never sees those
 * children, except a held child that failed before release and was reaped (and
 * passed to task_set_exited) first; task_release still reports its error.
 *
 * Invariants: the engine never calls waitpid() except on a child it knows
 * has failed and is exiting; every fd the parent keeps is close-on-exec;
 * the task gets fds 0-2 and the extra fds it asked for, nothing else.
 * Not thread-safe: call from the shell's one thread.
 */
#ifndef EDDY_SHELL_TASK_H
#define EDDY_SHELL_TASK_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "eddy/core.h"

/* Exit status of a held child that was cancelled before release (the
 * program never ran). */
#define TASK_EXIT_CANCELLED 125

typedef struct task task_t;

/* Runs in the forked child after the release, before exec (and before
 * PTRACE_TRACEME): may call task_setenv(t, ...) on its own task.  Return
 * -1 (with errno) to make the task fail its exec, with 'msg' (a buffer of
 * 'size' bytes, empty on entry) saying why.  The child is a copy of the
 * single-threaded shell, so allocating is tolerable; the parent's event
 * loop must not be touched. */
typedef int (*task_pre_exec_f)(task_t *t, void *arg, char *msg, size_t size);

/* Environment changes queued on a held task (task_setenv) are bounded: they
 * travel to the child over its hold channel. */
#define TASK_ENVMODS_MAX (1024 * 1024)

enum task_state {
    TASK_CREATED = 0,
    TASK_HELD,    /* forked, waiting for release before exec */
    TASK_RUNNING, /* no longer held: exec'd, or cancelled and exiting */
    TASK_EXITED,  /* status recorded */
};

/* Where one of the task's standard fds comes from.  Zero-initialised means
 * /dev/null. */
enum task_io_kind {
    TASK_IO_NULL = 0, /* /dev/null (read-write) */
    TASK_IO_INHERIT,  /* the caller's fd `fd`, dup2'd in the child */
    TASK_IO_PIPE,     /* a new pipe; the parent end is task_fd() */
};

struct task_io {
    enum task_io_kind kind;
    int fd; /* TASK_IO_INHERIT only: borrowed, the caller keeps it open */
};

/* An extra fd passed to the task: the caller's `fd` (borrowed) appears in
 * the task as `target` (>= 3), e.g. a PMI socket. */
struct task_fdmap {
    int fd;
    int target;
};

struct task_spec {
    unsigned int rank;            /* for messages only */
    const char *const *argv;      /* NULL-terminated, at least argv[0] */
    const char *const *envp;      /* NULL-terminated; the task's whole
                                   * environment.  NULL means empty. */
    const char *cwd;              /* NULL: the shell's own */
    struct task_io io[3];         /* stdin, stdout, stderr */
    const struct task_fdmap *fds; /* nfds extra fds, targets distinct */
    size_t nfds;
    bool hold;       /* wait for task_release() before exec */
    bool pgrp;       /* child calls setpgid(0, 0); task_kill() hits the group */
    bool trace_exec; /* PTRACE_TRACEME just before execve(): the task stops
                      * with SIGTRAP at its first instruction.  The parent
                      * (the tracer) sees the stop with waitpid() and
                      * usually calls task_trace_detach(t, SIGSTOP).  Any
                      * signal the child gets while traced is a ptrace stop
                      * too, so the reaper must expect WIFSTOPPED. */
    task_pre_exec_f pre_exec; /* NULL: none */
    void *pre_exec_arg;
};

/* Copy `spec` into a new task.  Returns NULL with errno EINVAL (and a
 * message naming the field) if argv is empty, an io kind or fd is invalid,
 * or an extra fd target is < 3 or repeated; ENOMEM.  Caller destroys with
 * task_destroy(). */
task_t *task_create(const struct task_spec *spec, eddy_error_t *err);

/* Close the parent ends the caller did not take (a held task is thereby
 * cancelled) and free.  Neither kills nor reaps.  Accepts NULL; preserves
 * errno. */
void task_destroy(task_t *t);

/* Fork the task (see lifecycle).  Without hold, returns once the program
 * is running.  Errors: EINVAL (already started), ENOENT/EACCES (program
 * not found or not executable on PATH: no process was made), errno of a
 * failed chdir/dup2/execve in the child (child reaped, state
 * TASK_EXITED), or of pipe/fork. */
int task_start(task_t *t, eddy_error_t *err);

/* Release a held task and wait until it has exec'd.  Returns 0 once the
 * program runs; -1 with the child's errno and a message if it could not
 * (state TASK_EXITED), ESRCH if it died while held (killed or cancelled),
 * EINVAL if not held. */
int task_release(task_t *t, eddy_error_t *err);

/* task_release() in two halves so that many children exec in parallel:
 * _begin sends the release (-1 EINVAL if not held or already released),
 * _end waits for the outcome and fails as task_release() does.  ESRCH
 * means the child died before it could exec (killed while held): unlike
 * an exec failure it is left for the caller's reaper. */
int task_release_begin(task_t *t, eddy_error_t *err);
int task_release_end(task_t *t, eddy_error_t *err);

/* Set NAME=VALUE (value NULL: remove NAME) in the environment the task
 * will exec with.  Before task_start() it changes the copied envp; while
 * the task is held (not yet released) the change is queued and sent with
 * the release; in the child, from the pre_exec hook, it changes the
 * child's envp.  Changes apply in call order.  -1 with errno EINVAL (NULL
 * task or name, empty name or one holding '='), EBUSY (released or
 * running), E2BIG (queued changes beyond TASK_ENVMODS_MAX), ENOMEM. */
int task_setenv(task_t *t, const char *name, const char *value);

/* Cancel a held task: its child exits TASK_EXIT_CANCELLED without running
 * the program; the caller still reaps it.  No-op if not held. */
void task_cancel(task_t *t);

/* Send `sig` to the task's process group (spec.pgrp) or process.  Works
 * held or running.  With pgrp it still signals the group after the task
 * exited, to reach descendants left behind.  Errors: EINVAL (not
 * started), ESRCH (no such process/group), errno of kill(). */
int task_kill(task_t *t, int sig);

/* Detach from a task started with trace_exec that the caller saw stopped
 * (waitpid), delivering `sig` (SIGSTOP leaves it stopped for a debugger,
 * 0 lets it run).  -1 with errno of ptrace() on failure. */
int task_trace_detach(task_t *t, int sig);

/* Record the wait status the caller's reaper got for this task.  EINVAL if
 * the task has no process or `wstatus` is not an exit or a death by
 * signal (a stop is not an exit). */
int task_set_exited(task_t *t, int wstatus);

/* Shell-style exit code of a wait status: the exit status, or 128+signal;
 * -1 if the status is neither. */
int task_exit_code(int wstatus);

/* Accessors.  task_pid: -1 before start.  task_status: the recorded wait
 * status, -1 until exited.  task_path: the resolved program path (valid
 * after task_start, NULL before).  task_fd: the parent end of stdio pipe
 * 0, 1 or 2 (close-on-exec, non-blocking; owned by the task), -1 if none.
 * task_take_fd: the same, but the caller now owns it (e.g. for
 * uv_pipe_open) and the task forgets it. */
enum task_state task_state(const task_t *t);
pid_t task_pid(const task_t *t);
unsigned int task_rank(const task_t *t);
int task_status(const task_t *t);
const char *task_path(const task_t *t);
int task_fd(const task_t *t, int stdfd);
int task_take_fd(task_t *t, int stdfd);

#endif /* !EDDY_SHELL_TASK_H */
