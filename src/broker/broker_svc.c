/* broker_svc.c - the broker.* services: ping, info, shutdown, dmesg,
 * subscribe and publish. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/common/topology.h"
#include "broker.h"

/* Topics a client may not publish: the overlay and the broker react to
 * these, so only the broker itself sends them. */
static const char *const reserved_prefixes[] = {"overlay.", "broker.", NULL};

static int broker_svc_init(broker_t *b, void **ctx)
{
    *ctx = b;
    return 0;
}

static void ping(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    const msg_t *msg = broker_req_msg(req);
    json_t *body;

    if (broker_req_is_cancel(req))
        return;
    body = msg->body ? json_deep_copy(msg->body) : json_object();
    if (!body || json_object_set_new(body, "rank", json_integer(b->rank)) < 0)
        goto nomem;
    broker_respond(req, body, msg->payload, msg->payload_len, 0);
    return;
nomem:
    json_decref(body);
    broker_respond_error(req, ENOMEM, "out of memory");
}

static void info(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    json_t *children = NULL;
    json_t *body;
    const char *listen;

    if (broker_req_is_cancel(req))
        return;
    if (!(children = json_array()))
        goto nomem;
    for (uint32_t i = 0; i < topo_nchildren(b->rank, b->size, b->fanout); i++)
        json_array_append_new(children,
                              json_integer(topo_child(b->rank, b->fanout, i)));
    listen = overlay_listen_addr(b);
    body =
        json_pack("{s:I s:I s:I s:s s:o s:o s:f s:I s:s s:o s:I}", "rank",
                  (json_int_t)b->rank, "size", (json_int_t)b->size, "fanout",
                  (json_int_t)b->fanout, "hostname", b->hostname, "parent",
                  b->rank == 0 ? json_null()
                               : json_integer(topo_parent(b->rank, b->fanout)),
                  "children", children, "uptime",
                  (double)(uv_hrtime() - b->t_start_ns) / 1e9, "pid",
                  (json_int_t)getpid(), "version", EDDY_VERSION_STRING,
                  "listen", listen ? json_string(listen) : json_null(), "cores",
                  (json_int_t)b->ncores);
    children = NULL; /* stolen by "o", even on failure */
    if (!body)
        goto nomem;
    broker_respond(req, body, NULL, 0, 0);
    return;
nomem:
    json_decref(children);
    broker_respond_error(req, ENOMEM, "out of memory");
}

static void shutdown_req(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;

    if (broker_req_is_cancel(req))
        return;
    if (b->rank != 0) {
        broker_respond_error(req, EINVAL,
                             "rank %u: broker.shutdown goes to "
                             "rank 0",
                             b->rank);
        return;
    }
    broker_respond(req, json_object(), NULL, 0, 0);
    broker_shutdown_instance(b, "broker.shutdown request");
}

static int dmesg_line(double t, int level, const char *line, void *arg)
{
    json_t *lines = arg;

    return json_array_append_new(lines,
                                 json_pack("{s:f s:s s:s}", "t", t, "level",
                                           log_levelstr(level), "text", line));
}

/* A line for this broker's log from one of its clients (the job shells:
 * their plugins' messages), so `eddy dmesg` shows it beside the broker's
 * own.  {"level": 3..7, "text"}; the text is cut to a line's length. */
static void log_req(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    const char *text;
    size_t n;
    int level;

    if (broker_req_is_cancel(req))
        return;
    if (json_unpack(broker_req_msg(req)->body, "{s:i s:s}", "level", &level,
                    "text", &text) < 0 ||
        level < LOG_LEVEL_ERR || level > LOG_LEVEL_DEBUG) {
        broker_respond_error(req, EPROTO,
                             "broker.log: expected {\"level\": 3..7, "
                             "\"text\": string}");
        return;
    }
    n = strcspn(text, "\n");
    broker_log(b, level, "%.*s", n < 1024 ? (int)n : 1024, text);
    broker_respond(req, json_object(), NULL, 0, 0);
}

