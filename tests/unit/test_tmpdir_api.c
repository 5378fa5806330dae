/* test_tmpdir_api.c - the job tmpdir API (eddy/tmpdir.h) against a fake
 * job service.
 *
 * As in test_job_api.c: a fake broker in a thread listens on a unix
 * socket in a mkdtemp directory, accepts one client, greets it and
 * answers job.tmpdir with canned responses chosen by job ID (plain
 * blocking I/O and the msg codec), keeping the last request so the tests
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

#include "eddy/core.h"
#include "eddy/tmpdir.h"
#include "src/common/msg.h"
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
    json_t *last_body;
    uint32_t last_rank;
};

/* Job 1: five tasks on three nodes, whose order is not the ranks'. */
#define GOOD_1                                                                 \
    "{\"id\":1,\"ntasks\":5,\"nodes\":["                                       \
    "{\"rank\":0,\"hostname\":\"n0\",\"path\":\"/tmp/eddy-a-r0-j1-x\"},"       \
    "{\"rank\":7,\"hostname\":\"n7\",\"path\":\"/scratch/eddy-a-r7-j1-y\"},"   \
    "{\"rank\":3,\"hostname\":\"n3\",\"path\":\"/tmp/eddy-a-r3-j1-z\"}],"      \
    "\"tasks\":[[0,2,0],[2,1,2],[3,2,1]]}"

/* Job 2: no tasks, no nodes (valid, if odd). */
#define GOOD_2 "{\"id\":2,\"ntasks\":0,\"nodes\":[],\"tasks\":[]}"

/* Malformed answers, for jobs 10, 11, ... */
static const char *const bad[] = {
    /* 10 */ "{\"id\":10,\"ntasks\":1,\"nodes\":[\"x\"],\"tasks\":[[0,1,0]]}",
    /* 11 */ "{}",
    /* 12 */ "{\"id\":-1,\"ntasks\":0,\"nodes\":[],\"tasks\":[]}",
    /* 13 */ "{\"id\":13,\"ntasks\":\"2\",\"nodes\":[],\"tasks\":[]}",
    /* 14 */ "{\"id\":14,\"ntasks\":1,\"nodes\":{},\"tasks\":[[0,1,0]]}",
    /* 15: relative path */
    "{\"id\":15,\"ntasks\":1,\"nodes\":[{\"rank\":0,\"hostname\":\"h\","
    "\"path\":\"tmp/x\"}],\"tasks\":[[0,1,0]]}",
    /* 16: no hostname */
    "{\"id\":16,\"ntasks\":1,\"nodes\":[{\"rank\":0,\"path\":\"/x\"}],"
    "\"tasks\":[[0,1,0]]}",
    /* 17: negative node rank */
    "{\"id\":17,\"ntasks\":1,\"nodes\":[{\"rank\":-2,\"hostname\":\"h\","
    "\"path\":\"/x\"}],\"tasks\":[[0,1,0]]}",
    /* 18: a gap between runs */
    "{\"id\":18,\"ntasks\":4,\"nodes\":[{\"rank\":0,\"hostname\":\"h\","
    "\"path\":\"/x\"}],\"tasks\":[[0,1,0],[2,2,0]]}",
    /* 19: runs overlap */
    "{\"id\":19,\"ntasks\":3,\"nodes\":[{\"rank\":0,\"hostname\":\"h\","
    "\"path\":\"/x\"}],\"tasks\":[[0,2,0],[1,2,0]]}",
    /* 20: runs stop short of ntasks */
    "{\"id\":20,\"ntasks\":4,\"nodes\":[{\"rank\":0,\"hostname\":\"h\","
    "\"path\":\"/x\"}],\"tasks\":[[0,3,0]]}",
    /* 21: runs go past ntasks */
    "{\"id\":21,\"ntasks\":2,\"nodes\":[{\"rank\":0,\"hostname\":\"h\","
    "\"path\":\"/x\"}],\"tasks\":[[0,3,0]]}",
    /* 22: node index out of range */
    "{\"id\":22,\"ntasks\":2,\"nodes\":[{\"rank\":0,\"hostname\":\"h\","
    "\"path\":\"/x\"}],\"tasks\":[[0,2,1]]}",
    /* 23: a run of 0 tasks */
    "{\"id\":23,\"ntasks\":2,\"nodes\":[{\"rank\":0,\"hostname\":\"h\","
    "\"path\":\"/x\"}],\"tasks\":[[0,0,0],[0,2,0]]}",
    /* 24: a run that is not a triple */
    "{\"id\":24,\"ntasks\":2,\"nodes\":[{\"rank\":0,\"hostname\":\"h\","
    "\"path\":\"/x\"}],\"tasks\":[[0,2]]}",
    /* 25: ranks near UINT32_MAX must not wrap around */
    "{\"id\":25,\"ntasks\":4294967295,\"nodes\":[{\"rank\":0,\"hostname\":"
    "\"h\",\"path\":\"/x\"}],\"tasks\":[[0,4294967295,0],[4294967295,1,0]]}",
};
#define NBAD (sizeof(bad) / sizeof(bad[0]))

