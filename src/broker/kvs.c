/* kvs.c - the "kvs" service of every broker: the key-value exchange of a
 * job's shells (PMI puts) as a tree collective (docs/kvs-fence.md).
 *
 *   kvs.fence  from the local shell or a child broker:
 *              {"id","seq","ranks"} + payload: records "KEY\0VALUE\0";
 *              answered with {"count": N} + the whole job's records, once
 *              every contribution is concatenated at rank 0
 *   kvs.abort  between brokers, no response: {"id","seq","ranks",
 *              "errnum","errstr","from"}: the fence failed somewhere
 *
 * Each broker holds at most one fence in progress per job (a participant
 * only starts fence N+1 once this broker answered fence N) and remembers,
 * per job, the last fence that finished here and how, so that a late or
 * repeated contribution is answered at once instead of waiting forever.
 * A fence that fails anywhere floods kvs.abort over the job's part of the
 * tree, so every participant gets the error without waiting for the rest.
 *
 * The records are bulk data: brokers only check their shape (a memchr()
 * scan), concatenate them going up and pass the root's bytes unchanged
 * going down; they never decode them into JSON (docs/architecture.md).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "src/broker/broker.h"
#include "src/broker/fence.h"
#include "src/broker/service.h"
#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/log.h"
#include "src/common/topology.h"

/* Jobs remembered per broker: the idle ones used least recently are
 * forgotten past this, so memory stays bounded whatever the job count. */
#define KVS_JOBS_MAX 1024

/* The job's records travel down in one response payload. */
_Static_assert(FENCE_KVS_MAX <= MSG_PAYLOAD_MAX, "fence payload too large");

struct active {
    int64_t seq;
    char *ranks_str; /* canonical, to check that every contribution agrees */
    fence_t *f;
    broker_req_t **reqs; /* per slot, while waiting for the answer */
    broker_rpc_t *up;    /* our contribution to the parent, once sent */
};

struct kvs_ctx;

struct kjob {
    struct kvs_ctx *ctx;
    uint64_t id;
    int64_t done_seq; /* last fence finished here, 0 if none */
    int done_errnum;  /* 0: it succeeded */
    char *done_errstr;
    struct active *act;
    uint64_t used; /* ctx->clock when last touched */
    struct kjob *prev, *next;
};

struct kvs_ctx {
    broker_t *b;
    struct kjob *jobs;
    unsigned njobs;
    uint64_t clock;
};

static void active_destroy(struct active *a)
{
    if (a) {
        broker_rpc_destroy(a->up);
        if (a->reqs) {
            for (uint32_t i = 0; i < fence_nslots(a->f); i++)
                broker_req_decref(a->reqs[i]);
            free(a->reqs);
        }
        fence_destroy(a->f);
        free(a->ranks_str);
        free(a);
    }
}

static void kjob_unlink_free(struct kvs_ctx *ctx, struct kjob *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        ctx->jobs = j->next;
    if (j->next)
        j->next->prev = j->prev;
    ctx->njobs--;
    active_destroy(j->act);
    free(j->done_errstr);
    free(j);
}

static struct kjob *kjob_lookup(struct kvs_ctx *ctx, uint64_t id)
{
    for (struct kjob *j = ctx->jobs; j; j = j->next) {
        if (j->id == id) {
            j->used = ++ctx->clock;
            return j;
        }
    }
    return NULL;
}

/* Find or make the record of job 'id'; forget the least recently used
 * idle job if there are too many.  NULL with errno ENOSPC or ENOMEM. */
static struct kjob *kjob_get(struct kvs_ctx *ctx, uint64_t id)
{
    struct kjob *j = kjob_lookup(ctx, id);

