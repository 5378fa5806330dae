/* eddy/core.h - connect to an eddy instance, send RPCs, watch events.
 *
 * Lifecycle of a handle:
 *  1. eddy_open() connects to an instance (URI argument, else $EDDY_URI)
 *     and reads the broker's greeting, so a refused connection fails here
 *     with a message that says why.
 *  2. eddy_rpc*() sends a request and returns a future; the future becomes
 *     ready when a response arrives (streaming RPCs become ready once per
 *     response, eddy_future_reset() moves on to the next one).
 *  3. Responses are read by the handle's libuv loop.  Simple tools just call
 *     eddy_rpc_get()/eddy_future_wait_for(), which run the loop until the
 *     future is ready.  Event-driven tools register continuations with
 *     eddy_future_then() and either run the loop themselves
 *     (eddy_get_loop(), uv_run()) or poll eddy_get_fd() from their own
 *     event loop, for at most eddy_get_timeout() milliseconds, and call
 *     eddy_dispatch() when it is readable or the timeout expired.
 *  4. eddy_close() cancels nothing remotely: it drops the connection, which
 *     makes the broker clean up after the client (kill its exec'd
 *     processes, drop its subscriptions).
 *
 * Conventions:
 *  - Functions returning int return 0 on success and -1 with errno set on
 *    failure; functions returning a pointer return NULL with errno set.
 *    Output parameters are written only on success.
 *  - Strings returned by the library are owned by the object they came
 *    from (handle or future) and stay valid as documented per function;
 *    the caller never frees them.
 *  - Every function accepts a NULL handle/future and fails with EINVAL
 *    (or returns a neutral value where it cannot fail, as documented).
 *  - The state of a future's current response:
 *      response       eddy_rpc_get() returns 0 with its body
 *      error response eddy_rpc_get() fails with the responder's errno and
 *                     eddy_future_error_string() says why
 *      end of stream  eddy_rpc_get() fails with ENODATA (terminal)
 *      timed out      eddy_rpc_get() fails with ETIMEDOUT (terminal; only
 *                     the timeout of eddy_future_then() does this)
 *      connection     eddy_rpc_get() fails with ENOTCONN (terminal)
 *      lost
 *    A non-streaming RPC has one response: eddy_rpc_get() returns it as
 *    often as asked; after eddy_future_reset() it is at end of stream.
 *    A streaming RPC has any number of responses, then ends: with a
 *    response flagged as the last (delivered like any other, then ENODATA
 *    after a reset), a bare end-of-stream marker (ENODATA at once) or an
 *    error response (delivered, then ENODATA after a reset).
 *  - No call ever blocks forever on a broker that is gone: losing the
 *    connection fails every unfinished future with ENOTCONN.  A broker that
 *    is alive but never answers is only bounded by the timeouts of
 *    eddy_future_wait_for() and eddy_future_then().
 *
 * Signals: libuv writes to the broker's socket with write(2), which cannot
 * be told MSG_NOSIGNAL, so a write to a broker that just went away raises
 * SIGPIPE.  To fail futures with ENOTCONN rather than be killed, eddy_open()
 * sets the disposition of SIGPIPE to SIG_IGN for the whole process if (and
 * only if) it is SIG_DFL; a handler or SIG_IGN set by the program is left
 * alone.  Pass EDDY_OPEN_KEEP_SIGPIPE to keep SIG_DFL (e.g. a tool that
 * wants to die quietly when its stdout pipe closes); such a program must
 * then block, ignore or handle SIGPIPE itself while talking to the broker.
 *
 * Thread safety: a handle and its futures belong to one thread.  Different
 * handles may be used from different threads.
 */
#ifndef EDDY_CORE_H
#define EDDY_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define EDDY_VERSION_STRING "0.1.0"

/* A human-readable error message; functions that take one fill it on
 * failure (and leave it alone on success).  Owned by the caller; NULL is
 * accepted where a function takes one. */
typedef struct {
    char text[256];
} eddy_error_t;

typedef struct eddy eddy_t;
typedef struct eddy_future eddy_future_t;

