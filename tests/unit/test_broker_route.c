/* test_broker_route.c - the broker's pure routing parts: the keymap hash,
 * the pending-request table and route_resolve(). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/broker/keymap.h"
#include "src/broker/route.h"
#include "src/common/msg.h"
#include "src/common/topology.h"

/* --- keymap ------------------------------------------------------------ */

static void test_keymap_basic(void **state)
{
    keymap_t *m = keymap_create();
    int a, b;

    assert_non_null(m);
    assert_int_equal(keymap_put(m, 1, 2, &a), 0);
    assert_int_equal(keymap_put(m, 1, 3, &b), 0);
    assert_ptr_equal(keymap_get(m, 1, 2), &a);
    assert_ptr_equal(keymap_get(m, 1, 3), &b);
    assert_null(keymap_get(m, 2, 2));
    assert_int_equal(keymap_count(m), 2);

    errno = 0;
    assert_int_equal(keymap_put(m, 1, 2, &b), -1);
    assert_int_equal(errno, EEXIST);
    assert_ptr_equal(keymap_get(m, 1, 2), &a); /* untouched */
    errno = 0;
    assert_int_equal(keymap_put(m, 5, 5, NULL), -1);
    assert_int_equal(errno, EINVAL);

    assert_ptr_equal(keymap_remove(m, 1, 2), &a);
    assert_null(keymap_remove(m, 1, 2));
    assert_null(keymap_get(m, 1, 2));
    assert_int_equal(keymap_count(m), 1);

    errno = 1234;
    keymap_destroy(m);
    keymap_destroy(NULL);
    assert_int_equal(errno, 1234);
}

/* Many keys force several resizes; every key must survive them. */
static void test_keymap_grow(void **state)
{
    enum { N = 20000 };
    keymap_t *m = keymap_create();
    static int vals[N];
    void **v;
    size_t n;
    long sum = 0;

    assert_non_null(m);
    for (int i = 0; i < N; i++) {
        vals[i] = i;
        assert_int_equal(keymap_put(m, (uint64_t)i / 7, (uint32_t)i, &vals[i]),
                         0);
    }
    assert_int_equal(keymap_count(m), N);
    for (int i = 0; i < N; i++)
        assert_ptr_equal(keymap_get(m, (uint64_t)i / 7, (uint32_t)i), &vals[i]);
    assert_int_equal(keymap_values(m, &v, &n), 0);
    assert_int_equal(n, N);
    for (size_t i = 0; i < n; i++)
        sum += *(int *)v[i];
    assert_int_equal(sum, (long)N * (N - 1) / 2);
    /* Removing while walking a snapshot is the intended use. */
    for (size_t i = 0; i < n; i++) {
        int k = *(int *)v[i];
        if (k % 2)
            assert_ptr_equal(keymap_remove(m, (uint64_t)k / 7, (uint32_t)k),
                             v[i]);
    }
    free(v);
    assert_int_equal(keymap_count(m), N / 2);
    assert_null(keymap_get(m, 0, 1));
    assert_ptr_equal(keymap_get(m, 0, 2), &vals[2]);
    keymap_destroy(m);
}

/* --- pending table ----------------------------------------------------- */

static void test_route_table(void **state)
{
    route_t *rt = route_create();
    struct route_entry *e, *e2;
    struct route_entry **v;
    size_t n;

    assert_non_null(rt);
    e = route_add(rt, 10, 1, 20, 7, 5, true, "broker.subscribe");
    assert_non_null(e);
    assert_string_equal(e->topic, "broker.subscribe");
    assert_ptr_equal(route_by_out(rt, 10, 1), e);
    assert_ptr_equal(route_by_origin(rt, 20, 7), e);
    assert_null(route_by_out(rt, 20, 7));
    assert_null(route_by_origin(rt, 10, 1));

    /* Either key already in use is refused, with nothing added. */
    errno = 0;
    assert_null(route_add(rt, 10, 1, 21, 7, 5, false, "x"));
    assert_int_equal(errno, EEXIST);
    errno = 0;
    assert_null(route_add(rt, 11, 1, 20, 7, 5, false, "x"));
    assert_int_equal(errno, EEXIST);
    assert_int_equal(route_count(rt), 1);
    assert_null(route_by_out(rt, 11, 1));

    /* The same origin tag from another connection is another request. */
    e2 = route_add(rt, 10, 2, 21, 7, 6, false, "broker.ping");
    assert_non_null(e2);
    assert_int_equal(route_count(rt), 2);
    assert_int_equal(route_entries(rt, &v, &n), 0);
    assert_int_equal(n, 2);
    free(v);

    route_remove(rt, e);
    assert_null(route_by_out(rt, 10, 1));
    assert_null(route_by_origin(rt, 20, 7));
    assert_ptr_equal(route_by_origin(rt, 21, 7), e2);
    route_remove(rt, NULL);
    /* e2 is freed by route_destroy (ASan checks for leaks). */
    route_destroy(rt);
    route_destroy(NULL);
}

static void test_route_alloc_tag(void **state)
{
    route_t *rt = route_create();
    uint32_t counter = 0;

    assert_non_null(rt);
    assert_int_equal(route_alloc_tag(rt, 1, &counter), 1);
    assert_int_equal(route_alloc_tag(rt, 1, &counter), 2);
    /* A tag still pending on that connection is skipped... */
    assert_non_null(route_add(rt, 1, 3, 9, 1, 0, false, "t"));
    assert_int_equal(route_alloc_tag(rt, 1, &counter), 4);
    /* ...but the same tag on another connection is not in the way. */
    counter = 2;
    assert_int_equal(route_alloc_tag(rt, 2, &counter), 3);
    /* Wrapping around never yields 0. */
    counter = UINT32_MAX - 1;
    assert_int_equal(route_alloc_tag(rt, 1, &counter), UINT32_MAX);
    assert_int_equal(route_alloc_tag(rt, 1, &counter), 1);
    route_destroy(rt);
}

