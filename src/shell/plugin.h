/* plugin.h - eddy-shell's side of job-shell plugins (include/eddy/shell.h
 * is the plugins' side; docs/plugins.md the guide).
 *
 * The plugin context is the eddy_shell_t that plugins see.  It holds the
 * loaded plugins and their callbacks, what the job looks like from this
 * node, the environment changes plugins asked for, the processes they
 * spawned and the global process table.  The shell drives it:
 *
 * Lifecycle:
 *  1. plugins_create() with the job's shape and two hooks back into the
 *     shell (log a line into the job's output; fail the job now).
 *  2. plugins_load_dirs() (EDDY_SHELL_PLUGIN_DIRS) then plugins_load() for
 *     each of the job's plugins, in order; each runs eddy_plugin_init().
 *  3. plugins_call(ps, "shell.init", NULL, err); the environment changes
 *     recorded there are applied to each task's environment with
 *     plugins_env_apply() before it is created.
 *  4. plugins_task_forked() as each task is forked (held); the shell
 *     gives each task plugins_task_init as its pre_exec hook if
 *     plugins_has(ps, "task.init").
 *  5. If plugins_has(ps, "shell.start"): the shell exchanges the local
 *     process tables (plugin_pt_record() / plugin_pt_merge()), passes the
 *     result to plugins_set_proctable() and calls shell.start; changes to
 *     the environment there go straight to the held tasks (task_setenv).
 *     plugins_started() marks the end of that phase.
 *  6. plugins_reaped() for every child the shell's reaper does not know
 *     (spawned processes); plugins_task_exited() + "task.exit" per task.
 *  7. "shell.exit", then plugins_destroy(), which kills what is still
 *     running of the spawned processes, unloads and frees.
 *
 * Failures of callbacks come back from plugins_call() as -1 with a note
 * "node N: plugin PATH: TOPIC: MESSAGE" for the job's exception.  A
 * plugin that fails outside a call (eddy_shell_fail() later, or an
 * exit_cb returning -1) reaches the shell through ops.fail.
 *
 * Not thread-safe; the shell is single-threaded.
 */
#ifndef EDDY_SHELL_PLUGIN_H
#define EDDY_SHELL_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eddy/core.h"
#include "eddy/shell.h"
#include "src/common/proctable.h"
#include "src/shell/task.h"

/* The environment variable that lists the instance's plugin directories
 * (colon separated), set by `eddy start --shell-plugin-dir`. */
#define PLUGIN_DIRS_ENV "EDDY_SHELL_PLUGIN_DIRS"

/* At most this many plugins per shell (directories and job together). */
#define PLUGIN_MAX 64

/* Fence records of the process table exchange: key prefix + node index,
 * value the node's proctable encoding in hex (records hold no NUL). */
#define PLUGIN_PT_KEY_PREFIX "eddy.shell.proctable."

struct plugins_info {
    uint64_t jobid;
    uint32_t ntasks;             /* in the job */
    uint32_t nnodes;             /* of the job */
    uint32_t node_index;         /* ours */
    uint32_t node_rank;          /* our broker rank */
    uint32_t nlocal;             /* local tasks */
    const uint32_t *local_ranks; /* nlocal ranks, ascending (copied) */
};

struct plugins_ops {
    /* Put 'line' (ending in a newline) in the job's stderr output. */
    void (*log_job)(const char *line, void *arg);
    /* Put 'line' (ending in a newline) in the broker's log at 'level'
     * (LOG_LEVEL_*, the same numbers as EDDY_SHELL_LOG_*). */
    void (*log_broker)(int level, const char *line, void *arg);
    /* A plugin failed outside a call: fail the job with 'note'. */
    void (*fail)(const char *note, void *arg);
};

/* A context for the job described by 'info' (copied).  'ops' (borrowed,
 * must outlive it) and 'arg' reach back into the shell.  NULL with errno
 * EINVAL or ENOMEM. */
eddy_shell_t *plugins_create(const struct plugins_info *info,
                             const struct plugins_ops *ops,
                             void *arg);

/* Kill (SIGKILL, process group) the spawned processes still running,
 * unload the plugins, free.  Accepts NULL; keeps errno. */
