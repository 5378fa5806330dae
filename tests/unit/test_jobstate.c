/* test_jobstate.c - unit tests for src/common/jobstate.c */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/jobstate.h"

#define N JOBSTATE_NEW
#define S JOBSTATE_SCHED
#define R JOBSTATE_RUN
#define C JOBSTATE_CLEANUP
#define I JOBSTATE_INACTIVE
#define NONE JOBSTATE_NONE

#define FATAL "{\"type\":\"cancel\",\"severity\":0,\"note\":\"by user\"}"
#define MINOR "{\"type\":\"timeout-warning\",\"severity\":3}"
#define RELEASE "{\"ranks\":\"0-3\",\"final\":true}"
#define FINISH "{\"status\":256}"

static json_t *ctx_from(const char *s)
{
    json_t *o;

    if (!s)
        return NULL;
    if (!(o = json_loads(s, JSON_DECODE_ANY, NULL)))
        fail_msg("bad test JSON '%s'", s);
    return o;
}

static void test_str_parse(void **state)
{
    static const struct {
        int state;
        const char *l, *s;
    } t[] = {
        {N, "NEW", "N"},     {S, "SCHED", "S"},    {R, "RUN", "R"},
        {C, "CLEANUP", "C"}, {I, "INACTIVE", "I"},
    };
    int st;

    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char lower[16];

        assert_string_equal(jobstate_str(t[i].state), t[i].l);
        assert_string_equal(jobstate_shortstr(t[i].state), t[i].s);
        st = -1;
        assert_int_equal(jobstate_parse(t[i].l, &st), 0);
        assert_int_equal(st, t[i].state);
        st = -1;
        assert_int_equal(jobstate_parse(t[i].s, &st), 0);
        assert_int_equal(st, t[i].state);
        for (size_t k = 0; k <= strlen(t[i].l); k++)
            lower[k] = (char)(t[i].l[k] | (t[i].l[k] ? 0x20 : 0));
        st = -1;
        assert_int_equal(jobstate_parse(lower, &st), 0);
        assert_int_equal(st, t[i].state);
    }
    assert_string_equal(jobstate_str(NONE), "NONE");
    assert_string_equal(jobstate_shortstr(NONE), "-");
    assert_string_equal(jobstate_str(R | C), "?");
    assert_string_equal(jobstate_shortstr(0x400), "?");

    st = 77;
    errno = 0;
    assert_int_equal(jobstate_parse("RUNNING", &st), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(st, 77);
    errno = 0;
    assert_int_equal(jobstate_parse("", &st), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobstate_parse("NONE", &st), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobstate_parse(NULL, &st), -1);
    assert_int_equal(errno, EINVAL);
}

static void test_masks(void **state)
{
    int all[] = {N, S, R, C, I};

    /* One bit each, all distinct. */
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(all[i] & (all[i] - 1), 0);
        for (size_t k = i + 1; k < 5; k++)
            assert_int_equal(all[i] & all[k], 0);
    }
    assert_int_equal(JOBSTATE_PENDING, N | S);
    assert_int_equal(JOBSTATE_RUNNING, R | C);
    assert_false(JOBSTATE_ACTIVE & I);
    assert_int_equal(JOBSTATE_ALL, N | S | R | C | I);
}

static void check_next(int state, const char *ev, const char *ctxs, int want)
{
    eddy_error_t err = {{0}};
    json_t *ctx = ctx_from(ctxs);
    int next = -1;

    if (jobstate_next(state, ev, ctx, &next, &err) < 0)
        fail_msg("%s + '%s' %s: %s", jobstate_str(state), ev, ctxs ? ctxs : "",
                 err.text);
    if (next != want)
        fail_msg("%s + '%s': got %s, want %s", jobstate_str(state), ev,
                 jobstate_str(next), jobstate_str(want));
    json_decref(ctx);
}

