/* test_jobslice.c - unit tests for src/common/jobslice.c */
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

#include "src/common/jobslice.h"

/* Decode JSON text 'text'. */
static struct jobslice *decode(const char *text, eddy_error_t *err)
{
    json_t *o = json_loads(text, 0, NULL);
    struct jobslice *s;

    if (!o)
        fail_msg("bad test JSON: %s", text);
    s = jobslice_decode(o, err);
    json_decref(o);
    return s;
}

/* Decoding 'text' must fail with EINVAL and a message containing 'msg'. */
static void check_bad(const char *text, const char *msg)
{
    eddy_error_t err = {{0}};
    struct jobslice *s;

    errno = 0;
    if ((s = decode(text, &err))) {
        jobslice_destroy(s);
        fail_msg("'%s' unexpectedly decoded", text);
    }
    assert_int_equal(errno, EINVAL);
    if (!strstr(err.text, msg))
        fail_msg("'%s': message '%s' lacks '%s'", text, err.text, msg);
}

static void test_good(void **state)
{
    eddy_error_t err = {{0}};
    struct jobslice *s;

    s = decode(
        "{\"id\": 42, \"jobspec\": {\"version\": 1}, \"size\": 8,"
        " \"nnodes\": 2, \"node_index\": 1, \"tasks\": \"4-7\","
        " \"cores\": \"0-3\", \"stdin\": true, \"ranks\": \"[2,0,1,5]\"}",
        &err);
    if (!s)
        fail_msg("decode failed: %s", err.text);
    assert_int_equal(s->id, 42);
    assert_int_equal(s->size, 8);
    assert_int_equal(s->nnodes, 2);
    assert_int_equal(s->node_index, 1);
    assert_int_equal(idset_count(s->tasks), 4);
    assert_int_equal(idset_first(s->tasks), 4);
    assert_int_equal(idset_count(s->cores), 4);
    assert_true(s->has_stdin);
    assert_string_equal(s->ranks, "0-2,5"); /* canonical form */
    assert_int_equal(json_integer_value(json_object_get(s->jobspec, "version")),
                     1);
    jobslice_destroy(s);
}

static void test_defaults(void **state)
{
    eddy_error_t err = {{0}};
    struct jobslice *s;

    s = decode("{\"id\": 0, \"jobspec\": {}, \"size\": 1, \"nnodes\": 1,"
               " \"node_index\": 0, \"tasks\": \"0\"}",
               &err);
    if (!s)
        fail_msg("decode failed: %s", err.text);
    assert_false(s->has_stdin);
    assert_int_equal(idset_count(s->cores), 0);
    assert_null(s->ranks);
    jobslice_destroy(s);
}

#define BASE "\"jobspec\": {}, \"size\": 4, \"nnodes\": 2, \"node_index\": 0"

static void test_bad(void **state)
{
    check_bad("[]", "must be a JSON object");
    check_bad("{\"id\": 1, " BASE ", \"tasks\": \"0\", \"extra\": 1}",
              "unknown key 'extra'");
    check_bad("{" BASE ", \"tasks\": \"0\"}", "'id'");
    check_bad("{\"id\": -1, " BASE ", \"tasks\": \"0\"}", "'id'");
    check_bad("{\"id\": 9007199254740992, " BASE ", \"tasks\": \"0\"}", "'id'");
    check_bad("{\"id\": 1, \"jobspec\": [], \"size\": 4, \"nnodes\": 1,"
              " \"node_index\": 0, \"tasks\": \"0\"}",
              "'jobspec': must be an object");
    check_bad("{\"id\": 1, \"jobspec\": {}, \"size\": 0, \"nnodes\": 1,"
              " \"node_index\": 0, \"tasks\": \"0\"}",
              "'size'");
    check_bad("{\"id\": 1, \"jobspec\": {}, \"size\": 4, \"nnodes\": 2,"
              " \"node_index\": 2, \"tasks\": \"0\"}",
              "'node_index'");
    check_bad("{\"id\": 1, " BASE ", \"tasks\": \"\"}", "'tasks'");
    check_bad("{\"id\": 1, " BASE ", \"tasks\": \"2-4\"}", "below size 4");
    check_bad("{\"id\": 1, " BASE ", \"tasks\": \"x\"}", "'tasks'");
    check_bad("{\"id\": 1, " BASE ", \"tasks\": 3}", "'tasks'");
    check_bad("{\"id\": 1, " BASE ", \"tasks\": \"0\", \"cores\": \"z\"}",
              "'cores'");
    check_bad("{\"id\": 1, " BASE ", \"tasks\": \"0\", \"stdin\": 1}",
              "'stdin'");
    check_bad("{\"id\": 1, " BASE ", \"tasks\": \"0\", \"ranks\": \"1-\"}",
              "'ranks'");
}

static void test_null(void **state)
{
    errno = 0;
    assert_null(jobslice_decode(NULL, NULL));
    assert_int_equal(errno, EINVAL);
    errno = 7;
    jobslice_destroy(NULL);
    assert_int_equal(errno, 7);
}

int main(void)
{
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_bad),
        cmocka_unit_test(test_null),
    };

    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
