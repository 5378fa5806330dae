/* future.c - eddy_future_t: readiness, continuations, waiting, destroy.
 *
 * Continuations never run from inside an API call: a future that becomes
 * ready (or gets a continuation while ready) is put on the handle's
 * pending list and the handle's async handle is poked, so the callback
 * runs from the next loop iteration, whoever runs the loop (our own waits,
 * the caller's uv_run(), or eddy_dispatch() after eddy_get_fd() polled
 * readable: the async handle's eventfd lives in the backend fd).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib.h"

static void timer_cb(uv_timer_t *timer);

eddy_future_t *fut_create(eddy_t *h,
                          const char *topic,
                          uint32_t rank,
                          int flags)
{
    eddy_future_t *f = calloc(1, sizeof(*f));

    if (!f || !(f->topic = strdup(topic))) {
        free(f);
        errno = ENOMEM;
        return NULL;
    }
    f->h = h;
    f->rank = rank;
    f->flags = flags;
    f->cb_timeout = -1;
    link_init(&f->notify);
    link_add_tail(&h->futures, &f->all);
    return f;
}

bool fut_ready(const eddy_future_t *f)
{
    return f->timed_out || f->qlen > 0 || f->term_errnum != 0;
}

/* Put 'f' on the pending list if its continuation is due. */
static void queue_notify(eddy_future_t *f)
{
    eddy_t *h = f->h;

    if (!f->cb || f->queued || f->notified || h->closing || !fut_ready(f))
        return;
    link_add_tail(&h->pending, &f->notify);
    f->queued = true;
    if (h->wakeup) {
        uv_ref((uv_handle_t *)h->wakeup);
        uv_async_send(h->wakeup);
    }
}

static void unqueue_notify(eddy_future_t *f)
{
    if (!f->queued)
        return;
    link_del(&f->notify);
    f->queued = false;
}

static void stop_timer(eddy_future_t *f)
{
    if (f->cb_timer)
        uv_timer_stop(f->cb_timer);
}

/* Arm the continuation's timeout, if it has one, while not ready. */
static int arm_timer(eddy_future_t *f)
{
    if (!f->cb || f->cb_timeout < 0 || fut_ready(f))
        return 0;
    if (!f->cb_timer) {
        if (!(f->cb_timer = malloc(sizeof(*f->cb_timer)))) {
            errno = ENOMEM;
            return -1;
        }
        uv_timer_init(f->h->loop, f->cb_timer);
        f->cb_timer->data = f;
    }
    /* libuv times from the loop's cached clock, which is stale when the
     * caller has not run the loop for a while: the timeout would expire
     * early. */
    uv_update_time(f->h->loop);
    uv_timer_start(f->cb_timer, timer_cb, timeout_ms(f->cb_timeout), 0);
    return 0;
}

static void send_cancel(eddy_future_t *f);

static void timer_cb(uv_timer_t *timer)
{
    eddy_future_t *f = timer->data;

    if (fut_ready(f))
        return;
    f->timed_out = true;
    /* The timeout is final: stop listening, or a stream would queue
     * responses nobody can ever read, and tell a streaming responder to
     * stop sending them. */
    if (f->registered) {
        if ((f->flags & EDDY_RPC_STREAMING) && !f->finished)
            send_cancel(f);
        handle_unregister(f->h, f);
    }
    f->finished = true;
    queue_notify(f);
    handle_wake(f->h);
}

int fut_push(eddy_future_t *f, msg_t *msg)
{
    if (f->qlen == f->qcap) {
        size_t ncap = f->qcap ? f->qcap * 2 : 4;
        msg_t **nq = malloc(ncap * sizeof(*nq));

        if (!nq) {
            msg_decref(msg);
            errno = ENOMEM;
            return -1;
        }
        for (size_t i = 0; i < f->qlen; i++)
            nq[i] = f->q[(f->qhead + i) % f->qcap];
        free(f->q);
        f->q = nq;
        f->qcap = ncap;
        f->qhead = 0;
    }
    f->q[(f->qhead + f->qlen) % f->qcap] = msg;
    f->qlen++;
    stop_timer(f);
    queue_notify(f);
    handle_wake(f->h);
    return 0;
}

