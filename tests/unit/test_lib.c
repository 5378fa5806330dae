/* test_lib.c - libeddy against a fake broker.
 *
 * Each test that needs a broker gets a fresh fake one: a thread that
 * listens on a unix socket in a mkdtemp directory, accepts one client,
 * greets it (or refuses it) and answers requests by topic with plain
 * blocking I/O and the msg codec, independently of libeddy's own
 * connection code.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "eddy/core.h"
#include "src/common/msg.h"
#include "tests/unit/support/wire.h"

static int timeout_scale = 1;

enum greet_mode {
    GREET_OK,
    GREET_REFUSE,  /* EPERM + errstr, then close */
    GREET_CLOSE,   /* close without a word */
    GREET_GARBAGE, /* not the eddy protocol */
};

#define REFUSAL_TEXT "uid 65534 is not the instance owner (uid 0)"
#define MANY 3000

struct fake {
    char dir[32];
    char path[64];
    char uri[96];
    int listen_fd;
    enum greet_mode mode;
    pthread_t thread;
    bool running;

    /* what the broker saw (written by its thread, read with atomics) */
    int cancels_ok;  /* cancel frames with the right tag, topic, flags */
    int cancels_bad; /* something else where a cancel was expected */
    int noresponse;  /* NORESPONSE requests */
    int subscribe_prefix_ok;
    int publish_ok;
    uint32_t last_rank;
    char publish_body[256];
};

