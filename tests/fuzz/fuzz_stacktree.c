/* fuzz_stacktree.c - libFuzzer target for the stack tree decoder.
 *
 * Trees arrive from other brokers as raw payloads.  Whatever decodes must
 * encode back to the very same bytes (the encoding is canonical) and print
 * in every form; merging it with a small tree must give the same result in
 * either order; every failure is EPROTO with a message.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/stacktree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Printed forms repeat each path's prefix, so they grow with depth times
 * input; 64 KiB of tree keeps each run fast. */
#define STACKTREE_FUZZ_MAX (1u << 16)

static stacktree_t *small_tree(void)
{
    const char *a[] = {"main", "solve", "MPI_Barrier"};
    const char *b[] = {"m", "b"};
    stacktree_t *t = stacktree_create();

    if (!t || stacktree_add(t, a, 3, 0) < 0 || stacktree_add(t, a, 2, 1) < 0 ||
        stacktree_add(t, b, 2, 1048575) < 0)
        abort();
    return t;
}

static char *text_of(const stacktree_t *t)
{
    char *s = stacktree_text(t);

    if (!s)
        abort();
    return s;
}

static void check_merge(const stacktree_t *d)
{
    stacktree_t *x = small_tree(), *y = stacktree_create();
    char *sx, *sy;

    if (!y || stacktree_merge(y, d) < 0 || stacktree_merge(x, d) < 0)
        abort();
    {
        stacktree_t *s = small_tree();
        if (stacktree_merge(y, s) < 0)
            abort();
        stacktree_destroy(s);
    }
    sx = text_of(x);
    sy = text_of(y);
    if (strcmp(sx, sy) != 0)
        abort();
    free(sx);
    free(sy);
    stacktree_destroy(x);
    stacktree_destroy(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eddy_error_t err = {{0}};
    stacktree_t *t;
    void *enc;
    size_t len;
    char *s;

    if (size > STACKTREE_FUZZ_MAX)
        return 0;
    errno = 0;
    if (!(t = stacktree_decode(data, size, &err))) {
        if (errno != EPROTO || strlen(err.text) == 0)
            abort(); /* every failure explains itself */
        return 0;
    }
    if (stacktree_encode(t, &enc, &len) < 0)
        abort();
    if (len != size || memcmp(enc, data, size) != 0)
        abort();
    free(enc);
    free(text_of(t));
    if (!(s = stacktree_json(t)))
        abort();
    free(s);
    if (!(s = stacktree_dot(t)))
        abort();
    free(s);
    if (!(s = stacktree_ranks(t)))
        abort();
    free(s);
    check_merge(t);
    stacktree_destroy(t);
    return 0;
}
