/* test_stacktree.c - unit tests for src/common/stacktree.c */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/idset.h"
#include "src/common/stacktree.h"

/* Allocation failures on demand, to check that a failed call changes
 * nothing.  Not under a sanitizer that owns malloc. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FAILMALLOC 1
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);

static long fail_at = -1; /* allocations to let through before one fails */

static bool fail_now(void)
{
    if (fail_at < 0)
        return false;
    return fail_at-- == 0;
}

void *malloc(size_t n)
{
    return fail_now() ? NULL : __libc_malloc(n);
}

void *calloc(size_t n, size_t size)
{
    return fail_now() ? NULL : __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    return fail_now() ? NULL : __libc_realloc(p, n);
}
#endif

static unsigned scale(void)
{
    const char *s = getenv("EDDY_TEST_TIMEOUT_SCALE");

    return s && atoi(s) > 0 ? (unsigned)atoi(s) : 1;
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Add the path "a > b > c" (names separated by " > ") for 'rank'. */
static int add(stacktree_t *t, const char *path, uint32_t rank)
{
    const char *frames[64];
    char *copy = strdup(path), *p = copy, *sep;
    size_t n = 0;
    int rc;

    assert_non_null(copy);
    while ((sep = strstr(p, " > "))) {
        *sep = '\0';
        frames[n++] = p;
        p = sep + 3;
    }
    frames[n++] = p;
    rc = stacktree_add(t, frames, n, rank);
    free(copy);
    return rc;
}

static void check_text(const stacktree_t *t, const char *want)
{
    char *text = stacktree_text(t);

    assert_non_null(text);
    if (strcmp(text, want) != 0)
        fail_msg("text:\n%s\nwanted:\n%s", text, want);
    free(text);
}

static char *encode_hex(const stacktree_t *t)
{
    void *buf;
    size_t len;
    char *hex;

    assert_int_equal(stacktree_encode(t, &buf, &len), 0);
    hex = malloc(len * 2 + 1);
    assert_non_null(hex);
    for (size_t i = 0; i < len; i++)
        snprintf(hex + 2 * i, 3, "%02x", ((uint8_t *)buf)[i]);
    hex[len * 2] = '\0';
    free(buf);
    return hex;
}

/* Encode, decode, and check the copy prints and encodes the same. */
static void check_roundtrip(const stacktree_t *t)
{
    eddy_error_t err = {{0}};
    stacktree_t *t2;
    char *a, *b;
    void *buf, *buf2;
    size_t len, len2;

    assert_int_equal(stacktree_encode(t, &buf, &len), 0);
    if (!(t2 = stacktree_decode(buf, len, &err)))
        fail_msg("decode failed: %s", err.text);
    assert_int_equal(stacktree_encode(t2, &buf2, &len2), 0);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len);
    a = stacktree_json(t);
    b = stacktree_json(t2);
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(a, b);
    free(a);
    free(b);
    free(buf);
    free(buf2);
    stacktree_destroy(t2);
}

/* The example of the brief: 8 ranks, rank 4 elsewhere. */
static stacktree_t *example(void)
{
    stacktree_t *t = stacktree_create();

    assert_non_null(t);
    for (uint32_t r = 0; r < 8; r++) {
        if (r == 4)
            assert_int_equal(add(t, "main > solve > compute", r), 0);
        else
            assert_int_equal(add(t, "main > solve > MPI_Allreduce", r), 0);
    }
    return t;
}

/* --- building and printing ------------------------------------------------ */

static void test_text(void **state)
{
    stacktree_t *t = example();
    char *s;

    check_text(t, "main > solve > MPI_Allreduce  [0-3,5-7]\n"
                  "main > solve > compute  [4]\n");
    s = stacktree_ranks(t);
    assert_string_equal(s, "0-7");
    free(s);
    check_roundtrip(t);
    stacktree_destroy(t);
}

static void test_threads_and_prefixes(void **state)
{
    stacktree_t *t = stacktree_create();

    assert_non_null(t);
    /* Rank 0 has two threads; one path is a prefix of another. */
    assert_int_equal(add(t, "main > a > b", 0), 0);
    assert_int_equal(add(t, "main > a", 0), 0);
    assert_int_equal(add(t, "clone3 > start_thread > worker", 0), 0);
    assert_int_equal(add(t, "main > a > b", 1), 0);
    assert_int_equal(add(t, "clone3 > start_thread > worker", 1), 0);
    assert_int_equal(add(t, "main > ab", 2), 0);
    assert_int_equal(add(t, "main > A", 3), 0);
    /* Adding again changes nothing. */
    assert_int_equal(add(t, "main > a > b", 1), 0);
    /* Siblings sort bytewise, and a path comes before its extensions. */
    check_text(t, "clone3 > start_thread > worker  [0-1]\n"
                  "main > A  [3]\n"
                  "main > a  [0]\n"
                  "main > a > b  [0-1]\n"
                  "main > ab  [2]\n");
    check_roundtrip(t);
    stacktree_destroy(t);
}

