/* keymap.c - chained hash map keyed by (id, tag). */
#include <errno.h>
#include <stdlib.h>

#include "keymap.h"

/* Grow when the average chain would exceed one entry: lookups stay O(1)
 * and the table never holds more than twice the buckets it needs. */
#define KEYMAP_MIN_BUCKETS 64

struct kentry {
    uint64_t id;
    uint32_t tag;
    void *val;
    struct kentry *next;
};

struct keymap {
    struct kentry **buckets;
    size_t nbuckets; /* a power of two */
    size_t count;
};

static size_t khash(uint64_t id, uint32_t tag)
{
    /* splitmix64 finaliser: cheap and mixes sequential ids and tags well */
    uint64_t x = id ^ ((uint64_t)tag << 32 | tag) * 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return (size_t)(x ^ (x >> 31));
}

keymap_t *keymap_create(void)
{
    keymap_t *m;

    if (!(m = calloc(1, sizeof(*m))))
        return NULL;
    if (!(m->buckets = calloc(KEYMAP_MIN_BUCKETS, sizeof(m->buckets[0])))) {
        free(m);
        return NULL;
    }
    m->nbuckets = KEYMAP_MIN_BUCKETS;
    return m;
}

void keymap_destroy(keymap_t *m)
{
    int saved_errno = errno;

    if (m) {
        for (size_t i = 0; i < m->nbuckets; i++) {
            struct kentry *e = m->buckets[i];
            while (e) {
                struct kentry *next = e->next;
                free(e);
                e = next;
            }
        }
        free(m->buckets);
        free(m);
    }
    errno = saved_errno;
}

static struct kentry **find(const keymap_t *m, uint64_t id, uint32_t tag)
{
    struct kentry **pp = &m->buckets[khash(id, tag) & (m->nbuckets - 1)];

    while (*pp && ((*pp)->id != id || (*pp)->tag != tag))
        pp = &(*pp)->next;
    return pp;
}

/* Double the table; on ENOMEM keep the old one (still correct, slower). */
static void grow(keymap_t *m)
{
    size_t n = m->nbuckets * 2;
    struct kentry **b;

    if (!(b = calloc(n, sizeof(b[0]))))
        return;
    for (size_t i = 0; i < m->nbuckets; i++) {
        struct kentry *e = m->buckets[i];
        while (e) {
            struct kentry *next = e->next;
            size_t h = khash(e->id, e->tag) & (n - 1);
            e->next = b[h];
            b[h] = e;
            e = next;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = n;
}

int keymap_put(keymap_t *m, uint64_t id, uint32_t tag, void *val)
{
    struct kentry **pp;
    struct kentry *e;

    if (!m || !val) {
        errno = EINVAL;
        return -1;
    }
    pp = find(m, id, tag);
    if (*pp) {
        errno = EEXIST;
        return -1;
    }
    if (!(e = calloc(1, sizeof(*e))))
        return -1;
    e->id = id;
    e->tag = tag;
    e->val = val;
    *pp = e;
    if (++m->count > m->nbuckets)
        grow(m);
    return 0;
}

void *keymap_get(const keymap_t *m, uint64_t id, uint32_t tag)
{
    struct kentry **pp;

    if (!m)
        return NULL;
    pp = find(m, id, tag);
    return *pp ? (*pp)->val : NULL;
}

void *keymap_remove(keymap_t *m, uint64_t id, uint32_t tag)
{
    struct kentry **pp;
    struct kentry *e;
    void *val;

    if (!m)
        return NULL;
    pp = find(m, id, tag);
    if (!(e = *pp))
        return NULL;
    *pp = e->next;
    val = e->val;
    free(e);
    m->count--;
    return val;
}

size_t keymap_count(const keymap_t *m)
{
    return m ? m->count : 0;
}

int keymap_values(const keymap_t *m, void ***vals, size_t *n)
{
    void **v;
    size_t k = 0;

    if (!m || !vals || !n) {
        errno = EINVAL;
        return -1;
    }
    if (!(v = calloc(m->count ? m->count : 1, sizeof(v[0]))))
        return -1;
    for (size_t i = 0; i < m->nbuckets; i++) {
        for (struct kentry *e = m->buckets[i]; e; e = e->next)
            v[k++] = e->val;
    }
    *vals = v;
    *n = k;
    return 0;
}