/* Called when a future becomes ready (or its timeout expires, in which case
 * eddy_rpc_get() fails with ETIMEDOUT).  Runs from the handle's loop, never
 * from inside the API call that made the future ready.  Inside it the
 * handle's loop must not be run again: waiting for a future that is not
 * ready and eddy_dispatch() fail with EDEADLK, reading a ready one is fine.
 * It may destroy its own future or any other, and may call eddy_close()
 * (see there). */
typedef void (*eddy_continuation_f)(eddy_future_t *f, void *arg);

/* Target ranks. */
#define EDDY_RANK_ANY 0xFFFFFFFFu /* the broker the handle is attached to */
#define EDDY_RANK_UPSTREAM 0xFFFFFFFEu /* that broker's parent in the tree */

/* eddy_rpc flags */
enum {
    EDDY_RPC_STREAMING = 1,  /* many responses; the last one ends the stream */
    EDDY_RPC_NORESPONSE = 2, /* fire and forget: the future is ready at once
                                with an empty body {} */
};

/* eddy_open flags */
enum {
    EDDY_OPEN_TRACE = 1, /* print every message to stderr (also EDDY_TRACE=1) */
    EDDY_OPEN_KEEP_SIGPIPE = 2, /* never touch SIGPIPE (see "Signals") */
};

/* Connect to the instance at 'uri' (local://PATH, or tcp://HOST:PORT for an
 * instance started with `eddy start --listen`), or $EDDY_URI when 'uri'
 * is NULL, and wait (up to 10 s) for the broker's greeting.  For tcp://
 * the instance token is read first ($EDDY_TOKEN_FILE, else
 * $XDG_RUNTIME_DIR/eddy/tcp-HOST-PORT.token, else
 * ~/.local/state/eddy/tcp-HOST-PORT.token; docs/remote.md) and proven to
 * the broker, which proves it back.  'uri' is
 * copied.  Unless 'flags' has EDDY_OPEN_KEEP_SIGPIPE, sets SIGPIPE to
 * SIG_IGN if it is SIG_DFL (process-wide; see "Signals" above).
 * Returns a handle the caller destroys with eddy_close(), or NULL with
 * errno set and 'err' (may be NULL) filled:
 *   EINVAL        malformed URI, unknown flags, or no URI and $EDDY_URI
 *                 unset
 *   ENOENT        no instance at that path
 *   ECONNREFUSED  the socket exists but no broker listens on it
 *   EACCES        the socket is not reachable for this user; tcp://: the
 *                 token file is unreadable, a symlink, another user's or
 *                 readable by others
 *   ENOENT        also tcp://: no token file (the message names the path)
 *   EHOSTUNREACH  tcp://: the host name does not resolve
 *   EPERM         the broker refused this user (not the instance owner)
 *                 or the token (tcp://), or another errno the broker's
 *                 greeting carried
 *   EPROTO        the peer did not speak the eddy protocol, or (tcp://)
 *                 did not prove it holds the token
 *   ECONNRESET    the peer closed the connection before greeting
 *   ETIMEDOUT     no greeting within 10 s
 *   ENOMEM, EMFILE, ENFILE  out of resources
 */
eddy_t *eddy_open(const char *uri, int flags, eddy_error_t *err);

/* Close the connection, destroy every future still attached to the handle
 * (future pointers the caller still holds become invalid: do not destroy
 * them afterwards), close every libuv handle left on eddy_get_loop() (with
 * uv_close() and no callback; their memory stays the caller's) and free
 * the handle.  Accepts NULL; leaves errno alone.
 *
 * From inside a callback of 'h' (a continuation, or any libuv callback run
 * by eddy_dispatch() or a wait of 'h'), the loop is still running and
 * cannot be freed; eddy_close() then only shuts the handle down: the
 * connection is dropped at once, every unfinished future fails with
 * ENOTCONN, no further continuation of 'h' runs (a then() on it is
 * accepted but never called), and the handle no longer keeps its loop
 * alive, so uv_run() returns.  The handle, its loop and its futures stay
 * valid until the caller calls eddy_close() again from outside any
 * callback, which frees them; a handle never closed that way leaks.
 * eddy_close() must never be called while the caller's own uv_run() is
 * running on eddy_get_loop() from a callback that is not one of the
 * handle's (it cannot detect that). */
void eddy_close(eddy_t *h);

/* The rank of the broker the handle is attached to and the size of the
 * instance (from the greeting).  0 for a NULL handle. */
