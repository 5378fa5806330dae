/* proctable.c - a job's process table and its codec.
 *
 * Entries are kept in an array in the order they came, with a flag saying
 * whether it is still sorted by rank: brokers mostly add and merge in rank
 * order, so sorting is usually a no-op, and readers sort lazily otherwise.
 * Entries name their strings by index into an intern table (open
 * addressing over XXH3 hashes), so thousands of distinct hostnames stay
 * O(1) each.  Duplicate ranks are found through a second open-addressing
 * index of ranks, built only when an add or a merge needs it: a table
 * that is only decoded and re-encoded (the common case on the way up the
 * tree) never pays for it.
 *
 * Every mutating call first does all that may fail (checks, copies, and
 * growing arrays and indexes, which no reader can observe), then commits
 * with code that cannot fail: that is how add and merge are all or
 * nothing.
 *
 * A merge decodes the buffer into a private table first (so the decoder
 * has one job: build a valid table from untrusted bytes), then moves its
 * entries and strings into the target.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "errprintf.h"
#include "proctable.h"
#include "varint.h"

#define MAGIC_LEN 4
#define HEADER_LEN (MAGIC_LEN + 1)

/* The least bytes a string (length + 1 byte) and a run (6 varints + 1 pid)
 * take on the wire: counts are checked against them before allocating. */
#define MIN_STRING_BYTES 2
#define MIN_RUN_BYTES 7

#define NOT_FOUND SIZE_MAX
#define RSLOT_EMPTY UINT32_MAX /* rank UINT32_MAX is kept in has_rank_max */
#define MIN_SLOTS 16

struct pentry {
    uint32_t rank;
    uint32_t broker_rank;
    int32_t appnum;
    int32_t pid;
    uint32_t host; /* index into strs */
    uint32_t exe;  /* index into strs */
};

struct pstr {
    char *s; /* NUL-terminated copy */
    uint32_t len;
    uint32_t hash;
};

struct proctable {
    struct pentry *ents;
    size_t n;
    size_t cap;
    bool sorted;       /* ents[] in increasing rank order */
    uint32_t max_rank; /* meaningful when n > 0 */

    struct pstr *strs;
    size_t nstrs;
    size_t strs_cap;
    uint32_t *sslots; /* index into strs + 1, 0 when empty */
    size_t sslots_cap;

    /* Rank index: valid (holds every rank) or not built yet. */
    bool rindex_valid;
    bool has_rank_max;
    uint32_t *rslots; /* rank, or RSLOT_EMPTY */
    size_t rslots_cap;
};

proctable_t *proctable_create(void)
{
    proctable_t *pt = calloc(1, sizeof(*pt));

    if (!pt) {
        errno = ENOMEM;
        return NULL;
    }
    pt->sorted = true;
    pt->rindex_valid = true; /* empty: nothing to index */
    return pt;
}

void proctable_destroy(proctable_t *pt)
{
    int saved_errno = errno;

    if (pt) {
        for (size_t i = 0; i < pt->nstrs; i++)
            free(pt->strs[i].s);
        free(pt->strs);
        free(pt->sslots);
        free(pt->rslots);
        free(pt->ents);
        free(pt);
    }
    errno = saved_errno;
}

/* Smallest power of two >= 2 * want: tables stay at most half full, so
 * probe sequences stay short. */
static size_t slots_for(size_t want)
{
    size_t cap = MIN_SLOTS;

    while (cap < 2 * want)
        cap *= 2;
    return cap;
}

/* --- interned strings ---------------------------------------------------- */

static uint32_t str_hash(const char *s, size_t len)
{
    return (uint32_t)XXH3_64bits(s, len);
}

static size_t str_find(const proctable_t *pt,
                       const char *s,
                       size_t len,
                       uint32_t hash)
{
    size_t mask = pt->sslots_cap - 1;

    if (pt->sslots_cap == 0)
        return NOT_FOUND;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint32_t v = pt->sslots[i];
        const struct pstr *p;

        if (v == 0)
            return NOT_FOUND;
        p = &pt->strs[v - 1];
        if (p->hash == hash && p->len == len && memcmp(p->s, s, len) == 0)
            return v - 1;
    }
}

static void sslot_put(uint32_t *slots, size_t cap, uint32_t hash, size_t idx)
{
    size_t mask = cap - 1;
    size_t i = hash & mask;

    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = (uint32_t)(idx + 1);
}

