/* rpool.c - the resource pool allocation engine.
 *
 * Three max-segment-trees over ranks answer "the first rank >= r whose
 * value is >= k" in O(log ranks):
 *   free: free cores of each up rank (0 when down)  - shared requests
 *   idle: cores of each up rank with nothing on it  - exclusive requests
 *   cap:  cores of every rank, up or down           - "could it ever fit"
 * One placement routine runs against any of them, so "fits now", "fits
 * ever" and exclusive placement cannot disagree about the policy, and a
 * small job on a large busy pool costs a few tree walks, not a scan of
 * every rank.  Each rank keeps a bitmap of busy cores so that frees are
 * exact and a rank's lowest free cores are found word by word.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errprintf.h"
#include "rpool.h"

#define WORD_BITS 64u

struct segtree {
    uint32_t size; /* leaves, a power of two >= nranks */
    uint32_t *max; /* 2 * size nodes; node 1 is the root, leaves at size+i */
};

struct rank {
    uint32_t ncores;
    uint32_t nfree;
    bool up;
    uint64_t *busy; /* ceil(ncores / 64) words, bit set = allocated */
};

struct rpool {
    uint32_t nranks;
    struct rank *ranks;
    struct segtree freet, idlet, capt;
    /* Totals kept current so that messages and "never" checks are O(1). */
    uint64_t total_cores; /* all ranks */
    uint32_t ncapable;    /* ranks with cores */
    uint32_t nup;         /* up ranks */
    uint64_t cores_up;    /* cores of up ranks */
    uint64_t free_up;     /* free cores of up ranks */
    uint32_t capable_up;  /* up ranks with cores */
    uint32_t idle_up;     /* up ranks with cores and nothing allocated */
    rpool_alloc_t *live;  /* live allocations, doubly linked */
    size_t nlive;
};

struct slice {
    uint32_t rank;
    uint32_t ntasks;
    uint32_t first_task;
    idset_t *cores;
};

struct rpool_alloc {
    struct slice *slices;
    size_t nslices;
    uint32_t ntasks;
    idset_t *ranks;
    rpool_t *pool; /* non-NULL while live */
    rpool_alloc_t *prev, *next;
};

/* A planned slice: how many tasks go on which rank. */
struct place {
    uint32_t rank;
    uint32_t ntasks;
};

/* --- segment tree ------------------------------------------------------ */

static int st_init(struct segtree *t, uint32_t n)
{
    uint32_t size = 1;

    while (size < n)
        size <<= 1;
    if (!(t->max = calloc(2 * (size_t)size, sizeof(*t->max)))) {
        errno = ENOMEM;
        return -1;
    }
    t->size = size;
    return 0;
}

static void st_set(struct segtree *t, uint32_t i, uint32_t v)
{
    size_t k = (size_t)t->size + i;

    t->max[k] = v;
    for (k /= 2; k > 0; k /= 2) {
        uint32_t l = t->max[2 * k], r = t->max[2 * k + 1];
        uint32_t m = l > r ? l : r;
        if (t->max[k] == m)
            break; /* ancestors depend only on this node: unchanged */
        t->max[k] = m;
    }
}

static uint32_t st_get(const struct segtree *t, uint32_t i)
{
    return t->max[(size_t)t->size + i];
}

/* First leaf >= from whose value is >= need, RPOOL_NONE if none.  Climb
 * until a subtree to the right can satisfy 'need', then descend into its
 * leftmost such leaf.  Padding leaves are 0 and need is >= 1. */
static uint32_t st_find(const struct segtree *t, uint32_t from, uint64_t need)
{
    size_t k;

    if (need == 0)
        need = 1;
    if (from >= t->size)
        return RPOOL_NONE;
    k = (size_t)t->size + from;
    while (t->max[k] < need) {
        while (k & 1)
            k >>= 1;
        if (k == 0)
            return RPOOL_NONE;
        k++;
    }
    while (k < t->size) {
        k *= 2;
        if (t->max[k] < need)
            k++;
    }
    return (uint32_t)(k - t->size);
}

/* --- pool -------------------------------------------------------------- */

static bool rank_idle(const struct rank *rk)
{
    return rk->up && rk->ncores > 0 && rk->nfree == rk->ncores;
}

/* Every change to a rank is bracketed by unaccount() and account(), which
 * keep the totals and the trees in step with it. */