void plugins_destroy(eddy_shell_t *ps);

/* Load 'path' (absolute) with 'args' (NULL: "") and run its
 * eddy_plugin_init().  -1 with errno and 'err': ENOENT-like and "plugin
 * PATH: cannot load: DLERROR" when dlopen fails, ENOEXEC "plugin PATH: no
 * eddy_plugin_init symbol", E2BIG beyond PLUGIN_MAX, and the init's own
 * failure as for plugins_call(). */
int plugins_load(eddy_shell_t *ps,
                 const char *path,
                 const char *args,
                 eddy_error_t *err);

/* Load every *.so (regular file) of each directory of 'dirs' ("DIR:DIR",
 * empty entries skipped), sorted by name within a directory, with empty
 * args.  A directory that cannot be read is an error naming it. */
int plugins_load_dirs(eddy_shell_t *ps, const char *dirs, eddy_error_t *err);

/* The sorted full paths of the *.so files of 'dir' (pure apart from
 * reading the directory): '*paths' is a NULL-terminated vector the caller
 * frees with plugin_strv_free().  -1 with errno and 'err' naming 'dir'. */
int plugin_dir_list(const char *dir, char ***paths, eddy_error_t *err);
void plugin_strv_free(char **v);

/* Did some loaded plugin register 'topic'? */
bool plugins_has(const eddy_shell_t *ps, const char *topic);

/* Call every callback of 'topic' in load order, with 'task' (local index,
 * or -1 for shell.* topics).  Stops at the first failure: -1 with 'err'
 * holding the note (see the top). */
int plugins_call(eddy_shell_t *ps,
                 const char *topic,
                 int task,
                 eddy_error_t *err);

/* Apply the environment changes recorded so far (shell.init) to a task's
 * environment vector (taskenv.h).  -1 with errno ENOMEM. */
int plugins_env_apply(const eddy_shell_t *ps, char ***env);

/* Local task 'index' was forked as 't' (borrowed, must outlive ps or be
 * forgotten with t NULL). */
void plugins_task_forked(eddy_shell_t *ps, uint32_t index, task_t *t);

/* The argument to give task_spec.pre_exec_arg for local task 'index'
 * (with pre_exec = plugins_task_init). */
void *plugins_task_arg(eddy_shell_t *ps, uint32_t index);

/* task_pre_exec_f for task.init: runs in the child. */
int plugins_task_init(task_t *t, void *arg, char *msg, size_t size);

/* The global table is known (stolen; NULL leaves none). */
void plugins_set_proctable(eddy_shell_t *ps, proctable_t *pt);

/* shell.start is over: the tasks are no longer held by us. */
void plugins_started(eddy_shell_t *ps);

/* Local task 'index' exited with 'code' (shell-style). */
void plugins_task_exited(eddy_shell_t *ps, uint32_t index, int code);

/* The reaper found child 'pid' with 'wstatus' that is not a task: true if
 * it was a spawned process (its exit_cb ran; a failure went to
 * ops.fail).  Stops are ignored (true, nothing called). */
bool plugins_reaped(eddy_shell_t *ps, pid_t pid, int wstatus);

/* Kill (SIGKILL to the group) every spawned process still running. */
void plugins_kill_spawned(eddy_shell_t *ps);

/* --- the process table exchange (pure) ---------------------------------- */

/* One fence record for node 'node_index''s table 'local': '*key' and
 * '*value' are malloc'd strings (the caller frees them).  -1 with errno
 * ENOMEM or the encoder's. */
int plugin_pt_record(proctable_t *local,
                     uint32_t node_index,
                     char **key,
                     char **value);

/* Merge every PLUGIN_PT_KEY_PREFIX record of 'data' (records
 * "KEY\0VALUE\0", 'len' bytes, as a fence answers) into 'pt'.  Other
 * records are ignored.  -1 with errno EPROTO (malformed record or hex),
 * the merge's errors (EEXIST for a rank twice), and 'err' saying which. */
int plugin_pt_merge(proctable_t *pt,
                    const char *data,
                    size_t len,
                    eddy_error_t *err);

#endif /* !EDDY_SHELL_PLUGIN_H */
