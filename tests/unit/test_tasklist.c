/* test_tasklist.c - unit tests for src/common/tasklist.c */
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

#include "src/common/tasklist.h"

/* Decode 'in', check its canonical form and count. */
static void check_good(const char *in, const char *want, size_t n)
{
    eddy_error_t err = {{0}};
    tasklist_t *tl = tasklist_decode(in, &err);
    char *out;

    if (!tl)
        fail_msg("decode '%s' failed: %s", in, err.text);
    assert_int_equal(tasklist_count(tl), n);
    out = tasklist_encode(tl);
    assert_non_null(out);
    assert_string_equal(out, want);
    free(out);
    tasklist_destroy(tl);
}

/* Decode 'in' must fail with 'errnum' and a message containing 'msg'. */
static void check_bad(const char *in, int errnum, const char *msg)
{
    eddy_error_t err = {{0}};
    tasklist_t *tl;

    errno = 0;
    tl = tasklist_decode(in, &err);
    if (tl)
        fail_msg("decode '%s' unexpectedly succeeded", in);
    assert_int_equal(errno, errnum);
    if (!strstr(err.text, msg))
        fail_msg("decode '%s': message '%s' lacks '%s'", in, err.text, msg);
}

static void test_decode_good(void **state)
{
    check_good("", "", 0);
    check_good("0:1234", "0:1234", 1);
    check_good("0:1234,1:1235", "0:1234,1:1235", 2);
    check_good("7:10,3:11,5:12", "7:10,3:11,5:12", 3); /* order kept */
    check_good("007:0042", "7:42", 1);
    check_good("1048575:4194303", "1048575:4194303", 1);
}

static void test_decode_tasks(void **state)
{
    tasklist_t *tl = tasklist_decode("4:100,2:200", NULL);
    const struct tasklist_task *t;

    assert_non_null(tl);
    t = tasklist_tasks(tl);
    assert_non_null(t);
    assert_int_equal(t[0].rank, 4);
    assert_int_equal(t[0].pid, 100);
    assert_int_equal(t[1].rank, 2);
    assert_int_equal(t[1].pid, 200);
    tasklist_destroy(tl);

    tl = tasklist_decode("", NULL);
    assert_non_null(tl);
    assert_null(tasklist_tasks(tl));
    tasklist_destroy(tl);
    assert_int_equal(tasklist_count(NULL), 0);
    assert_null(tasklist_tasks(NULL));
}

static void test_decode_bad(void **state)
{
    check_bad("1234", EINVAL, "tasks: '1234' is not RANK:PID");
    check_bad("0:1,1:2,x", EINVAL, "'x' is not RANK:PID");
    check_bad(",0:1", EINVAL, "empty element");
    check_bad("0:1,,1:2", EINVAL, "empty element");
    check_bad("0:1,", EINVAL, "trailing ','");
    check_bad(",", EINVAL, "empty element");
    check_bad(":1", EINVAL, "':1': rank '' is not a number");
    check_bad("1:", EINVAL, "'1:': pid '' is not a number");
    check_bad("a:1", EINVAL, "rank 'a' is not a number");
    check_bad("1:b", EINVAL, "pid 'b' is not a number");
    check_bad("-1:5", EINVAL, "rank '-1' is not a number");
    check_bad("+1:5", EINVAL, "rank '+1' is not a number");
    check_bad("1:-5", EINVAL, "pid '-5' is not a number");
    check_bad(" 1:5", EINVAL, "rank ' 1' is not a number");
    check_bad("1:5 ", EINVAL, "pid '5 ' is not a number");
    check_bad("1:2:3", EINVAL, "pid '2:3' is not a number");
    check_bad("0:0", EINVAL, "'0:0': pid 0 is not a process");
    check_bad("1048576:5", ERANGE, "'1048576:5': rank is not below 1048576");
    check_bad("99999999999999999999999:5", ERANGE, "rank is not below");
    check_bad("1:4194304", ERANGE, "pid is not below 4194304");
    check_bad("1:10,2:11,1:12", EINVAL, "rank 1 is given twice");
    check_bad("1:10,2:11,3:10", EINVAL, "pid 10 is given twice");
}

static void test_decode_null(void **state)
{
    eddy_error_t err = {{0}};

    errno = 0;
    assert_null(tasklist_decode(NULL, &err));
    assert_int_equal(errno, EINVAL);
    assert_string_equal(err.text, "no task list");
    errno = 0;
    assert_null(tasklist_encode(NULL));
    assert_int_equal(errno, EINVAL);
}

/* A long bad element is quoted cut short, not in full. */
static void test_message_bounded(void **state)
{
    char in[4096];
    eddy_error_t err = {{0}};

    memset(in, 'x', sizeof(in) - 1);
    in[sizeof(in) - 1] = '\0';
    assert_null(tasklist_decode(in, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "is not RANK:PID"));
    assert_true(strlen(err.text) < 100);
}

/* TASKLIST_TASKS_MAX tasks decode; one more is E2BIG before any parse. */
static void test_many(void **state)
{
    size_t cap = (size_t)(TASKLIST_TASKS_MAX + 1) * 16 + 1, len = 0;
    char *s = malloc(cap);
    eddy_error_t err = {{0}};
    tasklist_t *tl;
    char *out;
    int i;

    assert_non_null(s);
    for (i = 0; i < TASKLIST_TASKS_MAX; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s%d:%d", i ? "," : "", i,
                                i + 100);
    tl = tasklist_decode(s, &err);
    if (!tl)
        fail_msg("decode failed: %s", err.text);
    assert_int_equal(tasklist_count(tl), TASKLIST_TASKS_MAX);
    out = tasklist_encode(tl);
    assert_non_null(out);
    assert_string_equal(out, s);
    free(out);
    tasklist_destroy(tl);

    snprintf(s + len, cap - len, ",%d:%d", i, i + 100);
    errno = 0;
    assert_null(tasklist_decode(s, &err));
    assert_int_equal(errno, E2BIG);
    assert_non_null(strstr(err.text, "more than 65536"));
    free(s);
}

static void test_destroy_preserves_errno(void **state)
{
    tasklist_t *tl = tasklist_decode("1:2", NULL);

    assert_non_null(tl);
    errno = ENOENT;
    tasklist_destroy(tl);
    tasklist_destroy(NULL);
    assert_int_equal(errno, ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_good),
        cmocka_unit_test(test_decode_tasks),
        cmocka_unit_test(test_decode_bad),
        cmocka_unit_test(test_decode_null),
        cmocka_unit_test(test_message_bounded),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_destroy_preserves_errno),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
