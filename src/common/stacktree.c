/* stacktree.c - call paths of many tasks merged into one tree of rank sets.
 *
 * A node stores only its "ends" (the tasks whose path ends there); its
 * "ranks" are derived (ends plus the children's ranks) when printing.
 * Storing derived sets in every node would cost, for a deep path shared by
 * many sparse ranks, depth times the ranges of the leaf, and a hostile
 * encoded tree could make that quadratic in its length; derived on output
 * they cost no more than the output itself.  Adding and merging then only
 * ever touch the ends of the node where a path stops.
 *
 * Rank sets are sorted arrays of disjoint, non-touching ranges rather than
 * idset_t: an idset is a bitmap as long as its highest id, which for a
 * leaf holding rank 16000 alone is 2 KiB, and a decoded tree of many such
 * leaves would grow far beyond the bytes it came from.
 *
 * Every mutating call first does all that may fail (checks, copies of new
 * subtrees, new range arrays, growing child arrays, none of which a reader
 * can observe), then commits with code that cannot fail: that is how add
 * and merge are all or nothing.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errprintf.h"
#include "quote.h"
#include "stacktree.h"
#include "varint.h"

#define MAGIC_LEN 4
#define HEADER_LEN (MAGIC_LEN + 1)

/* The least bytes a range (two varints) and a node (name length, one
 * byte of name, range count, child count) take on the wire: counts are
 * checked against them before allocating. */
#define MIN_RUN_BYTES 2
#define MIN_NODE_BYTES 4

/* How much of a hostile name goes into an error message. */
#define QUOTE_MAX 40

struct run {
    uint32_t lo, hi; /* inclusive, lo <= hi */
};

/* Sorted, disjoint and non-touching ranges: hi + 1 < next lo. */
struct rset {
    struct run *r;
    uint32_t n, cap;
};

struct node {
    struct rset ends;
    struct node **kids; /* sorted by name, distinct */
    uint32_t nkids, kcap;
    uint32_t namelen; /* 0 for the root only */
    char name[];      /* namelen bytes and a NUL */
};

struct stacktree {
    struct node *root;
    size_t nnodes; /* not counting the root */
};

/* --- rank sets ------------------------------------------------------------ */

static void rset_release(struct rset *s)
{
    free(s->r);
    s->r = NULL;
    s->n = s->cap = 0;
}

/* Index of the first range with hi >= id (n if none). */
static uint32_t rset_lower(const struct rset *s, uint32_t id)
{
    uint32_t lo = 0, hi = s->n;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->r[mid].hi < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool rset_test(const struct rset *s, uint32_t id)
{
    uint32_t i = rset_lower(s, id);

    return i < s->n && s->r[i].lo <= id;
}

/* Grow the array '*p' of '*cap' elements of 'size' bytes to hold at
 * least 'need', doubling.  -1 with errno ENOMEM (the array is kept).
 * The one growth rule for every array here. */
static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    size_t c;
    void *np;

    if (need <= *cap)
        return 0;
    c = *cap ? *cap : 4;
    while (c < need)
        c = c > SIZE_MAX / 2 / size ? need : c * 2;
    if (c > SIZE_MAX / size || !(np = realloc(*p, c * size))) {
        errno = ENOMEM;
        return -1;
    }
    *p = np;
    *cap = c;
    return 0;
}

/* grow() for the arrays the tree keeps, whose counts are 32-bit (node
 * and range counts are bounded far below UINT32_MAX). */
static int grow32(void **p, uint32_t *cap, uint32_t need, size_t size)
{
    size_t c = *cap;

    if (grow(p, &c, need, size) < 0)
        return -1;
    *cap = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
    return 0;
}

/* Room for 'need' ranges; no reader can tell. */
static int rset_reserve(struct rset *s, uint32_t need)
{
    return grow32((void **)&s->r, &s->cap, need, sizeof(*s->r));
}

