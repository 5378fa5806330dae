/* quote.c - see quote.h */
#include <string.h>

#include "quote.h"

const char *quote_token(
    char *out, size_t outsz, const char *p, size_t len, size_t max)
{
    size_t n = 0;

    /* Leave room for "..." and the NUL in every iteration. */
    for (size_t i = 0; i < len && n + 4 < outsz; i++) {
        if (i == max) {
            memcpy(out + n, "...", 3);
            n += 3;
            break;
        }
        out[n++] = (p[i] >= 0x20 && p[i] < 0x7f) ? p[i] : '?';
    }
    out[n] = '\0';
    return out;
}
