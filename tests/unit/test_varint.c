/* test_varint.c - unit tests for src/common/varint.c */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/varint.h"

/* v must encode to exactly the bytes 'want' and decode back from them. */
static void check_bytes(uint32_t v, const uint8_t *want, size_t wantlen)
{
    uint8_t buf[VARINT_MAX + 2];
    size_t n, pos = 0;
    uint32_t got = 0xdeadbeef;

    memset(buf, 0xaa, sizeof(buf));
    n = varint_encode(buf, v);
    assert_int_equal(n, wantlen);
    assert_memory_equal(buf, want, wantlen);
    assert_int_equal(buf[n], 0xaa); /* nothing written past the end */
    assert_int_equal(varint_get(buf, n, &pos, &got), VARINT_OK);
    assert_int_equal(pos, n);
    assert_int_equal(got, v);
}

static void test_edges(void **state)
{
    (void)state;
    check_bytes(0, (const uint8_t[]){0x00}, 1);
    check_bytes(1, (const uint8_t[]){0x01}, 1);
    check_bytes(127, (const uint8_t[]){0x7f}, 1);
    check_bytes(128, (const uint8_t[]){0x80, 0x01}, 2);
    check_bytes(300, (const uint8_t[]){0xac, 0x02}, 2);
    check_bytes(16383, (const uint8_t[]){0xff, 0x7f}, 2);
    check_bytes(16384, (const uint8_t[]){0x80, 0x80, 0x01}, 3);
    check_bytes(1u << 28, (const uint8_t[]){0x80, 0x80, 0x80, 0x80, 0x01}, 5);
    check_bytes(UINT32_MAX, (const uint8_t[]){0xff, 0xff, 0xff, 0xff, 0x0f},
                VARINT_MAX);
}

/* Every length boundary 2^(7k) - 1 / 2^(7k), and a spread of values,
 * survive a round trip through a writer. */
static void test_writer_roundtrip(void **state)
{
    uint32_t vals[64];
    size_t nvals = 0;
    struct varint_writer w = {0};
    size_t size, pos = 0;

    (void)state;
    for (int k = 1; k <= 4; k++) {
        vals[nvals++] = (1u << (7 * k)) - 1;
        vals[nvals++] = 1u << (7 * k);
    }
    for (uint32_t v = 1; nvals < 60; v = v * 3 + 1)
        vals[nvals++] = v;
    vals[nvals++] = UINT32_MAX;
    /* Sizing pass: nothing written, only counted. */
    for (size_t i = 0; i < nvals; i++)
        varint_write(&w, vals[i]);
    varint_write_bytes(&w, "xyz", 3);
    size = w.pos;
    assert_true(size >= nvals + 3 && size <= nvals * VARINT_MAX + 3);
    w.p = malloc(size);
    assert_non_null(w.p);
    w.pos = 0;
    for (size_t i = 0; i < nvals; i++)
        varint_write(&w, vals[i]);
    varint_write_bytes(&w, "xyz", 3);
    assert_int_equal(w.pos, size);
    for (size_t i = 0; i < nvals; i++) {
        uint32_t v;

        assert_int_equal(varint_get(w.p, size, &pos, &v), VARINT_OK);
        assert_int_equal(v, vals[i]);
    }
    assert_int_equal(size - pos, 3);
    assert_memory_equal(w.p + pos, "xyz", 3);
    free(w.p);
}

/* Decoding 'in' must fail with 'want', leaving pos and the value alone. */
static void check_bad(const uint8_t *in, size_t len, int want)
{
    size_t pos = 0;
    uint32_t v = 42;

    assert_int_equal(varint_get(in, len, &pos, &v), want);
    assert_int_equal(pos, 0);
    assert_int_equal(v, 42);
}

static void test_refused(void **state)
{
    (void)state;
    /* Truncation: empty input, and a continuation bit with nothing after. */
    check_bad(NULL, 0, VARINT_TRUNCATED);
    check_bad((const uint8_t[]){0x80}, 1, VARINT_TRUNCATED);
    check_bad((const uint8_t[]){0xff, 0xff, 0xff, 0xff}, 4, VARINT_TRUNCATED);
    /* Not the shortest form: zero, 1 and 127 padded with 0x00 groups. */
    check_bad((const uint8_t[]){0x80, 0x00}, 2, VARINT_NOT_SHORTEST);
    check_bad((const uint8_t[]){0x81, 0x00}, 2, VARINT_NOT_SHORTEST);
    check_bad((const uint8_t[]){0xff, 0x80, 0x80, 0x80, 0x00}, 5,
              VARINT_NOT_SHORTEST);
    /* Beyond 32 bits: 2^32 exactly, a high bit in the fifth byte, and a
     * sixth byte announced. */
    check_bad((const uint8_t[]){0x80, 0x80, 0x80, 0x80, 0x10}, 5,
              VARINT_OVERFLOW);
    check_bad((const uint8_t[]){0xff, 0xff, 0xff, 0xff, 0x7f}, 5,
              VARINT_OVERFLOW);
    check_bad((const uint8_t[]){0xff, 0xff, 0xff, 0xff, 0x8f, 0x00}, 6,
              VARINT_OVERFLOW);
}

