/* handle.c - eddy_t: connect, greet, route responses, close.
 *
 * The socket is connected synchronously so that ENOENT, EACCES and
 * ECONNREFUSED come back from eddy_open() with a message naming the URI;
 * only then is it handed to libuv.  For tcp:// the token file is found
 * and checked before connecting (a client without a usable token never
 * bothers the broker), and the challenge-response of docs/remote.md runs
 * on the loop before the greeting, which must prove that the broker holds
 * the same token.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "src/common/errprintf.h"
#include "lib.h"

#define LOCAL_SCHEME "local://"

/* A broker greets at once; 10 s covers a loaded node without leaving a
 * tool hanging on something that is not a broker. */
#define GREETING_TIMEOUT 10.0

/* Until the peer has greeted us it is not known to be a broker: accept only
 * small frames so a stray server cannot make us allocate much. */
#define GREETING_MAX_FRAME (64u << 10)

/* Largest timeout armed in a uv timer: about 31 years. */
#define TIMEOUT_MAX_MS ((uint64_t)1 << 40)

uint64_t timeout_ms(double seconds)
{
    double ms = seconds * 1000.0;

    if (!(ms > 0))
        return 0;
    if (ms >= (double)TIMEOUT_MAX_MS)
        return TIMEOUT_MAX_MS;
    return (uint64_t)ms + ((double)(uint64_t)ms < ms ? 1 : 0);
}

void free_handle_cb(uv_handle_t *handle)
{
    free(handle);
}

static void update_pipe_ref(eddy_t *h)
{
    if (!h->pipe)
        return;
    /* Keep the loop alive while some RPC awaits a response, and before the
     * greeting; otherwise let uv_run(UV_RUN_DEFAULT) return. */
    if (h->tags.count > 0 || !h->greeted)
        uv_ref((uv_handle_t *)h->pipe);
    else
        uv_unref((uv_handle_t *)h->pipe);
}

int handle_register(eddy_t *h, eddy_future_t *f)
{
    uint32_t tag;

    /* Never 0 (the greeting's tag), never one still in use after the
     * counter wrapped. */
    do {
        tag = h->next_tag++;
        if (h->next_tag == 0)
            h->next_tag = 1;
    } while (tag == 0 || tagtab_get(&h->tags, tag));
    if (tagtab_put(&h->tags, tag, f) < 0)
        return -1;
    f->matchtag = tag;
    f->registered = true;
    update_pipe_ref(h);
    return 0;
}

void handle_unregister(eddy_t *h, eddy_future_t *f)
{
    if (!f->registered)
        return;
    tagtab_del(&h->tags, f->matchtag);
    f->registered = false;
    update_pipe_ref(h);
}

bool handle_busy(const eddy_t *h)
{
    return h->depth > 0 || h->running > 0;
}

void handle_wake(eddy_t *h)
{
    if (h->waiting > 0)
        uv_stop(h->loop);
}

static void deadline_cb(uv_timer_t *timer)
{
    bool *expired = timer->data;

    *expired = true;
    uv_stop(timer->loop); /* see handle_wake() */
}

int handle_run_until(eddy_t *h,
                     bool (*done)(void *arg),
                     void *arg,
                     double timeout)
{
    bool expired = false;
    int rc = 0;

    if (done(arg))
        return 0;
    h->waiting++;
    h->running++;
    if (timeout >= 0) {
        h->timer->data = &expired;
        uv_update_time(h->loop); /* the cached clock may be stale */
        uv_timer_start(h->timer, deadline_cb, timeout_ms(timeout), 0);
    }
    while (!done(arg)) {
        int alive;

        if (expired) {
            errno = ETIMEDOUT;
            rc = -1;
            break;
        }
        alive = uv_run(h->loop, UV_RUN_ONCE);
        if (!alive && !done(arg) && !expired) {
            /* Nothing left in the loop could ever make progress. */
            errno = h->conn ? EDEADLK : ENOTCONN;
            rc = -1;
            break;
        }
    }
    uv_timer_stop(h->timer);
    h->timer->data = NULL;
    h->running--;
    h->waiting--;
    return rc;
}

