/* fence.c - which contributions a broker waits for in a kvs fence, and
 * their merge (see fence.h). */
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
    json_t *kvs;
    size_t size; /* JSON-encoded size of kvs */
};

/* Bytes a string takes inside quotes once jansson escapes it (compact
 * output, UTF-8 kept as is). */
static size_t escaped_len(const char *s, size_t len)
{
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' ||
            c == '\r' || c == '\t')
            n += 2;
        else if (c < 0x20 || c == 0x7f)
            n += 6;
        else
            n++;
    }
    return n;
}

size_t fence_entry_size(const char *key, const char *value, size_t value_len)
{
    /* "key":"value", -> two pairs of quotes, a colon, a comma */
    return escaped_len(key, strlen(key)) + escaped_len(value, value_len) + 6;
}

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
        !(f->filled = calloc(f->nchildren + 1, sizeof(bool))) ||
        !(f->kvs = json_object()))
        goto nomem;
    f->size = 2; /* {} */
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
        json_decref(f->kvs);
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

int fence_add(fence_t *f, int slot, const json_t *kvs, eddy_error_t *err)
{
    const char *key;
    json_t *val;
    size_t add = 0;

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
    if (!json_is_object(kvs)) {
        errno = EPROTO;
        return errprintf(err, "fence: kvs is not an object");
    }
    /* Check everything first, so that a refused contribution leaves the
     * merged map as it was.  Keys within one object are already unique. */
    json_object_foreach((json_t *)kvs, key, val)
    {
        if (!json_is_string(val)) {
            errno = EPROTO;
            return errprintf(err, "fence: key '%.64s': value is not a string",
                             key);
        }
        if (json_object_get(f->kvs, key)) {
            errno = EEXIST;
            return errprintf(err, "fence: key '%.64s' put twice", key);
        }
        add += fence_entry_size(key, json_string_value(val),
                                json_string_length(val));
        if (f->size + add > FENCE_KVS_MAX) {
            errno = EFBIG;
            return errprintf(err, "fence: merged kvs passes %u bytes",
                             FENCE_KVS_MAX);
        }
    }
    json_object_foreach((json_t *)kvs, key, val)
    {
        if (json_object_set(f->kvs, key, val) < 0) {
            /* only out of memory: undo what was merged */
            const char *k2;
            json_t *v2;
            json_object_foreach((json_t *)kvs, k2, v2)
            {
                if (k2 == key)
                    break;
                json_object_del(f->kvs, k2);
            }
            errno = ENOMEM;
            return errprintf(err, "fence: out of memory");
        }
    }
    f->size += add;
    f->filled[slot] = true;
    f->nreceived++;
    return 0;
}

bool fence_complete(const fence_t *f)
{
    return f->nreceived == f->nexpected;
}

json_t *fence_kvs(const fence_t *f)
{
    return f->kvs;
}

size_t fence_nkeys(const fence_t *f)
{
    return json_object_size(f->kvs);
}

size_t fence_size(const fence_t *f)
{
    return f->size;
}
