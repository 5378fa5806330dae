/* fuzz_idset.c - libFuzzer target for idset_decode().
 *
 * Any string that decodes must survive an encode/decode round trip
 * unchanged: the canonical form is what brokers send each other.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/idset.h"

/* Longer strings add nothing the parser has not seen already. */
#define IDSET_FUZZ_MAX 65536

static void check_same(const idset_t *a, const idset_t *b)
{
    uint32_t x = idset_first(a), y = idset_first(b);

    if (idset_count(a) != idset_count(b))
        abort();
    while (x != IDSET_INVALID || y != IDSET_INVALID) {
        if (x != y)
            abort();
        x = idset_next(a, x);
        y = idset_next(b, y);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eddy_error_t err;
    idset_t *s, *s2;
    char *str, *enc, *enc2;

    if (size > IDSET_FUZZ_MAX)
        return 0;
    err.text[0] = '\0';
    if (!(str = malloc(size + 1)))
        abort();
    memcpy(str, data, size);
    str[size] = '\0';
    if ((s = idset_decode(str, &err))) {
        if (!(enc = idset_encode(s)))
            abort();
        if (!(s2 = idset_decode(enc, &err)))
            abort();
        check_same(s, s2);
        /* Canonical means stable. */
        if (!(enc2 = idset_encode(s2)) || strcmp(enc, enc2) != 0)
            abort();
        free(enc2);
        free(enc);
        idset_destroy(s2);
        idset_destroy(s);
    } else if (strlen(err.text) == 0) {
        abort(); /* every failure explains itself */
    }
    free(str);
    return 0;
}