static int load(const int *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

static void bump(int *p)
{
    __atomic_add_fetch(p, 1, __ATOMIC_SEQ_CST);
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static msg_t *response(const msg_t *req,
                       const char *topic,
                       json_t *body,
                       int flags)
{
    msg_t *msg =
        msg_create(MSG_RESPONSE, topic ? topic : req->topic, body, NULL, 0);
    if (msg) {
        msg->matchtag = req->matchtag;
        msg->flags = (uint8_t)flags;
    }
    return msg;
}

/* Read the next frame and check that it cancels 'req'; then end the
 * stream. */
static int expect_cancel(struct fake *fk, int fd, const msg_t *req)
{
    msg_t *c = wire_read_msg(fd);

    if (c && c->type == MSG_REQUEST && (c->flags & MSG_FLAG_CANCEL) &&
        c->matchtag == req->matchtag && !strcmp(c->topic, req->topic))
        bump(&fk->cancels_ok);
    else
        bump(&fk->cancels_bad);
    msg_decref(c);
    return wire_send_msg(fd, response(req, NULL, NULL, MSG_FLAG_EOS));
}

/* Answer 'req'.  -1 to drop the connection. */
static int serve_one(struct fake *fk, int fd, msg_t *req, msg_t **many)
{
    const char *t = req->topic;

    __atomic_store_n(&fk->last_rank, req->rank, __ATOMIC_SEQ_CST);
    if (!strcmp(t, "test.echo")) {
        if (req->flags & MSG_FLAG_NORESPONSE) {
            bump(&fk->noresponse);
            return 0;
        }
        msg_t *r = msg_create(MSG_RESPONSE, t, json_incref(req->body),
                              req->payload, req->payload_len);
        if (r)
            r->matchtag = req->matchtag;
        return wire_send_msg(fd, r);
    }
    if (!strcmp(t, "test.stream")) {
        for (int i = 1; i <= 3; i++)
            if (wire_send_msg(
                    fd, response(req, NULL, json_pack("{s:i}", "seq", i), 0)) <
                0)
                return -1;
        return wire_send_msg(fd, response(req, NULL, NULL, MSG_FLAG_EOS));
    }
    if (!strcmp(t, "test.stream_eos_body")) {
        if (wire_send_msg(
                fd, response(req, NULL, json_pack("{s:i}", "seq", 1), 0)) < 0)
            return -1;
        return wire_send_msg(
            fd,
            response(req, NULL, json_pack("{s:i}", "seq", 2), MSG_FLAG_EOS));
    }
    if (!strcmp(t, "test.error"))
        return wire_send_msg(fd,
                             msg_create_error(req, ENOENT, "no such widget"));
    if (!strcmp(t, "test.error_nostr"))
        return wire_send_msg(fd, msg_create_error(req, EHOSTUNREACH, NULL));
    if (!strcmp(t, "test.never"))
        return 0;
    if (!strcmp(t, "test.hangup"))
        return -1;
    if (!strcmp(t, "test.silent_stream")) /* says nothing until cancelled */
        return expect_cancel(fk, fd, req);
    if (!strcmp(t, "test.cancel")) {
        if (wire_send_msg(
                fd, response(req, NULL, json_pack("{s:i}", "seq", 1), 0)) < 0)
            return -1;
        return expect_cancel(fk, fd, req);
    }
    if (!strcmp(t, "test.many")) {
        json_int_t i = -1;
        if (json_unpack(req->body, "{s:I}", "i", &i) < 0 || i < 0 ||
            i >= MANY || many[i])
            return -1;
        many[i] = msg_incref(req);
        for (int k = 0; k < MANY; k++)
            if (!many[k])
                return 0;
        /* all in: answer in reverse order */
        for (int k = MANY - 1; k >= 0; k--) {
            json_int_t v;
            (void)json_unpack(many[k]->body, "{s:I}", "i", &v);
            if (wire_send_msg(fd, response(many[k], NULL,
                                           json_pack("{s:I}", "i", v * 2), 0)) <
                0)
                return -1;
            msg_decref(many[k]);
            many[k] = NULL;
        }
        return 0;
    }
    if (!strcmp(t, "broker.subscribe")) {
        const char *prefix = NULL;
        if (req->rank == EDDY_RANK_ANY && (req->flags & MSG_FLAG_STREAMING) &&
            json_unpack(req->body, "{s:s}", "prefix", &prefix) == 0 &&
            !strcmp(prefix, "test.ev."))
            bump(&fk->subscribe_prefix_ok);
        if (wire_send_msg(fd, response(req, "test.ev.one",
                                       json_pack("{s:i}", "x", 1), 0)) < 0 ||
            wire_send_msg(fd, response(req, "test.ev.two",
                                       json_pack("{s:i}", "x", 2), 0)) < 0)
            return -1;
        return expect_cancel(fk, fd, req);
    }
    if (!strcmp(t, "broker.publish")) {
        char *s = req->body ? json_dumps(req->body, JSON_SORT_KEYS) : NULL;
        if (s && req->rank == 0) {
            snprintf(fk->publish_body, sizeof(fk->publish_body), "%s", s);
            bump(&fk->publish_ok);
        }
        free(s);
        return wire_send_msg(fd, response(req, NULL, NULL, 0));
    }
    return wire_send_msg(fd, msg_create_error(req, ENOSYS, "unknown topic"));
}

static void greet(struct fake *fk, int fd)
{
    msg_t *m;

    switch (fk->mode) {
    case GREET_OK:
        m = msg_create(MSG_RESPONSE, "broker.hello",
                       json_pack("{s:i s:i s:s s:i}", "rank", 3, "size", 4,
                                 "version", "0.1.0", "uid", (int)getuid()),
                       NULL, 0);
        (void)wire_send_msg(fd, m);
        break;
    case GREET_REFUSE:
        m = msg_create(MSG_RESPONSE, "broker.hello",
                       json_pack("{s:s}", "errstr", REFUSAL_TEXT), NULL, 0);
        if (m)
            m->errnum = EPERM;
        (void)wire_send_msg(fd, m);
        break;
    case GREET_CLOSE:
        break;
    case GREET_GARBAGE: {
        static const char junk[] = "SSH-2.0-OpenSSH_9.2 hello there\r\n";
        (void)wire_write_all(fd, junk, sizeof(junk) - 1);
        break;
    }
    }
}

static void *fake_main(void *arg)
{
    struct fake *fk = arg;
    struct pollfd pfd = {.fd = fk->listen_fd, .events = POLLIN};
    struct timeval tv = {.tv_sec = 10 * timeout_scale};
    msg_t *many[MANY] = {0};
    msg_t *req;
    int fd;

    if (poll(&pfd, 1, 10000 * timeout_scale) != 1)
        return NULL;
    if ((fd = accept4(fk->listen_fd, NULL, NULL, SOCK_CLOEXEC)) < 0)
        return NULL;
    /* never block forever on a client that went wrong */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    greet(fk, fd);
    if (fk->mode == GREET_OK || fk->mode == GREET_GARBAGE) {
        while ((req = wire_read_msg(fd))) {
            int rc = fk->mode == GREET_OK ? serve_one(fk, fd, req, many) : 0;
            msg_decref(req);
            if (rc < 0)
                break;
        }
    }
    for (int k = 0; k < MANY; k++)
        msg_decref(many[k]);
    close(fd);
    return NULL;
}

static struct fake *fake_start(enum greet_mode mode)
{
    struct fake *fk = calloc(1, sizeof(*fk));

    assert_non_null(fk);
    fk->mode = mode;
    snprintf(fk->dir, sizeof(fk->dir), "/tmp/test_lib.XXXXXX");
    fk->listen_fd = wire_listen(fk->dir, sizeof(fk->dir), fk->path,
                                sizeof(fk->path), fk->uri, sizeof(fk->uri));
    assert_true(fk->listen_fd >= 0);
    assert_int_equal(pthread_create(&fk->thread, NULL, fake_main, fk), 0);
    fk->running = true;
    return fk;
}

/* Wait for the broker thread (it ends when the client disconnects). */
static void fake_join(struct fake *fk)
{
    if (fk->running) {
        pthread_join(fk->thread, NULL);
        fk->running = false;
    }
}

static int fake_teardown(void **state)
{
    struct fake *fk = *state;

    if (!fk)
        return 0;
    fake_join(fk);
    close(fk->listen_fd);
    unlink(fk->path);
    rmdir(fk->dir);
    free(fk);
    *state = NULL;
    return 0;
}

static int setup_ok(void **state)
{
    *state = fake_start(GREET_OK);
    return 0;
}

static eddy_t *open_ok(struct fake *fk)
{
    eddy_error_t err = {{0}};
    eddy_t *h = eddy_open(fk->uri, 0, &err);

    if (!h)
        fail_msg("eddy_open: %s", err.text);
    return h;
}

/* ---- URIs and greetings ---------------------------------------------- */

static void check_open_fails(const char *uri, int errnum, const char *text)
{
    eddy_error_t err = {{0}};

    errno = 0;
    assert_null(eddy_open(uri, 0, &err));
    assert_int_equal(errno, errnum);
    if (!strstr(err.text, text))
        fail_msg("uri %s: expected '%s' in '%s'", uri ? uri : "(null)", text,
                 err.text);
}

static void test_bad_uri(void **state)
{
    char longuri[300];
    eddy_error_t err;

    unsetenv("EDDY_URI");
    check_open_fails(NULL, EINVAL,
                     "EDDY_URI is not set: not inside an eddy "
                     "instance (start one with 'eddy start')");
    check_open_fails("ftp://localhost:4000", EINVAL,
                     "unsupported URI scheme 'ftp' (local:// or tcp://)");
    check_open_fails("tcp://localhost", EINVAL,
                     "malformed URI 'tcp://localhost' (expected "
                     "tcp://HOST:PORT)");
    check_open_fails("/tmp/sock", EINVAL, "malformed URI '/tmp/sock'");
    check_open_fails("local://", EINVAL, "empty socket path");
    memcpy(longuri, "local://", 8);
    memset(longuri + 8, 'x', sizeof(longuri) - 9);
    longuri[sizeof(longuri) - 1] = '\0';
    check_open_fails(longuri, EINVAL, "socket path longer than");
    check_open_fails("local:///nonexistent-eddy-dir/local-0", ENOENT,
                     "cannot connect to local:///nonexistent-eddy-dir/"
                     "local-0: No such file or directory (is the instance "
                     "running?)");
    /* a NULL err is allowed */
    errno = 0;
    assert_null(eddy_open("tcp://x:0", 0, NULL));
    assert_int_equal(errno, EINVAL);
    /* unknown flags */
    assert_null(eddy_open("local:///x", 0x100, &err));
    assert_int_equal(errno, EINVAL);
}

static void test_connrefused(void **state)
{
    char dir[] = "/tmp/test_lib.XXXXXX", path[64], uri[80];
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int fd;

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/local-0", dir);
    snprintf(uri, sizeof(uri), "local://%s", path);
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    /* bound but not listening: what a crashed broker leaves behind */
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
    check_open_fails(uri, ECONNREFUSED, "(is the instance running?)");
    close(fd);
    unlink(path);
    rmdir(dir);
}

static void test_eacces(void **state)
{
    struct fake *fk = *state;

    if (geteuid() == 0) {
        /* Root ignores directory permissions: try as uid 65534 in a child
         * (the fake broker's directory is 0700 root). */
        pid_t pid = fork();
        int status;
        assert_true(pid >= 0);
        if (pid == 0) {
            eddy_error_t err;
            eddy_t *h;
            if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
                setresuid(65534, 65534, 65534) < 0)
                _exit(2);
            h = eddy_open(fk->uri, 0, &err);
            _exit(!h && errno == EACCES &&
                          strstr(err.text, "only its owner may use it")
                      ? 0
                      : 1);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    } else {
        assert_int_equal(chmod(fk->dir, 0), 0);
        check_open_fails(fk->uri, EACCES,
                         "Permission denied (the instance belongs to another "
                         "user; only its owner may use it)");
        assert_int_equal(chmod(fk->dir, 0700), 0);
    }
    /* let the broker thread finish */
    eddy_close(open_ok(fk));
}

static void test_open_ok(void **state)
{
    struct fake *fk = *state;
    eddy_error_t err;
    eddy_t *h;

    setenv("EDDY_URI", fk->uri, 1);
    h = eddy_open(NULL, 0, &err);
    unsetenv("EDDY_URI");
    if (!h)
        fail_msg("eddy_open: %s", err.text);
    assert_int_equal(eddy_get_rank(h), 3);
    assert_int_equal(eddy_get_size(h), 4);
    assert_non_null(eddy_get_loop(h));
    assert_true(eddy_get_fd(h) >= 0);
    assert_int_equal(eddy_dispatch(h), 0);
    errno = 1234;
    eddy_close(h);
    assert_int_equal(errno, 1234);
    eddy_close(NULL);
    assert_int_equal(errno, 1234);
}

static void test_refused(void **state)
{
    struct fake *fk = fake_start(GREET_REFUSE);

    *state = fk;
    check_open_fails(fk->uri, EPERM,
                     "connection refused by broker: " REFUSAL_TEXT);
}

static void test_no_greeting(void **state)
{
    struct fake *fk = fake_start(GREET_CLOSE);
    eddy_error_t err = {{0}};

    *state = fk;
    errno = 0;
    assert_null(eddy_open(fk->uri, 0, &err));
    assert_true(errno == ECONNRESET || errno == EPROTO);
    assert_non_null(strstr(err.text, "before the broker's greeting"));
}

static void test_garbage(void **state)
{
    struct fake *fk = fake_start(GREET_GARBAGE);
    eddy_error_t err = {{0}};

    *state = fk;
    errno = 0;
    assert_null(eddy_open(fk->uri, 0, &err));
    assert_int_equal(errno, EPROTO);
    assert_true(strlen(err.text) > 0);
}

/* ---- RPCs ------------------------------------------------------------- */

static void test_echo(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *f;
    const char *json;
    const void *data;
    size_t len;
    int a = 0;
    const char *s = NULL;
    static const char payload[] = "raw\0bytes";

    f = eddy_rpc(h, "test.echo", 2, 0, "{\"a\":42,\"s\":\"hi\"}", payload,
                 sizeof(payload));
    assert_non_null(f);
    assert_ptr_equal(eddy_future_get_handle(f), h);
    assert_int_equal(eddy_rpc_get(f, &json), 0);
    assert_string_equal(json, "{\"a\":42,\"s\":\"hi\"}");
    assert_true(eddy_future_is_ready(f));
    assert_string_equal(eddy_rpc_get_topic(f), "test.echo");
    assert_int_equal(eddy_rpc_get_raw(f, &data, &len), 0);
    assert_int_equal(len, sizeof(payload));
    assert_memory_equal(data, payload, sizeof(payload));
    assert_int_equal(eddy_rpc_get_unpack(f, "{s:i s:s}", "a", &a, "s", &s), 0);
    assert_int_equal(a, 42);
    assert_string_equal(s, "hi");
    assert_string_equal(eddy_future_error_string(f), "");
    /* a body that does not match: EPROTO naming the missing key */
    errno = 0;
    assert_int_equal(eddy_rpc_get_unpack(f, "{s:i}", "missing", &a), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(eddy_future_error_string(f), "missing"));
    assert_int_equal(__atomic_load_n(&fk->last_rank, __ATOMIC_SEQ_CST), 2);
    eddy_future_destroy(f);

    /* pack, no body in response handling, special ranks passed as-is */
    f = eddy_rpc_pack(h, "test.echo", EDDY_RANK_UPSTREAM, 0, "{s:[i,i]}", "v",
                      1, 2);
    assert_non_null(f);
    assert_int_equal(eddy_rpc_get(f, &json), 0);
    assert_string_equal(json, "{\"v\":[1,2]}");
    assert_int_equal(eddy_rpc_get_raw(f, &data, &len), 0);
    assert_null(data);
    assert_int_equal(len, 0);
    assert_int_equal(__atomic_load_n(&fk->last_rank, __ATOMIC_SEQ_CST),
                     EDDY_RANK_UPSTREAM);
    eddy_future_destroy(f);

    f = eddy_rpc(h, "test.echo", EDDY_RANK_ANY, 0, NULL, NULL, 0);
    assert_non_null(f);
    assert_int_equal(eddy_rpc_get(f, &json), 0);
    assert_string_equal(json, "{}");
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    assert_int_equal(eddy_rpc_get_unpack(f, "{}"), 0);
    eddy_future_destroy(f);

    /* fire and forget: ready at once, without running the loop */
    f = eddy_rpc(h, "test.echo", 0, EDDY_RPC_NORESPONSE, "{\"x\":1}", NULL, 0);
    assert_non_null(f);
    assert_true(eddy_future_is_ready(f));
    assert_int_equal(eddy_rpc_get(f, &json), 0);
    assert_string_equal(json, "{}");
    eddy_future_destroy(f);

    /* bad arguments */
    errno = 0;
    assert_null(eddy_rpc(h, "test.echo", 0, 0, "[1]", NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_rpc(h, "test.echo", 0, 0, "{", NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_rpc(h, NULL, 0, 0, NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_rpc(h, "", 0, 0, NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_rpc(h, "test.echo", 0,
                         EDDY_RPC_STREAMING | EDDY_RPC_NORESPONSE, NULL, NULL,
                         0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 5));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_rpc(NULL, "test.echo", 0, 0, NULL, NULL, 0));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_rpc_pack(h, "test.echo", 0, 0, "[i]", 1));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_rpc_pack(h, "test.echo", 0, 0, "{s:s}", "k", NULL));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_rpc_get(NULL, &json), -1);
    assert_int_equal(errno, EINVAL);

    /* a round trip after all that proves the NORESPONSE request got there
     * (the broker handles frames in order) */
    f = eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 0);
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    assert_int_equal(load(&fk->noresponse), 1);
    eddy_future_destroy(f);
    eddy_close(h);
}

static void test_stream(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *f;
    int seq;

    f = eddy_rpc(h, "test.stream", 0, EDDY_RPC_STREAMING, NULL, NULL, 0);
    assert_non_null(f);
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(eddy_rpc_get_unpack(f, "{s:i}", "seq", &seq), 0);
        assert_int_equal(seq, i);
        eddy_future_reset(f);
    }
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ENODATA);
    /* stays at the end; reset has nothing to consume */
    eddy_future_reset(f);
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ENODATA);
    assert_int_equal(eddy_future_wait_for(f, 0), 0);
    eddy_future_destroy(f);

    /* an EOS response with a body is delivered, then ENODATA */
    f = eddy_rpc(h, "test.stream_eos_body", 0, EDDY_RPC_STREAMING, NULL, NULL,
                 0);
    for (int i = 1; i <= 2; i++) {
        assert_int_equal(eddy_rpc_get_unpack(f, "{s:i}", "seq", &seq), 0);
        assert_int_equal(seq, i);
        eddy_future_reset(f);
    }
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ENODATA);
    eddy_future_destroy(f);
    eddy_close(h);
}

