/* rpool.h - the resource pool: where does a job run (pure, no I/O).
 *
 * The scheduler on rank 0 keeps one pool of broker ranks, each with some
 * cores, and asks it to place one request at a time.  Queue order (FCFS)
 * is the caller's business; the pool answers for a single request.
 *
 * Lifecycle:
 *  1. rpool_create(nranks); rpool_set_cores() for every rank (a rank with
 *     0 cores can run nothing); rpool_set_up(rank, false) when a broker is
 *     lost (nothing new is placed there; what is there stays until freed).
 *  2. rpool_fits_ever() at submit time refuses what could never run.
 *  3. rpool_alloc() places a request: 0 and an allocation, or -1 with
 *     ENOSPC (never fits), EAGAIN (not now) or EINVAL (bad request).
 *  4. rpool_alloc_encode() goes into the job's "alloc" event;
 *     rpool_alloc_decode() reads it back, and rpool_claim() re-takes a
 *     decoded allocation's cores (replay after a restart).
 *  5. rpool_free() returns the cores; rpool_alloc_destroy() frees memory.
 *  6. rpool_destroy().
 *
 * Invariants: no core is in two live allocations; a rank's free count is
 * its cores minus the cores of the live allocations on it; freeing every
 * live allocation gives back the empty pool exactly.  An allocation is
 * "live" in exactly one pool from rpool_alloc()/rpool_claim() until
 * rpool_free(); freeing anything else is EINVAL and changes nothing.
 *
 * Placement policy (docs/scheduling.md has the reasons):
 *  - nnodes 0, tasks_per_node 0: first fit in rank order; each rank takes
 *    as many tasks as its free cores allow before the next rank is used.
 *  - tasks_per_node T: exactly T tasks on each of ntasks/T ranks, the
 *    lowest-numbered ones with T * cores_per_task free cores.
 *  - nnodes N: ntasks spread over exactly N ranks, ntasks / N each; the
 *    ntasks % N extra tasks go to the lowest ranks that can take one more.
 *  - exclusive: only ranks with nothing allocated, and all their cores are
 *    taken; without nnodes or T each takes cores / cores_per_task tasks.
 *  - a task's cores are on one rank; a rank's cores are the lowest free
 *    core ids.  Tasks are numbered in rank order (block distribution).
 *  - "never" (ENOSPC) is judged against every rank's cores, up or down;
 *    a request that fits the whole instance but not the ranks that are up
 *    now is EAGAIN, since down ranks may come back.
 */
#ifndef EDDY_COMMON_RPOOL_H
#define EDDY_COMMON_RPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "eddy/core.h"
#include "idset.h"

/* Cores per rank: far above any node today (a few hundred hardware
 * threads), and it bounds the per-rank bitmaps and decoded core ids. */
#define RPOOL_CORES_MAX 4096u

/* Ranks per pool: ranks travel as idsets, whose ids stop there. */
#define RPOOL_RANKS_MAX IDSET_ID_MAX

#define RPOOL_NONE UINT32_MAX

typedef struct rpool rpool_t;
typedef struct rpool_alloc rpool_alloc_t;

struct rpool_request {
    uint32_t nnodes;         /* 0 = any number of ranks */
    uint32_t ntasks;         /* >= 1 */
    uint32_t cores_per_task; /* >= 1 */
    uint32_t tasks_per_node; /* 0 = any; else ntasks must be a multiple */
    bool exclusive;          /* whole ranks, shared with nobody */
};

/* One rank's part of an allocation (filled by rpool_alloc_slice()). */
struct rpool_slice {
    uint32_t rank;
    uint32_t ntasks;
    uint32_t first_task;  /* job-wide number of this rank's first task */
    const idset_t *cores; /* core ids on the rank; owned by the alloc */
};

/* A pool of 'nranks' ranks (1..RPOOL_RANKS_MAX), all up, with 0 cores.
 * NULL with errno EINVAL or ENOMEM.  Caller destroys with rpool_destroy(). */
rpool_t *rpool_create(uint32_t nranks);

/* Accepts NULL, leaves errno alone.  Allocations still live in the pool
 * are detached (they stay valid objects; rpool_free() on them is EINVAL). */
void rpool_destroy(rpool_t *p);

/* Set a rank's core count (0..RPOOL_CORES_MAX).  -1 with EINVAL for a bad
 * rank or count, EBUSY if the rank has cores allocated. */
int rpool_set_cores(rpool_t *p, uint32_t rank, uint32_t ncores);

