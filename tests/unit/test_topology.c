/* test_topology.c - unit tests for src/common/topology.c
 *
 * The tree functions are checked against a brute-force model built from
 * the parent relation alone, for chains (fanout 1), binary and wider trees,
 * and trees whose fanout exceeds their size.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "src/common/topology.h"

static const uint32_t fanouts[] = {1, 2, 3, 8};
static const uint32_t sizes[] = {1, 2, 8, 64, 1000};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* Reference: the parent of r is (r - 1) / k; everything else is derived
 * by walking parents. */
static uint32_t ref_parent(uint32_t r, uint32_t k)
{
    return r == 0 ? TOPO_NONE : (r - 1) / k;
}

static uint32_t ref_depth(uint32_t r, uint32_t k)
{
    uint32_t d = 0;

    while (r != 0) {
        r = ref_parent(r, k);
        d++;
    }
    return d;
}

static int ref_is_ancestor(uint32_t a, uint32_t t, uint32_t k)
{
    while (t > a)
        t = ref_parent(t, k);
    return t == a;
}

/* Number of hops between r and t through their lowest common ancestor. */
static uint32_t ref_distance(uint32_t r, uint32_t t, uint32_t k)
{
    uint32_t n = 0;

    while (r != t) {
        if (r > t)
            r = ref_parent(r, k);
        else
            t = ref_parent(t, k);
        n++;
    }
    return n;
}

static void test_parent_children(void **state)
{
    for (size_t fi = 0; fi < NELEM(fanouts); fi++) {
        uint32_t k = fanouts[fi];
        for (size_t si = 0; si < NELEM(sizes); si++) {
            uint32_t size = sizes[si];
            uint32_t total = 0;

            for (uint32_t r = 0; r < size; r++) {
                uint32_t n = topo_nchildren(r, size, k);
                uint32_t want = 0;

                assert_int_equal(topo_parent(r, k), ref_parent(r, k));
                for (uint32_t c = r + 1; c < size; c++) {
                    if (ref_parent(c, k) == r)
                        want++;
                }
                assert_int_equal(n, want);
                assert_true(n <= k);
                for (uint32_t i = 0; i < n; i++) {
                    uint32_t c = topo_child(r, k, i);
                    assert_true(c < size);
                    assert_int_equal(ref_parent(c, k), r);
                    assert_int_equal(topo_parent(c, k), r);
                }
                assert_int_equal(topo_depth(r, k), ref_depth(r, k));
                total += n;
            }
            /* Every rank but the root is someone's child. */
            assert_int_equal(total, size - 1);
        }
    }
}

static void test_in_subtree(void **state)
{
    for (size_t fi = 0; fi < NELEM(fanouts); fi++) {
        uint32_t k = fanouts[fi];
        for (uint32_t r = 0; r < 64; r++) {
            for (uint32_t t = 0; t < 64; t++) {
                assert_int_equal(topo_in_subtree(r, t, k),
                                 ref_is_ancestor(r, t, k));
            }
        }
    }
}

/* Follow next hops from r to t; return the hop count. */
static uint32_t walk(
    uint32_t r, uint32_t t, uint32_t size, uint32_t k, uint32_t limit)
{
    uint32_t hops = 0;

    while (r != t) {
        uint32_t h = topo_next_hop(r, t, size, k);
        assert_true(h < size);
        /* Each hop is to the parent or to a child. */
        assert_true(h == ref_parent(r, k) || ref_parent(h, k) == r);
        r = h;
        if (++hops > limit)
            fail_msg("no route to %u within %u hops", t, limit);
    }
    assert_int_equal(topo_next_hop(t, t, size, k), t);
    return hops;
}

static void test_next_hop_reaches_target(void **state)
{
    for (size_t fi = 0; fi < NELEM(fanouts); fi++) {
        uint32_t k = fanouts[fi];
        for (size_t si = 0; si < NELEM(sizes); si++) {
            uint32_t size = sizes[si];
            uint32_t depth = topo_depth(topo_deepest(size, k), k);
            /* All pairs for small trees; a spread of sources for large
             * ones so the chain of 1000 stays fast. */
            uint32_t step = size > 64 ? (k == 1 ? 37 : 7) : 1;

            for (uint32_t r = 0; r < size; r += step) {
                for (uint32_t t = 0; t < size; t++) {
                    uint32_t hops = walk(r, t, size, k, 2 * depth);
                    assert_int_equal(hops, ref_distance(r, t, k));
                }
            }
        }
    }
}

static void test_next_hop_bad_args(void **state)
{
    assert_int_equal(topo_next_hop(0, 8, 8, 2), TOPO_NONE);
    assert_int_equal(topo_next_hop(8, 0, 8, 2), TOPO_NONE);
    assert_int_equal(topo_next_hop(0, 1, 8, 0), TOPO_NONE);
    assert_int_equal(topo_next_hop(0, 0, 0, 2), TOPO_NONE);
    assert_int_equal(topo_next_hop(0, 0, 1, 2), 0);
}

static void test_deepest(void **state)
{
    assert_int_equal(topo_deepest(64, 2), 63);
    assert_int_equal(topo_depth(topo_deepest(64, 8), 8), 2);
    assert_int_equal(topo_deepest(1, 2), 0);
    assert_int_equal(topo_deepest(0, 2), TOPO_NONE);
    assert_int_equal(topo_deepest(5, 1), 4);
    assert_int_equal(topo_depth(topo_deepest(5, 1), 1), 4);
    /* Against the model: largest depth, then largest rank. */
    for (size_t fi = 0; fi < NELEM(fanouts); fi++) {
        for (size_t si = 0; si < NELEM(sizes); si++) {
            uint32_t k = fanouts[fi], size = sizes[si];
            uint32_t best = 0;
            for (uint32_t r = 1; r < size; r++) {
                if (ref_depth(r, k) >= ref_depth(best, k))
                    best = r;
            }
            assert_int_equal(topo_deepest(size, k), best);
        }
    }
}