static void test_json(void **state)
{
    stacktree_t *t = stacktree_create();
    char *s;
    json_t *o;

    assert_non_null(t);
    assert_int_equal(add(t, "main > a > b", 0), 0);
    assert_int_equal(add(t, "main > a", 1), 0);
    assert_int_equal(add(t, "main > a > b", 2), 0);
    assert_int_equal(add(t, "main > \"q\\\" > \xc3\xa9t\xc3\xa9", 5), 0);
    s = stacktree_json(t);
    assert_non_null(s);
    assert_string_equal(
        s, "{\"ranks\":\"0-2,5\",\"children\":[{\"name\":\"main\",\"ranks\":"
           "\"0-2,5\",\"children\":[{\"name\":\"\\\"q\\\\\\\"\",\"ranks\":"
           "\"5\",\"children\":[{\"name\":\"\xc3\xa9t\xc3\xa9\",\"ranks\":"
           "\"5\",\"ends\":\"5\",\"children\":[]}]},{\"name\":\"a\","
           "\"ranks\":\"0-2\",\"ends\":\"1\",\"children\":[{\"name\":\"b\","
           "\"ranks\":\"0,2\",\"ends\":\"0,2\",\"children\":[]}]}]}]}");
    /* It is valid JSON. */
    o = json_loads(s, 0, NULL);
    assert_non_null(o);
    json_decref(o);
    free(s);
    stacktree_destroy(t);
}

static void test_dot(void **state)
{
    stacktree_t *t = stacktree_create();
    char *s;

    assert_non_null(t);
    assert_int_equal(add(t, "main > a > b", 0), 0);
    assert_int_equal(add(t, "main > a", 1), 0);
    assert_int_equal(add(t, "main > x\"y\\z", 2), 0);
    assert_int_equal(add(t, "clone3", 2), 0);
    s = stacktree_dot(t);
    assert_non_null(s);
    assert_string_equal(s, "digraph stack {\n"
                           "  node [shape=box];\n"
                           "  n1 [label=\"clone3\\n[2]\"];\n"
                           "  n2 [label=\"main\\n[0-2]\"];\n"
                           "  n2 -> n3;\n"
                           "  n3 [label=\"a\\n[0-1]\"];\n"
                           "  n3 -> n4;\n"
                           "  n4 [label=\"b\\n[0]\"];\n"
                           "  n2 -> n5;\n"
                           "  n5 [label=\"x\\\"y\\\\z\\n[2]\"];\n"
                           "}\n");
    free(s);
    stacktree_destroy(t);
}

static void test_empty(void **state)
{
    stacktree_t *t = stacktree_create();
    eddy_error_t err = {{0}};
    char *s, *hex;
    void *buf;
    size_t len;

    assert_non_null(t);
    check_text(t, "");
    s = stacktree_json(t);
    assert_string_equal(s, "{\"ranks\":\"\",\"children\":[]}");
    free(s);
    s = stacktree_dot(t);
    assert_string_equal(s, "digraph stack {\n  node [shape=box];\n}\n");
    free(s);
    s = stacktree_ranks(t);
    assert_string_equal(s, "");
    free(s);
    hex = encode_hex(t);
    assert_string_equal(hex, "4544535401"
                             "00");
    free(hex);
    /* Merging empty trees either way round. */
    stacktree_t *u = example();
    assert_int_equal(stacktree_merge(u, t), 0);
    check_text(u, "main > solve > MPI_Allreduce  [0-3,5-7]\n"
                  "main > solve > compute  [4]\n");
    assert_int_equal(stacktree_merge(t, u), 0);
    check_text(t, "main > solve > MPI_Allreduce  [0-3,5-7]\n"
                  "main > solve > compute  [4]\n");
    assert_int_equal(stacktree_encode(t, &buf, &len), 0);
    stacktree_destroy(u);
    assert_non_null(u = stacktree_decode(buf, len, &err));
    check_text(u, "main > solve > MPI_Allreduce  [0-3,5-7]\n"
                  "main > solve > compute  [4]\n");
    free(buf);
    stacktree_destroy(u);
    stacktree_destroy(t);
}

/* Rank sets print exactly as idset_encode() prints the same set. */
static void test_ranks_match_idset(void **state)
{
    uint64_t x = 88172645463325252ull;

    for (int iter = 0; iter < 200; iter++) {
        stacktree_t *t = stacktree_create();
        idset_t *ids = idset_create();
        char *want, *got, line[64];
        int n = 1 + iter % 60;

        assert_non_null(t);
        assert_non_null(ids);
        for (int i = 0; i < n; i++) {
            uint32_t r;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            /* Dense near 0 to make ranges, and some far ranks. */
            r = (uint32_t)(x % 97 == 0 ? x % STACKTREE_RANK_MAX : x % 80);
            assert_int_equal(add(t, "f", r), 0);
            assert_int_equal(idset_set(ids, r), 0);
        }
        want = idset_encode(ids);
        got = stacktree_ranks(t);
        assert_string_equal(got, want);
        free(got);
        got = stacktree_text(t);
        snprintf(line, sizeof(line), "f  [");
        assert_memory_equal(got, line, strlen(line));
        assert_memory_equal(got + 4, want, strlen(want));
        assert_string_equal(got + 4 + strlen(want), "]\n");
        check_roundtrip(t);
        free(got);
        free(want);
        idset_destroy(ids);
        stacktree_destroy(t);
    }
}

