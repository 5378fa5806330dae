/* logattach.c - attach to an output log that rank 0 keeps (a job's output
 * through job-io, a tool launch's through the tool service): the
 * machinery eddy_job_attach() and eddy_tool_attach() share.
 *
 * The caller's future 'af' is fulfilled by this code: it has no request
 * of its own.  The inner streaming RPC 'inner' delivers the records; its
 * continuation hands each to the API's record decoder (which calls the
 * user's callback), and completes 'af' at the end of the stream
 * (success), on an error response (its errno and message) or when the
 * connection is lost.  Destroying 'af' destroys 'inner', which cancels
 * the stream.
 *
 * The user's callback may destroy 'af' (or close the handle): 'delivering'
 * then keeps this state alive until the continuation has returned, and
 * 'af' NULL says it is gone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "lib.h"

struct logattach {
    eddy_future_t *af;
    eddy_future_t *inner;
    eddy_t *h;
    char credit_topic[64];
    json_t *ident; /* what names the log in credits: {"id"} or {"tool"} */
    uint64_t key;  /* names this attach in its credit messages */
    logattach_record_f record;
    void *arg;
    void (*arg_free)(void *arg);
    size_t dropped;
    size_t consumed; /* bytes delivered, not yet credited */
    bool delivering;
};

/* Rank 0 sends an attacher records while less than 4 MiB of it waits for
 * credit (src/broker/outlog.h); crediting each MiB keeps it flowing. */
enum { LOGATTACH_CREDIT_BYTES = 1 << 20 };

/* A key that no other attach to the same log through the same broker
 * connection is likely to use: random, within the 53 bits JSON readers
 * keep exact. */
static uint64_t attach_key(void)
{
    static uint64_t counter;
    uint64_t k;

    if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k))
        k = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL) << 8;
    k ^= __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED); /* threads */
    return k & ((UINT64_C(1) << 53) - 1);
}

/* Tell rank 0 that 'len' more bytes were delivered, once a MiB has
 * accumulated.  Fire and forget: if it is lost the connection is gone,
 * and the attach fails anyway. */
static void attach_credit(struct logattach *st, size_t len)
{
    eddy_future_t *f;
    json_t *o;

    st->consumed += len;
    if (st->consumed < LOGATTACH_CREDIT_BYTES)
        return;
    if ((o = json_deep_copy(st->ident)) &&
        json_object_set_new(o, "key", json_integer((json_int_t)st->key)) == 0 &&
        json_object_set_new(o, "bytes",
                            json_integer((json_int_t)st->consumed)) == 0) {
        f = rpc_send(st->h, st->credit_topic, 0, EDDY_RPC_NORESPONSE, o, NULL,
                     0);
        o = NULL;
        eddy_future_destroy(f);
    }
    json_decref(o);
    st->consumed = 0;
}

static void attach_drop_inner(struct logattach *st)
{
    eddy_future_t *inner = st->inner;

    if (!inner)
        return;
    st->inner = NULL;
    inner->aux = NULL;
    inner->aux_destroy = NULL;
    eddy_future_destroy(inner); /* deferred if inside its continuation */
}

static void state_free(struct logattach *st)
{
    if (st->arg_free)
        st->arg_free(st->arg);
    json_decref(st->ident);
    free(st);
}

/* 'af' is being freed. */
static void attach_destroy(void *arg)
{
    struct logattach *st = arg;

    st->af = NULL;
    attach_drop_inner(st);
    if (!st->delivering)
        state_free(st);
}

/* 'inner' is being freed first (eddy_close() frees in list order). */
static void attach_inner_gone(void *arg)
{
    struct logattach *st = arg;

    st->inner = NULL;
}

/* Fulfil 'af': errnum 0 for success, else an error response with 'text'
 * (or, for a terminal state such as ENOTCONN, that state). */
static void attach_complete(struct logattach *st,
                            int errnum,
                            const char *text,
                            bool terminal)
{
    eddy_future_t *af = st->af;
    json_t *body = NULL;
    msg_t *msg;
    char oom[96];

    snprintf(oom, sizeof(oom), "out of memory completing %s", af->topic);
    attach_drop_inner(st);
    if (terminal) {
        fut_fail(af, errnum, text);
        return;
    }
    if ((errnum && text && !(body = json_pack("{s:s}", "errstr", text))) ||
        !(msg = msg_create(MSG_RESPONSE, af->topic, body, NULL, 0))) {
        fut_fail(af, ENOMEM, oom);
        return;
    }
    msg->errnum = (uint32_t)errnum;
    if (fut_push(af, msg) < 0) {
        fut_fail(af, ENOMEM, oom);
        return;
    }
    fut_fail(af, ENODATA, NULL);
}

