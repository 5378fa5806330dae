/* rpc.c - requests the broker sends itself (broker_rpc(), service.h).
 *
 * A broker rpc is a client without a connection: its requests enter the
 * router with the pseudo-origin BROKER_RPC_ORIGIN and a matchtag of its
 * own, so the pending table, cancels and the loss of a link (which fails
 * routed requests with EHOSTUNREACH) work for it exactly as for a client.
 * The router hands every response addressed to that origin to
 * rpc_response(), which queues it; a zero-delay timer then passes the
 * queued responses, in order, to the callbacks.  Deferring means a
 * callback never runs inside broker_rpc() (a local handler may answer at
 * once) nor inside another service's respond call, so callers need not
 * be reentrant.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"

struct broker_rpc {
    broker_t *b;
    uint32_t tag;  /* our matchtag; 0 once out of the table */
    uint32_t rank; /* as given */
    char *topic;
    int flags;
    broker_rpc_f cb;
    void *arg;
    bool done;      /* final response delivered */
    bool in_cb;     /* the callback is on the stack */
    bool destroyed; /* destroy called from the callback: free after */
};

struct rpc_queued {
    uint32_t tag;
    msg_t *msg;
    struct rpc_queued *next;
};

int rpc_init(broker_t *b)
{
    if (!(b->rpcs = keymap_create()))
        return -1;
    uv_timer_init(&b->loop, &b->rpc_timer);
    b->rpc_timer.data = b;
    return 0;
}

void rpc_fini(broker_t *b)
{
    void **v = NULL;
    size_t n = 0;

    while (b->rpc_head) {
        struct rpc_queued *q = b->rpc_head;
        b->rpc_head = q->next;
        msg_decref(q->msg);
        free(q);
    }
    b->rpc_tail = NULL;
    if (b->rpcs && keymap_values(b->rpcs, &v, &n) == 0) {
        for (size_t i = 0; i < n; i++) {
            struct broker_rpc *rpc = v[i];
            free(rpc->topic);
            free(rpc);
        }
        free(v);
    }
    keymap_destroy(b->rpcs);
    b->rpcs = NULL;
}

static void rpc_free(struct broker_rpc *rpc)
{
    free(rpc->topic);
    free(rpc);
}

/* Take 'rpc' out of the table: later responses for its tag are dropped. */
static void rpc_unlink(struct broker_rpc *rpc)
{
    if (rpc->tag) {
        keymap_remove(rpc->b->rpcs, BROKER_RPC_ORIGIN, rpc->tag);
        rpc->tag = 0;
    }
}

/* A tag not used by a live rpc nor by a request of ours still routed
 * (an rpc destroyed before its stream ended leaves its route entry until
 * the target answers the cancel). */
static uint32_t alloc_tag(broker_t *b)
{
    for (;;) {
        uint32_t tag = ++b->rpc_next_tag;
        if (tag == 0)
            continue;
        if (!keymap_get(b->rpcs, BROKER_RPC_ORIGIN, tag) &&
            !route_by_origin(b->route, BROKER_RPC_ORIGIN, tag))
            return tag;
    }
}

static bool is_final(const struct broker_rpc *rpc, const msg_t *msg)
{
    if (msg->errnum != 0 || !(rpc->flags & BROKER_RPC_STREAMING))
        return true;
    return (msg->flags & MSG_FLAG_EOS) != 0;
}

static void rpc_timer_cb(uv_timer_t *t)
{
    broker_t *b = t->data;
    struct rpc_queued *q;
    struct broker_rpc *rpc;

    /* Only what is queued now: callbacks that send new rpcs to this rank
     * get their responses on the next run, which keeps this bounded. */
    struct rpc_queued *batch = b->rpc_head;
    b->rpc_head = b->rpc_tail = NULL;
    while ((q = batch)) {
        batch = q->next;
        rpc = keymap_get(b->rpcs, BROKER_RPC_ORIGIN, q->tag);
        if (rpc && !rpc->done) {
            if (is_final(rpc, q->msg)) {
                rpc->done = true;
                rpc_unlink(rpc);
            }
            if (rpc->cb) {
                rpc->in_cb = true;
                rpc->cb(rpc, q->msg, rpc->arg);
                rpc->in_cb = false;
            }
            if (rpc->destroyed)
                rpc_free(rpc);
        }
        msg_decref(q->msg);
        free(q);
    }
}

void rpc_response(broker_t *b, const msg_t *msg)
{
    struct rpc_queued *q;

    if (!b->rpcs || !keymap_get(b->rpcs, BROKER_RPC_ORIGIN, msg->matchtag))
        return;
    if (!(q = calloc(1, sizeof(*q)))) {
        broker_log(b, LOG_LEVEL_ERR, "rpc %s: response lost: out of memory",
                   msg->topic);
        return;
    }
    q->tag = msg->matchtag;
    q->msg = msg_incref((msg_t *)msg);
    if (b->rpc_tail)
        b->rpc_tail->next = q;
    else
        b->rpc_head = q;
    b->rpc_tail = q;
    if (b->state != BROKER_FINISHED)
        uv_timer_start(&b->rpc_timer, rpc_timer_cb, 0, 0);
}