static void test_error(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *f;
    const char *json = "untouched";

    f = eddy_rpc(h, "test.error", 0, 0, NULL, NULL, 0);
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, &json), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(json, "untouched");
    assert_string_equal(eddy_future_error_string(f), "no such widget");
    assert_int_equal(eddy_future_wait_for(f, 1), 0);
    eddy_future_destroy(f);

    f = eddy_rpc(h, "test.error_nostr", 0, 0, NULL, NULL, 0);
    errno = 0;
    assert_int_equal(eddy_rpc_get_unpack(f, "{}"), -1);
    assert_int_equal(errno, EHOSTUNREACH);
    assert_string_equal(eddy_future_error_string(f), strerror(EHOSTUNREACH));
    eddy_future_destroy(f);

    /* an error ends a stream too */
    f = eddy_rpc(h, "test.unknown", 0, EDDY_RPC_STREAMING, NULL, NULL, 0);
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ENOSYS);
    assert_string_equal(eddy_future_error_string(f), "unknown topic");
    eddy_future_reset(f);
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ENODATA);
    eddy_future_destroy(f);

    assert_string_equal(eddy_strerror(EHOSTUNREACH), strerror(EHOSTUNREACH));
    assert_non_null(eddy_strerror(99999));
    eddy_close(h);
}

