/* test_exec.c - the broker's exec service, driven through a fake broker.
 *
 * The service only talks to the broker through src/broker/service.h, so
 * this file implements that interface over a private libuv loop and
 * records every response; requests are handed to the service's handler
 * table as the broker would.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>
#include <cmocka.h>

#include "src/broker/service.h"

extern const struct service_def exec_service;

/* --- fake broker -------------------------------------------------------- */

struct resp {
    json_t *body;
    char *payload;
    size_t len;
    int flags;
    int errnum;
    char errstr[256];
};

struct broker {
    uv_loop_t loop;
    uint32_t rank;
    int holds;    /* broker_shutdown_hold() calls not released yet */
    int releases; /* broker_shutdown_release() calls */
    /* requests that must have ended when the last hold is released */
    broker_req_t *must_end[4];
};

struct broker_req {
    int refcount;
    msg_t msg;
    uint64_t origin;
    struct resp *resp;
    int nresp;
    bool ended; /* EOS, error, or the one response of a plain request */
};

static struct broker fake;
static void *ctx;

const msg_t *broker_req_msg(const broker_req_t *req)
{
    return &req->msg;
}

broker_req_t *broker_req_incref(broker_req_t *req)
{
    req->refcount++;
    return req;
}

void broker_req_decref(broker_req_t *req)
{
    if (req && --req->refcount == 0) {
        for (int i = 0; i < req->nresp; i++) {
            json_decref(req->resp[i].body);
            free(req->resp[i].payload);
        }
        free(req->resp);
        json_decref(req->msg.body);
        free(req->msg.payload);
        free(req);
    }
}

uint64_t broker_req_origin(const broker_req_t *req)
{
    return req->origin;
}

uint32_t broker_req_userid(const broker_req_t *req)
{
    return (uint32_t)getuid();
}

bool broker_req_is_cancel(const broker_req_t *req)
{
    return req->msg.flags & MSG_FLAG_CANCEL;
}

bool broker_req_is_streaming(const broker_req_t *req)
{
    return req->msg.flags & MSG_FLAG_STREAMING;
}

bool broker_req_same(const broker_req_t *a, const broker_req_t *b)
{
    return a->origin == b->origin && a->msg.matchtag == b->msg.matchtag;
}

static struct resp *add_resp(broker_req_t *req)
{
    struct resp *r;

    assert_false(req->ended);
    r = realloc(req->resp, (size_t)(req->nresp + 1) * sizeof(*r));
    assert_non_null(r);
    req->resp = r;
    r = &req->resp[req->nresp++];
    memset(r, 0, sizeof(*r));
    return r;
}

int broker_respond(broker_req_t *req,
                   json_t *body,
                   const void *payload,
                   size_t payload_len,
                   int flags)
{
    struct resp *r = add_resp(req);

    r->body = body;
    r->flags = flags;
    if (payload_len) {
        r->payload = malloc(payload_len + 1);
        memcpy(r->payload, payload, payload_len);
        r->payload[payload_len] = '\0';
        r->len = payload_len;
    }
    if ((flags & MSG_FLAG_EOS) || !broker_req_is_streaming(req))
        req->ended = true;
    return 0;
}

int broker_respond_error(broker_req_t *req, int errnum, const char *fmt, ...)
{
    struct resp *r = add_resp(req);
    va_list ap;

    r->errnum = errnum;
    if (fmt) {
        va_start(ap, fmt);
        vsnprintf(r->errstr, sizeof(r->errstr), fmt, ap);
        va_end(ap);
    }
    req->ended = true;
    return 0;
}

uint32_t broker_rank(const broker_t *b)
{
    return b->rank;
}

uint32_t broker_size(const broker_t *b)
{
    return 8;
}

const char *broker_hostname(const broker_t *b)
{
    return "testhost";
}

struct uv_loop_s *broker_loop(broker_t *b)
{
    return &b->loop;
}

const char *broker_local_uri(const broker_t *b)
{
    return "local:///tmp/fake/local-3";
}

void broker_shutdown_hold(broker_t *b)
{
    b->holds++;
}