static void set_open_error(eddy_t *h, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_open_error(eddy_t *h, int errnum, const char *fmt, ...)
{
    va_list ap;

    if (h->open_errnum != 0) /* the first reason is the real one */
        return;
    h->open_errnum = errnum;
    va_start(ap, fmt);
    vsnprintf(h->open_err.text, sizeof(h->open_err.text), fmt, ap);
    va_end(ap);
}

/* tcp://: prove we hold the token; ask the broker to prove it too. */
static void answer_challenge(eddy_t *h, const msg_t *msg)
{
    unsigned char nonce[TOKEN_SIZE], mac[TOKEN_MAC_SIZE];
    char mac_hex[2 * TOKEN_MAC_SIZE + 1], nonce_hex[2 * TOKEN_SIZE + 1];
    eddy_error_t e;
    msg_t *auth;

    if (tcpauth_decode_challenge(msg->body, nonce, &e) < 0) {
        set_open_error(h, EPROTO, "%s: %s", h->uri, e.text);
        return;
    }
    randombytes_buf(h->cnonce, sizeof(h->cnonce));
    token_mac(h->token, TOKEN_LABEL_CLIENT, nonce, mac);
    sodium_bin2hex(mac_hex, sizeof(mac_hex), mac, sizeof(mac));
    sodium_bin2hex(nonce_hex, sizeof(nonce_hex), h->cnonce, sizeof(h->cnonce));
    if (!(auth = msg_create(
              MSG_REQUEST, "client.auth",
              json_pack("{s:s s:s}", "mac", mac_hex, "nonce", nonce_hex), NULL,
              0))) {
        set_open_error(h, ENOMEM, "out of memory");
        return;
    }
    auth->matchtag = 0;
    auth->rank = 0;
    if (msgconn_send(h->conn, auth) < 0)
        set_open_error(h, errno, "cannot answer the challenge of %s: %s",
                       h->uri, strerror(errno));
    msg_decref(auth);
    h->answered = true;
}

/* tcp://: the greeting must carry the broker's proof of the token. */
static int check_broker_proof(eddy_t *h, const msg_t *msg)
{
    unsigned char mac[TOKEN_MAC_SIZE];
    eddy_error_t e;

    if (!h->answered) {
        set_open_error(h, EPROTO,
                       "%s greeted without a challenge: not an eddy tcp "
                       "listener",
                       h->uri);
        return -1;
    }
    if (tcpauth_decode_greeting(msg->body, mac, &e) < 0 ||
        !token_mac_verify(h->token, TOKEN_LABEL_BROKER, h->cnonce, mac)) {
        set_open_error(h, EPROTO,
                       "the broker at %s did not prove it holds the token "
                       "of %s (another instance on that port?)",
                       h->uri, h->token_path);
        return -1;
    }
    return 0;
}

static void recv_greeting(eddy_t *h, const msg_t *msg)
{
    json_int_t rank, size;
    const char *version = NULL;
    char desc[128];

    if (msg->type != MSG_RESPONSE || msg->matchtag != 0 ||
        strcmp(msg->topic, "broker.hello") != 0) {
        msg_describe(msg, desc, sizeof(desc));
        set_open_error(h, EPROTO,
                       "%s did not greet like an eddy broker (got %s)", h->uri,
                       desc);
        return;
    }
    if (msg->errnum != 0) {
        const char *errstr = msg_errstr(msg);
        char safe[256];

        /* over tcp:// the peer has not proven anything yet: its text goes
         * to a terminal, so no control characters */
        if (errstr) {
            size_t i;
            snprintf(safe, sizeof(safe), "%s", errstr);
            for (i = 0; safe[i]; i++)
                if ((unsigned char)safe[i] < 0x20 || safe[i] == 0x7f)
                    safe[i] = '?';
            errstr = safe;
        }
        set_open_error(h, (int)msg->errnum,
                       "connection refused by broker: %s%s%s%s",
                       errstr ? errstr : strerror((int)msg->errnum),
                       h->tcp ? " (token read from " : "",
                       h->tcp ? h->token_path : "", h->tcp ? ")" : "");
        return;
    }
    if (h->tcp && check_broker_proof(h, msg) < 0)
        return;
    if (!msg->body ||
        json_unpack(msg->body, "{s:I s:I}", "rank", &rank, "size", &size) < 0 ||
        size < 1 || size > UINT32_MAX - 2 || rank < 0 || rank >= size) {
        set_open_error(h, EPROTO, "malformed greeting from broker at %s",
                       h->uri);
        return;
    }
    (void)json_unpack(msg->body, "{s?s}", "version", &version);
    snprintf(h->version, sizeof(h->version), "%s", version ? version : "");
    h->rank = (uint32_t)rank;
    h->size = (uint32_t)size;
    h->greeted = true;
}

static void conn_recv(msgconn_t *c, msg_t *msg, void *arg)
{
    eddy_t *h = arg;
    eddy_future_t *f;

    if (!h->greeted) {
        if (h->open_errnum == 0 && h->tcp && !h->answered &&
            msg->type == MSG_EVENT &&
            strcmp(msg->topic, "client.challenge") == 0)
            answer_challenge(h, msg);
        else if (h->open_errnum == 0)
            recv_greeting(h, msg);
        msg_decref(msg);
        return;
    }
    if (msg->type != MSG_RESPONSE ||
        !(f = tagtab_get(&h->tags, msg->matchtag))) {
        /* Late responses for destroyed or cancelled futures are normal. */
        if (h->trace) {
            char desc[256];
            msg_describe(msg, desc, sizeof(desc));
            fprintf(stderr, "eddy: dropped (no matching request): %s\n", desc);
        }
        msg_decref(msg);
        return;
    }
    fut_deliver(f, msg);
}

/* The connection is gone: fail everything that waits on it. */
static void conn_lost(eddy_t *h, int errnum, const char *reason)
{
    struct link *l;
    char text[256];

    snprintf(h->lost_reason, sizeof(h->lost_reason), "%s",
             reason && *reason ? reason : strerror(errnum ? errnum : EPIPE));
    if (!h->greeted)
        set_open_error(
            h, errnum == EPROTO || errnum == EMSGSIZE ? EPROTO : ECONNRESET,
            "connection to %s closed before the broker's "
            "greeting: %s",
            h->uri, h->lost_reason);
    msgconn_destroy(h->conn);
    h->conn = NULL;
    h->pipe = NULL;
    snprintf(text, sizeof(text), "connection to broker lost: %s",
             h->lost_reason);
    for (l = h->futures.next; l != &h->futures; l = l->next) {
        eddy_future_t *f = link_entry(l, eddy_future_t, all);
        if (f->registered)
            fut_fail(f, ENOTCONN, text);
    }
    tagtab_clear(&h->tags);
}

static void conn_closed(msgconn_t *c, int errnum, const char *reason, void *arg)
{
    conn_lost(arg, errnum, reason);
}

static void wakeup_cb(uv_async_t *async)
{
    fut_run_pending(async->data);
}

static bool greeting_done(void *arg)
{
    eddy_t *h = arg;

    return h->greeted || h->open_errnum != 0 || !h->conn;
}

static bool trace_env(void)
{
    const char *s = getenv("EDDY_TRACE");

    return s && *s && strcmp(s, "0") != 0;
}

/* libuv writes with write(2)/writev(2), which cannot take MSG_NOSIGNAL, and
 * writes happen from whatever uv_run() drives the loop (possibly the
 * caller's own), so blocking the signal around our own calls would not
 * cover every write.  If the broker vanishes between a read and a write,
 * a default SIGPIPE disposition would kill the tool instead of failing its
 * futures with ENOTCONN; so, unless the caller opted out, a default
 * disposition becomes SIG_IGN (documented in eddy/core.h).  A handler or
 * SIG_IGN the program installed itself is left alone. */
static void ignore_sigpipe(void)
{
    struct sigaction sa;

    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL &&
        !(sa.sa_flags & SA_SIGINFO)) {
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = SIG_IGN;
        sigemptyset(&sa.sa_mask);
        (void)sigaction(SIGPIPE, &sa, NULL);
    }
}

