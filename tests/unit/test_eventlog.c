/* test_eventlog.c - unit tests for src/common/eventlog.c */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/eventlog.h"

#define BIG (1u << 20)

static json_t *ctx_from(const char *s)
{
    json_t *o = json_loads(s, 0, NULL);

    if (!o)
        fail_msg("bad test JSON '%s'", s);
    return o;
}

static void test_name_valid(void **state)
{
    char long_name[EVENTLOG_NAME_MAX + 2];

    assert_true(eventlog_name_valid("submit"));
    assert_true(eventlog_name_valid("debug.free-request_2"));
    assert_true(eventlog_name_valid("a"));
    memset(long_name, 'a', sizeof(long_name));
    long_name[EVENTLOG_NAME_MAX] = '\0';
    assert_true(eventlog_name_valid(long_name));
    long_name[EVENTLOG_NAME_MAX] = 'a';
    long_name[EVENTLOG_NAME_MAX + 1] = '\0';
    assert_false(eventlog_name_valid(long_name));
    assert_false(eventlog_name_valid(""));
    assert_false(eventlog_name_valid(NULL));
    assert_false(eventlog_name_valid("Submit"));
    assert_false(eventlog_name_valid("a b"));
    assert_false(eventlog_name_valid("a/b"));
    assert_false(eventlog_name_valid("a\n"));
}

static void test_entry_encode(void **state)
{
    json_t *ctx = ctx_from("{\"R\":{\"ranks\":\"0-3\"},\"n\":1}");
    char *s;

    s = eventlog_entry_encode(1.5, "submit", NULL);
    assert_non_null(s);
    assert_string_equal(s, "{\"timestamp\":1.5,\"name\":\"submit\"}\n");
    free(s);

    s = eventlog_entry_encode(0, "alloc", ctx);
    assert_non_null(s);
    assert_string_equal(s,
                        "{\"timestamp\":0.0,\"name\":\"alloc\","
                        "\"context\":{\"R\":{\"ranks\":\"0-3\"},\"n\":1}}\n");
    free(s);
    /* The borrowed context is left as it was. */
    assert_int_equal(ctx->refcount, 1);
    json_decref(ctx);
}

static void check_encode_bad(double ts, const char *name, json_t *ctx)
{
    errno = 0;
    assert_null(eventlog_entry_encode(ts, name, ctx));
    assert_int_equal(errno, EINVAL);
}

static void test_entry_encode_bad(void **state)
{
    json_t *arr = json_array();
    json_t *nul = json_pack("{s:s%}", "s", "a\0b", (size_t)3);

    assert_non_null(nul);
    check_encode_bad(1, "", NULL);
    check_encode_bad(1, NULL, NULL);
    check_encode_bad(1, "Bad", NULL);
    check_encode_bad(1, "has space", NULL);
    check_encode_bad(-1, "ok", NULL);
    check_encode_bad(NAN, "ok", NULL);
    check_encode_bad(INFINITY, "ok", NULL);
    check_encode_bad(1, "ok", arr);
    /* Strict readers refuse NUL in strings, so writers must too. */
    check_encode_bad(1, "ok", nul);
    json_decref(arr);
    json_decref(nul);
}

static void test_entry_roundtrip(void **state)
{
    static const double stamps[] = {0,      1,    1.5, 1700000000.123456789,
                                    1e-300, 1e300};
    json_t *ctx = ctx_from("{\"a\":[1,2.5,\"x\",null,true],\"b\":{}}");

    for (size_t i = 0; i < sizeof(stamps) / sizeof(stamps[0]); i++) {
        eddy_error_t err = {{0}};
        char *s = eventlog_entry_encode(stamps[i], "ev.x-y_z", ctx);
        double ts = -1;
        char *name = NULL;
        json_t *c = NULL;

        assert_non_null(s);
        if (eventlog_entry_decode(s, strlen(s), &ts, &name, &c, &err) < 0)
            fail_msg("decode '%s': %s", s, err.text);
        assert_true(ts == stamps[i]);
        assert_string_equal(name, "ev.x-y_z");
        assert_true(json_equal(c, ctx));
        free(name);
        json_decref(c);
        /* Without the newline, and with no outputs wanted. */
        assert_int_equal(
            eventlog_entry_decode(s, strlen(s) - 1, NULL, NULL, NULL, &err), 0);
        free(s);
    }
    json_decref(ctx);
}