static void unaccount(rpool_t *p, uint32_t r)
{
    const struct rank *rk = &p->ranks[r];

    p->total_cores -= rk->ncores;
    if (rk->ncores > 0)
        p->ncapable--;
    if (rk->up) {
        p->nup--;
        p->cores_up -= rk->ncores;
        p->free_up -= rk->nfree;
        if (rk->ncores > 0)
            p->capable_up--;
    }
    if (rank_idle(rk))
        p->idle_up--;
}

static void account(rpool_t *p, uint32_t r)
{
    const struct rank *rk = &p->ranks[r];

    p->total_cores += rk->ncores;
    if (rk->ncores > 0)
        p->ncapable++;
    if (rk->up) {
        p->nup++;
        p->cores_up += rk->ncores;
        p->free_up += rk->nfree;
        if (rk->ncores > 0)
            p->capable_up++;
    }
    if (rank_idle(rk))
        p->idle_up++;
    st_set(&p->freet, r, rk->up ? rk->nfree : 0);
    st_set(&p->idlet, r, rank_idle(rk) ? rk->ncores : 0);
    st_set(&p->capt, r, rk->ncores);
}

rpool_t *rpool_create(uint32_t nranks)
{
    rpool_t *p;

    if (nranks == 0 || nranks > RPOOL_RANKS_MAX) {
        errno = EINVAL;
        return NULL;
    }
    if (!(p = calloc(1, sizeof(*p))))
        goto nomem;
    p->nranks = nranks;
    if (!(p->ranks = calloc(nranks, sizeof(*p->ranks))))
        goto nomem;
    if (st_init(&p->freet, nranks) < 0 || st_init(&p->idlet, nranks) < 0 ||
        st_init(&p->capt, nranks) < 0)
        goto nomem;
    for (uint32_t r = 0; r < nranks; r++)
        p->ranks[r].up = true;
    p->nup = nranks;
    return p;
nomem:
    rpool_destroy(p);
    errno = ENOMEM;
    return NULL;
}

void rpool_destroy(rpool_t *p)
{
    int saved_errno = errno;

    if (p) {
        rpool_alloc_t *a = p->live;
        while (a) {
            rpool_alloc_t *next = a->next;
            a->pool = NULL;
            a->prev = a->next = NULL;
            a = next;
        }
        if (p->ranks) {
            for (uint32_t r = 0; r < p->nranks; r++)
                free(p->ranks[r].busy);
        }
        free(p->ranks);
        free(p->freet.max);
        free(p->idlet.max);
        free(p->capt.max);
        free(p);
    }
    errno = saved_errno;
}

int rpool_set_cores(rpool_t *p, uint32_t rank, uint32_t ncores)
{
    struct rank *rk;
    uint64_t *busy = NULL;

    if (!p || rank >= p->nranks || ncores > RPOOL_CORES_MAX) {
        errno = EINVAL;
        return -1;
    }
    rk = &p->ranks[rank];
    if (rk->nfree != rk->ncores) {
        errno = EBUSY;
        return -1;
    }
    if (ncores > 0 &&
        !(busy = calloc((ncores + WORD_BITS - 1) / WORD_BITS, sizeof(*busy)))) {
        errno = ENOMEM;
        return -1;
    }
    unaccount(p, rank);
    free(rk->busy);
    rk->busy = busy;
    rk->ncores = ncores;
    rk->nfree = ncores;
    account(p, rank);
    return 0;
}

int rpool_set_up(rpool_t *p, uint32_t rank, bool up)
{
    if (!p || rank >= p->nranks) {
        errno = EINVAL;
        return -1;
    }
    unaccount(p, rank);
    p->ranks[rank].up = up;
    account(p, rank);
    return 0;
}

uint32_t rpool_nranks(const rpool_t *p)
{
    return p ? p->nranks : 0;
}

uint32_t rpool_rank_cores(const rpool_t *p, uint32_t rank)
{
    return p && rank < p->nranks ? p->ranks[rank].ncores : 0;
}

uint32_t rpool_rank_nfree(const rpool_t *p, uint32_t rank)
{
    return p && rank < p->nranks ? p->ranks[rank].nfree : 0;
}

bool rpool_rank_up(const rpool_t *p, uint32_t rank)
{
    return p && rank < p->nranks ? p->ranks[rank].up : false;
}

size_t rpool_nallocs(const rpool_t *p)
{
    return p ? p->nlive : 0;
}

static bool core_busy(const struct rank *rk, uint32_t c)
{
    return (rk->busy[c / WORD_BITS] >> (c % WORD_BITS)) & 1;
}