static void test_fanout_ge_size(void **state)
{
    /* A flat tree: every rank is a child of the root. */
    assert_int_equal(topo_nchildren(0, 5, 8), 4);
    assert_int_equal(topo_nchildren(0, 9, 8), 8);
    assert_int_equal(topo_nchildren(1, 9, 8), 0);
    assert_int_equal(topo_nchildren(0, 1, 8), 0);
    assert_int_equal(topo_nchildren(3, 5, 100), 0);
    assert_int_equal(topo_next_hop(3, 4, 5, 100), 0);
    assert_int_equal(topo_next_hop(0, 4, 5, 100), 4);
    assert_int_equal(topo_depth(4, 100), 1);
}

static void test_overflow(void **state)
{
    /* rank * k + 1 + i would not fit in 32 bits, or would be TOPO_NONE. */
    assert_int_equal(topo_child(0x80000000u, 2, 0), TOPO_NONE);
    assert_int_equal(topo_child(0x7fffffffu, 2, 0), TOPO_NONE);
    assert_int_equal(topo_child(0x7fffffffu, 2, 1), TOPO_NONE);
    assert_int_equal(topo_child(0x7ffffffeu, 2, 1), 0xfffffffeu);
    assert_int_equal(topo_child(1, UINT32_MAX, 0), TOPO_NONE);
    assert_int_equal(topo_child(0, UINT32_MAX, UINT32_MAX - 1), TOPO_NONE);
    assert_int_equal(topo_child(0, UINT32_MAX, UINT32_MAX - 2), 0xfffffffeu);
    assert_int_equal(topo_child(0, 8, 8), TOPO_NONE); /* i >= fanout */
    assert_int_equal(topo_child(0, 0, 0), TOPO_NONE);
    assert_int_equal(topo_nchildren(0x80000000u, UINT32_MAX, 2), 0);
    assert_int_equal(topo_nchildren(0x7ffffffeu, UINT32_MAX, 2), 2);
    assert_int_equal(topo_nchildren(0x7fffffffu, UINT32_MAX, 2), 0);
    assert_int_equal(topo_nchildren(5, UINT32_MAX, UINT32_MAX), 0);
    assert_int_equal(topo_nchildren(0, UINT32_MAX, UINT32_MAX), UINT32_MAX - 1);
    assert_int_equal(topo_nchildren(0, 10, 0), 0);
    assert_int_equal(topo_parent(0, 2), TOPO_NONE);
    assert_int_equal(topo_parent(UINT32_MAX - 1, 2), 0x7fffffffu - 1);
    assert_int_equal(topo_parent(5, 0), TOPO_NONE);

    /* Large ranks against the model, for several fanouts. */
    static const uint32_t ks[] = {2, 3, 8, 1000, 65536, UINT32_MAX};
    static const uint32_t big[] = {
        0,     1,           2,           7,           1000,
        65535, 0x7fffffffu, 0x80000000u, 0xfffffff0u, 0xfffffffeu};
    for (size_t ki = 0; ki < NELEM(ks); ki++) {
        for (size_t a = 0; a < NELEM(big); a++) {
            for (size_t b = 0; b < NELEM(big); b++) {
                uint32_t k = ks[ki], r = big[a], t = big[b];
                uint32_t h;
                assert_int_equal(topo_in_subtree(r, t, k),
                                 ref_is_ancestor(r, t, k));
                h = topo_next_hop(r, t, UINT32_MAX, k);
                if (r == t)
                    assert_int_equal(h, r);
                else if (ref_is_ancestor(r, t, k))
                    assert_true(ref_parent(h, k) == r &&
                                ref_is_ancestor(h, t, k));
                else
                    assert_int_equal(h, ref_parent(r, k));
            }
        }
    }
}

static void test_huge_chain(void **state)
{
    /* Fanout 1 must not walk the chain. */
    uint32_t size = UINT32_MAX;

    assert_int_equal(topo_depth(UINT32_MAX - 1, 1), UINT32_MAX - 1);
    assert_true(topo_in_subtree(5, UINT32_MAX - 1, 1));
    assert_false(topo_in_subtree(5, 4, 1));
    assert_int_equal(topo_next_hop(5, UINT32_MAX - 2, size, 1), 6);
    assert_int_equal(topo_next_hop(UINT32_MAX - 2, 3, size, 1), UINT32_MAX - 3);
    assert_int_equal(topo_nchildren(UINT32_MAX - 2, size, 1), 1);
    assert_int_equal(topo_nchildren(UINT32_MAX - 1, size, 1), 0);
    assert_int_equal(topo_child(UINT32_MAX - 1, 1, 0), TOPO_NONE);
    assert_int_equal(topo_deepest(size, 1), UINT32_MAX - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parent_children),
        cmocka_unit_test(test_in_subtree),
        cmocka_unit_test(test_next_hop_reaches_target),
        cmocka_unit_test(test_next_hop_bad_args),
        cmocka_unit_test(test_deepest),
        cmocka_unit_test(test_fanout_ge_size),
        cmocka_unit_test(test_overflow),
        cmocka_unit_test(test_huge_chain),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
