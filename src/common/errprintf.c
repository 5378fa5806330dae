/* errprintf.c - fill an eddy_error_t with a human message. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "errprintf.h"

int errprintf(eddy_error_t *err, const char *fmt, ...)
{
    int saved_errno = errno;

    if (err) {
        va_list ap;

        va_start(ap, fmt);
        /* Truncation is fine: the message is for humans. */
        (void)vsnprintf(err->text, sizeof(err->text), fmt, ap);
        va_end(ap);
    }
    errno = saved_errno;
    return -1;
}

void err_init(eddy_error_t *err)
{
    if (err)
        err->text[0] = '\0';
}
