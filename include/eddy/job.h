/* eddy/job.h - submit, watch, query and control jobs.
 *
 * Every call that talks to the instance returns a future (see core.h):
 * call the matching _get function to wait for and read the result
 * (synchronous use), or register a continuation with eddy_future_then()
 * (asynchronous use).  The messages behind these calls are described in
 * docs/jobs-protocol.md; field names of the JSON forms are the same as the
 * accessor names here.
 *
 * Lifecycle of a job, as a tool sees it:
 *  1. Build a job description with eddy_jobspec_create() and its setters
 *     (or write jobspec JSON, docs/jobspec.md), submit it with
 *     eddy_job_submit(), read the ID with eddy_job_submit_get_id().
 *  2. Follow it: eddy_job_event_watch() (its eventlog), eddy_job_attach()
 *     (its output), eddy_job_info() (state, nodes, tasks and pids).
 *  3. Control it: eddy_job_signal(), eddy_job_cancel(), eddy_job_stdin().
 *  4. eddy_job_wait() completes when the job is INACTIVE, with its status.
 *
 * Task ranks are 0..ntasks-1 across the whole job; "node" means the broker
 * rank a task runs on.  Job IDs are 64-bit, printed in decimal.
 */
#ifndef EDDY_JOB_H
#define EDDY_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eddy/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t eddy_jobid_t;

/* ---- job descriptions ------------------------------------------------ */

typedef struct eddy_jobspec eddy_jobspec_t;

/* An empty description: no command, one task, the caller's environment
 * and working directory at submit time.  Destroy with
 * eddy_jobspec_destroy().  NULL with errno ENOMEM. */
eddy_jobspec_t *eddy_jobspec_create(void);
void eddy_jobspec_destroy(eddy_jobspec_t *js); /* accepts NULL */

/* Add a task group (MPMD: each group is one appnum; ranks are assigned to
 * groups in the order they were added).  argv is copied.  'ntasks' 0
 * means "all the tasks" and is only valid for a single group.  -1 with
 * errno EINVAL (empty argv, negative count). */
int eddy_jobspec_add_group(eddy_jobspec_t *js,
                           int argc,
                           char *const argv[],
                           int ntasks);

/* Resource shape (0 leaves a value unset).  Rules, checked when the
 * description is encoded or submitted: with nodes N and tasks T, T must
 * be a multiple of N; tasks_per_node P with nodes N gives N*P tasks.
 * -1 with errno EINVAL for a negative value. */
int eddy_jobspec_set_nodes(eddy_jobspec_t *js, int nnodes);
int eddy_jobspec_set_tasks(eddy_jobspec_t *js, int ntasks);
int eddy_jobspec_set_tasks_per_node(eddy_jobspec_t *js, int n);
int eddy_jobspec_set_cores_per_task(eddy_jobspec_t *js, int n);
int eddy_jobspec_set_exclusive(eddy_jobspec_t *js, bool exclusive);

/* Environment: by default the tasks get the caller's environment as it is
 * when the job is submitted.  eddy_jobspec_setenv() sets (value != NULL)
 * or removes (value == NULL) one variable on top of it;
 * eddy_jobspec_clearenv() starts from an empty environment instead.
 * -1 with errno EINVAL (empty name or one containing '='). */
int eddy_jobspec_setenv(eddy_jobspec_t *js,
                        const char *name,
                        const char *value);
int eddy_jobspec_clearenv(eddy_jobspec_t *js);

/* Working directory of the tasks (default: the caller's at submit). */
int eddy_jobspec_set_cwd(eddy_jobspec_t *js, const char *cwd);

/* Stdin of the tasks: by default they read /dev/null.  With 'enable'
 * the job is submitted so that its tasks read what eddy_job_stdin()
 * sends (until it sends eof).  -1 with errno EINVAL if 'js' is NULL. */
int eddy_jobspec_set_stdin(eddy_jobspec_t *js, bool enable);

/* Startup barrier: the job's tasks are held until eddy_job_release().
 *   "fork"  every task forked (its pid known) but not yet running the
 *           program;
 *   "exec"  every task stopped (SIGSTOP) at the first instruction of
 *           its program, with no tracer, so a debugger can attach;
 *   "init"  tasks run until they call PMI init and wait there (a program
 *           that does not use PMI is never held).
 * NULL removes the barrier (the default).  -1 with errno EINVAL for any
 * other mode.  The mode is carried in the jobspec as the shell option
 * "stop" (attributes.system.shell.options.stop). */
int eddy_jobspec_set_stop(eddy_jobspec_t *js, const char *mode);

/* Time limit in seconds (0: none), and a name for listings. */
/* Load shell plugin 'path' (absolute: a shared object on every node,
 * include/eddy/shell.h, docs/plugins.md) into the job's shells, with
 * 'args' (may be NULL) given to its eddy_plugin_init(); plugins load in
 * the order added.  -1 with errno EINVAL (NULL or relative path, more
 * than 32 plugins) or ENOMEM. */