    if (j)
        return j;
    if (ctx->njobs >= KVS_JOBS_MAX) {
        struct kjob *old = NULL;
        for (struct kjob *k = ctx->jobs; k; k = k->next)
            if (!k->act && (!old || k->used < old->used))
                old = k;
        if (!old) {
            errno = ENOSPC;
            return NULL;
        }
        kjob_unlink_free(ctx, old);
    }
    if (!(j = calloc(1, sizeof(*j)))) {
        errno = ENOMEM;
        return NULL;
    }
    j->ctx = ctx;
    j->id = id;
    j->used = ++ctx->clock;
    j->next = ctx->jobs;
    if (ctx->jobs)
        ctx->jobs->prev = j;
    ctx->jobs = j;
    ctx->njobs++;
    return j;
}

/* Remember how fence 'seq' ended here. */
static void kjob_done(struct kjob *j, int64_t seq, int errnum, const char *s)
{
    if (seq > j->done_seq) {
        j->done_seq = seq;
        j->done_errnum = errnum;
        free(j->done_errstr);
        j->done_errstr = errnum && s ? strdup(s) : NULL;
    }
}

/* Tell a neighbour that fence (id, seq) failed (no response wanted). */
static void send_abort(struct kvs_ctx *ctx,
                       uint32_t to,
                       struct kjob *j,
                       int64_t seq,
                       const char *ranks,
                       int errnum,
                       const char *errstr)
{
    json_t *o;
    broker_rpc_t *rpc;

    o = json_pack("{s:I s:I s:s s:i s:s s:I}", "id", (json_int_t)j->id, "seq",
                  (json_int_t)seq, "ranks", ranks, "errnum", errnum, "errstr",
                  errstr, "from", (json_int_t)broker_rank(ctx->b));
    if (!o || !(rpc = broker_rpc(ctx->b, "kvs.abort", to, BROKER_RPC_NORESPONSE,
                                 o, NULL, 0, NULL, NULL))) {
        broker_log(ctx->b, LOG_LEVEL_ERR,
                   "kvs: job %ju fence %jd: cannot tell rank %u it failed",
                   (uintmax_t)j->id, (intmax_t)seq, to);
        return;
    }
    broker_rpc_destroy(rpc);
}

/* Flood the failure of fence (id, seq) over the job's part of the tree:
 * to the parent and to every child above a rank of the job that has not
 * contributed here (those that did get our error response), except
 * 'from', where it came from.  'f' may be NULL (computed from 'ranks'). */
static void flood_abort(struct kvs_ctx *ctx,
                        struct kjob *j,
                        int64_t seq,
                        const char *ranks,
                        const fence_t *f,
                        uint32_t from,
                        int errnum,
                        const char *errstr)
{
    broker_t *b = ctx->b;
    fence_t *tmp = NULL;
    uint32_t parent = topo_parent(b->rank, b->fanout);

    if (parent != TOPO_NONE && parent != from)
        send_abort(ctx, parent, j, seq, ranks, errnum, errstr);
    if (!f) {
        idset_t *set = idset_decode(ranks, NULL);
        if (set)
            tmp = fence_create(b->rank, b->size, b->fanout, set, NULL);
        idset_destroy(set);
        if (!(f = tmp))
            return;
    }
    for (uint32_t s = 1; s < fence_nslots(f); s++) {
        uint32_t child = fence_slot_rank(f, (int)s);
        if (fence_slot_expected(f, (int)s) && !fence_slot_filled(f, (int)s) &&
            child != from && !broker_rank_lost(b, child))
            send_abort(ctx, child, j, seq, ranks, errnum, errstr);
    }
    fence_destroy(tmp);
}

/* Fence 'j->act' failed: answer every participant waiting here with the
 * error, tell the rest of the job, free the state. */
static void fence_fail(struct kvs_ctx *ctx,
                       struct kjob *j,
                       uint32_t from,
                       int errnum,
                       const char *fmt,
                       ...) __attribute__((format(printf, 5, 6)));

