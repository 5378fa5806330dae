/* eddy/shell.h - job-shell plugins: code that runs inside eddy-shell.
 *
 * A plugin is a shared object that eddy-shell (one per job per node)
 * loads before it starts the job's tasks: from `eddy run -o
 * plugin=PATH.so[,ARGS]` (the job's own, in order) and from the instance's
 * plugin directories (`eddy start --shell-plugin-dir=DIR`: every *.so
 * there, sorted by name, before the job's).  docs/plugins.md is the guide.
 *
 * Lifecycle of a plugin, in one shell:
 *  1. dlopen(PATH, RTLD_NOW | RTLD_LOCAL), then its exported
 *     eddy_plugin_init(p, ARGS) (ARGS is "" when none was given).  It
 *     registers callbacks with eddy_shell_plugin_on() and returns 0, or -1
 *     to refuse the job (after eddy_shell_fail() to say why).
 *  2. "shell.init" - the job is known (ID, sizes, local task ranks); no
 *     task exists yet.  eddy_shell_setenv() here applies to every local
 *     task.
 *  3. "task.init" - once per local task, in the task's own process after
 *     fork and before exec (so only eddy_shell_task_setenv(),
 *     eddy_shell_log() and eddy_shell_fail() make sense there; the shell's
 *     event loop is not to be touched).
 *     Ordering: task.init runs when the task is released to exec, i.e.
 *     after shell.start when some plugin registered shell.start.
 *  4. "shell.start" - only if some plugin registered it: every task of the
 *     job on every node is forked and held before exec, and the job's
 *     GLOBAL process table is known (eddy_shell_proctable_get()).
 *     eddy_shell_setenv() here reaches the held tasks before they exec.
 *     With a startup barrier (--stop) the tasks then stay held until
 *     released, as without plugins.
 *  5. "task.exit" - once per local task, in the shell, after the task was
 *     reaped (eddy_shell_task_exit_code()).
 *  6. "shell.exit" - once, when every local task has ended, before the
 *     shell ends.  Processes from eddy_shell_spawn() still running then
 *     are killed (SIGKILL to their process group).
 *
 * An argument string that a plugin does not understand should fail its
 * eddy_plugin_init() with a message saying so.
 *
 * Callbacks of one topic run in load order.  Every node loads the same
 * plugins and must register the same topics (shell.start is a collective
 * across the job's shells).
 *
 * Failure: a callback (or eddy_plugin_init) that returns -1 fails the
 * job: the job gets a fatal exception whose note names the node, the
 * plugin's path, the callback and the message given to eddy_shell_fail()
 * (else strerror(errno)); the shell kills its tasks and what plugins
 * spawned.  A failure in task.init makes that task fail its exec.
 *
 * The functions below are defined by eddy-shell itself: a plugin links no
 * library, it is built with `cc -shared -fPIC` and this header.  None of
 * them may be called from another thread.
 */
#ifndef EDDY_SHELL_H
#define EDDY_SHELL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eddy_shell eddy_shell_t;
typedef struct eddy_shell_plugin eddy_shell_plugin_t;
typedef struct eddy_shell_task eddy_shell_task_t;

/* A callback for 'topic' ("shell.init", "task.init", "shell.start",
 * "task.exit", "shell.exit").  'task' is the local task for task.*
 * topics, NULL for shell.*.  Return 0, or -1 to fail the job (see
 * above).  'arg' is what was given to eddy_shell_plugin_on(). */
typedef int (*eddy_shell_cb_f)(eddy_shell_t *sh,
                               const char *topic,
                               eddy_shell_task_t *task,
                               void *arg);

/* Told that a process from eddy_shell_spawn() ended: 'status' is its
 * shell-style exit code (the exit status, or 128+signal).  A -1 return
 * fails the job as a callback's would. */
typedef int (*eddy_shell_exit_f)(eddy_shell_t *sh,
                                 pid_t pid,
                                 int status,
                                 void *arg);

/* What the plugin's .so must export (looked up by this name). */
#define EDDY_SHELL_PLUGIN_INIT "eddy_plugin_init"
typedef int (*eddy_plugin_init_f)(eddy_shell_plugin_t *p, const char *args);
int eddy_plugin_init(eddy_shell_plugin_t *p, const char *args);

/* ---- registration (eddy_plugin_init only) ----------------------------- */

/* Call 'cb' with 'arg' at 'topic'.  One callback per topic per plugin (a
 * second call replaces the first).  -1 with errno EINVAL (unknown topic,
 * NULL argument, or not called from eddy_plugin_init) or ENOMEM. */
int eddy_shell_plugin_on(eddy_shell_plugin_t *p,
                         const char *topic,
                         eddy_shell_cb_f cb,
                         void *arg);

/* The shell the plugin is loaded in (valid for the shell's lifetime). */
eddy_shell_t *eddy_shell_plugin_shell(eddy_shell_plugin_t *p);

/* ---- the job ----------------------------------------------------------- */

