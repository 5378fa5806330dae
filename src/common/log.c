/* log.c - leveled logging to a bounded in-memory ring and a stream.
 *
 * Logging must never fail its caller: a line that cannot be stored (out of
 * memory) is still written to the stream, and a line that cannot be
 * written is silently dropped.  Not thread-safe: a broker logs from its
 * event loop thread only.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

/* Longer lines are truncated: a log line is for a human, and the ring's
 * memory must stay bounded (capacity * LOG_LINE_MAX). */
#define LOG_LINE_MAX 1024

/* The prefix names the daemon ("broker[3]"); anything longer is a bug. */
#define LOG_PREFIX_MAX 64

struct logline {
    double timestamp;
    int level;
    char *text; /* NULL for an unused slot */
};

struct logbuf {
    struct logline *ring;
    size_t capacity;
    size_t head;  /* index of the oldest line */
    size_t count; /* lines stored */
    int level;
    char prefix[LOG_PREFIX_MAX];
    FILE *stream;
};

logbuf_t *logbuf_create(size_t capacity, const char *prefix, FILE *stream)
{
    logbuf_t *lb;

    if (!(lb = calloc(1, sizeof(*lb))))
        goto nomem;
    if (capacity > 0 && !(lb->ring = calloc(capacity, sizeof(*lb->ring))))
        goto nomem;
    lb->capacity = capacity;
    lb->level = LOG_LEVEL_INFO;
    lb->stream = stream;
    if (prefix)
        snprintf(lb->prefix, sizeof(lb->prefix), "%s", prefix);
    return lb;
nomem:
    free(lb);
    errno = ENOMEM;
    return NULL;
}

void logbuf_destroy(logbuf_t *lb)
{
    int saved_errno = errno;

    if (lb) {
        for (size_t i = 0; i < lb->capacity; i++)
            free(lb->ring[i].text);
        free(lb->ring);
        free(lb);
    }
    errno = saved_errno;
}

void logbuf_set_level(logbuf_t *lb, int level)
{
    if (lb)
        lb->level = level;
}

const char *log_levelstr(int level)
{
    switch (level) {
    case 0:
        return "emerg";
    case 1:
        return "alert";
    case 2:
        return "crit";
    case LOG_LEVEL_ERR:
        return "err";
    case LOG_LEVEL_WARNING:
        return "warning";
    case LOG_LEVEL_NOTICE:
        return "notice";
    case LOG_LEVEL_INFO:
        return "info";
    case LOG_LEVEL_DEBUG:
        return "debug";
    }
    return "unknown";
}

static double now(void)
{
    struct timespec ts;

    if (clock_gettime(CLOCK_REALTIME, &ts) < 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ISO 8601 UTC with milliseconds: 2026-11-29T08:31:35.123Z */
static void format_time(double t, char *buf, size_t size)
{
    time_t sec = (time_t)t;
    long ms = (long)((t - (double)sec) * 1000.0);
    struct tm tm;

    if (ms < 0)
        ms = 0;
    if (ms > 999)
        ms = 999;
    if (!gmtime_r(&sec, &tm)) {
        snprintf(buf, size, "?");
        return;
    }
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
             tm.tm_min, tm.tm_sec, ms);
}

static void store(logbuf_t *lb, double t, int level, const char *text)
{
    struct logline *slot;
    char *copy;

    if (lb->capacity == 0 || !(copy = strdup(text)))
        return;
    if (lb->count < lb->capacity) {
        slot = &lb->ring[(lb->head + lb->count) % lb->capacity];
        lb->count++;
    } else {
        /* Full: the oldest slot becomes the newest. */
        slot = &lb->ring[lb->head];
        lb->head = (lb->head + 1) % lb->capacity;
        free(slot->text);
    }
    slot->timestamp = t;
    slot->level = level;
    slot->text = copy;
}

void logbuf_printf(logbuf_t *lb, int level, const char *fmt, ...)
{
    int saved_errno = errno; /* callers log and then return -1 */
    char text[LOG_LINE_MAX];
    va_list ap;
    size_t len;
    double t;

    if (!lb || !fmt || level > lb->level)
        goto out;
    va_start(ap, fmt);
    errno = saved_errno; /* so %m works */
    if (vsnprintf(text, sizeof(text), fmt, ap) < 0)
        text[0] = '\0';
    va_end(ap);
    /* A trailing newline would give an empty line on the stream. */
    len = strlen(text);
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r'))
        text[--len] = '\0';
    t = now();
    if (lb->stream) {
        char stamp[64];

        format_time(t, stamp, sizeof(stamp));
        fprintf(lb->stream, "%s %s%s%s: %s\n", stamp, lb->prefix,
                lb->prefix[0] ? " " : "", log_levelstr(level), text);
        fflush(lb->stream);
    }
    store(lb, t, level, text);
out:
    errno = saved_errno;
}

int logbuf_lines(logbuf_t *lb, logbuf_line_f cb, void *arg)
{
    if (!lb || !cb) {
        errno = EINVAL;
        return -1;
    }
    for (size_t i = 0; i < lb->count; i++) {
        struct logline *l = &lb->ring[(lb->head + i) % lb->capacity];
        int rc = cb(l->timestamp, l->level, l->text, arg);
        if (rc < 0)
            return rc;
    }
    return 0;
}
