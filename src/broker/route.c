/* route.c - pending-request table and next-hop decision. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/errprintf.h"
#include "src/common/msg.h"
#include "src/common/topology.h"
#include "keymap.h"
#include "route.h"

struct route {
    keymap_t *by_out;
    keymap_t *by_origin;
    keymap_t *origin_count; /* (origin, 0) -> size_t: entries it owns */
    size_t origin_max;
};

route_t *route_create(void)
{
    route_t *rt;

    if (!(rt = calloc(1, sizeof(*rt))))
        return NULL;
    if (!(rt->by_out = keymap_create()) || !(rt->by_origin = keymap_create()) ||
        !(rt->origin_count = keymap_create()))
        goto error;
    rt->origin_max = ROUTE_ORIGIN_PENDING_MAX;
    return rt;
error:
    route_destroy(rt);
    return NULL;
}

static void entry_free(struct route_entry *e)
{
    if (e) {
        free(e->topic);
        free(e);
    }
}

void route_destroy(route_t *rt)
{
    int saved_errno = errno;
    struct route_entry **v;
    size_t n;

    if (rt) {
        if (rt->by_out && keymap_values(rt->by_out, (void ***)&v, &n) == 0) {
            for (size_t i = 0; i < n; i++)
                entry_free(v[i]);
            free(v);
        }
        keymap_destroy(rt->by_out);
        if (rt->origin_count &&
            keymap_values(rt->origin_count, (void ***)&v, &n) == 0) {
            for (size_t i = 0; i < n; i++)
                free(v[i]);
            free(v);
        }
        keymap_destroy(rt->origin_count);
        keymap_destroy(rt->by_origin);
        free(rt);
    }
    errno = saved_errno;
}

void route_set_origin_max(route_t *rt, size_t max)
{
    rt->origin_max = max;
}

size_t route_count_origin(const route_t *rt, uint64_t origin_id)
{
    size_t *n = keymap_get(rt->origin_count, origin_id, 0);

    return n ? *n : 0;
}

/* Count an entry for its origin (+1) or uncount it (-1).  -1 ENOMEM. */
static int origin_count_add(route_t *rt, uint64_t origin_id, int delta)
{
    size_t *n = keymap_get(rt->origin_count, origin_id, 0);

    if (delta > 0) {
        if (!n) {
            if (!(n = calloc(1, sizeof(*n))))
                return -1;
            if (keymap_put(rt->origin_count, origin_id, 0, n) < 0) {
                free(n);
                return -1;
            }
        }
        (*n)++;
    } else if (n && --*n == 0) {
        keymap_remove(rt->origin_count, origin_id, 0);
        free(n);
    }
    return 0;
}

uint32_t route_alloc_tag(const route_t *rt, uint64_t out_id, uint32_t *counter)
{
    /* Terminates: the table cannot hold 2^32 entries for one connection. */
    for (;;) {
        uint32_t tag = ++*counter;
        if (tag != 0 && !keymap_get(rt->by_out, out_id, tag))
            return tag;
    }
}

struct route_entry *route_add(route_t *rt,
                              uint64_t out_id,
                              uint32_t out_tag,
                              uint64_t origin_id,
                              uint32_t origin_tag,
                              uint32_t target,
                              bool streaming,
                              const char *topic)
{
    struct route_entry *e;

    if (keymap_get(rt->by_out, out_id, out_tag) ||
        keymap_get(rt->by_origin, origin_id, origin_tag)) {
        errno = EEXIST;
        return NULL;
    }
    if (rt->origin_max && route_count_origin(rt, origin_id) >= rt->origin_max) {
        errno = ENOSPC;
        return NULL;
    }
    if (!(e = calloc(1, sizeof(*e))) || !(e->topic = strdup(topic)))
        goto error;
    e->out_id = out_id;
    e->out_tag = out_tag;
    e->origin_id = origin_id;
    e->origin_tag = origin_tag;
    e->target = target;
    e->streaming = streaming;
    if (keymap_put(rt->by_out, out_id, out_tag, e) < 0)
        goto error;
    if (keymap_put(rt->by_origin, origin_id, origin_tag, e) < 0) {
        keymap_remove(rt->by_out, out_id, out_tag);
        goto error;
    }
    if (origin_count_add(rt, origin_id, 1) < 0) {
        keymap_remove(rt->by_out, out_id, out_tag);
        keymap_remove(rt->by_origin, origin_id, origin_tag);
        goto error;
    }
    return e;
error:
    entry_free(e);
    errno = ENOMEM;
    return NULL;
}

struct route_entry *route_by_out(const route_t *rt,
                                 uint64_t out_id,
                                 uint32_t out_tag)
{
    return keymap_get(rt->by_out, out_id, out_tag);
}

struct route_entry *route_by_origin(const route_t *rt,
                                    uint64_t origin_id,
                                    uint32_t origin_tag)
{
    return keymap_get(rt->by_origin, origin_id, origin_tag);
}

void route_remove(route_t *rt, struct route_entry *e)
{
    if (!e)
        return;
    keymap_remove(rt->by_out, e->out_id, e->out_tag);
    keymap_remove(rt->by_origin, e->origin_id, e->origin_tag);
    origin_count_add(rt, e->origin_id, -1);
    entry_free(e);
}

bool route_response_ends(const struct route_entry *e,
                         int msg_flags,
                         uint32_t errnum)
{
    return !e->streaming || errnum != 0 || (msg_flags & MSG_FLAG_EOS);
}

size_t route_count(const route_t *rt)
{
    return keymap_count(rt->by_out);
}

int route_entries(const route_t *rt, struct route_entry ***v, size_t *n)
{
    return keymap_values(rt->by_out, (void ***)v, n);
}

uint32_t route_resolve(const struct route_topo *topo,
                       uint32_t *target,
                       eddy_error_t *err)
{
    uint32_t t = *target;
    uint32_t hop;

    if (t == EDDY_RANK_ANY)
        t = topo->rank;
    else if (t == EDDY_RANK_UPSTREAM) {
        if (topo->rank == 0) {
            errno = EHOSTUNREACH;
            errprintf(err, "rank 0 has no parent");
            return TOPO_NONE;
        }
        t = topo_parent(topo->rank, topo->fanout);
    }
    if (t >= topo->size) {
        errno = EHOSTUNREACH;
        errprintf(err, "no rank %u in an instance of size %u", t, topo->size);
        return TOPO_NONE;
    }
    if (topo->lost_by && topo->lost_by[t] != TOPO_NONE) {
        errno = EHOSTUNREACH;
        if (topo->lost_by[t] == t)
            errprintf(err, "rank %u is lost", t);
        else
            errprintf(err, "rank %u is unreachable: rank %u is lost", t,
                      topo->lost_by[t]);
        return TOPO_NONE;
    }
    hop = topo_next_hop(topo->rank, t, topo->size, topo->fanout);
    if (hop == TOPO_NONE) {
        errno = EHOSTUNREACH;
        errprintf(err, "no route to rank %u", t);
        return TOPO_NONE;
    }
    *target = t;
    return hop;
}
