/* overlay.c - the tree of brokers: links, authentication, readiness,
 * heartbeats and loss.
 *
 * Authentication (before anything else on a broker link):
 *   parent -> child  event "overlay.challenge" {"nonce": N_p}
 *   child -> parent  request "overlay.hello" {"rank", "hostname",
 *                    "nonce": N_c, "mac": auth(key, "eddy-child"|N_p|rank)}
 *   parent -> child  response {"mac": auth(key, "eddy-parent"|N_c)}
 * auth() is libsodium crypto_auth (HMAC-SHA512-256) with the per-instance
 * key.  Fresh random nonces on both sides make every proof single-use, and
 * binding the rank into the child's proof stops one child from answering
 * for another.  Until then a link accepts frames of BROKER_AUTH_FRAME_MAX
 * bytes and nothing but the handshake; a silent peer is dropped after
 * BROKER_AUTH_TIMEOUT_MS.
 *
 * Loss: a child that closes or stays silent for --heartbeat-timeout is
 * lost with its whole subtree; there is no reconnection (a restarted
 * broker is refused as "lost").  Losing the parent ends this broker.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <unistd.h>

#include "src/common/hex.h"
#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/topology.h"
#include "bootstrap.h"
#include "broker.h"

enum child_state {
    CHILD_CONNECTING,
    CHILD_UP,
    CHILD_LOST,
};

struct child_slot {
    uint32_t rank;
    enum child_state state;
    uint64_t conn_id;
    bool ready; /* its subtree reported ready (or it was lost) */
};

struct overlay {
    broker_t *b;
    uint32_t parent_rank; /* TOPO_NONE at rank 0 */
    char *parent_addr;    /* as given, for messages */
    uint64_t parent_id;   /* conn id of the parent link, 0 if none */
    bool authed;          /* upstream authenticated (or rank 0) */
    bool ready_sent;

    int listen_fd;   /* inherited, -1 if none */
    char *bind_addr; /* or bind this */
    uv_tcp_t *listener;
    char listen_name[96]; /* "ADDR:PORT" we listen on, "" if none */

    uv_tcp_t *connecting; /* outgoing TCP handle before connect_cb */
    uv_connect_t connect_req;
    uv_timer_t connect_timer;
    uint64_t connect_deadline;
    int connect_errors;

    uv_timer_t hb_timer;
    bool timers_init;

    struct child_slot *children;
    uint32_t nchildren;

    uint32_t *lost_by;  /* per rank, TOPO_NONE if reachable */
    char **lost_reason; /* per lost subtree root */
    char **hostnames;   /* ranks of our subtree that reported ready */
};

#define HEX_NONCE (2 * BROKER_NONCE_SIZE)
#define HEX_MAC (2 * crypto_auth_BYTES)

/* --- helpers --------------------------------------------------------- */

static struct child_slot *child_slot(struct overlay *ov, uint32_t rank)
{
    for (uint32_t i = 0; i < ov->nchildren; i++) {
        if (ov->children[i].rank == rank)
            return &ov->children[i];
    }
    return NULL;
}

/* What the MACs cover: prefix | nonce | optional decimal rank.  The prefix
 * differs by direction, so a parent's answer can never pass as a child's. */
static size_t mac_input(unsigned char *buf,
                        size_t size,
                        const char *prefix,
                        const unsigned char *nonce,
                        uint32_t rank,
                        bool with_rank)
{
    size_t plen = strlen(prefix);
    size_t len = 0;

    memcpy(buf, prefix, plen);
    len += plen;
    memcpy(buf + len, nonce, BROKER_NONCE_SIZE);
    len += BROKER_NONCE_SIZE;
    if (with_rank)
        len += (size_t)snprintf((char *)buf + len, size - len, "%u", rank);
    return len;
}

static void make_mac(const broker_t *b,
                     const char *prefix,
                     const unsigned char *nonce,
                     uint32_t rank,
                     bool with_rank,
                     unsigned char mac[crypto_auth_BYTES])
{
    unsigned char buf[64 + BROKER_NONCE_SIZE];
    size_t len = mac_input(buf, sizeof(buf), prefix, nonce, rank, with_rank);

    crypto_auth(mac, buf, len, b->key);
}

static bool check_mac(const broker_t *b,
                      const char *prefix,
                      const unsigned char *nonce,
                      uint32_t rank,
                      bool with_rank,
                      const unsigned char *mac)
{
    unsigned char buf[64 + BROKER_NONCE_SIZE];
    size_t len = mac_input(buf, sizeof(buf), prefix, nonce, rank, with_rank);

    return crypto_auth_verify(mac, buf, len, b->key) == 0;
}

static void sockaddr_name(const struct sockaddr *sa, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        uv_ip4_name(in, host, sizeof(host));
        port = ntohs(in->sin_port);
        snprintf(buf, size, "%s:%d", host, port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        uv_ip6_name(in6, host, sizeof(host));
        port = ntohs(in6->sin6_port);
        snprintf(buf, size, "[%s]:%d", host, port);
    } else
        snprintf(buf, size, "?");
}