uint64_t eddy_shell_jobid(const eddy_shell_t *sh);
uint32_t eddy_shell_ntasks(const eddy_shell_t *sh);     /* whole job */
uint32_t eddy_shell_nnodes(const eddy_shell_t *sh);     /* nodes of the job */
uint32_t eddy_shell_node_index(const eddy_shell_t *sh); /* ours, 0..nnodes-1 */
uint32_t eddy_shell_node_rank(const eddy_shell_t *sh);  /* our broker rank */

/* Local tasks, in rank order: index 0 .. eddy_shell_local_ntasks()-1.
 * The task objects live as long as the shell.  NULL (errno EINVAL) for
 * an index out of range. */
uint32_t eddy_shell_local_ntasks(const eddy_shell_t *sh);
eddy_shell_task_t *eddy_shell_local_task(eddy_shell_t *sh, uint32_t index);

/* A task's rank in the job. */
uint32_t eddy_shell_task_rank(const eddy_shell_task_t *t);
/* Its pid: -1 until it was forked (shell.init); in task.init, the
 * calling process. */
pid_t eddy_shell_task_pid(const eddy_shell_task_t *t);
/* Its shell-style exit code (exit status, or 128+signal), valid from
 * task.exit on; -1 with errno EAGAIN before. */
int eddy_shell_task_exit_code(const eddy_shell_task_t *t);

/* ---- the global process table (from shell.start on) ------------------- */

struct eddy_shell_proc {
    uint32_t rank;          /* task rank */
    pid_t pid;              /* its pid on its node */
    uint32_t node;          /* broker rank of its node */
    int appnum;             /* its MPMD task group */
    const char *host;       /* host name of its node (owned by the shell) */
    const char *executable; /* program path (owned by the shell) */
};

/* Number of entries: the job's task count once the table is known (from
 * shell.start on, only if some plugin registered shell.start), else 0. */
size_t eddy_shell_proctable_count(const eddy_shell_t *sh);

/* Entry 'index' in rank order (index == rank).  -1 with errno EAGAIN if
 * the table is not known (yet), EINVAL for an index out of range; 'out'
 * is then untouched.  Strings stay valid for the shell's lifetime. */
int eddy_shell_proctable_get(const eddy_shell_t *sh,
                             size_t index,
                             struct eddy_shell_proc *out);

/* ---- actions ----------------------------------------------------------- */

/* Set NAME=VALUE (value NULL: remove NAME) in the environment every local
 * task will exec with.  Valid in shell.init and shell.start (the tasks
 * are held there); in task.init it acts on that task only.  -1 with errno
 * EINVAL (empty name or one holding '='), EBUSY (the tasks already run),
 * ENOMEM. */
int eddy_shell_setenv(eddy_shell_t *sh, const char *name, const char *value);

/* The same for one task, in task.init (in that task's process).  -1 with
 * errno EINVAL (bad name, or not in task.init of that task) or ENOMEM. */
int eddy_shell_task_setenv(eddy_shell_task_t *t,
                           const char *name,
                           const char *value);

/* Run argv[0] (searched on PATH) on this node as a child of the shell, in
 * a process group of its own, with the shell's environment plus
 * 'env_add' ("NAME=VALUE" strings, NULL-terminated; may be NULL), stdin
 * /dev/null and stdout/stderr those of the shell (the broker's stderr).
 * 'exit_cb' (may be NULL) is called in the shell when it ends.  If it
 * still runs once every local task ended (after shell.exit), or when a
 * plugin fails the job, it is killed (SIGKILL to its group); exit_cb is
 * then called only if the shell reaps it before ending.  Returns its pid once
 * it runs the program, or -1 with errno: EINVAL (empty argv, or called in
 * task.init), ENOENT/EACCES (program not found or not runnable), ENOMEM, fork
 * errors.  The message of a failure is logged. */
pid_t eddy_shell_spawn(eddy_shell_t *sh,
                       const char *const argv[],
                       const char *const env_add[],
                       eddy_shell_exit_f exit_cb,
                       void *arg);

/* Log levels (syslog's numbers). */
enum {
    EDDY_SHELL_LOG_ERR = 3,
    EDDY_SHELL_LOG_WARNING = 4,
    EDDY_SHELL_LOG_INFO = 6,
    EDDY_SHELL_LOG_DEBUG = 7,
};

/* Log one line "eddy-shell: job ID: node N: PLUGIN: MESSAGE" on the
 * shell's stderr (the broker's stderr), in the node's broker log at
 * 'level' (`eddy dmesg -r RANK`) and, at INFO and more severe, in the
 * job's stderr output (as the output of the node's first task rank, while
 * that stream is open).  In task.init the line goes to the task's stderr
 * only. */
void eddy_shell_log(eddy_shell_t *sh, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Say why the job fails: the message goes into the job's exception
 * (the first message of a callback counts).  Returns -1, so a callback
 * can end with `return eddy_shell_fail(sh, "...")`.  Called outside a
 * callback (e.g. from an exit_cb or later), it fails the job at once. */
int eddy_shell_fail(eddy_shell_t *sh, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif /* !EDDY_SHELL_H */