uint32_t eddy_get_rank(eddy_t *h);
uint32_t eddy_get_size(eddy_t *h);

/* The handle's libuv loop (a uv_loop_t *, typed void * so this header does
 * not require uv.h), owned by the handle.  Callers may run it with uv_run()
 * to dispatch continuations, and may add their own libuv handles to it
 * (closed by eddy_close()).  uv_run(UV_RUN_DEFAULT) returns once no RPC
 * awaits a response and no continuation is due.  Never call uv_run() on it
 * from inside one of its callbacks (libuv is not reentrant).  NULL for a
 * NULL handle. */
void *eddy_get_loop(eddy_t *h);

/* A file descriptor that becomes readable when eddy_dispatch() has I/O or
 * continuations to process, for callers with their own poll/epoll/libuv
 * loop (poll it for POLLIN; level-triggered).  Owned by the handle: do not
 * read or close it.  Timeouts do not make it readable: also wake up after
 * eddy_get_timeout() milliseconds.  -1 with errno EINVAL (NULL handle) or
 * ENOSYS (the platform's libuv has no such descriptor). */
int eddy_get_fd(eddy_t *h);

/* How long, in milliseconds, a caller polling eddy_get_fd() may block
 * before calling eddy_dispatch(), so that continuation timeouts fire on
 * time: 0 when work is due now, -1 when no timer is pending (block until
 * the descriptor is readable).  Measured from the time of the call; ask
 * again after every eddy_dispatch() and before every poll.  -1 with errno
 * EINVAL for a NULL handle. */
int eddy_get_timeout(eddy_t *h);

/* Process whatever is ready (I/O, expired timeouts, due continuations)
 * without blocking.  0 on success, -1 with errno EINVAL (NULL handle) or
 * EDEADLK (called from inside one of the handle's callbacks, or while the
 * handle is waiting for a future: libuv is not reentrant). */
int eddy_dispatch(eddy_t *h);

/* Send a request with topic 'topic' to 'rank' (a rank or EDDY_RANK_*).
 * 'json' is a JSON object as text (NULL for {}), 'data'/'len' an optional
 * raw payload (data may be NULL iff len is 0); all are copied.  'flags' is
 * 0, EDDY_RPC_STREAMING or EDDY_RPC_NORESPONSE.  The request is queued for
 * sending before this returns.  Returns a future the caller owns and
 * destroys with eddy_future_destroy(), or NULL with errno:
 *   EINVAL    NULL handle, empty or too long topic, bad flags, 'json' not
 *             an object, data NULL with len > 0, payload too large
 *   ENOTCONN  the connection is lost (or the handle was shut down)
 *   ENOMEM    out of memory
 */
eddy_future_t *eddy_rpc(eddy_t *h,
                        const char *topic,
                        uint32_t rank,
                        int flags,
                        const char *json,
                        const void *data,
                        size_t len);

/* Like eddy_rpc() with the body built by jansson's json_pack() format
 * (no payload).  EINVAL also when 'fmt' is NULL, the arguments do not
 * match it, or it does not build an object. */
eddy_future_t *eddy_rpc_pack(eddy_t *h,
                             const char *topic,
                             uint32_t rank,
                             int flags,
                             const char *fmt,
                             ...);

/* Wait (running the loop, without a timeout) until 'f' is ready, then
 * return the current response's body as compact JSON text in '*json' ("{}"
 * if the response has no body).  The text is owned by the future, valid
 * until the next eddy_future_reset() or eddy_future_destroy().  'json' may
 * be NULL, just to check that the RPC succeeded.  On failure '*json' is
 * left alone and errno is:
 *   the responder's errno  for an error response (eddy_future_error_string()
 *                          gives its message)
 *   ENODATA    end of a stream (for a plain or NORESPONSE RPC: its one
 *              response was reset away)
 *   ETIMEDOUT  the timeout of eddy_future_then() expired (terminal)
 *   ENOTCONN   the connection was lost before a response came
 *   EDEADLK    called from inside a callback while 'f' is not ready
 *   EINVAL     NULL future; ENOMEM out of memory
 * Use eddy_future_wait_for() first to bound the wait. */
int eddy_rpc_get(eddy_future_t *f, const char **json);

