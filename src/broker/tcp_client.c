/* tcp_client.c - remote clients: a TCP listener at rank 0 that admits
 * only peers proving they hold the instance token.
 *
 * A connection is not a struct conn until it has authenticated: until
 * then this file reads it itself, into a fixed buffer of
 * BROKER_AUTH_FRAME_MAX bytes, so a stranger costs a few KiB for at most
 * BROKER_AUTH_TIMEOUT_MS and can never reach the router.  Only then is the
 * stream handed to conn_create() as a client acting as the instance
 * owner: the token is the owner's credential, as SO_PEERCRED is on the
 * local socket.  Refusals are sent as an EPERM greeting, so the client
 * can say "wrong token" rather than "connection reset".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <netdb.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/common/token.h"
#include "tcp_client.h"

/* How often unauthenticated connections are checked for their deadline. */
#define TCP_SWEEP_MS 500

enum pending_state {
    PENDING_AUTH,     /* challenge sent, waiting for the answer */
    PENDING_REFUSING, /* refusal queued, closing once written */
    PENDING_CLOSING,  /* uv_close() called */
};

struct pending {
    struct tcp_client *t;
    uv_tcp_t *tcp;
    enum pending_state state;
    msg_decoder_t *dec;
    msg_t *answer; /* the first frame decoded */
    unsigned nframes;
    char name[96];
    unsigned char nonce[TOKEN_SIZE];
    uint64_t t_open;
    struct pending *next, *prev;
    char rbuf[BROKER_AUTH_FRAME_MAX];
};

struct tcp_client {
    broker_t *b;
    uv_tcp_t *listener;
    uv_timer_t *timer;
    struct pending *pending;
    unsigned npending;
    char uri[TOKEN_HOST_MAX + 32];
    char token_path[TOKEN_PATH_MAX];
    char *uri_path; /* RUNDIR/tcp-uri */
    bool token_written;
    dev_t token_dev; /* the file we wrote: removed at stop only if it is */
    ino_t token_ino; /* still there, not another instance's */
    bool uri_written;
    unsigned char token[TOKEN_SIZE];
};

struct wreq {
    uv_write_t req;
    void *buf;
    struct pending *close_after; /* a refusal: close once written */
};

static void pending_close(struct pending *p);

