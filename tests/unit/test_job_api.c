/* test_job_api.c - the job API (eddy/job.h) against a fake job service.
 *
 * The jobspec builder is tested on its own.  Everything else runs against
 * a fake broker (as in test_lib.c): a thread that listens on a unix socket
 * in a mkdtemp directory, accepts one client, greets it and answers the
 * job topics with canned responses chosen by job ID, with plain blocking
 * I/O and the msg codec.  It keeps the last request of each kind so tests
 * can check what the library sent.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "eddy/core.h"
#include "eddy/job.h"
#include "eddy/mpir.h"
#include "src/common/msg.h"
#include "src/common/proctable.h"
#include "tests/unit/support/wire.h"

static int timeout_scale = 1;

/* ---- fake broker ------------------------------------------------------ */

struct fake {
    char dir[32];
    char path[64];
    char uri[96];
    int listen_fd;
    pthread_t thread;
    bool running;

    pthread_mutex_t lock;
    char last_topic[64];
    json_t *last_body; /* of the last request (not cancels) */
    char last_payload[64];
    size_t last_len;
    int cancels_ok; /* cancels of job-io.attach with the right tag */
    int cancels_bad;
    int credits_ok;  /* job-io.credit for job 5, NORESPONSE, right key */
    int credits_bad; /* anything else read while serving job 5 */
    json_int_t credit_bytes;
};

/* Respond to 'req' with 'body' (stolen; NULL for none) and payload. */
static int respond(
    int fd, const msg_t *req, json_t *body, const char *payload, int flags)
{
    msg_t *m = msg_create(MSG_RESPONSE, req->topic, body, payload,
                          payload ? strlen(payload) : 0);
    if (!m)
        return -1;
    m->matchtag = req->matchtag;
    m->flags = (uint8_t)flags;
    return wire_send_msg(fd, m);
}

/* Job 30: a good table of 3 tasks on two nodes, MPMD; job 32: ranks 0
 * and 2 only.  Encoded with the codec the brokers use. */
static int respond_proctable(int fd, const msg_t *req, bool complete)
{
    static const struct proctable_entry e[] = {
        {2, 5, 1, 4000, "n5", "/bin/b"},
        {0, 0, 0, 1234, "n0", "/bin/a"},
        {1, 0, 0, 1235, "n0", "/bin/a"},
    };
    proctable_t *pt = proctable_create();
    void *buf = NULL;
    size_t len = 0;
    msg_t *m;
    int rc = -1;

    for (size_t i = 0; pt && i < 3; i++)
        if ((complete || e[i].rank != 1) && proctable_add(pt, &e[i]) < 0)
            goto done;
    if (!pt || proctable_encode(pt, &buf, &len) < 0)
        goto done;
    if (!(m = msg_create(MSG_RESPONSE, req->topic,
                         json_pack("{s:i}", "count", 3), buf, len)))
        goto done;
    m->matchtag = req->matchtag;
    rc = wire_send_msg(fd, m);
done:
    free(buf);
    proctable_destroy(pt);
    return rc;
}

static int respond_error(int fd, const msg_t *req, int errnum, const char *s)
{
    msg_t *m = msg_create_error(req, errnum, s);

    return m ? wire_send_msg(fd, m) : -1;
}

static int respond_json(int fd, const msg_t *req, const char *text, int flags)
{
    return respond(fd, req, json_loads(text, 0, NULL), NULL, flags);
}

static json_int_t req_id(const msg_t *req)
{
    json_int_t id = -1;

    if (req->body)
        (void)json_unpack(req->body, "{s:I}", "id", &id);
    return id;
}

/* Job 1: two tasks on two nodes, finished. */
#define INFO_1                                                                 \
    "{\"id\":1,\"state\":\"INACTIVE\",\"name\":\"hostname\",\"ntasks\":2,"     \
    "\"nnodes\":2,\"t_submit\":100.5,\"status\":3,\"reason\":\"\","            \
    "\"jobspec\":{},\"t_alloc\":101,\"t_start\":102,\"t_finish\":103,"         \
    "\"t_clean\":104,\"exception\":{\"type\":\"exec\",\"severity\":0,"         \
    "\"note\":\"task 1 killed\"},"                                             \
    "\"nodes\":[{\"rank\":0,\"hostname\":\"n0\"},"                             \
    "{\"rank\":5,\"hostname\":\"n5\"}],"                                       \
    "\"tasks\":[{\"rank\":1,\"node\":5,\"hostname\":\"n5\",\"pid\":4321,"      \
    "\"appnum\":1,\"executable\":\"/bin/b\",\"status\":137},"                  \
    "{\"rank\":0,\"node\":0,\"hostname\":\"n0\",\"pid\":1234,\"appnum\":0,"    \
    "\"executable\":\"/bin/a\",\"status\":null}]}"

/* Job 3: waiting for resources: no nodes, no tasks yet. */
#define INFO_3                                                                 \
    "{\"id\":3,\"state\":\"SCHED\",\"name\":\"big\",\"ntasks\":64,"            \
    "\"nnodes\":8,\"t_submit\":200,\"status\":null,"                           \
    "\"reason\":\"not enough cores\",\"jobspec\":{},\"t_alloc\":0,"            \
    "\"t_start\":0,\"t_finish\":0,\"t_clean\":0,\"exception\":null,"           \
    "\"nodes\":[],\"tasks\":[]}"

/* Malformed answers to job.info, for jobs 10, 11, ... */
static const char *const bad_info[] = {
    "{}",
    "{\"id\":10,\"state\":\"RUNNING\",\"name\":\"x\",\"ntasks\":1,"
    "\"nnodes\":1,\"t_submit\":1,\"status\":null,\"reason\":\"\","
    "\"jobspec\":{},\"t_alloc\":0,\"t_start\":0,\"t_finish\":0,"
    "\"t_clean\":0,\"exception\":null,\"nodes\":[],\"tasks\":[]}",
    /* two tasks both rank 0 */
    "{\"id\":12,\"state\":\"RUN\",\"name\":\"x\",\"ntasks\":2,"
    "\"nnodes\":1,\"t_submit\":1,\"status\":null,\"reason\":\"\","
    "\"jobspec\":{},\"t_alloc\":0,\"t_start\":0,\"t_finish\":0,"
    "\"t_clean\":0,\"exception\":null,\"nodes\":[],\"tasks\":["
    "{\"rank\":0,\"node\":0,\"hostname\":\"a\",\"pid\":1,\"appnum\":0,"
    "\"executable\":\"x\",\"status\":null},"
    "{\"rank\":0,\"node\":0,\"hostname\":\"a\",\"pid\":2,\"appnum\":0,"
    "\"executable\":\"x\",\"status\":null}]}",
    /* one task reported for a job of 1000000 */
    "{\"id\":13,\"state\":\"RUN\",\"name\":\"x\",\"ntasks\":1000000,"
    "\"nnodes\":1,\"t_submit\":1,\"status\":null,\"reason\":\"\","
    "\"jobspec\":{},\"t_alloc\":0,\"t_start\":0,\"t_finish\":0,"
    "\"t_clean\":0,\"exception\":null,\"nodes\":[],\"tasks\":["
    "{\"rank\":0,\"node\":0,\"hostname\":\"a\",\"pid\":1,\"appnum\":0,"
    "\"executable\":\"x\",\"status\":null}]}",
    /* pid is a string */
    "{\"id\":14,\"state\":\"RUN\",\"name\":\"x\",\"ntasks\":1,"
    "\"nnodes\":1,\"t_submit\":1,\"status\":null,\"reason\":\"\","
    "\"jobspec\":{},\"t_alloc\":0,\"t_start\":0,\"t_finish\":0,"
    "\"t_clean\":0,\"exception\":null,\"nodes\":[],\"tasks\":["
    "{\"rank\":0,\"node\":0,\"hostname\":\"a\",\"pid\":\"1\",\"appnum\":0,"
    "\"executable\":\"x\",\"status\":null}]}",
    /* node without hostname */
    "{\"id\":15,\"state\":\"RUN\",\"name\":\"x\",\"ntasks\":0,"
    "\"nnodes\":1,\"t_submit\":1,\"status\":null,\"reason\":\"\","
    "\"jobspec\":{},\"t_alloc\":0,\"t_start\":0,\"t_finish\":0,"
    "\"t_clean\":0,\"exception\":null,\"nodes\":[{\"rank\":0}],"
    "\"tasks\":[]}",
};
#define NBAD_INFO (sizeof(bad_info) / sizeof(bad_info[0]))