static void pop_head(eddy_future_t *f)
{
    if (f->qlen == 0)
        return;
    msg_decref(f->q[f->qhead]);
    f->q[f->qhead] = NULL;
    f->qhead = (f->qhead + 1) % f->qcap;
    f->qlen--;
    free(f->json);
    f->json = NULL;
    f->errbuf[0] = '\0';
}

void fut_fail(eddy_future_t *f, int errnum, const char *text)
{
    handle_unregister(f->h, f);
    if (f->finished)
        return;
    f->finished = true;
    f->term_errnum = errnum;
    free(f->term_text);
    f->term_text = text ? strdup(text) : NULL; /* NULL: strerror */
    stop_timer(f);
    queue_notify(f);
    handle_wake(f->h);
}

static void send_cancel(eddy_future_t *f)
{
    msg_t *msg;

    if (!f->h->conn)
        return;
    if (!(msg = msg_create(MSG_REQUEST, f->topic, NULL, NULL, 0)))
        return;
    msg->matchtag = f->matchtag;
    msg->rank = f->rank;
    msg->flags = MSG_FLAG_CANCEL;
    (void)msgconn_send(f->h->conn, msg); /* best effort */
    msg_decref(msg);
}

void fut_deliver(eddy_future_t *f, msg_t *msg)
{
    bool streaming = f->flags & EDDY_RPC_STREAMING;
    bool last = !streaming || (msg->flags & MSG_FLAG_EOS) || msg->errnum != 0;

    /* A bare end-of-stream marker carries nothing to deliver: the stream
     * simply ends (ENODATA once the queue drains). */
    if (streaming && (msg->flags & MSG_FLAG_EOS) && msg->errnum == 0 &&
        !msg->body && msg->payload_len == 0)
        msg_decref(msg);
    else if (fut_push(f, msg) < 0) {
        if (!last)
            send_cancel(f);
        fut_fail(f, ENOMEM, "out of memory queueing a response");
        return;
    }
    if (last)
        fut_fail(f, ENODATA, NULL);
}

void fut_free(eddy_future_t *f)
{
    if (f->aux_destroy) {
        void (*aux_destroy)(void *) = f->aux_destroy;

        f->aux_destroy = NULL;
        aux_destroy(f->aux);
    }
    if (f->registered) {
        if ((f->flags & EDDY_RPC_STREAMING) && !f->finished)
            send_cancel(f);
        handle_unregister(f->h, f);
    }
    unqueue_notify(f);
    link_del(&f->all);
    if (f->cb_timer)
        uv_close((uv_handle_t *)f->cb_timer, free_handle_cb);
    while (f->qlen > 0)
        pop_head(f);
    free(f->q);
    free(f->json);
    free(f->term_text);
    json_decref(f->empty);
    free(f->topic);
    free(f);
}

void eddy_future_destroy(eddy_future_t *f)
{
    int saved_errno = errno;

    if (!f)
        return;
    if (f->in_cb) /* freed when the continuation returns */
        f->destroy_pending = true;
    else
        fut_free(f);
    errno = saved_errno;
}

static void call_continuation(eddy_future_t *f)
{
    eddy_t *h = f->h;

    f->notified = true;
    f->in_cb = true;
    h->depth++;
    f->cb(f, f->cb_arg);
    h->depth--;
    f->in_cb = false;
    if (f->destroy_pending)
        fut_free(f);
}

void fut_run_pending(eddy_t *h)
{
    struct link batch;

    /* Run only what is due now: a continuation that resets its future and
     * finds more responses queued is called again from the next loop
     * iteration, so one busy stream cannot starve the loop. */
    link_splice(&h->pending, &batch);
    while (!link_empty(&batch)) {
        eddy_future_t *f = link_entry(batch.next, eddy_future_t, notify);

        unqueue_notify(f);
        if (f->cb && !f->notified && fut_ready(f))
            call_continuation(f);
    }
    /* After eddy_close() from a continuation (h->closing) nothing is
     * queued any more and the batch was emptied. */
    if (link_empty(&h->pending))
        uv_unref((uv_handle_t *)h->wakeup);
    else
        uv_async_send(h->wakeup);
}

