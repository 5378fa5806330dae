/* test_rpool.c - unit tests for src/common/rpool.c */
#include <errno.h>
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

#include "src/common/rpool.h"

/* A pool of 'nranks' ranks with 'ncores' cores each. */
static rpool_t *make_pool(uint32_t nranks, uint32_t ncores)
{
    rpool_t *p = rpool_create(nranks);

    assert_non_null(p);
    for (uint32_t r = 0; r < nranks; r++)
        assert_int_equal(rpool_set_cores(p, r, ncores), 0);
    return p;
}

static struct rpool_request req(uint32_t nnodes,
                                uint32_t ntasks,
                                uint32_t cpt,
                                uint32_t tpn,
                                bool exclusive)
{
    struct rpool_request r = {
        .nnodes = nnodes,
        .ntasks = ntasks,
        .cores_per_task = cpt,
        .tasks_per_node = tpn,
        .exclusive = exclusive,
    };
    return r;
}

/* Allocate and insist on success. */
static rpool_alloc_t *must_alloc(rpool_t *p, struct rpool_request rq)
{
    eddy_error_t err = {{0}};
    rpool_alloc_t *a = NULL;

    if (rpool_alloc(p, &rq, &a, &err) < 0)
        fail_msg("alloc failed: %s", err.text);
    assert_non_null(a);
    return a;
}

/* Allocation must fail with 'errnum' and a message containing 'msg'. */
static void must_fail(rpool_t *p,
                      struct rpool_request rq,
                      int errnum,
                      const char *msg)
{
    eddy_error_t err = {{0}};
    rpool_alloc_t *a = NULL;
    size_t before = rpool_nallocs(p);

    errno = 0;
    if (rpool_alloc(p, &rq, &a, &err) == 0)
        fail_msg("alloc unexpectedly succeeded (wanted '%s')", msg);
    assert_null(a);
    assert_int_equal(errno, errnum);
    if (!strstr(err.text, msg))
        fail_msg("message '%s' lacks '%s'", err.text, msg);
    assert_int_equal(rpool_nallocs(p), before);
}

/* Check an allocation's slices against "rank:tasks:cores;..." */
static void check_slices(const rpool_alloc_t *a, const char *want)
{
    char buf[1024];
    size_t len = 0;
    struct rpool_slice s;

    buf[0] = '\0';
    for (size_t i = 0; i < rpool_alloc_nslices(a); i++) {
        char *cores;
        assert_int_equal(rpool_alloc_slice(a, i, &s), 0);
        cores = idset_encode(s.cores);
        assert_non_null(cores);
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%u:%u:%s",
                                i ? ";" : "", s.rank, s.ntasks, cores);
        free(cores);
        assert_true(len < sizeof(buf));
    }
    if (strcmp(buf, want) != 0)
        fail_msg("slices '%s', wanted '%s'", buf, want);
}