/* --- bad input to add ----------------------------------------------------- */

static void check_add_fails(stacktree_t *t,
                            const char *const *frames,
                            size_t n,
                            uint32_t rank,
                            int errnum)
{
    char *before = encode_hex(t), *after;

    errno = 0;
    assert_int_equal(stacktree_add(t, frames, n, rank), -1);
    assert_int_equal(errno, errnum);
    after = encode_hex(t);
    assert_string_equal(before, after);
    free(before);
    free(after);
}

static void test_add_bad(void **state)
{
    stacktree_t *t = example();
    char *long_name = malloc(STACKTREE_NAME_MAX + 2);
    const char *ok[] = {"main", "solve"};
    const char **deep;

    assert_non_null(long_name);
    memset(long_name, 'x', STACKTREE_NAME_MAX + 1);
    long_name[STACKTREE_NAME_MAX + 1] = '\0';
    errno = 0;
    assert_int_equal(stacktree_add(NULL, ok, 2, 0), -1);
    assert_int_equal(errno, EINVAL);
    check_add_fails(t, NULL, 2, 0, EINVAL);
    check_add_fails(t, ok, 0, 0, EINVAL);
    check_add_fails(t, ok, 2, STACKTREE_RANK_MAX, ERANGE);
    check_add_fails(t, ok, 2, UINT32_MAX, ERANGE);
    {
        const char *f[] = {"main", NULL};
        check_add_fails(t, f, 2, 0, EINVAL);
    }
    {
        const char *bad[] = {"",
                             long_name,
                             "tab\there",
                             "new\nline",
                             "del\x7f",
                             "c1 \xc2\x85",
                             "cut \xc3",
                             "lone \x80",
                             "overlong \xc0\xaf",
                             "surrogate \xed\xa0\x80",
                             "too big \xf4\x90\x80\x80",
                             "bad lead \xf8\x88\x80\x80\x80"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            const char *f[] = {"main", bad[i], "leaf"};
            check_add_fails(t, f, 3, 0, EINVAL);
        }
    }
    /* A new path that fails at its last frame leaves nothing behind. */
    {
        const char *f[] = {"main", "new", "deeper", "\x01"};
        check_add_fails(t, f, 4, 9, EINVAL);
    }
    /* Names at the limit are fine: the longest, and 4-byte UTF-8. */
    long_name[STACKTREE_NAME_MAX] = '\0';
    {
        const char *f[] = {"main", long_name, "\xf0\x9f\x98\x80 ok"};
        assert_int_equal(stacktree_add(t, f, 3, 9), 0);
    }
    /* Depth. */
    deep = malloc((STACKTREE_DEPTH_MAX + 1) * sizeof(*deep));
    assert_non_null(deep);
    for (size_t i = 0; i <= STACKTREE_DEPTH_MAX; i++)
        deep[i] = "f";
    check_add_fails(t, deep, STACKTREE_DEPTH_MAX + 1, 0, EINVAL);
    assert_int_equal(stacktree_add(t, deep, STACKTREE_DEPTH_MAX, 10), 0);
    assert_int_equal(
        stacktree_add(t, deep, STACKTREE_DEPTH_MAX, STACKTREE_RANK_MAX - 1), 0);
    check_roundtrip(t);
    free(deep);
    free(long_name);
    stacktree_destroy(t);
}