/* Add 'id'; the caller reserved room for one more range. */
static void rset_insert(struct rset *s, uint32_t id)
{
    uint32_t i = rset_lower(s, id);
    bool join_left = i > 0 && s->r[i - 1].hi + 1 == id;
    bool join_right = i < s->n && s->r[i].lo == id + 1;

    if (i < s->n && s->r[i].lo <= id)
        return;
    if (join_left && join_right) {
        s->r[i - 1].hi = s->r[i].hi;
        memmove(&s->r[i], &s->r[i + 1], (s->n - i - 1) * sizeof(s->r[0]));
        s->n--;
    } else if (join_left) {
        s->r[i - 1].hi = id;
    } else if (join_right) {
        s->r[i].lo = id;
    } else {
        memmove(&s->r[i + 1], &s->r[i], (s->n - i) * sizeof(s->r[0]));
        s->r[i].lo = s->r[i].hi = id;
        s->n++;
    }
}

/* Is a a subset of b?  Ranges of b never touch, so each range of a lies
 * within one range of b. */
static bool rset_subset(const struct rset *a, const struct rset *b)
{
    for (uint32_t i = 0; i < a->n; i++) {
        uint32_t j = rset_lower(b, a->r[i].lo);
        if (j == b->n || b->r[j].lo > a->r[i].lo || b->r[j].hi < a->r[i].hi)
            return false;
    }
    return true;
}

/* Append range r to the set being built in out (ranges come in order of
 * lo), joining it to the last one when they overlap or touch. */
static void rset_push(struct rset *out, struct run r)
{
    struct run *last = out->n ? &out->r[out->n - 1] : NULL;

    if (last && r.lo <= last->hi + 1) {
        if (r.hi > last->hi)
            last->hi = r.hi;
    } else {
        out->r[out->n++] = r;
    }
}

/* out = a | b, in a new array.  -1 ENOMEM. */
static int rset_union(const struct rset *a,
                      const struct rset *b,
                      struct rset *out)
{
    struct rset u = {0};
    uint32_t i = 0, j = 0;

    if (rset_reserve(&u, a->n + b->n) < 0)
        return -1;
    while (i < a->n || j < b->n) {
        if (j == b->n || (i < a->n && a->r[i].lo <= b->r[j].lo))
            rset_push(&u, a->r[i++]);
        else
            rset_push(&u, b->r[j++]);
    }
    *out = u;
    return 0;
}

