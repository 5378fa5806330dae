/* test_fence - which contributions each broker waits for, and merging. */
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

static void test_merge(void **state)
{
    fence_t *f = mk(0, 3, 2, "0-2");
    eddy_error_t err;
    json_t *a = json_pack("{s:s s:s}", "a", "1", "b", "2");
    json_t *b = json_pack("{s:s}", "c", "3");
    json_t *dup = json_pack("{s:s s:s}", "z", "9", "a", "x");
    json_t *notstr = json_pack("{s:i}", "n", 1);

    assert_non_null(f);
    assert_int_equal(fence_add(f, FENCE_SLOT_LOCAL, a, &err), 0);
    assert_false(fence_complete(f));
    /* the same slot twice */
    errno = 0;
    assert_int_equal(fence_add(f, FENCE_SLOT_LOCAL, b, &err), -1);
    assert_int_equal(errno, EINVAL);
    /* a duplicate key: refused, named, nothing merged */
    errno = 0;
    assert_int_equal(fence_add(f, 1, dup, &err), -1);
    assert_int_equal(errno, EEXIST);
    assert_non_null(strstr(err.text, "'a'"));
    assert_null(json_object_get(fence_kvs(f), "z"));
    assert_false(fence_slot_filled(f, 1));
    errno = 0;
    assert_int_equal(fence_add(f, 1, notstr, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_int_equal(fence_add(f, 1, b, &err), 0);
    /* a slot out of range */
    errno = 0;
    assert_int_equal(fence_add(f, 3, b, &err), -1);
    assert_int_equal(errno, EINVAL);
    {
        json_t *empty = json_object();
        assert_int_equal(fence_add(f, 2, empty, &err), 0);
        json_decref(empty);
    }
    assert_true(fence_complete(f));
    assert_int_equal(fence_nkeys(f), 3);
    assert_string_equal(json_string_value(json_object_get(fence_kvs(f), "c")),
                        "3");
    /* the size estimate is never below the real encoding */
    {
        char *t = json_dumps(fence_kvs(f), JSON_COMPACT);
        assert_true(fence_size(f) >= strlen(t));
        free(t);
    }
    json_decref(a);
    json_decref(b);
    json_decref(dup);
    json_decref(notstr);
    fence_destroy(f);
}

static void test_size_cap(void **state)
{
    fence_t *f = mk(0, 2, 2, "0-1");
    eddy_error_t err;
    size_t n = FENCE_KVS_MAX / 2;
    char *big = malloc(n + 1);
    json_t *a, *b;

    memset(big, 'x', n);
    big[n] = '\0';
    a = json_pack("{s:s}", "a", big);
    b = json_pack("{s:s}", "b", big);
    assert_int_equal(fence_add(f, FENCE_SLOT_LOCAL, a, &err), 0);
    errno = 0;
    assert_int_equal(fence_add(f, 1, b, &err), -1);
    assert_int_equal(errno, EFBIG);
    assert_int_equal(fence_nkeys(f), 1);
    /* escapes count: a quote takes two bytes, a control char six */
    assert_int_equal(fence_entry_size("k", "\"\x01", 2), 1 + 2 + 6 + 6);
    json_decref(a);
    json_decref(b);
    free(big);
    fence_destroy(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sparse_fanout2), cmocka_unit_test(test_fanouts),
        cmocka_unit_test(test_bad_args),       cmocka_unit_test(test_merge),
        cmocka_unit_test(test_size_cap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