/* One record: {"dropped"}, or whatever the API's decoder reads. */
static int attach_record(struct logattach *st,
                         const json_t *body,
                         const void *data,
                         size_t len,
                         char *why,
                         size_t whysize)
{
    const json_t *v;

    if ((v = json_object_get(body, "dropped"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            snprintf(why, whysize, "dropped: expected an integer >= 0");
            return -1;
        }
        st->dropped = (size_t)json_integer_value(v);
        return 0;
    }
    /* credit first: the callback may close the handle */
    if (len > 0)
        attach_credit(st, len);
    return st->record(body, data, len, st->arg, why, whysize);
}

/* One response per call: a busy log cannot starve the caller's loop (the
 * continuation runs again from the next iteration if more are queued). */
static void attach_continuation(eddy_future_t *inner, void *arg)
{
    struct logattach *st = arg;
    const void *data;
    size_t len;
    const json_t *body;
    char why[160] = "";

    st->delivering = true;
    if (eddy_rpc_get_raw(inner, &data, &len) < 0) {
        int e = errno;

        if (e == ENODATA)
            attach_complete(st, 0, NULL, false);
        else
            attach_complete(st, e, eddy_future_error_string(inner),
                            inner->qlen == 0);
        goto out;
    }
    /* the response is there (eddy_rpc_get_raw() succeeded) */
    body = inner->q[inner->qhead]->body;
    if (!body) {
        snprintf(why, sizeof(why), "a record without a body");
        goto malformed;
    }
    if (attach_record(st, body, data, len, why, sizeof(why)) < 0)
        goto malformed;
    if (st->af)
        eddy_future_reset(inner);
out:
    st->delivering = false;
    if (!st->af)
        state_free(st);
    return;
malformed:
    if (st->af) {
        char msg[256];

        snprintf(msg, sizeof(msg), "malformed response to %s: %s",
                 st->af->topic, why);
        attach_complete(st, EPROTO, msg, false);
    }
    goto out;
}

eddy_future_t *logattach_create(eddy_t *h,
                                const char *topic,
                                const char *credit_topic,
                                const char *idkey,
                                uint64_t id,
                                logattach_record_f record,
                                void *arg,
                                void (*arg_free)(void *arg))
{
    struct logattach *st = NULL;
    eddy_future_t *af = NULL;
    json_t *o;
    int e;

    if (!h->conn) {
        if (arg_free)
            arg_free(arg);
        errno = ENOTCONN;
        return NULL;
    }
    if (!(st = calloc(1, sizeof(*st))) ||
        !(st->ident = json_pack("{s:I}", idkey, (json_int_t)id)) ||
        !(af = fut_create(h, topic, 0, 0))) {
        if (st)
            json_decref(st->ident);
        free(st);
        if (arg_free)
            arg_free(arg);
        errno = ENOMEM;
        return NULL;
    }
    st->af = af;
    st->h = h;
    snprintf(st->credit_topic, sizeof(st->credit_topic), "%s", credit_topic);
    st->key = attach_key();
    st->record = record;
    st->arg = arg;
    st->arg_free = arg_free;
    af->aux = st;
    af->aux_destroy = attach_destroy;
    if (!(o = json_pack("{s:I s:I}", idkey, (json_int_t)id, "key",
                        (json_int_t)st->key))) {
        errno = ENOMEM;
        goto error;
    }
    if (!(st->inner = rpc_send(h, topic, 0, EDDY_RPC_STREAMING, o, NULL, 0)))
        goto error;
    st->inner->aux = st;
    st->inner->aux_destroy = attach_inner_gone;
    if (eddy_future_then(st->inner, -1, attach_continuation, st) < 0)
        goto error;
    return af;
error:
    e = errno;
    fut_free(af); /* frees 'st' and the inner RPC */
    errno = e;
    return NULL;
}

size_t logattach_dropped(eddy_future_t *af)
{
    if (!af || af->aux_destroy != attach_destroy)
        return 0;
    return ((struct logattach *)af->aux)->dropped;
}
