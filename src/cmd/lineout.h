/* lineout.h - writing other processes' output: whole, or line by line
 * with a label ("3: ") before each line, as `eddy run -l`, `eddy exec -l`
 * and `eddy tool` print it.
 *
 * Output arrives in pieces that need not end at a newline; a labelled
 * stream keeps its unfinished line in a struct lineout until the newline
 * (or its end) comes, so that lines of different sources never mix.  A
 * line longer than LINEOUT_LINE_MAX is printed in pieces, each ended by a
 * newline, so a source that never writes one cannot make us buffer
 * without bound.
 */
#ifndef EDDY_CMD_LINEOUT_H
#define EDDY_CMD_LINEOUT_H

#include <stddef.h>

#define LINEOUT_LINE_MAX (64 * 1024)

struct lineout {
    char *data; /* the unfinished line */
    size_t len;
};

/* Write all of 'data' to 'fd', waiting out EINTR and EAGAIN (a pipe left
 * non-blocking by someone else).  If stdout or stderr is a pipe whose
 * reader went away (`eddy ... | head`), end like any program in a
 * pipeline: by SIGPIPE.  -1 with errno on another error. */
int lineout_write_all(int fd, const void *data, size_t len);

/* Write 'data' to 'fd', each complete line after 'prefix'; the unfinished
 * end is kept in 'lo'.  -1 with errno (ENOMEM, or a write error). */
int lineout_label(struct lineout *lo,
                  int fd,
                  const char *prefix,
                  const void *data,
                  size_t len);

/* The source ended: print its unfinished line (with a newline) if any,
 * and free what 'lo' holds.  -1 with errno on a write error. */
int lineout_flush(struct lineout *lo, int fd, const char *prefix);

#endif /* !EDDY_CMD_LINEOUT_H */