/* Job 20: held at its exec barrier; 21, 22, 23: malformed barriers. */
#define INFO_HEAD(id)                                                          \
    "{\"id\":" #id ",\"state\":\"RUN\",\"name\":\"x\",\"ntasks\":0,"           \
    "\"nnodes\":1,\"t_submit\":1,\"status\":null,\"reason\":\"\","             \
    "\"jobspec\":{},\"t_alloc\":0,\"t_start\":0,\"t_finish\":0,"               \
    "\"t_clean\":0,\"exception\":null,\"nodes\":[],\"tasks\":[],"
static const char *const barrier_info[] = {
    INFO_HEAD(20) "\"barrier\":{\"where\":\"exec\",\"held\":4,"
                  "\"released\":false}}",
    INFO_HEAD(21) "\"barrier\":{\"where\":\"start\",\"held\":4,"
                  "\"released\":false}}",
    INFO_HEAD(22) "\"barrier\":{\"where\":\"init\",\"held\":-1,"
                  "\"released\":false}}",
    INFO_HEAD(23) "\"barrier\":{\"where\":\"fork\",\"held\":1,"
                  "\"released\":1}}",
    INFO_HEAD(24) "\"barrier\":\"fork\"}",
    INFO_HEAD(25) "\"barrier\":null}",
};
#define NBARRIER_INFO (sizeof(barrier_info) / sizeof(barrier_info[0]))

#define SUMMARY_1                                                              \
    "{\"id\":1,\"state\":\"INACTIVE\",\"name\":\"a\",\"ntasks\":2,"            \
    "\"nnodes\":2,\"t_submit\":100.5,\"status\":0,\"reason\":\"\"}"
#define SUMMARY_2                                                              \
    "{\"id\":9007199254740000,\"state\":\"SCHED\",\"name\":\"b\","             \
    "\"ntasks\":4,\"nnodes\":1,\"t_submit\":101,\"status\":null,"              \
    "\"reason\":\"waiting\"}"

static void record(struct fake *fk, const msg_t *req)
{
    pthread_mutex_lock(&fk->lock);
    snprintf(fk->last_topic, sizeof(fk->last_topic), "%s", req->topic);
    json_decref(fk->last_body);
    fk->last_body = req->body ? json_incref(req->body) : NULL;
    fk->last_len = req->payload_len;
    memcpy(fk->last_payload, req->payload ? req->payload : "",
           req->payload_len < sizeof(fk->last_payload) ? req->payload_len : 0);
    pthread_mutex_unlock(&fk->lock);
}

/* Expect the cancel of 'req', then end its stream. */
static int expect_cancel(struct fake *fk, int fd, const msg_t *req)
{
    msg_t *c = wire_read_msg(fd);

    pthread_mutex_lock(&fk->lock);
    if (c && c->type == MSG_REQUEST && (c->flags & MSG_FLAG_CANCEL) &&
        c->matchtag == req->matchtag && !strcmp(c->topic, req->topic))
        fk->cancels_ok++;
    else
        fk->cancels_bad++;
    pthread_mutex_unlock(&fk->lock);
    msg_decref(c);
    return respond(fd, req, NULL, NULL, MSG_FLAG_EOS);
}

enum { CHUNK = 512 * 1024 };

/* Job 5: 2.5 MiB of output in 512 KiB records; read the credits the
 * client sends for them (fire and forget: no answer), then end. */
static int serve_attach_credit(struct fake *fk, int fd, const msg_t *req)
{
    char *chunk = malloc(CHUNK);
    json_int_t key = -1;
    int rc = 0;

    if (!chunk)
        return -1;
    memset(chunk, 'x', CHUNK);
    (void)json_unpack(req->body, "{s:I}", "key", &key);
    for (int i = 0; i < 5 && rc == 0; i++) {
        msg_t *m =
            msg_create(MSG_RESPONSE, req->topic,
                       json_pack("{s:i s:s}", "rank", 0, "stream", "stdout"),
                       chunk, CHUNK);
        if (!m) {
            rc = -1;
            break;
        }
        m->matchtag = req->matchtag;
        rc = wire_send_msg(fd, m);
    }
    free(chunk);
    for (int i = 0; i < 2 && rc == 0; i++) {
        msg_t *c = wire_read_msg(fd);
        json_int_t cid = -1, ckey = -2, bytes = -1;

        pthread_mutex_lock(&fk->lock);
        if (c && c->type == MSG_REQUEST && !strcmp(c->topic, "job-io.credit") &&
            (c->flags & MSG_FLAG_NORESPONSE) &&
            json_unpack(c->body, "{s:I s:I s:I}", "id", &cid, "key", &ckey,
                        "bytes", &bytes) == 0 &&
            cid == 5 && ckey == key && key >= 0) {
            fk->credits_ok++;
            fk->credit_bytes += bytes;
        } else
            fk->credits_bad++;
        pthread_mutex_unlock(&fk->lock);
        msg_decref(c);
    }
    return rc < 0 ? rc : respond(fd, req, NULL, NULL, MSG_FLAG_EOS);
}

static int serve_attach(struct fake *fk, int fd, const msg_t *req)
{
    json_int_t id = req_id(req);
    int rc = 0;

    if (id == 99)
        return respond_error(fd, req, ENOENT, "job 99: no such job");
    if (id == 1) {
        rc |= respond(fd, req,
                      json_pack("{s:i s:s}", "rank", 0, "stream", "stdout"),
                      "hello\n", 0);
        rc |= respond(fd, req,
                      json_pack("{s:i s:s}", "rank", 1, "stream", "stderr"),
                      "oops", 0);
        rc |= respond(fd, req,
                      json_pack("{s:i s:s}", "rank", 0, "stream", "stdout"),
                      "world\n", 0);
        rc |= respond_json(fd, req, "{\"dropped\":100}", 0);
        rc |= respond_json(
            fd, req, "{\"rank\":0,\"stream\":\"stdout\",\"eof\":true}", 0);
        rc |= respond_json(
            fd, req, "{\"rank\":1,\"stream\":\"stderr\",\"eof\":true}", 0);
        rc |= respond(fd, req, NULL, NULL, MSG_FLAG_EOS);
        return rc;
    }
    if (id == 2) { /* one record, then follow until cancelled */
        rc = respond(fd, req,
                     json_pack("{s:i s:s}", "rank", 0, "stream", "stdout"),
                     "live\n", 0);
        return rc < 0 ? rc : expect_cancel(fk, fd, req);
    }
    if (id == 5) /* 5 x 512 KiB: the client must credit 2 x 1 MiB */
        return serve_attach_credit(fk, fd, req);
    if (id == 3) /* malformed record; the client must cancel */
        return respond_json(fd, req, "{\"rank\":0,\"stream\":\"stdin\"}", 0) < 0
                   ? -1
                   : expect_cancel(fk, fd, req);
    return respond_error(fd, req, EINVAL, "unexpected attach");
}

static int serve_eventlog(int fd, const msg_t *req)
{
    json_int_t id = req_id(req);
    int rc = 0;

    if (id == 99)
        return respond_error(fd, req, ENOENT, "job 99: no such job");
    rc |= respond_json(fd, req,
                       "{\"timestamp\":1.5,\"name\":\"submit\","
                       "\"context\":{\"userid\":7,\"ntasks\":2}}",
                       0);
    rc |= respond_json(fd, req, "{\"timestamp\":2,\"name\":\"start\"}", 0);
    if (id == 2) /* a broken entry */
        rc |= respond_json(fd, req, "{\"timestamp\":\"x\",\"name\":\"y\"}", 0);
    rc |= respond_json(fd, req,
                       "{\"timestamp\":3.25,\"name\":\"clean\","
                       "\"context\":{}}",
                       0);
    rc |= respond(fd, req, NULL, NULL, MSG_FLAG_EOS);
    return rc;
}

