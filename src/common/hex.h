/* hex.h - binary values written as hex digits (keys, nonces, MACs, sealed
 * tokens on the wire and in files). */
#ifndef EDDY_COMMON_HEX_H
#define EDDY_COMMON_HEX_H

#include <stddef.h>

/* Decode exactly 'outlen' bytes from the 'hexlen' hex digits at 'hex'
 * (no separators, nothing after them).  -1 with errno EINVAL if 'hex' is
 * NULL, has another length or a non-hex digit; 'out' may then be partly
 * written. */
int hex_decode(const char *hex,
               size_t hexlen,
               unsigned char *out,
               size_t outlen);

/* Write the 'n' bytes at 'b' as 2n lower-case hex digits and a NUL into
 * 'out' (room for 2n + 1). */
void hex_encode(const unsigned char *b, size_t n, char *out);

#endif /* !EDDY_COMMON_HEX_H */
