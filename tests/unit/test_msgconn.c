/* test_msgconn.c - message connections over a socketpair: traffic both
 * ways, protocol errors, peer close, destroy from inside callbacks. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <uv.h>

#include "src/common/msgconn.h"

#define NMSGS 200
#define BIG_PAYLOAD (4u << 20)

struct side {
    msgconn_t *c;
    int received;
    int closed;
    int close_errnum;
    char close_reason[320];
    int destroy_in_recv; /* destroy the connection on this message count */
    int destroy_in_close;
    struct side *peer;
    int expect; /* messages to receive before destroying */
};

static uv_loop_t loop;

static msgconn_t *wrap_fd(int fd,
                          msgconn_recv_f rcb,
                          msgconn_close_f ccb,
                          void *arg)
{
    uv_pipe_t *p = malloc(sizeof(*p));

    assert_non_null(p);
    assert_int_equal(uv_pipe_init(&loop, p, 0), 0);
    assert_int_equal(uv_pipe_open(p, fd), 0);
    msgconn_t *c = msgconn_create(&loop, (uv_stream_t *)p, rcb, ccb, arg);
    assert_non_null(c);
    return c;
}

static void make_pair(int fds[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
}

static void run_loop(void)
{
    uv_run(&loop, UV_RUN_DEFAULT);
}

static int setup(void **state)
{
    return uv_loop_init(&loop);
}

static int teardown(void **state)
{
    /* Everything closed and freed: the loop has nothing left. */
    uv_run(&loop, UV_RUN_DEFAULT);
    return uv_loop_close(&loop) == 0 ? 0 : -1;
}

static msg_t *numbered_msg(int i)
{
    size_t plen = i == NMSGS / 2 ? BIG_PAYLOAD : (size_t)(i % 5) * 100;
    uint8_t *payload = malloc(plen ? plen : 1);

    assert_non_null(payload);
    for (size_t k = 0; k < plen; k++)
        payload[k] = (uint8_t)(k + (size_t)i);
    msg_t *m = msg_create(MSG_REQUEST, "test.seq", json_pack("{s:i}", "i", i),
                          payload, plen);
    assert_non_null(m);
    m->matchtag = (uint32_t)i;
    free(payload);
    return m;
}

static void check_numbered(const msg_t *m, int i)
{
    msg_t *want = numbered_msg(i);

    assert_int_equal(m->matchtag, (uint32_t)i);
    assert_string_equal(m->topic, "test.seq");
    assert_true(json_equal(m->body, want->body));
    assert_int_equal(m->payload_len, want->payload_len);
    if (m->payload_len)
        assert_memory_equal(m->payload, want->payload, m->payload_len);
    msg_decref(want);
}

static void exchange_recv(msgconn_t *c, msg_t *msg, void *arg)
{
    struct side *s = arg;

    assert_ptr_equal(c, s->c);
    check_numbered(msg, s->received);
    s->received++;
    msg_decref(msg);
    /* The last side to finish tears both down. */
    if (s->received == s->expect && s->peer->received == s->peer->expect) {
        msgconn_destroy(s->c);
        msgconn_destroy(s->peer->c);
    }
}

static void record_close(msgconn_t *c,
                         int errnum,
                         const char *reason,
                         void *arg)
{
    struct side *s = arg;

    assert_ptr_equal(c, s->c);
    s->closed++;
    s->close_errnum = errnum;
    snprintf(s->close_reason, sizeof(s->close_reason), "%s", reason);
    if (s->destroy_in_close)
        msgconn_destroy(c);
}

static void test_exchange(void **state)
{
    int fds[2];
    struct side a = {.expect = NMSGS}, b = {.expect = NMSGS};

    make_pair(fds);
    a.peer = &b;
    b.peer = &a;
    a.c = wrap_fd(fds[0], exchange_recv, record_close, &a);
    b.c = wrap_fd(fds[1], exchange_recv, record_close, &b);
    assert_int_equal(msgconn_fd(a.c), fds[0]);
    assert_int_equal(msgconn_queued(a.c), 0);

    for (int i = 0; i < NMSGS; i++) {
        msg_t *m = numbered_msg(i);
        assert_int_equal(msgconn_send(a.c, m), 0);
        assert_int_equal(msgconn_send(b.c, m), 0);
        msg_decref(m);
    }
    /* The 4 MiB frame cannot fit in a socket buffer yet. */
    assert_true(msgconn_queued(a.c) > 0);
    run_loop();
    assert_int_equal(a.received, NMSGS);
    assert_int_equal(b.received, NMSGS);
    assert_int_equal(a.closed, 0);
    assert_int_equal(b.closed, 0);
}

static void test_garbage(void **state)
{
    int fds[2];
    struct side s = {.destroy_in_close = 1};
    const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";

    make_pair(fds);
    s.c = wrap_fd(fds[0], exchange_recv, record_close, &s);
    assert_int_equal(write(fds[1], junk, sizeof(junk) - 1),
                     (ssize_t)sizeof(junk) - 1);
    run_loop();
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.close_errnum, EPROTO);
    assert_non_null(strstr(s.close_reason, "protocol error: "));
    assert_non_null(strstr(s.close_reason, "magic"));
    assert_int_equal(s.received, 0);
    close(fds[1]);
}