/* Resolve "HOST:PORT" or "[V6]:PORT" (blocking: only at startup). */
static int parse_addr(const char *s,
                      struct sockaddr_storage *ss,
                      eddy_error_t *err)
{
    char host[256];
    const char *colon, *port;
    size_t hlen;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    const char *start = s;
    int rc;

    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            goto bad;
        start = s + 1;
        hlen = (size_t)(close - start);
        port = close + 2;
    } else {
        if (!(colon = strrchr(s, ':')))
            goto bad;
        hlen = (size_t)(colon - s);
        port = colon + 1;
    }
    if (hlen == 0 || hlen >= sizeof(host) || !*port)
        goto bad;
    memcpy(host, start, hlen);
    host[hlen] = '\0';
    if ((rc = getaddrinfo(host, port, &hints, &res)) != 0 || !res) {
        errno = EINVAL;
        return errprintf(err, "cannot resolve '%s': %s", s, gai_strerror(rc));
    }
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
bad:
    errno = EINVAL;
    return errprintf(err, "'%s' is not ADDR:PORT", s);
}

static int send_json(struct conn *c,
                     int type,
                     const char *topic,
                     uint32_t rank,
                     uint32_t tag,
                     int flags,
                     json_t *body)
{
    msg_t *msg;
    int rc;

    if (!(msg = msg_create(type, topic, body, NULL, 0)))
        return -1;
    msg->rank = rank;
    msg->matchtag = tag;
    msg->flags = (uint8_t)flags;
    rc = conn_send(c, msg);
    msg_decref(msg);
    return rc;
}

/* --- readiness ------------------------------------------------------- */

static json_t *subtree_ranks(struct overlay *ov)
{
    broker_t *b = ov->b;
    json_t *a = json_array();

    for (uint32_t r = b->rank; a && r < b->size; r++) {
        if (ov->hostnames[r] && topo_in_subtree(b->rank, r, b->fanout))
            json_array_append_new(
                a, json_pack("[I,s]", (json_int_t)r, ov->hostnames[r]));
    }
    return a;
}

static void write_ready_fd(broker_t *b)
{
    static const char ready[] = "ready\n";

    if (b->opts.ready_fd < 0)
        return;
    if (write(b->opts.ready_fd, ready, sizeof(ready) - 1) < 0)
        broker_log(b, LOG_LEVEL_WARNING, "writing to --ready-fd=%d: %s",
                   b->opts.ready_fd, strerror(errno));
    close(b->opts.ready_fd);
    b->opts.ready_fd = -1;
}

/* Once we are authenticated upstream and every child is ready or lost,
 * report our subtree (rank 0: the instance is up). */
static void check_ready(struct overlay *ov)
{
    broker_t *b = ov->b;
    double secs;
    char *lost;
    json_t *ranks;
    struct conn *parent;

    if (ov->ready_sent || !ov->authed || b->state != BROKER_RUNNING)
        return;
    for (uint32_t i = 0; i < ov->nchildren; i++) {
        if (!ov->children[i].ready)
            return;
    }
    ov->ready_sent = true;
    secs = (double)(uv_hrtime() - b->t_start_ns) / 1e9;
    if (b->rank == 0) {
        uint32_t nup = 0;
        for (uint32_t r = 0; r < b->size; r++) {
            if (ov->hostnames[r] && ov->lost_by[r] == TOPO_NONE)
                nup++;
        }
        if (nup == b->size)
            broker_log(b, LOG_LEVEL_INFO,
                       "instance of %u brokers ready in %.3f s", b->size, secs);
        else {
            idset_t *s = idset_create();
            for (uint32_t r = 0; s && r < b->size; r++) {
                if (ov->lost_by[r] != TOPO_NONE || !ov->hostnames[r])
                    idset_set(s, r);
            }
            lost = s ? idset_encode(s) : NULL;
            broker_log(b, LOG_LEVEL_ERR,
                       "instance of %u brokers up in %.3f s without ranks %s",
                       b->size, secs, lost ? lost : "?");
            free(lost);
            idset_destroy(s);
        }
        write_ready_fd(b);
        return;
    }
    if (!(parent = conn_lookup(b, ov->parent_id)) ||
        !(ranks = subtree_ranks(ov)))
        return;
    broker_log(b, LOG_LEVEL_DEBUG, "subtree ready in %.3f s", secs);
    send_json(parent, MSG_REQUEST, "overlay.ready", ov->parent_rank, 0,
              MSG_FLAG_NORESPONSE, json_pack("{s:o}", "ranks", ranks));
    write_ready_fd(b);
}

