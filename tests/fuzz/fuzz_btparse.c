/* fuzz_btparse.c - libFuzzer target for btparse().
 *
 * The input is gdb's output, i.e. another program's text.  Every thread
 * handed out must respect the limits of btparse.h, and its frames must be
 * accepted as they are by stacktree_add(): that is how the tool daemon
 * uses them.  The tree they make must survive an encode/decode round trip.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/btparse.h"
#include "src/common/stacktree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Larger inputs only repeat the same line shapes. */
#define BTPARSE_FUZZ_MAX (1u << 20)

static int check_thread(const struct btparse_thread *th, void *arg)
{
    stacktree_t *t = arg;

    if (th->nframes < 1 || th->nframes > BTPARSE_FRAMES_MAX)
        abort();
    if (th->truncated && th->nframes != BTPARSE_FRAMES_MAX)
        abort();
    for (size_t i = 0; i < th->nframes; i++) {
        const char *s = th->frames[i];
        size_t len = strlen(s);

        if (len < 1 || len > BTPARSE_NAME_MAX)
            abort();
        for (size_t k = 0; k < len; k++)
            if (s[k] < 0x20 || s[k] > 0x7e)
                abort();
    }
    if (stacktree_add(t, th->frames, th->nframes, (uint32_t)th->lwp % 64) < 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eddy_error_t err = {{0}};
    stacktree_t *t, *t2;
    void *buf, *buf2;
    size_t len, len2;
    int n;

    if (size > BTPARSE_FUZZ_MAX)
        return 0;
    if (!(t = stacktree_create()))
        abort();
    n = btparse((const char *)data, size, check_thread, t, &err);
    if (n < 0 && (errno != E2BIG || strlen(err.text) == 0))
        abort(); /* only too many threads may fail, and says so */
    if (stacktree_encode(t, &buf, &len) < 0)
        abort();
    if (!(t2 = stacktree_decode(buf, len, &err)))
        abort();
    if (stacktree_encode(t2, &buf2, &len2) < 0 || len2 != len ||
        memcmp(buf, buf2, len) != 0)
        abort();
    free(buf);
    free(buf2);
    stacktree_destroy(t2);
    stacktree_destroy(t);
    return 0;
}