static void test_entry_decode_loose_forms(void **state)
{
    const char *in = " { \"name\" : \"a\" , \"timestamp\" : 7 } \n";
    double ts = -1;
    char *name = NULL;
    json_t *c = (json_t *)1;

    /* Whitespace, key order and an integer timestamp are fine. */
    assert_int_equal(
        eventlog_entry_decode(in, strlen(in), &ts, &name, &c, NULL), 0);
    assert_true(ts == 7.0);
    assert_string_equal(name, "a");
    assert_null(c); /* no context */
    free(name);
}

/* Decoding 'in' (as one entry, then as a log) fails with EINVAL and a
 * message containing 'msg'; outputs are untouched. */
static void check_bad_line(const char *in, size_t len, const char *msg)
{
    eddy_error_t err = {{0}};
    double ts = 42;
    char *name = (char *)"sentinel";
    json_t *c = (json_t *)"sentinel";
    char *text;
    char want[256];
    eventlog_t *log;

    errno = 0;
    if (eventlog_entry_decode(in, len, &ts, &name, &c, &err) == 0)
        fail_msg("decode '%.*s' unexpectedly succeeded", (int)len, in);
    assert_int_equal(errno, EINVAL);
    if (!strstr(err.text, msg) || strncmp(err.text, "eventlog: ", 10) != 0)
        fail_msg("decode '%.*s': message '%s' lacks '%s'", (int)len, in,
                 err.text, msg);
    for (const char *p = err.text; *p; p++)
        assert_true(*p >= 0x20 && *p < 0x7f);
    assert_true(ts == 42);
    assert_string_equal(name, "sentinel");
    assert_ptr_equal(c, "sentinel");

    /* The same line as line 2 of a log is named as such. */
    if (len > 0 && memchr(in, '\n', len))
        return; /* multi-line inputs mean something else in a log */
    text = malloc(len + 64);
    assert_non_null(text);
    memcpy(text, "{\"timestamp\":1,\"name\":\"submit\"}\n", 32);
    memcpy(text + 32, in, len);
    text[32 + len] = '\n';
    err.text[0] = '\0';
    errno = 0;
    log = eventlog_decode(text, 32 + len + 1, BIG, &err);
    free(text);
    if (log)
        fail_msg("log with '%.*s' unexpectedly decoded", (int)len, in);
    assert_int_equal(errno, EINVAL);
    snprintf(want, sizeof(want), "eventlog: line 2: %s", msg);
    if (strncmp(err.text, "eventlog: line 2: ", 18) != 0 ||
        !strstr(err.text, msg))
        fail_msg("log '%.*s': message '%s' lacks '%s'", (int)len, in, err.text,
                 want);
}

#define BAD(s, msg) check_bad_line(s, sizeof(s) - 1, msg)

