/* msgconn.c - a message connection over a libuv stream.
 *
 * Memory safety rests on one rule: the connection is freed only from the
 * stream's uv_close callback.  libuv runs every pending write callback
 * (with UV_ECANCELED) before that close callback, so write requests may
 * always touch the connection, and msgconn_destroy() may be called from
 * anywhere, including the connection's own recv and close callbacks.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errprintf.h"
#include "msgconn.h"

/* One read buffer per connection, reused: the decoder copies what it keeps,
 * so a large buffer only saves system calls. */
#define READ_BUF_SIZE (64 * 1024)

struct msgconn {
    uv_loop_t *loop;
    uv_stream_t *stream;
    msg_decoder_t *decoder;
    msgconn_recv_f recv_cb;
    msgconn_close_f close_cb;
    void *arg;

    bool closed;    /* close_cb called (or due): no more recv callbacks */
    bool destroyed; /* owner let go: no callbacks at all */
    size_t queued;  /* bytes handed to uv_write and not yet completed */

    char name[128];
    char trace_prefix[64];
    bool trace;

    char readbuf[READ_BUF_SIZE];
};

/* Payloads from this size on are written from the message itself (held
 * until the write completes) rather than copied into the frame buffer. */
#define MSGCONN_ZEROCOPY_MIN (64u << 10)

struct write_req {
    uv_write_t req;
    msgconn_t *c;
    void *buf;
    size_t len; /* all bytes written: buf's and the payload's */
    msg_t *msg; /* whose payload follows buf, or NULL */
};

static void trace_msg(msgconn_t *c, const char *dir, const msg_t *msg)
{
    char line[512];

    msg_describe(msg, line, sizeof(line));
    fprintf(stderr, "%s %s %s\n", c->trace_prefix, dir, line);
}

/* Report the end of the connection once, then go quiet. */
static void conn_fail(msgconn_t *c, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void conn_fail(msgconn_t *c, int errnum, const char *fmt, ...)
{
    char reason[320];
    va_list ap;

    if (c->closed || c->destroyed)
        return;
    c->closed = true;
    uv_read_stop(c->stream);
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    if (c->close_cb)
        c->close_cb(c, errnum, reason, c->arg);
}

static void on_close(uv_handle_t *h)
{
    msgconn_t *c = h->data;

    free(h);
    if (c) {
        msg_decoder_destroy(c->decoder);
        free(c);
    }
}

/* Inside a large payload, read straight into the message's buffer; else
 * into ours, for the decoder to parse. */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    msgconn_t *c = h->data;
    void *room;
    size_t n = c->decoder ? msg_decoder_payload_room(c->decoder, &room) : 0;

    if (n >= sizeof(c->readbuf)) {
        buf->base = room;
        buf->len = n > UINT_MAX ? UINT_MAX : n;
        return;
    }
    buf->base = c->readbuf;
    buf->len = sizeof(c->readbuf);
}

static void on_msg(msg_t *msg, void *arg)
{
    msgconn_t *c = arg;

    /* Frames after a destroy (or close) in the same read are dropped. */
    if (c->closed || c->destroyed || !c->recv_cb) {
        msg_decref(msg);
        return;
    }
    if (c->trace)
        trace_msg(c, "recv", msg);
    c->recv_cb(c, msg, c->arg);
}

/* The peer hung up: cleanly between frames, or in the middle of one,
 * which is a protocol error (a crashed or misbehaving peer) and says how
 * far it got. */
static void eof(msgconn_t *c)
{
    size_t have = msg_decoder_pending(c->decoder);
    size_t total = msg_decoder_frame_size(c->decoder);

    if (have == 0)
        conn_fail(c, ECONNRESET, "connection closed by peer");
    else if (total == 0)
        conn_fail(c, EPROTO,
                  "connection closed mid-frame (%zu of %d header bytes "
                  "received)",
                  have, MSG_HEADER_SIZE);
    else
        conn_fail(c, EPROTO,
                  "connection closed mid-frame (%zu of %zu bytes received)",
                  have, total);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    msgconn_t *c = s->data;
    eddy_error_t err = {{0}};

    if (c->closed || c->destroyed)
        return;
    if (nread > 0 && buf->base != c->readbuf) {
        if (msg_decoder_payload_filled(c->decoder, (size_t)nread, on_msg, c,
                                       &err) < 0)
            conn_fail(c, errno, "protocol error: %s", err.text);
    } else if (nread > 0) {
        if (msg_decoder_feed(c->decoder, buf->base, (size_t)nread, on_msg, c,
                             &err) < 0)
            conn_fail(c, errno, "protocol error: %s", err.text);
    } else if (nread == UV_EOF)
        eof(c);
    else if (nread < 0)
        conn_fail(c, (int)-nread, "read error: %s", uv_strerror((int)nread));
}