/* broker_rpc() and broker_rpc_shared(): the payload is 'data' (copied)
 * or, if 'owner' is set, the payload of 'owner' (shared). */
static broker_rpc_t *rpc_start(broker_t *b,
                               const char *topic,
                               uint32_t rank,
                               int flags,
                               json_t *body,
                               const void *data,
                               size_t len,
                               const msg_t *owner,
                               broker_rpc_f cb,
                               void *arg)
{
    struct broker_rpc *rpc = NULL;
    msg_t *msg = NULL;

    if (!b || !b->rpcs || !topic ||
        (flags & ~(BROKER_RPC_STREAMING | BROKER_RPC_NORESPONSE)) ||
        ((flags & BROKER_RPC_STREAMING) && (flags & BROKER_RPC_NORESPONSE))) {
        errno = EINVAL;
        goto error;
    }
    if (!(rpc = calloc(1, sizeof(*rpc))) || !(rpc->topic = strdup(topic)))
        goto error;
    if (!(msg = owner ? msg_create_shared(MSG_REQUEST, topic, body, owner)
                      : msg_create(MSG_REQUEST, topic, body, data, len))) {
        body = NULL; /* stolen */
        goto error;
    }
    body = NULL;
    rpc->b = b;
    rpc->rank = rank;
    rpc->flags = flags;
    rpc->cb = cb;
    rpc->arg = arg;
    msg->rank = rank;
    if (flags & BROKER_RPC_STREAMING)
        msg->flags |= MSG_FLAG_STREAMING;
    if (flags & BROKER_RPC_NORESPONSE) {
        msg->flags |= MSG_FLAG_NORESPONSE;
        rpc->done = true;
        msg->matchtag = 0;
        broker_route_request_origin(b, NULL, BROKER_RPC_ORIGIN, msg);
        return rpc;
    }
    rpc->tag = alloc_tag(b);
    if (keymap_put(b->rpcs, BROKER_RPC_ORIGIN, rpc->tag, rpc) < 0) {
        rpc->tag = 0;
        goto error;
    }
    msg->matchtag = rpc->tag;
    broker_route_request_origin(b, NULL, BROKER_RPC_ORIGIN, msg);
    return rpc;
error:
    json_decref(body);
    msg_decref(msg);
    if (rpc)
        rpc_free(rpc);
    return NULL;
}

broker_rpc_t *broker_rpc(broker_t *b,
                         const char *topic,
                         uint32_t rank,
                         int flags,
                         json_t *body,
                         const void *data,
                         size_t len,
                         broker_rpc_f cb,
                         void *arg)
{
    return rpc_start(b, topic, rank, flags, body, data, len, NULL, cb, arg);
}

broker_rpc_t *broker_rpc_shared(broker_t *b,
                                const char *topic,
                                uint32_t rank,
                                int flags,
                                json_t *body,
                                const msg_t *owner,
                                broker_rpc_f cb,
                                void *arg)
{
    if (!owner) {
        json_decref(body);
        errno = EINVAL;
        return NULL;
    }
    return rpc_start(b, topic, rank, flags, body, NULL, 0, owner, cb, arg);
}

void broker_rpc_cancel(broker_rpc_t *rpc)
{
    msg_t *msg;

    if (!rpc || rpc->done || !rpc->tag || !(rpc->flags & BROKER_RPC_STREAMING))
        return;
    if (!(msg = msg_create(MSG_REQUEST, rpc->topic, NULL, NULL, 0)))
        return;
    msg->matchtag = rpc->tag;
    msg->rank = rpc->rank;
    msg->flags = MSG_FLAG_CANCEL | MSG_FLAG_NORESPONSE;
    broker_route_request_origin(rpc->b, NULL, BROKER_RPC_ORIGIN, msg);
}

bool broker_rpc_done(const broker_rpc_t *rpc)
{
    return rpc && rpc->done;
}

uint32_t broker_rpc_rank(const broker_rpc_t *rpc)
{
    return rpc ? rpc->rank : 0;
}

const char *broker_rpc_topic(const broker_rpc_t *rpc)
{
    return rpc ? rpc->topic : NULL;
}

void broker_rpc_destroy(broker_rpc_t *rpc)
{
    int saved_errno = errno;

    if (!rpc)
        return;
    if (!rpc->done)
        broker_rpc_cancel(rpc);
    rpc_unlink(rpc);
    rpc->done = true;
    if (rpc->in_cb)
        rpc->destroyed = true;
    else
        rpc_free(rpc);
    errno = saved_errno;
}