/* Make room for 'want' strings in total (array and index). */
static int strs_reserve(proctable_t *pt, size_t want)
{
    if (want > pt->strs_cap) {
        size_t cap = pt->strs_cap ? pt->strs_cap * 2 : 8;
        struct pstr *n;

        if (cap < want)
            cap = want;
        if (!(n = realloc(pt->strs, cap * sizeof(*n))))
            goto nomem;
        pt->strs = n;
        pt->strs_cap = cap;
    }
    if (pt->sslots_cap < 2 * want) {
        size_t cap = slots_for(want);
        uint32_t *slots = calloc(cap, sizeof(*slots));

        if (!slots)
            goto nomem;
        for (size_t i = 0; i < pt->nstrs; i++)
            sslot_put(slots, cap, pt->strs[i].hash, i);
        free(pt->sslots);
        pt->sslots = slots;
        pt->sslots_cap = cap;
    }
    return 0;
nomem:
    errno = ENOMEM;
    return -1;
}

/* Append a string the table takes ownership of; room was reserved. */
static uint32_t str_commit(proctable_t *pt, char *s, size_t len, uint32_t hash)
{
    size_t idx = pt->nstrs++;

    pt->strs[idx].s = s;
    pt->strs[idx].len = (uint32_t)len;
    pt->strs[idx].hash = hash;
    sslot_put(pt->sslots, pt->sslots_cap, hash, idx);
    return (uint32_t)idx;
}

static char *str_copy(const char *s, size_t len)
{
    char *c = malloc(len + 1);

    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(c, s, len);
    c[len] = '\0';
    return c;
}

/* --- rank index ----------------------------------------------------------- */

/* Murmur3's finalizer: consecutive ranks spread over the whole table. */
static uint32_t rank_hash(uint32_t r)
{
    r ^= r >> 16;
    r *= 0x85ebca6bu;
    r ^= r >> 13;
    r *= 0xc2b2ae35u;
    r ^= r >> 16;
    return r;
}

static void rslot_put(uint32_t *slots, size_t cap, uint32_t rank)
{
    size_t mask = cap - 1;
    size_t i = rank_hash(rank) & mask;

    while (slots[i] != RSLOT_EMPTY)
        i = (i + 1) & mask;
    slots[i] = rank;
}

/* The index is valid. */
static bool rank_has(const proctable_t *pt, uint32_t rank)
{
    size_t mask = pt->rslots_cap - 1;

    if (rank == RSLOT_EMPTY)
        return pt->has_rank_max;
    if (pt->rslots_cap == 0)
        return false;
    for (size_t i = rank_hash(rank) & mask;; i = (i + 1) & mask) {
        if (pt->rslots[i] == rank)
            return true;
        if (pt->rslots[i] == RSLOT_EMPTY)
            return false;
    }
}

/* Room for 'want' ranks in the index. */
static void rank_insert(proctable_t *pt, uint32_t rank)
{
    if (rank == RSLOT_EMPTY)
        pt->has_rank_max = true;
    else
        rslot_put(pt->rslots, pt->rslots_cap, rank);
}

/* Make the index valid, with room for 'want' ranks in total. */
static int rank_reserve(proctable_t *pt, size_t want)
{
    size_t cap;
    uint32_t *slots;

    if (pt->rindex_valid && pt->rslots_cap >= 2 * want)
        return 0;
    if (want < pt->n)
        want = pt->n;
    cap = slots_for(want);
    if (!(slots = malloc(cap * sizeof(*slots)))) {
        errno = ENOMEM;
        return -1;
    }
    memset(slots, 0xff, cap * sizeof(*slots)); /* RSLOT_EMPTY */
    if (pt->rindex_valid) {
        for (size_t i = 0; i < pt->rslots_cap; i++) {
            if (pt->rslots[i] != RSLOT_EMPTY)
                rslot_put(slots, cap, pt->rslots[i]);
        }
    } else {
        pt->has_rank_max = false;
        for (size_t i = 0; i < pt->n; i++) {
            if (pt->ents[i].rank == RSLOT_EMPTY)
                pt->has_rank_max = true;
            else
                rslot_put(slots, cap, pt->ents[i].rank);
        }
    }
    free(pt->rslots);
    pt->rslots = slots;
    pt->rslots_cap = cap;
    pt->rindex_valid = true;
    return 0;
}