idset_t *rpool_rank_free_set(const rpool_t *p, uint32_t rank)
{
    const struct rank *rk;
    idset_t *s;

    if (!p || rank >= p->nranks) {
        errno = EINVAL;
        return NULL;
    }
    rk = &p->ranks[rank];
    if (!(s = idset_create()))
        return NULL;
    for (uint32_t c = 0; c < rk->ncores; c++) {
        if (!core_busy(rk, c) && idset_set(s, c) < 0) {
            idset_destroy(s);
            return NULL;
        }
    }
    return s;
}

/* --- requests ---------------------------------------------------------- */

static const char *plural(uint64_t n)
{
    return n == 1 ? "" : "s";
}

int rpool_check_request(const struct rpool_request *req, eddy_error_t *err)
{
    int saved_errno = errno;

    errno = EINVAL;
    if (!req)
        return errprintf(err, "no request given");
    if (req->ntasks == 0)
        return errprintf(err, "a job needs at least 1 task");
    if (req->cores_per_task == 0)
        return errprintf(err, "a task needs at least 1 core");
    if (req->nnodes > req->ntasks)
        return errprintf(err,
                         "%u nodes requested for %u task%s: every node needs "
                         "a task",
                         req->nnodes, req->ntasks, plural(req->ntasks));
    if (req->tasks_per_node > 0) {
        if (req->ntasks % req->tasks_per_node != 0)
            return errprintf(
                err, "%u task%s is not a multiple of %u tasks per node",
                req->ntasks, plural(req->ntasks), req->tasks_per_node);
        if (req->nnodes > 0 &&
            (uint64_t)req->nnodes * req->tasks_per_node != req->ntasks)
            return errprintf(err,
                             "%u nodes x %u tasks per node is not %u tasks",
                             req->nnodes, req->tasks_per_node, req->ntasks);
    }
    errno = saved_errno;
    return 0;
}

/* How many ranks a request needs, 0 for "as many as it takes". */
static uint32_t req_nodes(const struct rpool_request *req)
{
    if (req->tasks_per_node > 0)
        return req->ntasks / req->tasks_per_node;
    return req->nnodes;
}

/* Place 'req' on the values of tree 't' (cores available per rank).
 * Returns 0 with a plan in rank order (caller frees), 1 if it does not
 * fit, -1 with ENOMEM.  The request must have passed rpool_check_request.
 */
static int plan(const struct segtree *t,
                uint32_t nranks,
                const struct rpool_request *req,
                struct place **planp,
                size_t *np)
{
    uint32_t cpt = req->cores_per_task;
    uint32_t nnodes = req_nodes(req);
    struct place *out = NULL;
    uint32_t *big = NULL, *small = NULL;
    size_t n = 0;
    int rc = 1;

    if (nnodes == 0) {
        /* Pack: each rank in turn takes all the tasks it can. */
        uint32_t rem = req->ntasks;
        uint32_t r;
        size_t cap = req->ntasks < nranks ? req->ntasks : nranks;

        if (!(out = calloc(cap, sizeof(*out))))
            goto nomem;
        r = st_find(t, 0, cpt);
        while (rem > 0 && r != RPOOL_NONE && r < nranks) {
            uint32_t k = st_get(t, r) / cpt;
            if (k > rem)
                k = rem;
            out[n].rank = r;
            out[n].ntasks = k;
            n++;
            rem -= k;
            r = st_find(t, r + 1, cpt);
        }
        if (rem > 0)
            goto out;
    } else {
        /* 'extra' ranks take base + 1 tasks, the others base.  Pick the
         * lowest ranks able to take base + 1 for the extra ones, then the
         * lowest of the remaining ranks able to take base, and merge. */
        uint32_t base = req->ntasks / nnodes;
        uint32_t extra = req->ntasks % nnodes;
        uint32_t nsmall = nnodes - extra;
        uint64_t need_big = (uint64_t)(base + 1) * cpt;
        uint64_t need_small = (uint64_t)base * cpt;
        uint32_t r, bi, si;

        if (nnodes > nranks)
            goto out;
        if (!(out = calloc(nnodes, sizeof(*out))) ||
            !(big = calloc(extra + 1, sizeof(*big))) ||
            !(small = calloc(nsmall + 1, sizeof(*small))))
            goto nomem;
        r = 0;
        for (uint32_t i = 0; i < extra; i++) {
            if ((r = st_find(t, r, need_big)) == RPOOL_NONE || r >= nranks)
                goto out;
            big[i] = r++;
        }
        r = 0;
        bi = 0;
        for (uint32_t i = 0; i < nsmall;) {
            if ((r = st_find(t, r, need_small)) == RPOOL_NONE || r >= nranks)
                goto out;
            while (bi < extra && big[bi] < r)
                bi++;
            if (bi < extra && big[bi] == r) {
                r++;
                continue;
            }
            small[i++] = r++;
        }
        bi = si = 0;
        while (bi < extra || si < nsmall) {
            if (si >= nsmall || (bi < extra && big[bi] < small[si])) {
                out[n].rank = big[bi++];
                out[n].ntasks = base + 1;
            } else {
                out[n].rank = small[si++];
                out[n].ntasks = base;
            }
            n++;
        }
    }
    *planp = out;
    *np = n;
    out = NULL;
    rc = 0;
out:
    free(out);
    free(big);
    free(small);
    return rc;
nomem:
    free(out);
    free(big);
    free(small);
    errno = ENOMEM;
    return -1;
}

