/* rpc.c - requests, their results, cancel, and events (which are RPCs to
 * the broker: a subscription is a streaming RPC, a publication a plain
 * one to rank 0).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "lib.h"

/* Send a request; 'body' (may be NULL) is stolen, also on failure. */
eddy_future_t *rpc_send(eddy_t *h,
                        const char *topic,
                        uint32_t rank,
                        int flags,
                        json_t *body,
                        const void *data,
                        size_t len)
{
    eddy_future_t *f = NULL;
    msg_t *msg = NULL;
    int e;

    if (!h || !topic || !*topic || strlen(topic) > MSG_TOPIC_MAX ||
        (flags & ~(EDDY_RPC_STREAMING | EDDY_RPC_NORESPONSE)) ||
        flags == (EDDY_RPC_STREAMING | EDDY_RPC_NORESPONSE) ||
        (len > 0 && !data) || len > MSG_PAYLOAD_MAX) {
        json_decref(body);
        errno = EINVAL;
        return NULL;
    }
    if (!h->conn) {
        json_decref(body);
        errno = ENOTCONN;
        return NULL;
    }
    if (!(msg = msg_create(MSG_REQUEST, topic, body, data, len)))
        return NULL;
    msg->rank = rank;
    if (!(f = fut_create(h, topic, rank, flags)))
        goto error;
    if (flags & EDDY_RPC_NORESPONSE) {
        msg_t *empty;

        msg->flags = MSG_FLAG_NORESPONSE;
        /* Fire and forget: ready at once with {}.  Queued before sending so
         * that a request that went out is never reported as failed. */
        if (!(empty = msg_create(MSG_RESPONSE, topic, NULL, NULL, 0)) ||
            fut_push(f, empty) < 0)
            goto error;
        if (msgconn_send(h->conn, msg) < 0)
            goto error;
        fut_fail(f, ENODATA, NULL);
    } else {
        if (flags & EDDY_RPC_STREAMING)
            msg->flags = MSG_FLAG_STREAMING;
        if (handle_register(h, f) < 0)
            goto error;
        msg->matchtag = f->matchtag;
        if (msgconn_send(h->conn, msg) < 0)
            goto error;
    }
    msg_decref(msg);
    return f;
error:
    e = errno;
    if (f) {
        handle_unregister(h, f);
        fut_free(f);
    }
    msg_decref(msg);
    errno = e;
    return NULL;
}

eddy_future_t *eddy_rpc(eddy_t *h,
                        const char *topic,
                        uint32_t rank,
                        int flags,
                        const char *json,
                        const void *data,
                        size_t len)
{
    json_t *body = NULL;

    if (json) {
        if (!(body = json_loads(json, 0, NULL)) || !json_is_object(body)) {
            json_decref(body);
            errno = EINVAL;
            return NULL;
        }
    }
    return rpc_send(h, topic, rank, flags, body, data, len);
}

static eddy_future_t *rpc_vpack(eddy_t *h,
                                const char *topic,
                                uint32_t rank,
                                int flags,
                                const char *fmt,
                                va_list ap)
{
    json_t *body;
    json_error_t error;

    if (!fmt || !(body = json_vpack_ex(&error, 0, fmt, ap))) {
        errno = EINVAL;
        return NULL;
    }
    if (!json_is_object(body)) {
        json_decref(body);
        errno = EINVAL;
        return NULL;
    }
    return rpc_send(h, topic, rank, flags, body, NULL, 0);
}

eddy_future_t *eddy_rpc_pack(eddy_t *h,
                             const char *topic,
                             uint32_t rank,
                             int flags,
                             const char *fmt,
                             ...)
{
    eddy_future_t *f;
    va_list ap;

    va_start(ap, fmt);
    f = rpc_vpack(h, topic, rank, flags, fmt, ap);
    va_end(ap);
    return f;
}

/* Wait for 'f' and return its current response, or -1 with its error. */
static int get_response(eddy_future_t *f, const msg_t **msgp)
{
    const msg_t *msg;

    if (!f) {
        errno = EINVAL;
        return -1;
    }
    if (fut_wait(f, -1) < 0)
        return -1;
    if (f->timed_out) {
        errno = ETIMEDOUT;
        return -1;
    }
    if (f->qlen == 0) {
        errno = f->term_errnum;
        return -1;
    }
    msg = f->q[f->qhead];
    if (msg->errnum != 0) {
        errno = (int)msg->errnum;
        return -1;
    }
    *msgp = msg;
    return 0;
}