static void test_entry_decode_bad(void **state)
{
    BAD("", "empty line");
    BAD("\n", "empty line");
    BAD("{\"timestamp\":1,\"name\":\"a\"}\n{\"timestamp\":1,\"name\":\"a\"}",
        "entry spans more than a line");
    BAD("not json", "invalid JSON at column");
    BAD("{\"timestamp\":1,\"name\":\"a\"", "invalid JSON");
    BAD("{\"timestamp\":1,\"name\":\"a\"} {}", "invalid JSON");
    BAD("[1]", "entry is not a JSON object");
    BAD("{\"timestamp\":1,\"name\":\"a\",\"extra\":1}", "unknown key 'extra'");
    BAD("{\"timestamp\":1,\"name\":\"a\",\"x\\u0001\":1}", "unknown key 'x?'");
    BAD("{\"name\":\"a\"}", "'timestamp' is missing");
    BAD("{\"timestamp\":\"1\",\"name\":\"a\"}", "'timestamp' must be a number");
    BAD("{\"timestamp\":null,\"name\":\"a\"}", "'timestamp' must be a number");
    BAD("{\"timestamp\":-1,\"name\":\"a\"}",
        "'timestamp' must be finite and >= 0");
    BAD("{\"timestamp\":-0.5,\"name\":\"a\"}",
        "'timestamp' must be finite and >= 0");
    BAD("{\"timestamp\":1e999,\"name\":\"a\"}", "invalid JSON");
    BAD("{\"timestamp\":1}", "'name' is missing");
    BAD("{\"timestamp\":1,\"name\":5}", "'name' must be a string");
    BAD("{\"timestamp\":1,\"name\":\"\"}", "'name' '' is not 1-64 characters");
    BAD("{\"timestamp\":1,\"name\":\"Alloc\"}", "'name' 'Alloc' is not");
    BAD("{\"timestamp\":1,\"name\":\"a b\"}", "'name' 'a b' is not");
    BAD("{\"timestamp\":1,\"name\":\"a\\nb\"}", "'name' 'a?b' is not");
    BAD("{\"timestamp\":1,\"name\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        "aaaaaaaaaaaaaaaaaaaaaaaaa\"}",
        "is not 1-64 characters");
    BAD("{\"timestamp\":1,\"name\":\"a\\u0000b\"}", "invalid JSON");
    BAD("{\"timestamp\":1,\"name\":\"a\",\"context\":[]}",
        "'context' must be an object");
    BAD("{\"timestamp\":1,\"name\":\"a\",\"context\":null}",
        "'context' must be an object");
    BAD("{\"timestamp\":1,\"name\":\"a\",\"context\":\"x\"}",
        "'context' must be an object");
    BAD("{\"timestamp\":1,\"name\":\"a\",\"name\":\"b\"}", "duplicate");
    BAD("{\"timestamp\":1,\"name\":\"\xff\"}", "invalid JSON");
    check_bad_line("{\"timestamp\":1,\0\"name\":\"a\"}", 28, "invalid JSON");
}

static void test_entry_decode_null(void **state)
{
    eddy_error_t err = {{0}};

    errno = 0;
    assert_int_equal(eventlog_entry_decode(NULL, 5, NULL, NULL, NULL, &err),
                     -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "eventlog: "));
}