/* Why a request that passed the quick checks still cannot fit an empty
 * instance.  O(ranks), but only on this error path. */
static int explain_never(const rpool_t *p,
                         const struct rpool_request *req,
                         eddy_error_t *err)
{
    uint32_t cpt = req->cores_per_task;
    uint32_t nnodes = req_nodes(req);

    errno = ENOSPC;
    if (nnodes == 0) {
        uint64_t fit = 0;
        for (uint32_t r = 0; r < p->nranks; r++)
            fit += p->ranks[r].ncores / cpt;
        return errprintf(err,
                         "never fits: %u tasks x %u core%s requested, the "
                         "nodes can hold only %llu such tasks",
                         req->ntasks, cpt, plural(cpt),
                         (unsigned long long)fit);
    } else {
        uint32_t base = req->ntasks / nnodes;
        uint32_t extra = req->ntasks % nnodes;
        uint64_t need_small = (uint64_t)base * cpt;
        uint64_t need_big = need_small + cpt;
        uint32_t nsmall = 0, nbig = 0;

        for (uint32_t r = 0; r < p->nranks; r++) {
            if (p->ranks[r].ncores >= need_small)
                nsmall++;
            if (p->ranks[r].ncores >= need_big)
                nbig++;
        }
        if (nsmall < nnodes)
            return errprintf(err,
                             "never fits: %u nodes with %llu cores each "
                             "needed, the instance has %u",
                             nnodes, (unsigned long long)need_small, nsmall);
        return errprintf(err,
                         "never fits: %u nodes with %llu cores each needed, "
                         "the instance has %u",
                         extra, (unsigned long long)need_big, nbig);
    }
}

int rpool_fits_ever(const rpool_t *p,
                    const struct rpool_request *req,
                    eddy_error_t *err)
{
    uint32_t nnodes, cpt, maxcores;
    uint64_t need, per_node;
    struct place *pl;
    size_t n;
    int rc, saved_errno = errno;

    if (!p) {
        errno = EINVAL;
        return errprintf(err, "no resource pool");
    }
    if (rpool_check_request(req, err) < 0)
        return -1;
    nnodes = req_nodes(req);
    cpt = req->cores_per_task;
    maxcores = p->capt.max[1];
    need = (uint64_t)req->ntasks * cpt;
    errno = ENOSPC;
    if (nnodes > p->ncapable) {
        if (req->tasks_per_node > 0 && req->nnodes == 0)
            return errprintf(err,
                             "never fits: %u tasks at %u per node need %u "
                             "nodes, the instance has %u",
                             req->ntasks, req->tasks_per_node, nnodes,
                             p->ncapable);
        return errprintf(err,
                         "never fits: %u nodes requested, the instance has %u",
                         nnodes, p->ncapable);
    }
    if (cpt > maxcores)
        return errprintf(err,
                         "never fits: a task needs %u core%s, the largest "
                         "node has %u",
                         cpt, plural(cpt), maxcores);
    if (need > p->total_cores)
        return errprintf(err,
                         "never fits: %u task%s x %u core%s need %llu cores, "
                         "the instance has %llu",
                         req->ntasks, plural(req->ntasks), cpt, plural(cpt),
                         (unsigned long long)need,
                         (unsigned long long)p->total_cores);
    if (nnodes > 0) {
        uint32_t most = req->ntasks / nnodes + (req->ntasks % nnodes ? 1 : 0);
        per_node = (uint64_t)most * cpt;
        if (per_node > maxcores)
            return errprintf(err,
                             "never fits: %u tasks x %u core%s on one node "
                             "need %llu cores, the largest node has %u",
                             most, cpt, plural(cpt),
                             (unsigned long long)per_node, maxcores);
    }
    rc = plan(&p->capt, p->nranks, req, &pl, &n);
    if (rc < 0)
        return errprintf(err, "out of memory");
    if (rc > 0)
        return explain_never(p, req, err);
    free(pl);
    errno = saved_errno;
    return 0;
}

