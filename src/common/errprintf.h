/* errprintf.h - fill an eddy_error_t with a human message.
 *
 * Library code returns -1 with errno set; where a message helps the caller
 * it also fills an eddy_error_t.  errprintf() keeps errno as it was so the
 * idiom `return errprintf(err, "rank %u: ...", rank);` works after the
 * failing call has set errno.
 */
#ifndef EDDY_COMMON_ERRPRINTF_H
#define EDDY_COMMON_ERRPRINTF_H

#include "eddy/core.h"

/* Format into err->text (if err is not NULL), preserve errno, return -1. */
int errprintf(eddy_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Clear an error message. Accepts NULL. */
void err_init(eddy_error_t *err);

#endif /* !EDDY_COMMON_ERRPRINTF_H */
