/* tagtab.c - matchtag -> future map for libeddy.
 *
 * Tools keep thousands of RPCs outstanding, so every response must find
 * its future in O(1).  Matchtags are small sequential integers; a
 * multiplicative hash spreads them over a power-of-two table kept at most
 * half full, and backward-shift deletion avoids tombstones, so lookups stay
 * short however long the handle lives.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lib.h"

#define TAGTAB_MIN_BITS 6

static inline uint32_t slot_of(const struct tagtab *t, uint32_t key)
{
    return (uint32_t)((key * 2654435761u) >> (32 - t->bits));
}

void tagtab_init(struct tagtab *t)
{
    memset(t, 0, sizeof(*t));
}

void tagtab_release(struct tagtab *t)
{
    if (!t)
        return;
    free(t->keys);
    free(t->vals);
    memset(t, 0, sizeof(*t));
}

void *tagtab_get(const struct tagtab *t, uint32_t key)
{
    uint32_t mask, i;

    if (t->bits == 0 || key == 0)
        return NULL;
    mask = (1u << t->bits) - 1;
    for (i = slot_of(t, key); t->keys[i] != 0; i = (i + 1) & mask) {
        if (t->keys[i] == key)
            return t->vals[i];
    }
    return NULL;
}

static void insert_slot(struct tagtab *t, uint32_t key, void *val)
{
    uint32_t mask = (1u << t->bits) - 1;
    uint32_t i = slot_of(t, key);

    while (t->keys[i] != 0)
        i = (i + 1) & mask;
    t->keys[i] = key;
    t->vals[i] = val;
}

static int grow(struct tagtab *t)
{
    uint32_t bits = t->bits ? t->bits + 1 : TAGTAB_MIN_BITS;
    struct tagtab n = {.bits = bits, .count = t->count};
    size_t cap = (size_t)1 << bits, oldcap = t->bits ? (size_t)1 << t->bits : 0;

    if (bits > 31) {
        errno = ENOMEM;
        return -1;
    }
    n.keys = calloc(cap, sizeof(*n.keys));
    n.vals = calloc(cap, sizeof(*n.vals));
    if (!n.keys || !n.vals) {
        free(n.keys);
        free(n.vals);
        errno = ENOMEM;
        return -1;
    }
    for (size_t i = 0; i < oldcap; i++) {
        if (t->keys[i] != 0)
            insert_slot(&n, t->keys[i], t->vals[i]);
    }
    free(t->keys);
    free(t->vals);
    *t = n;
    return 0;
}

int tagtab_put(struct tagtab *t, uint32_t key, void *val)
{
    if (key == 0) {
        errno = EINVAL;
        return -1;
    }
    /* keep the load factor at or below 1/2 */
    if (t->bits == 0 || (t->count + 1) * 2 > ((size_t)1 << t->bits)) {
        if (grow(t) < 0)
            return -1;
    }
    insert_slot(t, key, val);
    t->count++;
    return 0;
}

void tagtab_del(struct tagtab *t, uint32_t key)
{
    uint32_t mask, i, j;

    if (t->bits == 0 || key == 0)
        return;
    mask = (1u << t->bits) - 1;
    for (i = slot_of(t, key); t->keys[i] != key; i = (i + 1) & mask) {
        if (t->keys[i] == 0)
            return;
    }
    /* Shift later members of the probe run back into the hole when their
     * home slot does not lie cyclically in (hole, j]. */
    j = i;
    for (;;) {
        uint32_t home;

        j = (j + 1) & mask;
        if (t->keys[j] == 0)
            break;
        home = slot_of(t, t->keys[j]);
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        t->keys[i] = t->keys[j];
        t->vals[i] = t->vals[j];
        i = j;
    }
    t->keys[i] = 0;
    t->vals[i] = NULL;
    t->count--;
}

void tagtab_clear(struct tagtab *t)
{
    if (t->bits == 0)
        return;
    memset(t->keys, 0, sizeof(*t->keys) << t->bits);
    memset(t->vals, 0, sizeof(*t->vals) << t->bits);
    t->count = 0;
}