/* Like eddy_rpc_get() but unpacks the body ({} if none) with a
 * json_unpack() format.  Strings unpacked with "s" are owned by the future
 * and valid until the next reset or destroy.  Same errors as
 * eddy_rpc_get(), plus EINVAL for a NULL 'fmt' and EPROTO if the body does
 * not match the format (eddy_future_error_string() says how).  Outputs
 * are left alone when the future fails; on EPROTO, like json_unpack(),
 * values unpacked before the mismatch may have been stored. */
int eddy_rpc_get_unpack(eddy_future_t *f, const char *fmt, ...);

/* The raw payload of the current response in '*data'/'*len' (NULL/0 if
 * none; either pointer may be NULL).  Owned by the future, valid until the
 * next reset or destroy.  Same errors as eddy_rpc_get(); outputs are left
 * alone on failure. */
int eddy_rpc_get_raw(eddy_future_t *f, const void **data, size_t *len);

/* The topic of the current response (for event streams, the event topic),
 * including an error response; owned by the future, valid until the next
 * reset or destroy.  Does not wait: NULL when no response is queued (not
 * yet ready, end of stream, timed out, connection lost) or 'f' is NULL. */
const char *eddy_rpc_get_topic(eddy_future_t *f);

/* Ask the responder to stop a streaming RPC; responses already sent are
 * still delivered, then the stream ends with the responder's final
 * response (an end of stream, ENODATA, or an error such as ECANCELED).
 * Does not wait.  0 also when the stream is already over (nothing to
 * cancel).  -1 with errno EINVAL (NULL or not a streaming RPC), ENOTCONN
 * (connection lost while the stream was still open), ENOMEM. */
int eddy_rpc_cancel(eddy_future_t *f);

/* Call 'cb' (with 'arg') once when 'f' is ready, or once 'timeout' seconds
 * pass without a response (< 0: no timeout).  If 'f' is already ready,
 * 'cb' is called from the next loop iteration, never from inside this
 * call.  It is called again only after eddy_future_reset() when another
 * response is queued, or after another eddy_future_then() (which replaces
 * the continuation, 'arg' and timeout).  The timeout counts from this call
 * and again from each reset that leaves the future waiting; when it
 * expires the future is ready and finished for good: reads fail with
 * ETIMEDOUT, later responses are dropped, and a streaming RPC is
 * cancelled.  Callers that poll eddy_get_fd() must honour
 * eddy_get_timeout() for timeouts to fire.  -1 with errno (EINVAL for a
 * NULL 'f' or 'cb'; ENOMEM) and 'cb' is never called. */
int eddy_future_then(eddy_future_t *f,
                     double timeout,
                     eddy_continuation_f cb,
                     void *arg);

/* Run the loop until 'f' is ready or 'timeout' seconds pass (< 0: no
 * limit; 0: just check for what already arrived).  Continuations of other
 * futures may run meanwhile.  0 when a response is there to read,
 * including an error response (eddy_rpc_get() then fails with its errno)
 * and the end of a stream (eddy_rpc_get() then fails with ENODATA).  -1
 * with errno:
 *   ETIMEDOUT  'timeout' passed (the future stays usable: wait again), or
 *              the timeout of eddy_future_then() expired (for good)
 *   ENOTCONN   connection lost before a response could come
 *   EDEADLK    called from inside a callback while 'f' is not ready
 *   EINVAL     NULL future; ENOMEM  a response could not be queued
 * eddy_future_error_string() then says why. */
int eddy_future_wait_for(eddy_future_t *f, double timeout);

/* True if eddy_rpc_get() would not block: a response (or error response)
 * is queued, or the future reached a terminal state (end of stream, timed
 * out, connection lost).  Does not run the loop.  False for NULL. */
bool eddy_future_is_ready(eddy_future_t *f);

/* Consume the current response of a future (its body, payload, topic and
 * strings returned for it become invalid); the future becomes ready again
 * with the next queued response, or when the next one arrives.  Does
 * nothing when no response is queued (not yet ready, or a terminal state:
 * end of stream, timed out, connection lost), so a loop of get/reset ends
 * on ENODATA.  Resetting the only response of a plain RPC leaves it at
 * ENODATA.  Accepts NULL. */
void eddy_future_reset(eddy_future_t *f);

