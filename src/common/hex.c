/* hex.c - binary values written as hex digits (hex.h). */
#include <errno.h>
#include <sodium.h>

#include "hex.h"

int hex_decode(const char *hex,
               size_t hexlen,
               unsigned char *out,
               size_t outlen)
{
    size_t len = 0;

    if (!hex || hexlen != 2 * outlen ||
        sodium_hex2bin(out, outlen, hex, hexlen, NULL, &len, NULL) != 0 ||
        len != outlen) {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

void hex_encode(const unsigned char *b, size_t n, char *out)
{
    sodium_bin2hex(out, 2 * n + 1, b, n);
}
