/* test_sched.c - the FCFS queue over a resource pool. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "src/broker/sched.h"

struct got {
    uint64_t ids[16];
    int errnums[16];
    rpool_alloc_t *allocs[16];
    size_t n;
};

static void record_cb(uint64_t id,
                      rpool_alloc_t *alloc,
                      int errnum,
                      const char *errstr,
                      void *arg)
{
    struct got *g = arg;

    assert_true(g->n < 16);
    g->ids[g->n] = id;
    g->errnums[g->n] = errnum;
    g->allocs[g->n++] = alloc;
    if (errnum)
        assert_non_null(errstr);
}

static rpool_t *pool_2x4(void)
{
    rpool_t *p = rpool_create(2);

    assert_non_null(p);
    assert_int_equal(rpool_set_cores(p, 0, 4), 0);
    assert_int_equal(rpool_set_cores(p, 1, 4), 0);
    return p;
}

static struct rpool_request req_tasks(uint32_t n)
{
    struct rpool_request r = {.ntasks = n, .cores_per_task = 1};
    return r;
}

static void free_allocs(rpool_t *p, struct got *g)
{
    for (size_t i = 0; i < g->n; i++) {
        if (g->allocs[i]) {
            rpool_free(p, g->allocs[i]);
            rpool_alloc_destroy(g->allocs[i]);
        }
    }
}

static void test_args(void **state)
{
    rpool_t *p = pool_2x4();
    sched_t *s;
    struct rpool_request r = req_tasks(1);
    eddy_error_t err = {{0}};

    errno = 0;
    assert_null(sched_create(NULL));
    assert_int_equal(errno, EINVAL);
    assert_non_null(s = sched_create(p));
    assert_int_equal(sched_enqueue(s, 1, NULL, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(sched_enqueue(s, 1, &r, &err), 0);
    assert_int_equal(sched_enqueue(s, 1, &r, &err), -1);
    assert_int_equal(errno, EEXIST);
    assert_non_null(strstr(err.text, "job 1"));
    assert_int_equal(sched_remove(s, 7), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(sched_reason(s, 7), "");
    assert_string_equal(sched_reason(s, 1), "queued");
    sched_destroy(s); /* frees what is still queued */
    sched_destroy(NULL);
    rpool_destroy(p);
}

static void test_never_fits(void **state)
{
    rpool_t *p = pool_2x4();
    sched_t *s = sched_create(p);
    struct rpool_request r = req_tasks(9);
    eddy_error_t err = {{0}};

    assert_int_equal(sched_enqueue(s, 1, &r, &err), -1);
    assert_int_equal(errno, ENOSPC);
    assert_non_null(strstr(err.text, "never fits"));
    assert_int_equal(sched_count(s), 0);
    sched_destroy(s);
    rpool_destroy(p);
}

/* The head blocks the jobs behind it even if they would fit. */
static void test_fcfs(void **state)
{
    rpool_t *p = pool_2x4();
    sched_t *s = sched_create(p);
    struct rpool_request r6 = req_tasks(6), r4 = req_tasks(4),
                         r1 = req_tasks(1);
    struct got g = {0};
    eddy_error_t err = {{0}};

    assert_int_equal(sched_enqueue(s, 1, &r6, &err), 0);
    assert_int_equal(sched_enqueue(s, 2, &r4, &err), 0);
    assert_int_equal(sched_enqueue(s, 3, &r1, &err), 0);
    assert_int_equal(sched_run(s, record_cb, &g), 1);
    assert_int_equal(g.ids[0], 1);
    assert_int_equal(g.errnums[0], 0);
    assert_non_null(g.allocs[0]);
    /* 2 free cores: job 2 waits, job 3 waits behind it. */
    assert_int_equal(sched_count(s), 2);
    assert_non_null(strstr(sched_reason(s, 2), "not now"));
    assert_string_equal(sched_reason(s, 3), "waiting behind job 2");
    assert_int_equal(sched_run(s, record_cb, &g), 0);
    /* Release job 1: both start, in order. */
    rpool_free(p, g.allocs[0]);
    assert_int_equal(sched_run(s, record_cb, &g), 2);
    assert_int_equal(g.ids[1], 2);
    assert_int_equal(g.ids[2], 3);
    assert_int_equal(sched_count(s), 0);
    free_allocs(p, &g);
    assert_int_equal(rpool_nallocs(p), 0);
    sched_destroy(s);
    rpool_destroy(p);
}

/* Removing the blocking head lets the next one run. */
static void test_remove_head(void **state)
{
    rpool_t *p = pool_2x4();
    sched_t *s = sched_create(p);
    struct rpool_request r8 = req_tasks(8), r1 = req_tasks(1);
    struct got g = {0};
    eddy_error_t err = {{0}};

    assert_int_equal(sched_enqueue(s, 1, &r8, &err), 0);
    assert_int_equal(sched_run(s, record_cb, &g), 1);
    assert_int_equal(sched_enqueue(s, 2, &r8, &err), 0);
    assert_int_equal(sched_enqueue(s, 3, &r1, &err), 0);
    assert_int_equal(sched_run(s, record_cb, &g), 0);
    assert_int_equal(sched_remove(s, 2), 0);
    assert_string_equal(sched_reason(s, 3), "queued");
    rpool_free(p, g.allocs[0]);
    assert_int_equal(sched_run(s, record_cb, &g), 1);
    assert_int_equal(g.ids[1], 3);
    free_allocs(p, &g);
    sched_destroy(s);
    rpool_destroy(p);
}

/* A queued job that can no longer fit at all leaves with ENOSPC. */
static void test_pool_shrinks(void **state)
{
    rpool_t *p = pool_2x4();
    sched_t *s = sched_create(p);
    struct rpool_request r8 = req_tasks(8);
    struct got g = {0};
    eddy_error_t err = {{0}};

    assert_int_equal(sched_enqueue(s, 1, &r8, &err), 0);
    assert_int_equal(rpool_set_cores(p, 1, 1), 0);
    assert_int_equal(sched_run(s, record_cb, &g), 1);
    assert_int_equal(g.ids[0], 1);
    assert_int_equal(g.errnums[0], ENOSPC);
    assert_null(g.allocs[0]);
    assert_int_equal(sched_count(s), 0);
    sched_destroy(s);
    rpool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_args),         cmocka_unit_test(test_never_fits),
        cmocka_unit_test(test_fcfs),         cmocka_unit_test(test_remove_head),
        cmocka_unit_test(test_pool_shrinks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
