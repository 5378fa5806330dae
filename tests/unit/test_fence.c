/* test_fence - which contributions each broker waits for, and their
 * concatenation. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "src/broker/fence.h"
#include "src/common/topology.h"

static fence_t *mk(uint32_t rank,
                   uint32_t size,
                   uint32_t fanout,
                   const char *ranks)
{
    idset_t *s = idset_decode(ranks, NULL);
    fence_t *f;

    assert_non_null(s);
    f = fence_create(rank, size, fanout, s, NULL);
    idset_destroy(s);
    return f;
}

/* Every broker of a 16-broker binary tree, job on 3,7,12-15. */
static void test_sparse_fanout2(void **state)
{
    /* rank -> expects local?, expected children */
    fence_t *f;

    f = mk(0, 16, 2, "3,7,12-15");
    assert_non_null(f);
    assert_false(fence_expects_local(f));
    assert_true(fence_expects_child(f, 1)); /* 3,7,15 */
    assert_true(fence_expects_child(f, 2)); /* 12 under 5, 13,14 under 6 */
    assert_int_equal(fence_nexpected(f), 2);
    fence_destroy(f);

    f = mk(1, 16, 2, "3,7,12-15");
    assert_false(fence_expects_local(f));
    assert_true(fence_expects_child(f, 3));
    assert_false(fence_expects_child(f, 4)); /* 4,9,10 not in the job */
    assert_int_equal(fence_nexpected(f), 1);
    fence_destroy(f);

    f = mk(3, 16, 2, "3,7,12-15");
    assert_true(fence_expects_local(f));
    assert_true(fence_expects_child(f, 7));
    assert_false(fence_expects_child(f, 8));
    assert_int_equal(fence_nexpected(f), 2);
    fence_destroy(f);

    f = mk(7, 16, 2, "3,7,12-15");
    assert_true(fence_expects_local(f));
    assert_true(fence_expects_child(f, 15));
    assert_int_equal(fence_nexpected(f), 2);
    fence_destroy(f);

    /* 4 is neither in the job nor above it */
    errno = 0;
    assert_null(mk(4, 16, 2, "3,7,12-15"));
    assert_int_equal(errno, EINVAL);
    assert_null(mk(8, 16, 2, "3,7,12-15"));
}

/* Wider fanouts and the all-ranks case: the number of contributions is
 * local + children with a job rank below them. */
static void test_fanouts(void **state)
{
    uint32_t fanouts[] = {1, 2, 3, 8, 64};

    for (size_t k = 0; k < sizeof(fanouts) / sizeof(fanouts[0]); k++) {
        uint32_t fo = fanouts[k];
        for (uint32_t r = 0; r < 100; r++) {
            fence_t *f = mk(r, 100, fo, "0-99");
            assert_non_null(f);
            assert_true(fence_expects_local(f));
            assert_int_equal(fence_nexpected(f),
                             1 + topo_nchildren(r, 100, fo));
            assert_int_equal(fence_nslots(f), 1 + topo_nchildren(r, 100, fo));
            for (uint32_t i = 0; i < topo_nchildren(r, 100, fo); i++) {
                uint32_t c = topo_child(r, fo, i);
                assert_int_equal(fence_child_slot(f, c), 1 + (int)i);
                assert_int_equal(fence_slot_rank(f, 1 + (int)i), c);
            }
            fence_destroy(f);
        }
    }
    /* a single rank deep in a fanout-3 tree: only its path waits */
    for (uint32_t r = 0; r < 40; r++) {
        fence_t *f = mk(r, 40, 3, "38");
        bool on_path = topo_in_subtree(r, 38, 3);
        if (!on_path && r != 0) {
            assert_null(f);
            continue;
        }
        assert_non_null(f);
        assert_int_equal(fence_nexpected(f), 1);
        assert_int_equal(fence_expects_local(f), r == 38);
        fence_destroy(f);
    }
}

static void test_bad_args(void **state)
{
    idset_t *s = idset_decode("0-3", NULL);
    idset_t *empty = idset_create();
    eddy_error_t err;

    errno = 0;
    assert_null(fence_create(0, 0, 2, s, &err));
    assert_int_equal(errno, EINVAL);
    assert_null(fence_create(5, 4, 2, s, &err));
    assert_null(fence_create(0, 4, 0, s, &err));
    errno = 0;
    assert_null(fence_create(0, 4, 2, empty, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "empty"));
    errno = 0;
    assert_null(fence_create(0, 3, 2, s, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "rank 3"));
    idset_destroy(s);
    idset_destroy(empty);
}

/* Records are given with sizeof() so that their NULs count. */
#define REC(s) (s), (sizeof(s) - 1)

static void test_check_records(void **state)
{
    eddy_error_t err;

    assert_int_equal(fence_check_records(NULL, 0, &err), 0);
    assert_int_equal(fence_check_records(REC("a\0"
                                             "1\0"),
                                         &err),
                     1);
    /* an empty value is fine */
    assert_int_equal(fence_check_records(REC("a\0\0b\0"
                                             "2\0"),
                                         &err),
                     2);
    /* the same key twice is not the broker's business */
    assert_int_equal(fence_check_records(REC("a\0"
                                             "1\0a\0"
                                             "2\0"),
                                         &err),
                     2);
    errno = 0;
    assert_int_equal(fence_check_records(REC("a\0"
                                             "1"),
                                         &err),
                     -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "record 0"));
    errno = 0;
    assert_int_equal(fence_check_records(REC("a\0"
                                             "1\0b\0"),
                                         &err),
                     -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "record 1"));
    errno = 0;
    assert_int_equal(fence_check_records(REC("ab"), &err), -1);
    assert_int_equal(errno, EPROTO);
    errno = 0;
    assert_int_equal(fence_check_records(REC("\0"
                                             "1\0"),
                                         &err),
                     -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "empty key"));
}

