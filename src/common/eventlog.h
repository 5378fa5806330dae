/* eventlog.h - RFC 18 style event logs: one JSON object per line.
 *
 * An eventlog is text made of entries, each a single line ending in '\n':
 *
 *   {"timestamp":1700000000.25,"name":"alloc","context":{"R":{...}}}
 *
 * "timestamp" is a finite number >= 0 (seconds since the epoch), "name" is
 * 1..EVENTLOG_NAME_MAX characters of [a-z0-9_.-], and "context" is an
 * optional JSON object.  No other key is allowed.  See docs/eventlog.md.
 *
 * Lifecycle of an in-memory log:
 *  1. eventlog_create(max_bytes), or eventlog_decode() from text.
 *  2. eventlog_append() adds entries; eventlog_count()/eventlog_entry()
 *     read them back.
 *  3. eventlog_encode() gives the whole log as text, eventlog_encode_from()
 *     only the entries a follower has not seen yet.
 *  4. eventlog_destroy().
 *
 * Invariants:
 *  - the log holds entries in canonical form (compact JSON, keys in the
 *    order timestamp, name, context): what eventlog_encode() returns always
 *    decodes back to the same entries;
 *  - the encoded size never exceeds the max_bytes given at creation, so a
 *    job's eventlog stays small whatever its events carry.
 *
 * The module does no I/O and never logs.
 */
#ifndef EDDY_COMMON_EVENTLOG_H
#define EDDY_COMMON_EVENTLOG_H

#include <stddef.h>

#include <jansson.h>

#include "eddy/core.h"

/* Event names are identifiers, not free text: short enough to print in a
 * column, and a fixed alphabet so they need no quoting anywhere. */
#define EVENTLOG_NAME_MAX 64

typedef struct eventlog eventlog_t;

/* Return 1 if 'name' is a valid event name, 0 otherwise (NULL is not). */
int eventlog_name_valid(const char *name);

/* Encode one entry as a line ending in '\n'.  'context' may be NULL (the
 * entry then has no "context" key); it is borrowed.  Caller frees the
 * result.  NULL with errno:
 *   EINVAL  bad name, timestamp not finite or < 0, context not an object
 *           or not encodable strictly (e.g. a string holding a NUL byte)
 *   ENOMEM  out of memory
 */
char *eventlog_entry_encode(double timestamp,
                            const char *name,
                            const json_t *context);

/* Decode one entry from line[0..len), which may end with a single '\n'.
 * Strict: exactly one JSON object on one line, with exactly the keys
 * "timestamp", "name" and optionally "context", each of the right type.
 * On success fill *timestamp, *name (caller frees) and *context (a new
 * reference the caller owns, or NULL when the entry has none); any output
 * pointer may be NULL if the caller does not want that part.  On failure
 * outputs are untouched, -1 is returned with errno EINVAL (ENOMEM if out of
 * memory) and 'err' says what is wrong ("eventlog: 'name' must be a
 * string"). */
int eventlog_entry_decode(const char *line,
                          size_t len,
                          double *timestamp,
                          char **name,
                          json_t **context,
                          eddy_error_t *err);

/* Create an empty log whose encoded size may not exceed 'max_bytes'
 * (> 0).  Destroy with eventlog_destroy().  NULL with errno EINVAL
 * (max_bytes is 0) or ENOMEM. */
eventlog_t *eventlog_create(size_t max_bytes);

/* Destroy 'log'.  Accepts NULL, leaves errno alone. */
void eventlog_destroy(eventlog_t *log);

/* Append an entry.  'context' is borrowed: the log keeps its own copy (the
 * copy a reader decoding the log would get).  -1 with errno:
 *   EINVAL  as for eventlog_entry_encode()
 *   ENOSPC  the log would exceed its max_bytes (the log is unchanged)
 *   ENOMEM  out of memory
 */
int eventlog_append(eventlog_t *log,
                    double timestamp,
                    const char *name,
                    const json_t *context);

/* Number of entries (0 for NULL). */
size_t eventlog_count(const eventlog_t *log);

/* Encoded size in bytes, i.e. strlen(eventlog_encode(log)) (0 for NULL). */
size_t eventlog_size(const eventlog_t *log);

/* The limit given at creation (0 for NULL). */
size_t eventlog_max_bytes(const eventlog_t *log);

/* Read entry 'index' (0-based).  Outputs are borrowed from the log and stay
 * valid until it is destroyed (entries are never changed or removed);
 * *context is NULL for an entry without one.  Any output pointer may be
 * NULL.  -1 with errno EINVAL (log is NULL) or ERANGE (no such entry),
 * outputs untouched. */
int eventlog_entry(const eventlog_t *log,
                   size_t index,
                   double *timestamp,
                   const char **name,
                   const json_t **context);

/* The whole log as text ("" when empty).  Caller frees.  NULL with errno
 * EINVAL or ENOMEM. */
char *eventlog_encode(const eventlog_t *log);

/* The entries from 'first_index' on, as text: what a follower that has
 * already seen the first 'first_index' entries still needs.  "" when
 * first_index == eventlog_count(log).  Caller frees.  NULL with errno
 * EINVAL (log is NULL), ERANGE (first_index > count) or ENOMEM. */
char *eventlog_encode_from(const eventlog_t *log, size_t first_index);

/* Decode a whole log from text[0..len).  Every entry must be a valid line
 * (see eventlog_entry_decode()) ending in '\n'; empty text is an empty
 * log.  The result has limit 'max_bytes'; text longer than that is refused
 * before it is parsed.  Destroy with eventlog_destroy().  NULL with errno
 * and 'err' naming the line ("eventlog: line 3: 'name' must be a
 * string"):
 *   EINVAL  malformed text, or max_bytes is 0
 *   ENOSPC  the text (or its canonical encoding) exceeds max_bytes
 *   ENOMEM  out of memory
 */
eventlog_t *eventlog_decode(const char *text,
                            size_t len,
                            size_t max_bytes,
                            eddy_error_t *err);

#endif /* !EDDY_COMMON_EVENTLOG_H */