static void test_null_args(void **state)
{
    stacktree_t *t = stacktree_create();
    void *buf = (void *)1;
    size_t len = 7;

    errno = 0;
    assert_int_equal(stacktree_merge(NULL, t), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(stacktree_merge(t, NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(stacktree_encode(NULL, &buf, &len), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(stacktree_encode(t, NULL, &len), -1);
    assert_int_equal(stacktree_encode(t, &buf, NULL), -1);
    assert_ptr_equal(buf, (void *)1);
    assert_int_equal(len, 7);
    errno = 0;
    assert_null(stacktree_text(NULL));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(stacktree_json(NULL));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(stacktree_dot(NULL));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(stacktree_ranks(NULL));
    assert_int_equal(errno, EINVAL);
    errno = 42;
    stacktree_destroy(NULL);
    assert_int_equal(errno, 42);
    stacktree_destroy(t);
    assert_int_equal(errno, 42);
}

/* --- encoding ------------------------------------------------------------- */

static void test_encoding_bytes(void **state)
{
    stacktree_t *t = stacktree_create();
    char *hex;

    assert_non_null(t);
    assert_int_equal(add(t, "m > b", 0), 0);
    assert_int_equal(add(t, "m > b", 1), 0);
    assert_int_equal(add(t, "m > b", 5), 0);
    assert_int_equal(add(t, "m > b", 200), 0);
    assert_int_equal(add(t, "m", 3), 0);
    hex = encode_hex(t);
    /* magic, version, 1 child: "m", 1 range (3, +0), 1 child: "b",
     * 3 ranges: 0-1, 5 (gap 5 - (1 + 2) = 2), 200 (gap 200 - 7 = 193,
     * varint c1 01), no children. */
    assert_string_equal(hex, "45445354"
                             "01"
                             "01"
                             "01"
                             "6d"
                             "01"
                             "0300"
                             "01"
                             "01"
                             "62"
                             "03"
                             "0001"
                             "0200"
                             "c10100"
                             "00");
    free(hex);
    stacktree_destroy(t);
}

static void check_bad(const char *hex, int errnum, const char *msg)
{
    size_t len = strlen(hex) / 2;
    uint8_t *buf = malloc(len ? len : 1);
    eddy_error_t err = {{0}};

    assert_non_null(buf);
    for (size_t i = 0; i < len; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        buf[i] = (uint8_t)v;
    }
    errno = 0;
    if (stacktree_decode(buf, len, &err))
        fail_msg("decode of %s unexpectedly succeeded", hex);
    assert_int_equal(errno, errnum);
    if (!strstr(err.text, msg))
        fail_msg("decode of %s: message '%s' lacks '%s'", hex, err.text, msg);
    free(buf);
}

static void test_decode_bad(void **state)
{
    eddy_error_t err = {{0}};

    errno = 0;
    assert_null(stacktree_decode(NULL, 4, &err));
    assert_int_equal(errno, EINVAL);
    check_bad("", EPROTO, "byte 0: not an encoded stack tree");
    check_bad("4544535401", EPROTO, "byte 5: child count: truncated");
    check_bad("4544535001"
              "00",
              EPROTO, "bad magic");
    check_bad("4544535402"
              "00",
              EPROTO, "byte 4: version 2, expected 1");
    check_bad("4544535401"
              "0000",
              EPROTO, "byte 6: 1 bytes after the tree");
    check_bad("4544535401"
              "8000",
              EPROTO, "byte 5: child count: varint not in shortest form");
    check_bad("4544535401"
              "ffffffff7f",
              EPROTO, "varint exceeds 32 bits");
    check_bad("4544535401"
              "05"
              "016d0100",
              EPROTO, "5 children in 4 bytes");
    check_bad("4544535401"
              "01"
              "00010000",
              EPROTO, "byte 6: name length 0 is not in 1..1024");
    check_bad("4544535401"
              "01"
              "81080000",
              EPROTO, "name length 1025 is not in 1..1024");
    check_bad("4544535401"
              "01"
              "056d0000",
              EPROTO, "byte 6: name: truncated");
    check_bad("4544535401"
              "01"
              "026d0a"
              "010000"
              "00",
              EPROTO, "name 'm?' is not printable UTF-8");
    check_bad("4544535401"
              "01"
              "016d"
              "00"
              "00",
              EPROTO, "byte 6: node 'm' has neither ends nor children");
    check_bad("4544535401"
              "01"
              "016d"
              "05"
              "0000",
              EPROTO, "5 ranges in 2 bytes");
    check_bad("4544535401"
              "01"
              "016d"
              "01"
              "80804000"
              "00",
              EPROTO, "rank 1048576 is too large (ranks stop at 1048575)");
    /* Siblings out of order, or repeated. */
    check_bad("4544535401"
              "02"
              "016e01000000"
              "016d01000000",
              EPROTO, "byte 12: node 'm' is out of order or repeated");
    check_bad("4544535401"
              "02"
              "016d01000000"
              "016d01000000",
              EPROTO, "node 'm' is out of order or repeated");
    /* Truncated anywhere. */
    check_bad("4544535401"
              "01"
              "016d"
              "01"
              "00",
              EPROTO, "byte 8: 1 ranges in 1 bytes");
    check_bad("4544535401"
              "01"
              "016d"
              "01"
              "ff01",
              EPROTO, "byte 11: range: truncated");
    check_bad("4544535401"
              "01"
              "016d"
              "01"
              "0000",
              EPROTO, "child count: truncated");
}

/* The highest rank is fine; one above is not; a range's end overflowing
 * 32 bits is caught. */
static void test_decode_rank_edges(void **state)
{
    eddy_error_t err = {{0}};
    /* Rank 1048575 = 0xfffff: varint ff ff 3f. */
    static const uint8_t ok[] = {'E', 'D', 'S',  'T',  1,    1, 1,
                                 'm', 1,   0xff, 0xff, 0x3f, 0, 0};
    static const uint8_t wrap[] = {'E',  'D',  'S',  'T',  1,    1,    1,
                                   'm',  1,    0xff, 0xff, 0xff, 0xff, 0x0f,
                                   0xff, 0xff, 0xff, 0xff, 0x0f, 0};
    stacktree_t *t = stacktree_decode(ok, sizeof(ok), &err);
    char *s;

    if (!t)
        fail_msg("decode failed: %s", err.text);
    s = stacktree_ranks(t);
    assert_string_equal(s, "1048575");
    free(s);
    stacktree_destroy(t);
    errno = 0;
    assert_null(stacktree_decode(wrap, sizeof(wrap), &err));
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "is too large"));
}

static void test_decode_depth(void **state)
{
    size_t n = STACKTREE_DEPTH_MAX + 1;
    uint8_t *buf = malloc(6 + n * 4 + 2);
    eddy_error_t err = {{0}};
    size_t len = 0;
    stacktree_t *t;

    assert_non_null(buf);
    memcpy(buf, "EDST\x01\x01", 6);
    len = 6;
    /* A chain of n nodes "f", the last with rank 0. */
    for (size_t i = 0; i < n; i++) {
        buf[len++] = 1;
        buf[len++] = 'f';
        if (i == n - 1) {
            buf[len++] = 1;
            buf[len++] = 0;
            buf[len++] = 0;
            buf[len++] = 0;
        } else {
            buf[len++] = 0;
            buf[len++] = 1;
        }
    }
    errno = 0;
    assert_null(stacktree_decode(buf, len, &err));
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "path deeper than 1024 frames"));

    /* One less is the deepest allowed: drop the first node (4 bytes). */
    memcpy(buf + 4, "EDST\x01\x01", 6);
    t = stacktree_decode(buf + 4, len - 4, &err);
    if (!t)
        fail_msg("decode failed: %s", err.text);
    check_roundtrip(t);
    stacktree_destroy(t);
    free(buf);
}