static void test_valid_transitions(void **state)
{
    check_next(NONE, "submit", NULL, N);
    check_next(NONE, "submit", "{\"userid\":1000}", N);
    check_next(N, "validate", NULL, S);
    check_next(S, "alloc", "{\"R\":{\"ranks\":\"0-3\"}}", R);
    check_next(S, "alloc", NULL, R);
    check_next(R, "start", NULL, R);
    check_next(C, "start", NULL, C);
    check_next(R, "release", RELEASE, R);
    check_next(C, "release", "{\"ranks\":\"\",\"final\":false}", C);
    check_next(R, "finish", FINISH, C);
    check_next(R, "finish", "{\"status\":0}", C);
    check_next(C, "finish", FINISH, C);
    check_next(C, "clean", NULL, I);
    /* Fatal exceptions end the job wherever it is... */
    check_next(N, "exception", FATAL, C);
    check_next(S, "exception", FATAL, C);
    check_next(R, "exception", FATAL, C);
    check_next(C, "exception", FATAL, C);
    check_next(R, "exception",
               "{\"type\":\"x\",\"severity\":0,\"userid\":0,\"extra\":1}", C);
    /* ...others change nothing. */
    check_next(N, "exception", MINOR, N);
    check_next(S, "exception", MINOR, S);
    check_next(R, "exception", MINOR, R);
    check_next(C, "exception", MINOR, C);
    check_next(R, "exception", "{\"type\":\"t\",\"severity\":7}", R);
    /* Unknown events are allowed while the job is active. */
    check_next(N, "debug.ping", NULL, N);
    check_next(S, "priority", "{\"x\":1}", S);
    check_next(R, "debug.stop-exec", NULL, R);
    check_next(C, "epilog-start", NULL, C);
}

static void check_bad(int state,
                      const char *ev,
                      const char *ctxs,
                      const char *msg)
{
    eddy_error_t err = {{0}};
    json_t *ctx = ctx_from(ctxs);
    int next = 1234;

    errno = 0;
    if (jobstate_next(state, ev, ctx, &next, &err) == 0)
        fail_msg("%s + '%s' unexpectedly valid", jobstate_str(state),
                 ev ? ev : "(null)");
    assert_int_equal(errno, EINVAL);
    assert_int_equal(next, 1234);
    if (!strstr(err.text, msg) || strncmp(err.text, "jobstate: ", 10) != 0)
        fail_msg("%s + '%s': message '%s' lacks '%s'", jobstate_str(state),
                 ev ? ev : "(null)", err.text, msg);
    json_decref(ctx);
}

