/* test_log.c - unit tests for src/common/log.c */
#include <errno.h>
#include <regex.h>
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

#include "src/common/log.h"

#define MAX_SEEN 64

struct seen {
    int n;
    int stop_after; /* return -1 after this many lines (0: never) */
    double ts[MAX_SEEN];
    int level[MAX_SEEN];
    char text[MAX_SEEN][2048];
};

static int collect(double timestamp, int level, const char *line, void *arg)
{
    struct seen *s = arg;

    if (s->n >= MAX_SEEN)
        return -1;
    s->ts[s->n] = timestamp;
    s->level[s->n] = level;
    snprintf(s->text[s->n], sizeof(s->text[0]), "%s", line);
    s->n++;
    if (s->stop_after && s->n == s->stop_after)
        return -1;
    return 0;
}

static void test_ring_wraps_in_order(void **state)
{
    logbuf_t *lb = logbuf_create(4, "broker[0]", NULL);
    struct seen *s = calloc(1, sizeof(*s));

    assert_non_null(lb);
    assert_non_null(s);
    /* Fewer lines than capacity. */
    logbuf_printf(lb, LOG_LEVEL_ERR, "line %d", 0);
    logbuf_printf(lb, LOG_LEVEL_INFO, "line %d", 1);
    assert_int_equal(logbuf_lines(lb, collect, s), 0);
    assert_int_equal(s->n, 2);
    assert_string_equal(s->text[0], "line 0");
    assert_string_equal(s->text[1], "line 1");
    assert_int_equal(s->level[0], LOG_LEVEL_ERR);
    assert_int_equal(s->level[1], LOG_LEVEL_INFO);

    /* Wrap more than once: only the newest 4 remain, oldest first. */
    for (int i = 2; i < 11; i++)
        logbuf_printf(lb, LOG_LEVEL_NOTICE, "line %d", i);
    memset(s, 0, sizeof(*s));
    assert_int_equal(logbuf_lines(lb, collect, s), 0);
    assert_int_equal(s->n, 4);
    for (int i = 0; i < 4; i++) {
        char want[32];
        snprintf(want, sizeof(want), "line %d", 7 + i);
        assert_string_equal(s->text[i], want);
        assert_int_equal(s->level[i], LOG_LEVEL_NOTICE);
        if (i > 0)
            assert_true(s->ts[i] >= s->ts[i - 1]);
    }
    free(s);
    logbuf_destroy(lb);
}

static void test_timestamp_is_now(void **state)
{
    logbuf_t *lb = logbuf_create(2, NULL, NULL);
    struct seen *s = calloc(1, sizeof(*s));
    double t0 = (double)time(NULL);

    assert_non_null(lb);
    assert_non_null(s);
    logbuf_printf(lb, LOG_LEVEL_ERR, "x");
    assert_int_equal(logbuf_lines(lb, collect, s), 0);
    assert_int_equal(s->n, 1);
    assert_true(s->ts[0] >= t0 - 1 && s->ts[0] <= t0 + 5);
    free(s);
    logbuf_destroy(lb);
}

static void test_level_filter(void **state)
{
    logbuf_t *lb = logbuf_create(16, "x", NULL);
    struct seen *s = calloc(1, sizeof(*s));

    assert_non_null(lb);
    assert_non_null(s);
    /* Default level is info: debug is dropped. */
    logbuf_printf(lb, LOG_LEVEL_DEBUG, "debug 1");
    logbuf_printf(lb, LOG_LEVEL_INFO, "info 1");
    logbuf_set_level(lb, LOG_LEVEL_WARNING);
    logbuf_printf(lb, LOG_LEVEL_NOTICE, "notice 1");
    logbuf_printf(lb, LOG_LEVEL_WARNING, "warning 1");
    logbuf_printf(lb, LOG_LEVEL_ERR, "err 1");
    logbuf_set_level(lb, LOG_LEVEL_DEBUG);
    logbuf_printf(lb, LOG_LEVEL_DEBUG, "debug 2");
    assert_int_equal(logbuf_lines(lb, collect, s), 0);
    assert_int_equal(s->n, 4);
    assert_string_equal(s->text[0], "info 1");
    assert_string_equal(s->text[1], "warning 1");
    assert_string_equal(s->text[2], "err 1");
    assert_string_equal(s->text[3], "debug 2");
    free(s);
    logbuf_destroy(lb);
}