static void test_hangup(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *never, *f, *stream;
    const char *json;

    never = eddy_rpc(h, "test.never", 0, 0, NULL, NULL, 0);
    stream = eddy_rpc(h, "test.never", 0, EDDY_RPC_STREAMING, NULL, NULL, 0);
    f = eddy_rpc(h, "test.hangup", 0, 0, NULL, NULL, 0);
    assert_non_null(never);
    assert_non_null(stream);
    assert_non_null(f);
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, &json), -1);
    assert_int_equal(errno, ENOTCONN);
    assert_true(!strncmp(eddy_future_error_string(f),
                         "connection to broker lost: ", 27));
    /* every pending future failed, none hangs */
    assert_true(eddy_future_is_ready(never));
    errno = 0;
    assert_int_equal(eddy_future_wait_for(never, -1), -1);
    assert_int_equal(errno, ENOTCONN);
    errno = 0;
    assert_int_equal(eddy_rpc_get(stream, NULL), -1);
    assert_int_equal(errno, ENOTCONN);
    /* cancel has nowhere to go */
    assert_int_equal(eddy_rpc_cancel(stream), 0);
    /* new RPCs fail at once */
    errno = 0;
    assert_null(eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 0));
    assert_int_equal(errno, ENOTCONN);
    errno = 0;
    assert_null(eddy_event_subscribe(h, "x"));
    assert_int_equal(errno, ENOTCONN);
    eddy_future_destroy(never);
    eddy_future_destroy(stream);
    eddy_future_destroy(f);
    eddy_close(h);
}

/* ---- continuations ---------------------------------------------------- */

struct cbstate {
    int calls;
    int seqs[8];
    int nseq;
    int last_errno;
    bool destroyed;
    eddy_future_t *other;
    int other_get_errno;
    int dispatch_errno;
    int wait_errno;
};

static void destroy_in_cb(eddy_future_t *f, void *arg)
{
    struct cbstate *st = arg;
    const char *json;

    st->calls++;
    assert_int_equal(eddy_rpc_get(f, &json), 0);
    assert_string_equal(json, "{\"k\":1}");
    eddy_future_destroy(f); /* freed once we return */
    st->destroyed = true;
}

static void count_cb(eddy_future_t *f, void *arg)
{
    struct cbstate *st = arg;

    st->calls++;
}

static void destroy_other_cb(eddy_future_t *f, void *arg)
{
    struct cbstate *st = arg;

    st->calls++;
    eddy_future_destroy(st->other);
    st->other = NULL;
}