static void test_invalid_transitions(void **state)
{
    static const char *known[] = {"submit",    "validate", "alloc",
                                  "start",     "release",  "finish",
                                  "exception", "clean",    "debug.x"};
    static const char *ctxs[] = {NULL,   NULL,  NULL, NULL, RELEASE,
                                 FINISH, FATAL, NULL, NULL};
    /* States in which each known event is valid (NONE written as -1). */
    static const int valid[] = {
        -1, N, S, R | C, R | C, R | C, N | S | R | C, C, N | S | R | C};
    static const int sts[] = {NONE, N, S, R, C, I};

    /* Every event in every state where it is not valid. */
    for (size_t e = 0; e < sizeof(known) / sizeof(known[0]); e++) {
        for (size_t i = 0; i < sizeof(sts) / sizeof(sts[0]); i++) {
            int ok = valid[e] == -1 ? sts[i] == NONE : (sts[i] & valid[e]);
            char msg[128];

            if (ok)
                continue;
            snprintf(msg, sizeof(msg), "'%s' is not valid in state %s",
                     known[e], jobstate_str(sts[i]));
            check_bad(sts[i], known[e], ctxs[e], msg);
        }
    }
    check_bad(NONE, "alloc", NULL, "the first event must be 'submit'");
    check_bad(R, "alloc", NULL, "jobstate: 'alloc' is not valid in state RUN");
    check_bad(I, "debug.x", NULL, "'debug.x' is not valid in state INACTIVE");
    check_bad(I, "exception", FATAL, "not valid in state INACTIVE");

    /* Bad states, names and contexts. */
    check_bad(R | C, "start", NULL, "invalid state 0xc");
    check_bad(0x40, "start", NULL, "invalid state 0x40");
    check_bad(-1, "start", NULL, "invalid state");
    check_bad(R, NULL, NULL, "invalid event name '(null)'");
    check_bad(R, "Bad Name", NULL, "invalid event name 'Bad Name'");
    check_bad(R, "", NULL, "invalid event name ''");
    check_bad(R, "start", "[]", "'start': context must be an object");
    check_bad(R, "finish", NULL,
              "'finish': context 'status' must be an "
              "integer >= 0");
    check_bad(R, "finish", "{}", "'status' must be an integer >= 0");
    check_bad(R, "finish", "{\"status\":-1}", "'status' must be");
    check_bad(R, "finish", "{\"status\":1.5}", "'status' must be");
    check_bad(R, "finish", "{\"status\":4294967296}", "'status' must be");
    check_bad(R, "release", NULL,
              "'release': context 'ranks' must be an "
              "idset string");
    check_bad(R, "release", "{\"ranks\":3,\"final\":true}",
              "'ranks' must be an idset string");
    check_bad(R, "release", "{\"ranks\":\"3-1\",\"final\":true}",
              "'ranks' must be an idset string");
    check_bad(R, "release", "{\"ranks\":\"0\"}",
              "'release': context 'final' must be a boolean");
    check_bad(R, "release", "{\"ranks\":\"0\",\"final\":1}",
              "'final' must be a boolean");
    check_bad(R, "exception", NULL,
              "'exception': context 'type' must be a non-empty string");
    check_bad(R, "exception", "{\"type\":\"\",\"severity\":0}",
              "'type' must be a non-empty string");
    check_bad(R, "exception", "{\"type\":\"x\"}",
              "'exception': context 'severity' must be an integer 0-7");
    check_bad(R, "exception", "{\"type\":\"x\",\"severity\":8}",
              "'severity' must be an integer 0-7");
    check_bad(R, "exception", "{\"type\":\"x\",\"severity\":-1}",
              "'severity' must be an integer 0-7");
    check_bad(R, "exception", "{\"type\":\"x\",\"severity\":\"0\"}",
              "'severity' must be an integer 0-7");
    check_bad(R, "exception", "{\"type\":\"x\",\"severity\":0,\"note\":1}",
              "'exception': context 'note' must be a string");
    check_bad(R, "exception", "{\"type\":\"x\",\"severity\":0,\"userid\":-5}",
              "'exception': context 'userid' must be an integer >= 0");
}

static void test_next_null_out(void **state)
{
    eddy_error_t err = {{0}};

    errno = 0;
    assert_int_equal(jobstate_next(NONE, "submit", NULL, NULL, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "jobstate: "));
}

struct ev {
    double ts;
    const char *name;
    const char *ctx;
};

static eventlog_t *make_log(const struct ev *evs, size_t n)
{
    eventlog_t *log = eventlog_create(1 << 16);

    assert_non_null(log);
    for (size_t i = 0; i < n; i++) {
        json_t *ctx = ctx_from(evs[i].ctx);

        if (eventlog_append(log, evs[i].ts, evs[i].name, ctx) < 0)
            fail_msg("append '%s' failed", evs[i].name);
        json_decref(ctx);
    }
    return log;
}

#define MAKE_LOG(a) make_log(a, sizeof(a) / sizeof(a[0]))

static void test_replay_normal(void **state)
{
    static const struct ev evs[] = {
        {100, "submit", "{\"userid\":1000}"},
        {101, "validate", NULL},
        {102, "alloc", "{\"R\":{}}"},
        {103, "start", NULL},
        {104, "debug.stop-exec", NULL},
        {110, "finish", "{\"status\":0}"},
        {111, "release", RELEASE},
        {112, "clean", NULL},
    };
    eventlog_t *log = MAKE_LOG(evs);
    eddy_error_t err = {{0}};
    struct jobstate_info info;
    int st = -1;

    if (jobstate_from_eventlog(log, &st, &err) < 0)
        fail_msg("replay: %s", err.text);
    assert_int_equal(st, I);
    if (jobstate_result(log, &info, &err) < 0)
        fail_msg("result: %s", err.text);
    assert_int_equal(info.state, I);
    assert_true(info.t_submit == 100);
    assert_true(info.t_alloc == 102);
    assert_true(info.t_start == 103);
    assert_true(info.t_finish == 110);
    assert_true(info.t_clean == 112);
    assert_true(info.finished);
    assert_int_equal(info.status, 0);
    assert_false(info.fatal);
    assert_null(info.exception_type);
    assert_null(info.exception_note);
    eventlog_destroy(log);
}

