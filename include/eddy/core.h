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
 *     eddy_future_get()/eddy_future_wait_for(), which run the loop until the
 *     future is ready.  Event-driven tools register continuations with
 *     eddy_future_then() and either run the loop themselves
 *     (eddy_get_loop(), uv_run()) or poll eddy_get_fd() from their own
 *     event loop and call eddy_dispatch() when it is readable.
 *  4. eddy_close() cancels nothing remotely: it drops the connection, which
 *     makes the broker clean up after the client (kill its exec'd
 *     processes, drop its subscriptions).
 *
 * Thread safety: a handle and its futures belong to one thread.
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
 * failure (and leave it alone on success). */
typedef struct {
    char text[256];
} eddy_error_t;

typedef struct eddy eddy_t;
typedef struct eddy_future eddy_future_t;

/* Called when a future becomes ready (or its timeout expires, in which case
 * eddy_future_get() fails with ETIMEDOUT). */
typedef void (*eddy_continuation_f)(eddy_future_t *f, void *arg);

/* Target ranks. */
#define EDDY_RANK_ANY 0xFFFFFFFFu /* the broker the handle is attached to */
#define EDDY_RANK_UPSTREAM 0xFFFFFFFEu /* that broker's parent in the tree */

/* eddy_rpc flags */
enum {
    EDDY_RPC_STREAMING = 1,  /* many responses; the last one ends the stream */
    EDDY_RPC_NORESPONSE = 2, /* fire and forget: the future is ready at once */
};

/* eddy_open flags */
enum {
    EDDY_OPEN_TRACE = 1, /* print every message to stderr (also EDDY_TRACE=1) */
};

/* Connect to the instance at 'uri' (local://PATH), or $EDDY_URI when 'uri'
 * is NULL.  Returns a handle the caller destroys with eddy_close(), or NULL
 * with errno set and 'err' filled:
 *   EINVAL  malformed URI, or no URI and $EDDY_URI unset
 *   ENOENT  no instance at that path
 *   EACCES  the socket is not reachable for this user
 *   EPERM   the broker refused this user (not the instance owner)
 *   EPROTO  the peer did not speak the eddy protocol
 */
eddy_t *eddy_open(const char *uri, int flags, eddy_error_t *err);

/* Close the connection, destroy every future still attached to the handle
 * and free the handle.  Accepts NULL; leaves errno alone. */
void eddy_close(eddy_t *h);

/* The rank and size of the instance the handle talks to (from the greeting). */
uint32_t eddy_get_rank(eddy_t *h);
uint32_t eddy_get_size(eddy_t *h);

/* The handle's libuv loop (a uv_loop_t *, typed void * so this header does
 * not require uv.h).  Callers may run it with uv_run() to dispatch
 * continuations. */
void *eddy_get_loop(eddy_t *h);

/* A file descriptor that becomes readable when eddy_dispatch() has work to
 * do, for callers with their own poll/epoll/libuv loop.  -1 with errno on
 * error. */
int eddy_get_fd(eddy_t *h);

/* Run ready callbacks without blocking.  0 on success, -1 with errno
 * (EDEADLK when called from inside one of the handle's own callbacks). */
int eddy_dispatch(eddy_t *h);

/* Send a request with topic 'topic' to 'rank'.  'json' is a JSON object
 * (text, may be NULL for {}), 'data'/'len' an optional raw payload.
 * Returns a future the caller destroys with eddy_future_destroy(), or NULL
 * with errno (EINVAL bad arguments or JSON, ENOTCONN connection lost,
 * ENOMEM). */
eddy_future_t *eddy_rpc(eddy_t *h,
                        const char *topic,
                        uint32_t rank,
                        int flags,
                        const char *json,
                        const void *data,
                        size_t len);

/* Like eddy_rpc() with the body built by jansson's json_pack() format. */
eddy_future_t *eddy_rpc_pack(eddy_t *h,
                             const char *topic,
                             uint32_t rank,
                             int flags,
                             const char *fmt,
                             ...);

/* Wait (running the loop) until 'f' is ready, then return the response body
 * as JSON text in '*json' (owned by the future, valid until the next reset
 * or destroy).  -1 with errno set to the error the responder sent (then
 * eddy_future_error_string() says why), ENODATA at the end of a stream,
 * ETIMEDOUT, EDEADLK (called from a callback while not ready). */
int eddy_rpc_get(eddy_future_t *f, const char **json);

/* Like eddy_rpc_get() but unpacks the body with a json_unpack() format.
 * EPROTO if the body does not match the format. */
int eddy_rpc_get_unpack(eddy_future_t *f, const char *fmt, ...);

/* The raw payload of the current response (NULL/0 if none). Same errors as
 * eddy_rpc_get(). */
int eddy_rpc_get_raw(eddy_future_t *f, const void **data, size_t *len);

/* The topic of the current response (for event streams, the event topic). */
const char *eddy_rpc_get_topic(eddy_future_t *f);

/* Ask the responder to stop a streaming RPC; the stream ends with a final
 * response (usually ECANCELED or ENODATA).  -1 with errno on error. */
int eddy_rpc_cancel(eddy_future_t *f);

/* Call 'cb' when 'f' is ready, or after 'timeout' seconds (< 0: never).  If
 * 'f' is already ready, 'cb' is called from the next loop iteration, never
 * from inside this call.  -1 with errno (EINVAL) and 'cb' is never called. */
int eddy_future_then(eddy_future_t *f,
                     double timeout,
                     eddy_continuation_f cb,
                     void *arg);

/* Run the loop until 'f' is ready or 'timeout' seconds pass (< 0: forever).
 * 0 when ready; -1 with errno ETIMEDOUT, ENOTCONN (connection lost before a
 * response could come), EDEADLK (called from inside a callback). */
int eddy_future_wait_for(eddy_future_t *f, double timeout);

/* True if a response (or error) is waiting to be read. */
bool eddy_future_is_ready(eddy_future_t *f);

/* Consume the current response of a streaming future; the future becomes
 * ready again with the next one. */
void eddy_future_reset(eddy_future_t *f);

/* The error message of a failed future ("" if none). Owned by the future. */
const char *eddy_future_error_string(eddy_future_t *f);

/* The handle a future belongs to. */
eddy_t *eddy_future_get_handle(eddy_future_t *f);

/* Destroy a future; an unfinished streaming RPC is cancelled first.  Safe
 * to call from the future's own continuation.  Accepts NULL; leaves errno
 * alone. */
void eddy_future_destroy(eddy_future_t *f);

/* Subscribe to events whose topic starts with 'prefix'.  Returns a
 * streaming future: each event makes it ready (eddy_rpc_get_topic() is the
 * event topic, eddy_rpc_get() its body).  Destroy it to unsubscribe. */
eddy_future_t *eddy_event_subscribe(eddy_t *h, const char *prefix);

/* Publish an event to every broker of the instance (via rank 0).  The
 * future is ready once rank 0 has accepted it. */
eddy_future_t *eddy_event_publish(eddy_t *h,
                                  const char *topic,
                                  const char *json);

/* The text of an eddy errno, e.g. for EHOSTUNREACH. Never NULL. */
const char *eddy_strerror(int errnum);

#ifdef __cplusplus
}
#endif

#endif /* !EDDY_CORE_H */