int overlay_child_ready(broker_t *b,
                        struct conn *child,
                        json_t *ranks,
                        eddy_error_t *err)
{
    struct overlay *ov = b->ov;
    struct child_slot *slot = child_slot(ov, child->rank);
    size_t i;
    json_t *e;
    json_int_t r;
    const char *host;

    if (!slot || slot->state != CHILD_UP) {
        errno = EINVAL;
        return errprintf(err, "rank %u is not a connected child", child->rank);
    }
    if (!json_is_array(ranks)) {
        errno = EPROTO;
        return errprintf(err, "ranks must be an array");
    }
    /* Validate all before storing any. */
    json_array_foreach(ranks, i, e)
    {
        if (json_unpack(e, "[Is]", &r, &host) < 0 || r < 0 ||
            (uint64_t)r >= b->size ||
            !topo_in_subtree(child->rank, (uint32_t)r, b->fanout) ||
            strlen(host) > 255) {
            errno = EPROTO;
            return errprintf(err,
                             "entry %zu is not [rank, hostname] of "
                             "rank %u's subtree",
                             i, child->rank);
        }
    }
    json_array_foreach(ranks, i, e)
    {
        json_unpack(e, "[Is]", &r, &host);
        free(ov->hostnames[r]);
        ov->hostnames[r] = strdup(host);
    }
    slot->ready = true;
    check_ready(ov);
    return 0;
}

/* --- loss ------------------------------------------------------------ */

void overlay_mark_lost(broker_t *b, uint32_t rank, const char *reason)
{
    struct overlay *ov = b->ov;

    if (rank >= b->size)
        return;
    for (uint32_t r = rank; r < b->size; r++) {
        if (ov->lost_by[r] == TOPO_NONE && topo_in_subtree(rank, r, b->fanout))
            ov->lost_by[r] = rank;
    }
    if (!ov->lost_reason[rank])
        ov->lost_reason[rank] = strdup(reason);
}

static void report_lost(broker_t *b, uint32_t rank, const char *reason)
{
    msg_t *msg;

    if (b->rank == 0)
        return;
    if (!(msg = msg_create(MSG_REQUEST, "overlay.lost",
                           json_pack("{s:I s:s}", "rank", (json_int_t)rank,
                                     "reason", reason),
                           NULL, 0)))
        return;
    msg->rank = 0;
    msg->flags = MSG_FLAG_NORESPONSE;
    broker_route_request(b, NULL, msg);
}

void overlay_child_goodbye(broker_t *b, struct conn *child)
{
    child->leaving = true;
    broker_log(b, b->state == BROKER_RUNNING ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG,
               "rank %u is shutting down", child->rank);
}

void overlay_conn_closed(struct conn *c, int errnum, const char *reason)
{
    broker_t *b = c->b;
    struct overlay *ov = b->ov;
    struct child_slot *slot;

    if (b->state == BROKER_FINISHED)
        return;
    switch (c->kind) {
    case CONN_INBOUND:
        /* Garbage on the broker port is worth a warning, a hang-up not. */
        broker_log(b,
                   errnum == EPROTO || errnum == EMSGSIZE ? LOG_LEVEL_WARNING
                                                          : LOG_LEVEL_DEBUG,
                   "rejected broker connection from %s: %s", c->name, reason);
        break;
    case CONN_PARENT_AUTH:
        broker_log(b, LOG_LEVEL_ERR, "authentication with parent %s failed: %s",
                   ov->parent_addr, reason);
        broker_abort(b, 1);
        break;
    case CONN_PARENT:
        if (b->state >= BROKER_SHUTDOWN) {
            broker_log(b, LOG_LEVEL_DEBUG, "parent closed during shutdown");
            break;
        }
        broker_log(b, LOG_LEVEL_ERR, "lost parent rank %u: %s", ov->parent_rank,
                   reason);
        broker_abort(b, 1);
        break;
    case CONN_CHILD:
        if (!(slot = child_slot(ov, c->rank)) || slot->conn_id != c->id)
            break;
        slot->state = CHILD_LOST;
        slot->conn_id = 0;
        if (b->state >= BROKER_SHUTDOWN) {
            broker_log(b, LOG_LEVEL_DEBUG, "rank %u left", c->rank);
            break;
        }
        if (c->leaving) {
            reason = "shut down";
            broker_log(b, LOG_LEVEL_INFO, "rank %u left: shut down", c->rank);
        } else
            broker_log(b, LOG_LEVEL_ERR, "rank %u lost: %s", c->rank, reason);
        overlay_mark_lost(b, c->rank, reason);
        report_lost(b, c->rank, reason);
        slot->ready = true;
        check_ready(ov);
        break;
    case CONN_CLIENT:
        break;
    }
}

/* --- the child side: connect and authenticate to the parent ---------- */