static int run_cmp(const void *a, const void *b)
{
    const struct run *x = a, *y = b;

    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sort the ranges of 's' (any order, may overlap) into a proper set. */
static void rset_normalize(struct rset *s)
{
    uint32_t n = s->n;

    if (n < 2)
        return;
    qsort(s->r, n, sizeof(s->r[0]), run_cmp);
    s->n = 0;
    for (uint32_t i = 0; i < n; i++)
        rset_push(s, s->r[i]);
}

/* --- growing strings ------------------------------------------------------ */

struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *np;

        while (cap < b->len + n + 1)
            cap *= 2;
        if (!(np = realloc(b->p, cap))) {
            b->failed = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_str(struct sbuf *b, const char *s)
{
    sb_add(b, s, strlen(s));
}

/* RFC 22 form, as idset_encode() writes it: "0-3,8". */
static void sb_rset(struct sbuf *b, const struct rset *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        char tmp[32];
        int n;

        if (s->r[i].lo == s->r[i].hi)
            n = snprintf(tmp, sizeof(tmp), "%s%u", i ? "," : "", s->r[i].lo);
        else
            n = snprintf(tmp, sizeof(tmp), "%s%u-%u", i ? "," : "", s->r[i].lo,
                         s->r[i].hi);
        sb_add(b, tmp, (size_t)n);
    }
}

/* The string built, or NULL with errno ENOMEM (and nothing to free). */
static char *sb_finish(struct sbuf *b)
{
    sb_add(b, "", 0); /* an empty result is still a string */
    if (b->failed) {
        free(b->p);
        errno = ENOMEM;
        return NULL;
    }
    return b->p;
}

static char *rset_string(const struct rset *s)
{
    struct sbuf b = {0};

    sb_rset(&b, s);
    return sb_finish(&b);
}

/* --- nodes ---------------------------------------------------------------- */

static struct node *node_create(const char *name, uint32_t len)
{
    struct node *n = calloc(1, sizeof(*n) + len + 1);

    if (!n) {
        errno = ENOMEM;
        return NULL;
    }
    memcpy(n->name, name, len);
    n->name[len] = '\0';
    n->namelen = len;
    return n;
}

static void node_destroy(struct node *n)
{
    if (n) {
        for (uint32_t i = 0; i < n->nkids; i++)
            node_destroy(n->kids[i]);
        free(n->kids);
        rset_release(&n->ends);
        free(n);
    }
}

/* Bytewise order, a prefix first: the order of strcmp(). */
static int name_cmp(const char *a, size_t alen, const char *b, size_t blen)
{
    int c = memcmp(a, b, alen < blen ? alen : blen);

    if (c != 0)
        return c;
    return alen < blen ? -1 : alen > blen;
}

/* The child of 'n' named name[0..len), or NULL with *pos where it would
 * go. */
static struct node *find_child(const struct node *n,
                               const char *name,
                               size_t len,
                               uint32_t *pos)
{
    uint32_t lo = 0, hi = n->nkids;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const struct node *k = n->kids[mid];
        int c = name_cmp(name, len, k->name, k->namelen);

        if (c == 0) {
            *pos = mid;
            return n->kids[mid];
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *pos = lo;
    return NULL;
}

static int kids_reserve(struct node *n, uint32_t need)
{
    return grow32((void **)&n->kids, &n->kcap, need, sizeof(*n->kids));
}

/* Insert 'k' in order; the caller reserved room. */
static void kids_insert(struct node *n, struct node *k)
{
    uint32_t pos;

    (void)find_child(n, k->name, k->namelen, &pos);
    memmove(&n->kids[pos + 1], &n->kids[pos],
            (n->nkids - pos) * sizeof(n->kids[0]));
    n->kids[pos] = k;
    n->nkids++;
}

/* UTF-8 without control characters (C0, DEL, C1), overlong forms,
 * surrogates or code points past U+10FFFF: what every output accepts. */
static bool valid_name(const char *s, size_t len)
{
    size_t i = 0;

    if (len == 0 || len > STACKTREE_NAME_MAX)
        return false;
    while (i < len) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp, min;
        size_t n;

        if (c < 0x80) {
            if (c < 0x20 || c == 0x7f)
                return false;
            i++;
            continue;
        }
        if ((c & 0xe0) == 0xc0) {
            n = 2;
            cp = c & 0x1f;
            min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            n = 3;
            cp = c & 0x0f;
            min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            n = 4;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            return false;
        }
        if (len - i < n)
            return false;
        for (size_t k = 1; k < n; k++) {
            unsigned char cc = (unsigned char)s[i + k];
            if ((cc & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (cc & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ||
            cp < 0xa0)
            return false;
        i += n;
    }
    return true;
}

/* --- create, destroy, add ------------------------------------------------- */

stacktree_t *stacktree_create(void)
{
    stacktree_t *t = calloc(1, sizeof(*t));

    if (!t || !(t->root = node_create("", 0))) {
        free(t);
        errno = ENOMEM;
        return NULL;
    }
    return t;
}

void stacktree_destroy(stacktree_t *t)
{
    int saved_errno = errno;

    if (t) {
        node_destroy(t->root);
        free(t);
    }
    errno = saved_errno;
}

int stacktree_add(stacktree_t *t,
                  const char *const *frames,
                  size_t n,
                  uint32_t rank)
{
    struct node *at, *chain = NULL, *tail = NULL;
    size_t i;
    uint32_t pos;

    if (!t || !frames || n == 0 || n > STACKTREE_DEPTH_MAX) {
        errno = EINVAL;
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (!frames[i] ||
            !valid_name(frames[i],
                        strnlen(frames[i], STACKTREE_NAME_MAX + 1))) {
            errno = EINVAL;
            return -1;
        }
    }
    if (rank >= STACKTREE_RANK_MAX) {
        errno = ERANGE;
        return -1;
    }
    /* Follow the part of the path the tree has. */
    at = t->root;
    for (i = 0; i < n; i++) {
        struct node *k = find_child(at, frames[i], strlen(frames[i]), &pos);
        if (!k)
            break;
        at = k;
    }
    if (i == n) {
        if (rset_test(&at->ends, rank))
            return 0;
        if (rset_reserve(&at->ends, at->ends.n + 1) < 0)
            return -1;
        rset_insert(&at->ends, rank);
        return 0;
    }
    /* Build the rest detached, then hang it under 'at'. */
    if (n - i > STACKTREE_NODES_MAX - t->nnodes) {
        errno = E2BIG;
        return -1;
    }
    for (size_t j = i; j < n; j++) {
        struct node *k = node_create(frames[j], (uint32_t)strlen(frames[j]));

        if (!k || (tail && kids_reserve(tail, 1) < 0)) {
            node_destroy(k);
            goto error;
        }
        if (tail)
            tail->kids[tail->nkids++] = k;
        else
            chain = k;
        tail = k;
    }
    if (rset_reserve(&tail->ends, 1) < 0 || kids_reserve(at, at->nkids + 1) < 0)
        goto error;
    rset_insert(&tail->ends, rank);
    kids_insert(at, chain);
    t->nnodes += n - i;
    return 0;
error:
    node_destroy(chain);
    errno = ENOMEM;
    return -1;
}

/* --- merge ---------------------------------------------------------------- */

/* What a merge will do, prepared before anything changes. */
struct update {
    struct rset *dst; /* gets 'set' */
    struct rset set;
};

struct insert {
    struct node *parent;
    struct node *child; /* a copy of a subtree of src */
};

struct plan {
    struct update *u;
    size_t nu, cu;
    struct insert *in;
    size_t nin, cin;
    size_t newnodes;
    size_t room; /* nodes t may still take */
};

/* A deep copy of 'src', counted against plan->room. */
static struct node *copy_node(struct plan *pl, const struct node *src)
{
    struct node *n;

    if (pl->newnodes == pl->room) {
        errno = E2BIG;
        return NULL;
    }
    if (!(n = node_create(src->name, src->namelen)))
        return NULL;
    pl->newnodes++;
    if (rset_reserve(&n->ends, src->ends.n) < 0 ||
        kids_reserve(n, src->nkids) < 0)
        goto error;
    if (src->ends.n)
        memcpy(n->ends.r, src->ends.r, src->ends.n * sizeof(struct run));
    n->ends.n = src->ends.n;
    for (uint32_t i = 0; i < src->nkids; i++) {
        if (!(n->kids[i] = copy_node(pl, src->kids[i])))
            goto error;
        n->nkids++;
    }
    return n;
error:
    node_destroy(n);
    return NULL;
}

static int plan_node(struct plan *pl, struct node *dst, const struct node *src)
{
    uint32_t i = 0, j = 0, added = 0;

    if (!rset_subset(&src->ends, &dst->ends)) {
        if (grow((void **)&pl->u, &pl->cu, pl->nu + 1, sizeof(*pl->u)) < 0 ||
            rset_union(&dst->ends, &src->ends, &pl->u[pl->nu].set) < 0)
            return -1;
        pl->u[pl->nu++].dst = &dst->ends;
    }
    /* Both child lists are sorted: walk them side by side. */
    while (j < src->nkids) {
        const struct node *sk = src->kids[j];
        int c = i < dst->nkids
                    ? name_cmp(dst->kids[i]->name, dst->kids[i]->namelen,
                               sk->name, sk->namelen)
                    : 1;
        if (c < 0) {
            i++;
        } else if (c == 0) {
            if (plan_node(pl, dst->kids[i++], src->kids[j++]) < 0)
                return -1;
        } else {
            struct node *copy;

            if (grow((void **)&pl->in, &pl->cin, pl->nin + 1, sizeof(*pl->in)) <
                    0 ||
                !(copy = copy_node(pl, sk)))
                return -1;
            pl->in[pl->nin].parent = dst;
            pl->in[pl->nin++].child = copy;
            added++;
            j++;
        }
    }
    return added ? kids_reserve(dst, dst->nkids + added) : 0;
}

static void plan_release(struct plan *pl, bool committed)
{
    for (size_t i = 0; i < pl->nu; i++)
        rset_release(&pl->u[i].set);
    if (!committed) {
        for (size_t i = 0; i < pl->nin; i++)
            node_destroy(pl->in[i].child);
    }
    free(pl->u);
    free(pl->in);
}

int stacktree_merge(stacktree_t *t, const stacktree_t *src)
{
    struct plan pl = {0};

    if (!t || !src) {
        errno = EINVAL;
        return -1;
    }
    if (t == src)
        return 0;
    pl.room = STACKTREE_NODES_MAX - t->nnodes;
    if (plan_node(&pl, t->root, src->root) < 0) {
        int saved_errno = errno;
        plan_release(&pl, false);
        errno = saved_errno;
        return -1;
    }
    /* Commit: nothing below can fail. */
    for (size_t i = 0; i < pl.nu; i++) {
        struct rset old = *pl.u[i].dst;
        *pl.u[i].dst = pl.u[i].set;
        pl.u[i].set = old; /* freed by plan_release() */
    }
    for (size_t i = 0; i < pl.nin; i++)
        kids_insert(pl.in[i].parent, pl.in[i].child);
    t->nnodes += pl.newnodes;
    plan_release(&pl, true);
    return 0;
}

/* --- encoding ------------------------------------------------------------- */

static void put_kids(struct varint_writer *w, const struct node *n);

static void put_node(struct varint_writer *w, const struct node *n)
{
    varint_write(w, n->namelen);
    varint_write_bytes(w, n->name, n->namelen);
    varint_write(w, n->ends.n);
    for (uint32_t i = 0; i < n->ends.n; i++) {
        const struct run *r = &n->ends.r[i];
        varint_write(w, i ? r->lo - (r[-1].hi + 2) : r->lo);
        varint_write(w, r->hi - r->lo);
    }
    put_kids(w, n);
}

static void put_kids(struct varint_writer *w, const struct node *n)
{
    varint_write(w, n->nkids);
    for (uint32_t i = 0; i < n->nkids; i++)
        put_node(w, n->kids[i]);
}

static void put_tree(struct varint_writer *w, const stacktree_t *t)
{
    uint8_t version = STACKTREE_VERSION;

    varint_write_bytes(w, STACKTREE_MAGIC, MAGIC_LEN);
    varint_write_bytes(w, &version, 1);
    put_kids(w, t->root);
}

int stacktree_encode(const stacktree_t *t, void **buf, size_t *len)
{
    struct varint_writer w = {0};

    if (!t || !buf || !len) {
        errno = EINVAL;
        return -1;
    }
    put_tree(&w, t);
    if (!(w.p = malloc(w.pos))) {
        errno = ENOMEM;
        return -1;
    }
    w.pos = 0;
    put_tree(&w, t);
    *buf = w.p;
    *len = w.pos;
    return 0;
}

/* --- decoding ------------------------------------------------------------- */

struct reader {
    struct varint_reader in;
    size_t nnodes;
};

/* A printable excerpt of a name from the input, for messages. */
static const char *quote(char *out, size_t outsz, const char *s, size_t len)
{
    return quote_token(out, outsz, s, len, QUOTE_MAX);
}

static int read_ends(struct reader *r, struct node *n)
{
    size_t off = r->in.pos;
    uint32_t nruns;
    uint64_t next = 0; /* the least first rank of the next range */

    if (varint_read(&r->in, &nruns, "range count") < 0)
        return -1;
    if (nruns > varint_left(&r->in) / MIN_RUN_BYTES)
        return varint_error(&r->in, off, "%u ranges in %zu bytes", nruns,
                            varint_left(&r->in));
    if (rset_reserve(&n->ends, nruns) < 0) {
        errno = ENOMEM;
        return errprintf(r->in.err, "stacktree: out of memory");
    }
    for (uint32_t i = 0; i < nruns; i++) {
        uint32_t gap, span;
        uint64_t lo, hi;

        off = r->in.pos;
        if (varint_read(&r->in, &gap, "range") < 0 ||
            varint_read(&r->in, &span, "range") < 0)
            return -1;
        lo = next + gap;
        hi = lo + span;
        if (hi >= STACKTREE_RANK_MAX)
            return varint_error(&r->in, off,
                                "rank %llu is too large (ranks stop at %u)",
                                (unsigned long long)hi, STACKTREE_RANK_MAX - 1);
        n->ends.r[n->ends.n].lo = (uint32_t)lo;
        n->ends.r[n->ends.n++].hi = (uint32_t)hi;
        next = hi + 2; /* ranges must not touch */
    }
    return 0;
}

static int read_kids(struct reader *r, struct node *n, size_t depth);

static struct node *read_node(struct reader *r, size_t depth)
{
    char q[QUOTE_MAX + 8];
    size_t off = r->in.pos;
    const char *name;
    struct node *n;
    uint32_t len;

    if (varint_read(&r->in, &len, "name length") < 0)
        return NULL;
    if (len == 0 || len > STACKTREE_NAME_MAX) {
        varint_error(&r->in, off, "name length %u is not in 1..%u", len,
                     STACKTREE_NAME_MAX);
        return NULL;
    }
    if (len > varint_left(&r->in)) {
        varint_error(&r->in, off, "name: truncated");
        return NULL;
    }
    name = (const char *)r->in.p + r->in.pos;
    if (!valid_name(name, len)) {
        varint_error(&r->in, off, "name '%s' is not printable UTF-8",
                     quote(q, sizeof(q), name, len));
        return NULL;
    }
    r->in.pos += len;
    if (r->nnodes == STACKTREE_NODES_MAX) {
        varint_error(&r->in, off, "more than %u nodes", STACKTREE_NODES_MAX);
        return NULL;
    }
    if (!(n = node_create(name, len))) {
        errprintf(r->in.err, "stacktree: out of memory");
        return NULL;
    }
    r->nnodes++;
    if (read_ends(r, n) < 0 || read_kids(r, n, depth) < 0)
        goto error;
    if (n->nkids == 0 && n->ends.n == 0) {
        varint_error(&r->in, off, "node '%s' has neither ends nor children",
                     quote(q, sizeof(q), name, len));
        goto error;
    }
    return n;
error:
    node_destroy(n);
    return NULL;
}

/* The children of 'n', which is at 'depth' (the root is at 0). */
static int read_kids(struct reader *r, struct node *n, size_t depth)
{
    size_t off = r->in.pos;
    uint32_t nkids;

    if (varint_read(&r->in, &nkids, "child count") < 0)
        return -1;
    if (nkids == 0)
        return 0;
    if (depth == STACKTREE_DEPTH_MAX)
        return varint_error(&r->in, off, "path deeper than %u frames",
                            STACKTREE_DEPTH_MAX);
    if (nkids > varint_left(&r->in) / MIN_NODE_BYTES)
        return varint_error(&r->in, off, "%u children in %zu bytes", nkids,
                            varint_left(&r->in));
    if (kids_reserve(n, nkids) < 0) {
        errno = ENOMEM;
        return errprintf(r->in.err, "stacktree: out of memory");
    }
    for (uint32_t i = 0; i < nkids; i++) {
        struct node *k;
        size_t koff = r->in.pos;

        if (!(k = read_node(r, depth + 1)))
            return -1;
        n->kids[n->nkids++] = k;
        if (i > 0) {
            const struct node *prev = n->kids[i - 1];
            if (name_cmp(prev->name, prev->namelen, k->name, k->namelen) >= 0) {
                char q[QUOTE_MAX + 8];
                return varint_error(&r->in, koff,
                                    "node '%s' is out of order or repeated",
                                    quote(q, sizeof(q), k->name, k->namelen));
            }
        }
    }
    return 0;
}

stacktree_t *stacktree_decode(const void *buf, size_t len, eddy_error_t *err)
{
    struct reader r = {
        .in = {.p = buf, .len = len, .name = "stacktree", .err = err}};
    stacktree_t *t;

    if (!buf && len > 0) {
        errno = EINVAL;
        errprintf(err, "stacktree: no buffer");
        return NULL;
    }
    if (len < HEADER_LEN || memcmp(buf, STACKTREE_MAGIC, MAGIC_LEN) != 0) {
        varint_error(&r.in, 0, "not an encoded stack tree (bad magic)");
        return NULL;
    }
    if (r.in.p[MAGIC_LEN] != STACKTREE_VERSION) {
        varint_error(&r.in, MAGIC_LEN, "version %u, expected %u",
                     r.in.p[MAGIC_LEN], STACKTREE_VERSION);
        return NULL;
    }
    r.in.pos = HEADER_LEN;
    if (!(t = stacktree_create())) {
        errprintf(err, "stacktree: out of memory");
        return NULL;
    }
    if (read_kids(&r, t->root, 0) < 0)
        goto error;
    if (r.in.pos != r.in.len) {
        varint_error(&r.in, r.in.pos, "%zu bytes after the tree",
                     varint_left(&r.in));
        goto error;
    }
    t->nnodes = r.nnodes;
    return t;
error:
    stacktree_destroy(t);
    return NULL;
}

/* --- output --------------------------------------------------------------- */

/* The ranks of node n (its ends and its children's ranks), given those of
 * its children in kr[]. */
static int node_ranks(const struct node *n,
                      const struct rset *kr,
                      struct rset *out)
{
    struct rset s = {0};
    uint64_t total = n->ends.n;

    for (uint32_t i = 0; i < n->nkids; i++)
        total += kr[i].n;
    if (total > UINT32_MAX) {
        errno = ENOMEM;
        return -1;
    }
    if (rset_reserve(&s, (uint32_t)total) < 0)
        return -1;
    for (uint32_t i = 0; i < n->ends.n; i++)
        s.r[s.n++] = n->ends.r[i];
    for (uint32_t i = 0; i < n->nkids; i++)
        for (uint32_t j = 0; j < kr[i].n; j++)
            s.r[s.n++] = kr[i].r[j];
    rset_normalize(&s);
    *out = s;
    return 0;
}

/* Post-order walk computing every node's ranks.  visit() is called for
 * each node with its ranks (after its children); 'id' is the node's
 * number in pre-order (the root is 0). */
typedef int (*visit_f)(const struct node *n,
                       size_t id,
                       const struct rset *ranks,
                       void *arg);

static int walk_ranks(const struct node *n,
                      size_t *next_id,
                      visit_f visit,
                      void *arg,
                      struct rset *out)
{
    struct rset *kr = NULL;
    size_t id = (*next_id)++;
    uint32_t done = 0;
    int rc = -1;

    if (n->nkids && !(kr = calloc(n->nkids, sizeof(*kr)))) {
        errno = ENOMEM;
        return -1;
    }
    for (; done < n->nkids; done++) {
        if (walk_ranks(n->kids[done], next_id, visit, arg, &kr[done]) < 0)
            goto out;
    }
    if (node_ranks(n, kr, out) < 0)
        goto out;
    if (visit && visit(n, id, out, arg) < 0) {
        rset_release(out);
        goto out;
    }
    rc = 0;
out:
    for (uint32_t i = 0; i < done; i++)
        rset_release(&kr[i]);
    free(kr);
    return rc;
}

char *stacktree_ranks(const stacktree_t *t)
{
    struct rset all;
    size_t id = 0;
    char *s;

    if (!t) {
        errno = EINVAL;
        return NULL;
    }
    if (walk_ranks(t->root, &id, NULL, NULL, &all) < 0)
        return NULL;
    s = rset_string(&all);
    rset_release(&all);
    return s;
}

/* --- text --- */

static void text_node(struct sbuf *out, struct sbuf *path, const struct node *n)
{
    size_t mark = path->len;

    if (path->len)
        sb_str(path, " > ");
    sb_add(path, n->name, n->namelen);
    if (n->ends.n && !path->failed) {
        sb_add(out, path->p, path->len);
        sb_str(out, "  [");
        sb_rset(out, &n->ends);
        sb_str(out, "]\n");
    }
    for (uint32_t i = 0; i < n->nkids; i++)
        text_node(out, path, n->kids[i]);
    if (!path->failed) {
        path->len = mark;
        path->p[mark] = '\0';
    }
}

char *stacktree_text(const stacktree_t *t)
{
    struct sbuf out = {0}, path = {0};
    char *s;

    if (!t) {
        errno = EINVAL;
        return NULL;
    }
    for (uint32_t i = 0; i < t->root->nkids; i++)
        text_node(&out, &path, t->root->kids[i]);
    s = sb_finish(&out);
    if (path.failed) {
        free(s);
        s = NULL;
        errno = ENOMEM;
    }
    free(path.p);
    return s;
}

/* --- JSON and Graphviz --- */

/* Ranks are computed bottom-up but printed top-down: keep their strings
 * by pre-order id. */
struct rankstrs {
    char **s; /* RFC 22 idset of each node, the root's at 0 */
    size_t n; /* nodes, root included */
};

static int rankstrs_visit(const struct node *n,
                          size_t id,
                          const struct rset *ranks,
                          void *arg)
{
    struct rankstrs *rs = arg;

    if (id >= rs->n) { /* nnodes is wrong: a bug, but never overrun */
        errno = EINVAL;
        return -1;
    }
    return (rs->s[id] = rset_string(ranks)) ? 0 : -1;
}

static void rankstrs_release(struct rankstrs *rs)
{
    int saved_errno = errno;

    for (size_t i = 0; rs->s && i < rs->n; i++)
        free(rs->s[i]);
    free(rs->s);
    errno = saved_errno;
}

static int rankstrs_init(struct rankstrs *rs, const stacktree_t *t)
{
    struct rset all = {0};
    size_t id = 0;

    rs->n = t->nnodes + 1;
    if (!(rs->s = calloc(rs->n, sizeof(*rs->s)))) {
        errno = ENOMEM;
        return -1;
    }
    if (walk_ranks(t->root, &id, rankstrs_visit, rs, &all) < 0) {
        rankstrs_release(rs);
        return -1;
    }
    rset_release(&all);
    return 0;
}

/* A JSON string.  Names hold no control characters and are valid UTF-8,
 * so only '"' and '\' need escaping; the rest is for safety. */
static void sb_json_string(struct sbuf *b, const char *s, size_t len)
{
    sb_add(b, "\"", 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '"' || c == '\\') {
            sb_add(b, "\\", 1);
            sb_add(b, &s[i], 1);
        } else if (c < 0x20) {
            char tmp[8];
            int n = snprintf(tmp, sizeof(tmp), "\\u%04x", c);
            sb_add(b, tmp, (size_t)n);
        } else {
            sb_add(b, &s[i], 1);
        }
    }
    sb_add(b, "\"", 1);
}

static void json_node(struct sbuf *out,
                      const struct rankstrs *rs,
                      const struct node *n,
                      size_t *next_id)
{
    size_t id = (*next_id)++;

    sb_str(out, "{");
    if (n->namelen) {
        sb_str(out, "\"name\":");
        sb_json_string(out, n->name, n->namelen);
        sb_str(out, ",");
    }
    sb_str(out, "\"ranks\":\"");
    sb_str(out, rs->s[id]);
    if (n->ends.n) {
        sb_str(out, "\",\"ends\":\"");
        sb_rset(out, &n->ends);
    }
    sb_str(out, "\",\"children\":[");
    for (uint32_t i = 0; i < n->nkids; i++) {
        if (i)
            sb_str(out, ",");
        json_node(out, rs, n->kids[i], next_id);
    }
    sb_str(out, "]}");
}

/* Written directly rather than through jansson: a tree of half a million
 * nodes would first be built again as as many JSON objects. */
char *stacktree_json(const stacktree_t *t)
{
    struct rankstrs rs;
    struct sbuf out = {0};
    size_t id = 0;
    char *s;

    if (!t) {
        errno = EINVAL;
        return NULL;
    }
    if (rankstrs_init(&rs, t) < 0)
        return NULL;
    json_node(&out, &rs, t->root, &id);
    s = sb_finish(&out);
    rankstrs_release(&rs);
    return s;
}

/* Inside a quoted DOT string, '"' and '\' are escaped. */
static void sb_dot_escaped(struct sbuf *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"' || s[i] == '\\')
            sb_add(b, "\\", 1);
        sb_add(b, &s[i], 1);
    }
}

static void dot_node(struct sbuf *out,
                     const struct rankstrs *rs,
                     const struct node *n,
                     size_t *next_id)
{
    size_t id = (*next_id)++;
    char tmp[64];
    int len;

    if (id > 0) {
        len = snprintf(tmp, sizeof(tmp), "  n%zu [label=\"", id);
        sb_add(out, tmp, (size_t)len);
        sb_dot_escaped(out, n->name, n->namelen);
        sb_str(out, "\\n[");
        sb_str(out, rs->s[id]);
        sb_str(out, "]\"];\n");
    }
    for (uint32_t i = 0; i < n->nkids; i++) {
        size_t kid = *next_id;

        if (id > 0) {
            len = snprintf(tmp, sizeof(tmp), "  n%zu -> n%zu;\n", id, kid);
            sb_add(out, tmp, (size_t)len);
        }
        dot_node(out, rs, n->kids[i], next_id);
    }
}

char *stacktree_dot(const stacktree_t *t)
{
    struct rankstrs rs;
    struct sbuf out = {0};
    size_t id = 0;
    char *s;

    if (!t) {
        errno = EINVAL;
        return NULL;
    }
    if (rankstrs_init(&rs, t) < 0)
        return NULL;
    sb_str(&out, "digraph stack {\n  node [shape=box];\n");
    dot_node(&out, &rs, t->root, &id);
    sb_str(&out, "}\n");
    s = sb_finish(&out);
    rankstrs_release(&rs);
    return s;
}