static void test_max_frame(void **state)
{
    int fds[2];
    struct side s = {.destroy_in_close = 1};
    uint8_t payload[1000] = {0};
    void *buf;
    size_t len;

    make_pair(fds);
    s.c = wrap_fd(fds[0], exchange_recv, record_close, &s);
    msgconn_set_max_frame(s.c, 256);
    msg_t *m = msg_create(MSG_REQUEST, "x", NULL, payload, sizeof(payload));
    assert_int_equal(msg_encode(m, &buf, &len), 0);
    /* Only the header: the limit applies before the body is sent. */
    assert_int_equal(write(fds[1], buf, MSG_HEADER_SIZE), MSG_HEADER_SIZE);
    run_loop();
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.close_errnum, EMSGSIZE);
    free(buf);
    msg_decref(m);
    close(fds[1]);
}

static void test_peer_close(void **state)
{
    int fds[2];
    struct side s = {0};

    make_pair(fds);
    s.c = wrap_fd(fds[0], exchange_recv, record_close, &s);
    close(fds[1]);
    /* Without a destroy the stream stays open but idle: run once. */
    uv_run(&loop, UV_RUN_ONCE);
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.close_errnum, ECONNRESET);
    assert_string_equal(s.close_reason, "connection closed by peer");

    msg_t *m = msg_create(MSG_EVENT, "late", NULL, NULL, 0);
    errno = 0;
    assert_int_equal(msgconn_send(s.c, m), -1);
    assert_int_equal(errno, ENOTCONN);
    msg_decref(m);

    uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(s.closed, 1); /* exactly once */
    msgconn_destroy(s.c);
    run_loop();
    assert_int_equal(s.closed, 1);
}

static void count_recv(msgconn_t *c, msg_t *msg, void *arg)
{
    struct side *s = arg;

    s->received++;
    msg_decref(msg);
}

/* The peer hangs up after 'cut' bytes of a frame (cut < 0: that many
 * bytes short of its end): a distinct protocol error that says how far
 * it got. */
static void check_mid_frame_eof(long cut)
{
    int fds[2];
    struct side s = {.destroy_in_close = 1};
    uint8_t payload[100] = {0};
    msg_t *first = numbered_msg(1);
    msg_t *m =
        msg_create(MSG_REQUEST, "svc.topic", NULL, payload, sizeof(payload));
    void *buf, *buf0;
    size_t len, len0, n;
    char want[128];

    assert_non_null(m);
    assert_int_equal(msg_encode(first, &buf0, &len0), 0);
    assert_int_equal(msg_encode(m, &buf, &len), 0);
    n = cut < 0 ? len - (size_t)-cut : (size_t)cut;
    assert_true(n > 0 && n < len);
    if (n < MSG_HEADER_SIZE)
        snprintf(want, sizeof(want),
                 "connection closed mid-frame (%zu of 28 header bytes "
                 "received)",
                 n);
    else
        snprintf(want, sizeof(want),
                 "connection closed mid-frame (%zu of %zu bytes received)", n,
                 len);
    make_pair(fds);
    s.c = wrap_fd(fds[0], count_recv, record_close, &s);
    /* a whole frame first: it is delivered, the half one is not */
    assert_int_equal(write(fds[1], buf0, len0), (ssize_t)len0);
    assert_int_equal(write(fds[1], buf, n), (ssize_t)n);
    close(fds[1]);
    run_loop();
    assert_int_equal(s.received, 1);
    assert_int_equal(s.closed, 1);
    assert_int_equal(s.close_errnum, EPROTO);
    assert_string_equal(s.close_reason, want);
    free(buf);
    free(buf0);
    msg_decref(m);
    msg_decref(first);
}

static void test_eof_mid_frame(void **state)
{
    check_mid_frame_eof(10);
    check_mid_frame_eof(1);
    check_mid_frame_eof(MSG_HEADER_SIZE);
    check_mid_frame_eof(-60); /* in the payload */
    check_mid_frame_eof(-1);
}

static void destroy_recv(msgconn_t *c, msg_t *msg, void *arg)
{
    struct side *s = arg;

    s->received++;
    msg_decref(msg);
    if (s->received == s->destroy_in_recv) {
        msgconn_destroy(c);
        msgconn_destroy(c); /* twice is harmless */
    }
}

