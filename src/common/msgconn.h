/* msgconn.h - a message connection over a libuv stream (unix or TCP).
 *
 * Lifecycle:
 *  1. msgconn_create() takes ownership of an initialised, connected
 *     uv_stream_t (uv_tcp_t or uv_pipe_t, allocated with malloc) and starts
 *     reading.
 *  2. Each decoded frame is passed to the recv callback, which owns the
 *     message (msg_decref it when done).
 *  3. msgconn_send() encodes and queues a message; writes complete in the
 *     background.
 *  4. On EOF, a read/write error, or a protocol error, the close callback
 *     is called once with the errno and a reason; after that no more recv
 *     callbacks come.  The owner then calls msgconn_destroy().
 *  5. msgconn_destroy() may be called at any time, also from inside the
 *     connection's own callbacks: the stream is closed and the memory freed
 *     later, from the loop (uv_close callback), so no callback ever runs on
 *     freed memory.  No callbacks are made after msgconn_destroy().
 */
#ifndef EDDY_COMMON_MSGCONN_H
#define EDDY_COMMON_MSGCONN_H

#include <stddef.h>
#include <uv.h>

#include "msg.h"

typedef struct msgconn msgconn_t;

typedef void (*msgconn_recv_f)(msgconn_t *c, msg_t *msg, void *arg);
typedef void (*msgconn_close_f)(msgconn_t *c,
                                int errnum,
                                const char *reason,
                                void *arg);

/* NULL with errno on failure (the stream is then closed and freed). */
msgconn_t *msgconn_create(uv_loop_t *loop,
                          uv_stream_t *stream,
                          msgconn_recv_f recv_cb,
                          msgconn_close_f close_cb,
                          void *arg);
void msgconn_destroy(msgconn_t *c);

/* Queue 'msg' for sending (the connection does not keep a reference).
 * -1 with errno ENOTCONN (closed), EINVAL (message breaks a limit), ENOMEM. */
int msgconn_send(msgconn_t *c, const msg_t *msg);

/* Bytes queued and not yet written, for flow control. */
size_t msgconn_queued(const msgconn_t *c);

/* A printable peer description ("uid 1000 pid 42", "127.0.0.1:4000"),
 * set by the owner with msgconn_set_name(); "?" by default. */
const char *msgconn_name(const msgconn_t *c);
void msgconn_set_name(msgconn_t *c, const char *name);

/* Trace every message sent and received to stderr with a prefix. */
void msgconn_set_trace(msgconn_t *c, const char *prefix);

/* Owner's data pointer (the 'arg' given at create can be changed). */
void msgconn_set_arg(msgconn_t *c, void *arg);
void *msgconn_get_arg(const msgconn_t *c);

/* Lower the largest frame accepted (default MSG_FRAME_MAX), e.g. to a few
 * KiB until a peer has authenticated. */
void msgconn_set_max_frame(msgconn_t *c, size_t max_frame);

/* The underlying stream's fd (for SO_PEERCRED), or -1. */
int msgconn_fd(const msgconn_t *c);

#endif /* !EDDY_COMMON_MSGCONN_H */
