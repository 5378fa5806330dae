/* outlog.h - an output log with attachers: what job-io keeps for each job
 * and the tool service for each tool launch.
 *
 * A log is a sequence of records (a JSON body sent as a response, plus an
 * optional raw payload).  Attachers are streaming requests: each is sent
 * every record from the first, in order, then new ones live, while its
 * credit window has room; the client acknowledges what it delivered with
 * outlog_credit().  Once the log is ended, an attacher that has been sent
 * everything gets the end of its stream.
 *
 * Memory is bounded by a cap on what is kept for later attachers
 * (payload plus per-record overhead).  Records beyond it are kept only
 * until every current attacher has been sent them; their producer is told
 * when that happens (the release callback), so it can hold back further
 * output the way a terminal would.  Records appended with 'keep' (end of
 * stream markers, exit statuses: small, and needed to know how things
 * ended) are always kept.  Attachers that come later are told how many
 * payload bytes they missed ({"dropped": N} before the end).
 *
 * Lifecycle:
 *  1. outlog_create(cap).
 *  2. outlog_append() as output arrives; outlog_attach() /
 *     outlog_credit() / outlog_cancel() / outlog_disconnect() as clients
 *     come and go.
 *  3. outlog_end() when no more records will come (attachers then end
 *     once caught up), or outlog_fail() to end every attacher with an
 *     error.
 *  4. outlog_destroy(): attachers still there are dropped without a
 *     response; records still held are released.
 * All functions run on the broker's loop; none calls back into the caller
 * except through release callbacks.
 */
#ifndef EDDY_BROKER_OUTLOG_H
#define EDDY_BROKER_OUTLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

#include "service.h"

typedef struct outlog outlog_t;

/* A record held beyond the cap has been sent to every attacher that
 * needed it and is freed. */
typedef void (*outlog_release_f)(void *arg);

/* An attacher is sent records while fewer than this many payload bytes
 * wait for its credit. */
enum { OUTLOG_ATTACH_WINDOW = 4 << 20 };

/* A new empty log keeping at most 'cap' bytes.  NULL with errno ENOMEM. */
outlog_t *outlog_create(uint64_t cap);

/* See the lifecycle above.  Accepts NULL; leaves errno alone. */
void outlog_destroy(outlog_t *log);

/* Append a record: 'body' (stolen, also on failure; a JSON object) is the
 * response body attachers get, 'data'/'len' (copied) its payload.  With
 * 'keep' the record is always kept.  Returns 1 if the record went beyond
 * the cap and 'release' (may be NULL) will be called with 'arg' once it is
 * freed (from a later outlog_pump(), outlog_credit()... or
 * outlog_destroy(), never from this call), 0 if it is kept, -1 with errno
 * ENOMEM (nothing appended) or EINVAL (a NULL log or body, or a log already
 * ended). */
int outlog_append(outlog_t *log,
                  json_t *body,
                  const void *data,
                  size_t len,
                  bool keep,
                  outlog_release_f release,
                  void *arg);

/* Feed the attachers and free what nobody needs any more (calling the
 * release callbacks).  Call after appending, when convenient: appends do
 * not send by themselves so that a caller may append several records and
 * answer its producer first. */
void outlog_pump(outlog_t *log);

/* Add streaming request 'req' (referenced) as an attacher whose credits
 * name it by 'key'.  Records are sent from the first one kept.  -1 with
 * errno ENOMEM or EINVAL. */
int outlog_attach(outlog_t *log, broker_req_t *req, uint64_t key);

/* 'bytes' of the attach with 'key' from connection 'origin' were
 * delivered: its window has room again (oldest matching attacher first). */
void outlog_credit(outlog_t *log,
                   uint64_t origin,
                   uint64_t key,
                   uint64_t bytes);

/* If 'cancel' cancels one of the log's attachers, end that attacher's
 * stream (ENODATA) and drop it: true.  False if it is not this log's. */
bool outlog_cancel(outlog_t *log, broker_req_t *cancel);

/* Drop the attachers of connection 'origin' (gone: nothing is sent). */
void outlog_disconnect(outlog_t *log, uint64_t origin);

/* No more records: attachers end (EOS, after {"dropped"} if they missed
 * output) once they have been sent everything; later attachers get the
 * whole kept log, then the end. */
void outlog_end(outlog_t *log);

/* End every attacher with error 'errnum' and message 'text'. */
void outlog_fail(outlog_t *log, int errnum, const char *text);

/* True once outlog_end() was called. */
bool outlog_ended(const outlog_t *log);

/* Bytes kept for later attachers (payload plus record overhead), and how
 * many attachers the log has now.  0 for NULL. */
uint64_t outlog_kept(const outlog_t *log);
size_t outlog_nattachers(const outlog_t *log);

#endif /* !EDDY_BROKER_OUTLOG_H */
