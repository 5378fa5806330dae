/* keymap.h - a hash map from a (64-bit id, 32-bit tag) pair to a pointer.
 *
 * The broker indexes connections by id (tag 0) and routed requests by
 * (connection id, matchtag); both need O(1) lookups however many clients
 * and requests are in flight.  Pure data structure: no I/O, no logging.
 *
 * Lifecycle:
 *  1. keymap_create()
 *  2. keymap_put()/keymap_get()/keymap_remove(); keymap_values() takes a
 *     snapshot of the values, so callers can remove while walking it.
 *  3. keymap_destroy() frees the map, not the values.
 *
 * Invariant: a key is present at most once.
 */
#ifndef EDDY_BROKER_KEYMAP_H
#define EDDY_BROKER_KEYMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct keymap keymap_t;

/* NULL with errno ENOMEM. */
keymap_t *keymap_create(void);
void keymap_destroy(keymap_t *m); /* accepts NULL, leaves errno alone */

/* Insert 'val' (not NULL) under (id, tag).  -1 with errno EEXIST if the key
 * is present, EINVAL if val is NULL, ENOMEM. */
int keymap_put(keymap_t *m, uint64_t id, uint32_t tag, void *val);

/* The value under (id, tag), or NULL. */
void *keymap_get(const keymap_t *m, uint64_t id, uint32_t tag);

/* Remove (id, tag) and return its value, or NULL if absent. */
void *keymap_remove(keymap_t *m, uint64_t id, uint32_t tag);

size_t keymap_count(const keymap_t *m);

/* A malloc'd array of every value (caller frees the array), in no
 * particular order; '*n' is set to its length.  -1 with errno ENOMEM. */
int keymap_values(const keymap_t *m, void ***vals, size_t *n);

#endif /* !EDDY_BROKER_KEYMAP_H */