/* The whole pool state as a string: "rank:up:nfree:freeset;..." */
static char *pool_state(const rpool_t *p)
{
    size_t cap = 64, len = 0;
    char *buf = malloc(cap);

    assert_non_null(buf);
    buf[0] = '\0';
    for (uint32_t r = 0; r < rpool_nranks(p); r++) {
        idset_t *f = rpool_rank_free_set(p, r);
        char *fs = idset_encode(f);
        char tmp[128];
        int n;

        assert_non_null(fs);
        n = snprintf(tmp, sizeof(tmp), "%u:%d:%u:%s;", r, rpool_rank_up(p, r),
                     rpool_rank_nfree(p, r), fs);
        if (len + (size_t)n + 1 > cap) {
            cap = (len + (size_t)n + 1) * 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
        memcpy(buf + len, tmp, (size_t)n + 1);
        len += (size_t)n;
        free(fs);
        idset_destroy(f);
    }
    return buf;
}

static void test_create_bad(void **state)
{
    rpool_t *p;

    errno = 0;
    assert_null(rpool_create(0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(rpool_create(RPOOL_RANKS_MAX + 1));
    assert_int_equal(errno, EINVAL);
    p = make_pool(2, 4);
    errno = 0;
    assert_int_equal(rpool_set_cores(p, 2, 4), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(rpool_set_cores(p, 0, RPOOL_CORES_MAX + 1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(rpool_set_up(p, 5, false), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(rpool_rank_cores(p, 9), 0);
    assert_false(rpool_rank_up(p, 9));
    errno = 0;
    assert_null(rpool_rank_free_set(p, 9));
    assert_int_equal(errno, EINVAL);
    rpool_destroy(p);
}

static void test_pack(void **state)
{
    rpool_t *p = make_pool(4, 4);
    rpool_alloc_t *a, *b;

    a = must_alloc(p, req(0, 6, 1, 0, false));
    check_slices(a, "0:4:0-3;1:2:0-1");
    assert_int_equal(rpool_alloc_ntasks(a), 6);
    assert_int_equal(rpool_alloc_task_rank(a, 0), 0);
    assert_int_equal(rpool_alloc_task_rank(a, 3), 0);
    assert_int_equal(rpool_alloc_task_rank(a, 4), 1);
    assert_int_equal(rpool_alloc_task_rank(a, 5), 1);
    assert_int_equal(rpool_alloc_task_rank(a, 6), RPOOL_NONE);

    /* Two-core tasks: rank 1 has room for one, rank 2 for the rest. */
    b = must_alloc(p, req(0, 3, 2, 0, false));
    check_slices(b, "1:1:2-3;2:2:0-3");
    assert_int_equal(rpool_alloc_task_rank(b, 0), 1);
    assert_int_equal(rpool_alloc_task_rank(b, 1), 2);
    assert_int_equal(rpool_alloc_task_rank(b, 2), 2);
    assert_int_equal(rpool_rank_nfree(p, 0), 0);
    assert_int_equal(rpool_rank_nfree(p, 1), 0);
    assert_int_equal(rpool_rank_nfree(p, 3), 4);
    assert_int_equal(rpool_nallocs(p), 2);

    /* A 3-core task only fits rank 3 now. */
    rpool_alloc_destroy(must_alloc(p, req(0, 1, 3, 0, false)));
    check_slices(a, "0:4:0-3;1:2:0-1");
    assert_int_equal(rpool_free(p, a), 0);
    rpool_alloc_destroy(a);
    rpool_alloc_destroy(b);
    assert_int_equal(rpool_nallocs(p), 0);
    rpool_destroy(p);
}

static void test_tasks_per_node(void **state)
{
    rpool_t *p = make_pool(4, 4);
    rpool_alloc_t *a, *b;

    a = must_alloc(p, req(0, 1, 1, 0, false));
    check_slices(a, "0:1:0");
    /* Rank 0 has 3 free cores, fewer than 2 x 2. */
    b = must_alloc(p, req(0, 4, 2, 2, false));
    check_slices(b, "1:2:0-3;2:2:0-3");
    rpool_alloc_destroy(b);
    /* With nnodes too, it must agree. */
    b = must_alloc(p, req(3, 3, 1, 1, false));
    check_slices(b, "0:1:1;1:1:0;2:1:0");
    rpool_alloc_destroy(b);
    must_fail(p, req(0, 5, 1, 2, false), EINVAL,
              "5 tasks is not a multiple of 2 tasks per node");
    must_fail(p, req(3, 4, 1, 2, false), EINVAL,
              "3 nodes x 2 tasks per node is not 4 tasks");
    must_fail(p, req(0, 16, 1, 4, false), EAGAIN,
              "not now: 15 of 16 cores free");
    rpool_alloc_destroy(a);
    rpool_destroy(p);
}

static void test_nnodes_spread(void **state)
{
    rpool_t *p = make_pool(4, 4);
    rpool_alloc_t *a, *b;

    /* Even spread, the first ranks take the extra tasks. */
    a = must_alloc(p, req(3, 7, 1, 0, false));
    check_slices(a, "0:3:0-2;1:2:0-1;2:2:0-1");
    assert_int_equal(rpool_alloc_task_rank(a, 2), 0);
    assert_int_equal(rpool_alloc_task_rank(a, 3), 1);
    assert_int_equal(rpool_alloc_task_rank(a, 5), 2);
    rpool_alloc_destroy(a);

    /* Rank 0 has one free core: it gets a base task, rank 1 the extra. */
    a = must_alloc(p, req(0, 3, 1, 0, false));
    check_slices(a, "0:3:0-2");
    b = must_alloc(p, req(2, 3, 1, 0, false));
    check_slices(b, "0:1:3;1:2:0-1");
    assert_int_equal(rpool_alloc_task_rank(b, 0), 0);
    assert_int_equal(rpool_alloc_task_rank(b, 1), 1);
    rpool_alloc_destroy(b);

    /* Exactly N nodes, even when fewer would do. */
    b = must_alloc(p, req(4, 4, 1, 0, false));
    check_slices(b, "0:1:3;1:1:0;2:1:0;3:1:0");
    rpool_alloc_destroy(b);
    must_fail(p, req(5, 3, 1, 0, false), EINVAL,
              "5 nodes requested for 3 tasks");
    rpool_alloc_destroy(a);
    rpool_destroy(p);
}

static void test_exclusive(void **state)
{
    rpool_t *p = make_pool(4, 4);
    rpool_alloc_t *a, *b, *c;

    a = must_alloc(p, req(0, 1, 1, 0, false));
    /* Exclusive skips rank 0 (in use) and takes all cores. */
    b = must_alloc(p, req(2, 2, 1, 0, true));
    check_slices(b, "1:1:0-3;2:1:0-3");
    assert_int_equal(rpool_rank_nfree(p, 1), 0);
    /* Shared work does not go onto the exclusive ranks. */
    c = must_alloc(p, req(0, 4, 1, 0, false));
    check_slices(c, "0:3:1-3;3:1:0");
    /* No idle rank left. */
    must_fail(p, req(1, 1, 1, 0, true), EAGAIN, "not now: 0 of 4 nodes idle");
    rpool_alloc_destroy(c);
    rpool_alloc_destroy(b);
    rpool_alloc_destroy(a);

    /* Exclusive packing: each rank takes ncores / cpt tasks. */
    a = must_alloc(p, req(0, 5, 2, 0, true));
    check_slices(a, "0:2:0-3;1:2:0-3;2:1:0-3");
    assert_int_equal(rpool_rank_nfree(p, 2), 0);
    rpool_alloc_destroy(a);
    /* Exclusive with tasks per node. */
    a = must_alloc(p, req(0, 2, 1, 1, true));
    check_slices(a, "0:1:0-3;1:1:0-3");
    rpool_alloc_destroy(a);
    assert_int_equal(rpool_nallocs(p), 0);
    rpool_destroy(p);
}

static void test_mixed_sizes(void **state)
{
    rpool_t *p = rpool_create(4);
    rpool_alloc_t *a;

    assert_non_null(p);
    assert_int_equal(rpool_set_cores(p, 0, 2), 0);
    assert_int_equal(rpool_set_cores(p, 1, 8), 0);
    assert_int_equal(rpool_set_cores(p, 2, 0), 0);
    assert_int_equal(rpool_set_cores(p, 3, 4), 0);
    /* A 3-core task only fits ranks 1 and 3. */
    a = must_alloc(p, req(0, 3, 3, 0, false));
    check_slices(a, "1:2:0-5;3:1:0-2");
    /* A rank with cores allocated cannot be resized. */
    errno = 0;
    assert_int_equal(rpool_set_cores(p, 1, 16), -1);
    assert_int_equal(errno, EBUSY);
    rpool_alloc_destroy(a);
    assert_int_equal(rpool_set_cores(p, 1, 16), 0);
    /* Rank 2 has no cores: it is not a node for "never" purposes. */
    must_fail(p, req(4, 4, 1, 0, false), ENOSPC,
              "never fits: 4 nodes requested, the instance has 3");
    rpool_destroy(p);
}

static void test_never_fits(void **state)
{
    rpool_t *p = make_pool(2, 8);
    rpool_t *q = make_pool(2, 3);
    eddy_error_t err = {{0}};
    struct rpool_request rq;

    must_fail(p, req(4, 4, 1, 0, false), ENOSPC,
              "never fits: 4 nodes requested, the instance has 2");
    must_fail(p, req(0, 1, 16, 0, false), ENOSPC,
              "never fits: a task needs 16 cores, the largest node has 8");
    must_fail(p, req(0, 64, 1, 0, false), ENOSPC,
              "never fits: 64 tasks x 1 core need 64 cores, the instance has "
              "16");
    must_fail(p, req(0, 4, 3, 4, false), ENOSPC,
              "never fits: 4 tasks x 3 cores on one node need 12 cores, the "
              "largest node has 8");
    must_fail(p, req(0, 12, 1, 4, false), ENOSPC,
              "never fits: 12 tasks at 4 per node need 3 nodes, the instance "
              "has 2");
    must_fail(p, req(1, 9, 1, 0, false), ENOSPC,
              "never fits: 9 tasks x 1 core on one node need 9 cores, the "
              "largest node has 8");
    /* Fragmentation: 6 cores but only room for 2 tasks of 2 cores. */
    must_fail(q, req(0, 3, 2, 0, false), ENOSPC,
              "never fits: 3 tasks x 2 cores requested, the nodes can hold "
              "only 2 such tasks");

    rq = req(0, 16, 1, 0, false);
    errno = 0;
    assert_int_equal(rpool_fits_ever(p, &rq, &err), 0);
    assert_int_equal(errno, 0);
    rq = req(0, 17, 1, 0, false);
    assert_int_equal(rpool_fits_ever(p, &rq, &err), -1);
    assert_int_equal(errno, ENOSPC);
    assert_non_null(strstr(err.text, "never fits: 17 tasks"));

    /* Malformed requests. */
    must_fail(p, req(0, 0, 1, 0, false), EINVAL, "at least 1 task");
    must_fail(p, req(0, 1, 0, 0, false), EINVAL, "at least 1 core");
    errno = 0;
    assert_int_equal(rpool_fits_ever(p, NULL, &err), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(rpool_alloc(NULL, &rq, NULL, &err), -1);
    assert_int_equal(errno, EINVAL);
    /* Huge counts do not overflow. */
    must_fail(p, req(0, UINT32_MAX, UINT32_MAX, 0, false), ENOSPC,
              "a task needs 4294967295 cores");
    must_fail(p, req(0, UINT32_MAX, 1, 0, false), ENOSPC,
              "need 4294967295 cores, the instance has 16");
    rpool_destroy(q);
    rpool_destroy(p);
}

static void test_not_now(void **state)
{
    rpool_t *p = make_pool(2, 8);
    rpool_alloc_t *a;
    char *before, *after;

    a = must_alloc(p, req(0, 10, 1, 0, false));
    before = pool_state(p);
    must_fail(p, req(0, 8, 1, 0, false), EAGAIN, "not now: 6 of 16 cores free");
    must_fail(p, req(1, 1, 1, 0, true), EAGAIN, "not now: 0 of 2 nodes idle");
    after = pool_state(p);
    assert_string_equal(before, after);
    free(before);
    free(after);
    /* A failed request leaves *allocp alone. */
    {
        struct rpool_request rq = req(0, 8, 1, 0, false);
        rpool_alloc_t *sentinel = (rpool_alloc_t *)&rq;
        rpool_alloc_t *out = sentinel;
        assert_int_equal(rpool_alloc(p, &rq, &out, NULL), -1);
        assert_ptr_equal(out, sentinel);
    }
    rpool_alloc_destroy(a);
    rpool_destroy(p);
}

static void test_down_ranks(void **state)
{
    rpool_t *p = make_pool(4, 4);
    rpool_alloc_t *a, *b;
    eddy_error_t err = {{0}};
    struct rpool_request rq;

    assert_int_equal(rpool_set_up(p, 1, false), 0);
    a = must_alloc(p, req(0, 8, 1, 0, false));
    check_slices(a, "0:4:0-3;2:4:0-3");
    /* Fits the whole instance, not the up ranks: not now, not never. */
    must_fail(p, req(2, 2, 1, 0, true), EAGAIN,
              "not now: 1 of 3 nodes idle, 1 rank down");
    must_fail(p, req(0, 5, 1, 0, false), EAGAIN,
              "not now: 4 of 12 cores free, 1 rank down");
    rq = req(4, 4, 1, 0, false);
    assert_int_equal(rpool_fits_ever(p, &rq, &err), 0);
    must_fail(p, req(4, 4, 1, 0, false), EAGAIN, "not now");

    /* A rank that goes down keeps its allocation until freed. */
    assert_int_equal(rpool_set_up(p, 2, false), 0);
    assert_int_equal(rpool_rank_nfree(p, 2), 0);
    b = must_alloc(p, req(0, 4, 1, 0, false));
    check_slices(b, "3:4:0-3");
    assert_int_equal(rpool_free(p, a), 0);
    assert_int_equal(rpool_rank_nfree(p, 2), 4);
    must_fail(p, req(0, 5, 1, 0, false), EAGAIN,
              "not now: 4 of 8 cores free, 2 ranks down");
    assert_int_equal(rpool_set_up(p, 2, true), 0);
    assert_int_equal(rpool_set_up(p, 1, true), 0);
    rpool_alloc_destroy(a);
    a = must_alloc(p, req(3, 3, 1, 0, true));
    check_slices(a, "0:1:0-3;1:1:0-3;2:1:0-3");
    rpool_alloc_destroy(a);
    rpool_alloc_destroy(b);
    rpool_destroy(p);
}

static void test_free_exact(void **state)
{
    rpool_t *p = make_pool(8, 6);
    rpool_t *q = make_pool(8, 6);
    rpool_alloc_t *a[6], *other;
    char *empty, *mid, *s;

    empty = pool_state(p);
    a[0] = must_alloc(p, req(0, 5, 1, 0, false));
    a[1] = must_alloc(p, req(2, 4, 2, 0, false));
    a[2] = must_alloc(p, req(0, 2, 1, 0, true));
    a[3] = must_alloc(p, req(0, 3, 3, 0, false));
    mid = pool_state(p);
    a[4] = must_alloc(p, req(0, 4, 1, 2, false));
    a[5] = must_alloc(p, req(1, 1, 1, 0, false));
    /* Free the last two: back to 'mid' exactly. */
    assert_int_equal(rpool_free(p, a[5]), 0);
    assert_int_equal(rpool_free(p, a[4]), 0);
    s = pool_state(p);
    assert_string_equal(s, mid);
    free(s);

    /* Double free, foreign and never-live allocations are refused and
     * change nothing. */
    other = must_alloc(q, req(0, 5, 1, 0, false));
    errno = 0;
    assert_int_equal(rpool_free(p, a[4]), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(rpool_free(p, other), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(rpool_free(p, NULL), -1);
    assert_int_equal(errno, EINVAL);
    s = pool_state(p);
    assert_string_equal(s, mid);
    free(s);
    assert_int_equal(rpool_nallocs(p), 4);

    /* Out of order frees restore the empty pool. */
    assert_int_equal(rpool_free(p, a[1]), 0);
    assert_int_equal(rpool_free(p, a[3]), 0);
    assert_int_equal(rpool_free(p, a[0]), 0);
    assert_int_equal(rpool_free(p, a[2]), 0);
    s = pool_state(p);
    assert_string_equal(s, empty);
    free(s);
    assert_int_equal(rpool_nallocs(p), 0);
    for (int i = 0; i < 6; i++)
        rpool_alloc_destroy(a[i]);
    rpool_alloc_destroy(other);
    /* Destroying a live allocation returns its cores. */
    assert_int_equal(rpool_nallocs(q), 0);
    free(empty);
    free(mid);
    rpool_destroy(q);
    rpool_destroy(p);
}

static void test_destroy_order(void **state)
{
    rpool_t *p = make_pool(2, 2);
    rpool_alloc_t *a = must_alloc(p, req(0, 3, 1, 0, false));
    struct rpool_slice s;

    /* The pool goes first: the allocation survives, detached. */
    rpool_destroy(p);
    assert_int_equal(rpool_alloc_ntasks(a), 3);
    errno = 0;
    assert_int_equal(rpool_alloc_slice(a, 2, &s), -1);
    assert_int_equal(errno, EINVAL);
    errno = ENOENT;
    rpool_alloc_destroy(a);
    rpool_alloc_destroy(NULL);
    rpool_destroy(NULL);
    assert_int_equal(errno, ENOENT);
}

/* Shadow check: no core in two live allocations, free counts agree, and
 * each allocation has the shape its request asked for. */
struct live {
    rpool_alloc_t *a;
    struct rpool_request rq;
};

static void check_invariants(const rpool_t *p, struct live *lv, size_t nlive)
{
    uint32_t nranks = rpool_nranks(p);
    uint8_t *used = calloc((size_t)nranks * 64, 1);
    uint32_t *busy = calloc(nranks, sizeof(*busy));

    assert_non_null(used);
    assert_non_null(busy);
    for (size_t i = 0; i < nlive; i++) {
        const rpool_alloc_t *a = lv[i].a;
        const struct rpool_request *rq = &lv[i].rq;
        uint32_t tasks = 0, prev = RPOOL_NONE;
        struct rpool_slice s;

        if (rq->nnodes)
            assert_int_equal(rpool_alloc_nslices(a), rq->nnodes);
        for (size_t j = 0; j < rpool_alloc_nslices(a); j++) {
            assert_int_equal(rpool_alloc_slice(a, j, &s), 0);
            assert_true(prev == RPOOL_NONE || s.rank > prev);
            prev = s.rank;
            assert_int_equal(s.first_task, tasks);
            tasks += s.ntasks;
            if (rq->tasks_per_node)
                assert_int_equal(s.ntasks, rq->tasks_per_node);
            if (rq->exclusive)
                assert_int_equal(idset_count(s.cores),
                                 rpool_rank_cores(p, s.rank));
            else
                assert_int_equal(idset_count(s.cores),
                                 s.ntasks * rq->cores_per_task);
            for (uint32_t c = idset_first(s.cores); c != IDSET_INVALID;
                 c = idset_next(s.cores, c)) {
                assert_true(c < rpool_rank_cores(p, s.rank));
                assert_int_equal(used[s.rank * 64 + c], 0);
                used[s.rank * 64 + c] = 1;
                busy[s.rank]++;
            }
        }
        assert_int_equal(tasks, rq->ntasks);
    }
    for (uint32_t r = 0; r < nranks; r++)
        assert_int_equal(rpool_rank_nfree(p, r),
                         rpool_rank_cores(p, r) - busy[r]);
    free(used);
    free(busy);
}

/* Brute force: could 'rq' fit the current free cores of the up ranks? */
static bool brute_fits(const rpool_t *p, const struct rpool_request *rq)
{
    uint32_t nranks = rpool_nranks(p);
    uint64_t ntasks = rq->ntasks, cpt = rq->cores_per_task;
    uint32_t nnodes =
        rq->tasks_per_node ? rq->ntasks / rq->tasks_per_node : rq->nnodes;

    if (nnodes == 0) {
        uint64_t fit = 0;
        for (uint32_t r = 0; r < nranks; r++) {
            uint32_t c = rpool_rank_nfree(p, r);
            if (!rpool_rank_up(p, r))
                continue;
            if (rq->exclusive && c != rpool_rank_cores(p, r))
                continue;
            fit += c / cpt;
        }
        return fit >= ntasks;
    } else {
        uint64_t base = ntasks / nnodes, extra = ntasks % nnodes;
        uint32_t nsmall = 0, nbig = 0;
        for (uint32_t r = 0; r < nranks; r++) {
            uint32_t c = rpool_rank_nfree(p, r);
            if (!rpool_rank_up(p, r))
                continue;
            if (rq->exclusive && c != rpool_rank_cores(p, r))
                continue;
            if (c >= base * cpt)
                nsmall++;
            if (c >= (base + 1) * cpt)
                nbig++;
        }
        return nbig >= extra && nsmall >= nnodes;
    }
}

static void test_random(void **state)
{
    enum { NRANKS = 40, NOPS = 4000, MAXLIVE = 200 };
    rpool_t *p = rpool_create(NRANKS);
    struct live lv[MAXLIVE];
    size_t nlive = 0;
    char *empty, *s;
    unsigned seed = 12345;
    int nok = 0, nagain = 0, nnever = 0;

    assert_non_null(p);
    for (uint32_t r = 0; r < NRANKS; r++)
        assert_int_equal(
            rpool_set_cores(p, r, 1 + (uint32_t)rand_r(&seed) % 16), 0);
    empty = pool_state(p);
    for (int op = 0; op < NOPS; op++) {
        int what = rand_r(&seed) % 10;

        if (what < 5 && nlive < MAXLIVE) {
            struct rpool_request rq = {0};
            rpool_alloc_t *a = NULL;
            eddy_error_t err = {{0}};
            int shape = rand_r(&seed) % 3;

            rq.cores_per_task = 1 + (uint32_t)rand_r(&seed) % 4;
            rq.exclusive = rand_r(&seed) % 5 == 0;
            if (shape == 0) {
                rq.ntasks = 1 + (uint32_t)rand_r(&seed) % 12;
            } else if (shape == 1) {
                rq.tasks_per_node = 1 + (uint32_t)rand_r(&seed) % 3;
                rq.ntasks = rq.tasks_per_node * (1 + rand_r(&seed) % 4);
            } else {
                rq.nnodes = 1 + (uint32_t)rand_r(&seed) % 4;
                rq.ntasks = rq.nnodes + (uint32_t)rand_r(&seed) % 8;
            }
            if (rpool_alloc(p, &rq, &a, &err) == 0) {
                lv[nlive].a = a;
                lv[nlive].rq = rq;
                nlive++;
                nok++;
            } else if (errno == EAGAIN) {
                /* The engine is complete: a real "not now". */
                if (brute_fits(p, &rq))
                    fail_msg("EAGAIN but it fits: %s", err.text);
                nagain++;
            } else {
                assert_int_equal(errno, ENOSPC);
                assert_int_equal(rpool_fits_ever(p, &rq, NULL), -1);
                nnever++;
            }
        } else if (what < 9 && nlive > 0) {
            size_t i = (size_t)rand_r(&seed) % nlive;
            assert_int_equal(rpool_free(p, lv[i].a), 0);
            /* A second free is refused. */
            assert_int_equal(rpool_free(p, lv[i].a), -1);
            rpool_alloc_destroy(lv[i].a);
            lv[i] = lv[--nlive];
        } else {
            uint32_t r = (uint32_t)rand_r(&seed) % NRANKS;
            assert_int_equal(rpool_set_up(p, r, !rpool_rank_up(p, r)), 0);
        }
        check_invariants(p, lv, nlive);
        assert_int_equal(rpool_nallocs(p), nlive);
    }
    for (uint32_t r = 0; r < NRANKS; r++)
        assert_int_equal(rpool_set_up(p, r, true), 0);
    while (nlive > 0) {
        assert_int_equal(rpool_free(p, lv[nlive - 1].a), 0);
        rpool_alloc_destroy(lv[--nlive].a);
    }
    s = pool_state(p);
    assert_string_equal(s, empty);
    free(s);
    free(empty);
    /* The mix exercised every outcome. */
    assert_true(nok > 100);
    assert_true(nagain > 10);
    assert_true(nnever > 0);
    rpool_destroy(p);
}

static void test_encode_decode(void **state)
{
    rpool_t *p = make_pool(6, 4);
    rpool_t *q = make_pool(6, 4);
    rpool_alloc_t *x, *a, *d;
    eddy_error_t err = {{0}};
    json_t *o, *o2;
    char *str;

    x = must_alloc(p, req(0, 2, 1, 0, false));
    a = must_alloc(p, req(0, 14, 1, 0, false));
    check_slices(a, "0:2:2-3;1:4:0-3;2:4:0-3;3:4:0-3");
    o = rpool_alloc_encode(a);
    assert_non_null(o);
    str = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(str, "{\"ntasks\":14,\"ranks\":\"0-3\",\"slices\":"
                             "[{\"cores\":\"2-3\",\"ranks\":\"0\",\"tasks\":2},"
                             "{\"cores\":\"0-3\",\"ranks\":\"1-3\","
                             "\"tasks\":4}]}");
    free(str);

    d = rpool_alloc_decode(o, &err);
    if (!d)
        fail_msg("decode: %s", err.text);
    check_slices(d, "0:2:2-3;1:4:0-3;2:4:0-3;3:4:0-3");
    assert_int_equal(rpool_alloc_ntasks(d), 14);
    assert_int_equal(rpool_alloc_task_rank(d, 1), 0);
    assert_int_equal(rpool_alloc_task_rank(d, 2), 1);
    assert_int_equal(rpool_alloc_task_rank(d, 13), 3);
    str = idset_encode(rpool_alloc_ranks(d));
    assert_string_equal(str, "0-3");
    free(str);
    o2 = rpool_alloc_encode(d);
    assert_true(json_equal(o, o2));
    json_decref(o2);

    /* A decoded allocation is not live until claimed. */
    errno = 0;
    assert_int_equal(rpool_free(q, d), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(rpool_claim(q, d, &err), 0);
    assert_int_equal(rpool_nallocs(q), 1);
    assert_int_equal(rpool_rank_nfree(q, 0), 2);
    errno = 0;
    assert_int_equal(rpool_claim(q, d, &err), -1);
    assert_int_equal(errno, EINVAL);
    /* Claiming the same cores twice is refused. */
    {
        rpool_alloc_t *d2 = rpool_alloc_decode(o, &err);
        char *before = pool_state(q), *after;
        assert_non_null(d2);
        errno = 0;
        assert_int_equal(rpool_claim(q, d2, &err), -1);
        assert_int_equal(errno, EBUSY);
        assert_non_null(strstr(err.text, "rank 0 core 2 is already"));
        after = pool_state(q);
        assert_string_equal(before, after);
        free(before);
        free(after);
        rpool_alloc_destroy(d2);
    }
    /* A pool too small for it. */
    {
        rpool_t *small = make_pool(2, 2);
        rpool_alloc_t *d3 = rpool_alloc_decode(o, &err);
        assert_non_null(d3);
        errno = 0;
        assert_int_equal(rpool_claim(small, d3, &err), -1);
        assert_int_equal(errno, EINVAL);
        assert_non_null(strstr(err.text, "rank 0 has no core 2"));
        assert_int_equal(rpool_nallocs(small), 0);
        rpool_alloc_destroy(d3);
        rpool_destroy(small);
    }
    assert_int_equal(rpool_free(q, d), 0);
    assert_int_equal(rpool_rank_nfree(q, 0), 4);
    json_decref(o);

    /* Exclusive allocation round trip, with a gap in the ranks. */
    rpool_alloc_destroy(a);
    assert_int_equal(rpool_set_up(p, 1, false), 0);
    a = must_alloc(p, req(2, 4, 1, 0, true));
    check_slices(a, "2:2:0-3;3:2:0-3");
    rpool_alloc_destroy(x);
    x = must_alloc(p, req(3, 3, 1, 0, true));
    check_slices(x, "0:1:0-3;4:1:0-3;5:1:0-3");
    o = rpool_alloc_encode(x);
    str = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(str, "{\"ntasks\":3,\"ranks\":\"0,4-5\",\"slices\":"
                             "[{\"cores\":\"0-3\",\"ranks\":\"0,4-5\","
                             "\"tasks\":1}]}");
    free(str);
    rpool_alloc_destroy(d);
    d = rpool_alloc_decode(o, &err);
    assert_non_null(d);
    check_slices(d, "0:1:0-3;4:1:0-3;5:1:0-3");
    json_decref(o);

    rpool_alloc_destroy(d);
    rpool_alloc_destroy(a);
    rpool_alloc_destroy(x);
    rpool_destroy(q);
    rpool_destroy(p);
}

static void test_decode_bad(void **state)
{
    static const struct {
        const char *json;
        const char *msg;
    } cases[] = {
        {"{}", "alloc: "},
        {"{\"ranks\":\"0\",\"ntasks\":1,\"slices\":[{\"ranks\":\"0\","
         "\"tasks\":1,\"cores\":\"0\"}],\"extra\":1}",
         "alloc: "},
        {"{\"ranks\":\"0\",\"ntasks\":0,\"slices\":[]}",
         "ntasks 0 is out of range"},
        {"{\"ranks\":\"0\",\"ntasks\":5000000000,\"slices\":[]}",
         "out of range"},
        {"{\"ranks\":\"0\",\"ntasks\":1,\"slices\":[]}",
         "slices must be a non-empty array"},
        {"{\"ranks\":\"0\",\"ntasks\":1,\"slices\":{}}",
         "slices must be a non-empty array"},
        {"{\"ranks\":\"x\",\"ntasks\":1,\"slices\":[{}]}",
         "alloc: ranks: idset 'x'"},
        {"{\"ranks\":\"\",\"ntasks\":1,\"slices\":[{}]}",
         "alloc: ranks is empty"},
        {"{\"ranks\":\"0\",\"ntasks\":1,\"slices\":[{\"ranks\":\"0\"}]}",
         "alloc: slices[0]: "},
        {"{\"ranks\":\"0\",\"ntasks\":1,\"slices\":[{\"ranks\":\"0\","
         "\"tasks\":1,\"cores\":\"0\",\"x\":2}]}",
         "alloc: slices[0]: "},
        {"{\"ranks\":\"0\",\"ntasks\":1,\"slices\":[{\"ranks\":\"0-\","
         "\"tasks\":1,\"cores\":\"0\"}]}",
         "alloc: slices[0].ranks: idset '0-'"},
        {"{\"ranks\":\"0\",\"ntasks\":1,\"slices\":[{\"ranks\":\"0\","
         "\"tasks\":1,\"cores\":\"\"}]}",
         "alloc: slices[0].cores is empty"},
        {"{\"ranks\":\"0\",\"ntasks\":1,\"slices\":[{\"ranks\":\"0\","
         "\"tasks\":1,\"cores\":\"4096\"}]}",
         "core 4096 is too large"},
        {"{\"ranks\":\"0\",\"ntasks\":1,\"slices\":[{\"ranks\":\"0\","
         "\"tasks\":0,\"cores\":\"0\"}]}",
         "slices[0]: tasks 0 is not between 1 and the 1 cores"},
        {"{\"ranks\":\"0\",\"ntasks\":3,\"slices\":[{\"ranks\":\"0\","
         "\"tasks\":3,\"cores\":\"0-1\"}]}",
         "tasks 3 is not between 1 and the 2 cores"},
        {"{\"ranks\":\"0-1\",\"ntasks\":2,\"slices\":[{\"ranks\":\"0-1\","
         "\"tasks\":1,\"cores\":\"0\"},{\"ranks\":\"1\",\"tasks\":1,"
         "\"cores\":\"1\"}]}",
         "slices[1]: rank 1 appears twice"},
        {"{\"ranks\":\"0\",\"ntasks\":2,\"slices\":[{\"ranks\":\"0-1\","
         "\"tasks\":1,\"cores\":\"0\"}]}",
         "slices[0]: rank 1 is not in ranks"},
        {"{\"ranks\":\"0-2\",\"ntasks\":2,\"slices\":[{\"ranks\":\"0-1\","
         "\"tasks\":1,\"cores\":\"0\"}]}",
         "ranks has 3 ranks, the slices cover 2"},
        {"{\"ranks\":\"0-1\",\"ntasks\":3,\"slices\":[{\"ranks\":\"0-1\","
         "\"tasks\":1,\"cores\":\"0\"}]}",
         "ntasks is 3, the slices hold 2"},
        {"[]", "alloc: "},
    };
    eddy_error_t err;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_error_t jerr;
        json_t *o = json_loads(cases[i].json, 0, &jerr);
        rpool_alloc_t *a;

        if (!o)
            fail_msg("bad test json %zu: %s", i, jerr.text);
        memset(&err, 0, sizeof(err));
        errno = 0;
        a = rpool_alloc_decode(o, &err);
        if (a)
            fail_msg("case %zu decoded: %s", i, cases[i].json);
        assert_int_equal(errno, EINVAL);
        if (!strstr(err.text, cases[i].msg))
            fail_msg("case %zu: message '%s' lacks '%s'", i, err.text,
                     cases[i].msg);
        json_decref(o);
    }
    errno = 0;
    assert_null(rpool_alloc_decode(NULL, &err));
    assert_int_equal(errno, EINVAL);
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* 16384 ranks x 128 cores, filled to about 90% with small jobs, then
 * 10000 free/alloc pairs.  Bounded loosely so that sanitizer builds pass;
 * the figure is printed for comparison. */
static void test_large_pool(void **state)
{
    enum { NRANKS = 16384, NCORES = 128, NPAIRS = 10000 };
    rpool_t *p = make_pool(NRANKS, NCORES);
    size_t cap = 400000, nlive = 0;
    rpool_alloc_t **live = calloc(cap, sizeof(*live));
    unsigned seed = 7;
    uint64_t target = (uint64_t)NRANKS * NCORES * 9 / 10, used = 0;
    double t0, t1;
    rpool_alloc_t *big;

    assert_non_null(live);
    while (used < target) {
        struct rpool_request rq =
            req(0, 1 + (uint32_t)rand_r(&seed) % 16,
                1 + (uint32_t)rand_r(&seed) % 4, 0, false);
        assert_true(nlive < cap);
        live[nlive++] = must_alloc(p, rq);
        used += (uint64_t)rq.ntasks * rq.cores_per_task;
    }
    t0 = now();
    for (int i = 0; i < NPAIRS; i++) {
        size_t k = (size_t)rand_r(&seed) % nlive;
        struct rpool_request rq =
            req(0, 1 + (uint32_t)rand_r(&seed) % 16,
                1 + (uint32_t)rand_r(&seed) % 4, 0, false);
        rpool_alloc_t *a = NULL;

        assert_int_equal(rpool_free(p, live[k]), 0);
        rpool_alloc_destroy(live[k]);
        if (rpool_alloc(p, &rq, &a, NULL) < 0) {
            assert_int_equal(errno, EAGAIN);
            live[k] = live[--nlive];
        } else {
            live[k] = a;
        }
    }
    t1 = now();
    print_message("rpool: %d free/alloc pairs on %d x %d cores "
                  "(%zu live jobs): %.3f s, %.1f us per pair\n",
                  NPAIRS, NRANKS, NCORES, nlive, t1 - t0,
                  (t1 - t0) * 1e6 / NPAIRS);
    assert_true(t1 - t0 < 20.0);
    while (nlive > 0)
        rpool_alloc_destroy(live[--nlive]);
    assert_int_equal(rpool_nallocs(p), 0);

    /* One job over the whole machine, exclusive, and its round trip. */
    t0 = now();
    big = must_alloc(p, req(NRANKS, NRANKS * 2, 1, 0, true));
    {
        json_t *o = rpool_alloc_encode(big);
        eddy_error_t err = {{0}};
        rpool_alloc_t *d;
        char *s;

        assert_non_null(o);
        s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
        assert_string_equal(s, "{\"ntasks\":32768,\"ranks\":\"0-16383\","
                               "\"slices\":[{\"cores\":\"0-127\",\"ranks\":"
                               "\"0-16383\",\"tasks\":2}]}");
        free(s);
        d = rpool_alloc_decode(o, &err);
        assert_non_null(d);
        assert_int_equal(rpool_alloc_task_rank(d, 32767), NRANKS - 1);
        rpool_alloc_destroy(d);
        json_decref(o);
    }
    rpool_alloc_destroy(big);
    t1 = now();
    print_message("rpool: whole-machine exclusive alloc+encode+decode+free: "
                  "%.3f s\n",
                  t1 - t0);
    free(live);
    rpool_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_bad),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_tasks_per_node),
        cmocka_unit_test(test_nnodes_spread),
        cmocka_unit_test(test_exclusive),
        cmocka_unit_test(test_mixed_sizes),
        cmocka_unit_test(test_never_fits),
        cmocka_unit_test(test_not_now),
        cmocka_unit_test(test_down_ranks),
        cmocka_unit_test(test_free_exact),
        cmocka_unit_test(test_destroy_order),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_encode_decode),
        cmocka_unit_test(test_decode_bad),
        cmocka_unit_test(test_large_pool),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