static void auth_failed(struct overlay *ov, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void auth_failed(struct overlay *ov, const char *fmt, ...)
{
    char text[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    broker_log(ov->b, LOG_LEVEL_ERR, "authentication with parent %s failed: %s",
               ov->parent_addr, text);
    broker_abort(ov->b, 1);
}

static void parent_challenge(struct conn *c, const msg_t *msg)
{
    broker_t *b = c->b;
    struct overlay *ov = b->ov;
    unsigned char pnonce[BROKER_NONCE_SIZE];
    unsigned char mac[crypto_auth_BYTES];
    char mac_hex[HEX_MAC + 1];
    char nonce_hex[HEX_NONCE + 1];
    const char *s = NULL;

    if (json_unpack(msg->body, "{s:s}", "nonce", &s) < 0 ||
        hex_decode(s, strlen(s), pnonce, sizeof(pnonce)) < 0) {
        auth_failed(ov, "malformed challenge");
        return;
    }
    make_mac(b, "eddy-child", pnonce, b->rank, true, mac);
    randombytes_buf(c->nonce, sizeof(c->nonce));
    sodium_bin2hex(mac_hex, sizeof(mac_hex), mac, sizeof(mac));
    sodium_bin2hex(nonce_hex, sizeof(nonce_hex), c->nonce, sizeof(c->nonce));
    if (send_json(c, MSG_REQUEST, "overlay.hello", ov->parent_rank, 1, 0,
                  json_pack("{s:I s:s s:s s:s}", "rank", (json_int_t)b->rank,
                            "hostname", b->hostname, "nonce", nonce_hex, "mac",
                            mac_hex)) < 0)
        auth_failed(ov, "sending hello: %s", strerror(errno));
}

static void parent_welcome(struct conn *c, const msg_t *msg)
{
    broker_t *b = c->b;
    struct overlay *ov = b->ov;
    unsigned char mac[crypto_auth_BYTES];
    const char *s = NULL;

    if (msg->errnum) {
        const char *errstr = msg_errstr(msg);
        auth_failed(ov, "%s", errstr ? errstr : strerror((int)msg->errnum));
        return;
    }
    if (json_unpack(msg->body, "{s:s}", "mac", &s) < 0 ||
        hex_decode(s, strlen(s), mac, sizeof(mac)) < 0) {
        auth_failed(ov, "malformed hello response");
        return;
    }
    if (!check_mac(b, "eddy-parent", c->nonce, 0, false, mac)) {
        auth_failed(ov, "the parent does not know the instance key");
        return;
    }
    c->kind = CONN_PARENT;
    msgconn_set_max_frame(c->mc, MSG_FRAME_MAX);
    ov->authed = true;
    broker_log(b, LOG_LEVEL_INFO, "connected to parent rank %u at %s",
               ov->parent_rank, ov->parent_addr);
    check_ready(ov);
}

static void parent_recv_unauth(struct conn *c, msg_t *msg)
{
    char desc[256];

    if (msg->type == MSG_EVENT && !strcmp(msg->topic, "overlay.challenge"))
        parent_challenge(c, msg);
    else if (msg->type == MSG_RESPONSE && msg->matchtag == 1 &&
             !strcmp(msg->topic, "overlay.hello"))
        parent_welcome(c, msg);
    else {
        msg_describe(msg, desc, sizeof(desc));
        auth_failed(c->b->ov, "unexpected %s", desc);
    }
    msg_decref(msg);
}

static void start_connect(struct overlay *ov);

static void connect_retry_cb(uv_timer_t *t)
{
    start_connect(t->data);
}

static void connect_cb(uv_connect_t *req, int status)
{
    struct overlay *ov = req->data;
    broker_t *b = ov->b;
    uv_tcp_t *tcp = ov->connecting;
    struct conn *c;
    char name[160];

    ov->connecting = NULL;
    if (status == UV_ECANCELED)
        return; /* closed by shutdown; the close callback frees it */
    if (status < 0) {
        uv_close((uv_handle_t *)tcp, (uv_close_cb)free);
        if (b->state != BROKER_RUNNING)
            return;
        if (uv_now(&b->loop) >= ov->connect_deadline) {
            broker_log(b, LOG_LEVEL_ERR, "cannot connect to parent %s: %s",
                       ov->parent_addr, uv_strerror(status));
            broker_abort(b, 1);
            return;
        }
        if (ov->connect_errors++ == 0)
            broker_log(b, LOG_LEVEL_INFO, "parent %s: %s (retrying)",
                       ov->parent_addr, uv_strerror(status));
        uv_timer_start(&ov->connect_timer, connect_retry_cb,
                       BROKER_CONNECT_RETRY_MS, 0);
        return;
    }
    if (b->state != BROKER_RUNNING) {
        uv_close((uv_handle_t *)tcp, (uv_close_cb)free);
        return;
    }
    uv_tcp_nodelay(tcp, 1);
    snprintf(name, sizeof(name), "parent rank %u (%s)", ov->parent_rank,
             ov->parent_addr);
    if (!(c = conn_create(b, CONN_PARENT_AUTH, (uv_stream_t *)tcp, name))) {
        auth_failed(ov, "%s", strerror(errno));
        return;
    }
    c->rank = ov->parent_rank;
    msgconn_set_max_frame(c->mc, BROKER_AUTH_FRAME_MAX);
    ov->parent_id = c->id;
}

static void start_connect(struct overlay *ov)
{
    broker_t *b = ov->b;
    struct sockaddr_storage ss;
    eddy_error_t e = {{0}};
    uv_tcp_t *tcp;
    int rc;

    if (b->state != BROKER_RUNNING)
        return;
    if (parse_addr(ov->parent_addr, &ss, &e) < 0) {
        broker_log(b, LOG_LEVEL_ERR, "parent: %s", e.text);
        broker_abort(b, 1);
        return;
    }
    if (!(tcp = malloc(sizeof(*tcp))) || uv_tcp_init(&b->loop, tcp) < 0) {
        free(tcp);
        broker_log(b, LOG_LEVEL_ERR, "connecting to parent: out of memory");
        broker_abort(b, 1);
        return;
    }
    ov->connect_req.data = ov;
    if ((rc = uv_tcp_connect(&ov->connect_req, tcp,
                             (const struct sockaddr *)&ss, connect_cb)) < 0) {
        uv_close((uv_handle_t *)tcp, (uv_close_cb)free);
        broker_log(b, LOG_LEVEL_ERR, "cannot connect to parent %s: %s",
                   ov->parent_addr, uv_strerror(rc));
        broker_abort(b, 1);
        return;
    }
    ov->connecting = tcp;
}

/* --- the parent side: accept and authenticate children --------------- */

static void reject(struct conn *c,
                   const msg_t *hello,
                   int level,
                   const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

static void reject(
    struct conn *c, const msg_t *hello, int level, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    msg_t *msg;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    broker_log(c->b, level, "rejected broker connection from %s: %s", c->name,
               text);
    if (hello && hello->type == MSG_REQUEST &&
        (msg = msg_create_error(hello, EPERM, text))) {
        msg->rank = c->b->rank;
        conn_send(c, msg);
        msg_decref(msg);
    }
    conn_linger(c);
}

static void child_hello(struct conn *c, const msg_t *msg)
{
    broker_t *b = c->b;
    struct overlay *ov = b->ov;
    json_int_t rank;
    const char *host, *nonce_hex, *mac_hex;
    unsigned char cnonce[BROKER_NONCE_SIZE];
    unsigned char mac[crypto_auth_BYTES];
    char reply_hex[HEX_MAC + 1];
    struct child_slot *slot;
    char name[160];
    msg_t *rsp;

    if (json_unpack(msg->body, "{s:I s:s s:s s:s}", "rank", &rank, "hostname",
                    &host, "nonce", &nonce_hex, "mac", &mac_hex) < 0 ||
        hex_decode(nonce_hex, strlen(nonce_hex), cnonce, sizeof(cnonce)) < 0 ||
        hex_decode(mac_hex, strlen(mac_hex), mac, sizeof(mac)) < 0 ||
        strlen(host) > 255) {
        reject(c, msg, LOG_LEVEL_WARNING, "malformed hello");
        return;
    }
    if (rank < 0 || (uint64_t)rank >= b->size ||
        !(slot = child_slot(ov, (uint32_t)rank))) {
        reject(c, msg, LOG_LEVEL_WARNING,
               "bad rank: %lld is not a child "
               "of rank %u",
               (long long)rank, b->rank);
        return;
    }
    if (!check_mac(b, "eddy-child", c->nonce, (uint32_t)rank, true, mac)) {
        reject(c, msg, LOG_LEVEL_ERR, "wrong key");
        return;
    }
    if (slot->state == CHILD_UP) {
        reject(c, msg, LOG_LEVEL_WARNING,
               "duplicate rank: rank %u is "
               "already connected",
               slot->rank);
        return;
    }
    if (slot->state == CHILD_LOST) {
        reject(c, msg, LOG_LEVEL_WARNING,
               "rank %u was lost and cannot "
               "rejoin (no reconnection)",
               slot->rank);
        return;
    }
    if (b->state != BROKER_RUNNING) {
        reject(c, msg, LOG_LEVEL_INFO, "shutting down");
        return;
    }
    make_mac(b, "eddy-parent", cnonce, 0, false, mac);
    sodium_bin2hex(reply_hex, sizeof(reply_hex), mac, sizeof(mac));
    if (!(rsp =
              msg_create_response(msg, json_pack("{s:s}", "mac", reply_hex)))) {
        reject(c, NULL, LOG_LEVEL_ERR, "out of memory");
        return;
    }
    rsp->rank = b->rank;
    conn_send(c, rsp);
    msg_decref(rsp);
    c->kind = CONN_CHILD;
    c->rank = slot->rank;
    snprintf(name, sizeof(name), "%s", c->name);
    conn_set_name(c, "rank %u (%s)", c->rank, name);
    msgconn_set_max_frame(c->mc, MSG_FRAME_MAX);
    slot->state = CHILD_UP;
    slot->conn_id = c->id;
    broker_log(b, LOG_LEVEL_INFO, "rank %u (%s) connected", c->rank, host);
}

static void inbound_recv(struct conn *c, msg_t *msg)
{
    char desc[256];

    if (msg->type == MSG_REQUEST && !strcmp(msg->topic, "overlay.hello"))
        child_hello(c, msg);
    else {
        msg_describe(msg, desc, sizeof(desc));
        reject(c, msg, LOG_LEVEL_WARNING, "expected overlay.hello, got %s",
               desc);
    }
    msg_decref(msg);
}

void overlay_recv_unauth(struct conn *c, msg_t *msg)
{
    if (c->kind == CONN_PARENT_AUTH)
        parent_recv_unauth(c, msg);
    else
        inbound_recv(c, msg);
}

static int count_inbound(broker_t *b)
{
    int n = 0;

    for (struct conn *c = b->conns_list; c; c = c->next) {
        if (c->kind == CONN_INBOUND)
            n++;
    }
    return n;
}

static void accept_cb(uv_stream_t *server, int status)
{
    struct overlay *ov = server->data;
    broker_t *b = ov->b;
    uv_tcp_t *tcp;
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);
    char name[96] = "?";
    char nonce_hex[HEX_NONCE + 1];
    struct conn *c;

    if (status < 0) {
        broker_log(b, LOG_LEVEL_WARNING, "accept: %s", uv_strerror(status));
        return;
    }
    if (!(tcp = malloc(sizeof(*tcp))))
        return;
    if (uv_tcp_init(&b->loop, tcp) < 0) {
        free(tcp);
        return;
    }
    if (uv_accept(server, (uv_stream_t *)tcp) < 0 ||
        b->state != BROKER_RUNNING) {
        uv_close((uv_handle_t *)tcp, (uv_close_cb)free);
        return;
    }
    uv_tcp_nodelay(tcp, 1);
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &sslen) == 0)
        sockaddr_name((struct sockaddr *)&ss, name, sizeof(name));
    if (count_inbound(b) >= BROKER_INBOUND_MAX) {
        broker_log(b, LOG_LEVEL_WARNING,
                   "rejected broker connection from "
                   "%s: %d others are authenticating",
                   name, BROKER_INBOUND_MAX);
        uv_close((uv_handle_t *)tcp, (uv_close_cb)free);
        return;
    }
    if (!(c = conn_create(b, CONN_INBOUND, (uv_stream_t *)tcp, name)))
        return;
    msgconn_set_max_frame(c->mc, BROKER_AUTH_FRAME_MAX);
    randombytes_buf(c->nonce, sizeof(c->nonce));
    sodium_bin2hex(nonce_hex, sizeof(nonce_hex), c->nonce, sizeof(c->nonce));
    send_json(c, MSG_EVENT, "overlay.challenge", b->rank, 0, 0,
              json_pack("{s:s}", "nonce", nonce_hex));
}