static void fence_fail(struct kvs_ctx *ctx,
                       struct kjob *j,
                       uint32_t from,
                       int errnum,
                       const char *fmt,
                       ...)
{
    struct active *a = j->act;
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    j->act = NULL;
    kjob_done(j, a->seq, errnum, msg);
    broker_log(ctx->b, LOG_LEVEL_DEBUG, "kvs: job %ju fence %jd failed: %s",
               (uintmax_t)j->id, (intmax_t)a->seq, msg);
    for (uint32_t s = 0; s < fence_nslots(a->f); s++)
        if (a->reqs[s])
            broker_respond_error(a->reqs[s], errnum, "%s", msg);
    flood_abort(ctx, j, a->seq, a->ranks_str, a->f, from, errnum, msg);
    active_destroy(a);
}

/* The fence is complete everywhere: answer every participant here with
 * the whole job's records ('count' of them in 'data'/'len'), the same
 * bytes for each. */
static void fence_succeed(struct kvs_ctx *ctx,
                          struct kjob *j,
                          json_int_t count,
                          const void *data,
                          size_t len)
{
    struct active *a = j->act;

    j->act = NULL;
    kjob_done(j, a->seq, 0, NULL);
    for (uint32_t s = 0; s < fence_nslots(a->f); s++) {
        json_t *o;
        if (!a->reqs[s])
            continue;
        if (!(o = json_pack("{s:I}", "count", count)) ||
            broker_respond(a->reqs[s], o, data, len, 0) < 0)
            broker_respond_error(a->reqs[s], errno ? errno : ENOMEM,
                                 "kvs.fence: rank %u: cannot send the result",
                                 broker_rank(ctx->b));
    }
    active_destroy(a);
}

/* The parent's answer: the whole job's records, or the error of the
 * whole fence. */
static void up_cb(broker_rpc_t *rpc, const msg_t *msg, void *arg)
{
    struct kjob *j = arg;
    struct kvs_ctx *ctx = j->ctx;
    struct active *a = j->act;
    json_int_t count = -1;

    if (!a || a->up != rpc)
        return;
    if (msg->errnum) {
        const char *s = msg_errstr(msg);
        fence_fail(ctx, j, topo_parent(ctx->b->rank, ctx->b->fanout),
                   (int)msg->errnum, "%s",
                   s && *s ? s : strerror((int)msg->errnum));
        return;
    }
    /* Only the metadata is checked: the records were checked where they
     * entered the tree, and the shells decode them. */
    if (!msg->body ||
        json_unpack_ex(msg->body, NULL, 0, "{s:I}", "count", &count) < 0 ||
        count < 0 || (size_t)count > msg->payload_len / 2) {
        fence_fail(ctx, j, TOPO_NONE, EPROTO,
                   "kvs.fence: job %ju fence %jd: rank %u: bad answer from"
                   " rank %u",
                   (uintmax_t)j->id, (intmax_t)a->seq, ctx->b->rank,
                   topo_parent(ctx->b->rank, ctx->b->fanout));
        return;
    }
    fence_succeed(ctx, j, count, msg->payload, msg->payload_len);
}

/* Every contribution is in: answer at the root, else pass the
 * concatenated records up. */
static void fence_progress(struct kvs_ctx *ctx, struct kjob *j)
{
    struct active *a = j->act;
    broker_t *b = ctx->b;
    json_t *o;

    if (!fence_complete(a->f) || a->up)
        return;
    if (b->rank == 0) {
        fence_succeed(ctx, j, (json_int_t)fence_nkeys(a->f), fence_data(a->f),
                      fence_size(a->f));
        return;
    }
    o = json_pack("{s:I s:I s:s}", "id", (json_int_t)j->id, "seq",
                  (json_int_t)a->seq, "ranks", a->ranks_str);
    if (!o ||
        !(a->up = broker_rpc(b, "kvs.fence", topo_parent(b->rank, b->fanout), 0,
                             o, fence_data(a->f), fence_size(a->f), up_cb, j)))
        fence_fail(ctx, j, TOPO_NONE, errno ? errno : ENOMEM,
                   "kvs.fence: job %ju fence %jd: rank %u: cannot forward: %s",
                   (uintmax_t)j->id, (intmax_t)a->seq, b->rank,
                   strerror(errno ? errno : ENOMEM));
}