/* Every prefix of a valid encoding fails cleanly. */
static void test_decode_truncated(void **state)
{
    stacktree_t *t = example();
    eddy_error_t err;
    void *buf;
    size_t len;

    assert_int_equal(add(t, "main > x", 100000), 0);
    assert_int_equal(stacktree_encode(t, &buf, &len), 0);
    for (size_t i = 0; i < len; i++) {
        err.text[0] = '\0';
        errno = 0;
        assert_null(stacktree_decode(buf, i, &err));
        assert_int_equal(errno, EPROTO);
        assert_true(strlen(err.text) > 0);
    }
    free(buf);
    stacktree_destroy(t);
}

/* --- merging -------------------------------------------------------------- */

/* A random tree: ranks [base, base + n), paths from a small vocabulary so
 * that trees overlap; some ranks with two threads. */
static stacktree_t *random_tree(uint64_t *x, uint32_t base, uint32_t n)
{
    static const char *names[] = {"main",   "solve",        "MPI_Allreduce",
                                  "poll",   "compute",      "??",
                                  "clone3", "start_thread", "progress"};
    stacktree_t *t = stacktree_create();

    assert_non_null(t);
    for (uint32_t r = base; r < base + n; r++) {
        int threads = 1 + (int)(*x % 2);
        for (int th = 0; th < threads; th++) {
            const char *frames[8];
            size_t depth;

            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            depth = 1 + *x % 8;
            frames[0] = th ? "clone3" : "main";
            for (size_t d = 1; d < depth; d++)
                frames[d] = names[(*x >> (4 * d)) % 9];
            assert_int_equal(stacktree_add(t, frames, depth, r), 0);
        }
    }
    return t;
}

static stacktree_t *copy_of(const stacktree_t *t)
{
    stacktree_t *c = stacktree_create();

    assert_non_null(c);
    assert_int_equal(stacktree_merge(c, t), 0);
    return c;
}