/* --- entries -------------------------------------------------------------- */

static int ents_reserve(proctable_t *pt, size_t want)
{
    size_t cap;
    struct pentry *n;

    if (want <= pt->cap)
        return 0;
    cap = pt->cap ? pt->cap * 2 : 16;
    if (cap < want)
        cap = want;
    if (!(n = realloc(pt->ents, cap * sizeof(*n)))) {
        errno = ENOMEM;
        return -1;
    }
    pt->ents = n;
    pt->cap = cap;
    return 0;
}

/* Append an entry; room was reserved.  Keeps sorted and max_rank right but
 * leaves the rank index to the caller. */
static void ent_append(proctable_t *pt, const struct pentry *e)
{
    if (pt->n > 0 && e->rank < pt->max_rank)
        pt->sorted = false;
    if (pt->n == 0 || e->rank > pt->max_rank)
        pt->max_rank = e->rank;
    pt->ents[pt->n++] = *e;
}

static int cmp_rank(const void *a, const void *b)
{
    uint32_t x = ((const struct pentry *)a)->rank;
    uint32_t y = ((const struct pentry *)b)->rank;

    return x < y ? -1 : x > y;
}

static void ensure_sorted(proctable_t *pt)
{
    if (!pt->sorted) {
        qsort(pt->ents, pt->n, sizeof(pt->ents[0]), cmp_rank);
        pt->sorted = true;
    }
}

/* Length of a valid string argument, or -1. */
static int check_str(const char *s, size_t *len)
{
    if (!s)
        return -1;
    *len = strnlen(s, PROCTABLE_STR_MAX + 1);
    if (*len == 0 || *len > PROCTABLE_STR_MAX)
        return -1;
    return 0;
}

int proctable_add(proctable_t *pt, const struct proctable_entry *e)
{
    size_t hlen, xlen, hidx, xidx;
    uint32_t hhash, xhash;
    char *hcopy = NULL, *xcopy = NULL;
    bool x_is_h = false; /* a new executable spelled like the new hostname */
    size_t nnew = 0;
    struct pentry pe;

    if (!pt || !e || e->pid <= 0 || e->appnum < 0 ||
        check_str(e->hostname, &hlen) < 0 ||
        check_str(e->executable, &xlen) < 0) {
        errno = EINVAL;
        return -1;
    }
    if (pt->n >= PROCTABLE_TASKS_MAX) {
        errno = E2BIG;
        return -1;
    }
    if (rank_reserve(pt, pt->n + 1) < 0)
        return -1;
    if (rank_has(pt, e->rank)) {
        errno = EEXIST;
        return -1;
    }
    hhash = str_hash(e->hostname, hlen);
    xhash = str_hash(e->executable, xlen);
    hidx = str_find(pt, e->hostname, hlen, hhash);
    xidx = str_find(pt, e->executable, xlen, xhash);
    if (hidx == NOT_FOUND) {
        if (!(hcopy = str_copy(e->hostname, hlen)))
            goto error;
        nnew++;
    }
    if (xidx == NOT_FOUND) {
        if (hidx == NOT_FOUND && hlen == xlen &&
            memcmp(e->hostname, e->executable, hlen) == 0) {
            x_is_h = true;
        } else {
            if (!(xcopy = str_copy(e->executable, xlen)))
                goto error;
            nnew++;
        }
    }
    if (strs_reserve(pt, pt->nstrs + nnew) < 0 ||
        ents_reserve(pt, pt->n + 1) < 0)
        goto error;

    /* Commit: nothing below can fail. */
    if (hcopy)
        hidx = str_commit(pt, hcopy, hlen, hhash);
    if (x_is_h)
        xidx = hidx;
    else if (xcopy)
        xidx = str_commit(pt, xcopy, xlen, xhash);
    pe.rank = e->rank;
    pe.broker_rank = e->broker_rank;
    pe.appnum = e->appnum;
    pe.pid = e->pid;
    pe.host = (uint32_t)hidx;
    pe.exe = (uint32_t)xidx;
    ent_append(pt, &pe);
    rank_insert(pt, e->rank);
    return 0;
error:
    free(hcopy);
    free(xcopy);
    errno = ENOMEM;
    return -1;
}

