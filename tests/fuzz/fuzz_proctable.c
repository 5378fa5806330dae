/* fuzz_proctable.c - libFuzzer target for the process table decoder.
 *
 * Fragments arrive from other brokers as raw payloads.  Whatever decodes
 * must encode back to the very same bytes (the encoding is canonical), and
 * decoding those again must give the same table entry by entry.  The input
 * is also merged into a small table, to reach the merge paths: a merge
 * either adds every entry or changes nothing.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/proctable.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Bigger inputs only make bigger tables of the same shapes. */
#define PROCTABLE_FUZZ_MAX (1u << 20)

static void check_same(proctable_t *a, proctable_t *b)
{
    size_t n = proctable_count(a);

    if (proctable_count(b) != n)
        abort();
    for (size_t i = 0; i < n; i++) {
        struct proctable_entry x, y;

        if (proctable_get(a, i, &x) < 0 || proctable_get(b, i, &y) < 0)
            abort();
        if (x.rank != y.rank || x.broker_rank != y.broker_rank ||
            x.appnum != y.appnum || x.pid != y.pid ||
            strcmp(x.hostname, y.hostname) != 0 ||
            strcmp(x.executable, y.executable) != 0)
            abort();
    }
}

/* 'decoded' is the entry count of the input, or -1 if it did not decode. */
static void check_merge(const uint8_t *data, size_t size, long decoded)
{
    struct proctable_entry e = {3, 0, 0, 1, "fuzzhost", "/fuzz/exe"};
    eddy_error_t err = {{0}};
    proctable_t *pt = proctable_create();

    if (!pt || proctable_add(pt, &e) < 0)
        abort();
    if (proctable_merge_encoded(pt, data, size, &err) == 0) {
        if (decoded < 0 || proctable_count(pt) != 1 + (size_t)decoded)
            abort();
    } else {
        if (proctable_count(pt) != 1 || strlen(err.text) == 0)
            abort();
        if (errno != EPROTO && errno != EEXIST && errno != E2BIG &&
            errno != ENOMEM)
            abort();
    }
    proctable_destroy(pt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eddy_error_t err = {{0}};
    proctable_t *t, *t2;
    void *enc;
    size_t len;
    long decoded = -1;

    if (size > PROCTABLE_FUZZ_MAX)
        return 0;
    if ((t = proctable_decode(data, size, &err))) {
        size_t prev = 0;

        decoded = (long)proctable_count(t);
        /* Strictly increasing ranks: the decoder let no overlap through. */
        for (size_t i = 0; i < proctable_count(t); i++) {
            struct proctable_entry x;
            if (proctable_get(t, i, &x) < 0 || x.pid <= 0 || x.appnum < 0)
                abort();
            if (i > 0 && x.rank <= prev)
                abort();
            prev = x.rank;
        }
        if (proctable_encode(t, &enc, &len) < 0)
            abort();
        if (len != size || memcmp(enc, data, size) != 0)
            abort();
        if (!(t2 = proctable_decode(enc, len, &err)))
            abort();
        check_same(t, t2);
        free(enc);
        proctable_destroy(t2);
        proctable_destroy(t);
    } else if (strlen(err.text) == 0) {
        abort(); /* every failure explains itself */
    }
    check_merge(data, size, decoded);
    return 0;
}