void broker_shutdown_release(broker_t *b)
{
    assert_true(b->holds > 0);
    b->holds--;
    b->releases++;
    /* the hold covers the exit responses: they are all out by now */
    for (size_t i = 0; i < sizeof(b->must_end) / sizeof(b->must_end[0]); i++)
        assert_true(!b->must_end[i] || b->must_end[i]->ended);
}

void broker_log(broker_t *b, int level, const char *fmt, ...)
{
    if (getenv("TEST_EXEC_VERBOSE")) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
}

/* --- helpers ------------------------------------------------------------ */

static uint32_t next_tag;

/* Send a request as the broker would; the caller holds the returned
 * reference and drops it with broker_req_decref(). */
static broker_req_t *send_req(const char *topic,
                              int flags,
                              uint64_t origin,
                              uint32_t tag,
                              const char *json,
                              const void *payload,
                              size_t len)
{
    broker_req_t *req = calloc(1, sizeof(*req));
    const struct service_handler *h;

    assert_non_null(req);
    req->refcount = 2; /* caller's, and the broker's during dispatch */
    req->origin = origin;
    req->msg.refcount = 1;
    req->msg.type = MSG_REQUEST;
    req->msg.flags = (uint8_t)flags;
    req->msg.matchtag = tag ? tag : ++next_tag;
    req->msg.topic = (char *)topic;
    if (json) {
        json_error_t e;
        req->msg.body = json_loads(json, 0, &e);
        assert_non_null(req->msg.body);
    }
    if (len) {
        req->msg.payload = malloc(len);
        memcpy(req->msg.payload, payload, len);
        req->msg.payload_len = len;
    }
    for (h = exec_service.handlers; h->topic; h++)
        if (!strcmp(h->topic, topic))
            break;
    assert_non_null(h->topic);
    h->fn(req, ctx);
    broker_req_decref(req);
    return req;
}

static void on_timeout(uv_timer_t *t)
{
    bool *expired = t->data;
    *expired = true;
}

/* Run the loop until the request's stream ends (or fail after 10 s,
 * scaled by EDDY_TEST_TIMEOUT_SCALE). */
static void wait_ended(broker_req_t *req)
{
    uv_timer_t timer;
    bool expired = false;
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    uv_timer_init(&fake.loop, &timer);
    timer.data = &expired;
    uv_timer_start(&timer, on_timeout,
                   10000 * (uint64_t)(scale ? atoi(scale) : 1), 0);
    while (!req->ended && !expired)
        uv_run(&fake.loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&timer, NULL);
    uv_run(&fake.loop, UV_RUN_NOWAIT);
    assert_false(expired);
}

/* Concatenated output of one stream. */
static void collect(broker_req_t *req,
                    const char *stream,
                    char *buf,
                    size_t size)
{
    size_t n = 0;

    buf[0] = '\0';
    for (int i = 0; i < req->nresp; i++) {
        struct resp *r = &req->resp[i];
        const char *type = NULL, *s = NULL;
        json_unpack(r->body, "{s:s s?s}", "type", &type, "stream", &s);
        if (type && !strcmp(type, "output") && !strcmp(s, stream)) {
            assert_true(n + r->len < size);
            memcpy(buf + n, r->payload, r->len);
            n += r->len;
            buf[n] = '\0';
        }
    }
}

static struct resp *last(broker_req_t *req)
{
    assert_true(req->nresp > 0);
    return &req->resp[req->nresp - 1];
}

static int exit_status(broker_req_t *req)
{
    struct resp *r = last(req);
    const char *type;
    int status;

    assert_int_equal(r->errnum, 0);
    assert_true(r->flags & MSG_FLAG_EOS);
    assert_int_equal(
        json_unpack(r->body, "{s:s s:i}", "type", &type, "status", &status), 0);
    assert_string_equal(type, "exit");
    return status;
}

static uint64_t started_id(broker_req_t *req)
{
    const char *type;
    json_int_t id;
    int pid;

    assert_true(req->nresp > 0);
    assert_int_equal(json_unpack(req->resp[0].body, "{s:s s:i s:I}", "type",
                                 &type, "pid", &pid, "id", &id),
                     0);
    assert_string_equal(type, "started");
    assert_true(pid > 0);
    return (uint64_t)id;
}