static void on_write(uv_write_t *req, int status)
{
    struct write_req *w = (struct write_req *)req;
    msgconn_t *c = w->c;

    c->queued -= w->len;
    free(w->buf);
    msg_decref(w->msg);
    free(w);
    /* UV_ECANCELED means we closed the stream ourselves. */
    if (status < 0 && status != UV_ECANCELED)
        conn_fail(c, -status, "write error: %s", uv_strerror(status));
}

msgconn_t *msgconn_create(uv_loop_t *loop,
                          uv_stream_t *stream,
                          msgconn_recv_f recv_cb,
                          msgconn_close_f close_cb,
                          void *arg)
{
    msgconn_t *c = NULL;
    int rc;

    if (!loop || !stream) {
        errno = EINVAL;
        goto error;
    }
    if (!(c = calloc(1, sizeof(*c))) || !(c->decoder = msg_decoder_create(0))) {
        errno = ENOMEM;
        goto error;
    }
    c->loop = loop;
    c->stream = stream;
    c->recv_cb = recv_cb;
    c->close_cb = close_cb;
    c->arg = arg;
    snprintf(c->name, sizeof(c->name), "?");
    stream->data = c;
    if ((rc = uv_read_start(stream, on_alloc, on_read)) < 0) {
        errno = -rc;
        goto error;
    }
    return c;
error:
    rc = errno;
    if (c) {
        msg_decoder_destroy(c->decoder);
        free(c);
    }
    /* The stream was given to us: close and free it as promised. */
    if (stream) {
        stream->data = NULL;
        if (!uv_is_closing((uv_handle_t *)stream))
            uv_close((uv_handle_t *)stream, on_close);
    }
    errno = rc;
    return NULL;
}

void msgconn_destroy(msgconn_t *c)
{
    int saved_errno = errno;

    if (c && !c->destroyed) {
        c->destroyed = true;
        uv_read_stop(c->stream);
        uv_close((uv_handle_t *)c->stream, on_close);
    }
    errno = saved_errno;
}

int msgconn_send(msgconn_t *c, const msg_t *msg)
{
    struct write_req *w;
    uv_buf_t b[2];
    bool zerocopy;
    int rc;

    if (!c || !msg) {
        errno = EINVAL;
        return -1;
    }
    if (c->closed || c->destroyed) {
        errno = ENOTCONN;
        return -1;
    }
    if (!(w = calloc(1, sizeof(*w)))) {
        errno = ENOMEM;
        return -1;
    }
    /* bulk data goes from the message as it is: a second buffer */
    zerocopy = msg->payload_len >= MSGCONN_ZEROCOPY_MIN;
    if ((zerocopy ? msg_encode_head(msg, &w->buf, &w->len)
                  : msg_encode(msg, &w->buf, &w->len)) < 0) {
        int saved_errno = errno;
        free(w);
        errno = saved_errno;
        return -1;
    }
    w->c = c;
    b[0] = uv_buf_init(w->buf, (unsigned int)w->len);
    if (zerocopy) {
        /* messages are not changed once sent, so a reference is enough */
        w->msg = msg_incref((msg_t *)msg);
        b[1] = uv_buf_init(msg->payload, (unsigned int)msg->payload_len);
        w->len += msg->payload_len;
    }
    if (c->trace)
        trace_msg(c, "send", msg);
    c->queued += w->len;
    if ((rc = uv_write(&w->req, c->stream, b, zerocopy ? 2 : 1, on_write)) <
        0) {
        c->queued -= w->len;
        free(w->buf);
        msg_decref(w->msg);
        free(w);
        errno = -rc;
        return -1;
    }
    return 0;
}

size_t msgconn_queued(const msgconn_t *c)
{
    return c ? c->queued : 0;
}

const char *msgconn_name(const msgconn_t *c)
{
    return c ? c->name : "?";
}

void msgconn_set_name(msgconn_t *c, const char *name)
{
    if (c)
        snprintf(c->name, sizeof(c->name), "%s", name ? name : "?");
}

void msgconn_set_trace(msgconn_t *c, const char *prefix)
{
    if (!c)
        return;
    c->trace = prefix != NULL;
    snprintf(c->trace_prefix, sizeof(c->trace_prefix), "%s",
             prefix ? prefix : "");
}

void msgconn_set_arg(msgconn_t *c, void *arg)
{
    if (c)
        c->arg = arg;
}

void *msgconn_get_arg(const msgconn_t *c)
{
    return c ? c->arg : NULL;
}

void msgconn_set_max_frame(msgconn_t *c, size_t max_frame)
{
    if (c)
        msg_decoder_set_max_frame(c->decoder, max_frame);
}

int msgconn_fd(const msgconn_t *c)
{
    uv_os_fd_t fd;

    if (!c || c->destroyed ||
        uv_fileno((const uv_handle_t *)c->stream, &fd) < 0) {
        errno = EBADF;
        return -1;
    }
    return fd;
}