static int serve_one(struct fake *fk, int fd, const msg_t *req)
{
    const char *t = req->topic;
    json_int_t id = req_id(req);

    record(fk, req);
    if (!strcmp(t, "job.submit")) {
        const char *name = "";
        (void)json_unpack(req->body, "{s:{s:{s:{s:{s:s}}}}}", "jobspec",
                          "attributes", "system", "job", "name", &name);
        if (!strcmp(name, "toobig"))
            return respond_error(fd, req, ENOSPC,
                                 "job needs 64 nodes, the instance has 4");
        if (!strcmp(name, "badid"))
            return respond_json(fd, req, "{\"id\":-3}", 0);
        return respond_json(fd, req, "{\"id\":42}", 0);
    }
    if (!strcmp(t, "job.wait")) {
        if (id == 1)
            return respond_json(
                fd, req, "{\"id\":1,\"status\":3,\"exception\":null}", 0);
        if (id == 2)
            return respond_json(fd, req,
                                "{\"id\":2,\"status\":null,\"exception\":"
                                "{\"type\":\"cancel\",\"severity\":0,"
                                "\"note\":\"canceled by user\"}}",
                                0);
        if (id == 3)
            return respond_json(fd, req, "{\"id\":3,\"status\":\"x\"}", 0);
        if (id == 4) /* an exception without a note */
            return respond_json(fd, req,
                                "{\"id\":4,\"status\":null,\"exception\":"
                                "{\"type\":\"exec\",\"severity\":0,"
                                "\"note\":null}}",
                                0);
        return respond_error(fd, req, ENOENT, "job 99: no such job");
    }
    if (!strcmp(t, "job.info")) {
        if (id == 1)
            return respond_json(fd, req, INFO_1, 0);
        if (id == 3)
            return respond_json(fd, req, INFO_3, 0);
        if (id >= 10 && id < 10 + (json_int_t)NBAD_INFO)
            return respond_json(fd, req, bad_info[id - 10], 0);
        if (id >= 20 && id < 20 + (json_int_t)NBARRIER_INFO)
            return respond_json(fd, req, barrier_info[id - 20], 0);
        return respond_error(fd, req, ENOENT, "job 99: no such job");
    }
    if (!strcmp(t, "job.list")) {
        int all = 0;
        (void)json_unpack(req->body, "{s:b}", "all", &all);
        return respond_json(fd, req,
                            all ? "{\"jobs\":[" SUMMARY_1 "," SUMMARY_2 "]}"
                                : "{\"jobs\":[" SUMMARY_2 "]}",
                            0);
    }
    if (!strcmp(t, "job.release")) {
        if (id == 20)
            return respond_json(fd, req, "{}", 0);
        if (id == 99)
            return respond_error(fd, req, ENOENT, "job 99: no such job");
        return respond_error(fd, req, EINVAL,
                             "job 1 is not held at a startup barrier "
                             "(submitted without a stop mode)");
    }
    if (!strcmp(t, "proctable.get")) {
        if (id == 30 || id == 32)
            return respond_proctable(fd, req, id == 30);
        if (id == 31)
            return respond(fd, req, NULL, "not a table", 0);
        return respond_error(fd, req, EAGAIN,
                             "job 33: its tasks have not all started "
                             "(state SCHED)");
    }
    if (!strcmp(t, "job.kill") || !strcmp(t, "job.cancel") ||
        !strcmp(t, "job-io.stdin") || !strcmp(t, "test.sync"))
        return respond_json(fd, req, "{}", 0);
    if (!strcmp(t, "job.eventlog"))
        return serve_eventlog(fd, req);
    if (!strcmp(t, "job-io.attach"))
        return serve_attach(fk, fd, req);
    return respond_error(fd, req, ENOSYS, "unknown topic");
}

static void *fake_main(void *arg)
{
    struct fake *fk = arg;
    struct pollfd pfd = {.fd = fk->listen_fd, .events = POLLIN};
    struct timeval tv = {.tv_sec = 10 * timeout_scale};
    msg_t *req, *m;
    int fd;

    if (poll(&pfd, 1, 10000 * timeout_scale) != 1)
        return NULL;
    if ((fd = accept4(fk->listen_fd, NULL, NULL, SOCK_CLOEXEC)) < 0)
        return NULL;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    m = msg_create(MSG_RESPONSE, "broker.hello",
                   json_pack("{s:i s:i s:s s:i}", "rank", 0, "size", 4,
                             "version", "0.1.0", "uid", (int)getuid()),
                   NULL, 0);
    (void)wire_send_msg(fd, m);
    while ((req = wire_read_msg(fd))) {
        int rc = 0;

        if (!(req->flags & MSG_FLAG_CANCEL)) /* late cancels are fine */
            rc = serve_one(fk, fd, req);
        msg_decref(req);
        if (rc < 0)
            break;
    }
    close(fd);
    return NULL;
}

static int setup(void **state)
{
    struct fake *fk = calloc(1, sizeof(*fk));

    assert_non_null(fk);
    pthread_mutex_init(&fk->lock, NULL);
    snprintf(fk->dir, sizeof(fk->dir), "/tmp/test_job.XXXXXX");
    fk->listen_fd = wire_listen(fk->dir, sizeof(fk->dir), fk->path,
                                sizeof(fk->path), fk->uri, sizeof(fk->uri));
    assert_true(fk->listen_fd >= 0);
    assert_int_equal(pthread_create(&fk->thread, NULL, fake_main, fk), 0);
    fk->running = true;
    *state = fk;
    return 0;
}