static broker_req_t *run(const char *json)
{
    return send_req("exec.run", MSG_FLAG_STREAMING, 1, 0, json, NULL, 0);
}

static int setup(void **state)
{
    assert_int_equal(uv_loop_init(&fake.loop), 0);
    fake.rank = 3;
    fake.holds = fake.releases = 0;
    memset(fake.must_end, 0, sizeof(fake.must_end));
    assert_int_equal(exec_service.init(&fake, &ctx), 0);
    return 0;
}

static int teardown(void **state)
{
    exec_service.shutdown(ctx);
    exec_service.destroy(ctx);
    ctx = NULL;
    uv_run(&fake.loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&fake.loop), 0);
    return 0;
}

/* --- tests -------------------------------------------------------------- */

static void test_echo(void **state)
{
    broker_req_t *req = run("{\"cmd\":[\"sh\",\"-c\","
                            "\"echo out; echo err >&2\"]}");
    char buf[256];

    wait_ended(req);
    started_id(req);
    assert_int_equal(exit_status(req), 0);
    collect(req, "stdout", buf, sizeof(buf));
    assert_string_equal(buf, "out\n");
    collect(req, "stderr", buf, sizeof(buf));
    assert_string_equal(buf, "err\n");
    assert_int_equal(
        json_integer_value(json_object_get(last(req)->body, "exitcode")), 0);
    assert_true(json_is_null(json_object_get(last(req)->body, "signal")));
    broker_req_decref(req);
}

static void test_exit_code(void **state)
{
    broker_req_t *req = run("{\"cmd\":[\"sh\",\"-c\",\"exit 3\"]}");

    wait_ended(req);
    assert_int_equal(exit_status(req), 3);
    broker_req_decref(req);
}

static void test_ids_increase(void **state)
{
    broker_req_t *a = run("{\"cmd\":[\"true\"]}");
    broker_req_t *b = run("{\"cmd\":[\"true\"]}");

    wait_ended(a);
    wait_ended(b);
    assert_true(started_id(b) > started_id(a));
    broker_req_decref(a);
    broker_req_decref(b);
}

static void test_large_output_chunks(void **state)
{
    /* 300 kB of output: every chunk is at most 64 KiB, all bytes arrive */
    broker_req_t *req = run("{\"cmd\":[\"head\",\"-c\",\"300000\","
                            "\"/dev/zero\"]}");
    size_t total = 0;

    wait_ended(req);
    assert_int_equal(exit_status(req), 0);
    for (int i = 1; i < req->nresp - 1; i++) {
        assert_true(req->resp[i].len <= 64 * 1024);
        total += req->resp[i].len;
    }
    assert_int_equal(total, 300000);
    broker_req_decref(req);
}

static void test_enoent(void **state)
{
    broker_req_t *req = run("{\"cmd\":[\"nosuch-eddy-prog\"]}");

    assert_true(req->ended);
    assert_int_equal(req->nresp, 1);
    assert_int_equal(req->resp[0].errnum, ENOENT);
    assert_string_equal(req->resp[0].errstr,
                        "rank 3: cannot run 'nosuch-eddy-prog': "
                        "No such file or directory");
    broker_req_decref(req);
}

static void test_bad_cwd(void **state)
{
    broker_req_t *req = run("{\"cmd\":[\"true\"],\"cwd\":\"/nonexistent\"}");

    assert_true(req->ended);
    assert_int_equal(req->resp[0].errnum, ENOENT);
    assert_non_null(strstr(req->resp[0].errstr, "rank 3: cannot run 'true'"));
    broker_req_decref(req);
}

static void test_eacces(void **state)
{
    broker_req_t *req = run("{\"cmd\":[\"/etc/passwd\"]}");

    assert_true(req->ended);
    assert_int_equal(req->resp[0].errnum, EACCES);
    broker_req_decref(req);
}

static void expect_einval(const char *json, const char *culprit)
{
    broker_req_t *req = run(json);

    assert_true(req->ended);
    assert_int_equal(req->nresp, 1);
    assert_int_equal(req->resp[0].errnum, EINVAL);
    if (!strstr(req->resp[0].errstr, culprit))
        fail_msg("'%s' does not name '%s'", req->resp[0].errstr, culprit);
    broker_req_decref(req);
}