/* what the tests expect in each bad case's message */
static const char *const bad_why[NBAD] = {
    "nodes[0].rank: expected an integer",
    "id: expected an integer",
    "id: expected an integer",
    "ntasks: expected an integer",
    "nodes: expected an array",
    "nodes[0].path: expected an absolute path",
    "nodes[0].hostname: expected a string",
    "nodes[0].rank: expected an integer",
    "tasks[1]: starts at rank 2, not 1",
    "tasks[1]: starts at rank 1, not 2",
    "tasks: ranks 0-2 given for 4 tasks",
    "tasks: ranks 0-2 given for 2 tasks",
    "tasks[0]: node index 1, but the job has 1 nodes",
    "tasks[0]: a run of 0 tasks",
    "tasks[0]: expected [first rank, count, node index]",
    "tasks: ranks 0-4294967295 given for 4294967295 tasks",
};

enum { BIG_ID = 30, BIG_NODES = 128, BIG_PER_NODE = 128 };

static int send_body(int fd, const msg_t *req, json_t *body)
{
    msg_t *m = msg_create(MSG_RESPONSE, req->topic, body, NULL, 0);

    if (!m)
        return -1;
    m->matchtag = req->matchtag;
    return wire_send_msg(fd, m);
}

static int respond_json(int fd, const msg_t *req, const char *text)
{
    json_t *o = json_loads(text, JSON_DECODE_ANY, NULL);

    return o ? send_body(fd, req, o) : -1;
}

static int respond_error(int fd, const msg_t *req, int errnum, const char *s)
{
    msg_t *m = msg_create_error(req, errnum, s);

    return m ? wire_send_msg(fd, m) : -1;
}

/* Job BIG_ID: 16384 tasks, 128 per node, as the job manager sends it. */
static int respond_big(int fd, const msg_t *req)
{
    json_t *nodes = json_array(), *tasks = json_array();
    char path[64], host[16];

    for (int i = 0; i < BIG_NODES; i++) {
        snprintf(path, sizeof(path), "/tmp/eddy-big-r%d-j30-abcdef", i + 1);
        snprintf(host, sizeof(host), "node%03d", i + 1);
        json_array_append_new(nodes, json_pack("{s:i s:s s:s}", "rank", i + 1,
                                               "hostname", host, "path", path));
        json_array_append_new(
            tasks, json_pack("[i i i]", i * BIG_PER_NODE, BIG_PER_NODE, i));
    }
    return send_body(fd, req,
                     json_pack("{s:i s:i s:o s:o}", "id", BIG_ID, "ntasks",
                               BIG_NODES * BIG_PER_NODE, "nodes", nodes,
                               "tasks", tasks));
}