static void sockaddr_name(const struct sockaddr *sa, char *buf, size_t size)
{
    char host[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        uv_ip4_name(in, host, sizeof(host));
        snprintf(buf, size, "%s:%d", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        uv_ip6_name(in6, host, sizeof(host));
        snprintf(buf, size, "[%s]:%d", host, ntohs(in6->sin6_port));
    } else
        snprintf(buf, size, "?");
}

static void write_cb(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;

    if (w->close_after && w->close_after->state == PENDING_REFUSING)
        pending_close(w->close_after);
    free(w->buf);
    free(w);
}

/* Queue 'msg' on a stream we still read ourselves.  Borrows msg. */
static int send_raw(uv_stream_t *s, const msg_t *msg, struct pending *close)
{
    struct wreq *w;
    size_t len;
    uv_buf_t buf;
    int rc;

    if (!(w = calloc(1, sizeof(*w))))
        return -1;
    if (msg_encode(msg, &w->buf, &len) < 0) {
        free(w);
        return -1;
    }
    w->close_after = close;
    buf = uv_buf_init(w->buf, (unsigned)len);
    if ((rc = uv_write(&w->req, s, &buf, 1, write_cb)) < 0) {
        free(w->buf);
        free(w);
        errno = -rc;
        return -1;
    }
    return 0;
}

static msg_t *greeting(broker_t *b, int errnum, json_t *body)
{
    msg_t *msg;

    if (!(msg = msg_create(MSG_RESPONSE, "broker.hello", body, NULL, 0)))
        return NULL;
    msg->matchtag = 0;
    msg->rank = b->rank;
    msg->errnum = (uint32_t)errnum;
    return msg;
}

static void close_cb(uv_handle_t *h)
{
    struct pending *p = h->data;

    free(h);
    msg_decref(p->answer);
    msg_decoder_destroy(p->dec);
    free(p);
}

static void unlink_pending(struct pending *p)
{
    struct tcp_client *t = p->t;

    if (p->prev)
        p->prev->next = p->next;
    else if (t->pending == p)
        t->pending = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->next = p->prev = NULL;
    t->npending--;
}

static void pending_close(struct pending *p)
{
    if (p->state == PENDING_CLOSING)
        return;
    p->state = PENDING_CLOSING;
    unlink_pending(p);
    uv_close((uv_handle_t *)p->tcp, close_cb);
}

static void refuse(struct pending *p,
                   int errnum,
                   int level,
                   const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

/* Log, send an error greeting that says why, close once it is written. */
static void refuse(
    struct pending *p, int errnum, int level, const char *fmt, ...)
{
    broker_t *b = p->t->b;
    char text[256];
    va_list ap;
    msg_t *msg;

    if (p->state != PENDING_AUTH)
        return;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    broker_log(b, level, "refused tcp client %s: %s", p->name, text);
    uv_read_stop((uv_stream_t *)p->tcp);
    p->state = PENDING_REFUSING;
    if (!(msg = greeting(b, errnum, json_pack("{s:s}", "errstr", text))) ||
        send_raw((uv_stream_t *)p->tcp, msg, p) < 0)
        pending_close(p);
    msg_decref(msg);
}

/* The answer was right: from now on this is an ordinary client. */
static void admit(struct pending *p, const unsigned char cnonce[TOKEN_SIZE])
{
    struct tcp_client *t = p->t;
    broker_t *b = t->b;
    unsigned char mac[TOKEN_MAC_SIZE];
    char mac_hex[2 * TOKEN_MAC_SIZE + 1];
    char name[96 + 8];
    uv_stream_t *stream = (uv_stream_t *)p->tcp;
    struct conn *c;
    msg_t *msg;

    uv_read_stop(stream);
    unlink_pending(p);
    snprintf(name, sizeof(name), "tcp %s", p->name);
    msg_decref(p->answer);
    msg_decoder_destroy(p->dec);
    free(p);
    /* conn_create() owns the stream from here, also on failure. */
    if (!(c = conn_create(b, CONN_CLIENT, stream, name))) {
        broker_log(b, LOG_LEVEL_WARNING, "tcp client %s: %s", name,
                   strerror(errno));
        return;
    }
    c->uid = (uint32_t)b->uid;
    c->pid = 0;
    token_mac(t->token, TOKEN_LABEL_BROKER, cnonce, mac);
    sodium_bin2hex(mac_hex, sizeof(mac_hex), mac, sizeof(mac));
    broker_log(b, LOG_LEVEL_DEBUG, "client %s connected", name);
    if ((msg = greeting(b, 0,
                        json_pack("{s:I s:I s:s s:I s:s}", "rank",
                                  (json_int_t)b->rank, "size",
                                  (json_int_t)b->size, "version",
                                  EDDY_VERSION_STRING, "uid",
                                  (json_int_t)b->uid, "mac", mac_hex)))) {
        conn_send(c, msg);
        msg_decref(msg);
    } else
        conn_drop(c, ENOMEM, "out of memory");
}

static void check_answer(struct pending *p)
{
    struct tcp_client *t = p->t;
    unsigned char mac[TOKEN_MAC_SIZE], cnonce[TOKEN_SIZE];
    const msg_t *msg = p->answer;
    eddy_error_t e;
    char desc[160];

    if (msg->type != MSG_REQUEST || strcmp(msg->topic, "client.auth") != 0) {
        msg_describe(msg, desc, sizeof(desc));
        refuse(p, EPROTO, LOG_LEVEL_WARNING, "expected client.auth, got %s",
               desc);
        return;
    }
    if (tcpauth_decode_auth(msg->body, mac, cnonce, &e) < 0) {
        refuse(p, EPROTO, LOG_LEVEL_WARNING, "%s", e.text);
        return;
    }
    if (!token_mac_verify(t->token, TOKEN_LABEL_CLIENT, p->nonce, mac)) {
        refuse(p, EPERM, LOG_LEVEL_WARNING, "wrong token for instance %s",
               t->uri);
        return;
    }
    if (t->b->state != BROKER_RUNNING) {
        refuse(p, ESHUTDOWN, LOG_LEVEL_INFO, "the instance is shutting down");
        return;
    }
    admit(p, cnonce);
}

static void frame_cb(msg_t *msg, void *arg)
{
    struct pending *p = arg;

    if (p->nframes++ == 0)
        p->answer = msg;
    else
        msg_decref(msg);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct pending *p = h->data;

    buf->base = p->rbuf;
    buf->len = sizeof(p->rbuf);
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct pending *p = s->data;
    eddy_error_t e;

    if (n == 0 || p->state != PENDING_AUTH)
        return;
    if (n < 0) {
        broker_log(p->t->b, LOG_LEVEL_DEBUG,
                   "tcp client %s left before authenticating: %s", p->name,
                   uv_strerror((int)n));
        pending_close(p);
        return;
    }
    if (msg_decoder_feed(p->dec, buf->base, (size_t)n, frame_cb, p, &e) < 0) {
        refuse(p, EPROTO, LOG_LEVEL_WARNING, "protocol error: %s", e.text);
        return;
    }
    if (p->nframes == 0)
        return;
    /* A client sends nothing more until it is greeted. */
    if (p->nframes > 1 || msg_decoder_pending(p->dec) > 0) {
        refuse(p, EPROTO, LOG_LEVEL_WARNING,
               "protocol error: data after the answer to the challenge");
        return;
    }
    check_answer(p);
}

static void accept_cb(uv_stream_t *server, int status)
{
    struct tcp_client *t = server->data;
    broker_t *b = t->b;
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);
    char nonce_hex[2 * TOKEN_SIZE + 1];
    struct pending *p;
    uv_tcp_t *tcp;
    msg_t *msg;

    if (status < 0) {
        broker_log(b, LOG_LEVEL_WARNING, "tcp accept: %s", uv_strerror(status));
        return;
    }
    if (!(tcp = malloc(sizeof(*tcp))) || uv_tcp_init(&b->loop, tcp) < 0) {
        free(tcp);
        return;
    }
    if (uv_accept(server, (uv_stream_t *)tcp) < 0 ||
        b->state != BROKER_RUNNING) {
        uv_close((uv_handle_t *)tcp, (uv_close_cb)free);
        return;
    }
    if (t->npending >= BROKER_INBOUND_MAX) {
        /* Make room by refusing the oldest one still to answer: whoever
         * fills the table with silent connections cannot keep the owner
         * out, since a real client answers within a round trip while a
         * silent one waits to be evicted. */
        struct pending *old = NULL;

        for (struct pending *q = t->pending; q; q = q->next)
            if (q->state == PENDING_AUTH)
                old = q; /* the list is newest first */
        if (!old) {
            uv_close((uv_handle_t *)tcp, (uv_close_cb)free);
            return;
        }
        refuse(old, EBUSY, LOG_LEVEL_DEBUG,
               "%d clients were authenticating at once: the oldest goes",
               BROKER_INBOUND_MAX);
    }
    if (!(p = calloc(1, sizeof(*p))) ||
        !(p->dec = msg_decoder_create(BROKER_AUTH_FRAME_MAX))) {
        free(p);
        uv_close((uv_handle_t *)tcp, (uv_close_cb)free);
        return;
    }
    uv_tcp_nodelay(tcp, 1);
    p->t = t;
    p->tcp = tcp;
    tcp->data = p;
    p->t_open = uv_now(&b->loop);
    snprintf(p->name, sizeof(p->name), "?");
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &sslen) == 0)
        sockaddr_name((struct sockaddr *)&ss, p->name, sizeof(p->name));
    p->next = t->pending;
    if (p->next)
        p->next->prev = p;
    t->pending = p;
    t->npending++;
    randombytes_buf(p->nonce, sizeof(p->nonce));
    sodium_bin2hex(nonce_hex, sizeof(nonce_hex), p->nonce, sizeof(p->nonce));
    if (!(msg = msg_create(
              MSG_EVENT, "client.challenge",
              json_pack("{s:s s:s}", "nonce", nonce_hex, "instance", t->uri),
              NULL, 0))) {
        pending_close(p);
        return;
    }
    msg->rank = b->rank;
    if (send_raw((uv_stream_t *)tcp, msg, NULL) < 0 ||
        uv_read_start((uv_stream_t *)tcp, alloc_cb, read_cb) < 0)
        pending_close(p);
    msg_decref(msg);
}