static void test_merge(void **state)
{
    fence_t *f = mk(0, 3, 2, "0-2");
    eddy_error_t err;
    static const char want[] = "a\0"
                               "1\0b\0"
                               "2\0c\0"
                               "3\0z\0"
                               "9\0a\0x\0";

    assert_non_null(f);
    assert_null(fence_data(f));
    assert_int_equal(fence_add(f, FENCE_SLOT_LOCAL,
                               REC("a\0"
                                   "1\0b\0"
                                   "2\0"),
                               &err),
                     0);
    assert_false(fence_complete(f));
    /* the same slot twice */
    errno = 0;
    assert_int_equal(fence_add(f, FENCE_SLOT_LOCAL,
                               REC("c\0"
                                   "3\0"),
                               &err),
                     -1);
    assert_int_equal(errno, EINVAL);
    /* malformed records: refused, nothing added */
    errno = 0;
    assert_int_equal(fence_add(f, 1,
                               REC("c\0"
                                   "3\0d"),
                               &err),
                     -1);
    assert_int_equal(errno, EPROTO);
    assert_false(fence_slot_filled(f, 1));
    assert_int_equal(fence_nkeys(f), 2);
    assert_int_equal(fence_size(f), 8);
    assert_int_equal(fence_add(f, 1,
                               REC("c\0"
                                   "3\0"),
                               &err),
                     0);
    /* a slot out of range */
    errno = 0;
    assert_int_equal(fence_add(f, 3,
                               REC("c\0"
                                   "3\0"),
                               &err),
                     -1);
    assert_int_equal(errno, EINVAL);
    /* a key already there is kept: duplicates are found by the shells */
    assert_int_equal(fence_add(f, 2,
                               REC("z\0"
                                   "9\0a\0x\0"),
                               &err),
                     0);
    assert_true(fence_complete(f));
    assert_int_equal(fence_nkeys(f), 5);
    /* the bytes, in arrival order */
    assert_int_equal(fence_size(f), sizeof(want) - 1);
    assert_memory_equal(fence_data(f), want, sizeof(want) - 1);
    fence_destroy(f);

    /* empty contributions complete a fence with nothing in it */
    f = mk(0, 3, 2, "0,2");
    assert_non_null(f);
    assert_int_equal(fence_add(f, FENCE_SLOT_LOCAL, NULL, 0, &err), 0);
    assert_int_equal(fence_add(f, 2, NULL, 0, &err), 0);
    assert_true(fence_complete(f));
    assert_int_equal(fence_nkeys(f), 0);
    assert_int_equal(fence_size(f), 0);
    assert_null(fence_data(f));
    fence_destroy(f);
}

/* Many contributions: the buffer grows and keeps every byte. */
static void test_grow(void **state)
{
    fence_t *f = mk(0, 8, 7, "0-7");
    eddy_error_t err;
    char rec[3000];
    const char *d;

    assert_non_null(f);
    for (int s = 0; s < 8; s++) {
        rec[0] = (char)('a' + s);
        rec[1] = '\0';
        memset(rec + 2, 'A' + s, sizeof(rec) - 3);
        rec[sizeof(rec) - 1] = '\0';
        assert_int_equal(fence_add(f, s, rec, sizeof(rec), &err), 0);
    }
    assert_true(fence_complete(f));
    assert_int_equal(fence_nkeys(f), 8);
    assert_int_equal(fence_size(f), 8 * sizeof(rec));
    d = fence_data(f);
    for (int s = 0; s < 8; s++) {
        assert_int_equal(d[s * sizeof(rec)], 'a' + s);
        assert_int_equal(d[s * sizeof(rec) + 2], 'A' + s);
        assert_int_equal(d[(s + 1) * sizeof(rec) - 2], 'A' + s);
    }
    fence_destroy(f);
}

static void test_size_cap(void **state)
{
    fence_t *f = mk(0, 2, 2, "0-1");
    eddy_error_t err;
    size_t n = FENCE_KVS_MAX / 2;
    char *big = malloc(n + 1);

    assert_non_null(big);
    /* one record "a\0xxx...\0" of exactly half the cap */
    memset(big, 'x', n);
    big[0] = 'a';
    big[1] = '\0';
    big[n - 1] = '\0';
    assert_int_equal(fence_add(f, FENCE_SLOT_LOCAL, big, n, &err), 0);
    /* the other half plus one byte passes the cap */
    big[0] = 'b';
    big[n - 1] = 'x';
    big[n] = '\0';
    errno = 0;
    assert_int_equal(fence_add(f, 1, big, n + 1, &err), -1);
    assert_int_equal(errno, EFBIG);
    assert_false(fence_slot_filled(f, 1));
    assert_int_equal(fence_nkeys(f), 1);
    assert_int_equal(fence_size(f), n);
    /* exactly the cap is fine */
    big[n - 1] = '\0';
    assert_int_equal(fence_add(f, 1, big, n, &err), 0);
    assert_int_equal(fence_size(f), FENCE_KVS_MAX);
    free(big);
    fence_destroy(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sparse_fanout2),
        cmocka_unit_test(test_fanouts),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_check_records),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_size_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
