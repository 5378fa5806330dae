/* eventlog.c - see eventlog.h */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errprintf.h"
#include "eventlog.h"
#include "quote.h"

/* How much of a bad key or name a message shows. */
#define QUOTE_MAX 32

/* Canonical form: compact, keys in insertion order (timestamp, name,
 * context), reals printed so that they parse back to the same double. */
#define EVENTLOG_DUMP_FLAGS (JSON_COMPACT | JSON_PRESERVE_ORDER)

struct entry {
    double timestamp;
    char *name;
    json_t *context; /* NULL when the entry has none */
    char *line;      /* canonical text, '\n' included */
    size_t len;
};

struct eventlog {
    struct entry *entries;
    size_t count;
    size_t alloc;
    size_t size; /* sum of entries[i].len */
    size_t max_bytes;
};

/* Fill 'err' with "eventlog: [line N: ]<message>", set errno, return -1.
 * lineno 0 means the entry stands alone (eventlog_entry_decode). */
static int line_error(eddy_error_t *err,
                      int errnum,
                      size_t lineno,
                      const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));

static int line_error(
    eddy_error_t *err, int errnum, size_t lineno, const char *fmt, ...)
{
    char msg[200];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    errno = errnum;
    if (lineno > 0)
        return errprintf(err, "eventlog: line %zu: %s", lineno, msg);
    return errprintf(err, "eventlog: %s", msg);
}