static void test_invalid(void **state)
{
    expect_einval(NULL, "'cmd'");
    expect_einval("{\"cmd\":[]}", "'cmd' must be a non-empty array");
    expect_einval("{\"cmd\":\"ls\"}", "'cmd'");
    expect_einval("{\"cmd\":[\"ls\",1]}", "'cmd'");
    expect_einval("{\"cmd\":[\"ls\"],\"cwd\":5}", "'cwd'");
    expect_einval("{\"cmd\":[\"ls\"],\"env\":[]}", "'env'");
    expect_einval("{\"cmd\":[\"ls\"],\"env\":{\"A\":1}}", "'env'");
    expect_einval("{\"cmd\":[\"ls\"],\"env\":{\"A=B\":\"x\"}}", "'env'");
    expect_einval("{\"cmd\":[\"ls\"],\"stdin\":1}", "'stdin'");
    expect_einval("{\"cmd\":[\"ls\"],\"bogus\":1}", "'bogus'");
}

static void test_not_streaming(void **state)
{
    broker_req_t *req =
        send_req("exec.run", 0, 1, 0, "{\"cmd\":[\"true\"]}", NULL, 0);
    assert_int_equal(req->resp[0].errnum, EPROTO);
    broker_req_decref(req);
}

static void test_env_cwd(void **state)
{
    broker_req_t *req;
    char buf[1024];

    setenv("TEST_EXEC_UNSETME", "x", 1);
    req = run("{\"cmd\":[\"sh\",\"-c\",\"echo $EDDY_URI $EDDY_BROKER_RANK "
              "$FOO ${TEST_EXEC_UNSETME-unset} $(pwd)\"],"
              "\"env\":{\"FOO\":\"bar\",\"TEST_EXEC_UNSETME\":null},"
              "\"cwd\":\"/\"}");
    unsetenv("TEST_EXEC_UNSETME");
    wait_ended(req);
    assert_int_equal(exit_status(req), 0);
    collect(req, "stdout", buf, sizeof(buf));
    assert_string_equal(buf, "local:///tmp/fake/local-3 3 bar unset /\n");
    broker_req_decref(req);
}

static void test_no_stdin_is_devnull(void **state)
{
    broker_req_t *req = run("{\"cmd\":[\"wc\",\"-c\"]}");
    char buf[64];
    broker_req_t *w;

    w = send_req("exec.write", 0, 1, 0, "{\"id\":999}", "x", 1);
    assert_int_equal(w->resp[0].errnum, ESRCH);
    assert_string_equal(w->resp[0].errstr, "rank 3: no process with id 999");
    broker_req_decref(w);
    w = send_req("exec.write", 0, 1, 0, "{\"id\":1}", "x", 1);
    broker_req_decref(w); /* id 1 is long gone, or stdin-less */

    wait_ended(req);
    collect(req, "stdout", buf, sizeof(buf));
    assert_string_equal(buf, "0\n");
    broker_req_decref(req);
}

static void test_stdin(void **state)
{
    broker_req_t *req = run("{\"cmd\":[\"cat\"],\"stdin\":true}");
    broker_req_t *w;
    uint64_t id = started_id(req);
    char json[128], buf[64];

    /* another client may not write */
    snprintf(json, sizeof(json), "{\"id\":%ju}", (uintmax_t)id);
    w = send_req("exec.write", 0, 2, 0, json, "no", 2);
    assert_int_equal(w->resp[0].errnum, EPERM);
    broker_req_decref(w);

    w = send_req("exec.write", 0, 1, 0, json, "hello ", 6);
    assert_true(w->ended);
    assert_int_equal(w->resp[0].errnum, 0);
    broker_req_decref(w);
    snprintf(json, sizeof(json), "{\"id\":%ju,\"eof\":true}", (uintmax_t)id);
    w = send_req("exec.write", 0, 1, 0, json, "world", 5);
    assert_int_equal(w->resp[0].errnum, 0);
    broker_req_decref(w);
    /* after eof */
    w = send_req("exec.write", 0, 1, 0, json, "x", 1);
    assert_int_equal(w->resp[0].errnum, EPIPE);
    broker_req_decref(w);

    wait_ended(req);
    assert_int_equal(exit_status(req), 0);
    collect(req, "stdout", buf, sizeof(buf));
    assert_string_equal(buf, "hello world");
    broker_req_decref(req);
}

