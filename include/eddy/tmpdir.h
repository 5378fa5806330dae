/* eddy/tmpdir.h - where a job's private temporary directories are.
 *
 * Every job gets a directory of its own on each of its nodes, owned by
 * the user, mode 0700, made before any task of the job starts (so it
 * exists while the job is held at a startup barrier) and removed with
 * everything in it once the job's last task on that node has ended.
 * Inside the job, each task finds its node's in $EDDY_JOB_TMPDIR.  From
 * outside the job (a tool, a debugger's launcher), this API gives the
 * mapping: task rank -> (node, hostname, path).
 *
 * The paths are under the instance's tmpdir base (eddy start
 * --tmpdir-base, default $TMPDIR or /tmp) and their names are unique per
 * instance, broker and job; treat them as opaque.
 *
 * Use:
 *  1. f = eddy_job_tmpdir(h, id);
 *  2. t = eddy_job_tmpdir_get(f) (waits); eddy_future_destroy(f);
 *  3. eddy_tmpdirs_task(t, rank, &d) for a task rank, or
 *     eddy_tmpdirs_node(t, i, &d) for i in 0 .. eddy_tmpdirs_nnodes(t)-1;
 *  4. eddy_tmpdirs_destroy(t).
 */
#ifndef EDDY_TMPDIR_H
#define EDDY_TMPDIR_H

#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"
#include "eddy/job.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eddy_tmpdirs eddy_tmpdirs_t;

/* One node's tmpdir.  The strings are owned by the eddy_tmpdirs_t. */
struct eddy_tmpdir {
    uint32_t index;       /* the node's index among the job's nodes */
    uint32_t node;        /* its broker rank in the instance */
    const char *hostname; /* its host name */
    const char *path;     /* the job's tmpdir there (absolute) */
};

/* Ask where job 'id''s tmpdirs are.  Returns a future (caller destroys)
 * or NULL with errno as eddy_rpc() (EINVAL for a NULL handle or an ID out
 * of range). */
eddy_future_t *eddy_job_tmpdir(eddy_t *h, eddy_jobid_t id);

/* Wait for 'f' and return the mapping (caller destroys with
 * eddy_tmpdirs_destroy(); it outlives the future).  NULL with errno
 * (eddy_future_error_string(f) has the instance's message):
 *   ENOENT   no such job
 *   EAGAIN   the job has not started yet (its tmpdirs do not exist yet:
 *            try again, or wait for its "start" or "barrier-held" event)
 *   ESRCH    the job has ended or is ending (its tmpdirs are removed or
 *            about to be)
 *   EPROTO   a malformed answer (the message says what)
 *   and the errors of eddy_rpc_get(). */
eddy_tmpdirs_t *eddy_job_tmpdir_get(eddy_future_t *f);

/* Number of tasks of the job (ranks 0..ntasks-1) and of its nodes.
 * 0 for NULL. */
uint32_t eddy_tmpdirs_ntasks(const eddy_tmpdirs_t *t);
uint32_t eddy_tmpdirs_nnodes(const eddy_tmpdirs_t *t);

/* Fill 'd' with the tmpdir of the node task 'rank' runs on.  -1 with
 * errno EINVAL for a NULL argument, ERANGE for a rank >= ntasks. */
int eddy_tmpdirs_task(const eddy_tmpdirs_t *t,
                      uint32_t rank,
                      struct eddy_tmpdir *d);

/* Fill 'd' with the tmpdir of the job's node 'index' (0..nnodes-1, in the
 * order of the job's nodes in eddy_job_info()).  -1 with errno EINVAL for
 * a NULL argument, ERANGE for an index >= nnodes. */
int eddy_tmpdirs_node(const eddy_tmpdirs_t *t,
                      uint32_t index,
                      struct eddy_tmpdir *d);

/* The whole answer as JSON text (docs/jobs-protocol.md, job.tmpdir),
 * owned by 't'; NULL for NULL. */
const char *eddy_tmpdirs_json(const eddy_tmpdirs_t *t);

/* Free 't'.  Accepts NULL, leaves errno alone. */
void eddy_tmpdirs_destroy(eddy_tmpdirs_t *t);

#ifdef __cplusplus
}
#endif

#endif /* !EDDY_TMPDIR_H */