static void test_stream_format(void **state)
{
    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    logbuf_t *lb;
    regex_t re;

    assert_non_null(f);
    lb = logbuf_create(8, "broker[3]", f);
    assert_non_null(lb);
    logbuf_printf(lb, LOG_LEVEL_ERR, "hello %d", 42);
    /* logbuf_printf flushes, so the text is visible without fclose. */
    assert_int_equal(regcomp(&re,
                             "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
                             "[0-9]{2}\\.[0-9]{3}Z broker\\[3\\] err: "
                             "hello 42\n$",
                             REG_EXTENDED | REG_NOSUB),
                     0);
    if (regexec(&re, out, 0, NULL, 0) != 0)
        fail_msg("unexpected stream line '%s'", out);
    regfree(&re);

    /* A trailing newline in the format is not doubled; dropped lines are
     * not written either. */
    logbuf_printf(lb, LOG_LEVEL_WARNING, "two\n");
    logbuf_printf(lb, LOG_LEVEL_DEBUG, "never");
    assert_non_null(strstr(out, " broker[3] warning: two\n"));
    assert_null(strstr(out, "two\n\n"));
    assert_null(strstr(out, "never"));
    logbuf_destroy(lb);
    fclose(f);
    free(out);
}

static void test_stream_no_prefix(void **state)
{
    char *out = NULL;
    size_t outlen = 0;
    FILE *f = open_memstream(&out, &outlen);
    logbuf_t *lb;

    assert_non_null(f);
    lb = logbuf_create(0, NULL, f); /* no ring: stream only */
    assert_non_null(lb);
    logbuf_printf(lb, LOG_LEVEL_NOTICE, "n");
    assert_non_null(strstr(out, "Z notice: n\n"));
    assert_int_equal(logbuf_lines(lb, collect, &(struct seen){0}), 0);
    logbuf_destroy(lb);
    fclose(f);
    free(out);
}

static void test_long_line_truncated(void **state)
{
    logbuf_t *lb = logbuf_create(2, "b", NULL);
    struct seen *s = calloc(1, sizeof(*s));
    char *big = malloc(5000);

    assert_non_null(lb);
    assert_non_null(s);
    assert_non_null(big);
    memset(big, 'a', 4999);
    big[4999] = '\0';
    logbuf_printf(lb, LOG_LEVEL_ERR, "%s", big);
    assert_int_equal(logbuf_lines(lb, collect, s), 0);
    assert_int_equal(s->n, 1);
    assert_true(strlen(s->text[0]) > 100);
    assert_true(strlen(s->text[0]) < 1100);
    free(big);
    free(s);
    logbuf_destroy(lb);
}

static void test_lines_stops_early(void **state)
{
    logbuf_t *lb = logbuf_create(8, "b", NULL);
    struct seen *s = calloc(1, sizeof(*s));

    assert_non_null(lb);
    assert_non_null(s);
    for (int i = 0; i < 5; i++)
        logbuf_printf(lb, LOG_LEVEL_ERR, "%d", i);
    s->stop_after = 2;
    assert_true(logbuf_lines(lb, collect, s) < 0);
    assert_int_equal(s->n, 2);
    errno = 0;
    assert_int_equal(logbuf_lines(NULL, collect, s), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(logbuf_lines(lb, NULL, s), -1);
    assert_int_equal(errno, EINVAL);
    free(s);
    logbuf_destroy(lb);
}

static void test_errno_preserved(void **state)
{
    logbuf_t *lb = logbuf_create(2, "b", NULL);
    struct seen *s = calloc(1, sizeof(*s));

    assert_non_null(lb);
    assert_non_null(s);
    errno = ENOENT;
    logbuf_printf(lb, LOG_LEVEL_ERR, "open: %m");
    assert_int_equal(errno, ENOENT);
    assert_int_equal(logbuf_lines(lb, collect, s), 0);
    assert_string_equal(s->text[0], "open: No such file or directory");
    errno = EBADF;
    logbuf_destroy(lb);
    logbuf_destroy(NULL);
    logbuf_printf(NULL, LOG_LEVEL_ERR, "ignored");
    assert_int_equal(errno, EBADF);
    free(s);
}

static void test_levelstr(void **state)
{
    assert_string_equal(log_levelstr(LOG_LEVEL_ERR), "err");
    assert_string_equal(log_levelstr(LOG_LEVEL_WARNING), "warning");
    assert_string_equal(log_levelstr(LOG_LEVEL_NOTICE), "notice");
    assert_string_equal(log_levelstr(LOG_LEVEL_INFO), "info");
    assert_string_equal(log_levelstr(LOG_LEVEL_DEBUG), "debug");
    assert_non_null(log_levelstr(99));
    assert_non_null(log_levelstr(-1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_wraps_in_order),
        cmocka_unit_test(test_timestamp_is_now),
        cmocka_unit_test(test_level_filter),
        cmocka_unit_test(test_stream_format),
        cmocka_unit_test(test_stream_no_prefix),
        cmocka_unit_test(test_long_line_truncated),
        cmocka_unit_test(test_lines_stops_early),
        cmocka_unit_test(test_errno_preserved),
        cmocka_unit_test(test_levelstr),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
