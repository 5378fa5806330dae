/* overlay_svc.c - the overlay.* services.  overlay.status is public;
 * overlay.ready, overlay.lost and overlay.goodbye are sent by brokers to
 * their parent (or to rank 0) and refused from anyone else. */
#include <errno.h>
#include <string.h>

#include "src/common/topology.h"
#include "broker.h"

static int overlay_svc_init(broker_t *b, void **ctx)
{
    *ctx = b;
    return 0;
}

/* The child link a request arrived on, or NULL after refusing it. */
static struct conn *from_child(broker_t *b, broker_req_t *req)
{
    struct conn *c = broker_origin_child(b, broker_req_origin(req));

    if (!c)
        broker_respond_error(req, EPERM, "%s is internal to the overlay",
                             broker_req_msg(req)->topic);
    return c;
}

static void status(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    json_t *o;

    if (broker_req_is_cancel(req))
        return;
    if (!(o = overlay_status(b))) {
        broker_respond_error(req, ENOMEM, "out of memory");
        return;
    }
    broker_respond(req, o, NULL, 0, 0);
}

static void ready(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    struct conn *c;
    json_t *ranks = NULL;
    eddy_error_t e = {{0}};

    if (broker_req_is_cancel(req) || !(c = from_child(b, req)))
        return;
    if (json_unpack(broker_req_msg(req)->body, "{s:o}", "ranks", &ranks) < 0 ||
        overlay_child_ready(b, c, ranks, &e) < 0) {
        broker_log(b, LOG_LEVEL_WARNING, "bad overlay.ready from %s: %s",
                   c->name, e.text[0] ? e.text : "malformed");
        broker_respond_error(req, EPROTO, "%s", e.text);
        return;
    }
    broker_respond(req, NULL, NULL, 0, 0);
}

static void lost(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    struct conn *c;
    json_int_t rank;
    const char *reason;

    if (broker_req_is_cancel(req) || !(c = from_child(b, req)))
        return;
    if (json_unpack(broker_req_msg(req)->body, "{s:I s:s}", "rank", &rank,
                    "reason", &reason) < 0 ||
        rank <= 0 || (uint64_t)rank >= b->size ||
        !topo_in_subtree(c->rank, (uint32_t)rank, b->fanout)) {
        broker_log(b, LOG_LEVEL_WARNING, "bad overlay.lost from %s", c->name);
        broker_respond_error(req, EPROTO, "malformed overlay.lost");
        return;
    }
    broker_log(b, strcmp(reason, "shut down") ? LOG_LEVEL_ERR : LOG_LEVEL_INFO,
               "rank %lld lost: %s", (long long)rank, reason);
    overlay_mark_lost(b, (uint32_t)rank, reason);
    broker_respond(req, NULL, NULL, 0, 0);
}

static void goodbye(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    struct conn *c;

    if (broker_req_is_cancel(req) || !(c = from_child(b, req)))
        return;
    overlay_child_goodbye(b, c);
    broker_respond(req, NULL, NULL, 0, 0);
}

static const struct service_handler handlers[] = {
    {"overlay.status", status},
    {"overlay.ready", ready},
    {"overlay.lost", lost},
    {"overlay.goodbye", goodbye},
    {NULL, NULL},
};

const struct service_def overlay_service = {
    .name = "overlay",
    .handlers = handlers,
    .init = overlay_svc_init,
};
