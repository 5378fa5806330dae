/* eddy/mpir.h - a job's process table: where every task of a job runs.
 *
 * This is the table an MPIR debugger reads from the starter's
 * MPIR_proctable (`eddy run --debug`, `eddy job attach --debug`), offered
 * to tools that do not use ptrace: rank, hostname, executable, pid, and
 * also the broker rank (node) and appnum (MPMD task group) of each task.
 *
 * The table is gathered over the instance's broker tree when asked for
 * (docs/mpir.md), so it is available once every task of the job has
 * started (or is held at a startup barrier: pids are known from fork),
 * until the job begins to end.
 *
 * Use:
 *  1. f = eddy_job_proctable(h, id);
 *  2. pt = eddy_job_proctable_get(f) (waits); eddy_future_destroy(f);
 *  3. for rank in 0 .. eddy_proctable_size(pt) - 1:
 *         eddy_proctable_entry(pt, rank, &d);
 *  4. eddy_proctable_destroy(pt).
 */
#ifndef EDDY_MPIR_H
#define EDDY_MPIR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eddy/core.h"
#include "eddy/job.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct eddy_proctable eddy_proctable_t;

/* One task.  The strings are owned by the table. */
struct eddy_procdesc {
    uint32_t rank;          /* task rank in the job, 0..size-1 */
    const char *hostname;   /* host name of the node it runs on */
    const char *executable; /* absolute path of the program it runs */
    pid_t pid;              /* on that node */
    uint32_t broker_rank;   /* broker rank (node) in the instance */
    int appnum;             /* task group of an MPMD job, 0 for the first */
};

/* Ask for the process table of job 'id'.  Returns a future (caller
 * destroys) or NULL with errno as eddy_rpc() (EINVAL for a NULL handle or
 * an ID out of range). */
eddy_future_t *eddy_job_proctable(eddy_t *h, eddy_jobid_t id);

/* Wait for 'f' and return the table (caller destroys with
 * eddy_proctable_destroy(); it outlives the future).  NULL with errno
 * (eddy_future_error_string(f) has the instance's message):
 *   ENOENT        no such job
 *   EAGAIN        its tasks have not all started yet (try again, or wait
 *                 for the "start" or "barrier-held" event)
 *   ESRCH         the job has ended or is ending
 *   EHOSTUNREACH  a broker of the job is lost (the message names it)
 *   EPROTO        a malformed answer
 *   and the errors of eddy_rpc_get(). */
eddy_proctable_t *eddy_job_proctable_get(eddy_future_t *f);

/* Number of tasks (entries are ranks 0..size-1).  0 for NULL. */
size_t eddy_proctable_size(const eddy_proctable_t *pt);

/* Fill 'd' with task 'rank'.  -1 with errno EINVAL for a NULL argument or
 * a rank >= size. */
int eddy_proctable_entry(const eddy_proctable_t *pt,
                         uint32_t rank,
                         struct eddy_procdesc *d);

/* Free 'pt' (and its strings).  Accepts NULL, leaves errno alone. */
void eddy_proctable_destroy(eddy_proctable_t *pt);

#ifdef __cplusplus
}
#endif

#endif /* !EDDY_MPIR_H */