/* The reader starts at *pos and stops at len, not at the first byte. */
static void test_offsets(void **state)
{
    const uint8_t in[] = {0x05, 0xac, 0x02, 0x80};
    size_t pos = 1;
    uint32_t v;

    (void)state;
    assert_int_equal(varint_get(in, sizeof(in), &pos, &v), VARINT_OK);
    assert_int_equal(v, 300);
    assert_int_equal(pos, 3);
    assert_int_equal(varint_get(in, sizeof(in), &pos, &v), VARINT_TRUNCATED);
    assert_int_equal(pos, 3);
    /* A len cutting a valid varint short is truncation too. */
    pos = 1;
    assert_int_equal(varint_get(in, 2, &pos, &v), VARINT_TRUNCATED);
    pos = sizeof(in);
    assert_int_equal(varint_get(in, sizeof(in), &pos, &v), VARINT_TRUNCATED);
}

static void test_strerror(void **state)
{
    (void)state;
    /* The codecs' messages (and their tests) rely on these words. */
    assert_string_equal(varint_strerror(VARINT_TRUNCATED), "truncated");
    assert_string_equal(varint_strerror(VARINT_OVERFLOW),
                        "varint exceeds 32 bits");
    assert_string_equal(varint_strerror(VARINT_NOT_SHORTEST),
                        "varint not in shortest form");
    assert_string_equal(varint_strerror(VARINT_OK), "success");
    assert_non_null(varint_strerror(-99));
}

/* The reader's messages name the codec, the byte where the bad varint
 * starts, the item being read and what the varint is. */
static void test_reader(void **state)
{
    const uint8_t in[] = {0x07, 0x80, 0x00, 0x81};
    eddy_error_t err = {{0}};
    struct varint_reader r = {
        .p = in, .len = sizeof(in), .name = "codec", .err = &err};
    uint32_t v = 0;

    (void)state;
    assert_int_equal(varint_read(&r, &v, "count"), 0);
    assert_int_equal(v, 7);
    assert_int_equal(r.pos, 1);
    assert_int_equal(varint_left(&r), 3);

    errno = 0;
    assert_int_equal(varint_read(&r, &v, "count"), -1);
    assert_int_equal(errno, EPROTO);
    assert_string_equal(err.text,
                        "codec: byte 1: count: varint not in shortest form");
    assert_int_equal(r.pos, 1);
    assert_int_equal(v, 7);

    r.pos = 3;
    r.ctx = "run";
    r.ctx_idx = 4;
    errno = 0;
    assert_int_equal(varint_read(&r, &v, "pid"), -1);
    assert_int_equal(errno, EPROTO);
    assert_string_equal(err.text, "codec: byte 3: run 4: pid: truncated");

    r.ctx = NULL;
    errno = 0;
    assert_int_equal(varint_error(&r, 9, "%d trailing bytes", 2), -1);
    assert_int_equal(errno, EPROTO);
    assert_string_equal(err.text, "codec: byte 9: 2 trailing bytes");

    /* No error struct: still refused, errno set. */
    r.err = NULL;
    r.pos = 1;
    errno = 0;
    assert_int_equal(varint_read(&r, &v, "count"), -1);
    assert_int_equal(errno, EPROTO);
}

static void test_zigzag(void **state)
{
    (void)state;
    assert_int_equal(varint_zigzag(0), 0);
    assert_int_equal(varint_zigzag((uint32_t)-1), 1);
    assert_int_equal(varint_zigzag(1), 2);
    assert_int_equal(varint_zigzag((uint32_t)-2), 3);
    assert_int_equal(varint_zigzag((uint32_t)INT32_MAX), UINT32_MAX - 1);
    assert_int_equal(varint_zigzag((uint32_t)INT32_MIN), UINT32_MAX);
    assert_int_equal(varint_unzigzag(UINT32_MAX - 1), (uint32_t)INT32_MAX);
    assert_int_equal(varint_unzigzag(UINT32_MAX), (uint32_t)INT32_MIN);
    /* A bijection: spot-check a spread of values both ways, and that a
     * delta of +-1 stays one byte on the wire. */
    for (uint64_t v = 0; v <= UINT32_MAX; v += 65521) {
        assert_int_equal(varint_unzigzag(varint_zigzag((uint32_t)v)), v);
        assert_int_equal(varint_zigzag(varint_unzigzag((uint32_t)v)), v);
    }
    {
        uint8_t b[VARINT_MAX];

        assert_int_equal(varint_encode(b, varint_zigzag((uint32_t)-1)), 1);
        assert_int_equal(varint_encode(b, varint_zigzag((uint32_t)INT32_MIN)),
                         VARINT_MAX);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_offsets),
        cmocka_unit_test(test_strerror),
        cmocka_unit_test(test_reader),
        cmocka_unit_test(test_zigzag),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
