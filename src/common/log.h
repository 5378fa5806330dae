/* log.h - leveled logging to a bounded in-memory ring and a stream.
 *
 * Each broker keeps its recent log lines in a ring (what `eddy dmesg`
 * shows) and also writes them to a stream (its log file / stderr).
 *
 * Lifecycle:
 *  1. logbuf_create(capacity, stream) (stream may be NULL)
 *  2. logbuf_printf(lb, level, fmt, ...) from anywhere in the daemon
 *  3. logbuf_lines() walks the ring, oldest first
 *  4. logbuf_destroy()
 */
#ifndef EDDY_COMMON_LOG_H
#define EDDY_COMMON_LOG_H

#include <stdio.h>

enum log_level {
    LOG_LEVEL_ERR = 3,
    LOG_LEVEL_WARNING = 4,
    LOG_LEVEL_NOTICE = 5,
    LOG_LEVEL_INFO = 6,
    LOG_LEVEL_DEBUG = 7,
};

typedef struct logbuf logbuf_t;

/* Lines carry a prefix (e.g. "broker[3]") and a wall-clock timestamp. */
logbuf_t *logbuf_create(size_t capacity, const char *prefix, FILE *stream);
void logbuf_destroy(logbuf_t *lb);

/* Lines above 'level' are dropped (default LOG_LEVEL_INFO). */
void logbuf_set_level(logbuf_t *lb, int level);

void logbuf_printf(logbuf_t *lb, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Call cb for each stored line, oldest first; stops if cb returns < 0. */
typedef int (*logbuf_line_f)(double timestamp,
                             int level,
                             const char *line,
                             void *arg);
int logbuf_lines(logbuf_t *lb, logbuf_line_f cb, void *arg);

const char *log_levelstr(int level);

#endif /* !EDDY_COMMON_LOG_H */