/* --- allocations ------------------------------------------------------- */

static rpool_alloc_t *alloc_new(size_t nslices)
{
    rpool_alloc_t *a;

    if (!(a = calloc(1, sizeof(*a))) ||
        !(a->slices = calloc(nslices ? nslices : 1, sizeof(*a->slices))) ||
        !(a->ranks = idset_create())) {
        rpool_alloc_destroy(a);
        errno = ENOMEM;
        return NULL;
    }
    a->nslices = nslices;
    return a;
}

static void alloc_release(rpool_alloc_t *a)
{
    for (size_t i = 0; i < a->nslices; i++)
        idset_destroy(a->slices[i].cores);
    free(a->slices);
    idset_destroy(a->ranks);
    free(a);
}

/* Turn a plan into an allocation object without touching the pool:
 * exclusive slices hold every core of their rank, shared ones the lowest
 * free cores. */
static rpool_alloc_t *build(const rpool_t *p,
                            const struct rpool_request *req,
                            const struct place *pl,
                            size_t n)
{
    rpool_alloc_t *a;
    uint32_t first = 0;

    if (!(a = alloc_new(n)))
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const struct rank *rk = &p->ranks[pl[i].rank];
        struct slice *s = &a->slices[i];
        uint32_t want =
            req->exclusive ? rk->ncores : pl[i].ntasks * req->cores_per_task;
        uint32_t got = 0;

        s->rank = pl[i].rank;
        s->ntasks = pl[i].ntasks;
        s->first_task = first;
        first += pl[i].ntasks;
        if (!(s->cores = idset_create()) || idset_set(a->ranks, s->rank) < 0)
            goto nomem;
        for (uint32_t w = 0; got < want && w * WORD_BITS < rk->ncores; w++) {
            uint64_t freebits = ~rk->busy[w];
            while (freebits && got < want) {
                uint32_t c =
                    w * WORD_BITS + (uint32_t)__builtin_ctzll(freebits);
                if (c >= rk->ncores)
                    break;
                if (idset_set(s->cores, c) < 0)
                    goto nomem;
                got++;
                freebits &= freebits - 1;
            }
        }
    }
    a->ntasks = first;
    return a;
nomem:
    alloc_release(a);
    errno = ENOMEM;
    return NULL;
}

/* Mark an allocation's cores busy (take) or free (!take) and link or
 * unlink it.  The caller has checked that this is consistent. */
static void commit(rpool_t *p, rpool_alloc_t *a, bool take)
{
    for (size_t i = 0; i < a->nslices; i++) {
        const struct slice *s = &a->slices[i];
        struct rank *rk = &p->ranks[s->rank];
        uint32_t count = 0;

        unaccount(p, s->rank);
        for (uint32_t c = idset_first(s->cores); c != IDSET_INVALID;
             c = idset_next(s->cores, c)) {
            if (take)
                rk->busy[c / WORD_BITS] |= 1ull << (c % WORD_BITS);
            else
                rk->busy[c / WORD_BITS] &= ~(1ull << (c % WORD_BITS));
            count++;
        }
        if (take)
            rk->nfree -= count;
        else
            rk->nfree += count;
        account(p, s->rank);
    }
    if (take) {
        a->pool = p;
        a->prev = NULL;
        a->next = p->live;
        if (p->live)
            p->live->prev = a;
        p->live = a;
        p->nlive++;
    } else {
        if (a->prev)
            a->prev->next = a->next;
        else
            p->live = a->next;
        if (a->next)
            a->next->prev = a->prev;
        a->pool = NULL;
        a->prev = a->next = NULL;
        p->nlive--;
    }
}

static int not_now(const rpool_t *p,
                   const struct rpool_request *req,
                   eddy_error_t *err)
{
    uint32_t ndown = p->nranks - p->nup;
    char down[64] = "";

    if (ndown > 0)
        snprintf(down, sizeof(down), ", %u rank%s down", ndown, plural(ndown));
    errno = EAGAIN;
    if (req->exclusive)
        return errprintf(err, "not now: %u of %u nodes idle%s", p->idle_up,
                         p->capable_up, down);
    return errprintf(err, "not now: %llu of %llu cores free%s",
                     (unsigned long long)p->free_up,
                     (unsigned long long)p->cores_up, down);
}