static void dmesg(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    json_t *lines;

    if (broker_req_is_cancel(req))
        return;
    if (!(lines = json_array()) || logbuf_lines(b->log, dmesg_line, lines) < 0)
        goto nomem;
    broker_respond(req, json_pack("{s:o}", "lines", lines), NULL, 0, 0);
    return;
nomem:
    json_decref(lines);
    broker_respond_error(req, ENOMEM, "out of memory");
}

static void subscribe(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    const msg_t *msg = broker_req_msg(req);
    const char *prefix = NULL;

    if (broker_req_is_cancel(req)) {
        broker_unsubscribe(b, req);
        return;
    }
    if (json_unpack(msg->body, "{s:s}", "prefix", &prefix) < 0) {
        broker_respond_error(req, EPROTO,
                             "broker.subscribe: expected "
                             "{\"prefix\": string}");
        return;
    }
    if (!broker_req_is_streaming(req)) {
        broker_respond_error(req, EPROTO,
                             "broker.subscribe must be a "
                             "streaming request");
        return;
    }
    if (broker_subscribe(b, req, prefix) < 0)
        broker_respond_error(req, errno, "cannot subscribe: %s",
                             strerror(errno));
}

static bool valid_topic(const char *s)
{
    size_t len = strlen(s);

    if (len == 0 || len > MSG_TOPIC_MAX)
        return false;
    for (; *s; s++) {
        if (*s <= ' ' || *s > '~')
            return false;
    }
    return true;
}

static void publish(broker_req_t *req, void *ctx)
{
    broker_t *b = ctx;
    const msg_t *msg = broker_req_msg(req);
    const char *topic = NULL;
    json_t *body = NULL;
    msg_t *ev;
    int errnum;

    if (broker_req_is_cancel(req))
        return;
    if (json_unpack(msg->body, "{s:s s?o}", "topic", &topic, "body", &body) <
        0) {
        errnum = EPROTO;
        broker_respond_error(req, errnum,
                             "broker.publish: expected "
                             "{\"topic\": string, \"body\": object}");
        return;
    }
    if (b->rank != 0) {
        broker_respond_error(req, EINVAL,
                             "rank %u: events are published "
                             "at rank 0",
                             b->rank);
        return;
    }
    if (!valid_topic(topic)) {
        broker_respond_error(req, EINVAL,
                             "broker.publish: topic must be 1-%d printable "
                             "characters without spaces",
                             MSG_TOPIC_MAX);
        return;
    }
    if (body && !json_is_object(body)) {
        broker_respond_error(req, EINVAL,
                             "broker.publish: 'body' must be an object");
        return;
    }
    for (const char *const *p = reserved_prefixes; *p; p++) {
        if (!strncmp(topic, *p, strlen(*p))) {
            broker_respond_error(req, EPERM,
                                 "event topic prefix '%s' is "
                                 "reserved",
                                 *p);
            return;
        }
    }
    if (!(ev = msg_create(MSG_EVENT, topic, json_incref(body), msg->payload,
                          msg->payload_len))) {
        broker_respond_error(req, errno, "cannot create event: %s",
                             strerror(errno));
        return;
    }
    ev->rank = 0;
    broker_respond(req, json_object(), NULL, 0, 0);
    broker_deliver_event(b, ev);
    msg_decref(ev);
}

static const struct service_handler handlers[] = {
    {"broker.ping", ping},
    {"broker.info", info},
    {"broker.shutdown", shutdown_req},
    {"broker.dmesg", dmesg},
    {"broker.log", log_req},
    {"broker.subscribe", subscribe},
    {"broker.publish", publish},
    {NULL, NULL},
};

const struct service_def broker_service = {
    .name = "broker",
    .handlers = handlers,
    .init = broker_svc_init,
};
