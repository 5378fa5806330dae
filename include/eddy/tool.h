/* eddy/tool.h - tool daemons beside a job (docs/tools.md).
 *
 * A tool launch starts one command on each node of a job (or on chosen
 * nodes of it), next to the job's tasks: it takes none of the job's
 * resources and never waits for a free core.  Each daemon runs as the
 * user, in the job's tmpdir unless told otherwise, with
 *   EDDY_JOB_ID       the job
 *   EDDY_JOB_TMPDIR   the job's tmpdir on that node
 *   EDDY_TOOL_ID      this launch
 *   EDDY_TOOL_RANK    the node's index among the job's nodes (0-based)
 *   EDDY_TOOL_SIZE    how many nodes the job has
 *   EDDY_TOOL_TASKS   the job's tasks on that node, "RANK:PID,..." in
 *                     task rank order, e.g. "0:1234,1:1235"
 *   EDDY_URI          the node's broker
 * in its environment.  The job must be running or held at its startup
 * barrier (its tasks forked, so their pids are known).  Launches of one
 * job coexist and share its tmpdir: files shipped with eddy_job_bcast()
 * are there.
 *
 * When the job ends, its daemons get SIGTERM and, after a grace period,
 * SIGKILL; the tmpdir is removed on each node once the last task and the
 * last daemon there are gone.  With EDDY_TOOL_KEEP a daemon outlives the
 * job until it exits by itself (the tmpdir waits for it).
 *
 * The instance keeps each launch's output (capped, like a job's) and the
 * exit status of each daemon until the launch is over, so the launcher
 * and later attachers (eddy_tool_attach()) all see everything.
 *
 * Use:
 *  1. f = eddy_tool_launch(h, id, argv, &opts);
 *     eddy_tool_launch_get(f, &tool) gives the launch's ID once every
 *     chosen node was asked to start its daemon.
 *  2. a = eddy_tool_attach(h, tool, cb, arg): output and exits by node;
 *     it becomes ready when every daemon has exited (or failed to start).
 *  3. eddy_tool_kill(h, tool, SIGTERM, NULL) to stop them early.
 */
#ifndef EDDY_TOOL_H
#define EDDY_TOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"
#include "eddy/job.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t eddy_toolid_t;

enum {
    EDDY_TOOL_KEEP = 0x1, /* the daemons outlive the job (not signalled
                             when it ends) until they exit themselves */
};

/* Options of a launch; NULL fields and 0 take the defaults. */
struct eddy_tool_options {
    const char *nodes;      /* idset of the job's nodes (broker ranks) to
                               start on; NULL: all of them */
    const char *const *env; /* "NAME=VALUE" strings added to (or replacing
                               in) the daemons' environment, NULL-ended */
    const char *cwd;        /* working directory; NULL: the job tmpdir;
                               relative: under the job tmpdir */
    int flags;              /* EDDY_TOOL_KEEP */
};

/* Start 'argv' (NULL-ended, argv[0] a command looked up in PATH on each
 * node) beside job 'id'.  'opts' may be NULL.  Returns a future (caller
 * destroys) or NULL with errno EINVAL (NULL handle or argv, empty argv,
 * an env entry without '=') or ENOMEM/ENOTCONN. */
eddy_future_t *eddy_tool_launch(eddy_t *h,
                                eddy_jobid_t id,
                                const char *const *argv,
                                const struct eddy_tool_options *opts);

/* The ID of the launch.  -1 with errno and eddy_future_error_string():
 * ENOENT no such job, EAGAIN the job's tasks have not started yet, ESRCH
 * the job has ended, EINVAL nodes not in the job or a cwd leaving the
 * tmpdir, EPERM another user's job, or the errors of eddy_rpc_get().
 * A daemon that cannot start on a node is not an error here: its
 * attachers are told (EDDY_TOOL_FAILED). */
int eddy_tool_launch_get(eddy_future_t *f, eddy_toolid_t *tool);

/* What happened to one daemon, or a piece of its output. */
enum eddy_tool_event_type {
    EDDY_TOOL_OUTPUT = 1, /* 'stream', 'data', 'len' (len 0: end of
                             that stream) */
    EDDY_TOOL_EXIT,       /* 'status': a wait(2) status */
    EDDY_TOOL_FAILED,     /* could not start, or its node was lost:
                             'errnum', 'errstr' */
};

struct eddy_tool_event {
    enum eddy_tool_event_type type;
    uint32_t node;    /* broker rank */
    const char *host; /* its hostname */
    int stream;       /* EDDY_JOB_STDOUT or EDDY_JOB_STDERR */
    const void *data; /* borrowed for the callback */
    size_t len;
    int status;         /* EXIT */
    int errnum;         /* FAILED */
    const char *errstr; /* FAILED; borrowed */
};

/* Called from the handle's loop for each event of an attached launch, in
 * order per node and stream. */
typedef void (*eddy_tool_event_f)(eddy_toolid_t tool,
                                  const struct eddy_tool_event *ev,
                                  void *arg);

/* Attach to launch 'tool': its output and exits so far are replayed, then
 * new ones follow live through 'cb'.  The future becomes ready
 * (eddy_rpc_get(): 0) once every daemon has exited or failed; it fails
 * with ENOENT for an unknown (or long finished) launch.  Destroy it to
 * detach (the daemons go on).  NULL with errno EINVAL/ENOMEM/ENOTCONN. */
eddy_future_t *eddy_tool_attach(eddy_t *h,
                                eddy_toolid_t tool,
                                eddy_tool_event_f cb,
                                void *arg);

/* Bytes of the launch's output the instance did not keep because its
 * output log reached its cap (valid once the attach future is ready). */
size_t eddy_tool_attach_dropped(eddy_future_t *f);

/* Send 'signum' to the daemons of 'tool' ('nodes' an idset of broker
 * ranks, NULL: all) that still run.  The future's eddy_rpc_get() fails
 * with ENOENT for an unknown launch, EINVAL for a bad signal or nodes. */
eddy_future_t *eddy_tool_kill(eddy_t *h,
                              eddy_toolid_t tool,
                              int signum,
                              const char *nodes);

/* The launches of job 'id' (all jobs if 'id' is 0), as JSON text from
 * eddy_rpc_get():
 *   {"tools":[{"tool":ID,"id":JOBID,"cmd":[...],"nodes":"0-3",
 *              "running":"1-3","keep":false,
 *              "exits":[[NODE,STATUS],...],
 *              "failed":[[NODE,ERRNO,"MESSAGE"],...]}, ...]}
 * The last 256 finished launches (at most 64 MiB of output together)
 * stay listed and attachable. */
eddy_future_t *eddy_tool_list(eddy_t *h, eddy_jobid_t id);

#ifdef __cplusplus
}
#endif

#endif /* !EDDY_TOOL_H */
