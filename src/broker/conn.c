/* conn.c - the broker's connections: clients and overlay peers alike.
 *
 * A struct conn wraps a msgconn and gives it an id that is never reused.
 * Everything that must outlive a message (pending routes, subscriptions,
 * requests held by services) refers to the id, never to the pointer, so a
 * connection can go away at any time: conn_drop() unlinks it at once and
 * parks the memory on a zombie list that the reaper (a uv_check handle,
 * run after the current callbacks have returned) frees.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "broker.h"

void conn_free_zombies(broker_t *b)
{
    while (b->zombies) {
        struct conn *c = b->zombies;
        b->zombies = c->next;
        free(c);
    }
}

static void reaper_cb(uv_check_t *h)
{
    broker_t *b = h->data;

    conn_free_zombies(b);
    uv_check_stop(h);
}

/* EDDY_BROKER_TRACE=1 traces broker links, =2 clients as well. */
static void set_trace(struct conn *c)
{
    char prefix[160];

    if (c->b->trace && (c->kind != CONN_CLIENT || c->b->trace_clients)) {
        snprintf(prefix, sizeof(prefix), "broker[%u] %s", c->b->rank, c->name);
        msgconn_set_trace(c->mc, prefix);
    }
}

static void conn_recv_cb(msgconn_t *mc, msg_t *msg, void *arg)
{
    struct conn *c = arg;
    broker_t *b = c->b;

    c->t_recv = uv_now(&b->loop);
    if (c->lingering || b->state == BROKER_FINISHED) {
        msg_decref(msg);
        return;
    }
    switch (c->kind) {
    case CONN_INBOUND:
    case CONN_PARENT_AUTH:
        overlay_recv_unauth(c, msg);
        break;
    case CONN_CLIENT:
    case CONN_CHILD:
    case CONN_PARENT:
        broker_dispatch(c, msg);
        break;
    }
}

static void conn_close_cb(msgconn_t *mc,
                          int errnum,
                          const char *reason,
                          void *arg)
{
    conn_drop(arg, errnum, reason);
}

struct conn *conn_create(broker_t *b,
                         enum conn_kind kind,
                         uv_stream_t *stream,
                         const char *name)
{
    struct conn *c;

    if (!(c = calloc(1, sizeof(*c)))) {
        uv_close((uv_handle_t *)stream, (uv_close_cb)free);
        return NULL;
    }
    c->b = b;
    c->kind = kind;
    c->id = ++b->next_conn_id;
    c->t_open = c->t_recv = c->t_send = uv_now(&b->loop);
    snprintf(c->name, sizeof(c->name), "%s", name);
    if (!(c->mc = msgconn_create(&b->loop, stream, conn_recv_cb, conn_close_cb,
                                 c))) {
        free(c);
        return NULL;
    }
    if (keymap_put(b->conns, c->id, 0, c) < 0) {
        msgconn_destroy(c->mc);
        free(c);
        return NULL;
    }
    msgconn_set_name(c->mc, c->name);
    set_trace(c);
    c->next = b->conns_list;
    if (c->next)
        c->next->prev = c;
    b->conns_list = c;
    return c;
}

void conn_set_name(struct conn *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->name, sizeof(c->name), fmt, ap);
    va_end(ap);
    if (c->mc) {
        msgconn_set_name(c->mc, c->name);
        set_trace(c);
    }
}

struct conn *conn_lookup(broker_t *b, uint64_t id)
{
    return id ? keymap_get(b->conns, id, 0) : NULL;
}

int conn_send(struct conn *c, const msg_t *msg)
{
    if (!c->mc || c->lingering) {
        errno = ENOTCONN;
        return -1;
    }
    if (msgconn_send(c->mc, msg) < 0)
        return -1;
    c->t_send = uv_now(&c->b->loop);
    if (c->kind == CONN_CLIENT &&
        msgconn_queued(c->mc) > BROKER_CLIENT_QUEUE_MAX) {
        broker_log(c->b, LOG_LEVEL_WARNING,
                   "dropped client %s: more than %u MiB of unread output",
                   c->name, BROKER_CLIENT_QUEUE_MAX >> 20);
        conn_drop(c, ENOBUFS, "output queue full");
        errno = ENOBUFS;
        return -1;
    }
    return 0;
}

static void conn_unlink(struct conn *c)
{
    broker_t *b = c->b;

    msgconn_destroy(c->mc);
    c->mc = NULL;
    keymap_remove(b->conns, c->id, 0);
    if (c->prev)
        c->prev->next = c->next;
    else
        b->conns_list = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = NULL;
    c->next = b->zombies;
    b->zombies = c;
    if (b->handles_init)
        uv_check_start(&b->reaper, reaper_cb);
}

/* A protocol error deserves a warning; an ordinary hang-up does not. */
static bool is_protocol_error(int errnum)
{
    return errnum == EPROTO || errnum == EMSGSIZE || errnum == EINVAL ||
           errnum == EBADMSG;
}

void conn_drop(struct conn *c, int errnum, const char *reason)
{
    broker_t *b = c->b;

    if (!c->mc)
        return;
    if (c->lingering) {
        conn_unlink(c);
        return;
    }
    if (!reason)
        reason = errnum ? strerror(errnum) : "connection closed";
    if (c->kind == CONN_CLIENT) {
        if (is_protocol_error(errnum))
            broker_log(b, LOG_LEVEL_WARNING, "dropped client %s: %s", c->name,
                       reason);
        else
            broker_log(b, LOG_LEVEL_DEBUG, "client %s disconnected: %s",
                       c->name, reason);
    } else {
        overlay_conn_closed(c, errnum, reason);
        if (!c->mc) /* dropped again from inside the loss handling */
            return;
    }
    /* Unlink first so that nothing below can send to it again. */
    conn_unlink(c);
    broker_conn_cleanup(b, c, reason);
}

void conn_linger(struct conn *c)
{
    broker_t *b = c->b;

    if (!c->mc || c->lingering)
        return;
    c->lingering = true;
    c->linger_deadline = uv_now(&b->loop) + BROKER_LINGER_MS;
    if (b->handles_init && !uv_is_active((uv_handle_t *)&b->linger_timer))
        uv_timer_start(&b->linger_timer, conn_linger_cb, 10, 10);
}

void conn_linger_cb(uv_timer_t *t)
{
    broker_t *b = t->data;
    uint64_t now = uv_now(&b->loop);
    bool any = false;
    struct conn *c = b->conns_list;

    while (c) {
        struct conn *next = c->next;
        if (c->lingering) {
            if (msgconn_queued(c->mc) == 0 || now >= c->linger_deadline)
                conn_unlink(c);
            else
                any = true;
        }
        c = next;
    }
    if (!any) {
        uv_timer_stop(t);
        if (b->state == BROKER_FINISHED)
            broker_finished_check(b);
    }
}

bool conn_any_lingering(broker_t *b)
{
    for (struct conn *c = b->conns_list; c; c = c->next) {
        if (c->lingering)
            return true;
    }
    return false;
}