static void test_write_without_stdin(void **state)
{
    broker_req_t *req = run("{\"cmd\":[\"sleep\",\"10\"]}");
    broker_req_t *w;
    char json[64];

    snprintf(json, sizeof(json), "{\"id\":%ju}", (uintmax_t)started_id(req));
    w = send_req("exec.write", 0, 1, 0, json, "x", 1);
    assert_int_equal(w->resp[0].errnum, EINVAL);
    assert_non_null(strstr(w->resp[0].errstr, "without stdin"));
    broker_req_decref(w);
    broker_req_decref(req); /* teardown kills it */
}

static void test_kill(void **state)
{
    /* the signal reaches the whole group: the shell's child too */
    broker_req_t *req = run("{\"cmd\":[\"sh\",\"-c\",\"sleep 30; exit 0\"]}");
    broker_req_t *k;
    char json[64];

    snprintf(json, sizeof(json), "{\"id\":%ju,\"signum\":15}",
             (uintmax_t)started_id(req));
    k = send_req("exec.kill", 0, 2, 0, json, NULL, 0);
    assert_int_equal(k->resp[0].errnum, 0);
    assert_true(json_is_object(k->resp[0].body));
    broker_req_decref(k);
    wait_ended(req);
    assert_int_equal(exit_status(req), 128 + 15);
    assert_int_equal(
        json_integer_value(json_object_get(last(req)->body, "signal")), 15);
    assert_true(json_is_null(json_object_get(last(req)->body, "exitcode")));

    k = send_req("exec.kill", 0, 2, 0, json, NULL, 0);
    assert_int_equal(k->resp[0].errnum, ESRCH);
    broker_req_decref(k);
    k = send_req("exec.kill", 0, 2, 0, "{\"id\":1,\"signum\":-1}", NULL, 0);
    assert_int_equal(k->resp[0].errnum, EINVAL);
    assert_non_null(strstr(k->resp[0].errstr, "'signum'"));
    broker_req_decref(k);
    broker_req_decref(req);
}

static void test_cancel(void **state)
{
    broker_req_t *req = send_req("exec.run", MSG_FLAG_STREAMING, 7, 4242,
                                 "{\"cmd\":[\"sleep\",\"30\"]}", NULL, 0);
    broker_req_t *c;

    started_id(req);
    /* same matchtag from another origin cancels nothing */
    c = send_req("exec.run", MSG_FLAG_CANCEL, 8, 4242, NULL, NULL, 0);
    assert_int_equal(c->nresp, 0);
    broker_req_decref(c);
    uv_run(&fake.loop, UV_RUN_NOWAIT);
    assert_false(req->ended);

    c = send_req("exec.run", MSG_FLAG_CANCEL, 7, 4242, NULL, NULL, 0);
    assert_int_equal(c->nresp, 0);
    broker_req_decref(c);
    wait_ended(req);
    assert_int_equal(exit_status(req), 128 + SIGKILL);
    broker_req_decref(req);
}

static void test_disconnect(void **state)
{
    broker_req_t *a =
        send_req("exec.run", MSG_FLAG_STREAMING, 11, 0,
                 "{\"cmd\":[\"sleep\",\"30\"],\"stdin\":true}", NULL, 0);
    broker_req_t *b =
        send_req("exec.run", MSG_FLAG_STREAMING, 12, 0,
                 "{\"cmd\":[\"sh\",\"-c\",\"sleep 0.2\"]}", NULL, 0);

    exec_service.disconnect(ctx, 11);
    wait_ended(a);
    assert_int_equal(exit_status(a), 128 + SIGKILL);
    wait_ended(b);
    assert_int_equal(exit_status(b), 0);
    broker_req_decref(a);
    broker_req_decref(b);
}