static void sweep_cb(uv_timer_t *timer)
{
    struct tcp_client *t = timer->data;
    uint64_t now = uv_now(&t->b->loop);
    struct pending *p = t->pending, *next;

    for (; p; p = next) {
        next = p->next;
        if (p->state == PENDING_AUTH &&
            now - p->t_open > BROKER_AUTH_TIMEOUT_MS)
            refuse(p, ETIMEDOUT, LOG_LEVEL_WARNING,
                   "no answer to the challenge within %d s",
                   BROKER_AUTH_TIMEOUT_MS / 1000);
        else if (p->state == PENDING_REFUSING &&
                 now - p->t_open > BROKER_AUTH_TIMEOUT_MS + BROKER_LINGER_MS)
            pending_close(p); /* a peer that does not read its refusal */
    }
}

/* Split "ADDR:PORT" / "[V6]:PORT" (port 0: the kernel picks one). */
static int split_addr(const char *s,
                      char *host,
                      size_t hsize,
                      char *port,
                      size_t psize,
                      eddy_error_t *err)
{
    const char *start = s, *end, *p;
    char *num_end;
    unsigned long v;
    size_t hlen;

    if (s[0] == '[') {
        start = s + 1;
        if (!(end = strchr(start, ']')) || end[1] != ':')
            goto bad;
        p = end + 2;
    } else {
        if (!(end = strrchr(s, ':')))
            goto bad;
        p = end + 1;
    }
    hlen = (size_t)(end - start);
    errno = 0;
    v = strtoul(p, &num_end, 10);
    if (hlen == 0 || hlen >= hsize || *p < '0' || *p > '9' || *num_end ||
        errno || v > 65535)
        goto bad;
    memcpy(host, start, hlen);
    host[hlen] = '\0';
    snprintf(port, psize, "%lu", v);
    return 0;
bad:
    errno = EINVAL;
    return errprintf(err,
                     "--client-listen=%s: expected ADDR:PORT (PORT 0 to "
                     "65535, 0: any free port)",
                     s);
}

