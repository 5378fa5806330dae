/* test_idset.c - unit tests for src/common/idset.c */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/idset.h"

/* Decode 'in', encode it, and check the canonical form. */
static void check_roundtrip(const char *in, const char *want)
{
    eddy_error_t err = {{0}};
    idset_t *s = idset_decode(in, &err);
    char *out;

    if (!s)
        fail_msg("decode '%s' failed: %s", in, err.text);
    out = idset_encode(s);
    assert_non_null(out);
    assert_string_equal(out, want);
    free(out);
    idset_destroy(s);
}

/* Decode 'in' must fail with 'errnum' and a message containing 'msg'. */
static void check_bad(const char *in, int errnum, const char *msg)
{
    eddy_error_t err = {{0}};
    idset_t *s;

    errno = 0;
    s = idset_decode(in, &err);
    if (s)
        fail_msg("decode '%s' unexpectedly succeeded", in);
    assert_int_equal(errno, errnum);
    if (!strstr(err.text, msg))
        fail_msg("decode '%s': message '%s' lacks '%s'", in, err.text, msg);
}

static void test_decode_good(void **state)
{
    check_roundtrip("", "");
    check_roundtrip("[]", "");
    check_roundtrip("0", "0");
    check_roundtrip("0-3,8", "0-3,8");
    check_roundtrip("[0-3,8]", "0-3,8");
    check_roundtrip("0,1", "0-1");
    check_roundtrip("8,0-3", "0-3,8");
    check_roundtrip("1,1,1", "1");
    check_roundtrip("0-5,3-9", "0-9");
    check_roundtrip("0-3,4-7", "0-7");
    check_roundtrip("5-5", "5");
    check_roundtrip("63,64", "63-64");
    check_roundtrip("62-65,127-128", "62-65,127-128");
    check_roundtrip("1048575", "1048575");
    check_roundtrip("0-1048575", "0-1048575");
    check_roundtrip("0,2,4", "0,2,4");
}

static void test_decode_bad(void **state)
{
    check_bad("3-1", EINVAL, "range '3-1' goes backwards");
    check_bad("1,,2", EINVAL, "empty element");
    check_bad("a", EINVAL, "'a' is not a number");
    check_bad("0-3,x", EINVAL, "idset '0-3,x': 'x' is not a number");
    check_bad("-1", EINVAL, "'-1' is not a number");
    check_bad("1-", EINVAL, "'1-' is not a range");
    check_bad("1-2-3", EINVAL, "'1-2-3' is not a range");
    check_bad(" 1", EINVAL, "' 1' is not a number");
    check_bad("1 ", EINVAL, "'1 ' is not a number");
    check_bad("1,", EINVAL, "trailing ','");
    check_bad(",1", EINVAL, "empty element");
    check_bad(",", EINVAL, "empty element");
    check_bad("[1", EINVAL, "without a closing ']'");
    check_bad("1]", EINVAL, "'1]' is not a number");
    check_bad("[[1]]", EINVAL, "'[1]' is not a number");
    check_bad("+1", EINVAL, "'+1' is not a number");
    check_bad("1048576", ERANGE, "'1048576' is too large");
    check_bad("0-1048576", ERANGE, "'0-1048576' is too large");
    check_bad("99999999999999999999", ERANGE, "is too large");
    check_bad("4294967296", ERANGE, "is too large");
    check_bad("1,\x01", EINVAL, "'?' is not a number");
}

static void test_decode_null(void **state)
{
    eddy_error_t err = {{0}};

    errno = 0;
    assert_null(idset_decode(NULL, &err));
    assert_int_equal(errno, EINVAL);
    assert_true(strlen(err.text) > 0);
    /* A NULL err is allowed. */
    errno = 0;
    assert_null(idset_decode("x", NULL));
    assert_int_equal(errno, EINVAL);
}

static void test_long_input_message_bounded(void **state)
{
    char buf[4096];
    eddy_error_t err = {{0}};

    memset(buf, '1', sizeof(buf) - 2);
    buf[sizeof(buf) - 2] = 'x';
    buf[sizeof(buf) - 1] = '\0';
    assert_null(idset_decode(buf, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "..."));
    assert_true(strlen(err.text) < sizeof(err.text));
}