static void test_merge_order(void **state)
{
    enum { N = 7 };
    uint64_t x = 0x9e3779b97f4a7c15ull;
    stacktree_t *parts[N];
    stacktree_t *left, *right, *pairs, *all;
    char *want, *hex;

    /* Overlapping rank ranges too: merging is a union. */
    for (int i = 0; i < N; i++)
        parts[i] = random_tree(&x, (uint32_t)i * 5, 8);

    /* ((p0 + p1) + p2) + ... */
    left = copy_of(parts[0]);
    for (int i = 1; i < N; i++)
        assert_int_equal(stacktree_merge(left, parts[i]), 0);
    want = stacktree_text(left);
    hex = encode_hex(left);

    /* p0 + (p1 + (p2 + ...)), built from the right. */
    right = copy_of(parts[N - 1]);
    for (int i = N - 2; i >= 0; i--) {
        stacktree_t *c = copy_of(parts[i]);
        assert_int_equal(stacktree_merge(c, right), 0);
        stacktree_destroy(right);
        right = c;
    }
    check_text(right, want);

    /* Pairwise, as up a binary tree, in shuffled order. */
    {
        stacktree_t *level[N];
        int n = N;
        static const int perm[N] = {3, 6, 0, 5, 1, 4, 2};

        for (int i = 0; i < N; i++)
            level[i] = copy_of(parts[perm[i]]);
        while (n > 1) {
            int m = 0;
            for (int i = 0; i < n; i += 2) {
                if (i + 1 < n) {
                    assert_int_equal(stacktree_merge(level[i + 1], level[i]),
                                     0);
                    stacktree_destroy(level[i]);
                    level[m++] = level[i + 1];
                } else {
                    level[m++] = level[i];
                }
            }
            n = m;
        }
        pairs = level[0];
    }
    check_text(pairs, want);

    /* Through the encoding, as between brokers. */
    all = stacktree_create();
    for (int i = N - 1; i >= 0; i--) {
        eddy_error_t err = {{0}};
        void *buf;
        size_t len;
        stacktree_t *d;

        assert_int_equal(stacktree_encode(parts[i], &buf, &len), 0);
        assert_non_null(d = stacktree_decode(buf, len, &err));
        assert_int_equal(stacktree_merge(all, d), 0);
        /* Merging the same again changes nothing. */
        assert_int_equal(stacktree_merge(all, d), 0);
        stacktree_destroy(d);
        free(buf);
    }
    check_text(all, want);
    {
        char *h2 = encode_hex(all), *h3 = encode_hex(pairs);
        assert_string_equal(h2, hex);
        assert_string_equal(h3, hex);
        free(h2);
        free(h3);
    }
    /* Merging a tree into itself changes nothing. */
    assert_int_equal(stacktree_merge(all, all), 0);
    check_text(all, want);
    check_roundtrip(all);

    free(want);
    free(hex);
    stacktree_destroy(left);
    stacktree_destroy(right);
    stacktree_destroy(pairs);
    stacktree_destroy(all);
    for (int i = 0; i < N; i++)
        stacktree_destroy(parts[i]);
}

/* The merge of two trees is the tree of all their paths added to one. */
static void test_merge_equals_add(void **state)
{
    stacktree_t *a = stacktree_create(), *b = stacktree_create();
    stacktree_t *one = stacktree_create();
    const char *paths[] = {"main > a > b", "main > a", "main > c", "clone3 > w",
                           "main > a > b > c"};
    char *x, *y;

    for (uint32_t r = 0; r < 40; r++) {
        const char *p = paths[(r * 7) % 5];
        assert_int_equal(add(r % 3 ? a : b, p, r), 0);
        assert_int_equal(add(one, p, r), 0);
    }
    assert_int_equal(stacktree_merge(a, b), 0);
    x = encode_hex(a);
    y = encode_hex(one);
    assert_string_equal(x, y);
    free(x);
    free(y);
    /* src is left alone. */
    x = stacktree_ranks(b);
    assert_string_equal(x, "0,3,6,9,12,15,18,21,24,27,30,33,36,39");
    free(x);
    stacktree_destroy(a);
    stacktree_destroy(b);
    stacktree_destroy(one);
}

/* --- out of memory -------------------------------------------------------- */

#ifdef FAILMALLOC
/* Every allocation of a merge fails in turn: each failure is ENOMEM and
 * leaves the target as it was; then the merge succeeds. */
static void test_nomem_merge(void **state)
{
    uint64_t x = 12345;
    stacktree_t *src = random_tree(&x, 3, 12), *t = random_tree(&x, 0, 10);
    stacktree_t *want = copy_of(t);
    char *before = encode_hex(t), *after, *w;
    long k;
    int rc;

    assert_int_equal(stacktree_merge(want, src), 0);
    for (k = 0;; k++) {
        fail_at = k;
        rc = stacktree_merge(t, src);
        fail_at = -1;
        if (rc == 0)
            break;
        assert_int_equal(errno, ENOMEM);
        after = encode_hex(t);
        assert_string_equal(after, before);
        free(after);
    }
    assert_true(k > 3);
    after = encode_hex(t);
    w = encode_hex(want);
    assert_string_equal(after, w);
    free(after);
    free(w);
    free(before);
    stacktree_destroy(want);
    stacktree_destroy(t);
    stacktree_destroy(src);
}