static int bind_listener(struct tcp_client *t,
                         const char *addr,
                         char *host,
                         size_t hsize,
                         int *port,
                         eddy_error_t *err)
{
    broker_t *b = t->b;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    struct sockaddr_storage ss;
    int sslen = sizeof(ss);
    char pstr[8];
    int rc;

    if (split_addr(addr, host, hsize, pstr, sizeof(pstr), err) < 0)
        return -1;
    if ((rc = getaddrinfo(host, pstr, &hints, &res)) != 0) {
        errno = EINVAL;
        return errprintf(err, "--client-listen=%s: %s", addr, gai_strerror(rc));
    }
    if (!(t->listener = malloc(sizeof(*t->listener)))) {
        freeaddrinfo(res);
        errno = ENOMEM;
        return errprintf(err, "out of memory");
    }
    uv_tcp_init(&b->loop, t->listener);
    t->listener->data = t;
    rc = uv_tcp_bind(t->listener, res->ai_addr, 0);
    freeaddrinfo(res);
    if (rc < 0 ||
        (rc = uv_listen((uv_stream_t *)t->listener, 128, accept_cb)) < 0) {
        errno = -rc;
        return errprintf(err, "cannot listen for clients on %s: %s", addr,
                         uv_strerror(rc));
    }
    if ((rc = uv_tcp_getsockname(t->listener, (struct sockaddr *)&ss, &sslen)) <
        0) {
        errno = -rc;
        return errprintf(err, "getsockname: %s", uv_strerror(rc));
    }
    *port = ss.ss_family == AF_INET6
                ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

static int write_uri_file(struct tcp_client *t, eddy_error_t *err)
{
    broker_t *b = t->b;
    FILE *f;

    if (asprintf(&t->uri_path, "%s/tcp-uri", b->rundir) < 0) {
        t->uri_path = NULL;
        errno = ENOMEM;
        return errprintf(err, "out of memory");
    }
    if (!(f = fopen(t->uri_path, "we")))
        return errprintf(err, "cannot write %s: %s", t->uri_path,
                         strerror(errno));
    t->uri_written = true;
    fprintf(f, "%s\n", t->uri);
    if (fclose(f) != 0)
        return errprintf(err, "cannot write %s: %s", t->uri_path,
                         strerror(errno));
    return 0;
}

struct tcp_client *tcp_client_start(broker_t *b,
                                    const char *addr,
                                    eddy_error_t *err)
{
    struct tcp_client *t;
    struct tcp_uri u;
    struct stat st;
    char host[TOKEN_HOST_MAX + 1];
    int port = 0;
    bool v6;

    if (!(t = calloc(1, sizeof(*t)))) {
        errprintf(err, "out of memory");
        return NULL;
    }
    t->b = b;
    if (bind_listener(t, addr, host, sizeof(host), &port, err) < 0)
        goto error;
    /* A wildcard address is reached by this host's name. */
    if (!strcmp(host, "0.0.0.0") || !strcmp(host, "::"))
        snprintf(host, sizeof(host), "%s", b->hostname);
    v6 = strchr(host, ':') != NULL;
    snprintf(t->uri, sizeof(t->uri), "tcp://%s%s%s:%d", v6 ? "[" : "", host,
             v6 ? "]" : "", port);
    if (tcp_uri_parse(t->uri, &u, err) < 0 ||
        token_create(&u, b->opts.token_file, t->token, t->token_path,
                     sizeof(t->token_path), err) < 0)
        goto error;
    t->token_written = true;
    if (stat(t->token_path, &st) == 0) {
        t->token_dev = st.st_dev;
        t->token_ino = st.st_ino;
    }
    if (write_uri_file(t, err) < 0)
        goto error;
    if (!(t->timer = malloc(sizeof(*t->timer)))) {
        errno = ENOMEM;
        errprintf(err, "out of memory");
        goto error;
    }
    uv_timer_init(&b->loop, t->timer);
    t->timer->data = t;
    uv_timer_start(t->timer, sweep_cb, TCP_SWEEP_MS, TCP_SWEEP_MS);
    uv_unref((uv_handle_t *)t->timer);
    broker_log(b, LOG_LEVEL_INFO, "remote clients: %s (token %s)", t->uri,
               t->token_path);
    return t;
error:
    tcp_client_stop(t);
    tcp_client_destroy(t);
    return NULL;
}

void tcp_client_stop(struct tcp_client *t)
{
    if (!t)
        return;
    if (t->listener) {
        uv_close((uv_handle_t *)t->listener, (uv_close_cb)free);
        t->listener = NULL;
    }
    if (t->timer) {
        uv_close((uv_handle_t *)t->timer, (uv_close_cb)free);
        t->timer = NULL;
    }
    while (t->pending)
        pending_close(t->pending);
    if (t->token_written) {
        struct stat st;

        if (stat(t->token_path, &st) == 0 && st.st_dev == t->token_dev &&
            st.st_ino == t->token_ino)
            unlink(t->token_path);
        t->token_written = false;
    }
    if (t->uri_written) {
        unlink(t->uri_path);
        t->uri_written = false;
    }
    sodium_memzero(t->token, sizeof(t->token));
}

void tcp_client_destroy(struct tcp_client *t)
{
    int saved = errno;

    if (!t)
        return;
    tcp_client_stop(t);
    free(t->uri_path);
    free(t);
    errno = saved;
}

const char *tcp_client_uri(const struct tcp_client *t)
{
    return t->uri;
}