int rpool_alloc(rpool_t *p,
                const struct rpool_request *req,
                rpool_alloc_t **allocp,
                eddy_error_t *err)
{
    struct place *pl;
    size_t n;
    rpool_alloc_t *a;
    int rc;

    if (!p || !allocp) {
        errno = EINVAL;
        return errprintf(err, "no resource pool or result");
    }
    if (rpool_fits_ever(p, req, err) < 0)
        return -1;
    /* Cheap refusals first: a FCFS queue asks again for its head job after
     * every free, and a busy pool should not cost a walk of every rank. */
    if (req->exclusive
            ? req_nodes(req) > p->idle_up
            : (uint64_t)req->ntasks * req->cores_per_task > p->free_up ||
                  req_nodes(req) > p->capable_up)
        return not_now(p, req, err);
    rc = plan(req->exclusive ? &p->idlet : &p->freet, p->nranks, req, &pl, &n);
    if (rc < 0)
        return errprintf(err, "out of memory");
    if (rc > 0)
        return not_now(p, req, err);
    a = build(p, req, pl, n);
    free(pl);
    if (!a)
        return errprintf(err, "out of memory");
    commit(p, a, true);
    *allocp = a;
    return 0;
}

int rpool_claim(rpool_t *p, rpool_alloc_t *a, eddy_error_t *err)
{
    int saved_errno = errno;

    errno = EINVAL;
    if (!p || !a)
        return errprintf(err, "no resource pool or allocation");
    if (a->pool)
        return errprintf(err, "allocation is already live");
    for (size_t i = 0; i < a->nslices; i++) {
        const struct slice *s = &a->slices[i];
        const struct rank *rk;

        if (s->rank >= p->nranks)
            return errprintf(err, "rank %u is not in the pool (%u ranks)",
                             s->rank, p->nranks);
        rk = &p->ranks[s->rank];
        for (uint32_t c = idset_first(s->cores); c != IDSET_INVALID;
             c = idset_next(s->cores, c)) {
            if (c >= rk->ncores) {
                errno = EINVAL;
                return errprintf(err, "rank %u has no core %u (it has %u)",
                                 s->rank, c, rk->ncores);
            }
            if (core_busy(rk, c)) {
                errno = EBUSY;
                return errprintf(err, "rank %u core %u is already allocated",
                                 s->rank, c);
            }
        }
    }
    commit(p, a, true);
    errno = saved_errno;
    return 0;
}

int rpool_free(rpool_t *p, rpool_alloc_t *a)
{
    if (!p || !a || a->pool != p) {
        errno = EINVAL;
        return -1;
    }
    commit(p, a, false);
    return 0;
}

void rpool_alloc_destroy(rpool_alloc_t *a)
{
    int saved_errno = errno;

    if (a) {
        if (a->pool)
            commit(a->pool, a, false);
        alloc_release(a);
    }
    errno = saved_errno;
}

size_t rpool_alloc_nslices(const rpool_alloc_t *a)
{
    return a ? a->nslices : 0;
}

int rpool_alloc_slice(const rpool_alloc_t *a, size_t i, struct rpool_slice *out)
{
    if (!a || !out || i >= a->nslices) {
        errno = EINVAL;
        return -1;
    }
    out->rank = a->slices[i].rank;
    out->ntasks = a->slices[i].ntasks;
    out->first_task = a->slices[i].first_task;
    out->cores = a->slices[i].cores;
    return 0;
}

uint32_t rpool_alloc_ntasks(const rpool_alloc_t *a)
{
    return a ? a->ntasks : 0;
}

const idset_t *rpool_alloc_ranks(const rpool_alloc_t *a)
{
    return a ? a->ranks : NULL;
}

uint32_t rpool_alloc_task_rank(const rpool_alloc_t *a, uint32_t task)
{
    size_t lo = 0, hi;

    if (!a || task >= a->ntasks || a->nslices == 0)
        return RPOOL_NONE;
    /* The last slice whose first task is <= task. */
    hi = a->nslices;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->slices[mid].first_task <= task)
            lo = mid;
        else
            hi = mid;
    }
    return a->slices[lo].rank;
}

/* --- JSON -------------------------------------------------------------- */