static void test_background_holds_stream(void **state)
{
    /* a grandchild holding stdout delays the exit response until it is
     * done, so no output can follow "exit" */
    broker_req_t *req = run("{\"cmd\":[\"sh\",\"-c\","
                            "\"(sleep 0.3; echo late) & exit 0\"]}");
    char buf[64];

    wait_ended(req);
    assert_int_equal(exit_status(req), 0);
    collect(req, "stdout", buf, sizeof(buf));
    assert_string_equal(buf, "late\n");
    broker_req_decref(req);
}

static void test_shutdown_refuses(void **state)
{
    broker_req_t *a = run("{\"cmd\":[\"sleep\",\"30\"],\"stdin\":true}");
    broker_req_t *b;

    exec_service.shutdown(ctx);
    b = run("{\"cmd\":[\"true\"]}");
    assert_int_equal(b->resp[0].errnum, ECANCELED);
    broker_req_decref(b);
    /* destroy while the killed process is not reaped yet (teardown) */
    broker_req_decref(a);
}

/* Run the loop until the service released its shutdown hold (10 s). */
static void wait_released(void)
{
    uv_timer_t timer;
    bool expired = false;
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    uv_timer_init(&fake.loop, &timer);
    timer.data = &expired;
    uv_timer_start(&timer, on_timeout,
                   10000 * (uint64_t)(scale ? atoi(scale) : 1), 0);
    while (fake.holds > 0 && !expired)
        uv_run(&fake.loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&timer, NULL);
    uv_run(&fake.loop, UV_RUN_NOWAIT);
    assert_false(expired);
}

static void test_shutdown_holds_until_reaped(void **state)
{
    /* one plain process, one whose output is paused on a full window
     * (shutdown must drain it), one already finished */
    broker_req_t *a = run("{\"cmd\":[\"sleep\",\"30\"],\"stdin\":true}");
    broker_req_t *b = run("{\"cmd\":[\"sh\",\"-c\","
                          "\"while :; do echo xxxxxxxxxxxxxxxx; done\"],"
                          "\"window\":4096}");
    broker_req_t *c = run("{\"cmd\":[\"true\"]}");

    wait_ended(c);
    /* let b fill its window */
    for (int i = 0; i < 20 && b->nresp < 3; i++)
        uv_run(&fake.loop, UV_RUN_NOWAIT);
    fake.must_end[0] = a;
    fake.must_end[1] = b;
    exec_service.shutdown(ctx);
    assert_int_equal(fake.holds, 1);
    assert_false(a->ended);
    exec_service.shutdown(ctx); /* a second call holds nothing more */
    assert_int_equal(fake.holds, 1);
    wait_released();
    assert_int_equal(fake.releases, 1);
    assert_int_equal(exit_status(a), 128 + SIGKILL);
    assert_int_equal(exit_status(b), 128 + SIGKILL);
    assert_int_equal(exit_status(c), 0);
    broker_req_decref(a);
    broker_req_decref(b);
    broker_req_decref(c);
}

static void test_shutdown_idle_no_hold(void **state)
{
    broker_req_t *a = run("{\"cmd\":[\"true\"]}");

    wait_ended(a);
    exec_service.shutdown(ctx);
    assert_int_equal(fake.holds, 0);
    assert_int_equal(fake.releases, 0);
    broker_req_decref(a);
}

static void test_destroy_with_pending_write(void **state)
{
    /* a process that never reads, with more stdin queued than the
     * limit: the write answer is deferred, then destroy drops it */
    broker_req_t *req = run("{\"cmd\":[\"sleep\",\"30\"],\"stdin\":true}");
    size_t len = 4u << 20;
    char *data = calloc(1, len), json[64];
    broker_req_t *w;

    snprintf(json, sizeof(json), "{\"id\":%ju}", (uintmax_t)started_id(req));
    w = send_req("exec.write", 0, 1, 0, json, data, len);
    assert_false(w->ended);
    free(data);
    broker_req_decref(w);
    broker_req_decref(req);
}