static int teardown(void **state)
{
    struct fake *fk = *state;

    if (!fk)
        return 0;
    if (fk->running)
        pthread_join(fk->thread, NULL);
    close(fk->listen_fd);
    unlink(fk->path);
    rmdir(fk->dir);
    json_decref(fk->last_body);
    pthread_mutex_destroy(&fk->lock);
    free(fk);
    *state = NULL;
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

/* The last request the fake saw (a new reference), after checking its
 * topic. */
static json_t *last_request(struct fake *fk, const char *topic)
{
    json_t *o;

    pthread_mutex_lock(&fk->lock);
    assert_string_equal(fk->last_topic, topic);
    o = fk->last_body ? json_incref(fk->last_body) : json_object();
    pthread_mutex_unlock(&fk->lock);
    return o;
}

/* A round trip: every request sent before it has been served. */
static void sync_fake(eddy_t *h)
{
    eddy_future_t *f = eddy_rpc(h, "test.sync", 0, 0, NULL, NULL, 0);

    assert_non_null(f);
    assert_int_equal(eddy_future_wait_for(f, 10.0 * timeout_scale), 0);
    eddy_future_destroy(f);
}

/* ---- jobspec builder -------------------------------------------------- */

static json_t *encode_ok(const eddy_jobspec_t *js)
{
    eddy_error_t err = {{0}};
    char *s = eddy_jobspec_encode(js, &err);
    json_t *o;

    if (!s)
        fail_msg("eddy_jobspec_encode: %s", err.text);
    o = json_loads(s, 0, NULL);
    free(s);
    assert_non_null(o);
    return o;
}

static void test_jobspec_encode(void **state)
{
    eddy_jobspec_t *js = eddy_jobspec_create();
    char *const argv[] = {(char *)"/usr/bin/hostname", (char *)"-s"};
    json_t *o, *env;
    const char *cwd = NULL, *name = NULL, *arg1 = NULL;
    char here[4096];
    json_int_t total = 0;

    assert_non_null(js);
    assert_int_equal(setenv("EDDY_TEST_FROM_ENVIRON", "yes", 1), 0);
    assert_int_equal(setenv("EDDY_TEST_UNSET_ME", "x", 1), 0);
    assert_int_equal(eddy_jobspec_add_group(js, 2, argv, 0), 0);
    assert_int_equal(eddy_jobspec_set_tasks(js, 4), 0);
    assert_int_equal(eddy_jobspec_setenv(js, "EDDY_TEST_SET", "1"), 0);
    assert_int_equal(eddy_jobspec_setenv(js, "EDDY_TEST_UNSET_ME", NULL), 0);
    o = encode_ok(js);
    /* environment: from environ, with the overrides */
    env = json_object_get(
        json_object_get(json_object_get(o, "attributes"), "system"),
        "environment");
    assert_non_null(env);
    assert_string_equal(
        json_string_value(json_object_get(env, "EDDY_TEST_FROM_ENVIRON")),
        "yes");
    assert_string_equal(
        json_string_value(json_object_get(env, "EDDY_TEST_SET")), "1");
    assert_null(json_object_get(env, "EDDY_TEST_UNSET_ME"));
    /* the command, one task per slot; cwd defaults to ours, the name to
     * the basename of argv[0] */
    assert_int_equal(json_unpack(o, "{s:[{s:[s s] s:{s:I}}]}", "tasks",
                                 "command", &name, &arg1, "count", "per_slot",
                                 &total),
                     0);
    assert_string_equal(name, "/usr/bin/hostname");
    assert_string_equal(arg1, "-s");
    assert_int_equal(total, 1);
    assert_int_equal(json_unpack(o, "{s:{s:{s:s s:{s:s}}}}", "attributes",
                                 "system", "cwd", &cwd, "job", "name", &name),
                     0);
    assert_non_null(getcwd(here, sizeof(here)));
    assert_string_equal(cwd, here);
    assert_string_equal(name, "hostname");
    json_decref(o);

    /* explicit cwd and name; the environment taken at encode time */
    assert_int_equal(eddy_jobspec_set_cwd(js, "/tmp"), 0);
    assert_int_equal(eddy_jobspec_set_name(js, "myjob"), 0);
    assert_int_equal(setenv("EDDY_TEST_FROM_ENVIRON", "later", 1), 0);
    o = encode_ok(js);
    assert_int_equal(json_unpack(o, "{s:{s:{s:s s:{s:s} s:{s:s}}}}",
                                 "attributes", "system", "cwd", &cwd, "job",
                                 "name", &name, "environment",
                                 "EDDY_TEST_FROM_ENVIRON", &arg1),
                     0);
    assert_string_equal(cwd, "/tmp");
    assert_string_equal(name, "myjob");
    assert_string_equal(arg1, "later");
    json_decref(o);

    /* clearenv: only what is set afterwards */
    assert_int_equal(eddy_jobspec_clearenv(js), 0);
    assert_int_equal(eddy_jobspec_setenv(js, "ONLY", "me"), 0);
    o = encode_ok(js);
    env = json_object_get(
        json_object_get(json_object_get(o, "attributes"), "system"),
        "environment");
    assert_int_equal(json_object_size(env), 1);
    assert_string_equal(json_string_value(json_object_get(env, "ONLY")), "me");
    json_decref(o);

    /* cleared and nothing set: an empty environment, not "none given"
     * (which would make the shell pass its own) */
    assert_int_equal(eddy_jobspec_setenv(js, "ONLY", NULL), 0);
    o = encode_ok(js);
    env = json_object_get(
        json_object_get(json_object_get(o, "attributes"), "system"),
        "environment");
    assert_true(json_is_object(env));
    assert_int_equal(json_object_size(env), 0);
    json_decref(o);
    eddy_jobspec_destroy(js);
    unsetenv("EDDY_TEST_FROM_ENVIRON");
    unsetenv("EDDY_TEST_UNSET_ME");
}

static void test_jobspec_mpmd(void **state)
{
    eddy_jobspec_t *js = eddy_jobspec_create();
    char *const a[] = {(char *)"./server"};
    char *const b[] = {(char *)"./client", (char *)"--fast"};
    json_t *o, *tasks;
    json_int_t n0 = 0, n1 = 0, nodes = 0;
    const char *c0 = NULL, *c1 = NULL, *c1a = NULL, *type = NULL;

    assert_non_null(js);
    assert_int_equal(eddy_jobspec_add_group(js, 1, a, 1), 0);
    assert_int_equal(eddy_jobspec_add_group(js, 2, b, 3), 0);
    assert_int_equal(eddy_jobspec_set_nodes(js, 2), 0);
    assert_int_equal(eddy_jobspec_set_tasks(js, 4), 0);
    assert_int_equal(eddy_jobspec_set_duration(js, 60), 0);
    o = encode_ok(js);
    tasks = json_object_get(o, "tasks");
    assert_int_equal(json_array_size(tasks), 2);
    assert_int_equal(json_unpack(tasks, "[{s:[s] s:{s:I}} {s:[s s] s:{s:I}}]",
                                 "command", &c0, "count", "total", &n0,
                                 "command", &c1, &c1a, "count", "total", &n1),
                     0);
    assert_string_equal(c0, "./server");
    assert_string_equal(c1, "./client");
    assert_string_equal(c1a, "--fast");
    assert_int_equal(n0, 1);
    assert_int_equal(n1, 3);
    assert_int_equal(json_unpack(o, "{s:[{s:s s:I}]}", "resources", "type",
                                 &type, "count", &nodes),
                     0);
    assert_string_equal(type, "node");
    assert_int_equal(nodes, 2);
    json_decref(o);
    eddy_jobspec_destroy(js);
}

static void test_jobspec_errors(void **state)
{
    eddy_jobspec_t *js = eddy_jobspec_create();
    char *const argv[] = {(char *)"true"};
    char *const nullarg[] = {NULL};
    eddy_error_t err = {{0}};

    assert_non_null(js);
    /* setters */
    errno = 0;
    assert_int_equal(eddy_jobspec_add_group(NULL, 1, argv, 1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_add_group(js, 0, argv, 1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_add_group(js, 1, nullarg, 1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_add_group(js, 1, argv, -1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_set_nodes(js, -1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_set_tasks(NULL, 1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_setenv(js, "A=B", "x"), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_setenv(js, "", "x"), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_set_cwd(js, NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_set_duration(js, -1), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_jobspec_encode(NULL, &err));
    assert_int_equal(errno, EINVAL);

    /* no task group at all */
    errno = 0;
    assert_null(eddy_jobspec_encode(js, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "jobspec"));

    /* 8 tasks over 3 nodes */
    assert_int_equal(eddy_jobspec_add_group(js, 1, argv, 0), 0);
    assert_int_equal(eddy_jobspec_set_nodes(js, 3), 0);
    assert_int_equal(eddy_jobspec_set_tasks(js, 8), 0);
    err.text[0] = '\0';
    errno = 0;
    assert_null(eddy_jobspec_encode(js, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "3 nodes"));

    /* 0 tasks ("all") is for a single group only */
    assert_int_equal(eddy_jobspec_set_nodes(js, 0), 0);
    assert_int_equal(eddy_jobspec_add_group(js, 1, argv, 2), 0);
    err.text[0] = '\0';
    errno = 0;
    assert_null(eddy_jobspec_encode(js, &err));
    assert_int_equal(errno, EINVAL);
    assert_true(strlen(err.text) > 0);

    /* a relative cwd is refused by the validator, which names the field */
    eddy_jobspec_destroy(js);
    assert_non_null(js = eddy_jobspec_create());
    assert_int_equal(eddy_jobspec_add_group(js, 1, argv, 0), 0);
    assert_int_equal(eddy_jobspec_set_cwd(js, "relative/dir"), 0);
    err.text[0] = '\0';
    errno = 0;
    assert_null(eddy_jobspec_encode(js, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "cwd"));
    eddy_jobspec_destroy(js);
    eddy_jobspec_destroy(NULL);
}

/* ---- submit and wait -------------------------------------------------- */

static void test_submit(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_jobspec_t *js = eddy_jobspec_create();
    char *const argv[] = {(char *)"sleep", (char *)"1"};
    eddy_jobid_t id = 0;
    eddy_future_t *f;
    json_t *req;
    const char *name = NULL;

    assert_non_null(js);
    assert_int_equal(eddy_jobspec_add_group(js, 2, argv, 0), 0);
    errno = 0;
    assert_null(eddy_job_submit(NULL, js));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_submit(h, NULL));
    assert_int_equal(errno, EINVAL);

    assert_non_null(f = eddy_job_submit(h, js));
    assert_int_equal(eddy_job_submit_get_id(f, &id), 0);
    assert_int_equal(id, 42);
    eddy_future_destroy(f);
    req = last_request(fk, "job.submit");
    assert_int_equal(json_unpack(req, "{s:{s:{s:{s:{s:s}}}}}", "jobspec",
                                 "attributes", "system", "job", "name", &name),
                     0);
    assert_string_equal(name, "sleep");
    assert_null(json_object_get(req, "stdin")); /* default: /dev/null */
    json_decref(req);

    /* tasks that read stdin from messages: "stdin": true */
    errno = 0;
    assert_int_equal(eddy_jobspec_set_stdin(NULL, true), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(eddy_jobspec_set_stdin(js, true), 0);
    assert_non_null(f = eddy_job_submit(h, js));
    assert_int_equal(eddy_job_submit_get_id(f, &id), 0);
    eddy_future_destroy(f);
    req = last_request(fk, "job.submit");
    assert_true(json_is_true(json_object_get(req, "stdin")));
    assert_non_null(json_object_get(req, "jobspec"));
    json_decref(req);
    assert_int_equal(eddy_jobspec_set_stdin(js, false), 0);
    assert_non_null(f = eddy_job_submit(h, js));
    assert_int_equal(eddy_job_submit_get_id(f, &id), 0);
    eddy_future_destroy(f);
    req = last_request(fk, "job.submit");
    assert_null(json_object_get(req, "stdin"));
    json_decref(req);

    /* the service's error and message are passed through */
    assert_int_equal(eddy_jobspec_set_name(js, "toobig"), 0);
    assert_non_null(f = eddy_job_submit(h, js));
    id = 7;
    errno = 0;
    assert_int_equal(eddy_job_submit_get_id(f, &id), -1);
    assert_int_equal(errno, ENOSPC);
    assert_int_equal(id, 7);
    assert_string_equal(eddy_future_error_string(f),
                        "job needs 64 nodes, the instance has 4");
    eddy_future_destroy(f);

    /* a malformed answer */
    assert_int_equal(eddy_jobspec_set_name(js, "badid"), 0);
    assert_non_null(f = eddy_job_submit(h, js));
    errno = 0;
    assert_int_equal(eddy_job_submit_get_id(f, &id), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(eddy_future_error_string(f), "id"));
    eddy_future_destroy(f);

    /* a description that cannot be encoded is refused before sending */
    assert_int_equal(eddy_jobspec_set_tasks_per_node(js, 2), 0);
    errno = 0;
    assert_null(eddy_job_submit(h, js));
    assert_int_equal(errno, EINVAL);
    eddy_jobspec_destroy(js);

    /* raw JSON goes as is */
    errno = 0;
    assert_null(eddy_job_submit_json(h, "[1]"));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_submit_json(h, NULL));
    assert_int_equal(errno, EINVAL);
    assert_non_null(f = eddy_job_submit_json(h, "{\"version\":1}"));
    assert_int_equal(eddy_job_submit_get_id(f, &id), 0);
    assert_int_equal(id, 42);
    eddy_future_destroy(f);
    req = last_request(fk, "job.submit");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(req, "jobspec"), "version")),
                     1);
    json_decref(req);
    eddy_close(h);
}

static void test_wait(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *f;
    const char *exc = "unset";
    json_t *req;
    int status = 77;

    errno = 0;
    assert_null(eddy_job_wait(NULL, 1));
    assert_int_equal(errno, EINVAL);

    assert_non_null(f = eddy_job_wait(h, 1));
    assert_int_equal(eddy_job_wait_get(f, &status, &exc), 0);
    assert_int_equal(status, 3);
    assert_null(exc);
    eddy_future_destroy(f);
    req = last_request(fk, "job.wait");
    assert_int_equal(json_integer_value(json_object_get(req, "id")), 1);
    json_decref(req);

    assert_non_null(f = eddy_job_wait(h, 2));
    assert_int_equal(eddy_job_wait_get(f, &status, &exc), 0);
    assert_int_equal(status, -1);
    assert_string_equal(exc, "canceled by user");
    assert_int_equal(eddy_job_wait_get(f, &status, NULL), 0);
    eddy_future_destroy(f);

    assert_non_null(f = eddy_job_wait(h, 4));
    assert_int_equal(eddy_job_wait_get(f, &status, &exc), 0);
    assert_int_equal(status, -1);
    assert_string_equal(exc, "exec");
    eddy_future_destroy(f);

    assert_non_null(f = eddy_job_wait(h, 3));
    status = 77;
    errno = 0;
    assert_int_equal(eddy_job_wait_get(f, &status, &exc), -1);
    assert_int_equal(errno, EPROTO);
    assert_int_equal(status, 77);
    assert_non_null(strstr(eddy_future_error_string(f), "status"));
    eddy_future_destroy(f);

    assert_non_null(f = eddy_job_wait(h, 99));
    errno = 0;
    assert_int_equal(eddy_job_wait_get(f, &status, &exc), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(eddy_future_error_string(f), "job 99: no such job");
    eddy_future_destroy(f);

    errno = 0;
    assert_int_equal(eddy_job_wait_get(NULL, &status, &exc), -1);
    assert_int_equal(errno, EINVAL);
    eddy_close(h);
}

/* ---- info and list ---------------------------------------------------- */

static void test_info(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct eddy_taskinfo t;
    eddy_jobinfo_t *info;
    eddy_future_t *f;
    const char *host = NULL;
    uint32_t rank = 0;
    int status = 0;

    assert_non_null(f = eddy_job_info(h, 1));
    assert_non_null(info = eddy_job_info_get(f));
    eddy_future_destroy(f); /* the snapshot outlives the future */
    assert_int_equal(eddy_jobinfo_id(info), 1);
    assert_string_equal(eddy_jobinfo_state(info), "INACTIVE");
    assert_string_equal(eddy_jobinfo_name(info), "hostname");
    assert_string_equal(eddy_jobinfo_reason(info), "");
    assert_int_equal(eddy_jobinfo_ntasks(info), 2);
    assert_int_equal(eddy_jobinfo_nnodes(info), 2);
    assert_int_equal(eddy_jobinfo_status(info, &status), 0);
    assert_int_equal(status, 3);
    assert_string_equal(eddy_jobinfo_exception(info), "task 1 killed");
    assert_true(eddy_jobinfo_time(info, "submit") == 100.5);
    assert_true(eddy_jobinfo_time(info, "alloc") == 101);
    assert_true(eddy_jobinfo_time(info, "start") == 102);
    assert_true(eddy_jobinfo_time(info, "finish") == 103);
    assert_true(eddy_jobinfo_time(info, "clean") == 104);
    assert_true(eddy_jobinfo_time(info, "bogus") == 0);
    assert_int_equal(eddy_jobinfo_node(info, 1, &rank, &host), 0);
    assert_int_equal(rank, 5);
    assert_string_equal(host, "n5");
    errno = 0;
    assert_int_equal(eddy_jobinfo_node(info, 2, &rank, &host), -1);
    assert_int_equal(errno, ERANGE);
    /* tasks by rank, whatever order they came in */
    assert_int_equal(eddy_jobinfo_task(info, 0, &t), 0);
    assert_int_equal(t.rank, 0);
    assert_int_equal(t.node, 0);
    assert_string_equal(t.hostname, "n0");
    assert_int_equal(t.pid, 1234);
    assert_int_equal(t.appnum, 0);
    assert_string_equal(t.executable, "/bin/a");
    assert_false(t.exited);
    assert_int_equal(eddy_jobinfo_task(info, 1, &t), 0);
    assert_int_equal(t.rank, 1);
    assert_int_equal(t.node, 5);
    assert_int_equal(t.pid, 4321);
    assert_int_equal(t.appnum, 1);
    assert_string_equal(t.executable, "/bin/b");
    assert_true(t.exited);
    assert_int_equal(t.status, 137);
    errno = 0;
    assert_int_equal(eddy_jobinfo_task(info, 2, &t), -1);
    assert_int_equal(errno, ERANGE);
    assert_non_null(strstr(eddy_jobinfo_json(info), "\"t_clean\":104"));
    eddy_jobinfo_destroy(info);

    /* a queued job */
    assert_non_null(f = eddy_job_info(h, 3));
    assert_non_null(info = eddy_job_info_get(f));
    assert_string_equal(eddy_jobinfo_state(info), "SCHED");
    assert_string_equal(eddy_jobinfo_reason(info), "not enough cores");
    errno = 0;
    assert_int_equal(eddy_jobinfo_status(info, &status), -1);
    assert_int_equal(errno, ENODATA);
    assert_null(eddy_jobinfo_exception(info));
    assert_true(eddy_jobinfo_time(info, "start") == 0);
    errno = 0;
    assert_int_equal(eddy_jobinfo_task(info, 0, &t), -1);
    assert_int_equal(errno, ERANGE);
    errno = 0;
    assert_int_equal(eddy_jobinfo_node(info, 0, NULL, NULL), -1);
    assert_int_equal(errno, ERANGE);
    eddy_jobinfo_destroy(info);
    eddy_future_destroy(f);

    /* unknown job */
    assert_non_null(f = eddy_job_info(h, 99));
    errno = 0;
    assert_null(eddy_job_info_get(f));
    assert_int_equal(errno, ENOENT);
    assert_string_equal(eddy_future_error_string(f), "job 99: no such job");
    eddy_future_destroy(f);

    /* malformed answers */
    static const char *const why[NBAD_INFO] = {
        "id", "state", "listed twice", "entries", "pid", "nodes[0]",
    };
    for (size_t i = 0; i < NBAD_INFO; i++) {
        assert_non_null(f = eddy_job_info(h, 10 + i));
        errno = 0;
        assert_null(eddy_job_info_get(f));
        assert_int_equal(errno, EPROTO);
        if (!strstr(eddy_future_error_string(f), why[i]))
            fail_msg("bad_info[%zu]: '%s' does not mention '%s'", i,
                     eddy_future_error_string(f), why[i]);
        eddy_future_destroy(f);
    }

    /* accessors with NULL */
    assert_int_equal(eddy_jobinfo_id(NULL), 0);
    assert_null(eddy_jobinfo_state(NULL));
    assert_int_equal(eddy_jobinfo_ntasks(NULL), 0);
    errno = 0;
    assert_int_equal(eddy_jobinfo_task(NULL, 0, &t), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_info_get(NULL));
    assert_int_equal(errno, EINVAL);
    eddy_jobinfo_destroy(NULL);
    eddy_close(h);
}

static void test_list(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    const eddy_jobinfo_t *e;
    eddy_joblist_t *l;
    eddy_future_t *f;
    json_t *req;
    int status = 9;

    errno = 0;
    assert_null(eddy_job_list(h, 4));
    assert_int_equal(errno, EINVAL);

    assert_non_null(f = eddy_job_list(h, EDDY_JOB_LIST_ALL));
    assert_non_null(l = eddy_job_list_get(f));
    eddy_future_destroy(f);
    req = last_request(fk, "job.list");
    assert_true(json_is_true(json_object_get(req, "all")));
    json_decref(req);
    assert_int_equal(eddy_joblist_count(l), 2);
    assert_non_null(e = eddy_joblist_at(l, 0));
    assert_int_equal(eddy_jobinfo_id(e), 1);
    assert_string_equal(eddy_jobinfo_name(e), "a");
    assert_int_equal(eddy_jobinfo_status(e, &status), 0);
    assert_int_equal(status, 0);
    assert_true(eddy_jobinfo_time(e, "submit") == 100.5);
    assert_non_null(e = eddy_joblist_at(l, 1));
    assert_true(eddy_jobinfo_id(e) == 9007199254740000ULL);
    assert_string_equal(eddy_jobinfo_state(e), "SCHED");
    assert_string_equal(eddy_jobinfo_reason(e), "waiting");
    assert_int_equal(eddy_jobinfo_ntasks(e), 4);
    assert_int_equal(eddy_jobinfo_status(e, &status), -1);
    assert_non_null(strstr(eddy_jobinfo_json(e), "\"waiting\""));
    errno = 0;
    assert_null(eddy_joblist_at(l, 2));
    assert_int_equal(errno, ERANGE);
    eddy_joblist_destroy(l);

    assert_non_null(f = eddy_job_list(h, 0));
    assert_non_null(l = eddy_job_list_get(f));
    req = last_request(fk, "job.list");
    assert_true(json_is_false(json_object_get(req, "all")));
    json_decref(req);
    assert_int_equal(eddy_joblist_count(l), 1);
    eddy_joblist_destroy(l);
    eddy_future_destroy(f);
    eddy_joblist_destroy(NULL);
    eddy_close(h);
}

/* ---- control ---------------------------------------------------------- */

static void test_control(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *f;
    json_t *req;

    /* signal */
    errno = 0;
    assert_null(eddy_job_signal(h, 1, 0, NULL));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_signal(h, 1, SIGTERM, "3-1"));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_signal(NULL, 1, SIGTERM, NULL));
    assert_int_equal(errno, EINVAL);
    assert_non_null(f = eddy_job_signal(h, 5, SIGUSR1, "0-3,8"));
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    eddy_future_destroy(f);
    req = last_request(fk, "job.kill");
    assert_int_equal(json_integer_value(json_object_get(req, "id")), 5);
    assert_int_equal(json_integer_value(json_object_get(req, "signum")),
                     SIGUSR1);
    assert_string_equal(json_string_value(json_object_get(req, "ranks")),
                        "0-3,8");
    json_decref(req);
    assert_non_null(f = eddy_job_signal(h, 6, SIGKILL, NULL));
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    eddy_future_destroy(f);
    req = last_request(fk, "job.kill");
    assert_null(json_object_get(req, "ranks"));
    assert_int_equal(json_integer_value(json_object_get(req, "signum")),
                     SIGKILL);
    json_decref(req);

    /* cancel */
    errno = 0;
    assert_null(eddy_job_cancel(NULL, 1));
    assert_int_equal(errno, EINVAL);
    assert_non_null(f = eddy_job_cancel(h, 7));
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    eddy_future_destroy(f);
    req = last_request(fk, "job.cancel");
    assert_int_equal(json_integer_value(json_object_get(req, "id")), 7);
    json_decref(req);

    /* stdin: body and raw payload */
    errno = 0;
    assert_null(eddy_job_stdin(h, 1, NULL, NULL, 3, false));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_stdin(h, 1, "x", "abc", 3, false));
    assert_int_equal(errno, EINVAL);
    assert_non_null(f = eddy_job_stdin(h, 8, NULL, "abc", 3, false));
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    eddy_future_destroy(f);
    req = last_request(fk, "job-io.stdin");
    assert_int_equal(json_integer_value(json_object_get(req, "id")), 8);
    assert_string_equal(json_string_value(json_object_get(req, "ranks")),
                        "all");
    assert_true(json_is_false(json_object_get(req, "eof")));
    json_decref(req);
    pthread_mutex_lock(&fk->lock);
    assert_int_equal(fk->last_len, 3);
    assert_memory_equal(fk->last_payload, "abc", 3);
    pthread_mutex_unlock(&fk->lock);
    assert_non_null(f = eddy_job_stdin(h, 8, "2", NULL, 0, true));
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    eddy_future_destroy(f);
    req = last_request(fk, "job-io.stdin");
    assert_string_equal(json_string_value(json_object_get(req, "ranks")), "2");
    assert_true(json_is_true(json_object_get(req, "eof")));
    json_decref(req);
    pthread_mutex_lock(&fk->lock);
    assert_int_equal(fk->last_len, 0);
    pthread_mutex_unlock(&fk->lock);
    eddy_close(h);
}

/* ---- startup barriers ------------------------------------------------ */

/* The "stop" shell option of an encoded description, or NULL. */
static const char *stop_option(json_t *o)
{
    json_t *v = json_object_get(
        json_object_get(
            json_object_get(
                json_object_get(json_object_get(o, "attributes"), "system"),
                "shell"),
            "options"),
        "stop");

    return json_string_value(v);
}

static void test_jobspec_stop(void **state)
{
    eddy_jobspec_t *js = eddy_jobspec_create();
    char *const argv[] = {(char *)"true"};
    static const char *const modes[] = {"fork", "exec", "init"};
    char mode[8];
    json_t *o;

    assert_non_null(js);
    assert_int_equal(eddy_jobspec_add_group(js, 1, argv, 2), 0);
    /* none by default */
    o = encode_ok(js);
    assert_null(stop_option(o));
    json_decref(o);
    for (size_t i = 0; i < 3; i++) {
        /* the mode is copied, not borrowed */
        snprintf(mode, sizeof(mode), "%s", modes[i]);
        assert_int_equal(eddy_jobspec_set_stop(js, mode), 0);
        memset(mode, 0, sizeof(mode));
        o = encode_ok(js);
        assert_non_null(stop_option(o));
        assert_string_equal(stop_option(o), modes[i]);
        json_decref(o);
    }
    /* a bad mode is refused and leaves the old one */
    errno = 0;
    assert_int_equal(eddy_jobspec_set_stop(js, "start"), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_set_stop(js, ""), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_set_stop(js, "FORK"), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_jobspec_set_stop(NULL, "fork"), -1);
    assert_int_equal(errno, EINVAL);
    o = encode_ok(js);
    assert_string_equal(stop_option(o), "init");
    json_decref(o);
    /* NULL removes it */
    assert_int_equal(eddy_jobspec_set_stop(js, NULL), 0);
    o = encode_ok(js);
    assert_null(stop_option(o));
    json_decref(o);
    eddy_jobspec_destroy(js);
}

static void test_barrier(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_jobinfo_t *info;
    eddy_future_t *f;
    const char *where = NULL;
    uint32_t held = 0;
    bool released = true;
    json_t *req;

    /* held at exec */
    assert_non_null(f = eddy_job_info(h, 20));
    assert_non_null(info = eddy_job_info_get(f));
    eddy_future_destroy(f);
    assert_int_equal(eddy_jobinfo_barrier(info, &where, &held, &released), 0);
    assert_string_equal(where, "exec");
    assert_int_equal(held, 4);
    assert_false(released);
    assert_int_equal(eddy_jobinfo_barrier(info, NULL, NULL, NULL), 0);
    eddy_jobinfo_destroy(info);

    /* no barrier: absent (job 1) or null (job 25) */
    assert_non_null(f = eddy_job_info(h, 1));
    assert_non_null(info = eddy_job_info_get(f));
    eddy_future_destroy(f);
    errno = 0;
    assert_int_equal(eddy_jobinfo_barrier(info, &where, &held, &released), -1);
    assert_int_equal(errno, ENODATA);
    eddy_jobinfo_destroy(info);
    assert_non_null(f = eddy_job_info(h, 25));
    assert_non_null(info = eddy_job_info_get(f));
    eddy_future_destroy(f);
    errno = 0;
    assert_int_equal(eddy_jobinfo_barrier(info, NULL, NULL, NULL), -1);
    assert_int_equal(errno, ENODATA);
    eddy_jobinfo_destroy(info);
    errno = 0;
    assert_int_equal(eddy_jobinfo_barrier(NULL, &where, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);

    /* malformed barriers are protocol errors naming the field */
    for (json_int_t id = 21; id <= 24; id++) {
        assert_non_null(f = eddy_job_info(h, (eddy_jobid_t)id));
        errno = 0;
        assert_null(eddy_job_info_get(f));
        assert_int_equal(errno, EPROTO);
        assert_non_null(strstr(eddy_future_error_string(f), "barrier"));
        eddy_future_destroy(f);
    }

    /* release */
    errno = 0;
    assert_null(eddy_job_release(NULL, 20));
    assert_int_equal(errno, EINVAL);
    assert_non_null(f = eddy_job_release(h, 20));
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    eddy_future_destroy(f);
    req = last_request(fk, "job.release");
    assert_int_equal(json_integer_value(json_object_get(req, "id")), 20);
    assert_int_equal(json_object_size(req), 1);
    json_decref(req);
    assert_non_null(f = eddy_job_release(h, 1));
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(
        strstr(eddy_future_error_string(f), "not held at a startup barrier"));
    eddy_future_destroy(f);
    assert_non_null(f = eddy_job_release(h, 99));
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ENOENT);
    eddy_future_destroy(f);
    /* the MPIR starter's release says "untraced" */
    errno = 0;
    assert_null(eddy_job_release_untraced(NULL, 20));
    assert_int_equal(errno, EINVAL);
    assert_non_null(f = eddy_job_release_untraced(h, 20));
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    eddy_future_destroy(f);
    req = last_request(fk, "job.release");
    assert_int_equal(json_integer_value(json_object_get(req, "id")), 20);
    assert_true(json_is_true(json_object_get(req, "untraced")));
    json_decref(req);
    eddy_close(h);
}

/* ---- proctable (eddy/mpir.h) ------------------------------------------ */

static void test_proctable(void **state)
{
    struct fake *fk = *state;
    eddy_error_t err;
    eddy_t *h = eddy_open(fk->uri, 0, &err);
    eddy_future_t *f;
    eddy_proctable_t *pt;
    struct eddy_procdesc d;
    json_t *req;

    assert_non_null(h);
    errno = 0;
    assert_null(eddy_job_proctable(NULL, 30));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_proctable_get(NULL));
    assert_int_equal(errno, EINVAL);

    /* a good table, by rank, outliving its future */
    assert_non_null(f = eddy_job_proctable(h, 30));
    assert_non_null(pt = eddy_job_proctable_get(f));
    eddy_future_destroy(f);
    req = last_request(fk, "proctable.get");
    assert_int_equal(json_integer_value(json_object_get(req, "id")), 30);
    json_decref(req);
    assert_int_equal(eddy_proctable_size(pt), 3);
    assert_int_equal(eddy_proctable_entry(pt, 0, &d), 0);
    assert_int_equal(d.rank, 0);
    assert_string_equal(d.hostname, "n0");
    assert_string_equal(d.executable, "/bin/a");
    assert_int_equal(d.pid, 1234);
    assert_int_equal(d.broker_rank, 0);
    assert_int_equal(d.appnum, 0);
    assert_int_equal(eddy_proctable_entry(pt, 2, &d), 0);
    assert_int_equal(d.rank, 2);
    assert_string_equal(d.hostname, "n5");
    assert_string_equal(d.executable, "/bin/b");
    assert_int_equal(d.pid, 4000);
    assert_int_equal(d.broker_rank, 5);
    assert_int_equal(d.appnum, 1);
    errno = 0;
    assert_int_equal(eddy_proctable_entry(pt, 3, &d), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_proctable_entry(NULL, 0, &d), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(eddy_proctable_size(NULL), 0);
    eddy_proctable_destroy(pt);
    eddy_proctable_destroy(NULL);

    /* a payload that is not a table, a table with a hole: EPROTO */
    for (eddy_jobid_t id = 31; id <= 32; id++) {
        assert_non_null(f = eddy_job_proctable(h, id));
        errno = 0;
        assert_null(eddy_job_proctable_get(f));
        assert_int_equal(errno, EPROTO);
        assert_non_null(strstr(eddy_future_error_string(f),
                               "malformed response to proctable.get"));
        eddy_future_destroy(f);
    }
    /* the service's error passes through */
    assert_non_null(f = eddy_job_proctable(h, 33));
    errno = 0;
    assert_null(eddy_job_proctable_get(f));
    assert_int_equal(errno, EAGAIN);
    assert_non_null(
        strstr(eddy_future_error_string(f), "have not all started"));
    eddy_future_destroy(f);
    eddy_close(h);
}

/* ---- eventlog --------------------------------------------------------- */

static void test_eventlog(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    const char *name = NULL, *ctx = NULL;
    eddy_future_t *f;
    double ts = 0;
    json_t *req;

    errno = 0;
    assert_null(eddy_job_event_watch(h, 1, 2));
    assert_int_equal(errno, EINVAL);

    assert_non_null(f = eddy_job_event_watch(h, 1, EDDY_JOB_EVENT_FOLLOW));
    assert_int_equal(eddy_job_event_get(f, &ts, &name, &ctx), 0);
    assert_true(ts == 1.5);
    assert_string_equal(name, "submit");
    {
        json_t *c = json_loads(ctx, 0, NULL);
        assert_non_null(c);
        assert_int_equal(json_integer_value(json_object_get(c, "userid")), 7);
        json_decref(c);
    }
    /* same entry again: same answer */
    assert_int_equal(eddy_job_event_get(f, NULL, NULL, &ctx), 0);
    assert_non_null(strstr(ctx, "userid"));
    req = last_request(fk, "job.eventlog");
    assert_true(json_is_true(json_object_get(req, "follow")));
    assert_int_equal(json_integer_value(json_object_get(req, "id")), 1);
    json_decref(req);
    eddy_future_reset(f);
    assert_int_equal(eddy_job_event_get(f, &ts, &name, &ctx), 0);
    assert_true(ts == 2);
    assert_string_equal(name, "start");
    assert_string_equal(ctx, "{}");
    eddy_future_reset(f);
    assert_int_equal(eddy_job_event_get(f, &ts, &name, &ctx), 0);
    assert_string_equal(name, "clean");
    eddy_future_reset(f);
    errno = 0;
    assert_int_equal(eddy_job_event_get(f, &ts, &name, &ctx), -1);
    assert_int_equal(errno, ENODATA);
    eddy_future_destroy(f);

    /* a broken entry; unknown job */
    assert_non_null(f = eddy_job_event_watch(h, 2, 0));
    for (int i = 0; i < 2; i++) {
        assert_int_equal(eddy_job_event_get(f, &ts, &name, &ctx), 0);
        eddy_future_reset(f);
    }
    errno = 0;
    assert_int_equal(eddy_job_event_get(f, &ts, &name, &ctx), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(eddy_future_error_string(f), "timestamp"));
    eddy_future_destroy(f);
    assert_non_null(f = eddy_job_event_watch(h, 99, 0));
    errno = 0;
    assert_int_equal(eddy_job_event_get(f, &ts, &name, &ctx), -1);
    assert_int_equal(errno, ENOENT);
    eddy_future_reset(f);
    errno = 0;
    assert_int_equal(eddy_job_event_get(f, &ts, &name, &ctx), -1);
    assert_int_equal(errno, ENODATA);
    eddy_future_destroy(f);

    /* not an eventlog future */
    assert_non_null(f = eddy_job_cancel(h, 1));
    errno = 0;
    assert_int_equal(eddy_job_event_get(f, &ts, &name, &ctx), -1);
    assert_int_equal(errno, EINVAL);
    eddy_future_destroy(f);
    eddy_close(h);
}

/* ---- attach ----------------------------------------------------------- */

struct output {
    char log[512];
    int calls;
    eddy_future_t *destroy; /* destroy this from the first callback */
};

static void output_cb(eddy_jobid_t id,
                      uint32_t rank,
                      int stream,
                      const void *data,
                      size_t len,
                      bool eof,
                      void *arg)
{
    struct output *o = arg;
    size_t n = strlen(o->log);

    snprintf(o->log + n, sizeof(o->log) - n, "[%llu %u %s %s%.*s]",
             (unsigned long long)id, rank,
             stream == EDDY_JOB_STDOUT   ? "out"
             : stream == EDDY_JOB_STDERR ? "err"
                                         : "?",
             eof ? "EOF" : "", (int)len, (const char *)data);
    o->calls++;
    if (o->destroy) {
        eddy_future_destroy(o->destroy);
        o->destroy = NULL;
    }
}

static void attach_then_cb(eddy_future_t *f, void *arg)
{
    int *done = arg;

    *done = eddy_rpc_get(f, NULL) == 0 ? 1 : -1;
}

static void test_attach(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct output out;
    eddy_future_t *f;
    int done = 0;

    memset(&out, 0, sizeof(out));
    errno = 0;
    assert_null(eddy_job_attach(NULL, 1, output_cb, &out));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_attach(h, 1, NULL, &out));
    assert_int_equal(errno, EINVAL);

    /* everything, in order, then success */
    assert_non_null(f = eddy_job_attach(h, 1, output_cb, &out));
    assert_int_equal(eddy_future_wait_for(f, 10.0 * timeout_scale), 0);
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    assert_string_equal(out.log, "[1 0 out hello\n][1 1 err oops]"
                                 "[1 0 out world\n][1 0 out EOF][1 1 err EOF]");
    assert_int_equal(eddy_job_attach_dropped(f), 100);
    assert_int_equal(eddy_rpc_get(f, NULL), 0); /* as often as asked */
    eddy_future_destroy(f);

    /* asynchronously, with a continuation run by uv_run() */
    memset(&out, 0, sizeof(out));
    assert_non_null(f = eddy_job_attach(h, 1, output_cb, &out));
    assert_int_equal(
        eddy_future_then(f, 10.0 * timeout_scale, attach_then_cb, &done), 0);
    uv_run(eddy_get_loop(h), UV_RUN_DEFAULT);
    assert_int_equal(done, 1);
    assert_int_equal(out.calls, 5);
    eddy_future_destroy(f);

    /* unknown job: the service's error */
    memset(&out, 0, sizeof(out));
    assert_non_null(f = eddy_job_attach(h, 99, output_cb, &out));
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(eddy_future_error_string(f), "job 99: no such job");
    assert_int_equal(out.calls, 0);
    assert_int_equal(eddy_job_attach_dropped(f), 0);
    eddy_future_destroy(f);

    /* a malformed record fails the attach and cancels the stream */
    assert_non_null(f = eddy_job_attach(h, 3, output_cb, &out));
    errno = 0;
    assert_int_equal(eddy_rpc_get(f, NULL), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(eddy_future_error_string(f), "stream"));
    eddy_future_destroy(f);
    sync_fake(h);
    pthread_mutex_lock(&fk->lock);
    assert_int_equal(fk->cancels_ok, 1);
    pthread_mutex_unlock(&fk->lock);

    /* not an attach future */
    assert_non_null(f = eddy_job_cancel(h, 1));
    assert_int_equal(eddy_job_attach_dropped(f), 0);
    eddy_future_destroy(f);
    assert_int_equal(eddy_job_attach_dropped(NULL), 0);
    eddy_close(h);
}

static void test_attach_detach(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct output out;
    eddy_future_t *f;

    memset(&out, 0, sizeof(out));
    /* live output, then detach by destroying the future */
    assert_non_null(f = eddy_job_attach(h, 2, output_cb, &out));
    errno = 0;
    assert_int_equal(eddy_future_wait_for(f, 0.3), -1);
    assert_int_equal(errno, ETIMEDOUT);
    assert_string_equal(out.log, "[2 0 out live\n]");
    assert_false(eddy_future_is_ready(f));
    eddy_future_destroy(f);
    sync_fake(h);
    pthread_mutex_lock(&fk->lock);
    assert_int_equal(fk->cancels_ok, 1);
    assert_int_equal(fk->cancels_bad, 0);
    pthread_mutex_unlock(&fk->lock);

    /* detach from inside the output callback */
    memset(&out, 0, sizeof(out));
    assert_non_null(f = eddy_job_attach(h, 2, output_cb, &out));
    out.destroy = f;
    /* not a wait on 'f' (it disappears), and no other request: the fake
     * reads the cancel next */
    while (out.calls == 0)
        uv_run(eddy_get_loop(h), UV_RUN_ONCE);
    assert_int_equal(out.calls, 1);
    sync_fake(h);
    pthread_mutex_lock(&fk->lock);
    assert_int_equal(fk->cancels_ok, 2);
    pthread_mutex_unlock(&fk->lock);

    /* closing the handle with an attach in progress frees everything */
    memset(&out, 0, sizeof(out));
    assert_non_null(f = eddy_job_attach(h, 2, output_cb, &out));
    assert_non_null(eddy_job_event_watch(h, 1, 0));
    eddy_close(h);
}

struct counter {
    size_t bytes;
    int calls;
};

static void count_cb(eddy_jobid_t id,
                     uint32_t rank,
                     int stream,
                     const void *data,
                     size_t len,
                     bool eof,
                     void *arg)
{
    struct counter *c = arg;

    c->bytes += len;
    c->calls++;
}

/* The library credits what it delivered, a MiB at a time, naming the
 * attach by the key it sent with it. */
static void test_attach_credit(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct counter c = {0};
    eddy_future_t *f;
    json_t *req;
    json_int_t key = -1;

    assert_non_null(f = eddy_job_attach(h, 5, count_cb, &c));
    assert_int_equal(eddy_future_wait_for(f, 10.0 * timeout_scale), 0);
    assert_int_equal(eddy_rpc_get(f, NULL), 0);
    assert_int_equal(c.bytes, 5 * CHUNK);
    assert_int_equal(c.calls, 5);
    req = last_request(fk, "job-io.attach");
    assert_int_equal(json_unpack(req, "{s:I}", "key", &key), 0);
    assert_true(key >= 0 && key < ((json_int_t)1 << 53));
    json_decref(req);
    eddy_future_destroy(f);
    sync_fake(h);
    pthread_mutex_lock(&fk->lock);
    assert_int_equal(fk->credits_ok, 2);
    assert_int_equal(fk->credits_bad, 0);
    assert_int_equal(fk->credit_bytes, 2 * 1024 * 1024);
    pthread_mutex_unlock(&fk->lock);
    eddy_close(h);
}

int main(void)
{
    const char *s = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobspec_encode),
        cmocka_unit_test(test_jobspec_mpmd),
        cmocka_unit_test(test_jobspec_errors),
        cmocka_unit_test_setup_teardown(test_submit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_info, setup, teardown),
        cmocka_unit_test_setup_teardown(test_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_control, setup, teardown),
        cmocka_unit_test(test_jobspec_stop),
        cmocka_unit_test_setup_teardown(test_barrier, setup, teardown),
        cmocka_unit_test_setup_teardown(test_proctable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eventlog, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach_detach, setup, teardown),
        cmocka_unit_test_setup_teardown(test_attach_credit, setup, teardown),
    };

    if (s && atoi(s) > 0)
        timeout_scale = atoi(s);
    signal(SIGPIPE, SIG_IGN);
    alarm((unsigned)(60 * timeout_scale));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
