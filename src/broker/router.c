/* router.c - where messages go: local services, a child, or the parent.
 *
 * Requests name their target rank.  The first broker rewrites the special
 * ranks, then each hop forwards toward the target (route_resolve()) and
 * records the request in the pending table so the responses can retrace
 * the path (see route.h).  At the target the topic selects a handler from
 * the service tables.  Events come down from the parent (or are made at
 * rank 0), are forwarded to every child and handed to local subscribers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/topology.h"
#include "broker.h"

struct broker_req {
    int refcount;
    broker_t *b;
    msg_t *msg;
    uint64_t origin;
    uint32_t userid;
    bool done; /* final response sent */
};

/* --- requests as services see them ---------------------------------- */

const msg_t *broker_req_msg(const broker_req_t *req)
{
    return req->msg;
}

broker_req_t *broker_req_incref(broker_req_t *req)
{
    if (req)
        req->refcount++;
    return req;
}

void broker_req_decref(broker_req_t *req)
{
    int saved_errno = errno;

    if (req && --req->refcount == 0) {
        msg_decref(req->msg);
        free(req);
    }
    errno = saved_errno;
}

uint64_t broker_req_origin(const broker_req_t *req)
{
    return req->origin;
}

uint32_t broker_req_userid(const broker_req_t *req)
{
    return req->userid;
}

bool broker_req_is_cancel(const broker_req_t *req)
{
    return (req->msg->flags & MSG_FLAG_CANCEL) != 0;
}

bool broker_req_is_streaming(const broker_req_t *req)
{
    return (req->msg->flags & MSG_FLAG_STREAMING) != 0;
}

bool broker_req_same(const broker_req_t *a, const broker_req_t *b)
{
    return a->origin == b->origin && a->msg->matchtag == b->msg->matchtag;
}

/* A cancel, or a request that asked for silence, gets no response. */
static bool wants_response(const msg_t *msg)
{
    return !(msg->flags & (MSG_FLAG_NORESPONSE | MSG_FLAG_CANCEL));
}

/* Send a response to the connection a request came from; a vanished
 * origin (or the broker itself, origin 0) swallows it. */
static int send_to_origin(broker_t *b, uint64_t origin, const msg_t *msg)
{
    struct conn *c;

    if (origin == BROKER_RPC_ORIGIN) {
        rpc_response(b, msg);
        return 0;
    }
    if (!(c = conn_lookup(b, origin)))
        return 0;
    return conn_send(c, msg);
}

int broker_respond_topic(broker_req_t *req,
                         const char *topic,
                         json_t *body,
                         const void *payload,
                         size_t len,
                         int flags)
{
    msg_t *msg;
    int rc;

    if (!wants_response(req->msg)) {
        json_decref(body);
        return 0;
    }
    if (req->done) {
        json_decref(body);
        errno = EALREADY;
        return -1;
    }
    if (!(msg = msg_create(MSG_RESPONSE, topic, body, payload, len)))
        return -1;
    msg->matchtag = req->msg->matchtag;
    msg->rank = req->b->rank;
    msg->flags = flags & MSG_FLAG_EOS;
    if (!broker_req_is_streaming(req) || (flags & MSG_FLAG_EOS))
        req->done = true;
    rc = send_to_origin(req->b, req->origin, msg);
    msg_decref(msg);
    return rc;
}

int broker_respond(broker_req_t *req,
                   json_t *body,
                   const void *payload,
                   size_t payload_len,
                   int flags)
{
    return broker_respond_topic(req, req->msg->topic, body, payload,
                                payload_len, flags);
}

/* An error response to 'req' sent on 'to' (may be NULL: dropped). */
static int send_error(
    broker_t *b, uint64_t to, const msg_t *req, int errnum, const char *text)
{
    msg_t *msg;
    int rc;

    if (!wants_response(req))
        return 0;
    if (!(msg = msg_create_error(req, errnum, text)))
        return -1;
    msg->rank = b->rank;
    /* An error always ends a stream; say so in the flags as well. */
    if (req->flags & MSG_FLAG_STREAMING)
        msg->flags |= MSG_FLAG_EOS;
    rc = send_to_origin(b, to, msg);
    msg_decref(msg);
    return rc;
}

int broker_respond_error(broker_req_t *req, int errnum, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    int rc;

    if (!wants_response(req->msg))
        return 0;
    if (req->done) {
        errno = EALREADY;
        return -1;
    }
    if (fmt) {
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
    }
    req->done = true;
    rc = send_error(req->b, req->origin, req->msg, errnum ? errnum : EIO,
                    fmt ? text : NULL);
    return rc;
}

/* --- local delivery -------------------------------------------------- */

static int topic_cmp(const void *key, const void *elem)
{
    return strcmp(key, ((const struct topic_entry *)elem)->topic);
}