static void test_then(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    uv_loop_t *loop = eddy_get_loop(h);
    struct cbstate st = {0}, st2 = {0};
    eddy_future_t *f, *g;

    f = eddy_rpc(h, "test.echo", 0, 0, "{\"k\":1}", NULL, 0);
    assert_int_equal(eddy_future_then(f, -1, destroy_in_cb, &st), 0);
    /* the loop returns once nothing is left to do */
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(st.calls, 1);
    assert_true(st.destroyed);

    /* already ready: called from the loop, never from inside then() */
    g = eddy_rpc(h, "test.echo", 0, EDDY_RPC_NORESPONSE, NULL, NULL, 0);
    assert_true(eddy_future_is_ready(g));
    assert_int_equal(eddy_future_then(g, -1, count_cb, &st2), 0);
    assert_int_equal(st2.calls, 0);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(st2.calls, 1);
    /* not called again without a reset */
    uv_run(loop, UV_RUN_NOWAIT);
    assert_int_equal(st2.calls, 1);
    eddy_future_destroy(g);

    /* two ready futures, the first continuation destroys the other */
    st2 = (struct cbstate){0};
    g = eddy_rpc(h, "test.echo", 0, EDDY_RPC_NORESPONSE, NULL, NULL, 0);
    st2.other = eddy_rpc(h, "test.echo", 0, EDDY_RPC_NORESPONSE, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(g, -1, destroy_other_cb, &st2), 0);
    assert_int_equal(eddy_future_then(st2.other, -1, count_cb, &st2), 0);
    uv_run(loop, UV_RUN_DEFAULT);
    assert_int_equal(st2.calls, 1);
    eddy_future_destroy(g);

    errno = 0;
    assert_int_equal(eddy_future_then(NULL, -1, count_cb, NULL), -1);
    assert_int_equal(errno, EINVAL);
    f = eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 0);
    errno = 0;
    assert_int_equal(eddy_future_then(f, -1, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
    eddy_future_destroy(f); /* response arrives later and is dropped */
    eddy_close(h);
}

static void stream_cb(eddy_future_t *f, void *arg)
{
    struct cbstate *st = arg;
    int seq;

    st->calls++;
    if (eddy_rpc_get_unpack(f, "{s:i}", "seq", &seq) < 0) {
        st->last_errno = errno;
        eddy_future_destroy(f);
        return;
    }
    if (st->nseq < 8)
        st->seqs[st->nseq++] = seq;
    eddy_future_reset(f);
}

static void test_then_stream(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct cbstate st = {0};
    eddy_future_t *f;

    f = eddy_rpc(h, "test.stream", 0, EDDY_RPC_STREAMING, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(f, 10 * timeout_scale, stream_cb, &st),
                     0);
    uv_run(eddy_get_loop(h), UV_RUN_DEFAULT);
    assert_int_equal(st.nseq, 3);
    assert_int_equal(st.seqs[0], 1);
    assert_int_equal(st.seqs[1], 2);
    assert_int_equal(st.seqs[2], 3);
    assert_int_equal(st.last_errno, ENODATA);
    assert_int_equal(st.calls, 4);
    eddy_close(h);
}

static void timeout_cb(eddy_future_t *f, void *arg)
{
    struct cbstate *st = arg;

    st->calls++;
    errno = 0;
    if (eddy_rpc_get(f, NULL) < 0)
        st->last_errno = errno;
}

static void test_timeout(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct cbstate st = {0};
    eddy_future_t *f;
    double t0;

    f = eddy_rpc(h, "test.never", 0, 0, NULL, NULL, 0);
    t0 = now();
    errno = 0;
    assert_int_equal(eddy_future_wait_for(f, 0.1), -1);
    assert_int_equal(errno, ETIMEDOUT);
    assert_true(now() - t0 >= 0.09);
    assert_false(eddy_future_is_ready(f));
    assert_string_equal(eddy_future_error_string(f),
                        "test.never: no response within 0.1 s");
    errno = 0;
    assert_int_equal(eddy_future_wait_for(f, 0), -1);
    assert_int_equal(errno, ETIMEDOUT);

    /* timeouts count from the call, even when the loop has not run for
     * a while (libuv's clock is only updated when it runs) */
    usleep(300000);
    t0 = now();
    errno = 0;
    assert_int_equal(eddy_future_wait_for(f, 0.1), -1);
    assert_int_equal(errno, ETIMEDOUT);
    assert_true(now() - t0 >= 0.09);
    usleep(300000);
    t0 = now();

    /* a continuation's timeout fails the future for good */
    assert_int_equal(eddy_future_then(f, 0.05, timeout_cb, &st), 0);
    while (st.calls == 0)
        uv_run(eddy_get_loop(h), UV_RUN_ONCE);
    assert_true(now() - t0 >= 0.045);
    assert_int_equal(st.calls, 1);
    assert_int_equal(st.last_errno, ETIMEDOUT);
    assert_true(eddy_future_is_ready(f));
    eddy_future_reset(f);
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ETIMEDOUT);
    assert_int_equal(eddy_future_wait_for(f, -1), -1);
    assert_int_equal(errno, ETIMEDOUT);
    assert_true(strlen(eddy_future_error_string(f)) > 0);
    uv_run(eddy_get_loop(h), UV_RUN_NOWAIT);
    assert_int_equal(st.calls, 1);
    eddy_future_destroy(f);

    /* a timeout that does not expire: the response wins */
    st = (struct cbstate){0};
    f = eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(f, 10 * timeout_scale, timeout_cb, &st),
                     0);
    while (st.calls == 0)
        uv_run(eddy_get_loop(h), UV_RUN_ONCE);
    assert_int_equal(st.last_errno, 0);
    eddy_future_destroy(f);
    eddy_close(h);
}

static void deadlock_cb(eddy_future_t *f, void *arg)
{
    struct cbstate *st = arg;

    st->calls++;
    errno = 0;
    if (eddy_rpc_get(st->other, NULL) < 0)
        st->other_get_errno = errno;
    errno = 0;
    if (eddy_dispatch(eddy_future_get_handle(f)) < 0)
        st->dispatch_errno = errno;
    errno = 0;
    if (eddy_future_wait_for(st->other, 1) < 0)
        st->wait_errno = errno;
    assert_non_null(
        strstr(eddy_future_error_string(st->other), "from inside a callback"));
    /* a ready future can be read from a callback */
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
}

static void test_edeadlk(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct cbstate st = {0};
    eddy_future_t *f;

    st.other = eddy_rpc(h, "test.never", 0, 0, NULL, NULL, 0);
    f = eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(f, -1, deadlock_cb, &st), 0);
    while (st.calls == 0)
        uv_run(eddy_get_loop(h), UV_RUN_ONCE);
    assert_int_equal(st.other_get_errno, EDEADLK);
    assert_int_equal(st.dispatch_errno, EDEADLK);
    assert_int_equal(st.wait_errno, EDEADLK);
    eddy_future_destroy(f);
    eddy_future_destroy(st.other);
    eddy_close(h);
}