size_t proctable_count(const proctable_t *pt)
{
    return pt ? pt->n : 0;
}

int proctable_get(proctable_t *pt, size_t index, struct proctable_entry *e)
{
    const struct pentry *pe;

    if (!pt || !e || index >= pt->n) {
        errno = EINVAL;
        return -1;
    }
    ensure_sorted(pt);
    pe = &pt->ents[index];
    e->rank = pe->rank;
    e->broker_rank = pe->broker_rank;
    e->appnum = pe->appnum;
    e->pid = pe->pid;
    e->hostname = pt->strs[pe->host].s;
    e->executable = pt->strs[pe->exe].s;
    return 0;
}

bool proctable_is_complete(proctable_t *pt, uint32_t n)
{
    if (!pt || pt->n != n)
        return false;
    /* n distinct ranks, none above n - 1: exactly 0..n-1. */
    return n == 0 || pt->max_rank == n - 1;
}

/* --- encoding ------------------------------------------------------------- */

/* One past the last entry of the run starting at ents[i] (sorted). */
static size_t run_end(const proctable_t *pt, size_t i)
{
    const struct pentry *a = &pt->ents[i];
    size_t j = i + 1;

    while (j < pt->n) {
        const struct pentry *b = &pt->ents[j];
        if (b->rank - a->rank != j - i || b->broker_rank != a->broker_rank ||
            b->host != a->host || b->exe != a->exe || b->appnum != a->appnum)
            break;
        j++;
    }
    return j;
}

/* Strings in order of first use: local[] maps a table index to its wire
 * index, order[] the other way. */
struct strmap {
    uint32_t *local;
    uint32_t *order;
    uint32_t n;
};

static void strmap_use(struct strmap *m, uint32_t idx)
{
    if (m->local[idx] == UINT32_MAX) {
        m->local[idx] = m->n;
        m->order[m->n++] = idx;
    }
}

static void emit(const proctable_t *pt,
                 const struct strmap *m,
                 uint32_t nruns,
                 struct varint_writer *w)
{
    uint64_t next_rank = 0;
    uint32_t broker = 0;
    uint32_t pid = 0;

    varint_write_bytes(w, PROCTABLE_MAGIC, MAGIC_LEN);
    varint_write_bytes(w, &(uint8_t){PROCTABLE_VERSION}, 1);
    varint_write(w, m->n);
    for (uint32_t k = 0; k < m->n; k++) {
        const struct pstr *s = &pt->strs[m->order[k]];
        varint_write(w, s->len);
        varint_write_bytes(w, s->s, s->len);
    }
    varint_write(w, nruns);
    for (size_t i = 0, end; i < pt->n; i = end) {
        const struct pentry *a = &pt->ents[i];

        end = run_end(pt, i);
        varint_write(w, (uint32_t)(a->rank - next_rank));
        varint_write(w, (uint32_t)(end - i));
        varint_write(w, varint_zigzag(a->broker_rank - broker));
        varint_write(w, m->local[a->host]);
        varint_write(w, m->local[a->exe]);
        varint_write(w, (uint32_t)a->appnum);
        for (size_t j = i; j < end; j++) {
            varint_write(w, varint_zigzag((uint32_t)pt->ents[j].pid - pid));
            pid = (uint32_t)pt->ents[j].pid;
        }
        next_rank = (uint64_t)pt->ents[end - 1].rank + 1;
        broker = a->broker_rank;
    }
}

int proctable_encode(proctable_t *pt, void **buf, size_t *len)
{
    struct strmap m = {0};
    struct varint_writer w = {0};
    uint32_t nruns = 0;
    size_t size;

    if (!pt || !buf || !len) {
        errno = EINVAL;
        return -1;
    }
    ensure_sorted(pt);
    m.local = malloc((pt->nstrs ? pt->nstrs : 1) * sizeof(*m.local));
    m.order = malloc((pt->nstrs ? pt->nstrs : 1) * sizeof(*m.order));
    if (!m.local || !m.order)
        goto nomem;
    memset(m.local, 0xff, pt->nstrs * sizeof(*m.local));
    for (size_t i = 0; i < pt->n; i = run_end(pt, i)) {
        strmap_use(&m, pt->ents[i].host);
        strmap_use(&m, pt->ents[i].exe);
        nruns++;
    }
    emit(pt, &m, nruns, &w); /* sizing pass */
    size = w.pos;
    if (!(w.p = malloc(size)))
        goto nomem;
    w.pos = 0;
    emit(pt, &m, nruns, &w);
    free(m.local);
    free(m.order);
    *buf = w.p;
    *len = size;
    return 0;
nomem:
    free(m.local);
    free(m.order);
    errno = ENOMEM;
    return -1;
}