static int serve_one(struct fake *fk, int fd, const msg_t *req)
{
    json_int_t id = -1;

    pthread_mutex_lock(&fk->lock);
    snprintf(fk->last_topic, sizeof(fk->last_topic), "%s", req->topic);
    json_decref(fk->last_body);
    fk->last_body = req->body ? json_incref(req->body) : NULL;
    fk->last_rank = req->rank;
    pthread_mutex_unlock(&fk->lock);
    if (strcmp(req->topic, "job.tmpdir") != 0)
        return respond_error(fd, req, ENOSYS, "unknown topic");
    if (req->body)
        (void)json_unpack(req->body, "{s:I}", "id", &id);
    if (id == 1)
        return respond_json(fd, req, GOOD_1);
    if (id == 2)
        return respond_json(fd, req, GOOD_2);
    if (id >= 10 && id < 10 + (json_int_t)NBAD)
        return respond_json(fd, req, bad[id - 10]);
    if (id == BIG_ID)
        return respond_big(fd, req);
    if (id == 97)
        return respond_error(fd, req, ESRCH,
                             "job 97 has ended or is ending (state INACTIVE):"
                             " its tmpdirs are removed");
    if (id == 98)
        return respond_error(fd, req, EAGAIN,
                             "job 98 has not started yet (state SCHED): its "
                             "tmpdirs do not exist yet");
    return respond_error(fd, req, ENOENT, "job 99: no such job");
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
                   json_pack("{s:i s:i s:s s:i}", "rank", 0, "size", 8,
                             "version", "0.1.0", "uid", (int)getuid()),
                   NULL, 0);
    (void)wire_send_msg(fd, m);
    while ((req = wire_read_msg(fd))) {
        int rc = 0;

        if (!(req->flags & MSG_FLAG_CANCEL))
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
    snprintf(fk->dir, sizeof(fk->dir), "/tmp/test_tmpdir.XXXXXX");
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

/* Ask for job 'id''s tmpdirs: the mapping, or NULL with errno and the
 * future's message in 'msg'. */
static eddy_tmpdirs_t *get(eddy_t *h, eddy_jobid_t id, char *msg, size_t size)
{
    eddy_future_t *f = eddy_job_tmpdir(h, id);
    eddy_tmpdirs_t *t;
    int saved;

    assert_non_null(f);
    t = eddy_job_tmpdir_get(f);
    saved = errno;
    if (msg)
        snprintf(msg, size, "%s",
                 eddy_future_error_string(f) ? eddy_future_error_string(f)
                                             : "");
    eddy_future_destroy(f);
    errno = saved;
    return t;
}

/* ---- tests ------------------------------------------------------------- */

static void test_args(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct eddy_tmpdir d;

    errno = 0;
    assert_null(eddy_job_tmpdir(NULL, 1));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_tmpdir(h, (eddy_jobid_t)INT64_MAX + 1));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_tmpdir_get(NULL));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_tmpdirs_task(NULL, 0, &d), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_tmpdirs_node(NULL, 0, &d), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(eddy_tmpdirs_ntasks(NULL), 0);
    assert_int_equal(eddy_tmpdirs_nnodes(NULL), 0);
    assert_null(eddy_tmpdirs_json(NULL));
    errno = 42;
    eddy_tmpdirs_destroy(NULL);
    assert_int_equal(errno, 42);
    eddy_close(h);
}