static void test_route_ends(void **state)
{
    struct route_entry plain = {.streaming = false};
    struct route_entry stream = {.streaming = true};

    assert_true(route_response_ends(&plain, 0, 0));
    assert_false(route_response_ends(&stream, 0, 0));
    assert_true(route_response_ends(&stream, MSG_FLAG_EOS, 0));
    assert_true(route_response_ends(&stream, 0, ENODATA));
}

/* --- route_resolve ----------------------------------------------------- */

static void test_resolve(void **state)
{
    struct route_topo t = {.rank = 1, .size = 8, .fanout = 2};
    eddy_error_t err = {{0}};
    uint32_t target;

    target = EDDY_RANK_ANY;
    assert_int_equal(route_resolve(&t, &target, &err), 1);
    assert_int_equal(target, 1);

    target = EDDY_RANK_UPSTREAM;
    assert_int_equal(route_resolve(&t, &target, &err), 0);
    assert_int_equal(target, 0);

    target = 7; /* 1 -> 3 -> 7 */
    assert_int_equal(route_resolve(&t, &target, &err), 3);
    target = 4;
    assert_int_equal(route_resolve(&t, &target, &err), 4);
    target = 6; /* in rank 2's subtree: up */
    assert_int_equal(route_resolve(&t, &target, &err), 0);

    target = 8;
    errno = 0;
    assert_int_equal(route_resolve(&t, &target, &err), TOPO_NONE);
    assert_int_equal(errno, EHOSTUNREACH);
    assert_string_equal(err.text, "no rank 8 in an instance of size 8");
    assert_int_equal(target, 8); /* untouched on failure */

    t.rank = 0;
    target = EDDY_RANK_UPSTREAM;
    errno = 0;
    assert_int_equal(route_resolve(&t, &target, &err), TOPO_NONE);
    assert_int_equal(errno, EHOSTUNREACH);
    assert_string_equal(err.text, "rank 0 has no parent");
    assert_int_equal(target, EDDY_RANK_UPSTREAM);
}

static void test_resolve_lost(void **state)
{
    uint32_t lost_by[8];
    struct route_topo t = {
        .rank = 0, .size = 8, .fanout = 2, .lost_by = lost_by};
    eddy_error_t err = {{0}};
    uint32_t target;

    for (int i = 0; i < 8; i++)
        lost_by[i] = TOPO_NONE;
    lost_by[3] = lost_by[7] = 3; /* rank 3 lost with its subtree */

    target = 7;
    errno = 0;
    assert_int_equal(route_resolve(&t, &target, &err), TOPO_NONE);
    assert_int_equal(errno, EHOSTUNREACH);
    assert_string_equal(err.text, "rank 7 is unreachable: rank 3 is lost");

    target = 3;
    assert_int_equal(route_resolve(&t, &target, &err), TOPO_NONE);
    assert_string_equal(err.text, "rank 3 is lost");

    target = 4; /* a sibling is fine */
    assert_int_equal(route_resolve(&t, &target, &err), 1);
}

/* One origin cannot grow the pending table without bound: past the
 * limit it is refused with ENOSPC while other origins still get in, and
 * room comes back as its entries go. */
static void test_route_origin_limit(void **state)
{
    route_t *rt = route_create();
    struct route_entry *e[4];
    uint32_t counter = 0;

    assert_non_null(rt);
    route_set_origin_max(rt, 3);
    for (int i = 0; i < 3; i++) {
        e[i] = route_add(rt, 10, route_alloc_tag(rt, 10, &counter), 20,
                         (uint32_t)i + 1, 5, false, "svc.x");
        assert_non_null(e[i]);
    }
    assert_int_equal(route_count_origin(rt, 20), 3);
    errno = 0;
    assert_null(route_add(rt, 10, route_alloc_tag(rt, 10, &counter), 20, 99, 5,
                          false, "svc.x"));
    assert_int_equal(errno, ENOSPC);
    assert_int_equal(route_count(rt), 3);
    assert_null(route_by_origin(rt, 20, 99));

    e[3] = route_add(rt, 10, route_alloc_tag(rt, 10, &counter), 21, 1, 5, false,
                     "svc.x");
    assert_non_null(e[3]);
    assert_int_equal(route_count_origin(rt, 21), 1);

    route_remove(rt, e[0]);
    assert_int_equal(route_count_origin(rt, 20), 2);
    e[0] = route_add(rt, 10, route_alloc_tag(rt, 10, &counter), 20, 99, 5,
                     false, "svc.x");
    assert_non_null(e[0]);
    for (int i = 0; i < 4; i++)
        route_remove(rt, e[i]);
    assert_int_equal(route_count_origin(rt, 20), 0);
    assert_int_equal(route_count_origin(rt, 21), 0);
    assert_int_equal(route_count(rt), 0);

    /* the default limit is the named one; entries left are freed */
    route_set_origin_max(rt, ROUTE_ORIGIN_PENDING_MAX);
    assert_non_null(route_add(rt, 10, 1, 20, 1, 5, true, "svc.y"));
    route_destroy(rt);
}

int main(void)
{
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keymap_basic),
        cmocka_unit_test(test_keymap_grow),
        cmocka_unit_test(test_route_table),
        cmocka_unit_test(test_route_origin_limit),
        cmocka_unit_test(test_route_alloc_tag),
        cmocka_unit_test(test_route_ends),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_resolve_lost),
    };

    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