static void test_nomem_add(void **state)
{
    const char *paths[][4] = {{"main", "solve", "new", "deeper"},
                              {"main", "solve", "MPI_Allreduce", NULL},
                              {"main", "solve", NULL, NULL}};
    const size_t depth[] = {4, 3, 2};
    const uint32_t ranks[] = {4, 1000, 9};
    stacktree_t *t = example();

    for (size_t i = 0; i < 3; i++) {
        long k;
        int rc;

        for (k = 0;; k++) {
            char *before = encode_hex(t), *after;

            fail_at = k;
            rc = stacktree_add(t, paths[i], depth[i], ranks[i]);
            fail_at = -1;
            if (rc == 0) {
                free(before);
                break;
            }
            assert_int_equal(errno, ENOMEM);
            after = encode_hex(t);
            assert_string_equal(after, before);
            free(after);
            free(before);
        }
        /* A new chain and empty ends allocate; ends with room need not. */
        if (k < 1 && i != 1)
            fail_msg("path %zu: no allocation to fail", i);
    }
    check_text(t, "main > solve  [9]\n"
                  "main > solve > MPI_Allreduce  [0-3,5-7,1000]\n"
                  "main > solve > compute  [4]\n"
                  "main > solve > new > deeper  [4]\n");
    stacktree_destroy(t);
}

/* Decoding and printing fail cleanly (no crash; ENOMEM) at every
 * allocation. */
static void test_nomem_decode_print(void **state)
{
    uint64_t x = 777;
    stacktree_t *t = random_tree(&x, 0, 6);
    char *want[4];
    void *buf;
    size_t len;

    assert_int_equal(stacktree_encode(t, &buf, &len), 0);
    want[0] = stacktree_text(t);
    want[1] = stacktree_json(t);
    want[2] = stacktree_dot(t);
    want[3] = stacktree_ranks(t);
    for (int what = 0; what < 5; what++) {
        for (long k = 0;; k++) {
            eddy_error_t err = {{0}};
            stacktree_t *d = NULL;
            char *s = NULL;
            bool ok;

            fail_at = k;
            switch (what) {
            case 0:
                ok = (s = stacktree_text(t)) != NULL;
                break;
            case 1:
                ok = (s = stacktree_json(t)) != NULL;
                break;
            case 2:
                ok = (s = stacktree_dot(t)) != NULL;
                break;
            case 3:
                ok = (s = stacktree_ranks(t)) != NULL;
                break;
            default:
                ok = (d = stacktree_decode(buf, len, &err)) != NULL;
                break;
            }
            fail_at = -1;
            if (ok) {
                if (s)
                    assert_string_equal(s, want[what]);
                free(s);
                stacktree_destroy(d);
                break;
            }
            assert_int_equal(errno, ENOMEM);
            if (what == 4)
                assert_string_equal(err.text, "stacktree: out of memory");
        }
    }
    for (int i = 0; i < 4; i++)
        free(want[i]);
    free(buf);
    stacktree_destroy(t);
}
#endif

/* --- scale ---------------------------------------------------------------- */

/* The main thread's 30-frame path of a task of the big job: most tasks in
 * the allreduce, every 100th computing, every 1000th in I/O. */
static size_t big_path(uint32_t r, const char **frames)
{
    static const char *common[] = {
        "_start",         "__libc_start_main",  "main",
        "app::run()",     "app::timestep(int)", "solver::iterate()",
        "solver::solve()"};
    static const char *mpi[] = {"PMPI_Allreduce",
                                "MPIR_Allreduce",
                                "MPIR_Allreduce_intra_auto",
                                "MPIR_Allreduce_intra_recursive_doubling",
                                "MPIC_Sendrecv",
                                "MPIC_Wait",
                                "MPIR_Wait",
                                "MPID_Progress_wait",
                                "MPIDI_progress_test",
                                "MPIDI_UCX_progress",
                                "ucp_worker_progress",
                                "uct_mm_iface_progress",
                                "?? (libuct.so.0)"};
    size_t n = 0;

    for (size_t i = 0; i < 7; i++)
        frames[n++] = common[i];
    if (r % 1000 == 7) {
        frames[n++] = "io::write()";
        frames[n++] = "__GI___libc_write";
    } else if (r % 100 == 3) {
        frames[n++] = "solver::compute()";
        frames[n++] = "kernel::apply(double*)";
    }
    for (size_t i = 0; n < 30; i++)
        frames[n++] = mpi[i % 13];
    return n;
}