static void test_set_clear_test(void **state)
{
    idset_t *s = idset_create();

    assert_non_null(s);
    assert_int_equal(idset_count(s), 0);
    assert_false(idset_test(s, 0));
    assert_int_equal(idset_first(s), IDSET_INVALID);
    assert_int_equal(idset_last(s), IDSET_INVALID);

    assert_int_equal(idset_set(s, 5), 0);
    assert_int_equal(idset_set(s, 1000), 0);
    assert_int_equal(idset_set(s, 5), 0);
    assert_true(idset_test(s, 5));
    assert_true(idset_test(s, 1000));
    assert_false(idset_test(s, 6));
    assert_false(idset_test(s, 100000));
    assert_int_equal(idset_count(s), 2);

    errno = 0;
    assert_int_equal(idset_set(s, IDSET_ID_MAX), -1);
    assert_int_equal(errno, ERANGE);
    errno = 0;
    assert_int_equal(idset_set(s, UINT32_MAX), -1);
    assert_int_equal(errno, ERANGE);
    assert_int_equal(idset_set(s, IDSET_ID_MAX - 1), 0);
    assert_int_equal(idset_last(s), IDSET_ID_MAX - 1);
    assert_false(idset_test(s, IDSET_ID_MAX));

    assert_int_equal(idset_clear(s, 5), 0);
    assert_false(idset_test(s, 5));
    assert_int_equal(idset_clear(s, 77777), 0); /* not a member: fine */
    errno = 0;
    assert_int_equal(idset_clear(s, IDSET_ID_MAX), -1);
    assert_int_equal(errno, ERANGE);
    assert_int_equal(idset_count(s), 2);
    assert_int_equal(idset_first(s), 1000);

    errno = 0;
    assert_int_equal(idset_set(NULL, 1), -1);
    assert_int_equal(errno, EINVAL);
    assert_false(idset_test(NULL, 1));
    assert_int_equal(idset_count(NULL), 0);
    idset_destroy(s);
}

static void test_iterate(void **state)
{
    idset_t *s = idset_decode("0,3,63-65,200,1048575", NULL);
    uint32_t want[] = {0, 3, 63, 64, 65, 200, 1048575};
    size_t n = 0;

    assert_non_null(s);
    assert_int_equal(idset_count(s), 7);
    for (uint32_t id = idset_first(s); id != IDSET_INVALID;
         id = idset_next(s, id)) {
        assert_true(n < sizeof(want) / sizeof(want[0]));
        assert_int_equal(id, want[n]);
        n++;
    }
    assert_int_equal(n, 7);
    assert_int_equal(idset_last(s), 1048575);
    assert_int_equal(idset_next(s, 1048575), IDSET_INVALID);
    assert_int_equal(idset_next(s, IDSET_INVALID), IDSET_INVALID);
    assert_int_equal(idset_next(s, 201), 1048575);
    idset_destroy(s);
}

static void test_encode_full_range(void **state)
{
    idset_t *s = idset_create();
    char *out;

    assert_non_null(s);
    for (uint32_t i = 0; i < 200; i += 2)
        assert_int_equal(idset_set(s, i), 0);
    out = idset_encode(s);
    assert_non_null(out);
    assert_int_equal(strncmp(out, "0,2,4,6,", 8), 0);
    assert_non_null(strstr(out, ",196,198"));
    free(out);
    /* Fill the gaps: one range. */
    for (uint32_t i = 1; i < 200; i += 2)
        assert_int_equal(idset_set(s, i), 0);
    out = idset_encode(s);
    assert_string_equal(out, "0-199");
    free(out);
    idset_destroy(s);
    errno = 0;
    assert_null(idset_encode(NULL));
    assert_int_equal(errno, EINVAL);
}

static void test_destroy_preserves_errno(void **state)
{
    idset_t *s = idset_create();

    errno = ENOENT;
    idset_destroy(s);
    idset_destroy(NULL);
    assert_int_equal(errno, ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_good),
        cmocka_unit_test(test_decode_bad),
        cmocka_unit_test(test_decode_null),
        cmocka_unit_test(test_long_input_message_bounded),
        cmocka_unit_test(test_set_clear_test),
        cmocka_unit_test(test_iterate),
        cmocka_unit_test(test_encode_full_range),
        cmocka_unit_test(test_destroy_preserves_errno),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