/* Append one group {"ranks", "tasks", "cores"} to 'arr' (copies). */
static int add_group(json_t *arr,
                     const idset_t *ranks,
                     uint32_t ntasks,
                     const char *cores)
{
    char *rs = idset_encode(ranks);
    json_t *o;

    if (!rs)
        return -1;
    o = json_pack("{s:s s:I s:s}", "ranks", rs, "tasks", (json_int_t)ntasks,
                  "cores", cores);
    free(rs);
    if (!o || json_array_append_new(arr, o) < 0) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

json_t *rpool_alloc_encode(const rpool_alloc_t *a)
{
    json_t *o = NULL, *arr = NULL;
    idset_t *group = NULL;
    char *prev = NULL, *cur = NULL, *rs = NULL;
    uint32_t prev_tasks = 0;

    if (!a) {
        errno = EINVAL;
        return NULL;
    }
    if (!(arr = json_array()) || !(group = idset_create()))
        goto nomem;
    for (size_t i = 0; i < a->nslices; i++) {
        const struct slice *s = &a->slices[i];

        if (!(cur = idset_encode(s->cores)))
            goto nomem;
        if (prev && (s->ntasks != prev_tasks || strcmp(cur, prev) != 0)) {
            if (add_group(arr, group, prev_tasks, prev) < 0)
                goto nomem;
            idset_destroy(group);
            if (!(group = idset_create()))
                goto nomem;
        }
        if (idset_set(group, s->rank) < 0)
            goto nomem;
        free(prev);
        prev = cur;
        cur = NULL;
        prev_tasks = s->ntasks;
    }
    if (prev && add_group(arr, group, prev_tasks, prev) < 0)
        goto nomem;
    if (!(rs = idset_encode(a->ranks)))
        goto nomem;
    if (!(o = json_pack("{s:s s:I s:O}", "ranks", rs, "ntasks",
                        (json_int_t)a->ntasks, "slices", arr)))
        goto nomem;
    free(rs);
    free(prev);
    idset_destroy(group);
    json_decref(arr);
    return o;
nomem:
    free(rs);
    free(prev);
    free(cur);
    idset_destroy(group);
    json_decref(arr);
    errno = ENOMEM;
    return NULL;
}

static int slice_cmp(const void *x, const void *y)
{
    const struct slice *a = x, *b = y;

    return a->rank < b->rank ? -1 : a->rank > b->rank;
}

static idset_t *idset_copy(const idset_t *src)
{
    idset_t *s = idset_create();

    if (!s)
        return NULL;
    for (uint32_t i = idset_first(src); i != IDSET_INVALID;
         i = idset_next(src, i)) {
        if (idset_set(s, i) < 0) {
            idset_destroy(s);
            return NULL;
        }
    }
    return s;
}

/* Parse an idset field for decode, prefixing idset's message with where
 * the field was. */
static idset_t *decode_set(const char *s, const char *where, eddy_error_t *err)
{
    eddy_error_t e = {{0}};
    idset_t *set = idset_decode(s, &e);

    if (!set) {
        int saved = errno;
        errprintf(err, "alloc: %s: %s", where, e.text);
        errno = saved == ENOMEM ? ENOMEM : EINVAL;
        return NULL;
    }
    if (idset_count(set) == 0) {
        idset_destroy(set);
        errno = EINVAL;
        errprintf(err, "alloc: %s is empty", where);
        return NULL;
    }
    return set;
}

rpool_alloc_t *rpool_alloc_decode(const json_t *o, eddy_error_t *err)
{
    json_error_t jerr;
    const char *ranks_s;
    json_int_t ntasks;
    json_t *slices, *el;
    idset_t *ranks = NULL, *seen = NULL, *gr = NULL, *gc = NULL;
    rpool_alloc_t *a = NULL;
    uint64_t sum = 0;
    size_t idx, n = 0;
    char where[64];

    if (!o) {
        errno = EINVAL;
        errprintf(err, "alloc: no object given");
        return NULL;
    }
    if (json_unpack_ex((json_t *)o, &jerr, JSON_STRICT, "{s:s s:I s:o}",
                       "ranks", &ranks_s, "ntasks", &ntasks, "slices",
                       &slices) < 0) {
        errno = EINVAL;
        errprintf(err, "alloc: %s", jerr.text);
        return NULL;
    }
    if (ntasks < 1 || ntasks > UINT32_MAX) {
        errno = EINVAL;
        errprintf(err, "alloc: ntasks %lld is out of range", (long long)ntasks);
        return NULL;
    }
    if (!json_is_array(slices) || json_array_size(slices) == 0) {
        errno = EINVAL;
        errprintf(err, "alloc: slices must be a non-empty array");
        return NULL;
    }
    if (!(ranks = decode_set(ranks_s, "ranks", err)))
        return NULL;
    if (!(seen = idset_create()))
        goto nomem;
    /* First pass: validate the groups and count the ranks. */
    json_array_foreach(slices, idx, el)
    {
        const char *rs, *cs;
        json_int_t tasks;
        uint32_t r;

        if (json_unpack_ex(el, &jerr, JSON_STRICT, "{s:s s:I s:s}", "ranks",
                           &rs, "tasks", &tasks, "cores", &cs) < 0) {
            errno = EINVAL;
            errprintf(err, "alloc: slices[%zu]: %s", idx, jerr.text);
            goto error;
        }
        snprintf(where, sizeof(where), "slices[%zu].ranks", idx);
        if (!(gr = decode_set(rs, where, err)))
            goto error;
        snprintf(where, sizeof(where), "slices[%zu].cores", idx);
        if (!(gc = decode_set(cs, where, err)))
            goto error;
        if (idset_last(gc) >= RPOOL_CORES_MAX) {
            errno = EINVAL;
            errprintf(err, "alloc: slices[%zu]: core %u is too large", idx,
                      idset_last(gc));
            goto error;
        }
        if (tasks < 1 || (uint64_t)tasks > idset_count(gc)) {
            errno = EINVAL;
            errprintf(err,
                      "alloc: slices[%zu]: tasks %lld is not between 1 and "
                      "the %zu cores",
                      idx, (long long)tasks, idset_count(gc));
            goto error;
        }
        for (r = idset_first(gr); r != IDSET_INVALID; r = idset_next(gr, r)) {
            if (idset_test(seen, r)) {
                errno = EINVAL;
                errprintf(err, "alloc: slices[%zu]: rank %u appears twice", idx,
                          r);
                goto error;
            }
            if (!idset_test(ranks, r)) {
                errno = EINVAL;
                errprintf(err, "alloc: slices[%zu]: rank %u is not in ranks",
                          idx, r);
                goto error;
            }
            if (idset_set(seen, r) < 0)
                goto nomem;
            sum += (uint64_t)tasks;
            n++;
        }
        idset_destroy(gr);
        idset_destroy(gc);
        gr = gc = NULL;
    }
    if (n != idset_count(ranks)) {
        errno = EINVAL;
        errprintf(err, "alloc: ranks has %zu ranks, the slices cover %zu",
                  idset_count(ranks), n);
        goto error;
    }
    if (sum != (uint64_t)ntasks) {
        errno = EINVAL;
        errprintf(err, "alloc: ntasks is %lld, the slices hold %llu",
                  (long long)ntasks, (unsigned long long)sum);
        goto error;
    }
    /* Second pass: build the slices (the input is known good now). */
    if (!(a = alloc_new(n)))
        goto nomem;
    idset_destroy(a->ranks);
    a->ranks = ranks;
    ranks = NULL;
    n = 0;
    json_array_foreach(slices, idx, el)
    {
        const char *rs, *cs;
        json_int_t tasks;

        (void)json_unpack(el, "{s:s s:I s:s}", "ranks", &rs, "tasks", &tasks,
                          "cores", &cs);
        if (!(gr = idset_decode(rs, NULL)) || !(gc = idset_decode(cs, NULL)))
            goto nomem;
        for (uint32_t r = idset_first(gr); r != IDSET_INVALID;
             r = idset_next(gr, r)) {
            a->slices[n].rank = r;
            a->slices[n].ntasks = (uint32_t)tasks;
            if (!(a->slices[n].cores = idset_copy(gc)))
                goto nomem;
            n++;
        }
        idset_destroy(gr);
        idset_destroy(gc);
        gr = gc = NULL;
    }
    qsort(a->slices, a->nslices, sizeof(*a->slices), slice_cmp);
    for (size_t i = 0; i < a->nslices; i++) {
        a->slices[i].first_task = a->ntasks;
        a->ntasks += a->slices[i].ntasks;
    }
    idset_destroy(seen);
    return a;
nomem:
    errno = ENOMEM;
    errprintf(err, "alloc: out of memory");
error:
    idset_destroy(ranks);
    idset_destroy(seen);
    idset_destroy(gr);
    idset_destroy(gc);
    if (a)
        alloc_release(a);
    return NULL;
}