static void test_deferred_write_answered(void **state)
{
    /* more than the queue limit: answered once the reader drained it */
    broker_req_t *req = run("{\"cmd\":[\"sh\",\"-c\","
                            "\"sleep 0.3; exec wc -c\"],\"stdin\":true}");
    size_t len = 4u << 20;
    char *data = calloc(1, len), json[64], buf[64];
    broker_req_t *w;

    snprintf(json, sizeof(json), "{\"id\":%ju,\"eof\":true}",
             (uintmax_t)started_id(req));
    w = send_req("exec.write", 0, 1, 0, json, data, len);
    free(data);
    assert_false(w->ended);
    wait_ended(w);
    assert_int_equal(w->resp[0].errnum, 0);
    broker_req_decref(w);
    wait_ended(req);
    collect(req, "stdout", buf, sizeof(buf));
    assert_string_equal(buf, "4194304\n");
    broker_req_decref(req);
}

static size_t output_bytes(broker_req_t *req)
{
    size_t n = 0;
    for (int i = 0; i < req->nresp; i++)
        n += req->resp[i].len;
    return n;
}

/* Run the loop for about 'ms' milliseconds. */
static void spin(unsigned ms)
{
    uv_timer_t timer;
    bool expired = false;

    uv_timer_init(&fake.loop, &timer);
    timer.data = &expired;
    uv_timer_start(&timer, on_timeout, ms, 0);
    while (!expired)
        uv_run(&fake.loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&timer, NULL);
    uv_run(&fake.loop, UV_RUN_NOWAIT);
}

static void test_window_credit(void **state)
{
    broker_req_t *req = run("{\"cmd\":[\"head\",\"-c\",\"100000\","
                            "\"/dev/zero\"],\"window\":8192}");
    broker_req_t *c;
    char json[64];
    size_t n, credited = 0;
    int rounds = 0;

    snprintf(json, sizeof(json), "{\"id\":%ju,\"bytes\":8192}",
             (uintmax_t)started_id(req));
    /* without credit, output stops at less than two windows */
    spin(200);
    n = output_bytes(req);
    assert_true(n >= 8192 && n < 2 * 8192);
    assert_false(req->ended);
    for (int i = 1; i < req->nresp; i++)
        assert_true(req->resp[i].len <= 8192);

    /* another client cannot credit */
    c = send_req("exec.credit", 0, 2, 0, json, NULL, 0);
    assert_int_equal(c->resp[0].errnum, EPERM);
    broker_req_decref(c);

    while (!req->ended && rounds++ < 1000) {
        while (credited < output_bytes(req)) {
            c = send_req("exec.credit", 0, 1, 0, json, NULL, 0);
            assert_int_equal(c->resp[0].errnum, 0);
            broker_req_decref(c);
            credited += 8192;
        }
        uv_run(&fake.loop, UV_RUN_ONCE);
    }
    assert_true(req->ended);
    assert_int_equal(exit_status(req), 0);
    assert_int_equal(output_bytes(req), 100000);
    expect_einval("{\"cmd\":[\"ls\"],\"window\":10}", "'window'");
    broker_req_decref(req);
}

static void test_window_disconnect(void **state)
{
    /* a paused process whose client left still ends (and is reaped) */
    broker_req_t *req = send_req("exec.run", MSG_FLAG_STREAMING, 21, 0,
                                 "{\"cmd\":[\"cat\",\"/dev/zero\"],"
                                 "\"window\":4096}",
                                 NULL, 0);
    spin(100);
    assert_false(req->ended);
    exec_service.disconnect(ctx, 21);
    wait_ended(req);
    assert_int_equal(exit_status(req), 128 + SIGKILL);
    broker_req_decref(req);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_echo),
        T(test_exit_code),
        T(test_ids_increase),
        T(test_large_output_chunks),
        T(test_enoent),
        T(test_bad_cwd),
        T(test_eacces),
        T(test_invalid),
        T(test_not_streaming),
        T(test_env_cwd),
        T(test_no_stdin_is_devnull),
        T(test_stdin),
        T(test_write_without_stdin),
        T(test_kill),
        T(test_cancel),
        T(test_disconnect),
        T(test_background_holds_stream),
        T(test_shutdown_refuses),
        T(test_shutdown_holds_until_reaped),
        T(test_shutdown_idle_no_hold),
        T(test_destroy_with_pending_write),
        T(test_deferred_write_answered),
        T(test_window_credit),
        T(test_window_disconnect),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