static int start_listening(struct overlay *ov, eddy_error_t *err)
{
    broker_t *b = ov->b;
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);
    int rc;

    if (ov->listen_fd < 0 && !ov->bind_addr)
        return 0;
    if (!(ov->listener = calloc(1, sizeof(*ov->listener))) ||
        uv_tcp_init(&b->loop, ov->listener) < 0) {
        free(ov->listener);
        ov->listener = NULL;
        return errprintf(err, "out of memory");
    }
    ov->listener->data = ov;
    if (ov->listen_fd >= 0) {
        /* Services fork: keep the socket out of their children. */
        fcntl(ov->listen_fd, F_SETFD, FD_CLOEXEC);
        if ((rc = uv_tcp_open(ov->listener, ov->listen_fd)) < 0) {
            errprintf(err, "--listen-fd=%d: %s", ov->listen_fd,
                      uv_strerror(rc));
            goto error;
        }
        ov->listen_fd = -1; /* the handle owns it now */
    } else {
        if (parse_addr(ov->bind_addr, &ss, err) < 0)
            goto error;
        if ((rc = uv_tcp_bind(ov->listener, (struct sockaddr *)&ss, 0)) < 0) {
            errprintf(err, "cannot bind %s: %s", ov->bind_addr,
                      uv_strerror(rc));
            goto error;
        }
    }
    if ((rc = uv_listen((uv_stream_t *)ov->listener, 128, accept_cb)) < 0) {
        errprintf(err, "cannot listen: %s", uv_strerror(rc));
        goto error;
    }
    if (uv_tcp_getsockname(ov->listener, (struct sockaddr *)&ss, &sslen) == 0)
        sockaddr_name((struct sockaddr *)&ss, ov->listen_name,
                      sizeof(ov->listen_name));
    broker_log(b, LOG_LEVEL_DEBUG, "listening on %s", ov->listen_name);
    return 0;