static void test_replay_prefixes(void **state)
{
    /* Each prefix of a normal log replays to the state it has reached. */
    static const struct ev evs[] = {
        {1, "submit", NULL}, {2, "validate", NULL}, {3, "alloc", NULL},
        {4, "start", NULL},  {5, "finish", FINISH}, {6, "clean", NULL},
    };
    static const int want[] = {N, S, R, R, C, I};

    for (size_t n = 1; n <= 6; n++) {
        eventlog_t *log = make_log(evs, n);
        int st = -1;

        assert_int_equal(jobstate_from_eventlog(log, &st, NULL), 0);
        assert_int_equal(st, want[n - 1]);
        eventlog_destroy(log);
    }
}

static void test_replay_cancel_sched(void **state)
{
    static const struct ev evs[] = {
        {1, "submit", NULL},
        {2, "validate", NULL},
        {3, "exception", FATAL},
        {4, "clean", NULL},
    };
    eventlog_t *log = MAKE_LOG(evs);
    struct jobstate_info info;

    assert_int_equal(jobstate_result(log, &info, NULL), 0);
    assert_int_equal(info.state, I);
    assert_true(info.fatal);
    assert_string_equal(info.exception_type, "cancel");
    assert_string_equal(info.exception_note, "by user");
    assert_true(info.t_exception == 3);
    assert_false(info.finished);
    assert_true(info.t_alloc == 0);
    assert_true(info.t_start == 0);
    assert_true(info.t_finish == 0);
    assert_true(info.t_clean == 4);
    eventlog_destroy(log);
}

static void test_replay_exception_run(void **state)
{
    static const struct ev evs[] = {
        {1, "submit", NULL},
        {2, "validate", NULL},
        {3, "alloc", NULL},
        {4, "exception", "{\"type\":\"node-lost\",\"severity\":0}"},
        {5, "start", NULL}, /* the shells' report raced the exception */
        {6, "exception",
         "{\"type\":\"kill-timeout\",\"severity\":0,"
         "\"note\":\"second\"}"},
        {7, "finish", "{\"status\":9}"},
        {8, "release", RELEASE},
    };
    eventlog_t *log = MAKE_LOG(evs);
    struct jobstate_info info;

    assert_int_equal(jobstate_result(log, &info, NULL), 0);
    assert_int_equal(info.state, C);
    assert_true(info.fatal);
    /* The first fatal exception is the cause. */
    assert_string_equal(info.exception_type, "node-lost");
    assert_null(info.exception_note);
    assert_true(info.t_exception == 4);
    assert_true(info.finished);
    assert_int_equal(info.status, 9);
    assert_true(info.t_finish == 7);
    assert_true(info.t_clean == 0);
    eventlog_destroy(log);
}

static void test_replay_nonfatal(void **state)
{
    static const struct ev evs[] = {
        {1, "submit", NULL}, {2, "validate", NULL},   {3, "alloc", NULL},
        {4, "start", NULL},  {5, "exception", MINOR}, {6, "finish", FINISH},
        {7, "clean", NULL},
    };
    eventlog_t *log = MAKE_LOG(evs);
    struct jobstate_info info;

    assert_int_equal(jobstate_result(log, &info, NULL), 0);
    assert_int_equal(info.state, I);
    assert_false(info.fatal);
    assert_null(info.exception_type);
    assert_int_equal(info.status, 256);
    eventlog_destroy(log);
}