/* Why the last call on 'f' failed, or the error message of its current
 * error response ("" if none; the errno text if the responder sent no
 * message).  Owned by the future, valid until the next call on it.  Never
 * NULL ("" for a NULL future). */
const char *eddy_future_error_string(eddy_future_t *f);

/* The handle a future belongs to (not a new reference); NULL for NULL. */
eddy_t *eddy_future_get_handle(eddy_future_t *f);

/* Destroy a future and everything it returned; an unfinished streaming
 * RPC is cancelled first (a plain RPC is not: its response is dropped when
 * it arrives).  Its continuation is never called afterwards.  Safe to call
 * from the future's own continuation (freed when it returns) and from
 * another future's.  Accepts NULL; leaves errno alone. */
void eddy_future_destroy(eddy_future_t *f);

/* Subscribe to events whose topic starts with 'prefix' ("" for all).
 * Returns a streaming future the caller owns: each event makes it ready
 * (eddy_rpc_get_topic() is the event topic, eddy_rpc_get() its body; reset
 * to get the next).  Destroy it to unsubscribe.  NULL with errno as for
 * eddy_rpc() (EINVAL also for a NULL 'prefix'). */
eddy_future_t *eddy_event_subscribe(eddy_t *h, const char *prefix);

/* Publish an event with topic 'topic' and body 'json' (object text, NULL
 * for {}) to every broker of the instance (via rank 0).  Returns a future
 * the caller owns, ready once rank 0 has accepted the event (eddy_rpc_get()
 * then returns 0, or rank 0's error).  NULL with errno as for eddy_rpc(). */
eddy_future_t *eddy_event_publish(eddy_t *h,
                                  const char *topic,
                                  const char *json);

/* The text of an eddy errno, e.g. for EHOSTUNREACH.  Never NULL; not to be
 * freed, valid at least until the next call from the same thread. */
const char *eddy_strerror(int errnum);

/* ---- detection: is eddy the manager in charge here? ------------------
 *
 * The probe a tool-launch library runs before deciding to use eddy: which
 * instance is reachable from here, what it is, and whether the caller runs
 * inside one of its jobs.  The instance tried is $EDDY_URI if set (every
 * job and `eddy start` command has it), else the system instance:
 * $EDDY_SYSTEM_URI if set, else EDDY_SYSTEM_URI_DEFAULT. */

#define EDDY_SYSTEM_URI_DEFAULT "local:///run/eddy/local-0"

struct eddy_detect_info {
    bool reachable;   /* an instance answered at 'uri' (greeting received) */
    char uri[512];    /* the URI tried; "" if none could be chosen */
    char source[16];  /* where 'uri' came from: "EDDY_URI" or "system" */
    char version[32]; /* the broker's version ("" unless reachable) */
    uint32_t size;    /* brokers in the instance (0 unless reachable) */
    uint32_t rank;    /* the broker that answered (0 unless reachable) */
    bool in_job;      /* the caller runs inside a job: EDDY_JOB_ID is set,
                         and (if reachable) that job is active there */
    uint64_t jobid;   /* that job's ID (0 unless in_job) */
    char error[256];  /* why not reachable, as eddy_open() said ("" if
                         reachable) */
};

/* Fill '*info' (overwritten whole) by connecting to the instance in charge
 * (see above) and closing again; bounded by eddy_open()'s 10 s greeting
 * timeout.  'flags' must be 0.  Not finding an instance is an answer, not
 * an error: 0 with info->reachable false and info->error saying why.  -1
 * with errno EINVAL only for a NULL 'info' or unknown flags. */
int eddy_detect(struct eddy_detect_info *info, int flags);

/* Whether the caller runs inside a job: 1 if EDDY_JOB_ID holds a job ID
 * and, with 'h' (may be NULL: the environment alone decides), that job is
 * known to h's instance and not INACTIVE; 0 if not.  The ID goes to
 * '*jobid' (may be NULL) when 1 is returned.  -1 with errno when 'h' could
 * not be asked (the errno of eddy_job_info(), ETIMEDOUT after 10 s). */
int eddy_in_allocation(eddy_t *h, uint64_t *jobid);

#ifdef __cplusplus
}
#endif

#endif /* !EDDY_CORE_H */