static void test_destroy_in_recv(void **state)
{
    int fds[2];
    struct side s = {.destroy_in_recv = 2};
    uint8_t *stream = NULL;
    size_t total = 0;

    make_pair(fds);
    s.c = wrap_fd(fds[0], destroy_recv, record_close, &s);
    /* Six frames in one write, then garbage, so all arrive in one read:
     * after the destroy neither the rest nor the error may be reported. */
    for (int i = 0; i < 6; i++) {
        msg_t *m = numbered_msg(i + 1);
        void *buf;
        size_t len;
        assert_int_equal(msg_encode(m, &buf, &len), 0);
        stream = realloc(stream, total + len + 8);
        assert_non_null(stream);
        memcpy(stream + total, buf, len);
        total += len;
        free(buf);
        msg_decref(m);
    }
    memset(stream + total, 'G', 8);
    total += 8;
    assert_int_equal(write(fds[1], stream, total), (ssize_t)total);
    free(stream);

    /* Also leave a big write pending, cancelled by the destroy. */
    msg_t *big = numbered_msg(NMSGS / 2);
    assert_int_equal(msgconn_send(s.c, big), 0);
    msg_decref(big);
    assert_true(msgconn_queued(s.c) > 0);

    run_loop();
    assert_int_equal(s.received, 2);
    assert_int_equal(s.closed, 0);
    close(fds[1]);
}

static void close_destroys_recv(msgconn_t *c, msg_t *msg, void *arg)
{
    msg_decref(msg);
}

static void test_destroy_in_close(void **state)
{
    int fds[2];
    struct side s = {.destroy_in_close = 1};

    make_pair(fds);
    s.c = wrap_fd(fds[0], close_destroys_recv, record_close, &s);
    /* Writes pending at the time of the close callback. */
    msg_t *big = numbered_msg(NMSGS / 2);
    assert_int_equal(msgconn_send(s.c, big), 0);
    assert_int_equal(msgconn_send(s.c, big), 0);
    msg_decref(big);
    shutdown(fds[1], SHUT_WR);
    run_loop();
    assert_int_equal(s.closed, 1);
    close(fds[1]);
}

static void test_trace_and_accessors(void **state)
{
    int fds[2];
    struct side s = {.destroy_in_recv = 1};
    char path[] = "/tmp/test_msgconn.XXXXXX";
    int tfd = mkstemp(path);
    int saved = dup(STDERR_FILENO);
    char out[1024] = "";

    assert_true(tfd >= 0);
    assert_true(saved >= 0);
    unlink(path);
    make_pair(fds);
    s.c = wrap_fd(fds[0], destroy_recv, record_close, &s);
    struct side ts = {0};
    msgconn_t *t = ts.c = wrap_fd(fds[1], destroy_recv, record_close, &ts);

    assert_string_equal(msgconn_name(s.c), "?");
    msgconn_set_name(s.c, "uid 1000 pid 42");
    assert_string_equal(msgconn_name(s.c), "uid 1000 pid 42");
    assert_ptr_equal(msgconn_get_arg(s.c), &s);
    msgconn_set_arg(t, NULL);
    assert_null(msgconn_get_arg(t));
    msgconn_set_arg(t, &ts);

    msgconn_set_trace(t, "T");
    msgconn_set_trace(s.c, "S");
    msg_t *m = msg_create(MSG_EVENT, "hello.world", NULL, "ab", 2);
    fflush(stderr);
    dup2(tfd, STDERR_FILENO);
    assert_int_equal(msgconn_send(t, m), 0);
    while (s.received < 1)
        uv_run(&loop, UV_RUN_ONCE);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    msg_decref(m);
    msgconn_destroy(t);
    run_loop();

    assert_true(pread(tfd, out, sizeof(out) - 1, 0) > 0);
    close(tfd);
    assert_non_null(strstr(out, "T send event topic=hello.world tag=0"));
    assert_non_null(strstr(out, "S recv event topic=hello.world tag=0"));
    assert_non_null(strstr(out, "payload=2"));
}

static void test_create_invalid(void **state)
{
    errno = 0;
    assert_null(msgconn_create(&loop, NULL, NULL, NULL, NULL));
    assert_int_equal(errno, EINVAL);

    /* A stream that cannot read: the stream is still closed and freed. */
    uv_pipe_t *p = malloc(sizeof(*p));
    assert_non_null(p);
    assert_int_equal(uv_pipe_init(&loop, p, 0), 0);
    errno = 0;
    assert_null(msgconn_create(&loop, (uv_stream_t *)p, NULL, NULL, NULL));
    assert_int_not_equal(errno, 0);
    run_loop();

    msgconn_destroy(NULL);
    assert_int_equal(msgconn_fd(NULL), -1);
}

int main(void)
{
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_exchange, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_max_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eof_mid_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_in_recv, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_in_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trace_and_accessors, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_create_invalid, setup, teardown),
    };

    /* A hung loop fails the test instead of blocking the suite. */
    alarm(60 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