/* Parse 'uri' and connect; returns the connected fd or -1 with err. */
static int connect_uri(const char *uri, eddy_error_t *err)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    const char *path, *sep;
    size_t len;
    int fd, e;

    if (strncmp(uri, LOCAL_SCHEME, strlen(LOCAL_SCHEME)) != 0) {
        errno = EINVAL;
        if ((sep = strstr(uri, "://")) && sep > uri)
            return errprintf(err,
                             "unsupported URI scheme '%.*s' (local:// or "
                             "tcp://)",
                             (int)(sep - uri), uri);
        return errprintf(err,
                         "malformed URI '%s' (expected local://PATH or "
                         "tcp://HOST:PORT)",
                         uri);
    }
    path = uri + strlen(LOCAL_SCHEME);
    len = strlen(path);
    if (len == 0) {
        errno = EINVAL;
        return errprintf(err, "malformed URI '%s': empty socket path", uri);
    }
    if (len >= sizeof(sun.sun_path)) {
        errno = EINVAL;
        return errprintf(err,
                         "malformed URI: socket path longer than %zu "
                         "bytes ('%.64s...')",
                         sizeof(sun.sun_path) - 1, uri);
    }
    memcpy(sun.sun_path, path, len + 1);
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return errprintf(err, "cannot create a socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
        e = errno;
        close(fd);
        errno = e;
        if (e == EACCES)
            return errprintf(err,
                             "cannot connect to %s: %s (the instance "
                             "belongs to another user; only its owner may "
                             "use it)",
                             uri, strerror(e));
        if (e == ENOENT || e == ECONNREFUSED)
            return errprintf(err,
                             "cannot connect to %s: %s (is the instance "
                             "running?)",
                             uri, strerror(e));
        return errprintf(err, "cannot connect to %s: %s", uri, strerror(e));
    }
    return fd;
}