/* Who a participant is, for error messages. */
static void slot_name(const struct kvs_ctx *ctx,
                      const struct active *a,
                      int slot,
                      char *buf,
                      size_t len)
{
    if (slot == FENCE_SLOT_LOCAL)
        snprintf(buf, len, "rank %u: the shell", broker_rank(ctx->b));
    else
        snprintf(buf, len, "rank %u", fence_slot_rank(a->f, slot));
}

/* A participant waiting here went away (disconnect or cancel). */
static void drop_slot(struct kvs_ctx *ctx,
                      struct kjob *j,
                      int slot,
                      const char *why)
{
    char who[64];

    slot_name(ctx, j->act, slot, who, sizeof(who));
    fence_fail(ctx, j, TOPO_NONE,
               slot == FENCE_SLOT_LOCAL ? ECONNRESET : EHOSTUNREACH,
               "kvs.fence: job %ju fence %jd: %s %s", (uintmax_t)j->id,
               (intmax_t)j->act->seq, who, why);
}

/* A new fence here: fails at once if a child it waits for is lost. */
static int active_start(struct kvs_ctx *ctx,
                        struct kjob *j,
                        int64_t seq,
                        const idset_t *ranks,
                        eddy_error_t *err)
{
    broker_t *b = ctx->b;
    struct active *a;

    if (!(a = calloc(1, sizeof(*a)))) {
        errno = ENOMEM;
        return errprintf(err, "out of memory");
    }
    a->seq = seq;
    if (!(a->f = fence_create(b->rank, b->size, b->fanout, ranks, err)))
        goto error;
    if (!(a->ranks_str = idset_encode(ranks)) ||
        !(a->reqs = calloc(fence_nslots(a->f), sizeof(a->reqs[0])))) {
        errno = ENOMEM;
        errprintf(err, "out of memory");
        goto error;
    }
    j->act = a;
    return 0;
error:
    active_destroy(a);
    return -1;
}

/* After a new fence is set up: a child it waits for may already be
 * lost. */
static bool check_lost(struct kvs_ctx *ctx, struct kjob *j)
{
    struct active *a = j->act;

    for (uint32_t s = 1; s < fence_nslots(a->f); s++) {
        if (fence_slot_expected(a->f, (int)s) && !a->reqs[s] &&
            broker_rank_lost(ctx->b, fence_slot_rank(a->f, (int)s))) {
            drop_slot(ctx, j, (int)s, "lost");
            return true;
        }
    }
    return false;
}

static void fence_cancel(struct kvs_ctx *ctx, broker_req_t *req)
{
    for (struct kjob *j = ctx->jobs; j; j = j->next) {
        struct active *a = j->act;
        if (!a)
            continue;
        for (uint32_t s = 0; s < fence_nslots(a->f); s++) {
            if (a->reqs[s] && broker_req_same(a->reqs[s], req)) {
                drop_slot(ctx, j, (int)s, "cancelled its contribution");
                return;
            }
        }
    }
}

