/* route.h - routing state of one broker (pure: no I/O).
 *
 * Two parts:
 *
 * route_resolve() decides where a request goes: it turns the special
 * target ranks into real ones, refuses targets outside the instance or
 * behind a lost broker, and returns the next hop (this broker, a child or
 * the parent) from the tree topology.
 *
 * The pending table remembers every request this broker forwarded and
 * still expects responses for.  Responses retrace the route hop by hop:
 * when a request from connection O with matchtag T is forwarded on
 * connection C, it gets a fresh matchtag T' unique on C, and the entry
 * (C, T') -> (O, T) lets the response coming back on C be rewritten and
 * sent to O.  The entry is also indexed by (O, T) so that a CANCEL from O
 * follows the same path.
 *
 * Lifecycle:
 *  1. route_create()
 *  2. route_alloc_tag() then route_add() when forwarding; route_by_out()
 *     for responses, route_by_origin() for cancels; route_remove() after
 *     the last response; route_entries() to walk (e.g. a lost link).
 *  3. route_destroy() frees the remaining entries.
 */
#ifndef EDDY_BROKER_ROUTE_H
#define EDDY_BROKER_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"

struct route_entry {
    uint64_t out_id;     /* connection the request was forwarded on */
    uint32_t out_tag;    /* its matchtag there */
    uint64_t origin_id;  /* connection it came from */
    uint32_t origin_tag; /* its matchtag there */
    uint32_t target;     /* real target rank */
    bool streaming;
    char *topic;
};

typedef struct route route_t;

/* Requests one connection (a client, or a peer broker forwarding for many
 * clients) may have pending through this broker at once: each costs an
 * entry, and a peer must not be able to grow the table without bound. */
#define ROUTE_ORIGIN_PENDING_MAX (256u * 1024)

route_t *route_create(void);
void route_destroy(route_t *rt); /* accepts NULL, leaves errno alone */

/* A matchtag for a new request on connection 'out_id': '*counter' is that
 * connection's tag counter; the result is never 0 and never a tag still
 * pending on that connection. */
uint32_t route_alloc_tag(const route_t *rt, uint64_t out_id, uint32_t *counter);

/* Change the limit of pending entries per origin (0: none). */
void route_set_origin_max(route_t *rt, size_t max);

/* Entries whose origin is 'origin_id'. */
size_t route_count_origin(const route_t *rt, uint64_t origin_id);

/* Record a forwarded request.  Returns the entry (owned by the table), or
 * NULL with errno EEXIST (either key already present), ENOSPC (the origin
 * has ROUTE_ORIGIN_PENDING_MAX entries already) or ENOMEM. */
struct route_entry *route_add(route_t *rt,
                              uint64_t out_id,
                              uint32_t out_tag,
                              uint64_t origin_id,
                              uint32_t origin_tag,
                              uint32_t target,
                              bool streaming,
                              const char *topic);

struct route_entry *route_by_out(const route_t *rt,
                                 uint64_t out_id,
                                 uint32_t out_tag);
struct route_entry *route_by_origin(const route_t *rt,
                                    uint64_t origin_id,
                                    uint32_t origin_tag);

/* Remove and free an entry. */
void route_remove(route_t *rt, struct route_entry *e);

/* True if a response with these flags and errnum ends the request. */
bool route_response_ends(const struct route_entry *e,
                         int msg_flags,
                         uint32_t errnum);

size_t route_count(const route_t *rt);

/* Snapshot of all entries (caller frees the array, not the entries). */
int route_entries(const route_t *rt, struct route_entry ***v, size_t *n);

/* --- next hop ------------------------------------------------------- */

struct route_topo {
    uint32_t rank;
    uint32_t size;
    uint32_t fanout;
    /* lost_by[r] is the rank whose loss made r unreachable (r itself or
     * an ancestor), TOPO_NONE if r is reachable.  May be NULL. */
    const uint32_t *lost_by;
};

/* Resolve '*target' (EDDY_RANK_ANY and EDDY_RANK_UPSTREAM are rewritten
 * in place) and return the next hop: topo->rank itself, a child, or the
 * parent.  On failure return TOPO_NONE with errno EHOSTUNREACH and 'err'
 * saying why ("no rank 9 in an instance of size 8", "rank 0 has no
 * parent", "rank 11 is unreachable: rank 5 is lost"). */
uint32_t route_resolve(const struct route_topo *topo,
                       uint32_t *target,
                       eddy_error_t *err);

#endif /* !EDDY_BROKER_ROUTE_H */
