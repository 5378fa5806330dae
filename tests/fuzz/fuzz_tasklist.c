/* fuzz_tasklist.c - libFuzzer target for tasklist_decode().
 *
 * Any string that decodes must keep its invariants and survive an
 * encode/decode round trip unchanged; any string that does not must say
 * why.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/tasklist.h"

/* Longer strings add nothing the parser has not seen already. */
#define TASKLIST_FUZZ_MAX 65536

static void check_same(const tasklist_t *a, const tasklist_t *b)
{
    const struct tasklist_task *x = tasklist_tasks(a), *y = tasklist_tasks(b);
    size_t i, n = tasklist_count(a);

    if (n != tasklist_count(b))
        abort();
    for (i = 0; i < n; i++) {
        if (x[i].rank != y[i].rank || x[i].pid != y[i].pid)
            abort();
        if (x[i].rank >= TASKLIST_RANK_MAX || x[i].pid <= 0 ||
            x[i].pid >= TASKLIST_PID_MAX)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eddy_error_t err;
    tasklist_t *tl, *tl2;
    char *str, *enc, *enc2;

    if (size > TASKLIST_FUZZ_MAX)
        return 0;
    err.text[0] = '\0';
    if (!(str = malloc(size + 1)))
        abort();
    memcpy(str, data, size);
    str[size] = '\0';
    if ((tl = tasklist_decode(str, &err))) {
        if (!(enc = tasklist_encode(tl)))
            abort();
        if (!(tl2 = tasklist_decode(enc, &err)))
            abort();
        check_same(tl, tl2);
        /* Canonical means stable. */
        if (!(enc2 = tasklist_encode(tl2)) || strcmp(enc, enc2) != 0)
            abort();
        free(enc2);
        free(enc);
        tasklist_destroy(tl2);
        tasklist_destroy(tl);
    } else if (strlen(err.text) == 0) {
        abort(); /* every failure explains itself */
    }
    free(str);
    return 0;
}
