/* proctable.c - the "proctable" service of every broker: a job's process
 * table (rank, pid, hostname, executable, broker rank, appnum), the table
 * MPIR debuggers read, gathered over the broker tree when asked for.
 *
 *   proctable.get     from a client, at rank 0: {"id"}; answered with
 *                     {"count": N} + payload: the whole table in the
 *                     compact encoding of src/common/proctable.h
 *   proctable.gather  from the parent broker: {"id", "ranks"} (the job's
 *                     broker ranks); answered with {"count": n} + payload:
 *                     the encoded entries of this broker's subtree
 *
 * A gather at broker R asks each child whose subtree holds a broker of the
 * job (the fence shape of src/broker/fence.h says which), adds its own
 * node's tasks if it is in the job (job_exec_fragment()), merges the
 * children's answers as they come and answers once all are in.  Each tree
 * edge of the job carries one message each way, and each answer is one
 * compact table (strings once, ranges of ranks), so a 16k-task table
 * costs little at any hop.  The data is read where it lives, from each
 * broker's job-exec, so a query disturbs no shell and no task.
 *
 * Any failure (a broker lost, a node whose tasks have ended) fails the
 * whole gather with a message naming the rank: a debugger wants every
 * process or a reason.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "src/broker/broker.h"
#include "src/broker/fence.h"
#include "src/broker/job.h"
#include "src/broker/service.h"
#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/log.h"
#include "src/common/proctable.h"

struct pt_ctx;

struct gather {
    struct pt_ctx *ctx;
    struct gather *prev, *next;
    broker_req_t *req; /* the request this gather answers */
    uint64_t id;
    uint32_t ntasks; /* proctable.get: the job's task count, else 0 */
    char *ranks;     /* the job's broker ranks, passed to the children */
    fence_t *f;      /* which children hold a part of the job */
    proctable_t *pt;
    broker_rpc_t **rpcs; /* per fence slot (slot 0, the local one, unused) */
    uint32_t pending;    /* children not yet answered */
};

struct pt_ctx {
    broker_t *b;
    struct gather *gathers; /* in progress */
};

static void gather_destroy(struct gather *g)
{
    if (!g)
        return;
    if (g->prev)
        g->prev->next = g->next;
    else if (g->ctx->gathers == g)
        g->ctx->gathers = g->next;
    if (g->next)
        g->next->prev = g->prev;
    for (uint32_t s = 0; g->rpcs && s < fence_nslots(g->f); s++)
        broker_rpc_destroy(g->rpcs[s]);
    free(g->rpcs);
    fence_destroy(g->f);
    proctable_destroy(g->pt);
    free(g->ranks);
    broker_req_decref(g->req);
    free(g);
}

static void gather_fail(struct gather *g, int errnum, const char *msg)
{
    broker_respond_error(g->req, errnum, "%s", msg);
    gather_destroy(g);
}

/* Every part is in: answer with the encoded table. */
static void gather_finish(struct gather *g)
{
    void *buf = NULL;
    size_t len = 0, count = proctable_count(g->pt);
    char msg[256];

    if (g->ntasks > 0 && !proctable_is_complete(g->pt, g->ntasks)) {
        snprintf(msg, sizeof(msg),
                 "job %" PRIu64 ": the proctable has %zu entries for %u tasks",
                 g->id, count, g->ntasks);
        gather_fail(g, EIO, msg);
        return;
    }
    if (proctable_encode(g->pt, &buf, &len) < 0) {
        snprintf(msg, sizeof(msg), "job %" PRIu64 ": proctable: %s", g->id,
                 strerror(errno));
        gather_fail(g, errno, msg);
        return;
    }
    if (len > MSG_PAYLOAD_MAX) {
        snprintf(msg, sizeof(msg),
                 "job %" PRIu64 ": the proctable (%zu bytes) exceeds the "
                 "message limit",
                 g->id, len);
        free(buf);
        gather_fail(g, E2BIG, msg);
        return;
    }
    broker_respond(g->req, json_pack("{s:I}", "count", (json_int_t)count), buf,
                   len, 0);
    free(buf);
    gather_destroy(g);
}

static void on_child(broker_rpc_t *rpc, const msg_t *msg, void *arg)
{
    struct gather *g = arg;
    eddy_error_t err = {{0}};
    char text[sizeof(err.text) + 64];

    if (msg->errnum) {
        const char *why = msg_errstr(msg);
        snprintf(text, sizeof(text), "%s",
                 why ? why : strerror((int)msg->errnum));
        gather_fail(g, (int)msg->errnum, text);
        return;
    }
    if (proctable_merge_encoded(g->pt, msg->payload, msg->payload_len, &err) <
        0) {
        snprintf(text, sizeof(text), "job %" PRIu64 ": rank %u: %s", g->id,
                 broker_rpc_rank(rpc), err.text);
        gather_fail(g, errno, text);
        return;
    }
    if (--g->pending == 0)
        gather_finish(g);
}

/* Start gathering job 'id' on broker ranks 'ranks' for 'req': ask the
 * children, add the local part.  Answers 'req' on every path. */
