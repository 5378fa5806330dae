/* test_proctable.c - unit tests for src/common/proctable.c */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/proctable.h"

/* --- helpers ---------------------------------------------------------- */

static uint64_t rng_state;

static uint32_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static void shuffle(size_t *v, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = rng() % i, t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

static void add_ok(proctable_t *pt,
                   uint32_t rank,
                   uint32_t broker,
                   int32_t appnum,
                   int32_t pid,
                   const char *host,
                   const char *exe)
{
    struct proctable_entry e = {rank, broker, appnum, pid, host, exe};

    if (proctable_add(pt, &e) < 0)
        fail_msg("add rank %u: %s", rank, strerror(errno));
}

static void *encode_ok(proctable_t *pt, size_t *len)
{
    void *buf = NULL;

    assert_int_equal(proctable_encode(pt, &buf, len), 0);
    assert_non_null(buf);
    return buf;
}

static proctable_t *decode_ok(const void *buf, size_t len)
{
    eddy_error_t err = {{0}};
    proctable_t *pt = proctable_decode(buf, len, &err);

    if (!pt)
        fail_msg("decode failed: %s", err.text);
    return pt;
}

/* Same entries in the same order, strings compared by value. */
static void assert_same(proctable_t *a, proctable_t *b)
{
    size_t n = proctable_count(a);

    assert_int_equal(proctable_count(b), n);
    for (size_t i = 0; i < n; i++) {
        struct proctable_entry x, y;

        assert_int_equal(proctable_get(a, i, &x), 0);
        assert_int_equal(proctable_get(b, i, &y), 0);
        assert_int_equal(x.rank, y.rank);
        assert_int_equal(x.broker_rank, y.broker_rank);
        assert_int_equal(x.appnum, y.appnum);
        assert_int_equal(x.pid, y.pid);
        assert_string_equal(x.hostname, y.hostname);
        assert_string_equal(x.executable, y.executable);
    }
}

/* Encode, decode, compare; the re-encoding gives the same bytes. */
static size_t check_roundtrip(proctable_t *pt)
{
    size_t len, len2;
    void *buf = encode_ok(pt, &len);
    proctable_t *back = decode_ok(buf, len);
    void *buf2 = encode_ok(back, &len2);

    assert_same(pt, back);
    assert_int_equal(len2, len);
    assert_memory_equal(buf, buf2, len);
    free(buf2);
    free(buf);
    proctable_destroy(back);
    return len;
}

/* Merging buf must fail with 'errnum', a message holding each of the
 * NULL-terminated substrings, and leave 'pt' as it was. */
static void check_merge_fails(
    proctable_t *pt, const void *buf, size_t len, int errnum, ...)
{
    eddy_error_t err = {{0}};
    size_t before_len, after_len, count = proctable_count(pt);
    void *before = encode_ok(pt, &before_len), *after;
    const char *want;
    va_list ap;

    errno = 0;
    if (proctable_merge_encoded(pt, buf, len, &err) == 0)
        fail_msg("merge of %zu bytes unexpectedly succeeded", len);
    if (errno != errnum)
        fail_msg("errno %d (%s), want %d; message '%s'", errno, strerror(errno),
                 errnum, err.text);
    va_start(ap, errnum);
    while ((want = va_arg(ap, const char *))) {
        if (!strstr(err.text, want))
            fail_msg("message '%s' lacks '%s'", err.text, want);
    }
    va_end(ap);
    assert_int_equal(proctable_count(pt), count);
    after = encode_ok(pt, &after_len);
    assert_int_equal(after_len, before_len);
    assert_memory_equal(after, before, before_len);
    free(after);
    free(before);
}

/* A table used as the merge target of bad inputs. */
static proctable_t *target(void)
{
    proctable_t *pt = proctable_create();

    assert_non_null(pt);
    add_ok(pt, 1000, 9, 0, 77, "other", "/bin/other");
    add_ok(pt, 1001, 9, 0, 78, "other", "/bin/other");
    return pt;
}

/* Hand-built encodings. */
struct bb {
    uint8_t b[512];
    size_t n;
};

static void bb_raw(struct bb *b, const void *p, size_t n)
{
    assert_true(b->n + n <= sizeof(b->b));
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void bb_byte(struct bb *b, uint8_t v)
{
    bb_raw(b, &v, 1);
}

static void bb_v(struct bb *b, uint32_t v)
{
    while (v >= 0x80) {
        bb_byte(b, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    bb_byte(b, (uint8_t)v);
}

static void bb_zz(struct bb *b, int64_t d)
{
    uint32_t u = (uint32_t)d;
    bb_v(b, (u << 1) ^ (0u - (u >> 31)));
}

static void bb_str(struct bb *b, const char *s)
{
    bb_v(b, (uint32_t)strlen(s));
    bb_raw(b, s, strlen(s));
}

static void bb_hdr(struct bb *b)
{
    b->n = 0;
    bb_raw(b, "EDPT", 4);
    bb_byte(b, 1);
}

/* Header and string table "h0", "a.out". */
static void bb_base(struct bb *b)
{
    bb_hdr(b);
    bb_v(b, 2);
    bb_str(b, "h0");
    bb_str(b, "a.out");
}

static void bb_run(struct bb *b,
                   uint32_t gap,
                   uint32_t count,
                   int64_t bdelta,
                   uint32_t host,
                   uint32_t exe,
                   uint32_t appnum)
{
    bb_v(b, gap);
    bb_v(b, count);
    bb_zz(b, bdelta);
    bb_v(b, host);
    bb_v(b, exe);
    bb_v(b, appnum);
}

static const char *at(char *buf, size_t off)
{
    snprintf(buf, 32, "byte %zu:", off);
    return buf;
}

/* --- tests ------------------------------------------------------------ */

static void test_empty(void **state)
{
    proctable_t *pt = proctable_create();
    struct proctable_entry e;
    size_t len;
    void *buf;

    assert_non_null(pt);
    assert_int_equal(proctable_count(pt), 0);
    assert_true(proctable_is_complete(pt, 0));
    assert_false(proctable_is_complete(pt, 1));
    errno = 0;
    assert_int_equal(proctable_get(pt, 0, &e), -1);
    assert_int_equal(errno, EINVAL);
    buf = encode_ok(pt, &len);
    /* magic, version, 0 strings, 0 runs */
    assert_int_equal(len, 7);
    assert_memory_equal(buf, "EDPT\x01\x00\x00", 7);
    free(buf);
    assert_int_equal(check_roundtrip(pt), 7);
    proctable_destroy(pt);
}

static void test_one_entry(void **state)
{
    proctable_t *pt = proctable_create(), *back;
    struct proctable_entry e;
    size_t len;
    void *buf;

    add_ok(pt, 0, 3, 0, 4242, "node17", "/usr/bin/hostname");
    assert_int_equal(proctable_count(pt), 1);
    assert_true(proctable_is_complete(pt, 1));
    buf = encode_ok(pt, &len);
    back = decode_ok(buf, len);
    assert_int_equal(proctable_get(back, 0, &e), 0);
    assert_int_equal(e.rank, 0);
    assert_int_equal(e.broker_rank, 3);
    assert_int_equal(e.appnum, 0);
    assert_int_equal(e.pid, 4242);
    assert_string_equal(e.hostname, "node17");
    assert_string_equal(e.executable, "/usr/bin/hostname");
    free(buf);
    proctable_destroy(back);
    check_roundtrip(pt);
    proctable_destroy(pt);
}

/* Two executables interleaved by rank on four hosts: ranks 0..31, four
 * per host in a block, even ranks run ./a (appnum 0), odd ranks ./b. */
static proctable_t *mpmd_table(void)
{
    proctable_t *pt = proctable_create();
    size_t order[32];

    for (size_t i = 0; i < 32; i++)
        order[i] = i;
    rng_state = 42;
    shuffle(order, 32);
    for (size_t i = 0; i < 32; i++) {
        uint32_t r = (uint32_t)order[i], host = r / 8;
        char name[32];

        snprintf(name, sizeof(name), "host%u", host);
        add_ok(pt, r, host, (int32_t)(r % 2), (int32_t)(5000 + 100 * host + r),
               name, r % 2 ? "./b" : "./a");
    }
    return pt;
}

static void test_mpmd(void **state)
{
    proctable_t *pt = mpmd_table();
    struct proctable_entry e, f;

    /* Read back in rank order whatever the order of adds. */
    for (size_t i = 0; i < 32; i++) {
        assert_int_equal(proctable_get(pt, i, &e), 0);
        assert_int_equal(e.rank, i);
        assert_int_equal(e.broker_rank, i / 8);
        assert_int_equal(e.appnum, i % 2);
        assert_string_equal(e.executable, i % 2 ? "./b" : "./a");
    }
    /* Interned: one copy of each string. */
    assert_int_equal(proctable_get(pt, 0, &e), 0);
    assert_int_equal(proctable_get(pt, 6, &f), 0);
    assert_ptr_equal(e.hostname, f.hostname);
    assert_ptr_equal(e.executable, f.executable);
    assert_true(proctable_is_complete(pt, 32));
    check_roundtrip(pt);
    proctable_destroy(pt);
}

/* n tasks on 64 hosts with 2 executables; returns the encoded size and
 * checks the compactness bound. */
static size_t big_table(uint32_t n, bool interleaved)
{
    enum { HOSTS = 64 };
    const char *exe[2] = {"/opt/apps/climate/bin/ocean_model",
                          "/opt/apps/climate/bin/atmosphere_model"};
    proctable_t *pt = proctable_create();
    size_t *order = malloc(n * sizeof(*order));
    size_t strsum = strlen(exe[0]) + strlen(exe[1]), len, bound;
    uint32_t per_host = n / HOSTS;

    assert_non_null(order);
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    rng_state = 7;
    shuffle(order, n);
    for (uint32_t h = 0; h < HOSTS; h++) {
        char name[64];
        strsum += (size_t)snprintf(name, sizeof(name),
                                   "cn%04u.cluster.example.org", h + 100);
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)order[i], h = r / per_host;
        int x = interleaved ? (int)(r % 2) : (r >= n / 2);
        char name[64];

        snprintf(name, sizeof(name), "cn%04u.cluster.example.org", h + 100);
        /* Each node forks its tasks in rank order: consecutive pids. */
        add_ok(pt, r, h, x, (int32_t)(31000 + 17 * h + r % per_host), name,
               exe[x]);
    }
    assert_true(proctable_is_complete(pt, n));
    len = check_roundtrip(pt);
    bound = 16 * (size_t)n + strsum + 256;
    print_message("proctable: %u tasks on %d hosts, 2 executables %s: "
                  "%zu bytes encoded (%zu of them strings), %.2f bytes per "
                  "task beyond the strings; bound %zu\n",
                  n, HOSTS, interleaved ? "interleaved by rank" : "in blocks",
                  len, strsum, (double)(len - strsum) / n, bound);
    assert_true(len <= bound);
    free(order);
    proctable_destroy(pt);
    return len;
}

static void test_compact_16k(void **state)
{
    size_t blocks = big_table(16384, false);
    size_t inter = big_table(16384, true);

    /* Runs pay: a block layout is far under the bound. */
    assert_true(blocks < 2 * 16384 + 4096);
    assert_true(inter > blocks);
}

/* Fragments of the mpmd table, one per host, encoded. */
static void fragments(proctable_t *full, void *buf[4], size_t len[4])
{
    for (uint32_t h = 0; h < 4; h++) {
        proctable_t *f = proctable_create();
        for (size_t i = 0; i < proctable_count(full); i++) {
            struct proctable_entry e;
            assert_int_equal(proctable_get(full, i, &e), 0);
            if (e.broker_rank == h)
                assert_int_equal(proctable_add(f, &e), 0);
        }
        buf[h] = encode_ok(f, &len[h]);
        proctable_destroy(f);
    }
}

static void merge_ok(proctable_t *pt, const void *buf, size_t len)
{
    eddy_error_t err = {{0}};

    if (proctable_merge_encoded(pt, buf, len, &err) < 0)
        fail_msg("merge: %s", err.text);
}

static void assert_same_bytes(proctable_t *a, proctable_t *b)
{
    size_t la, lb;
    void *x = encode_ok(a, &la), *y = encode_ok(b, &lb);

    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    free(x);
    free(y);
}

static void test_merge_any_order(void **state)
{
    static const int orders[][4] = {
        {0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}, {1, 3, 0, 2}};
    proctable_t *full = mpmd_table();
    void *buf[4];
    size_t len[4];

    fragments(full, buf, len);
    for (size_t o = 0; o < sizeof(orders) / sizeof(orders[0]); o++) {
        proctable_t *pt = proctable_create();
        for (int k = 0; k < 4; k++)
            merge_ok(pt, buf[orders[o][k]], len[orders[o][k]]);
        assert_true(proctable_is_complete(pt, 32));
        assert_same(pt, full);
        assert_same_bytes(pt, full);
        proctable_destroy(pt);
    }

    /* As a tree: a broker adds its own tasks, merges its child, passes
     * one buffer up; the root merges two such subtrees. */
    {
        proctable_t *left = proctable_create(), *right = proctable_create();
        proctable_t *root = proctable_create();
        void *lb, *rb;
        size_t ll, rl;

        for (size_t i = 0; i < proctable_count(full); i++) {
            struct proctable_entry e;
            assert_int_equal(proctable_get(full, i, &e), 0);
            if (e.broker_rank == 1)
                assert_int_equal(proctable_add(left, &e), 0);
        }
        merge_ok(left, buf[0], len[0]);
        merge_ok(right, buf[3], len[3]);
        merge_ok(right, buf[2], len[2]);
        lb = encode_ok(left, &ll);
        rb = encode_ok(right, &rl);
        merge_ok(root, rb, rl);
        merge_ok(root, lb, ll);
        assert_same(root, full);
        assert_same_bytes(root, full);
        /* An empty fragment merges as nothing. */
        {
            proctable_t *empty = proctable_create();
            void *eb;
            size_t el;

            eb = encode_ok(empty, &el);
            merge_ok(root, eb, el);
            assert_int_equal(proctable_count(root), 32);
            free(eb);
            proctable_destroy(empty);
        }
        free(lb);
        free(rb);
        proctable_destroy(root);
        proctable_destroy(left);
        proctable_destroy(right);
    }
    for (int h = 0; h < 4; h++)
        free(buf[h]);
    proctable_destroy(full);
}

static void test_merge_duplicate(void **state)
{
    proctable_t *full = mpmd_table(), *pt = proctable_create();
    proctable_t *dup = proctable_create();
    void *buf[4], *db;
    size_t len[4], dl;

    fragments(full, buf, len);
    merge_ok(pt, buf[0], len[0]);
    merge_ok(pt, buf[1], len[1]);
    /* Same fragment twice. */
    check_merge_fails(pt, buf[1], len[1], EEXIST, "rank 8 ", NULL);
    /* New strings and ranks, but one rank already present. */
    add_ok(dup, 100, 50, 0, 1, "newhost", "/bin/new");
    add_ok(dup, 13, 50, 0, 2, "newhost", "/bin/new");
    db = encode_ok(dup, &dl);
    check_merge_fails(pt, db, dl, EEXIST, "rank 13 ", NULL);
    /* Added entries collide with merged ones, and the other way. */
    {
        struct proctable_entry e = {3, 0, 0, 1, "h", "x"};
        errno = 0;
        assert_int_equal(proctable_add(pt, &e), -1);
        assert_int_equal(errno, EEXIST);
    }
    add_ok(pt, 16, 2, 0, 999, "host2", "./a");
    check_merge_fails(pt, buf[2], len[2], EEXIST, "rank 16 ", NULL);
    assert_int_equal(proctable_count(pt), 17);
    free(db);
    for (int h = 0; h < 4; h++)
        free(buf[h]);
    proctable_destroy(dup);
    proctable_destroy(pt);
    proctable_destroy(full);
}

/* A decoded table builds its rank index when first added to. */
static void test_add_after_decode(void **state)
{
    proctable_t *full = mpmd_table(), *back;
    struct proctable_entry e = {5, 0, 0, 1, "h", "x"};
    size_t len;
    void *buf = encode_ok(full, &len);

    back = decode_ok(buf, len);
    errno = 0;
    assert_int_equal(proctable_add(back, &e), -1);
    assert_int_equal(errno, EEXIST);
    e.rank = 32;
    assert_int_equal(proctable_add(back, &e), 0);
    assert_true(proctable_is_complete(back, 33));
    check_merge_fails(back, buf, len, EEXIST, "rank 0 ", NULL);
    free(buf);
    proctable_destroy(back);
    proctable_destroy(full);
}

static void test_add_errors(void **state)
{
    proctable_t *pt = proctable_create();
    char *longs = malloc(PROCTABLE_STR_MAX + 2);
    struct proctable_entry ok = {0, 0, 0, 10, "h", "x"}, e, g;
    struct {
        struct proctable_entry e;
        int errnum;
    } bad[] = {
        {{1, 0, 0, 0, "h", "x"}, EINVAL},   {{1, 0, 0, -5, "h", "x"}, EINVAL},
        {{1, 0, -1, 10, "h", "x"}, EINVAL}, {{1, 0, 0, 10, NULL, "x"}, EINVAL},
        {{1, 0, 0, 10, "", "x"}, EINVAL},   {{1, 0, 0, 10, "h", NULL}, EINVAL},
        {{1, 0, 0, 10, "h", ""}, EINVAL},   {{0, 1, 1, 11, "h2", "y"}, EEXIST},
    };

    assert_non_null(longs);
    assert_int_equal(proctable_add(pt, &ok), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        errno = 0;
        assert_int_equal(proctable_add(pt, &bad[i].e), -1);
        assert_int_equal(errno, bad[i].errnum);
    }
    errno = 0;
    assert_int_equal(proctable_add(NULL, &ok), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(proctable_add(pt, NULL), -1);
    assert_int_equal(errno, EINVAL);

    /* Strings up to the cap, not one byte more. */
    memset(longs, 'p', PROCTABLE_STR_MAX + 1);
    longs[PROCTABLE_STR_MAX + 1] = '\0';
    e = (struct proctable_entry){2, 0, 0, 10, "h", longs};
    errno = 0;
    assert_int_equal(proctable_add(pt, &e), -1);
    assert_int_equal(errno, EINVAL);
    e.hostname = longs;
    e.executable = "x";
    errno = 0;
    assert_int_equal(proctable_add(pt, &e), -1);
    assert_int_equal(errno, EINVAL);
    longs[PROCTABLE_STR_MAX] = '\0';
    assert_int_equal(proctable_add(pt, &e), 0);
    /* Hostname and executable spelled alike: one copy. */
    e = (struct proctable_entry){3, 0, 0, INT32_MAX, "same", "same"};
    assert_int_equal(proctable_add(pt, &e), 0);
    assert_int_equal(proctable_count(pt), 3);
    assert_int_equal(proctable_get(pt, 2, &g), 0);
    assert_ptr_equal(g.hostname, g.executable);
    assert_int_equal(g.pid, INT32_MAX);
    check_roundtrip(pt);

    /* get: out of range, outputs untouched. */
    memset(&g, 0xab, sizeof(g));
    e = g;
    errno = 0;
    assert_int_equal(proctable_get(pt, 3, &g), -1);
    assert_int_equal(errno, EINVAL);
    assert_memory_equal(&g, &e, sizeof(g));
    errno = 0;
    assert_int_equal(proctable_get(NULL, 0, &g), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(proctable_get(pt, 0, NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(proctable_count(NULL), 0);
    free(longs);
    proctable_destroy(pt);
}

static void test_is_complete(void **state)
{
    proctable_t *pt = proctable_create();

    assert_false(proctable_is_complete(NULL, 0));
    assert_true(proctable_is_complete(pt, 0));
    add_ok(pt, 2, 0, 0, 1, "h", "x");
    assert_false(proctable_is_complete(pt, 1));
    assert_false(proctable_is_complete(pt, 3));
    add_ok(pt, 1, 0, 0, 2, "h", "x");
    assert_false(proctable_is_complete(pt, 2)); /* 1,2: no 0 */
    add_ok(pt, 0, 0, 0, 3, "h", "x");
    assert_true(proctable_is_complete(pt, 3));
    assert_false(proctable_is_complete(pt, 2));
    assert_false(proctable_is_complete(pt, 4));
    add_ok(pt, 4, 0, 0, 4, "h", "x");
    assert_false(proctable_is_complete(pt, 4)); /* 0-2,4: no 3 */
    assert_false(proctable_is_complete(pt, 5));
    add_ok(pt, 3, 0, 0, 5, "h", "x");
    assert_true(proctable_is_complete(pt, 5));
    proctable_destroy(pt);
}

/* The edges of every field survive a round trip. */
static void test_edges(void **state)
{
    proctable_t *pt = proctable_create();

    add_ok(pt, UINT32_MAX, UINT32_MAX, INT32_MAX, 1, "a", "b");
    add_ok(pt, UINT32_MAX - 1, 0, 0, INT32_MAX, "b", "a");
    add_ok(pt, 0, UINT32_MAX, 5, INT32_MAX, "a", "b");
    add_ok(pt, 1, 0, 5, 1, "a", "b");
    add_ok(pt, 2147483648u, 7, 5, 1, "a", "b");
    add_ok(pt, 2147483649u, 7, 5, 2, "a", "b");
    check_roundtrip(pt);
    assert_false(proctable_is_complete(pt, 6));
    proctable_destroy(pt);
}

/* Random tables: round trip, canonical bytes, and split/merge. */
static void test_random_tables(void **state)
{
    rng_state = 12345;
    for (int iter = 0; iter < 200; iter++) {
        proctable_t *pt = proctable_create(), *a = proctable_create();
        proctable_t *b = proctable_create(), *m = proctable_create();
        uint32_t n = rng() % 200, rank = rng() % 3 ? 0 : rng();
        size_t la, lb;
        void *ba, *bb;

        for (uint32_t i = 0; i < n; i++) {
            char h[16], x[16];
            struct proctable_entry e;

            snprintf(h, sizeof(h), "n%u", rng() % 5);
            snprintf(x, sizeof(x), "x%u", rng() % 3);
            e = (struct proctable_entry){rank,
                                         rng() % 4,
                                         (int32_t)(rng() % 2),
                                         (int32_t)(1 + rng() % 70000),
                                         h,
                                         x};
            if (proctable_add(pt, &e) == 0)
                assert_int_equal(proctable_add(rng() % 2 ? a : b, &e), 0);
            else
                assert_int_equal(errno, EEXIST);
            rank += rng() % 4 ? 1 : rng() % 1000;
        }
        check_roundtrip(pt);
        ba = encode_ok(a, &la);
        bb = encode_ok(b, &lb);
        merge_ok(m, bb, lb);
        merge_ok(m, ba, la);
        assert_same(m, pt);
        assert_same_bytes(m, pt);
        free(ba);
        free(bb);
        proctable_destroy(pt);
        proctable_destroy(a);
        proctable_destroy(b);
        proctable_destroy(m);
    }
}

/* Thousands of distinct hostnames: interned through a hash table. */
static void test_many_strings(void **state)
{
    enum { N = 50000 };
    proctable_t *pt = proctable_create();
    struct proctable_entry e, f;

    for (uint32_t i = 0; i < N; i++) {
        char h[32], x[32];
        snprintf(h, sizeof(h), "node%u", i / 2);
        snprintf(x, sizeof(x), "/bin/prog%u", i % 1000);
        add_ok(pt, N - 1 - i, i / 2, 0, (int32_t)(i + 1), h, x);
    }
    assert_true(proctable_is_complete(pt, N));
    assert_int_equal(proctable_get(pt, 0, &e), 0);
    assert_int_equal(proctable_get(pt, 1, &f), 0);
    assert_string_equal(e.hostname, f.hostname);
    assert_ptr_equal(e.hostname, f.hostname);
    check_roundtrip(pt);
    proctable_destroy(pt);
}

static void test_malformed(void **state)
{
    proctable_t *pt = target();
    char o[32];
    struct bb b;
    size_t off;

    /* Sanity: the base with a run decodes. */
    bb_base(&b);
    bb_v(&b, 1);
    bb_run(&b, 0, 2, 0, 0, 1, 0);
    bb_zz(&b, 100);
    bb_zz(&b, 1);
    {
        proctable_t *t = decode_ok(b.b, b.n);
        assert_int_equal(proctable_count(t), 2);
        proctable_destroy(t);
    }

    check_merge_fails(pt, NULL, 0, EPROTO, "byte 0:", "truncated header", NULL);
    check_merge_fails(pt, "EDPT", 4, EPROTO, "truncated header", NULL);
    check_merge_fails(pt, "EDPX\x01\x00\x00", 7, EPROTO, "byte 0:", "bad magic",
                      NULL);
    check_merge_fails(pt, "EDPT\x02\x00\x00", 7, EPROTO,
                      "byte 4:", "unsupported version 2", NULL);
    check_merge_fails(pt, "EDPT\x01\x00", 6, EPROTO,
                      "byte 6:", "run count: truncated", NULL);
    check_merge_fails(pt, "EDPT\x01", 5, EPROTO,
                      "byte 5:", "string count: truncated", NULL);

    /* varints: not shortest, beyond 32 bits, cut. */
    check_merge_fails(pt, "EDPT\x01\x80\x00\x00", 8, EPROTO,
                      "byte 5:", "string count: varint not in shortest form",
                      NULL);
    check_merge_fails(pt, "EDPT\x01\x00\xff\xff\xff\xff\x1f", 11, EPROTO,
                      "byte 6:", "run count: varint exceeds 32 bits", NULL);
    check_merge_fails(pt, "EDPT\x01\x00\xff\xff\xff\xff\x8f", 11, EPROTO,
                      "byte 6:", "exceeds 32 bits", NULL);
    check_merge_fails(pt, "EDPT\x01\x00\x80", 7, EPROTO,
                      "byte 6:", "run count: truncated", NULL);

    /* String table. */
    bb_hdr(&b);
    bb_v(&b, 1000);
    bb_str(&b, "h0");
    check_merge_fails(pt, b.b, b.n, EPROTO, "byte 5:", "1000 strings", NULL);
    bb_hdr(&b);
    bb_v(&b, 1);
    bb_v(&b, 0);
    bb_v(&b, 0);
    check_merge_fails(pt, b.b, b.n, EPROTO, "byte 6: string 0: empty", NULL);
    bb_hdr(&b);
    bb_v(&b, 2);
    bb_str(&b, "h0");
    off = b.n;
    bb_v(&b, PROCTABLE_STR_MAX + 1);
    bb_raw(&b, "xxxx", 4);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "string 1: length 4097 exceeds 4096", NULL);
    bb_hdr(&b);
    bb_v(&b, 1);
    bb_v(&b, 10);
    bb_raw(&b, "abc", 3);
    check_merge_fails(pt, b.b, b.n, EPROTO,
                      "byte 6: string 0:", "length 10 but only 3 bytes left",
                      NULL);
    bb_hdr(&b);
    bb_v(&b, 1);
    bb_v(&b, 4);
    bb_raw(&b, "ab\0c", 4);
    check_merge_fails(pt, b.b, b.n, EPROTO, "byte 9: string 0: NUL inside",
                      NULL);
    bb_hdr(&b);
    bb_v(&b, 3);
    bb_str(&b, "h0");
    bb_str(&b, "a.out");
    off = b.n;
    bb_str(&b, "h0");
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "string 2: duplicates string 0", NULL);

    /* Runs. */
    bb_base(&b);
    off = b.n;
    bb_v(&b, 100);
    bb_run(&b, 0, 1, 0, 0, 1, 0);
    bb_zz(&b, 100);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off), "100 runs cannot fit",
                      NULL);
    bb_base(&b);
    bb_v(&b, 1);
    off = b.n + 1;
    bb_run(&b, 0, 0, 0, 0, 1, 0);
    bb_zz(&b, 100);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off), "run 0: count is 0",
                      NULL);
    /* Rank overflow: a run past UINT32_MAX, a run after one ending there. */
    bb_base(&b);
    bb_v(&b, 1);
    off = b.n + 5;
    bb_run(&b, UINT32_MAX, 2, 0, 0, 1, 0);
    bb_zz(&b, 100);
    bb_zz(&b, 1);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "last rank 4294967296 exceeds", NULL);
    bb_base(&b);
    bb_v(&b, 2);
    bb_run(&b, UINT32_MAX, 1, 0, 0, 1, 0);
    bb_zz(&b, 100);
    off = b.n;
    bb_run(&b, 0, 1, 1, 0, 1, 0);
    bb_zz(&b, 1);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "run 1: first rank 4294967296 exceeds", NULL);
    /* String indexes: out of range, out of first-use order, unused. */
    bb_base(&b);
    bb_v(&b, 1);
    off = b.n + 4;
    bb_run(&b, 0, 1, 0, 0, 2, 0);
    bb_zz(&b, 100);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "executable index 2 is out of range (2 strings)", NULL);
    bb_base(&b);
    bb_v(&b, 1);
    off = b.n + 3;
    bb_run(&b, 0, 1, 0, 1, 0, 0);
    bb_zz(&b, 100);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off), "hostname index 1",
                      "order of first use", NULL);
    bb_hdr(&b);
    bb_v(&b, 3);
    bb_str(&b, "h0");
    bb_str(&b, "a.out");
    off = b.n;
    bb_str(&b, "spare");
    bb_v(&b, 1);
    bb_run(&b, 0, 1, 0, 0, 1, 0);
    bb_zz(&b, 100);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "string 2 is never used", NULL);
    /* appnum. */
    bb_base(&b);
    bb_v(&b, 1);
    off = b.n + 5;
    bb_run(&b, 0, 1, 0, 0, 1, 0x80000000u);
    bb_zz(&b, 100);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "appnum 2147483648 exceeds", NULL);
    /* A run that should have been part of the previous one. */
    bb_base(&b);
    bb_v(&b, 2);
    bb_run(&b, 0, 1, 0, 0, 1, 0);
    bb_zz(&b, 100);
    off = b.n;
    bb_run(&b, 0, 1, 0, 0, 1, 0);
    bb_zz(&b, 1);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "run 1: continues the previous run", NULL);
    /* pids: 0, negative, beyond INT32_MAX. */
    bb_base(&b);
    bb_v(&b, 1);
    bb_run(&b, 0, 1, 0, 0, 1, 0);
    off = b.n;
    bb_zz(&b, 0);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "rank 0: pid 0 is invalid", NULL);
    bb_base(&b);
    bb_v(&b, 1);
    bb_run(&b, 7, 2, 0, 0, 1, 0);
    bb_zz(&b, 3);
    off = b.n;
    bb_zz(&b, -10);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "rank 8: pid -7 is invalid", NULL);
    bb_base(&b);
    bb_v(&b, 1);
    bb_run(&b, 0, 2, 0, 0, 1, 0);
    bb_zz(&b, 100);
    off = b.n;
    bb_zz(&b, INT32_MAX);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "pid 2147483747 is invalid", NULL);
    /* Counts against the bytes left, and the task limit. */
    bb_base(&b);
    bb_v(&b, 1);
    off = b.n + 1;
    bb_run(&b, 0, 50, 0, 0, 1, 0);
    bb_zz(&b, 100);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off),
                      "50 tasks cannot fit in the 2 bytes left", NULL);
    bb_base(&b);
    bb_v(&b, 1);
    bb_run(&b, 0, PROCTABLE_TASKS_MAX + 1, 0, 0, 1, 0);
    bb_zz(&b, 100);
    check_merge_fails(pt, b.b, b.n, E2BIG, "run 0:", "exceed the limit", NULL);
    /* Trailing bytes. */
    bb_base(&b);
    bb_v(&b, 1);
    bb_run(&b, 0, 1, 0, 0, 1, 0);
    bb_zz(&b, 100);
    off = b.n;
    bb_byte(&b, 0);
    check_merge_fails(pt, b.b, b.n, EPROTO, at(o, off), "1 trailing bytes",
                      NULL);

    /* Argument errors. */
    {
        eddy_error_t err = {{0}};

        errno = 0;
        assert_int_equal(proctable_merge_encoded(NULL, b.b, b.n, &err), -1);
        assert_int_equal(errno, EINVAL);
        check_merge_fails(pt, NULL, 5, EINVAL, "no buffer", NULL);
        errno = 0;
        assert_null(proctable_decode("EDPX\x01\x00\x00", 7, NULL));
        assert_int_equal(errno, EPROTO);
        errno = 0;
        assert_int_equal(proctable_encode(NULL, &(void *){NULL}, &off), -1);
        assert_int_equal(errno, EINVAL);
    }
    proctable_destroy(pt);
}