static void deliver_local(broker_t *b,
                          struct conn *from,
                          uint64_t origin,
                          msg_t *msg)
{
    const struct topic_entry *te;
    broker_req_t *req;

    te = bsearch(msg->topic, b->topics, b->ntopics, sizeof(b->topics[0]),
                 topic_cmp);
    if (!te) {
        char text[MSG_TOPIC_MAX + 64];
        snprintf(text, sizeof(text), "rank %u: no service for topic '%s'",
                 b->rank, msg->topic);
        send_error(b, origin, msg, ENOSYS, text);
        msg_decref(msg);
        return;
    }
    if (!(req = calloc(1, sizeof(*req)))) {
        send_error(b, origin, msg, ENOMEM, "out of memory");
        msg_decref(msg);
        return;
    }
    req->refcount = 1;
    req->b = b;
    req->msg = msg;
    req->origin = origin;
    req->userid = from && from->kind == CONN_CLIENT ? from->uid : b->uid;
    te->fn(req, te->svc->ctx);
    broker_req_decref(req);
}

/* --- routing --------------------------------------------------------- */

/* Forward 'msg' (already resolved to a remote target) on 'link'. */
static void forward_request(broker_t *b,
                            struct conn *from,
                            uint64_t origin,
                            struct conn *link,
                            msg_t *msg)
{
    uint32_t origin_tag = msg->matchtag;
    struct route_entry *re = NULL;
    char text[MSG_TOPIC_MAX + 256];
    int e;

    msg->matchtag = route_alloc_tag(b->route, link->id, &link->next_tag);
    if (wants_response(msg)) {
        re = route_add(b->route, link->id, msg->matchtag, origin, origin_tag,
                       msg->rank, (msg->flags & MSG_FLAG_STREAMING) != 0,
                       msg->topic);
        if (!re) {
            e = errno;
            msg->matchtag = origin_tag;
            if (e == EEXIST) {
                e = EBUSY;
                snprintf(text, sizeof(text),
                         "rank %u: %s to rank %u: matchtag %u is already "
                         "in use by a pending request",
                         b->rank, msg->topic, msg->rank, origin_tag);
            } else if (e == ENOSPC && from) {
                e = ENOBUFS;
                snprintf(text, sizeof(text),
                         "rank %u: %s to rank %u refused: %s has %zu "
                         "requests pending (limit %u)",
                         b->rank, msg->topic, msg->rank, from->name,
                         route_count_origin(b->route, origin),
                         ROUTE_ORIGIN_PENDING_MAX);
                /* Log the first refusal, then every power of two. */
                from->pending_refused++;
                if ((from->pending_refused & (from->pending_refused - 1)) == 0)
                    broker_log(b, LOG_LEVEL_WARNING,
                               "%s: too many pending requests (limit %u): "
                               "%ju refused so far",
                               from->name, ROUTE_ORIGIN_PENDING_MAX,
                               (uintmax_t)from->pending_refused);
            } else
                snprintf(text, sizeof(text), "rank %u: %s to rank %u: %s",
                         b->rank, msg->topic, msg->rank, strerror(e));
            send_error(b, origin, msg, e, text);
            return;
        }
    }
    if (conn_send(link, msg) < 0) {
        e = errno;
        route_remove(b->route, re);
        msg->matchtag = origin_tag;
        snprintf(text, sizeof(text),
                 "rank %u: cannot forward %s to rank %u via %s: %s", b->rank,
                 msg->topic, msg->rank, link->name, strerror(e));
        send_error(b, origin, msg, EHOSTUNREACH, text);
    }
}

/* A CANCEL follows its request: if we forwarded that request, the cancel
 * goes the same way with the same rewritten matchtag. */
static bool forward_cancel(broker_t *b, uint64_t origin, msg_t *msg)
{
    struct route_entry *re;
    struct conn *link;

    re = route_by_origin(b->route, origin, msg->matchtag);
    if (!re)
        return false;
    if ((link = conn_lookup(b, re->out_id))) {
        msg->matchtag = re->out_tag;
        msg->rank = re->target;
        conn_send(link, msg);
    }
    return true;
}

void broker_route_request(broker_t *b, struct conn *from, msg_t *msg)
{
    broker_route_request_origin(b, from, from ? from->id : 0, msg);
}