/* Connect to one address within GREETING_TIMEOUT: a host that drops
 * packets must not hang a tool for the kernel's two minutes. */
static int connect_addr(const struct addrinfo *ai)
{
    struct pollfd pfd;
    socklen_t len = sizeof(int);
    int fd, soerr = 0, rc, e;

    if ((fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                     0)) < 0)
        return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS)
            goto error;
        pfd.fd = fd;
        pfd.events = POLLOUT;
        do
            rc = poll(&pfd, 1, (int)(GREETING_TIMEOUT * 1000));
        while (rc < 0 && errno == EINTR);
        if (rc == 0)
            errno = ETIMEDOUT;
        if (rc <= 0)
            goto error;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0)
            goto error;
        if (soerr != 0) {
            errno = soerr;
            goto error;
        }
    }
    return fd;
error:
    e = errno;
    close(fd);
    errno = e;
    return -1;
}

/* tcp://HOST:PORT: find and check the token first, then connect.  The
 * token and where it came from go to 'token'/'tpath'. */
static int connect_tcp(const char *uri,
                       unsigned char token[TOKEN_SIZE],
                       char *tpath,
                       size_t tsize,
                       eddy_error_t *err)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL, *ai;
    struct tcp_uri u;
    int fd = -1, rc, e = ECONNREFUSED;

    if (sodium_init() < 0) {
        errno = ENOMEM;
        return errprintf(err, "libsodium failed to initialise");
    }
    if (tcp_uri_parse(uri, &u, err) < 0 ||
        token_find(&u, tpath, tsize, err) < 0)
        return -1;
    if (token_read(tpath, token, err) < 0) {
        if (errno == ENOENT) /* EDDY_TOKEN_FILE names a missing file */
            return errprintf(err, "no token for instance %s at %s", uri, tpath);
        return -1;
    }
    if ((rc = getaddrinfo(u.host, u.port, &hints, &res)) != 0) {
        sodium_memzero(token, TOKEN_SIZE);
        errno = rc == EAI_NONAME ? EHOSTUNREACH : EAGAIN;
        return errprintf(err, "cannot connect to %s: %s", uri,
                         gai_strerror(rc));
    }
    for (ai = res; ai && fd < 0; ai = ai->ai_next) {
        if ((fd = connect_addr(ai)) < 0)
            e = errno;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        sodium_memzero(token, TOKEN_SIZE);
        errno = e;
        if (e == ECONNREFUSED)
            return errprintf(err,
                             "cannot connect to %s: %s (is the instance "
                             "running?)",
                             uri, strerror(e));
        return errprintf(err, "cannot connect to %s: %s", uri, strerror(e));
    }
    return fd;
}

/* Everything but the socket.  NULL with errno (ENOMEM, or EMFILE/ENFILE
 * when the loop's epoll or eventfd descriptors cannot be created). */
static eddy_t *handle_create(const char *uri)
{
    eddy_t *h = calloc(1, sizeof(*h));
    uv_timer_t *timer;
    uv_async_t *wakeup;
    int rc, e = ENOMEM;

    if (!h) {
        errno = ENOMEM;
        return NULL;
    }
    link_init(&h->futures);
    link_init(&h->pending);
    tagtab_init(&h->tags);
    h->next_tag = 1;
    if (!(h->uri = strdup(uri)) || !(h->loop = malloc(sizeof(*h->loop))))
        goto error;
    if ((rc = uv_loop_init(h->loop)) < 0) {
        e = -rc;
        free(h->loop);
        h->loop = NULL;
        goto error;
    }
    /* Each handle pointer is set only once the handle is initialised, so
     * eddy_close() can close exactly what exists. */
    if (!(timer = malloc(sizeof(*timer))))
        goto error;
    uv_timer_init(h->loop, timer);
    h->timer = timer;
    if (!(wakeup = malloc(sizeof(*wakeup))))
        goto error;
    if ((rc = uv_async_init(h->loop, wakeup, wakeup_cb)) < 0) {
        e = -rc;
        free(wakeup);
        goto error;
    }
    wakeup->data = h;
    uv_unref((uv_handle_t *)wakeup);
    h->wakeup = wakeup;
    return h;
error:
    eddy_close(h);
    errno = e;
    return NULL;
}