error:
    uv_close((uv_handle_t *)ov->listener, (uv_close_cb)free);
    ov->listener = NULL;
    errno = EINVAL;
    return -1;
}

/* --- heartbeats ------------------------------------------------------ */

static void heartbeat_cb(uv_timer_t *t)
{
    struct overlay *ov = t->data;
    broker_t *b = ov->b;
    uint64_t now = uv_now(&b->loop);
    uint64_t hb = (uint64_t)(b->opts.heartbeat * 1000);
    uint64_t timeout = (uint64_t)(b->opts.heartbeat_timeout * 1000);
    uint64_t *ids = NULL;
    size_t n = 0, cap = 0;

    /* Snapshot the ids: dropping a conn may drop others. */
    for (struct conn *c = b->conns_list; c; c = c->next) {
        if (c->kind == CONN_CLIENT || c->lingering)
            continue;
        if (n == cap) {
            uint64_t *p =
                realloc(ids, (cap = cap ? 2 * cap : 16) * sizeof(ids[0]));
            if (!p)
                break;
            ids = p;
        }
        ids[n++] = c->id;
    }
    for (size_t i = 0; i < n; i++) {
        struct conn *c = conn_lookup(b, ids[i]);
        if (!c || c->lingering)
            continue;
        switch (c->kind) {
        case CONN_INBOUND:
            if (now - c->t_open > BROKER_AUTH_TIMEOUT_MS)
                reject(c, NULL, LOG_LEVEL_WARNING, "no hello within %d s",
                       BROKER_AUTH_TIMEOUT_MS / 1000);
            break;
        case CONN_PARENT_AUTH:
            if (now - c->t_open > BROKER_AUTH_TIMEOUT_MS)
                auth_failed(ov, "no answer within %d s",
                            BROKER_AUTH_TIMEOUT_MS / 1000);
            break;
        case CONN_CHILD:
        case CONN_PARENT:
            if (now - c->t_recv > timeout)
                conn_drop(c, ETIMEDOUT, "heartbeat timeout");
            else if (now - c->t_send >= hb)
                send_json(c, MSG_EVENT, "overlay.heartbeat", b->rank, 0, 0,
                          NULL);
            break;
        case CONN_CLIENT:
            break;
        }
    }
    free(ids);
}

