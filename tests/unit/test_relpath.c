/* test_relpath.c - unit tests for src/common/relpath.c */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/relpath.h"

static void test_dotdot_found(void **state)
{
    const char *bad[] = {"..",     "../x",           "a/..",
                         "a/../b", "a//..//b",       "./..",
                         "../",    "x/y/z/../../..", "/abs/../x"};

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_true(relpath_has_dotdot(bad[i]));
}

static void test_no_dotdot(void **state)
{
    const char *good[] = {"",    ".",     "a",    "a/b",  "...",   "..a",
                          "a..", ".../x", "a/.b", "/abs", "a/./b", "a//b/"};

    (void)state;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_false(relpath_has_dotdot(good[i]));
    assert_false(relpath_has_dotdot(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dotdot_found),
        cmocka_unit_test(test_no_dotdot),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