static int attach_socket(eddy_t *h, int fd, eddy_error_t *err)
{
    uv_stream_t *pipe;
    int rc;

    if (!(pipe = malloc(h->tcp ? sizeof(uv_tcp_t) : sizeof(uv_pipe_t)))) {
        close(fd);
        errno = ENOMEM;
        return errprintf(err, "out of memory");
    }
    if (h->tcp) {
        uv_tcp_init(h->loop, (uv_tcp_t *)pipe);
        if ((rc = uv_tcp_open((uv_tcp_t *)pipe, fd)) == 0)
            uv_tcp_nodelay((uv_tcp_t *)pipe, 1);
    } else {
        uv_pipe_init(h->loop, (uv_pipe_t *)pipe, 0);
        rc = uv_pipe_open((uv_pipe_t *)pipe, fd);
    }
    if (rc < 0) {
        close(fd);
        uv_close((uv_handle_t *)pipe, free_handle_cb);
        errno = -rc;
        return errprintf(err, "cannot use the socket to %s: %s", h->uri,
                         uv_strerror(rc));
    }
    if (!(h->conn = msgconn_create(h->loop, pipe, conn_recv, conn_closed, h)))
        return errprintf(err, "cannot set up the connection to %s: %s", h->uri,
                         strerror(errno));
    h->pipe = pipe;
    msgconn_set_name(h->conn, "broker");
    if (h->trace)
        msgconn_set_trace(h->conn, "eddy");
    msgconn_set_max_frame(h->conn, GREETING_MAX_FRAME);
    return 0;
}

eddy_t *eddy_open(const char *uri, int flags, eddy_error_t *err)
{
    eddy_t *h = NULL;
    unsigned char token[TOKEN_SIZE];
    char tpath[TOKEN_PATH_MAX] = "";
    bool tcp;
    int fd;

    if (flags & ~(EDDY_OPEN_TRACE | EDDY_OPEN_KEEP_SIGPIPE)) {
        errno = EINVAL;
        errprintf(err, "unknown flags 0x%x", (unsigned)flags);
        return NULL;
    }
    if (!uri && !(uri = getenv("EDDY_URI"))) {
        errno = EINVAL;
        errprintf(err, "EDDY_URI is not set: not inside an eddy instance "
                       "(start one with 'eddy start')");
        return NULL;
    }
    tcp = strncmp(uri, TCP_SCHEME, strlen(TCP_SCHEME)) == 0;
    if (tcp)
        fd = connect_tcp(uri, token, tpath, sizeof(tpath), err);
    else
        fd = connect_uri(uri, err);
    if (fd < 0)
        return NULL;
    if (!(h = handle_create(uri))) {
        int e = errno;
        close(fd);
        sodium_memzero(token, sizeof(token));
        errno = e;
        errprintf(err, "cannot set up an event loop for %s: %s", uri,
                  strerror(e));
        return NULL;
    }
    if ((h->tcp = tcp)) {
        memcpy(h->token, token, sizeof(token));
        sodium_memzero(token, sizeof(token));
        snprintf(h->token_path, sizeof(h->token_path), "%s", tpath);
    }
    h->trace = (flags & EDDY_OPEN_TRACE) || trace_env();
    if (!(flags & EDDY_OPEN_KEEP_SIGPIPE))
        ignore_sigpipe();
    if (attach_socket(h, fd, err) < 0)
        goto error;
    if (handle_run_until(h, greeting_done, h, GREETING_TIMEOUT) < 0)
        set_open_error(h, ETIMEDOUT,
                       "no greeting from the broker at %s "
                       "within %.0f s",
                       uri, GREETING_TIMEOUT);
    if (!h->greeted && h->open_errnum == 0) /* not expected, but never 0 */
        set_open_error(h, EPROTO, "no greeting from the broker at %s", uri);
    if (h->open_errnum != 0) {
        errno = h->open_errnum;
        errprintf(err, "%s", h->open_err.text);
        goto error;
    }
    msgconn_set_max_frame(h->conn, MSG_FRAME_MAX);
    update_pipe_ref(h);
    return h;
error:
    eddy_close(h);
    return NULL;
}