static void check_replay_bad(const struct ev *evs, size_t n, const char *msg)
{
    eventlog_t *log = make_log(evs, n);
    eddy_error_t err = {{0}};
    struct jobstate_info info = {.state = 4321};
    int st = 4321;

    errno = 0;
    assert_int_equal(jobstate_from_eventlog(log, &st, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(st, 4321);
    if (!strstr(err.text, msg))
        fail_msg("message '%s' lacks '%s'", err.text, msg);
    errno = 0;
    assert_int_equal(jobstate_result(log, &info, NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(info.state, 4321);
    eventlog_destroy(log);
}

#define REPLAY_BAD(a, msg) check_replay_bad(a, sizeof(a) / sizeof(a[0]), msg)

static void test_replay_bad(void **state)
{
    static const struct ev no_submit[] = {{1, "validate", NULL}};
    static const struct ev after_inactive[] = {
        {1, "submit", NULL},
        {2, "exception", FATAL},
        {3, "clean", NULL},
        {4, "debug.late", NULL},
    };
    static const struct ev alloc_twice[] = {
        {1, "submit", NULL},
        {2, "validate", NULL},
        {3, "alloc", NULL},
        {4, "alloc", NULL},
    };
    static const struct ev finish_twice[] = {
        {1, "submit", NULL},   {2, "validate", NULL}, {3, "alloc", NULL},
        {4, "finish", FINISH}, {5, "finish", FINISH},
    };
    static const struct ev start_twice[] = {
        {1, "submit", NULL}, {2, "validate", NULL}, {3, "alloc", NULL},
        {4, "start", NULL},  {5, "start", NULL},
    };
    static const struct ev submit_twice[] = {{1, "submit", NULL},
                                             {2, "submit", NULL}};
    static const struct ev bad_ctx[] = {
        {1, "submit", NULL},
        {2, "validate", NULL},
        {3, "alloc", NULL},
        {4, "finish", "{\"status\":\"x\"}"},
    };
    eddy_error_t err = {{0}};
    eventlog_t *log = eventlog_create(100);
    int st = 4321;

    REPLAY_BAD(no_submit, "jobstate: line 1: 'validate' is not valid in "
                          "state NONE (the first event must be 'submit')");
    REPLAY_BAD(after_inactive,
               "jobstate: line 4: 'debug.late' is not valid in state "
               "INACTIVE");
    REPLAY_BAD(alloc_twice,
               "jobstate: line 4: 'alloc' is not valid in state RUN");
    REPLAY_BAD(finish_twice, "jobstate: line 5: 'finish' happened twice");
    REPLAY_BAD(start_twice, "jobstate: line 5: 'start' happened twice");
    REPLAY_BAD(submit_twice,
               "jobstate: line 2: 'submit' is not valid in state NEW");
    REPLAY_BAD(bad_ctx, "jobstate: line 4: 'finish': context 'status'");

    /* An empty log is not a job. */
    errno = 0;
    assert_int_equal(jobstate_from_eventlog(log, &st, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "eventlog is empty"));
    errno = 0;
    assert_int_equal(jobstate_from_eventlog(NULL, &st, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(jobstate_from_eventlog(log, NULL, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(st, 4321);
    eventlog_destroy(log);
}

static void test_replay_decoded_text(void **state)
{
    /* The form the job manager stores: text, decoded then replayed. */
    const char *text =
        "{\"timestamp\":1.5,\"name\":\"submit\",\"context\":{}}\n"
        "{\"timestamp\":2,\"name\":\"validate\"}\n"
        "{\"timestamp\":3,\"name\":\"exception\",\"context\":"
        "{\"type\":\"cancel\",\"severity\":0,\"userid\":1000}}\n";
    eddy_error_t err = {{0}};
    eventlog_t *log = eventlog_decode(text, strlen(text), 1 << 16, &err);
    struct jobstate_info info;

    if (!log)
        fail_msg("decode: %s", err.text);
    assert_int_equal(jobstate_result(log, &info, &err), 0);
    assert_int_equal(info.state, C);
    assert_true(info.t_submit == 1.5);
    assert_true(info.fatal);
    assert_string_equal(info.exception_type, "cancel");
    eventlog_destroy(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_str_parse),
        cmocka_unit_test(test_masks),
        cmocka_unit_test(test_valid_transitions),
        cmocka_unit_test(test_invalid_transitions),
        cmocka_unit_test(test_next_null_out),
        cmocka_unit_test(test_replay_normal),
        cmocka_unit_test(test_replay_prefixes),
        cmocka_unit_test(test_replay_cancel_sched),
        cmocka_unit_test(test_replay_exception_run),
        cmocka_unit_test(test_replay_nonfatal),
        cmocka_unit_test(test_replay_bad),
        cmocka_unit_test(test_replay_decoded_text),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