/* Mark a rank up or down.  Down ranks get no new allocations; allocations
 * already there stay until freed.  -1 with EINVAL for a bad rank. */
int rpool_set_up(rpool_t *p, uint32_t rank, bool up);

/* Read the pool.  Out-of-range ranks read as 0 / false. */
uint32_t rpool_nranks(const rpool_t *p);
uint32_t rpool_rank_cores(const rpool_t *p, uint32_t rank);
uint32_t rpool_rank_nfree(const rpool_t *p, uint32_t rank);
bool rpool_rank_up(const rpool_t *p, uint32_t rank);
size_t rpool_nallocs(const rpool_t *p); /* live allocations */

/* The free core ids of 'rank' as a new idset (caller destroys).  NULL with
 * EINVAL (bad rank) or ENOMEM. */
idset_t *rpool_rank_free_set(const rpool_t *p, uint32_t rank);

/* Check a request's shape alone.  0, or -1 with EINVAL and a message
 * ("6 tasks is not a multiple of 4 tasks per node"). */
int rpool_check_request(const struct rpool_request *req, eddy_error_t *err);

/* Could 'req' run on this instance with every rank up and empty?  0 if
 * so; -1 with EINVAL (bad request) or ENOSPC and a message starting
 * "never fits: " ("never fits: 4 nodes requested, the instance has 2"). */
int rpool_fits_ever(const rpool_t *p,
                    const struct rpool_request *req,
                    eddy_error_t *err);

/* Place 'req' on the free cores of the up ranks.  On success *allocp is a
 * new live allocation (caller frees with rpool_free() and destroys with
 * rpool_alloc_destroy()).  -1 with EINVAL (bad request), ENOSPC ("never
 * fits: ..."), EAGAIN ("not now: 6 of 16 cores free") or ENOMEM; the pool
 * and *allocp are then unchanged. */
int rpool_alloc(rpool_t *p,
                const struct rpool_request *req,
                rpool_alloc_t **allocp,
                eddy_error_t *err);

/* Take the cores of an allocation that is not live (typically decoded
 * from an "alloc" event) so that it becomes live in 'p'.  Down ranks are
 * accepted (the allocation existed before they went down).  -1 with EINVAL
 * (NULL, already live, rank or core out of range) or EBUSY (a core is
 * already allocated), with a message; nothing changes then. */
int rpool_claim(rpool_t *p, rpool_alloc_t *a, eddy_error_t *err);

/* Return a live allocation's cores to 'p'.  The allocation stays a valid
 * (no longer live) object.  -1 with EINVAL if 'a' is not live in 'p'
 * (double free, another pool's, a decoded one never claimed); the pool is
 * then unchanged. */
int rpool_free(rpool_t *p, rpool_alloc_t *a);

/* Accepts NULL, leaves errno alone.  A still-live allocation returns its
 * cores to its pool first, so the pool never points at freed memory. */
void rpool_alloc_destroy(rpool_alloc_t *a);

/* Read an allocation.  Slices are in increasing rank order. */
size_t rpool_alloc_nslices(const rpool_alloc_t *a);
int rpool_alloc_slice(const rpool_alloc_t *a,
                      size_t i,
                      struct rpool_slice *out); /* -1 EINVAL if i too big */
uint32_t rpool_alloc_ntasks(const rpool_alloc_t *a);
const idset_t *rpool_alloc_ranks(const rpool_alloc_t *a); /* owned by a */

/* The rank that runs job task 'task', RPOOL_NONE if out of range. */
uint32_t rpool_alloc_task_rank(const rpool_alloc_t *a, uint32_t task);

/* Encode compactly: ranks with the same task count and core ids are
 * grouped (in rank order, consecutive slices only):
 *   {"ranks":"0-3","ntasks":16,
 *    "slices":[{"ranks":"0-3","tasks":4,"cores":"0-3"}]}
 * New reference (caller decrefs), NULL with ENOMEM. */
json_t *rpool_alloc_encode(const rpool_alloc_t *a);

/* Decode the form above strictly (no unknown keys; groups non-empty and
 * disjoint; their union is "ranks"; tasks >= 1 and at most the group's
 * core count; core ids < RPOOL_CORES_MAX; task counts add up to "ntasks").
 * New allocation, not live (see rpool_claim()); caller destroys.  NULL
 * with EINVAL and a message naming the culprit, or ENOMEM. */
rpool_alloc_t *rpool_alloc_decode(const json_t *o, eddy_error_t *err);

#endif /* !EDDY_COMMON_RPOOL_H */