/* Every strict prefix of a valid encoding fails cleanly; every single bit
 * flip either fails with a message or decodes to a table that encodes back
 * to exactly the flipped bytes (the encoding is canonical). */
static void test_truncate_and_flip(void **state)
{
    proctable_t *full = mpmd_table(), *pt = target();
    size_t len;
    uint8_t *buf = encode_ok(full, &len), *copy = malloc(len);

    assert_non_null(copy);
    for (size_t k = 0; k < len; k++) {
        memcpy(copy, buf, k); /* own allocation: ASan sees overreads */
        check_merge_fails(pt, copy, k, EPROTO, "proctable: byte ", NULL);
    }
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            eddy_error_t err = {{0}};
            proctable_t *t;

            memcpy(copy, buf, len);
            copy[i] ^= (uint8_t)(1u << bit);
            errno = 0;
            if ((t = proctable_decode(copy, len, &err))) {
                size_t l2;
                void *b2 = encode_ok(t, &l2);
                assert_int_equal(l2, len);
                assert_memory_equal(b2, copy, len);
                free(b2);
                proctable_destroy(t);
            } else {
                assert_true(errno == EPROTO || errno == E2BIG);
                assert_true(strlen(err.text) > 0);
            }
        }
    }
    free(copy);
    free(buf);
    proctable_destroy(pt);
    proctable_destroy(full);
}

static void test_destroy_preserves_errno(void **state)
{
    proctable_t *pt = mpmd_table();

    errno = ENOENT;
    proctable_destroy(pt);
    proctable_destroy(NULL);
    assert_int_equal(errno, ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_one_entry),
        cmocka_unit_test(test_mpmd),
        cmocka_unit_test(test_compact_16k),
        cmocka_unit_test(test_merge_any_order),
        cmocka_unit_test(test_merge_duplicate),
        cmocka_unit_test(test_add_after_decode),
        cmocka_unit_test(test_add_errors),
        cmocka_unit_test(test_is_complete),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_random_tables),
        cmocka_unit_test(test_many_strings),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_truncate_and_flip),
        cmocka_unit_test(test_destroy_preserves_errno),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