/* --- decoding ------------------------------------------------------------- */

static int nomem(struct varint_reader *r)
{
    errno = ENOMEM;
    return errprintf(r->err, "proctable: out of memory");
}

/* Check a string index of a run: in range, and in order of first use. */
static int check_index(struct varint_reader *r,
                       size_t off,
                       uint32_t idx,
                       uint32_t nstrings,
                       uint32_t *next_new,
                       const char *what)
{
    if (idx >= nstrings)
        return varint_error(r, off, "%s index %u is out of range (%u strings)",
                            what, idx, nstrings);
    if (idx > *next_new)
        return varint_error(r, off,
                            "%s index %u comes before the first use of string "
                            "%u (strings must be listed in order of first use)",
                            what, idx, *next_new);
    if (idx == *next_new)
        (*next_new)++;
    return 0;
}

/* Offset of string 'idx' in a string table already read successfully. */
static size_t string_offset(const uint8_t *p,
                            size_t len,
                            size_t table_off,
                            uint32_t idx)
{
    size_t pos = table_off;

    for (uint32_t i = 0; i < idx; i++) {
        uint32_t slen = 0;

        (void)varint_get(p, len, &pos, &slen); /* read before: cannot fail */
        pos += slen;
    }
    return pos;
}

static int read_strings(struct varint_reader *r,
                        proctable_t *t,
                        uint32_t *nstrings)
{
    size_t off = r->pos;

    if (varint_read(r, nstrings, "string count") < 0)
        return -1;
    if (*nstrings > varint_left(r) / MIN_STRING_BYTES)
        return varint_error(r, off,
                            "%u strings cannot fit in the %zu bytes left",
                            *nstrings, varint_left(r));
    if (strs_reserve(t, *nstrings) < 0)
        return nomem(r);
    for (uint32_t i = 0; i < *nstrings; i++) {
        const char *s, *nul;
        uint32_t len, hash;
        size_t dup;
        char *copy;

        r->ctx = "string";
        r->ctx_idx = i;
        off = r->pos;
        if (varint_read(r, &len, "length") < 0)
            return -1;
        if (len == 0)
            return varint_error(r, off, "empty");
        if (len > PROCTABLE_STR_MAX)
            return varint_error(r, off, "length %u exceeds %d", len,
                                PROCTABLE_STR_MAX);
        if (len > varint_left(r))
            return varint_error(r, off, "length %u but only %zu bytes left",
                                len, varint_left(r));
        s = (const char *)r->p + r->pos;
        if ((nul = memchr(s, '\0', len)))
            return varint_error(r, r->pos + (size_t)(nul - s), "NUL inside");
        hash = str_hash(s, len);
        if ((dup = str_find(t, s, len, hash)) != NOT_FOUND)
            return varint_error(r, off, "duplicates string %zu", dup);
        if (!(copy = str_copy(s, len)))
            return nomem(r);
        str_commit(t, copy, len, hash);
        r->pos += len;
    }
    r->ctx = NULL;
    return 0;
}

struct run {
    uint32_t broker_rank;
    uint32_t host;
    uint32_t exe;
    uint32_t appnum;
};