static void fence_cb(broker_req_t *req, void *arg)
{
    struct kvs_ctx *ctx = arg;
    broker_t *b = ctx->b;
    const msg_t *msg = broker_req_msg(req);
    json_int_t id, seq;
    const char *ranks_s;
    idset_t *ranks = NULL;
    char *canon = NULL;
    struct kjob *j;
    struct conn *child;
    eddy_error_t err;
    int slot, errnum;

    if (broker_req_is_cancel(req)) {
        fence_cancel(ctx, req);
        return;
    }
    /* decode */
    if (!msg->body || json_unpack_ex(msg->body, NULL, 0, "{s:I s:I s:s}", "id",
                                     &id, "seq", &seq, "ranks", &ranks_s) < 0) {
        errno = EPROTO;
        errprintf(&err, "kvs.fence: rank %u: want {id, seq, ranks}", b->rank);
        goto error;
    }
    /* validate */
    if (id < 0 || seq < 1) {
        errno = EINVAL;
        errprintf(&err, "kvs.fence: rank %u: bad id or seq %jd", b->rank,
                  (intmax_t)seq);
        goto error;
    }
    if (!(ranks = idset_decode(ranks_s, &err)) ||
        !(canon = idset_encode(ranks))) {
        errno = errno ? errno : ENOMEM;
        goto error;
    }
    if (!(j = kjob_get(ctx, (uint64_t)id))) {
        errprintf(&err, "kvs.fence: rank %u: %s", b->rank,
                  errno == ENOSPC ? "too many jobs fencing at once"
                                  : "out of memory");
        goto error;
    }
    if (seq == j->done_seq && j->done_errnum) {
        /* a late contribution to a fence that failed: same error */
        broker_respond_error(req, j->done_errnum, "%s",
                             j->done_errstr ? j->done_errstr : "failed");
        goto done;
    }
    if (seq <= j->done_seq || (j->act && j->act->seq != seq)) {
        errno = EINVAL;
        errprintf(&err,
                  "kvs.fence: job %ju: rank %u: fence %jd out of order"
                  " (fence %jd %s)",
                  (uintmax_t)j->id, b->rank, (intmax_t)seq,
                  (intmax_t)(j->act ? j->act->seq : j->done_seq),
                  j->act ? "in progress" : "done");
        goto error;
    }
    /* act */
    if (!j->act) {
        if (active_start(ctx, j, seq, ranks, &err) < 0) {
            char why[sizeof(err.text)];
            errnum = errno;
            snprintf(why, sizeof(why), "%s", err.text);
            errprintf(&err, "kvs.fence: job %ju: %s", (uintmax_t)j->id, why);
            errno = errnum;
            goto error;
        }
    } else if (strcmp(canon, j->act->ranks_str) != 0) {
        broker_req_incref(req);
        fence_fail(ctx, j, TOPO_NONE, EINVAL,
                   "kvs.fence: job %ju fence %jd: rank %u: ranks %s differ"
                   " from %s",
                   (uintmax_t)j->id, (intmax_t)seq, b->rank, canon,
                   j->act->ranks_str);
        broker_respond_error(req, EINVAL, "kvs.fence: ranks differ");
        broker_req_decref(req);
        goto done;
    }
    if ((child = broker_origin_child(b, broker_req_origin(req))))
        slot = fence_child_slot(j->act->f, child->rank);
    else
        slot = FENCE_SLOT_LOCAL;
    if (!fence_slot_expected(j->act->f, slot) || j->act->reqs[slot]) {
        errno = EINVAL;
        errprintf(&err, "kvs.fence: job %ju fence %jd: rank %u: %s %u %s",
                  (uintmax_t)j->id, (intmax_t)seq, b->rank,
                  child ? "child" : "local shell of rank",
                  child ? child->rank : b->rank,
                  j->act->reqs[slot >= 0 ? slot : 0] && slot >= 0
                      ? "contributed twice"
                      : "is not part of the job");
        if (fence_nreceived(j->act->f) == 0) {
            /* nothing waits on it: do not keep a fence for a stray */
            active_destroy(j->act);
            j->act = NULL;
        }
        goto error;
    }
    j->act->reqs[slot] = broker_req_incref(req);
    if (check_lost(ctx, j))
        goto done;
    if (fence_add(j->act->f, slot, msg->payload, msg->payload_len, &err) < 0) {
        char who[64];
        slot_name(ctx, j->act, slot, who, sizeof(who));
        fence_fail(ctx, j, TOPO_NONE, errno,
                   "kvs.fence: job %ju fence %jd: %s: %s", (uintmax_t)j->id,
                   (intmax_t)seq, who, err.text);
        goto done;
    }
    fence_progress(ctx, j);
done:
    idset_destroy(ranks);
    free(canon);
    return;
error:
    broker_respond_error(req, errno, "%s", err.text);
    idset_destroy(ranks);
    free(canon);
}