/* --- interface ------------------------------------------------------- */

int overlay_create(broker_t *b, const struct bootstrap *bs, eddy_error_t *err)
{
    struct overlay *ov;

    if (!(ov = calloc(1, sizeof(*ov))))
        return errprintf(err, "out of memory");
    b->ov = ov;
    ov->b = b;
    ov->listen_fd = bs->listen_fd;
    ov->parent_rank = b->rank > 0 ? topo_parent(b->rank, b->fanout) : TOPO_NONE;
    ov->authed = b->rank == 0;
    if ((bs->parent_addr && !(ov->parent_addr = strdup(bs->parent_addr))) ||
        (bs->listen_addr && !(ov->bind_addr = strdup(bs->listen_addr))))
        goto nomem;
    ov->nchildren = topo_nchildren(b->rank, b->size, b->fanout);
    if (!(ov->children = calloc(ov->nchildren ? ov->nchildren : 1,
                                sizeof(ov->children[0]))) ||
        !(ov->lost_by = calloc(b->size, sizeof(ov->lost_by[0]))) ||
        !(ov->lost_reason = calloc(b->size, sizeof(char *))) ||
        !(ov->hostnames = calloc(b->size, sizeof(char *))))
        goto nomem;
    for (uint32_t i = 0; i < ov->nchildren; i++)
        ov->children[i].rank = topo_child(b->rank, b->fanout, i);
    for (uint32_t r = 0; r < b->size; r++)
        ov->lost_by[r] = TOPO_NONE;
    if (!(ov->hostnames[b->rank] = strdup(b->hostname)))
        goto nomem;
    uv_timer_init(&b->loop, &ov->hb_timer);
    uv_timer_init(&b->loop, &ov->connect_timer);
    ov->hb_timer.data = ov->connect_timer.data = ov;
    ov->timers_init = true;
    return 0;
nomem:
    errno = ENOMEM;
    return errprintf(err, "out of memory");
}

int overlay_start(broker_t *b, eddy_error_t *err)
{
    struct overlay *ov = b->ov;
    uint64_t period = (uint64_t)(b->opts.heartbeat * 1000 / 2);

    if (start_listening(ov, err) < 0)
        return -1;
    /* Half the heartbeat period keeps idle links within one period. */
    if (period < 20)
        period = 20;
    if (period > 500)
        period = 500;
    uv_timer_start(&ov->hb_timer, heartbeat_cb, period, period);
    if (ov->parent_addr) {
        ov->connect_deadline = uv_now(&b->loop) + BROKER_CONNECT_TIMEOUT_MS;
        start_connect(ov);
    }
    check_ready(ov);
    return 0;
}

void overlay_stop_listening(broker_t *b)
{
    struct overlay *ov = b->ov;

    if (ov && ov->listener) {
        uv_close((uv_handle_t *)ov->listener, (uv_close_cb)free);
        ov->listener = NULL;
    }
}