/* Check a name of exactly 'len' bytes (so an embedded NUL fails). */
static int name_valid_len(const char *name, size_t len)
{
    if (len < 1 || len > EVENTLOG_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

int eventlog_name_valid(const char *name)
{
    if (!name)
        return 0;
    return name_valid_len(name, strnlen(name, EVENTLOG_NAME_MAX + 1));
}

/* The strict decoder behind every way in: one line (an optional final
 * '\n'), one object, exactly the known keys. */
static int decode_line(const char *line,
                       size_t len,
                       size_t lineno,
                       double *timestamp,
                       char **name,
                       json_t **context,
                       eddy_error_t *err)
{
    char q[QUOTE_MAX + 8];
    json_error_t jerr;
    json_t *o = NULL, *ts, *nm, *ctx;
    const char *key;
    json_t *val;
    char *name_copy = NULL;
    double t;

    if (!line)
        return line_error(err, EINVAL, lineno, "no entry given");
    if (len > 0 && line[len - 1] == '\n')
        len--;
    if (len == 0)
        return line_error(err, EINVAL, lineno, "empty line");
    if (memchr(line, '\n', len))
        return line_error(err, EINVAL, lineno, "entry spans more than a line");
    if (!(o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr))) {
        if (json_error_code(&jerr) == json_error_out_of_memory)
            return line_error(err, ENOMEM, lineno, "out of memory");
        /* jansson quotes the input near the error: keep it printable. */
        return line_error(
            err, EINVAL, lineno, "invalid JSON at column %d: %s", jerr.column,
            quote_token(q, sizeof(q), jerr.text, strlen(jerr.text), QUOTE_MAX));
    }
    if (!json_is_object(o)) {
        line_error(err, EINVAL, lineno, "entry is not a JSON object");
        goto error;
    }
    json_object_foreach(o, key, val)
    {
        if (strcmp(key, "timestamp") != 0 && strcmp(key, "name") != 0 &&
            strcmp(key, "context") != 0) {
            line_error(err, EINVAL, lineno, "unknown key '%s'",
                       quote_token(q, sizeof(q), key, strlen(key), QUOTE_MAX));
            goto error;
        }
    }
    if (!(ts = json_object_get(o, "timestamp"))) {
        line_error(err, EINVAL, lineno, "'timestamp' is missing");
        goto error;
    }
    if (!json_is_number(ts)) {
        line_error(err, EINVAL, lineno, "'timestamp' must be a number");
        goto error;
    }
    t = json_number_value(ts);
    if (!isfinite(t) || t < 0) {
        line_error(err, EINVAL, lineno, "'timestamp' must be finite and >= 0");
        goto error;
    }
    if (!(nm = json_object_get(o, "name"))) {
        line_error(err, EINVAL, lineno, "'name' is missing");
        goto error;
    }
    if (!json_is_string(nm)) {
        line_error(err, EINVAL, lineno, "'name' must be a string");
        goto error;
    }
    if (!name_valid_len(json_string_value(nm), json_string_length(nm))) {
        line_error(err, EINVAL, lineno,
                   "'name' '%s' is not 1-%d characters of [a-z0-9_.-]",
                   quote_token(q, sizeof(q), json_string_value(nm),
                               json_string_length(nm), QUOTE_MAX),
                   EVENTLOG_NAME_MAX);
        goto error;
    }
    ctx = json_object_get(o, "context");
    if (ctx && !json_is_object(ctx)) {
        line_error(err, EINVAL, lineno, "'context' must be an object");
        goto error;
    }
    if (name && !(name_copy = strdup(json_string_value(nm)))) {
        line_error(err, ENOMEM, lineno, "out of memory");
        goto error;
    }
    /* Nothing can fail from here: outputs change only on success. */
    if (timestamp)
        *timestamp = t;
    if (name)
        *name = name_copy;
    if (context)
        *context = json_incref(ctx);
    json_decref(o);
    return 0;
error:
    json_decref(o); /* jansson leaves errno alone on free */
    return -1;
}

int eventlog_entry_decode(const char *line,
                          size_t len,
                          double *timestamp,
                          char **name,
                          json_t **context,
                          eddy_error_t *err)
{
    return decode_line(line, len, 0, timestamp, name, context, err);
}

/* Encode to a malloc'd line with '\n' and its length.  The result is
 * checked by the strict decoder, so nothing we write can fail to read
 * back; the decoded name and context are handed out when asked for. */
static char *encode_checked(double timestamp,
                            const char *name,
                            const json_t *context,
                            size_t *lenp,
                            char **name_out,
                            json_t **context_out)
{
    json_t *o = NULL;
    char *buf = NULL;
    size_t n;

    if (!eventlog_name_valid(name) || !isfinite(timestamp) || timestamp < 0 ||
        (context && !json_is_object(context))) {
        errno = EINVAL;
        return NULL;
    }
    if (!(o = json_object()) ||
        json_object_set_new(o, "timestamp", json_real(timestamp)) < 0 ||
        json_object_set_new(o, "name", json_string(name)) < 0)
        goto nomem;
    /* json_object_set() only takes a reference; the context is unchanged. */
    if (context && json_object_set(o, "context", (json_t *)context) < 0)
        goto nomem;
    if ((n = json_dumpb(o, NULL, 0, EVENTLOG_DUMP_FLAGS)) == 0)
        goto inval; /* too deep to encode, or a loop */
    if (!(buf = malloc(n + 2)))
        goto nomem;
    if (json_dumpb(o, buf, n, EVENTLOG_DUMP_FLAGS) != n)
        goto inval;
    buf[n] = '\n';
    buf[n + 1] = '\0';
    if (decode_line(buf, n + 1, 0, NULL, name_out, context_out, NULL) < 0)
        goto error; /* errno EINVAL (e.g. a NUL in a string) or ENOMEM */
    json_decref(o);
    *lenp = n + 1;
    return buf;
inval:
    errno = EINVAL;
    goto error;
nomem:
    errno = ENOMEM;
error:
    free(buf);
    json_decref(o);
    return NULL;
}

char *eventlog_entry_encode(double timestamp,
                            const char *name,
                            const json_t *context)
{
    size_t len;

    return encode_checked(timestamp, name, context, &len, NULL, NULL);
}

eventlog_t *eventlog_create(size_t max_bytes)
{
    eventlog_t *log;

    if (max_bytes == 0) {
        errno = EINVAL;
        return NULL;
    }
    if (!(log = calloc(1, sizeof(*log))))
        return NULL;
    log->max_bytes = max_bytes;
    return log;
}

void eventlog_destroy(eventlog_t *log)
{
    int saved_errno = errno;

    if (log) {
        for (size_t i = 0; i < log->count; i++) {
            free(log->entries[i].name);
            json_decref(log->entries[i].context);
            free(log->entries[i].line);
        }
        free(log->entries);
        free(log);
    }
    errno = saved_errno;
}

int eventlog_append(eventlog_t *log,
                    double timestamp,
                    const char *name,
                    const json_t *context)
{
    struct entry e = {.timestamp = timestamp};
    int saved_errno;

    if (!log) {
        errno = EINVAL;
        return -1;
    }
    if (!(e.line = encode_checked(timestamp, name, context, &e.len, &e.name,
                                  &e.context)))
        return -1;
    /* Written as a subtraction so a huge e.len cannot wrap around. */
    if (e.len > log->max_bytes - log->size) {
        errno = ENOSPC;
        goto error;
    }
    if (log->count == log->alloc) {
        size_t n = log->alloc ? log->alloc * 2 : 8;
        struct entry *v = realloc(log->entries, n * sizeof(*v));
        if (!v)
            goto error;
        log->entries = v;
        log->alloc = n;
    }
    log->entries[log->count++] = e;
    log->size += e.len;
    return 0;
error:
    saved_errno = errno;
    free(e.line);
    free(e.name);
    json_decref(e.context);
    errno = saved_errno;
    return -1;
}

size_t eventlog_count(const eventlog_t *log)
{
    return log ? log->count : 0;
}

size_t eventlog_size(const eventlog_t *log)
{
    return log ? log->size : 0;
}

size_t eventlog_max_bytes(const eventlog_t *log)
{
    return log ? log->max_bytes : 0;
}

int eventlog_entry(const eventlog_t *log,
                   size_t index,
                   double *timestamp,
                   const char **name,
                   const json_t **context)
{
    const struct entry *e;

    if (!log) {
        errno = EINVAL;
        return -1;
    }
    if (index >= log->count) {
        errno = ERANGE;
        return -1;
    }
    e = &log->entries[index];
    if (timestamp)
        *timestamp = e->timestamp;
    if (name)
        *name = e->name;
    if (context)
        *context = e->context;
    return 0;
}

char *eventlog_encode_from(const eventlog_t *log, size_t first_index)
{
    size_t size = 0, off = 0;
    char *s;

    if (!log) {
        errno = EINVAL;
        return NULL;
    }
    if (first_index > log->count) {
        errno = ERANGE;
        return NULL;
    }
    for (size_t i = first_index; i < log->count; i++)
        size += log->entries[i].len;
    if (!(s = malloc(size + 1)))
        return NULL;
    for (size_t i = first_index; i < log->count; i++) {
        memcpy(s + off, log->entries[i].line, log->entries[i].len);
        off += log->entries[i].len;
    }
    s[off] = '\0';
    return s;
}

char *eventlog_encode(const eventlog_t *log)
{
    return eventlog_encode_from(log, 0);
}

eventlog_t *eventlog_decode(const char *text,
                            size_t len,
                            size_t max_bytes,
                            eddy_error_t *err)
{
    eventlog_t *log = NULL;
    size_t off = 0, lineno = 0;

    if (max_bytes == 0 || (!text && len > 0)) {
        errno = EINVAL;
        errprintf(err, "eventlog: invalid argument");
        return NULL;
    }
    /* Refuse before parsing: a hostile text costs us nothing. */
    if (len > max_bytes) {
        errno = ENOSPC;
        errprintf(err, "eventlog: %zu bytes exceeds the limit of %zu", len,
                  max_bytes);
        return NULL;
    }
    if (!(log = eventlog_create(max_bytes))) {
        errprintf(err, "eventlog: out of memory");
        return NULL;
    }
    while (off < len) {
        const char *line = text + off;
        const char *nl = memchr(line, '\n', len - off);
        size_t n = nl ? (size_t)(nl - line) + 1 : len - off;
        double ts;
        char *name = NULL;
        json_t *ctx = NULL;
        int rc;

        lineno++;
        if (decode_line(line, n, lineno, &ts, &name, &ctx, err) < 0)
            goto error;
        /* Checked after the content so a bad last line is named as such. */
        if (!nl) {
            free(name);
            json_decref(ctx);
            line_error(err, EINVAL, lineno, "entry does not end with newline");
            goto error;
        }
        rc = eventlog_append(log, ts, name, ctx);
        free(name);
        json_decref(ctx);
        if (rc < 0) {
            if (errno == ENOSPC)
                line_error(err, ENOSPC, lineno,
                           "log exceeds the limit of %zu bytes", max_bytes);
            else
                line_error(err, errno, lineno, "cannot store entry");
            goto error;
        }
        off += n;
    }
    return log;
error:
    eventlog_destroy(log);
    return NULL;
}
