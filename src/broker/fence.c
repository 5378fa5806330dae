/* fence.c - which contributions a broker waits for in a kvs fence, and
 * their concatenation (see fence.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "src/broker/fence.h"
#include "src/common/errprintf.h"
#include "src/common/topology.h"

struct fence {
    uint32_t rank;
    uint32_t fanout;
    uint32_t nchildren;
    uint32_t nexpected;
    uint32_t nreceived;
    bool *expected; /* per slot */
    bool *filled;   /* per slot */
    char *buf;      /* the records, concatenated */
    size_t size;    /* bytes used in buf */
    size_t alloc;   /* bytes allocated for buf */
    size_t nkeys;   /* records in buf */
};

fence_t *fence_create(uint32_t rank,
                      uint32_t size,
                      uint32_t fanout,
                      const idset_t *ranks,
                      eddy_error_t *err)
{
    fence_t *f;
    uint32_t first_child;

    if (size == 0 || fanout == 0 || rank >= size || !ranks) {
        errno = EINVAL;
        errprintf(err, "fence: bad tree shape (rank %u size %u fanout %u)",
                  rank, size, fanout);
        return NULL;
    }
    if (idset_count(ranks) == 0) {
        errno = EINVAL;
        errprintf(err, "fence: the job's rank set is empty");
        return NULL;
    }
    if (idset_last(ranks) >= size) {
        errno = EINVAL;
        errprintf(err, "fence: rank %u is not in the instance (size %u)",
                  idset_last(ranks), size);
        return NULL;
    }
    if (!(f = calloc(1, sizeof(*f))))
        goto nomem;
    f->rank = rank;
    f->fanout = fanout;
    f->nchildren = topo_nchildren(rank, size, fanout);
    if (!(f->expected = calloc(f->nchildren + 1, sizeof(bool))) ||
        !(f->filled = calloc(f->nchildren + 1, sizeof(bool))))
        goto nomem;
    first_child = f->nchildren ? topo_child(rank, fanout, 0) : 0;
    /* Map each rank of the job to the child on its route: a child is
     * expected iff its subtree holds one of them. */
    for (uint32_t r = idset_first(ranks); r != IDSET_INVALID;
         r = idset_next(ranks, r)) {
        uint32_t hop;
        int slot;

        if (r == rank) {
            slot = FENCE_SLOT_LOCAL;
        } else if (topo_in_subtree(rank, r, fanout)) {
            hop = topo_next_hop(rank, r, size, fanout);
            slot = 1 + (int)(hop - first_child);
        } else
            continue;
        if (!f->expected[slot]) {
            f->expected[slot] = true;
            f->nexpected++;
        }
    }
    if (f->nexpected == 0 && rank != 0) {
        fence_destroy(f);
        errno = EINVAL;
        errprintf(err, "fence: rank %u is neither in the job nor above it",
                  rank);
        return NULL;
    }
    return f;
nomem:
    fence_destroy(f);
    errno = ENOMEM;
    errprintf(err, "fence: out of memory");
    return NULL;
}

void fence_destroy(fence_t *f)
{
    int saved = errno;

    if (f) {
        free(f->expected);
        free(f->filled);
        free(f->buf);
        free(f);
    }
    errno = saved;
}

bool fence_expects_local(const fence_t *f)
{
    return f->expected[FENCE_SLOT_LOCAL];
}

int fence_child_slot(const fence_t *f, uint32_t child)
{
    uint32_t first;

    if (f->nchildren == 0)
        goto inval;
    first = topo_child(f->rank, f->fanout, 0);
    if (child < first || child - first >= f->nchildren)
        goto inval;
    return 1 + (int)(child - first);
inval:
    errno = EINVAL;
    return -1;
}

bool fence_expects_child(const fence_t *f, uint32_t child)
{
    int slot = fence_child_slot(f, child);

    return slot > 0 && f->expected[slot];
}

uint32_t fence_nslots(const fence_t *f)
{
    return f->nchildren + 1;
}

uint32_t fence_slot_rank(const fence_t *f, int slot)
{
    if (slot < 1 || (uint32_t)slot > f->nchildren)
        return TOPO_NONE;
    return topo_child(f->rank, f->fanout, (uint32_t)slot - 1);
}

bool fence_slot_expected(const fence_t *f, int slot)
{
    return slot >= 0 && (uint32_t)slot <= f->nchildren && f->expected[slot];
}

bool fence_slot_filled(const fence_t *f, int slot)
{
    return slot >= 0 && (uint32_t)slot <= f->nchildren && f->filled[slot];
}

uint32_t fence_nexpected(const fence_t *f)
{
    return f->nexpected;
}

uint32_t fence_nreceived(const fence_t *f)
{
    return f->nreceived;
}

long fence_check_records(const void *data, size_t len, eddy_error_t *err)
{
    const char *p = data, *end, *nul;
    long n = 0;

    if (len == 0)
        return 0; /* data may be NULL: no arithmetic on it */
    end = p + len;

    /* Walk the NULs: even ones end keys, odd ones end values. */
    while (p < end) {
        if (!(nul = memchr(p, '\0', (size_t)(end - p)))) {
            errno = EPROTO;
            return errprintf(err, "fence: record %ld: no NUL after the %s", n,
                             "key");
        }
        if (nul == p) {
            errno = EPROTO;
            return errprintf(err, "fence: record %ld: empty key", n);
        }
        p = nul + 1;
        if (p >= end || !(nul = memchr(p, '\0', (size_t)(end - p)))) {
            errno = EPROTO;
            return errprintf(err, "fence: record %ld: no NUL after the %s", n,
                             "value");
        }
        p = nul + 1;
        n++;
    }
    return n;
}

int fence_add(
    fence_t *f, int slot, const void *data, size_t len, eddy_error_t *err)
{
    long n;

    if (!fence_slot_expected(f, slot)) {
        errno = EINVAL;
        return errprintf(err, "fence: rank %u does not wait for %s", f->rank,
                         slot == FENCE_SLOT_LOCAL ? "a local contribution"
                                                  : "this child");
    }
    if (f->filled[slot]) {
        errno = EINVAL;
        return errprintf(err, "fence: contribution repeated");
    }
    if (len > FENCE_KVS_MAX - f->size) {
        errno = EFBIG;
        return errprintf(err, "fence: merged kvs passes %u bytes",
                         FENCE_KVS_MAX);
    }
    if ((n = fence_check_records(data, len, err)) < 0)
        return -1;
    if (f->size + len > f->alloc) {
        /* grow geometrically: a broker with many children appends often */
        size_t want = f->alloc ? f->alloc : 4096;
        char *nb;
        while (want < f->size + len)
            want *= 2;
        if (!(nb = realloc(f->buf, want))) {
            errno = ENOMEM;
            return errprintf(err, "fence: out of memory");
        }
        f->buf = nb;
        f->alloc = want;
    }
    if (len)
        memcpy(f->buf + f->size, data, len);
    f->size += len;
    f->nkeys += (size_t)n;
    f->filled[slot] = true;
    f->nreceived++;
    return 0;
}

bool fence_complete(const fence_t *f)
{
    return f->nreceived == f->nexpected;
}

const void *fence_data(const fence_t *f)
{
    return f->size ? f->buf : NULL;
}

size_t fence_nkeys(const fence_t *f)
{
    return f->nkeys;
}

size_t fence_size(const fence_t *f)
{
    return f->size;
}