static bool future_ready_cb(void *arg)
{
    return fut_ready(arg);
}

int fut_wait(eddy_future_t *f, double timeout)
{
    eddy_t *h = f->h;
    int e;

    f->errbuf[0] = '\0';
    if (fut_ready(f))
        return 0;
    /* Running the loop from a callback would reenter uv_run(). */
    if (handle_busy(h)) {
        snprintf(f->errbuf, sizeof(f->errbuf),
                 "%s: cannot wait for a response from inside a callback",
                 f->topic);
        errno = EDEADLK;
        return -1;
    }
    if (handle_run_until(h, future_ready_cb, f, timeout) == 0)
        return 0;
    /* Say why in the future's error string too: tools print it. */
    e = errno;
    if (e == ETIMEDOUT)
        snprintf(f->errbuf, sizeof(f->errbuf), "%s: no response within %.3g s",
                 f->topic, timeout);
    else if (e == ENOTCONN)
        snprintf(f->errbuf, sizeof(f->errbuf), "connection to broker lost: %s",
                 h->lost_reason);
    else
        snprintf(f->errbuf, sizeof(f->errbuf),
                 "%s: nothing left to wait for (%s)", f->topic, strerror(e));
    errno = e;
    return -1;
}

int eddy_future_then(eddy_future_t *f,
                     double timeout,
                     eddy_continuation_f cb,
                     void *arg)
{
    if (!f || !cb) {
        errno = EINVAL;
        return -1;
    }
    f->cb = cb;
    f->cb_arg = arg;
    f->cb_timeout = timeout;
    /* A new then() is a new request to be told: if the future is ready,
     * the new continuation runs once even if an older one already ran for
     * this response. */
    f->notified = false;
    if (fut_ready(f)) {
        queue_notify(f);
    } else if (arm_timer(f) < 0) {
        f->cb = NULL;
        f->cb_arg = NULL;
        return -1;
    } else if (timeout < 0) {
        stop_timer(f);
    }
    return 0;
}

int eddy_future_wait_for(eddy_future_t *f, double timeout)
{
    if (!f) {
        errno = EINVAL;
        return -1;
    }
    if (fut_wait(f, timeout) < 0)
        return -1;
    if (f->timed_out) {
        errno = ETIMEDOUT;
        return -1;
    }
    /* Ready, but only because the connection (or memory) failed: no
     * response could come. */
    if (f->qlen == 0 && f->term_errnum != ENODATA) {
        errno = f->term_errnum;
        return -1;
    }
    return 0;
}

bool eddy_future_is_ready(eddy_future_t *f)
{
    return f ? fut_ready(f) : false;
}

void eddy_future_reset(eddy_future_t *f)
{
    if (!f)
        return;
    /* A timeout stays until destroy, and a terminal state (end of stream,
     * lost connection) has nothing to consume: the continuation is not
     * called again for either. */
    if (f->timed_out || f->qlen == 0)
        return;
    pop_head(f);
    f->notified = false;
    if (fut_ready(f))
        queue_notify(f);
    else
        (void)arm_timer(f); /* on ENOMEM the RPC simply has no timeout */
}

const char *eddy_future_error_string(eddy_future_t *f)
{
    const msg_t *msg;
    const char *s;

    if (!f)
        return "";
    if (f->errbuf[0])
        return f->errbuf;
    if (f->timed_out)
        return "timed out waiting for a response";
    if (f->qlen > 0) {
        msg = f->q[f->qhead];
        if (msg->errnum == 0)
            return "";
        return (s = msg_errstr(msg)) && *s ? s : strerror((int)msg->errnum);
    }
    if (f->term_errnum != 0)
        return f->term_text ? f->term_text : strerror(f->term_errnum);
    return "";
}

eddy_t *eddy_future_get_handle(eddy_future_t *f)
{
    return f ? f->h : NULL;
}