int eddy_jobspec_add_plugin(eddy_jobspec_t *js,
                            const char *path,
                            const char *args);
int eddy_jobspec_set_duration(eddy_jobspec_t *js, double seconds);
int eddy_jobspec_set_name(eddy_jobspec_t *js, const char *name);

/* The description as jobspec JSON (caller frees), validated: NULL with
 * errno EINVAL and 'err' naming the field that is wrong. */
char *eddy_jobspec_encode(const eddy_jobspec_t *js, eddy_error_t *err);

/* ---- submit and wait ------------------------------------------------- */

/* Submit a job.  The future's result is the job ID
 * (eddy_job_submit_get_id).  Submitting fails (at get) with EINVAL and a
 * message naming the field for a bad description, and ENOSPC when the job
 * can never fit in the instance.  eddy_job_submit() returns NULL with
 * errno EINVAL if the description cannot be encoded (see
 * eddy_jobspec_encode for the message). */
eddy_future_t *eddy_job_submit(eddy_t *h, const eddy_jobspec_t *js);
eddy_future_t *eddy_job_submit_json(eddy_t *h, const char *jobspec);
int eddy_job_submit_get_id(eddy_future_t *f, eddy_jobid_t *id);

/* Completes when the job is INACTIVE.  'status' is the largest task exit
 * code (128+signal for a task killed by a signal), or -1 if the job never
 * ran; 'exception' (may be NULL) is the note of a fatal exception or
 * NULL (owned by the future).  ENOENT for an unknown job. */
eddy_future_t *eddy_job_wait(eddy_t *h, eddy_jobid_t id);
int eddy_job_wait_get(eddy_future_t *f, int *status, const char **exception);

/* ---- information ----------------------------------------------------- */

typedef struct eddy_jobinfo eddy_jobinfo_t;

struct eddy_taskinfo {
    uint32_t rank;          /* task rank in the job */
    uint32_t node;          /* broker rank it runs on */
    const char *hostname;   /* of that broker */
    pid_t pid;              /* 0 until the task has started */
    int appnum;             /* its task group (MPMD) */
    const char *executable; /* command[0] of its group */
    bool exited;
    int status; /* exit code or 128+signal, once exited */
};

eddy_future_t *eddy_job_info(eddy_t *h, eddy_jobid_t id);

/* A snapshot of the job; caller destroys with eddy_jobinfo_destroy().
 * NULL with errno: ENOENT unknown job, EPROTO malformed answer. */
eddy_jobinfo_t *eddy_job_info_get(eddy_future_t *f);
void eddy_jobinfo_destroy(eddy_jobinfo_t *info); /* accepts NULL */

eddy_jobid_t eddy_jobinfo_id(const eddy_jobinfo_t *info);
/* "NEW", "SCHED", "RUN", "CLEANUP" or "INACTIVE". */
const char *eddy_jobinfo_state(const eddy_jobinfo_t *info);
const char *eddy_jobinfo_name(const eddy_jobinfo_t *info);
/* Why a SCHED job waits ("" otherwise). */
const char *eddy_jobinfo_reason(const eddy_jobinfo_t *info);
uint32_t eddy_jobinfo_ntasks(const eddy_jobinfo_t *info);
uint32_t eddy_jobinfo_nnodes(const eddy_jobinfo_t *info);
/* The job's status once finished: 0 and '*status', or -1 (ENODATA). */
int eddy_jobinfo_status(const eddy_jobinfo_t *info, int *status);
/* Note of the fatal exception, or NULL. */
const char *eddy_jobinfo_exception(const eddy_jobinfo_t *info);
/* Seconds since the epoch of "submit", "alloc", "start", "finish",
 * "clean"; 0 if not reached (or unknown name). */
double eddy_jobinfo_time(const eddy_jobinfo_t *info, const char *event);
/* The i-th node of the job: broker rank and hostname. -1 ERANGE. */
int eddy_jobinfo_node(const eddy_jobinfo_t *info,
                      uint32_t i,
                      uint32_t *rank,
                      const char **hostname);
/* Task 'rank' (strings borrowed from 'info'). -1 ERANGE. */
int eddy_jobinfo_task(const eddy_jobinfo_t *info,
                      uint32_t rank,
                      struct eddy_taskinfo *task);
/* The job's startup barrier (eddy_jobspec_set_stop): 'where' ("fork",
 * "exec" or "init", borrowed from 'info'), how many tasks are 'held' at
 * it so far and whether it was 'released' (each may be NULL).  -1 with
 * errno ENODATA for a job submitted without one. */
