/* lineout.c - writing other processes' output (lineout.h). */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include "lineout.h"

int lineout_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                fd_set w;
                FD_ZERO(&w);
                FD_SET(fd, &w);
                (void)select(fd + 1, NULL, &w, NULL, NULL);
                continue;
            }
            if (errno == EPIPE && fd <= STDERR_FILENO) {
                signal(SIGPIPE, SIG_DFL);
                raise(SIGPIPE);
            }
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Print 'prefix' + the kept part + 'data' (+ a newline if 'newline') in
 * one write, so lines of concurrent writers do not interleave. */
static int emit_line(struct lineout *lo,
                     int fd,
                     const char *prefix,
                     const char *data,
                     size_t len,
                     bool newline)
{
    size_t plen = strlen(prefix);
    size_t total = plen + lo->len + len + (newline ? 1 : 0);
    char *line = malloc(total);
    int rc;

    if (!line) {
        errno = ENOMEM;
        return -1;
    }
    memcpy(line, prefix, plen);
    if (lo->len)
        memcpy(line + plen, lo->data, lo->len);
    if (len)
        memcpy(line + plen + lo->len, data, len);
    if (newline)
        line[total - 1] = '\n';
    rc = lineout_write_all(fd, line, total);
    free(line);
    lo->len = 0;
    return rc;
}

int lineout_label(struct lineout *lo,
                  int fd,
                  const char *prefix,
                  const void *data,
                  size_t len)
{
    const char *p = data;

    while (len > 0) {
        const char *nl = memchr(p, '\n', len);
        size_t n;

        if (nl) {
            n = (size_t)(nl - p) + 1;
            if (emit_line(lo, fd, prefix, p, n, false) < 0)
                return -1;
        } else if (lo->len + len > LINEOUT_LINE_MAX) {
            n = len;
            if (emit_line(lo, fd, prefix, p, n, true) < 0)
                return -1;
        } else {
            char *q = realloc(lo->data, lo->len + len);
            if (!q) {
                errno = ENOMEM;
                return -1;
            }
            lo->data = q;
            memcpy(lo->data + lo->len, p, len);
            lo->len += len;
            n = len;
        }
        p += n;
        len -= n;
    }
    return 0;
}

int lineout_flush(struct lineout *lo, int fd, const char *prefix)
{
    int rc = 0;

    if (lo->len > 0)
        rc = emit_line(lo, fd, prefix, NULL, 0, true);
    free(lo->data);
    lo->data = NULL;
    lo->len = 0;
    return rc;
}