static void test_fd_dispatch(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct cbstate st = {0};
    eddy_future_t *f;
    int fd = eddy_get_fd(h);
    double deadline = now() + 10 * timeout_scale;

    assert_true(fd >= 0);
    f = eddy_rpc(h, "test.stream", 0, EDDY_RPC_STREAMING, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(f, -1, stream_cb, &st), 0);
    /* a caller with its own poll loop */
    while (st.last_errno == 0 && now() < deadline) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 1000) == 1)
            assert_int_equal(eddy_dispatch(h), 0);
    }
    assert_int_equal(st.nseq, 3);
    assert_int_equal(st.last_errno, ENODATA);
    errno = 0;
    assert_int_equal(eddy_dispatch(NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(eddy_get_fd(NULL), -1);
    eddy_close(h);
}

/* ---- cancel, events, volume, close ------------------------------------ */

static void test_cancel(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *f;
    int seq = 0;

    f = eddy_rpc(h, "test.cancel", 1, EDDY_RPC_STREAMING, NULL, NULL, 0);
    assert_int_equal(eddy_rpc_get_unpack(f, "{s:i}", "seq", &seq), 0);
    assert_int_equal(seq, 1);
    eddy_future_reset(f);
    assert_int_equal(eddy_rpc_cancel(f), 0);
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ENODATA);
    assert_int_equal(load(&fk->cancels_ok), 1);
    assert_int_equal(load(&fk->cancels_bad), 0);
    /* over: cancelling again is a no-op */
    assert_int_equal(eddy_rpc_cancel(f), 0);
    eddy_future_destroy(f);

    /* only streams can be cancelled */
    f = eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 0);
    errno = 0;
    assert_int_equal(eddy_rpc_cancel(f), -1);
    assert_int_equal(errno, EINVAL);
    eddy_future_destroy(f);
    eddy_close(h);
}

static void test_events(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *f, *p;
    int x = 0;

    f = eddy_event_subscribe(h, "test.ev.");
    assert_non_null(f);
    assert_int_equal(eddy_rpc_get_unpack(f, "{s:i}", "x", &x), 0);
    assert_int_equal(x, 1);
    assert_string_equal(eddy_rpc_get_topic(f), "test.ev.one");
    eddy_future_reset(f);
    assert_int_equal(eddy_rpc_get_unpack(f, "{s:i}", "x", &x), 0);
    assert_int_equal(x, 2);
    assert_string_equal(eddy_rpc_get_topic(f), "test.ev.two");
    assert_int_equal(load(&fk->subscribe_prefix_ok), 1);
    /* destroying the subscription cancels it */
    eddy_future_destroy(f);

    p = eddy_event_publish(h, "test.ev.three", "{\"a\":1}");
    assert_non_null(p);
    assert_int_equal(eddy_rpc_get(p, NULL), 0);
    eddy_future_destroy(p);
    assert_int_equal(load(&fk->cancels_ok), 1);
    assert_int_equal(load(&fk->publish_ok), 1);
    assert_string_equal(fk->publish_body,
                        "{\"body\": {\"a\": 1}, \"topic\": \"test.ev.three\"}");

    p = eddy_event_publish(h, "test.ev.four", NULL);
    assert_int_equal(eddy_rpc_get(p, NULL), 0);
    eddy_future_destroy(p);
    assert_string_equal(fk->publish_body,
                        "{\"body\": {}, \"topic\": \"test.ev.four\"}");

    errno = 0;
    assert_null(eddy_event_publish(h, "test.ev", "[1]"));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_event_publish(h, NULL, NULL));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_event_subscribe(h, NULL));
    assert_int_equal(errno, EINVAL);
    eddy_close(h);
}

static void test_many(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t **f = calloc(MANY, sizeof(*f));
    json_int_t v;

    assert_non_null(f);
    for (int i = 0; i < MANY; i++) {
        f[i] = eddy_rpc_pack(h, "test.many", 0, 0, "{s:i}", "i", i);
        assert_non_null(f[i]);
    }
    /* answered in reverse order: each finds its own future */
    for (int i = 0; i < MANY; i++) {
        assert_int_equal(eddy_rpc_get_unpack(f[i], "{s:I}", "i", &v), 0);
        assert_int_equal(v, 2 * i);
        eddy_future_destroy(f[i]);
    }
    free(f);
    eddy_close(h);
}

static void test_close_pending(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct cbstate st = {0};
    eddy_future_t *f;

    /* left for eddy_close(): a stream, a plain RPC with a continuation and
     * timeout, a ready one queued for its continuation */
    assert_non_null(
        eddy_rpc(h, "test.never", 0, EDDY_RPC_STREAMING, NULL, NULL, 0));
    f = eddy_rpc(h, "test.never", 0, 0, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(f, 30, count_cb, &st), 0);
    f = eddy_rpc(h, "test.echo", 0, EDDY_RPC_NORESPONSE, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(f, -1, count_cb, &st), 0);
    eddy_close(h);
    assert_int_equal(st.calls, 0);
    fake_join(fk);
    /* eddy_close() cancels nothing remotely */
    assert_int_equal(load(&fk->cancels_ok) + load(&fk->cancels_bad), 0);
}

static void test_trace(void **state)
{
    struct fake *fk = *state;
    char path[] = "/tmp/test_lib.trace.XXXXXX";
    int tfd = mkstemp(path), saved = dup(2);
    eddy_error_t err;
    eddy_future_t *f;
    eddy_t *h;
    char buf[4096];
    ssize_t n;

    assert_true(tfd >= 0 && saved >= 0);
    fflush(stderr);
    dup2(tfd, 2);
    h = eddy_open(fk->uri, EDDY_OPEN_TRACE, &err);
    if (h) {
        f = eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 0);
        (void)eddy_rpc_get(f, NULL);
        eddy_future_destroy(f);
        eddy_close(h);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    n = pread(tfd, buf, sizeof(buf) - 1, 0);
    close(tfd);
    unlink(path);
    assert_non_null(h);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_non_null(strstr(buf, "test.echo"));
}