static void close_walk_cb(uv_handle_t *handle, void *arg)
{
    /* Handles the caller left on our loop: it is about to disappear, so
     * they must be closed; their memory stays the caller's. */
    if (!uv_is_closing(handle))
        uv_close(handle, NULL);
}

/* eddy_close() while the loop runs: uv_run() is still using the loop (and
 * the caller may still use the futures it holds), so nothing can be freed.
 * Make the handle inert instead: the connection is dropped (the broker
 * cleans up), every unfinished future fails with ENOTCONN, no continuation
 * runs any more and nothing of ours keeps the loop alive, so the run that
 * called us returns soon. */
static void handle_shutdown(eddy_t *h)
{
    struct link *l;

    if (h->closing)
        return;
    h->closing = true;
    if (h->conn)
        conn_lost(h, ECONNABORTED, "closed by eddy_close()");
    /* Also unlinks futures from a batch fut_run_pending() is running. */
    for (l = h->futures.next; l != &h->futures; l = l->next) {
        eddy_future_t *f = link_entry(l, eddy_future_t, all);
        if (f->queued) {
            link_del(&f->notify);
            f->queued = false;
        }
        if (f->cb_timer)
            uv_timer_stop(f->cb_timer);
    }
    if (h->wakeup)
        uv_unref((uv_handle_t *)h->wakeup);
    handle_wake(h);
}

void eddy_close(eddy_t *h)
{
    int saved_errno = errno;

    if (!h)
        return;
    if (handle_busy(h)) {
        handle_shutdown(h);
        errno = saved_errno;
        return;
    }
    /* eddy_close cancels nothing remotely: drop the connection first so
     * destroying streaming futures sends no cancel. */
    if (h->conn) {
        msgconn_destroy(h->conn);
        h->conn = NULL;
        h->pipe = NULL;
    }
    while (!link_empty(&h->futures))
        fut_free(link_entry(h->futures.next, eddy_future_t, all));
    if (h->loop) {
        if (h->wakeup)
            uv_close((uv_handle_t *)h->wakeup, free_handle_cb);
        if (h->timer)
            uv_close((uv_handle_t *)h->timer, free_handle_cb);
        uv_walk(h->loop, close_walk_cb, NULL);
        uv_run(h->loop, UV_RUN_DEFAULT);
        uv_loop_close(h->loop);
        free(h->loop);
    }
    tagtab_release(&h->tags);
    sodium_memzero(h->token, sizeof(h->token));
    free(h->uri);
    free(h);
    errno = saved_errno;
}

uint32_t eddy_get_rank(eddy_t *h)
{
    return h ? h->rank : 0;
}

uint32_t eddy_get_size(eddy_t *h)
{
    return h ? h->size : 0;
}

void *eddy_get_loop(eddy_t *h)
{
    return h ? h->loop : NULL;
}

int eddy_get_fd(eddy_t *h)
{
    int fd;

    if (!h) {
        errno = EINVAL;
        return -1;
    }
    if ((fd = uv_backend_fd(h->loop)) < 0) {
        errno = ENOSYS;
        return -1;
    }
    return fd;
}

int eddy_get_timeout(eddy_t *h)
{
    if (!h) {
        errno = EINVAL;
        return -1;
    }
    if (!link_empty(&h->pending))
        return 0;
    /* uv_backend_timeout() says 0 for a loop with nothing active, which
     * would make an idle caller spin. */
    if (!uv_loop_alive(h->loop))
        return -1;
    /* The loop's clock is only updated when it runs: measure from now, or
     * the caller would sleep past the deadline. */
    uv_update_time(h->loop);
    return uv_backend_timeout(h->loop);
}

int eddy_dispatch(eddy_t *h)
{
    if (!h) {
        errno = EINVAL;
        return -1;
    }
    /* uv_run() is not reentrant. */
    if (handle_busy(h)) {
        errno = EDEADLK;
        return -1;
    }
    h->running++;
    uv_run(h->loop, UV_RUN_NOWAIT);
    /* Responses read in that pass queued their continuations for the
     * next iteration: run them now rather than at the next readable. */
    if (!link_empty(&h->pending))
        uv_run(h->loop, UV_RUN_NOWAIT);
    h->running--;
    return 0;
}