void overlay_close_all(broker_t *b)
{
    struct overlay *ov = b->ov;
    struct conn *c;

    if (!ov)
        return;
    overlay_stop_listening(b);
    /* Dropping a link fails the requests routed through it, which may drop
     * a client (or any other conn, 'next' included): rescan after each. */
again:
    for (c = b->conns_list; c; c = c->next) {
        if (c->kind != CONN_CLIENT && !c->lingering) {
            conn_drop(c, 0, "shutdown");
            goto again;
        }
    }
    if (ov->connecting) {
        uv_close((uv_handle_t *)ov->connecting, (uv_close_cb)free);
        ov->connecting = NULL;
    }
    if (ov->timers_init) {
        uv_close((uv_handle_t *)&ov->hb_timer, NULL);
        uv_close((uv_handle_t *)&ov->connect_timer, NULL);
        ov->timers_init = false;
    }
}

void overlay_leave(broker_t *b)
{
    struct overlay *ov = b->ov;
    struct conn *parent;

    if (!ov || !(parent = conn_lookup(b, ov->parent_id)) ||
        parent->kind != CONN_PARENT)
        return;
    send_json(parent, MSG_REQUEST, "overlay.goodbye", ov->parent_rank, 0,
              MSG_FLAG_NORESPONSE, NULL);
    conn_linger(parent);
}

void overlay_destroy(broker_t *b)
{
    struct overlay *ov = b->ov;

    if (!ov)
        return;
    if (ov->listen_fd >= 0)
        close(ov->listen_fd);
    for (uint32_t r = 0; r < b->size; r++) {
        if (ov->lost_reason)
            free(ov->lost_reason[r]);
        if (ov->hostnames)
            free(ov->hostnames[r]);
    }
    free(ov->lost_reason);
    free(ov->hostnames);
    free(ov->lost_by);
    free(ov->children);
    free(ov->parent_addr);
    free(ov->bind_addr);
    free(ov);
    b->ov = NULL;
}

struct conn *overlay_link(broker_t *b, uint32_t rank, eddy_error_t *err)
{
    struct overlay *ov = b->ov;
    struct child_slot *slot;
    struct conn *c;

    if (rank == ov->parent_rank) {
        if (!(c = conn_lookup(b, ov->parent_id)) || c->kind != CONN_PARENT) {
            errprintf(err, "rank %u: the link to parent rank %u is not up",
                      b->rank, rank);
            return NULL;
        }
        return c;
    }
    if (!(slot = child_slot(ov, rank))) {
        errprintf(err, "rank %u is not a neighbour of rank %u", rank, b->rank);
        return NULL;
    }
    if (slot->state == CHILD_LOST) {
        errprintf(err, "rank %u is lost", rank);
        return NULL;
    }
    if (slot->state != CHILD_UP || !(c = conn_lookup(b, slot->conn_id))) {
        errprintf(err, "rank %u is not up yet", rank);
        return NULL;
    }
    return c;
}

const uint32_t *overlay_lost_by(broker_t *b)
{
    return b->ov ? b->ov->lost_by : NULL;
}

void overlay_forward_event(broker_t *b, const msg_t *msg)
{
    struct overlay *ov = b->ov;
    struct conn *c;

    for (uint32_t i = 0; i < ov->nchildren; i++) {
        if (ov->children[i].state == CHILD_UP &&
            (c = conn_lookup(b, ov->children[i].conn_id)))
            conn_send(c, msg);
    }
}

unsigned overlay_children_connected(broker_t *b)
{
    struct overlay *ov = b->ov;
    unsigned n = 0;

    for (uint32_t i = 0; ov && i < ov->nchildren; i++) {
        if (ov->children[i].state == CHILD_UP)
            n++;
    }
    return n;
}

const char *overlay_listen_addr(broker_t *b)
{
    return b->ov && b->ov->listen_name[0] ? b->ov->listen_name : NULL;
}

/* Ranks of our subtree: lost, up (reported ready), or connecting. */
json_t *overlay_status(broker_t *b)
{
    struct overlay *ov = b->ov;
    json_t *ranks = json_array();
    json_t *o = NULL;
    idset_t *lost = idset_create();
    char *lost_s = NULL;

    if (!ranks || !lost)
        goto done;
    for (uint32_t r = b->rank; r < b->size; r++) {
        const char *state;
        json_t *e;
        if (!topo_in_subtree(b->rank, r, b->fanout))
            continue;
        if (ov->lost_by[r] != TOPO_NONE) {
            state = "lost";
            idset_set(lost, r);
        } else if (ov->hostnames[r])
            state = "up";
        else
            state = "connecting";
        e = json_pack(
            "{s:I s:o s:s s:o}", "rank", (json_int_t)r, "parent",
            r == 0 ? json_null() : json_integer(topo_parent(r, b->fanout)),
            "state", state, "hostname",
            ov->hostnames[r] ? json_string(ov->hostnames[r]) : json_null());
        if (!e || json_array_append_new(ranks, e) < 0)
            goto done;
    }
    if (!(lost_s = idset_encode(lost)))
        goto done;
    o = json_pack("{s:I s:I s:s s:O}", "size", (json_int_t)b->size, "fanout",
                  (json_int_t)b->fanout, "lost", lost_s, "ranks", ranks);
done:
    free(lost_s);
    idset_destroy(lost);
    json_decref(ranks);
    return o;
}