static void test_log_basic(void **state)
{
    eventlog_t *log = eventlog_create(BIG);
    json_t *ctx = ctx_from("{\"ranks\":\"0-1\",\"final\":true}");
    double ts;
    const char *name, *name0;
    const json_t *c;
    char *s;

    assert_non_null(log);
    assert_int_equal(eventlog_count(log), 0);
    s = eventlog_encode(log);
    assert_string_equal(s, "");
    free(s);

    assert_int_equal(eventlog_append(log, 10, "submit", NULL), 0);
    assert_int_equal(eventlog_append(log, 11.25, "release", ctx), 0);
    /* The log has its own copy. */
    json_object_set_new(ctx, "final", json_false());
    assert_int_equal(eventlog_count(log), 2);

    assert_int_equal(eventlog_entry(log, 0, &ts, &name0, &c), 0);
    assert_true(ts == 10);
    assert_string_equal(name0, "submit");
    assert_null(c);
    assert_int_equal(eventlog_entry(log, 1, &ts, &name, &c), 0);
    assert_true(ts == 11.25);
    assert_string_equal(name, "release");
    assert_true(json_is_true(json_object_get(c, "final")));
    assert_int_equal(eventlog_entry(log, 1, NULL, NULL, NULL), 0);

    errno = 0;
    ts = 99;
    assert_int_equal(eventlog_entry(log, 2, &ts, &name, &c), -1);
    assert_int_equal(errno, ERANGE);
    assert_true(ts == 99);
    errno = 0;
    assert_int_equal(eventlog_entry(NULL, 0, &ts, &name, &c), -1);
    assert_int_equal(errno, EINVAL);

    s = eventlog_encode(log);
    assert_string_equal(s, "{\"timestamp\":10.0,\"name\":\"submit\"}\n"
                           "{\"timestamp\":11.25,\"name\":\"release\","
                           "\"context\":{\"ranks\":\"0-1\",\"final\":true}}\n");
    assert_int_equal(eventlog_size(log), strlen(s));
    free(s);

    /* Borrowed pointers survive the log growing. */
    for (int i = 0; i < 100; i++)
        assert_int_equal(eventlog_append(log, i, "debug.x", NULL), 0);
    assert_string_equal(name0, "submit");
    assert_int_equal(eventlog_count(log), 102);

    /* Bad appends leave the log as it was. */
    errno = 0;
    assert_int_equal(eventlog_append(log, 1, "BAD", NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eventlog_append(NULL, 1, "ok", NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(eventlog_count(log), 102);

    json_decref(ctx);
    eventlog_destroy(log);
}

static void test_create_bad(void **state)
{
    eddy_error_t err = {{0}};

    errno = 0;
    assert_null(eventlog_create(0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eventlog_decode("", 0, 0, &err));
    assert_int_equal(errno, EINVAL);
    assert_int_equal(eventlog_count(NULL), 0);
    assert_int_equal(eventlog_size(NULL), 0);
    assert_null(eventlog_encode(NULL));
}

static void test_log_roundtrip(void **state)
{
    eddy_error_t err = {{0}};
    eventlog_t *log = eventlog_create(BIG), *log2;
    json_t *ctx = ctx_from("{\"type\":\"cancel\",\"severity\":0,"
                           "\"note\":\"caf\xc3\xa9 \\\"q\\\" \\n\"}");
    char *s, *s2;

    assert_int_equal(eventlog_append(log, 1700000000.5, "submit", NULL), 0);
    assert_int_equal(eventlog_append(log, 1700000001.125, "exception", ctx), 0);
    assert_int_equal(eventlog_append(log, 1700000002, "clean", NULL), 0);
    s = eventlog_encode(log);
    log2 = eventlog_decode(s, strlen(s), BIG, &err);
    if (!log2)
        fail_msg("decode: %s", err.text);
    assert_int_equal(eventlog_count(log2), 3);
    for (size_t i = 0; i < 3; i++) {
        double t1, t2;
        const char *n1, *n2;
        const json_t *c1, *c2;

        assert_int_equal(eventlog_entry(log, i, &t1, &n1, &c1), 0);
        assert_int_equal(eventlog_entry(log2, i, &t2, &n2, &c2), 0);
        assert_true(t1 == t2);
        assert_string_equal(n1, n2);
        assert_true((!c1 && !c2) || json_equal(c1, c2));
    }
    s2 = eventlog_encode(log2);
    assert_string_equal(s, s2);
    assert_int_equal(eventlog_max_bytes(log2), BIG);
    free(s);
    free(s2);
    json_decref(ctx);
    eventlog_destroy(log);
    eventlog_destroy(log2);
}

static void test_decode_canonical(void **state)
{
    const char *in = "{\"name\":\"submit\",  \"timestamp\":3}\n"
                     "{\"context\":{ \"x\" : 1 },\"timestamp\":4.5,"
                     "\"name\":\"a\"}\n";
    eventlog_t *log = eventlog_decode(in, strlen(in), BIG, NULL);
    char *s;

    assert_non_null(log);
    s = eventlog_encode(log);
    assert_string_equal(s, "{\"timestamp\":3.0,\"name\":\"submit\"}\n"
                           "{\"timestamp\":4.5,\"name\":\"a\","
                           "\"context\":{\"x\":1}}\n");
    free(s);
    eventlog_destroy(log);

    /* Empty text is an empty log. */
    log = eventlog_decode("", 0, BIG, NULL);
    assert_non_null(log);
    assert_int_equal(eventlog_count(log), 0);
    eventlog_destroy(log);
    log = eventlog_decode(NULL, 0, BIG, NULL);
    assert_non_null(log);
    eventlog_destroy(log);
}

static void check_bad_log(const char *in,
                          int errnum,
                          size_t max,
                          const char *msg)
{
    eddy_error_t err = {{0}};

    errno = 0;
    if (eventlog_decode(in, strlen(in), max, &err))
        fail_msg("'%s' unexpectedly decoded", in);
    assert_int_equal(errno, errnum);
    if (!strstr(err.text, msg))
        fail_msg("'%s': message '%s' lacks '%s'", in, err.text, msg);
}

static void test_decode_bad_log(void **state)
{
    check_bad_log("{\"timestamp\":1,\"name\":\"a\"}\n"
                  "{\"timestamp\":2,\"name\":\"b\"}\n"
                  "{\"timestamp\":3,\"name\":7}\n",
                  EINVAL, BIG, "eventlog: line 3: 'name' must be a string");
    check_bad_log("{\"timestamp\":1,\"name\":\"a\"}\n"
                  "{\"timestamp\":2,\"name\":\"b\"}",
                  EINVAL, BIG,
                  "eventlog: line 2: entry does not end with newline");
    check_bad_log("{\"timestamp\":1,\"name\":\"a\"}\n"
                  "{\"timestamp\":2,\"name\":",
                  EINVAL, BIG, "eventlog: line 2: invalid JSON");
    check_bad_log("{\"timestamp\":1,\"name\":\"a\"}\n\n"
                  "{\"timestamp\":2,\"name\":\"b\"}\n",
                  EINVAL, BIG, "eventlog: line 2: empty line");
    check_bad_log("\n", EINVAL, BIG, "eventlog: line 1: empty line");
}

static void test_size_bound(void **state)
{
    eddy_error_t err = {{0}};
    char *one = eventlog_entry_encode(1, "submit", NULL);
    size_t n = strlen(one);
    eventlog_t *log = eventlog_create(2 * n);
    json_t *ctx = ctx_from("{\"x\":1}");
    char *before, *after;

    assert_non_null(log);
    assert_int_equal(eventlog_append(log, 1, "submit", NULL), 0);
    /* Too big for what is left, even though it fits an empty log. */
    errno = 0;
    assert_int_equal(eventlog_append(log, 1, "submit", ctx), -1);
    assert_int_equal(errno, ENOSPC);
    /* Exactly the limit is fine. */
    assert_int_equal(eventlog_append(log, 1, "submit", NULL), 0);
    assert_int_equal(eventlog_size(log), 2 * n);
    before = eventlog_encode(log);
    errno = 0;
    assert_int_equal(eventlog_append(log, 2, "a", NULL), -1);
    assert_int_equal(errno, ENOSPC);
    assert_int_equal(eventlog_count(log), 2);
    after = eventlog_encode(log);
    assert_string_equal(before, after);

    /* A decoded log has the same bound. */
    eventlog_destroy(log);
    log = eventlog_decode(before, 2 * n, 2 * n, &err);
    assert_non_null(log);
    errno = 0;
    assert_int_equal(eventlog_append(log, 2, "a", NULL), -1);
    assert_int_equal(errno, ENOSPC);
    eventlog_destroy(log);

    /* Text over the limit is refused before parsing. */
    check_bad_log(before, ENOSPC, 2 * n - 1, "exceeds the limit of");
    /* Text that fits but whose canonical form does not: "1" -> "1.0". */
    check_bad_log("{\"timestamp\":1,\"name\":\"a\"}\n", ENOSPC, 28,
                  "eventlog: line 1: log exceeds the limit of 28 bytes");

    free(before);
    free(after);
    free(one);
    json_decref(ctx);
}

static void test_encode_from(void **state)
{
    eventlog_t *log = eventlog_create(BIG), *head, *tail;
    char *all, *s, *joined;
    size_t count;

    assert_int_equal(eventlog_append(log, 1, "submit", NULL), 0);
    assert_int_equal(eventlog_append(log, 2, "validate", NULL), 0);
    assert_int_equal(eventlog_append(log, 3, "alloc", NULL), 0);
    assert_int_equal(eventlog_append(log, 4, "start", NULL), 0);
    all = eventlog_encode(log);
    count = eventlog_count(log);

    s = eventlog_encode_from(log, 0);
    assert_string_equal(s, all);
    free(s);
    s = eventlog_encode_from(log, 2);
    assert_string_equal(s, "{\"timestamp\":3.0,\"name\":\"alloc\"}\n"
                           "{\"timestamp\":4.0,\"name\":\"start\"}\n");
    free(s);
    s = eventlog_encode_from(log, count);
    assert_string_equal(s, "");
    free(s);
    errno = 0;
    assert_null(eventlog_encode_from(log, count + 1));
    assert_int_equal(errno, ERANGE);
    errno = 0;
    assert_null(eventlog_encode_from(NULL, 0));
    assert_int_equal(errno, EINVAL);

    /* A follower that saw the first k entries, then the rest, has it all. */
    for (size_t k = 0; k <= count; k++) {
        char *h = eventlog_encode_from(log, 0);
        size_t hlen = 0;

        /* The head is the prefix of the whole text up to entry k. */
        for (size_t i = 0; i < k; i++)
            hlen = (size_t)(strchr(h + hlen, '\n') - h) + 1;
        head = eventlog_decode(h, hlen, BIG, NULL);
        assert_non_null(head);
        assert_int_equal(eventlog_count(head), k);
        s = eventlog_encode_from(log, eventlog_count(head));
        tail = eventlog_decode(s, strlen(s), BIG, NULL);
        assert_non_null(tail);
        assert_int_equal(eventlog_count(head) + eventlog_count(tail), count);
        joined = malloc(hlen + strlen(s) + 1);
        memcpy(joined, h, hlen);
        memcpy(joined + hlen, s, strlen(s) + 1);
        assert_string_equal(joined, all);
        free(joined);
        free(s);
        free(h);
        eventlog_destroy(head);
        eventlog_destroy(tail);
    }
    free(all);
    eventlog_destroy(log);
}

static void test_destroy_preserves_errno(void **state)
{
    eventlog_t *log = eventlog_create(100);

    assert_int_equal(eventlog_append(log, 1, "a", NULL), 0);
    errno = ENOENT;
    eventlog_destroy(log);
    eventlog_destroy(NULL);
    assert_int_equal(errno, ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_valid),
        cmocka_unit_test(test_entry_encode),
        cmocka_unit_test(test_entry_encode_bad),
        cmocka_unit_test(test_entry_roundtrip),
        cmocka_unit_test(test_entry_decode_loose_forms),
        cmocka_unit_test(test_entry_decode_bad),
        cmocka_unit_test(test_entry_decode_null),
        cmocka_unit_test(test_log_basic),
        cmocka_unit_test(test_create_bad),
        cmocka_unit_test(test_log_roundtrip),
        cmocka_unit_test(test_decode_canonical),
        cmocka_unit_test(test_decode_bad_log),
        cmocka_unit_test(test_size_bound),
        cmocka_unit_test(test_encode_from),
        cmocka_unit_test(test_destroy_preserves_errno),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
