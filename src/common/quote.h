/* quote.h - a token of outside input, made safe to show in a message.
 *
 * Parsers name the offending part of their input in error messages; that
 * part may be long or hold control bytes.  quote_token() copies at most
 * 'max' bytes, replaces unprintable bytes with '?', and ends a cut token
 * with "...".
 */
#ifndef EDDY_COMMON_QUOTE_H
#define EDDY_COMMON_QUOTE_H

#include <stddef.h>

/* Fill 'out' (of 'outsz' bytes, at least 5) from p[0..len) and return
 * 'out'.  Never writes past 'outsz'; always NUL-terminates. */
const char *quote_token(
    char *out, size_t outsz, const char *p, size_t len, size_t max);

#endif /* !EDDY_COMMON_QUOTE_H */