/* Read the runs into 't'; *used is how many strings they referenced. */
static int read_runs(struct varint_reader *r,
                     proctable_t *t,
                     uint32_t nstrings,
                     uint32_t *used)
{
    size_t off = r->pos;
    uint32_t nruns, next_new = 0;
    uint64_t next_rank = 0; /* one past the previous run */
    uint32_t broker = 0;
    int64_t pid = 0;
    struct run prev = {0};

    if (varint_read(r, &nruns, "run count") < 0)
        return -1;
    if (nruns > varint_left(r) / MIN_RUN_BYTES)
        return varint_error(r, off, "%u runs cannot fit in the %zu bytes left",
                            nruns, varint_left(r));
    for (uint32_t k = 0; k < nruns; k++) {
        size_t run_off = r->pos, off_gap, off_count, off_host, off_exe, off_app;
        uint32_t gap, count, bdelta;
        uint64_t first;
        struct run cur;

        r->ctx = "run";
        r->ctx_idx = k;
        off_gap = r->pos;
        if (varint_read(r, &gap, "gap") < 0)
            return -1;
        off_count = r->pos;
        if (varint_read(r, &count, "count") < 0 ||
            varint_read(r, &bdelta, "broker rank") < 0)
            return -1;
        off_host = r->pos;
        if (varint_read(r, &cur.host, "hostname index") < 0)
            return -1;
        off_exe = r->pos;
        if (varint_read(r, &cur.exe, "executable index") < 0)
            return -1;
        off_app = r->pos;
        if (varint_read(r, &cur.appnum, "appnum") < 0)
            return -1;

        first = next_rank + gap;
        if (first > UINT32_MAX)
            return varint_error(r, off_gap, "first rank %llu exceeds %u",
                                (unsigned long long)first, UINT32_MAX);
        if (count == 0)
            return varint_error(r, off_count, "count is 0");
        if (first + count - 1 > UINT32_MAX)
            return varint_error(r, off_count, "last rank %llu exceeds %u",
                                (unsigned long long)(first + count - 1),
                                UINT32_MAX);
        cur.broker_rank = broker + varint_unzigzag(bdelta);
        if (check_index(r, off_host, cur.host, nstrings, &next_new,
                        "hostname") < 0 ||
            check_index(r, off_exe, cur.exe, nstrings, &next_new,
                        "executable") < 0)
            return -1;
        if (cur.appnum > INT32_MAX)
            return varint_error(r, off_app, "appnum %u exceeds %d", cur.appnum,
                                INT32_MAX);
        if (k > 0 && gap == 0 && cur.broker_rank == prev.broker_rank &&
            cur.host == prev.host && cur.exe == prev.exe &&
            cur.appnum == prev.appnum)
            return varint_error(r, run_off,
                                "continues the previous run (runs must be "
                                "maximal)");
        if (count > PROCTABLE_TASKS_MAX - t->n) {
            errno = E2BIG;
            return errprintf(r->err,
                             "proctable: byte %zu: run %u: %u more tasks "
                             "exceed the limit of %u",
                             off_count, k, count, PROCTABLE_TASKS_MAX);
        }
        if (count > varint_left(r))
            return varint_error(r, off_count,
                                "%u tasks cannot fit in the %zu bytes left",
                                count, varint_left(r));
        if (ents_reserve(t, t->n + count) < 0)
            return nomem(r);
        for (uint32_t j = 0; j < count; j++) {
            size_t off_pid = r->pos;
            struct pentry pe;
            uint32_t v;
            int64_t d;

            if (varint_read(r, &v, "pid") < 0)
                return -1;
            v = varint_unzigzag(v);
            d = (v & 0x80000000u) ? (int64_t)v - 0x100000000ll : (int64_t)v;
            pid += d;
            if (pid <= 0 || pid > INT32_MAX)
                return varint_error(
                    r, off_pid, "rank %llu: pid %lld is invalid",
                    (unsigned long long)(first + j), (long long)pid);
            pe.rank = (uint32_t)(first + j);
            pe.broker_rank = cur.broker_rank;
            pe.appnum = (int32_t)cur.appnum;
            pe.pid = (int32_t)pid;
            pe.host = cur.host;
            pe.exe = cur.exe;
            ent_append(t, &pe);
        }
        next_rank = first + count;
        broker = cur.broker_rank;
        prev = cur;
    }
    r->ctx = NULL;
    if (varint_left(r) > 0)
        return varint_error(r, r->pos, "%zu trailing bytes after the last run",
                            varint_left(r));
    *used = next_new;
    return 0;
}