void broker_route_request_origin(broker_t *b,
                                 struct conn *from,
                                 uint64_t origin,
                                 msg_t *msg)
{
    struct route_topo topo = {
        .rank = b->rank,
        .size = b->size,
        .fanout = b->fanout,
        .lost_by = overlay_lost_by(b),
    };
    eddy_error_t e = {{0}};
    uint32_t target = msg->rank;
    uint32_t hop;
    struct conn *link;
    bool cancel = (msg->flags & MSG_FLAG_CANCEL) != 0;

    if (cancel && forward_cancel(b, origin, msg))
        goto done;
    if ((hop = route_resolve(&topo, &target, &e)) == TOPO_NONE) {
        send_error(b, origin, msg, errno, e.text);
        goto done;
    }
    msg->rank = target;
    if (hop == b->rank) {
        deliver_local(b, from, origin, msg);
        return;
    }
    /* A cancel for a remote request we no longer track: it already ended. */
    if (cancel)
        goto done;
    if (!(link = overlay_link(b, hop, &e))) {
        send_error(b, origin, msg, EHOSTUNREACH, e.text);
        goto done;
    }
    forward_request(b, from, origin, link, msg);
done:
    msg_decref(msg);
}

/* A response from a peer: rewrite the matchtag back and pass it on. */
static void route_response(broker_t *b, struct conn *from, msg_t *msg)
{
    struct route_entry *re;
    uint64_t origin;

    if (!(re = route_by_out(b->route, from->id, msg->matchtag))) {
        broker_log(b, LOG_LEVEL_DEBUG,
                   "dropped response %s tag %u from %s: no pending request",
                   msg->topic, msg->matchtag, from->name);
        goto done;
    }
    origin = re->origin_id;
    msg->matchtag = re->origin_tag;
    if (route_response_ends(re, msg->flags, msg->errnum))
        route_remove(b->route, re);
    send_to_origin(b, origin, msg);
done:
    msg_decref(msg);
}

void broker_dispatch(struct conn *c, msg_t *msg)
{
    broker_t *b = c->b;
    char desc[256];

    switch (msg->type) {
    case MSG_REQUEST:
        broker_route_request(b, c, msg);
        return;
    case MSG_RESPONSE:
        if (c->kind == CONN_CHILD || c->kind == CONN_PARENT) {
            route_response(b, c, msg);
            return;
        }
        break;
    case MSG_EVENT:
        if (!strcmp(msg->topic, "overlay.heartbeat") &&
            (c->kind == CONN_CHILD || c->kind == CONN_PARENT)) {
            msg_decref(msg);
            return;
        }
        if (c->kind == CONN_PARENT) {
            broker_deliver_event(b, msg);
            msg_decref(msg);
            return;
        }
        break;
    }
    msg_describe(msg, desc, sizeof(desc));
    broker_log(b, LOG_LEVEL_WARNING, "ignored unexpected %s from %s", desc,
               c->name);
    msg_decref(msg);
}

/* --- events and subscriptions ---------------------------------------- */

static bool prefix_match(const char *prefix, const char *topic)
{
    return !strncmp(prefix, topic, strlen(prefix));
}

/* Free subscriptions marked dropped, unless a delivery is walking them. */
static void subs_sweep(broker_t *b)
{
    struct subscription **pp = &b->subs;

    if (b->delivering)
        return;
    while (*pp) {
        struct subscription *s = *pp;
        if (!s->req) {
            *pp = s->next;
            free(s->prefix);
            free(s);
        } else
            pp = &s->next;
    }
}

static void sub_drop(struct subscription *s)
{
    broker_req_t *req = s->req;

    s->req = NULL;
    broker_req_decref(req);
}

void broker_deliver_event(broker_t *b, const msg_t *msg)
{
    overlay_forward_event(b, msg);
    b->delivering++;
    for (struct subscription *s = b->subs; s; s = s->next) {
        if (s->req && prefix_match(s->prefix, msg->topic)) {
            if (broker_respond_topic(s->req, msg->topic, json_incref(msg->body),
                                     msg->payload, msg->payload_len, 0) < 0 &&
                errno != ENOTCONN)
                broker_log(b, LOG_LEVEL_DEBUG, "event %s to %s: %s", msg->topic,
                           "subscriber", strerror(errno));
        }
    }
    b->delivering--;
    subs_sweep(b);
    if (!strcmp(msg->topic, "broker.shutdown"))
        broker_shutdown(b, "shutdown event");
}

int broker_subscribe(broker_t *b, broker_req_t *req, const char *prefix)
{
    struct subscription *s;

    if (!(s = calloc(1, sizeof(*s))) || !(s->prefix = strdup(prefix))) {
        free(s);
        errno = ENOMEM;
        return -1;
    }
    s->req = broker_req_incref(req);
    s->next = b->subs;
    b->subs = s;
    return 0;
}

void broker_unsubscribe(broker_t *b, const broker_req_t *cancel)
{
    b->delivering++;
    for (struct subscription *s = b->subs; s; s = s->next) {
        if (s->req && broker_req_same(s->req, cancel)) {
            broker_respond_error(s->req, ENODATA, NULL);
            sub_drop(s);
        }
    }
    b->delivering--;
    subs_sweep(b);
}

