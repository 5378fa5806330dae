/* test_taskenv.c - unit tests for src/shell/taskenv.c */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "src/shell/taskenv.h"

static const struct taskenv_ids ids = {
    .jobid = 123456789012ULL,
    .rank = 5,
    .local_rank = 1,
    .size = 8,
    .nnodes = 4,
    .uri = "local:///tmp/x/local-2",
};

static size_t count(char **env)
{
    size_t n = 0;

    while (env[n])
        n++;
    return n;
}

static void check_ids(char **env)
{
    assert_string_equal(taskenv_get(env, "EDDY_JOB_ID"), "123456789012");
    assert_string_equal(taskenv_get(env, "EDDY_TASK_RANK"), "5");
    assert_string_equal(taskenv_get(env, "EDDY_TASK_LOCAL_RANK"), "1");
    assert_string_equal(taskenv_get(env, "EDDY_JOB_SIZE"), "8");
    assert_string_equal(taskenv_get(env, "EDDY_JOB_NNODES"), "4");
    assert_string_equal(taskenv_get(env, "EDDY_URI"), "local:///tmp/x/local-2");
}

/* Without a jobspec environment the base is copied and the ids added;
 * a stale EDDY_TASK_RANK in the base is replaced, not duplicated. */
static void test_base(void **state)
{
    const char *base[] = {"PATH=/bin", "EDDY_TASK_RANK=99", "HOME=/h", NULL};
    char **env = taskenv_create(NULL, base, &ids, NULL);

    assert_non_null(env);
    check_ids(env);
    assert_string_equal(taskenv_get(env, "PATH"), "/bin");
    assert_string_equal(taskenv_get(env, "HOME"), "/h");
    assert_int_equal(count(env), 3 + 5);
    taskenv_destroy(env);
}

/* A jobspec environment replaces the base entirely. */
static void test_jobenv(void **state)
{
    const char *base[] = {"SECRET=1", NULL};
    json_t *o = json_pack("{s:s s:s}", "FOO", "bar", "EMPTY", "");
    char **env = taskenv_create(o, base, &ids, NULL);

    assert_non_null(env);
    check_ids(env);
    assert_string_equal(taskenv_get(env, "FOO"), "bar");
    assert_string_equal(taskenv_get(env, "EMPTY"), "");
    assert_null(taskenv_get(env, "SECRET"));
    assert_int_equal(count(env), 2 + 6);
    taskenv_destroy(env);
    json_decref(o);
}

/* No URI: EDDY_URI is left as the base has it. */
static void test_no_uri(void **state)
{
    const char *base[] = {"EDDY_URI=local:///keep", NULL};
    struct taskenv_ids i2 = ids;
    char **env;

    i2.uri = NULL;
    env = taskenv_create(NULL, base, &i2, NULL);
    assert_non_null(env);
    assert_string_equal(taskenv_get(env, "EDDY_URI"), "local:///keep");
    taskenv_destroy(env);
    env = taskenv_create(NULL, NULL, &i2, NULL);
    assert_non_null(env);
    assert_int_equal(count(env), 5);
    assert_null(taskenv_get(env, "EDDY_URI"));
    taskenv_destroy(env);
}

static void test_bad(void **state)
{
    eddy_error_t err = {{0}};
    json_t *o = json_pack("{s:i}", "NUM", 3);
    json_t *a = json_array();

    errno = 0;
    assert_null(taskenv_create(NULL, NULL, NULL, &err));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(taskenv_create(a, NULL, &ids, &err));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(taskenv_create(o, NULL, &ids, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "NUM"));
    errno = 9;
    taskenv_destroy(NULL);
    assert_int_equal(errno, 9);
    json_decref(o);
    json_decref(a);
}

/* taskenv_set adds (growing the vector) or replaces, never duplicates,
 * and refuses bad names leaving the vector as it was. */
static void test_set(void **state)
{
    const char *base[] = {"PMI_FD=9", NULL};
    char **env = taskenv_create(NULL, base, &ids, NULL);
    size_t n;

    assert_non_null(env);
    n = count(env);
    assert_int_equal(taskenv_set(&env, "PMI_FD", "3"), 0);
    assert_int_equal(count(env), n);
    assert_string_equal(taskenv_get(env, "PMI_FD"), "3");
    assert_int_equal(taskenv_set(&env, "PMI_RANK", "5"), 0);
    assert_int_equal(taskenv_set(&env, "PMI_SPAWNED", "0"), 0);
    assert_int_equal(count(env), n + 2);
    assert_string_equal(taskenv_get(env, "PMI_RANK"), "5");
    assert_string_equal(taskenv_get(env, "PMI_SPAWNED"), "0");
    check_ids(env);
    errno = 0;
    assert_int_equal(taskenv_set(&env, "A=B", "x"), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(taskenv_set(&env, "", "x"), -1);
    assert_int_equal(taskenv_set(&env, "X", NULL), -1);
    assert_int_equal(taskenv_set(NULL, "X", "y"), -1);
    assert_int_equal(count(env), n + 2);
    taskenv_destroy(env);
}

int main(void)
{
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base),   cmocka_unit_test(test_jobenv),
        cmocka_unit_test(test_no_uri), cmocka_unit_test(test_bad),
        cmocka_unit_test(test_set),
    };

    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