/* ---- gaps: close from callbacks, timeouts for poll loops, SIGPIPE ----- */

struct closest {
    eddy_t *h;
    int calls;
    int other_calls;
    eddy_future_t *pending; /* an unanswered RPC of the same handle */
};

static void close_cb(eddy_future_t *f, void *arg)
{
    struct closest *cs = arg;

    cs->calls++;
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    errno = 4321;
    eddy_close(cs->h); /* shuts down only: we are inside the loop */
    assert_int_equal(errno, 4321);
    /* our own future, the handle and the others are still valid */
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    errno = 0;
    assert_int_equal(eddy_rpc_get(cs->pending, NULL), -1);
    assert_int_equal(errno, ENOTCONN);
    errno = 0;
    assert_null(eddy_rpc(cs->h, "test.echo", 0, 0, NULL, NULL, 0));
    assert_int_equal(errno, ENOTCONN);
    eddy_close(cs->h); /* twice is harmless */
}

static void other_cb(eddy_future_t *f, void *arg)
{
    struct closest *cs = arg;

    cs->other_calls++;
}

/* 'how': 0 the caller's uv_run(), 1 eddy_dispatch(), 2 a wait. */
static void close_in_cb(struct fake *fk, int how)
{
    struct closest cs = {0};
    eddy_future_t *f, *g, *w = NULL;
    double deadline = now() + 10 * timeout_scale;

    cs.h = open_ok(fk);
    cs.pending = eddy_rpc(cs.h, "test.never", 0, 0, NULL, NULL, 0);
    assert_non_null(cs.pending);
    /* 'g' is ready too and queued behind 'f': it must not run after the
     * close, nor must the pending RPC's timeout */
    f = eddy_rpc(cs.h, "test.echo", 0, EDDY_RPC_NORESPONSE, NULL, NULL, 0);
    g = eddy_rpc(cs.h, "test.echo", 0, EDDY_RPC_NORESPONSE, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(f, -1, close_cb, &cs), 0);
    assert_int_equal(eddy_future_then(g, -1, other_cb, &cs), 0);
    assert_int_equal(eddy_future_then(cs.pending, 0.01, other_cb, &cs), 0);
    if (how == 0) {
        uv_run(eddy_get_loop(cs.h), UV_RUN_DEFAULT);
    } else if (how == 1) {
        while (cs.calls == 0 && now() < deadline)
            assert_int_equal(eddy_dispatch(cs.h), 0);
        assert_int_equal(eddy_dispatch(cs.h), 0);
    } else {
        w = eddy_rpc(cs.h, "test.never", 0, 0, NULL, NULL, 0);
        errno = 0;
        assert_int_equal(eddy_future_wait_for(w, 10 * timeout_scale), -1);
        assert_int_equal(errno, ENOTCONN);
        assert_non_null(strstr(eddy_future_error_string(w), "eddy_close"));
    }
    assert_int_equal(cs.calls, 1);
    assert_int_equal(cs.other_calls, 0);
    /* the broker saw the connection go */
    if (how == 0)
        fake_join(fk);
    /* a then() after the shutdown is accepted and never called */
    assert_int_equal(eddy_future_then(g, -1, other_cb, &cs), 0);
    assert_int_equal(eddy_dispatch(cs.h), 0);
    assert_int_equal(cs.other_calls, 0);
    assert_int_equal(eddy_get_timeout(cs.h), -1);
    eddy_future_destroy(w);
    eddy_future_destroy(f);
    eddy_close(cs.h); /* frees g and the pending RPC */
}

static void test_close_in_cb(void **state)
{
    struct fake *fk = *state;

    close_in_cb(fk, 0);
    fake_teardown(state);
    *state = fk = fake_start(GREET_OK);
    close_in_cb(fk, 1);
    fake_teardown(state);
    *state = fk = fake_start(GREET_OK);
    close_in_cb(fk, 2);
}

static void test_get_timeout(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct cbstate st = {0}, st2 = {0};
    eddy_future_t *f, *g;
    int fd = eddy_get_fd(h), polls = 0;
    double t0, deadline = now() + 10 * timeout_scale;
    int ms;

    errno = 0;
    assert_int_equal(eddy_get_timeout(NULL), -1);
    assert_int_equal(errno, EINVAL);
    /* nothing to wait for: block until readable */
    assert_int_equal(eddy_get_timeout(h), -1);
    f = eddy_rpc(h, "test.never", 0, 0, NULL, NULL, 0);
    /* (the write's completion may be due: 0 until dispatched) */
    ms = eddy_get_timeout(h);
    assert_true(ms == 0 || ms == -1);
    assert_int_equal(eddy_dispatch(h), 0);
    assert_int_equal(eddy_get_timeout(h), -1);
    /* a continuation timeout bounds the wait; the fd stays quiet */
    t0 = now();
    assert_int_equal(eddy_future_then(f, 0.2, timeout_cb, &st), 0);
    ms = eddy_get_timeout(h);
    assert_true(ms > 100 && ms <= 200);
    usleep(50000);
    /* measured from now, not from the last loop run */
    ms = eddy_get_timeout(h);
    assert_true(ms >= 0 && ms <= 160);
    while (st.calls == 0 && now() < deadline) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ms = eddy_get_timeout(h);
        assert_true(ms >= 0);
        (void)poll(&pfd, 1, ms);
        assert_int_equal(eddy_dispatch(h), 0);
        polls++;
    }
    assert_int_equal(st.calls, 1);
    assert_int_equal(st.last_errno, ETIMEDOUT);
    assert_true(now() - t0 >= 0.19);
    assert_true(polls < 50); /* waited, did not spin */
    assert_int_equal(eddy_get_timeout(h), -1);
    eddy_future_destroy(f);

    /* a due continuation: do not block at all */
    g = eddy_rpc(h, "test.echo", 0, EDDY_RPC_NORESPONSE, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(g, -1, count_cb, &st2), 0);
    assert_int_equal(eddy_get_timeout(h), 0);
    assert_int_equal(eddy_dispatch(h), 0);
    assert_int_equal(st2.calls, 1);
    eddy_future_destroy(g);
    eddy_close(h);
}