static void abort_cb(broker_req_t *req, void *arg)
{
    struct kvs_ctx *ctx = arg;
    broker_t *b = ctx->b;
    const msg_t *msg = broker_req_msg(req);
    json_int_t id, seq, from = TOPO_NONE;
    const char *ranks_s, *errstr;
    int errnum;
    struct kjob *j;

    if (broker_req_is_cancel(req))
        return;
    if (!msg->body ||
        json_unpack_ex(msg->body, NULL, 0, "{s:I s:I s:s s:i s:s s?I}", "id",
                       &id, "seq", &seq, "ranks", &ranks_s, "errnum", &errnum,
                       "errstr", &errstr, "from", &from) < 0 ||
        id < 0 || seq < 1 || errnum <= 0) {
        broker_respond_error(req, EPROTO, "kvs.abort: rank %u: bad request",
                             b->rank);
        return;
    }
    if (!(j = kjob_get(ctx, (uint64_t)id))) {
        broker_respond_error(req, errno, "kvs.abort: rank %u: no room",
                             b->rank);
        return;
    }
    if (seq <= j->done_seq) {
        /* already over here: the flood stops */
    } else if (j->act && j->act->seq == seq) {
        fence_fail(ctx, j, (uint32_t)from, errnum, "%s", errstr);
    } else {
        kjob_done(j, seq, errnum, errstr);
        flood_abort(ctx, j, seq, ranks_s, NULL, (uint32_t)from, errnum, errstr);
    }
    broker_respond(req, NULL, NULL, 0, 0);
}

static void kvs_disconnect(void *arg, uint64_t origin)
{
    struct kvs_ctx *ctx = arg;
    struct kjob *j, *next;

    for (j = ctx->jobs; j; j = next) {
        struct active *a = j->act;
        next = j->next;
        if (!a)
            continue;
        for (uint32_t s = 0; s < fence_nslots(a->f); s++) {
            if (a->reqs[s] && broker_req_origin(a->reqs[s]) == origin) {
                drop_slot(ctx, j, (int)s,
                          s == FENCE_SLOT_LOCAL ? "disconnected" : "lost");
                break;
            }
        }
        /* a child we wait for, lost before it contributed */
        if (j->act)
            check_lost(ctx, j);
    }
}

static int kvs_init(broker_t *b, void **arg)
{
    struct kvs_ctx *ctx = calloc(1, sizeof(*ctx));

    if (!ctx)
        return -1;
    ctx->b = b;
    *arg = ctx;
    return 0;
}

static void kvs_shutdown(void *arg)
{
    struct kvs_ctx *ctx = arg;

    for (struct kjob *j = ctx->jobs; j; j = j->next) {
        struct active *a = j->act;
        if (!a)
            continue;
        j->act = NULL;
        for (uint32_t s = 0; s < fence_nslots(a->f); s++)
            if (a->reqs[s])
                broker_respond_error(a->reqs[s], ESHUTDOWN,
                                     "kvs.fence: job %ju fence %jd: rank %u"
                                     " shut down",
                                     (uintmax_t)j->id, (intmax_t)a->seq,
                                     ctx->b->rank);
        active_destroy(a);
    }
}

static void kvs_destroy(void *arg)
{
    struct kvs_ctx *ctx = arg;

    if (ctx) {
        while (ctx->jobs)
            kjob_unlink_free(ctx, ctx->jobs);
        free(ctx);
    }
}

static const struct service_handler kvs_handlers[] = {
    {"kvs.fence", fence_cb},
    {"kvs.abort", abort_cb},
    {NULL, NULL},
};

const struct service_def kvs_service = {
    .name = "kvs",
    .handlers = kvs_handlers,
    .init = kvs_init,
    .disconnect = kvs_disconnect,
    .shutdown = kvs_shutdown,
    .destroy = kvs_destroy,
};