void broker_unsubscribe_all(broker_t *b)
{
    for (struct subscription *s = b->subs; s; s = s->next) {
        if (s->req)
            sub_drop(s);
    }
    subs_sweep(b);
}

/* --- when a connection goes away ------------------------------------- */

static void cancel_downstream(broker_t *b, const struct route_entry *re)
{
    struct conn *link;
    msg_t *msg;

    if (!re->streaming || !(link = conn_lookup(b, re->out_id)))
        return;
    if (!(msg = msg_create(MSG_REQUEST, re->topic, NULL, NULL, 0)))
        return;
    msg->matchtag = re->out_tag;
    msg->rank = re->target;
    msg->flags = MSG_FLAG_CANCEL | MSG_FLAG_NORESPONSE;
    conn_send(link, msg);
    msg_decref(msg);
}

/* Fail a request pending on link 'c', which went away ('why': "shut
 * down", "lost: REASON"), naming the target if it lay beyond 'c'. */
static void fail_routed(broker_t *b,
                        const struct route_entry *re,
                        const struct conn *c,
                        const char *why)
{
    char text[512];
    msg_t *msg;

    if (c->kind != CONN_CHILD && c->kind != CONN_PARENT)
        snprintf(text, sizeof(text), "%s: %s", c->name, why);
    else if (re->target == c->rank)
        snprintf(text, sizeof(text), "rank %u %s", c->rank, why);
    else
        snprintf(text, sizeof(text), "rank %u unreachable: rank %u %s",
                 re->target, c->rank, why);
    if (!(msg = msg_create(MSG_RESPONSE, re->topic, NULL, NULL, 0)))
        return;
    json_decref(msg->body);
    msg->body = json_pack("{s:s}", "errstr", text);
    msg->matchtag = re->origin_tag;
    msg->rank = b->rank;
    msg->errnum = EHOSTUNREACH;
    if (re->streaming)
        msg->flags = MSG_FLAG_EOS;
    send_to_origin(b, re->origin_id, msg);
    msg_decref(msg);
}

void broker_conn_cleanup(broker_t *b, struct conn *c, const char *reason)
{
    struct route_entry **v;
    struct {
        uint64_t id;
        uint32_t tag;
    } *keys = NULL;
    size_t n = 0, nkeys = 0;
    char text[256];

    if ((c->kind == CONN_CHILD || c->kind == CONN_PARENT) &&
        (c->leaving || b->state >= BROKER_SHUTDOWN))
        snprintf(text, sizeof(text), "shut down");
    else if (c->kind == CONN_CHILD || c->kind == CONN_PARENT)
        snprintf(text, sizeof(text), "lost: %s", reason);
    else
        snprintf(text, sizeof(text), "%s", reason);
    /* Collect keys first and look each entry up again before use: sending
     * may drop another connection, whose own cleanup removes entries. */
    if (route_count(b->route) > 0 && route_entries(b->route, &v, &n) == 0) {
        if ((keys = calloc(n ? n : 1, sizeof(keys[0])))) {
            for (size_t i = 0; i < n; i++) {
                if (v[i]->out_id == c->id || v[i]->origin_id == c->id) {
                    keys[nkeys].id = v[i]->out_id;
                    keys[nkeys++].tag = v[i]->out_tag;
                }
            }
        }
        free(v);
    }
    for (size_t i = 0; i < nkeys; i++) {
        struct route_entry *re =
            route_by_out(b->route, keys[i].id, keys[i].tag);
        if (!re)
            continue;
        if (re->out_id == c->id)
            fail_routed(b, re, c, text);
        else
            cancel_downstream(b, re);
        if ((re = route_by_out(b->route, keys[i].id, keys[i].tag)))
            route_remove(b->route, re);
    }
    free(keys);
    b->delivering++;
    for (struct subscription *s = b->subs; s; s = s->next) {
        if (s->req && s->req->origin == c->id)
            sub_drop(s);
    }
    b->delivering--;
    subs_sweep(b);
    if (c->kind == CONN_CLIENT || c->kind == CONN_CHILD ||
        c->kind == CONN_PARENT) {
        for (size_t i = 0; i < b->nsvcs; i++) {
            struct service_instance *si = &b->svcs[i];
            if (si->inited && si->def->disconnect)
                si->def->disconnect(si->ctx, c->id);
        }
    }
    if (c->kind == CONN_CHILD)
        broker_children_gone(b);
}

struct conn *broker_origin_child(broker_t *b, uint64_t origin)
{
    struct conn *c = conn_lookup(b, origin);

    return c && c->kind == CONN_CHILD ? c : NULL;
}