static void gather_start(struct pt_ctx *ctx,
                         broker_req_t *req,
                         uint64_t id,
                         const char *ranks,
                         uint32_t ntasks)
{
    broker_t *b = ctx->b;
    struct gather *g;
    idset_t *set = NULL;
    eddy_error_t err = {{0}};

    if (!(g = calloc(1, sizeof(*g)))) {
        broker_respond_error(req, ENOMEM, "out of memory");
        return;
    }
    g->ctx = ctx;
    g->req = broker_req_incref(req);
    g->id = id;
    g->ntasks = ntasks;
    if ((g->next = ctx->gathers))
        g->next->prev = g;
    ctx->gathers = g;
    if (!(g->ranks = strdup(ranks)) || !(g->pt = proctable_create()))
        goto nomem;
    if (!(set = idset_decode(ranks, &err)) ||
        !(g->f = fence_create(b->rank, b->size, b->fanout, set, &err))) {
        char text[sizeof(err.text) + 64];
        snprintf(text, sizeof(text), "proctable.gather: job %" PRIu64 ": %s",
                 id, err.text);
        idset_destroy(set);
        gather_fail(g, EINVAL, text);
        return;
    }
    idset_destroy(set);
    if (!(g->rpcs = calloc(fence_nslots(g->f), sizeof(*g->rpcs))))
        goto nomem;
    if (fence_expects_local(g->f) &&
        job_exec_fragment(broker_service_ctx(b, "job-exec"), id, g->pt, &err) <
            0) {
        gather_fail(g, errno, err.text);
        return;
    }
    for (uint32_t s = 1; s < fence_nslots(g->f); s++) {
        if (!fence_slot_expected(g->f, (int)s))
            continue;
        if (!(g->rpcs[s] = broker_rpc(
                  b, "proctable.gather", fence_slot_rank(g->f, (int)s), 0,
                  json_pack("{s:I s:s}", "id", (json_int_t)id, "ranks", ranks),
                  NULL, 0, on_child, g)))
            goto nomem;
        g->pending++;
    }
    if (g->pending == 0)
        gather_finish(g);
    return;
nomem:
    gather_fail(g, ENOMEM, "out of memory");
}

/* proctable.get {"id"} at rank 0 */
static void get_handler(broker_req_t *req, void *arg)
{
    struct pt_ctx *ctx = arg;
    json_int_t id;
    char *ranks = NULL;
    uint32_t ntasks = 0;
    eddy_error_t err = {{0}};

    if (broker_req_is_cancel(req))
        return;
    if (broker_rank(ctx->b) != 0) {
        broker_respond_error(req, EINVAL,
                             "rank %u: proctable.get is served by rank 0",
                             broker_rank(ctx->b));
        return;
    }
    if (json_unpack(broker_req_msg(req)->body, "{s:I}", "id", &id) < 0 ||
        id < 0) {
        broker_respond_error(req, EPROTO,
                             "proctable.get: expected {\"id\": job id}");
        return;
    }
    if (job_manager_job_ranks(broker_service_ctx(ctx->b, "job"), (uint64_t)id,
                              JOB_RANKS_STARTED, &ranks, &ntasks, &err) < 0) {
        broker_respond_error(req, errno, "%s", err.text);
        return;
    }
    gather_start(ctx, req, (uint64_t)id, ranks, ntasks);
    free(ranks);
}

/* proctable.gather {"id", "ranks"} from the parent broker */
static void gather_handler(broker_req_t *req, void *arg)
{
    struct pt_ctx *ctx = arg;
    json_int_t id;
    const char *ranks;

    if (broker_req_is_cancel(req))
        return;
    if (json_unpack(broker_req_msg(req)->body, "{s:I s:s}", "id", &id, "ranks",
                    &ranks) < 0 ||
        id < 0) {
        broker_respond_error(req, EPROTO,
                             "proctable.gather: expected {\"id\": job id, "
                             "\"ranks\": idset}");
        return;
    }
    gather_start(ctx, req, (uint64_t)id, ranks, 0);
}

static int pt_init(broker_t *b, void **ctxp)
{
    struct pt_ctx *ctx;

    if (!(ctx = calloc(1, sizeof(*ctx))))
        return -1;
    ctx->b = b;
    *ctxp = ctx;
    return 0;
}

static void pt_shutdown(void *arg)
{
    struct pt_ctx *ctx = arg;

    while (ctx->gathers)
        gather_fail(ctx->gathers, ENOSYS, "the broker is shutting down");
}

static void pt_destroy(void *arg)
{
    struct pt_ctx *ctx = arg;

    if (!ctx)
        return;
    pt_shutdown(ctx);
    free(ctx);
}

static const struct service_handler handlers[] = {
    {"proctable.get", get_handler},
    {"proctable.gather", gather_handler},
    {NULL, NULL},
};

const struct service_def proctable_service = {
    .name = "proctable",
    .handlers = handlers,
    .init = pt_init,
    .shutdown = pt_shutdown,
    .destroy = pt_destroy,
};