/* Fill the empty table 't' from an encoded buffer. */
static int decode_into(proctable_t *t,
                       const void *buf,
                       size_t len,
                       eddy_error_t *err)
{
    struct varint_reader r = {
        .p = buf, .len = len, .name = "proctable", .err = err};
    uint32_t nstrings, used = 0;
    size_t table_off;

    if (len < HEADER_LEN)
        return varint_error(&r, 0, "truncated header (%zu bytes)", len);
    if (memcmp(r.p, PROCTABLE_MAGIC, MAGIC_LEN) != 0)
        return varint_error(&r, 0, "bad magic (not a process table)");
    if (r.p[MAGIC_LEN] != PROCTABLE_VERSION)
        return varint_error(&r, MAGIC_LEN, "unsupported version %u (want %u)",
                            r.p[MAGIC_LEN], PROCTABLE_VERSION);
    r.pos = HEADER_LEN;
    /* Decoded entries arrive in rank order and never need the rank index;
     * it is built if the table is ever added or merged into. */
    t->rindex_valid = false;
    if (read_strings(&r, t, &nstrings) < 0)
        return -1;
    table_off = HEADER_LEN;
    while (r.p[table_off++] & 0x80) /* skip the string count */
        ;
    if (read_runs(&r, t, nstrings, &used) < 0)
        return -1;
    /* Strings are first used in order, so 'used' is the first unused. */
    if (used != nstrings)
        return varint_error(&r, string_offset(r.p, r.len, table_off, used),
                            "string %u is never used", used);
    return 0;
}

proctable_t *proctable_decode(const void *buf, size_t len, eddy_error_t *err)
{
    proctable_t *t;

    if (!buf && len > 0) {
        errno = EINVAL;
        errprintf(err, "proctable: no buffer");
        return NULL;
    }
    if (!(t = proctable_create())) {
        errprintf(err, "proctable: out of memory");
        return NULL;
    }
    if (decode_into(t, buf, len, err) < 0) {
        proctable_destroy(t);
        return NULL;
    }
    return t;
}

/* Move the entries and strings of 'src' (sorted, as decoded) into 'pt'.
 * All or nothing; 'src' is left fit only for destroy. */
static int merge_table(proctable_t *pt, proctable_t *src, eddy_error_t *err)
{
    uint32_t *map = NULL;
    size_t nnew = 0;

    if (src->n == 0)
        return 0;
    if (src->n > PROCTABLE_TASKS_MAX - pt->n) {
        errno = E2BIG;
        return errprintf(err,
                         "proctable: %zu tasks added to %zu exceed the "
                         "limit of %u",
                         src->n, pt->n, PROCTABLE_TASKS_MAX);
    }
    if (rank_reserve(pt, pt->n + src->n) < 0)
        goto nomem;
    for (size_t i = 0; i < src->n; i++) {
        if (rank_has(pt, src->ents[i].rank)) {
            errno = EEXIST;
            return errprintf(err, "proctable: rank %u is already in the table",
                             src->ents[i].rank);
        }
    }
    if (!(map = malloc(src->nstrs * sizeof(*map))))
        goto nomem;
    for (size_t i = 0; i < src->nstrs; i++) {
        const struct pstr *s = &src->strs[i];
        size_t idx = str_find(pt, s->s, s->len, s->hash);

        if (idx == NOT_FOUND) {
            map[i] = UINT32_MAX;
            nnew++;
        } else
            map[i] = (uint32_t)idx;
    }
    if (strs_reserve(pt, pt->nstrs + nnew) < 0 ||
        ents_reserve(pt, pt->n + src->n) < 0)
        goto nomem;

    /* Commit: nothing below can fail.  New strings change owner. */
    for (size_t i = 0; i < src->nstrs; i++) {
        struct pstr *s = &src->strs[i];

        if (map[i] == UINT32_MAX) {
            map[i] = str_commit(pt, s->s, s->len, s->hash);
            s->s = NULL;
        }
    }
    for (size_t i = 0; i < src->n; i++) {
        struct pentry pe = src->ents[i];

        pe.host = map[pe.host];
        pe.exe = map[pe.exe];
        ent_append(pt, &pe);
        rank_insert(pt, pe.rank);
    }
    free(map);
    return 0;
nomem:
    free(map);
    errno = ENOMEM;
    return errprintf(err, "proctable: out of memory");
}

int proctable_merge_encoded(proctable_t *pt,
                            const void *buf,
                            size_t len,
                            eddy_error_t *err)
{
    proctable_t *src;
    int rc;

    if (!pt) {
        errno = EINVAL;
        return errprintf(err, "proctable: no table to merge into");
    }
    if (!(src = proctable_decode(buf, len, err)))
        return -1;
    rc = merge_table(pt, src, err);
    proctable_destroy(src);
    return rc;
}