int eddy_jobinfo_barrier(const eddy_jobinfo_t *info,
                         const char **where,
                         uint32_t *held,
                         bool *released);
/* The whole answer as JSON text (owned by 'info'). */
const char *eddy_jobinfo_json(const eddy_jobinfo_t *info);

/* ---- listing --------------------------------------------------------- */

enum { EDDY_JOB_LIST_ALL = 1 }; /* include INACTIVE jobs */

typedef struct eddy_joblist eddy_joblist_t;

eddy_future_t *eddy_job_list(eddy_t *h, int flags);
/* Caller destroys with eddy_joblist_destroy(). NULL with errno. */
eddy_joblist_t *eddy_job_list_get(eddy_future_t *f);
size_t eddy_joblist_count(const eddy_joblist_t *l);
/* Entry i (summary fields only: id, state, name, reason, ntasks, nnodes,
 * status, submit time); borrowed from the list. NULL ERANGE. */
const eddy_jobinfo_t *eddy_joblist_at(const eddy_joblist_t *l, size_t i);
void eddy_joblist_destroy(eddy_joblist_t *l); /* accepts NULL */

/* ---- control --------------------------------------------------------- */

/* Send 'signum' to the tasks in 'ranks' (an idset such as "0-3,8" of task
 * ranks; NULL for all).  Read the result with eddy_rpc_get(f, NULL): EINVAL
 * when the job is not running, ENOENT unknown job. */
eddy_future_t *eddy_job_signal(eddy_t *h,
                               eddy_jobid_t id,
                               int signum,
                               const char *ranks);

/* Force the job to end: a "cancel" exception, SIGTERM to every task, then
 * SIGKILL after the instance's grace period.  A queued job is dropped. */
eddy_future_t *eddy_job_cancel(eddy_t *h, eddy_jobid_t id);

/* Let a job held at its startup barrier (eddy_jobspec_set_stop) go.
 * Read the result with eddy_rpc_get(f, NULL): EINVAL "job N is not held
 * at a startup barrier (...)" for a job submitted without a stop mode,
 * already released, not allocated yet or ending; ENOENT unknown job.
 * A job can be released before all its tasks reached the barrier: they
 * then go on without waiting. */
eddy_future_t *eddy_job_release(eddy_t *h, eddy_jobid_t id);

/* Like eddy_job_release(), for a starter after a debugger attached to
 * some tasks (MPIR partial attach): with the "exec" stop mode, each node
 * resumes only the tasks that no tracer is attached to (TracerPid in
 * /proc), and leaves the traced ones stopped for their debugger to
 * continue.  With the other modes it is eddy_job_release(). */
eddy_future_t *eddy_job_release_untraced(eddy_t *h, eddy_jobid_t id);

/* Write to the stdin of the tasks in 'ranks' (NULL: all); 'eof' closes
 * it.  'data' is copied. */
eddy_future_t *eddy_job_stdin(eddy_t *h,
                              eddy_jobid_t id,
                              const char *ranks,
                              const void *data,
                              size_t len,
                              bool eof);

/* ---- watching -------------------------------------------------------- */

enum { EDDY_JOB_EVENT_FOLLOW = 1 }; /* keep watching until the job ends */

/* A streaming future over the job's eventlog, from its first entry; each
 * entry makes it ready once (advance with eddy_future_reset()); the end is
 * ENODATA. */
eddy_future_t *eddy_job_event_watch(eddy_t *h, eddy_jobid_t id, int flags);
/* The current entry; strings owned by the future until reset. */
int eddy_job_event_get(eddy_future_t *f,
                       double *timestamp,
                       const char **name,
                       const char **context);

enum { EDDY_JOB_STDOUT = 1, EDDY_JOB_STDERR = 2 };

/* Called for each piece of a task's output, in order per task and stream;
 * 'eof' marks the end of that stream (then len is 0). */
typedef void (*eddy_job_output_f)(eddy_jobid_t id,
                                  uint32_t rank,
                                  int stream,
                                  const void *data,
                                  size_t len,
                                  bool eof,
                                  void *arg);

/* Attach to a job's output: everything it has printed so far is replayed,
 * then new output follows live, through 'cb' (called from the handle's
 * loop).  The future becomes ready (eddy_rpc_get: 0) when all output has
 * been delivered and the job has ended, or fails (ENOENT unknown job,
 * ENOTCONN).  Destroy it to detach. */
eddy_future_t *eddy_job_attach(eddy_t *h,
                               eddy_jobid_t id,
                               eddy_job_output_f cb,
                               void *arg);
/* Bytes of output the instance dropped because the job's output log
 * reached its cap (valid once the attach future is ready). */
size_t eddy_job_attach_dropped(eddy_future_t *f);

#ifdef __cplusplus
}
#endif

#endif /* !EDDY_JOB_H */