int eddy_rpc_get(eddy_future_t *f, const char **json)
{
    const msg_t *msg;

    if (get_response(f, &msg) < 0)
        return -1;
    if (json) {
        if (!msg->body) {
            *json = "{}";
            return 0;
        }
        if (!f->json && !(f->json = json_dumps(msg->body, JSON_COMPACT))) {
            errno = ENOMEM;
            return -1;
        }
        *json = f->json;
    }
    return 0;
}

int eddy_rpc_get_unpack(eddy_future_t *f, const char *fmt, ...)
{
    const msg_t *msg;
    json_t *body;
    json_error_t error;
    va_list ap;
    int rc;

    if (!fmt) {
        errno = EINVAL;
        return -1;
    }
    if (get_response(f, &msg) < 0)
        return -1;
    if (!(body = msg->body)) {
        if (!f->empty && !(f->empty = json_object())) {
            errno = ENOMEM;
            return -1;
        }
        body = f->empty;
    }
    va_start(ap, fmt);
    rc = json_vunpack_ex(body, &error, 0, fmt, ap);
    va_end(ap);
    if (rc < 0) {
        snprintf(f->errbuf, sizeof(f->errbuf), "malformed response to %s: %s",
                 f->topic, error.text);
        errno = EPROTO;
        return -1;
    }
    return 0;
}

int eddy_rpc_get_raw(eddy_future_t *f, const void **data, size_t *len)
{
    const msg_t *msg;

    if (get_response(f, &msg) < 0)
        return -1;
    if (data)
        *data = msg->payload;
    if (len)
        *len = msg->payload_len;
    return 0;
}

const char *eddy_rpc_get_topic(eddy_future_t *f)
{
    if (!f || f->timed_out || f->qlen == 0)
        return NULL;
    return f->q[f->qhead]->topic;
}

int eddy_rpc_cancel(eddy_future_t *f)
{
    msg_t *msg;
    int rc, e;

    if (!f || !(f->flags & EDDY_RPC_STREAMING)) {
        errno = EINVAL;
        return -1;
    }
    if (!f->registered) /* already over: nothing to cancel */
        return 0;
    if (!f->h->conn) {
        errno = ENOTCONN;
        return -1;
    }
    if (!(msg = msg_create(MSG_REQUEST, f->topic, NULL, NULL, 0)))
        return -1;
    msg->matchtag = f->matchtag;
    msg->rank = f->rank;
    msg->flags = MSG_FLAG_CANCEL;
    rc = msgconn_send(f->h->conn, msg);
    e = errno;
    msg_decref(msg);
    errno = e;
    return rc;
}

eddy_future_t *eddy_event_subscribe(eddy_t *h, const char *prefix)
{
    if (!prefix) {
        errno = EINVAL;
        return NULL;
    }
    return eddy_rpc_pack(h, "broker.subscribe", EDDY_RANK_ANY,
                         EDDY_RPC_STREAMING, "{s:s}", "prefix", prefix);
}

eddy_future_t *eddy_event_publish(eddy_t *h,
                                  const char *topic,
                                  const char *json)
{
    json_t *body = NULL;
    eddy_future_t *f;
    int e;

    if (!topic || !*topic || strlen(topic) > MSG_TOPIC_MAX) {
        errno = EINVAL;
        return NULL;
    }
    if (json) {
        if (!(body = json_loads(json, 0, NULL)) || !json_is_object(body)) {
            json_decref(body);
            errno = EINVAL;
            return NULL;
        }
    } else if (!(body = json_object())) {
        errno = ENOMEM;
        return NULL;
    }
    f = eddy_rpc_pack(h, "broker.publish", 0, 0, "{s:s s:O}", "topic", topic,
                      "body", body);
    e = errno;
    json_decref(body);
    errno = e;
    return f;
}

const char *eddy_strerror(int errnum)
{
    return strerror(errnum);
}
