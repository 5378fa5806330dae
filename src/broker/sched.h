/* sched.h - the FCFS job queue over a resource pool (pure: no I/O).
 *
 * The rank-0 job manager queues every job that waits for resources here,
 * in submit order, and runs the queue whenever something changed (a job
 * was queued, resources were released, a rank came or went).  A run
 * allocates the head of the queue while it fits; the first job that does
 * not fit now blocks every job behind it (no backfill), so jobs start in
 * the order they were submitted.
 *
 * Lifecycle:
 *  1. sched_create(pool): the pool is borrowed and must outlive the queue.
 *  2. sched_enqueue() after the job's request was accepted (it checks
 *     rpool_fits_ever() itself); sched_remove() when a queued job is
 *     cancelled.
 *  3. sched_run() allocates from the head; each allocated job leaves the
 *     queue and is handed to the callback with its live allocation.
 *  4. sched_reason() says why a queued job waits ("" if it is not queued).
 *  5. sched_destroy().
 *
 * Invariant: a job id is in the queue at most once; queued jobs are in
 * increasing enqueue order.
 */
#ifndef EDDY_BROKER_SCHED_H
#define EDDY_BROKER_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"
#include "src/common/rpool.h"

typedef struct sched sched_t;

/* Called by sched_run() for a job that left the queue.  On success
 * 'alloc' is its live allocation (the callee owns it: rpool_free() and
 * rpool_alloc_destroy() when the job is done) and errnum is 0.  If the
 * job can no longer run at all (ENOSPC: the pool shrank under it, or
 * EINVAL), 'alloc' is NULL and errnum/errstr say why.  The callback must
 * not call sched_run() (it may enqueue or remove). */
typedef void (*sched_alloc_f)(uint64_t id,
                              rpool_alloc_t *alloc,
                              int errnum,
                              const char *errstr,
                              void *arg);

/* NULL with errno EINVAL (pool NULL) or ENOMEM. */
sched_t *sched_create(rpool_t *pool);

/* Accepts NULL, leaves errno alone. */
void sched_destroy(sched_t *s);

/* Queue job 'id' with request 'req' (copied).  -1 with errno EEXIST (id
 * already queued), EINVAL (bad request), ENOSPC (it can never fit: 'err'
 * carries the pool's "never fits: ..." text) or ENOMEM; nothing is queued
 * then. */
int sched_enqueue(sched_t *s,
                  uint64_t id,
                  const struct rpool_request *req,
                  eddy_error_t *err);

/* Remove a queued job.  -1 with errno ENOENT if it is not queued. */
int sched_remove(sched_t *s, uint64_t id);

/* Allocate from the head while it fits, calling 'cb' for each job that
 * leaves the queue.  Returns the number of jobs that left. */
size_t sched_run(sched_t *s, sched_alloc_f cb, void *arg);

/* Why queued job 'id' waits: the pool's "not now: ..." text for the head,
 * "waiting behind job N" for the others, "queued" before the first run;
 * "" if 'id' is not queued.  Borrowed: valid until the next call on 's'. */
const char *sched_reason(const sched_t *s, uint64_t id);

/* Number of queued jobs. */
size_t sched_count(const sched_t *s);

#endif /* !EDDY_BROKER_SCHED_H */