static void test_scale(void **state)
{
    enum { RANKS = 16384, PER_NODE = 64, NODES = RANKS / PER_NODE };
    void *bufs[NODES];
    size_t lens[NODES], total = 0;
    stacktree_t *level[NODES];
    double t0, t_build, t_merge;
    const char *progress[] = {"clone3", "start_thread", "?? (libucs.so.0)",
                              "ucs_event_set_wait", "epoll_wait"};
    void *buf;
    size_t len;
    char *text;
    int n;

    /* Each node daemon: add its tasks' two threads, encode. */
    t0 = now();
    for (int node = 0; node < NODES; node++) {
        stacktree_t *t = stacktree_create();

        assert_non_null(t);
        for (uint32_t r = (uint32_t)node * PER_NODE;
             r < (uint32_t)(node + 1) * PER_NODE; r++) {
            const char *frames[30];
            size_t depth = big_path(r, frames);

            assert_int_equal(stacktree_add(t, frames, depth, r), 0);
            assert_int_equal(stacktree_add(t, progress, 5, r), 0);
        }
        assert_int_equal(stacktree_encode(t, &bufs[node], &lens[node]), 0);
        stacktree_destroy(t);
    }
    t_build = now() - t0;

    /* Up a binary tree of brokers: decode the children's, merge, encode. */
    t0 = now();
    for (int i = 0; i < NODES; i++) {
        eddy_error_t err = {{0}};
        assert_non_null(level[i] = stacktree_decode(bufs[i], lens[i], &err));
        total += lens[i];
        free(bufs[i]);
    }
    n = NODES;
    while (n > 1) {
        int m = 0;
        for (int i = 0; i < n; i += 2) {
            eddy_error_t err = {{0}};
            stacktree_t *d;

            assert_int_equal(stacktree_encode(level[i + 1], &buf, &len), 0);
            stacktree_destroy(level[i + 1]);
            assert_non_null(d = stacktree_decode(buf, len, &err));
            free(buf);
            assert_int_equal(stacktree_merge(level[i], d), 0);
            stacktree_destroy(d);
            level[m++] = level[i];
        }
        n = m;
    }
    t_merge = now() - t0;
    assert_int_equal(stacktree_encode(level[0], &buf, &len), 0);
    text = stacktree_text(level[0]);
    if (getenv("STACKTREE_DUMP"))
        print_message("%s", text);
    print_message("scale: %d ranks x 30 frames: build+encode %.3f s, "
                  "decode+merge up the tree %.3f s; per-node encodings "
                  "%zu bytes in all, final %zu bytes\n",
                  RANKS, t_build, t_merge, total, len);
    assert_true(t_build + t_merge < 1.0 * scale());
    /* idsets, not rank lists: a few KiB for the whole job. */
    assert_true(len < 4096);
    assert_non_null(strstr(text, "clone3 > start_thread > ?? (libucs.so.0) > "
                                 "ucs_event_set_wait > epoll_wait  "
                                 "[0-16383]\n"));
    assert_non_null(strstr(text, "solver::compute() > kernel::apply(double*) "
                                 "> PMPI_Allreduce"));
    assert_non_null(strstr(text, "  [0-2,4-6,8-102,104-202,204-302,"));
    assert_non_null(strstr(text, "io::write() > __GI___libc_write > "));
    free(text);
    free(buf);
    stacktree_destroy(level[0]);
}

/* The worst shape: every rank on its own path below a shared prefix. */
static void test_scale_distinct(void **state)
{
    enum { RANKS = 16384 };
    stacktree_t *a = stacktree_create(), *b = stacktree_create();
    eddy_error_t err = {{0}};
    stacktree_t *d;
    double t0 = now(), dt;
    void *buf;
    size_t len;
    char *s;

    for (uint32_t r = 0; r < RANKS; r++) {
        const char *frames[30];
        char leaf[32];

        for (size_t i = 0; i < 29; i++)
            frames[i] = i % 2 ? "f" : "g";
        snprintf(leaf, sizeof(leaf), "leaf%u", r);
        frames[29] = leaf;
        assert_int_equal(stacktree_add(r % 2 ? a : b, frames, 30, r), 0);
    }
    assert_int_equal(stacktree_encode(b, &buf, &len), 0);
    assert_non_null(d = stacktree_decode(buf, len, &err));
    assert_int_equal(stacktree_merge(a, d), 0);
    free(buf);
    s = stacktree_json(a);
    assert_non_null(s);
    free(s);
    dt = now() - t0;
    print_message("distinct leaves: %d ranks: %.3f s\n", RANKS, dt);
    /* Pathological, so a looser bound (sanitizer builds take 0.5 s). */
    assert_true(dt < 2.0 * scale());
    s = stacktree_ranks(a);
    assert_string_equal(s, "0-16383");
    free(s);
    stacktree_destroy(d);
    stacktree_destroy(a);
    stacktree_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_threads_and_prefixes),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_dot),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_ranks_match_idset),
        cmocka_unit_test(test_add_bad),
        cmocka_unit_test(test_null_args),
        cmocka_unit_test(test_encoding_bytes),
        cmocka_unit_test(test_decode_bad),
        cmocka_unit_test(test_decode_rank_edges),
        cmocka_unit_test(test_decode_depth),
        cmocka_unit_test(test_decode_truncated),
        cmocka_unit_test(test_merge_order),
        cmocka_unit_test(test_merge_equals_add),
#ifdef FAILMALLOC
        cmocka_unit_test(test_nomem_merge),
        cmocka_unit_test(test_nomem_add),
        cmocka_unit_test(test_nomem_decode_print),
#endif
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_scale_distinct),
    };

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * scale());
    return cmocka_run_group_tests(tests, NULL, NULL);
}