static void test_good(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    static const struct {
        uint32_t index, node;
        const char *host, *path;
    } want[5] = {
        {0, 0, "n0", "/tmp/eddy-a-r0-j1-x"},
        {0, 0, "n0", "/tmp/eddy-a-r0-j1-x"},
        {2, 3, "n3", "/tmp/eddy-a-r3-j1-z"},
        {1, 7, "n7", "/scratch/eddy-a-r7-j1-y"},
        {1, 7, "n7", "/scratch/eddy-a-r7-j1-y"},
    };
    struct eddy_tmpdir d;
    eddy_tmpdirs_t *t;
    json_t *o;

    assert_non_null(t = get(h, 1, NULL, 0));
    /* the request */
    pthread_mutex_lock(&fk->lock);
    assert_string_equal(fk->last_topic, "job.tmpdir");
    assert_int_equal(fk->last_rank, 0);
    assert_int_equal(json_integer_value(json_object_get(fk->last_body, "id")),
                     1);
    assert_int_equal(json_object_size(fk->last_body), 1);
    pthread_mutex_unlock(&fk->lock);

    assert_int_equal(eddy_tmpdirs_ntasks(t), 5);
    assert_int_equal(eddy_tmpdirs_nnodes(t), 3);
    for (uint32_t r = 0; r < 5; r++) {
        memset(&d, 0, sizeof(d));
        assert_int_equal(eddy_tmpdirs_task(t, r, &d), 0);
        assert_int_equal(d.index, want[r].index);
        assert_int_equal(d.node, want[r].node);
        assert_string_equal(d.hostname, want[r].host);
        assert_string_equal(d.path, want[r].path);
    }
    errno = 0;
    assert_int_equal(eddy_tmpdirs_task(t, 5, &d), -1);
    assert_int_equal(errno, ERANGE);
    errno = 0;
    assert_int_equal(eddy_tmpdirs_task(t, 0, NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(eddy_tmpdirs_node(t, 1, &d), 0);
    assert_int_equal(d.index, 1);
    assert_int_equal(d.node, 7);
    assert_string_equal(d.hostname, "n7");
    assert_string_equal(d.path, "/scratch/eddy-a-r7-j1-y");
    errno = 0;
    assert_int_equal(eddy_tmpdirs_node(t, 3, &d), -1);
    assert_int_equal(errno, ERANGE);
    /* the JSON is the answer */
    assert_non_null(o = json_loads(eddy_tmpdirs_json(t), 0, NULL));
    assert_int_equal(json_array_size(json_object_get(o, "nodes")), 3);
    assert_int_equal(json_integer_value(json_object_get(o, "ntasks")), 5);
    json_decref(o);
    eddy_tmpdirs_destroy(t);

    /* no tasks at all */
    assert_non_null(t = get(h, 2, NULL, 0));
    assert_int_equal(eddy_tmpdirs_ntasks(t), 0);
    assert_int_equal(eddy_tmpdirs_nnodes(t), 0);
    errno = 0;
    assert_int_equal(eddy_tmpdirs_task(t, 0, &d), -1);
    assert_int_equal(errno, ERANGE);
    eddy_tmpdirs_destroy(t);
    eddy_close(h);
}

/* 16384 tasks: the answer names each node once; every rank maps. */
static void test_big(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct eddy_tmpdir d;
    eddy_tmpdirs_t *t;
    char want[64];

    assert_non_null(t = get(h, BIG_ID, NULL, 0));
    assert_int_equal(eddy_tmpdirs_ntasks(t), BIG_NODES * BIG_PER_NODE);
    assert_int_equal(eddy_tmpdirs_nnodes(t), BIG_NODES);
    assert_true(strlen(eddy_tmpdirs_json(t)) < 16384);
    for (uint32_t r = 0; r < BIG_NODES * BIG_PER_NODE; r++) {
        uint32_t i = r / BIG_PER_NODE;
        assert_int_equal(eddy_tmpdirs_task(t, r, &d), 0);
        assert_int_equal(d.index, i);
        assert_int_equal(d.node, i + 1);
        snprintf(want, sizeof(want), "/tmp/eddy-big-r%u-j30-abcdef", i + 1);
        assert_string_equal(d.path, want);
    }
    eddy_tmpdirs_destroy(t);
    eddy_close(h);
}

static void test_malformed(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    char msg[256];

    for (size_t i = 0; i < NBAD; i++) {
        errno = 0;
        if (get(h, 10 + i, msg, sizeof(msg)))
            fail_msg("job %zu: a malformed answer was accepted", 10 + i);
        assert_int_equal(errno, EPROTO);
        if (!strstr(msg, "malformed response to job.tmpdir") ||
            !strstr(msg, bad_why[i]))
            fail_msg("job %zu: message '%s' lacks '%s'", 10 + i, msg,
                     bad_why[i]);
    }
    eddy_close(h);
}

static void test_errors(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    char msg[256];

    errno = 0;
    assert_null(get(h, 99, msg, sizeof(msg)));
    assert_int_equal(errno, ENOENT);
    assert_string_equal(msg, "job 99: no such job");
    errno = 0;
    assert_null(get(h, 98, msg, sizeof(msg)));
    assert_int_equal(errno, EAGAIN);
    assert_non_null(strstr(msg, "has not started yet"));
    errno = 0;
    assert_null(get(h, 97, msg, sizeof(msg)));
    assert_int_equal(errno, ESRCH);
    assert_non_null(strstr(msg, "has ended or is ending"));
    eddy_close(h);
}

int main(void)
{
    const char *s = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_good, setup, teardown),
        cmocka_unit_test_setup_teardown(test_big, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
    };

    if (s && atoi(s) > 0)
        timeout_scale = atoi(s);
    signal(SIGPIPE, SIG_IGN);
    alarm((unsigned)(60 * timeout_scale));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