static void test_timeout_stream(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct cbstate st = {0};
    eddy_future_t *f, *e;

    /* a timed-out stream is cancelled and listens no more */
    f = eddy_rpc(h, "test.silent_stream", 0, EDDY_RPC_STREAMING, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(f, 0.05, timeout_cb, &st), 0);
    uv_run(eddy_get_loop(h), UV_RUN_DEFAULT);
    assert_int_equal(st.calls, 1);
    assert_int_equal(st.last_errno, ETIMEDOUT);
    /* a round trip: the broker has seen the cancel and sent the EOS */
    e = eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 0);
    assert_int_equal(eddy_rpc_get(e, NULL), 0);
    eddy_future_destroy(e);
    assert_int_equal(load(&fk->cancels_ok), 1);
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ETIMEDOUT);
    assert_null(eddy_rpc_get_topic(f));
    assert_int_equal(eddy_rpc_cancel(f), 0); /* over: nothing to cancel */
    eddy_future_destroy(f);                  /* no second cancel */
    eddy_close(h);
    fake_join(fk);
    assert_int_equal(load(&fk->cancels_ok), 1);
    assert_int_equal(load(&fk->cancels_bad), 0);
}

static void test_then_again(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct cbstate st = {0}, st2 = {0};
    eddy_future_t *f;

    f = eddy_rpc(h, "test.echo", 0, 0, NULL, NULL, 0);
    assert_int_equal(eddy_future_then(f, -1, count_cb, &st), 0);
    uv_run(eddy_get_loop(h), UV_RUN_DEFAULT);
    assert_int_equal(st.calls, 1);
    /* a new then() on a ready future is called once, the old one no more */
    assert_int_equal(eddy_future_then(f, -1, count_cb, &st2), 0);
    uv_run(eddy_get_loop(h), UV_RUN_DEFAULT);
    uv_run(eddy_get_loop(h), UV_RUN_NOWAIT);
    assert_int_equal(st.calls, 1);
    assert_int_equal(st2.calls, 1);
    /* the only response reset away: end of stream */
    eddy_future_reset(f);
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ENODATA);
    eddy_future_destroy(f);
    eddy_close(h);
}

struct reent {
    eddy_t *h;
    eddy_future_t *other;
    int wait_errno;
    int dispatch_errno;
    int calls;
};

static void reent_timer_cb(uv_timer_t *t)
{
    struct reent *r = t->data;

    r->calls++;
    errno = 0;
    if (eddy_future_wait_for(r->other, 1) < 0)
        r->wait_errno = errno;
    errno = 0;
    if (eddy_dispatch(r->h) < 0)
        r->dispatch_errno = errno;
}

/* A libuv callback of the caller's, run by one of our waits, must not be
 * able to reenter uv_run(). */
static void test_reentry(void **state)
{
    struct fake *fk = *state;
    struct reent r = {0};
    uv_timer_t timer;
    eddy_future_t *f;

    r.h = open_ok(fk);
    r.other = eddy_rpc(r.h, "test.never", 0, 0, NULL, NULL, 0);
    f = eddy_rpc(r.h, "test.never", 0, 0, NULL, NULL, 0);
    assert_int_equal(uv_timer_init(eddy_get_loop(r.h), &timer), 0);
    timer.data = &r;
    assert_int_equal(uv_timer_start(&timer, reent_timer_cb, 10, 0), 0);
    errno = 0;
    assert_int_equal(eddy_future_wait_for(f, 0.3), -1);
    assert_int_equal(errno, ETIMEDOUT);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.wait_errno, EDEADLK);
    assert_int_equal(r.dispatch_errno, EDEADLK);
    eddy_future_destroy(f);
    eddy_future_destroy(r.other);
    eddy_close(r.h); /* closes our timer */
}

static void test_sigpipe(void **state)
{
    struct fake *fk = *state;
    struct sigaction sa;
    eddy_t *h;

    signal(SIGPIPE, SIG_DFL);
    h = eddy_open(fk->uri, EDDY_OPEN_KEEP_SIGPIPE, NULL);
    assert_non_null(h);
    assert_int_equal(sigaction(SIGPIPE, NULL, &sa), 0);
    assert_true(sa.sa_handler == SIG_DFL);
    eddy_close(h);
    fake_teardown(state);
    *state = fk = fake_start(GREET_OK);
    h = open_ok(fk);
    assert_int_equal(sigaction(SIGPIPE, NULL, &sa), 0);
    assert_true(sa.sa_handler == SIG_IGN);
    eddy_close(h);
    signal(SIGPIPE, SIG_IGN);
}

int main(void)
{
    const char *s = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_uri),
        cmocka_unit_test(test_connrefused),
        cmocka_unit_test_setup_teardown(test_eacces, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_open_ok, setup_ok, fake_teardown),
        cmocka_unit_test_teardown(test_refused, fake_teardown),
        cmocka_unit_test_teardown(test_no_greeting, fake_teardown),
        cmocka_unit_test_teardown(test_garbage, fake_teardown),
        cmocka_unit_test_setup_teardown(test_echo, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_stream, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_error, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_hangup, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_then, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_then_stream, setup_ok,
                                        fake_teardown),
        cmocka_unit_test_setup_teardown(test_timeout, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_edeadlk, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_fd_dispatch, setup_ok,
                                        fake_teardown),
        cmocka_unit_test_setup_teardown(test_cancel, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_events, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_many, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_close_pending, setup_ok,
                                        fake_teardown),
        cmocka_unit_test_setup_teardown(test_trace, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_close_in_cb, setup_ok,
                                        fake_teardown),
        cmocka_unit_test_setup_teardown(test_get_timeout, setup_ok,
                                        fake_teardown),
        cmocka_unit_test_setup_teardown(test_timeout_stream, setup_ok,
                                        fake_teardown),
        cmocka_unit_test_setup_teardown(test_then_again, setup_ok,
                                        fake_teardown),
        cmocka_unit_test_setup_teardown(test_reentry, setup_ok, fake_teardown),
        cmocka_unit_test_setup_teardown(test_sigpipe, setup_ok, fake_teardown),
    };

    if (s && atoi(s) > 0)
        timeout_scale = atoi(s);
    /* the fake broker may be gone when the library writes */
    signal(SIGPIPE, SIG_IGN);
    alarm((unsigned)(60 * timeout_scale));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
