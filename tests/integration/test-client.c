/* test-client - drive libeddy against a live instance from the bats
 * suites, for what no eddy command exercises on its own.
 *
 *   test-client events N        subscribe to "test.", publish N events via
 *                               rank 0 (and one "other." event), print the
 *                               N received in order
 *   test-client pollfd RANK N   N pings to RANK from a poll(2) loop on
 *                               eddy_get_fd() + eddy_dispatch()
 *   test-client upstream        broker.info of EDDY_RANK_UPSTREAM
 *   test-client cancel RANK S   run `sleep S` on RANK with exec.run, cancel,
 *                               print how the stream ended
 *   test-client deadlock        a blocking get inside a continuation
 *   test-client rpc TOPIC RANK JSON
 *                               one streaming request as a (misbehaving)
 *                               client may send it: print each response
 *                               body, then "end" or "error ERRNO: TEXT"
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "eddy/core.h"

static eddy_t *open_or_die(void)
{
    eddy_error_t err;
    eddy_t *h = eddy_open(NULL, 0, &err);
    if (!h) {
        fprintf(stderr, "test-client: %s\n", err.text);
        exit(1);
    }
    return h;
}

static void die_future(const char *what, eddy_future_t *f)
{
    fprintf(stderr, "test-client: %s: %s (errno %d)\n", what,
            f ? eddy_future_error_string(f) : "no future", errno);
    exit(1);
}

static int events(int n)
{
    eddy_t *h = open_or_die();
    eddy_future_t *sub = eddy_event_subscribe(h, "test.");
    eddy_future_t *f;
    char body[64];

    if (!sub)
        die_future("subscribe", NULL);
    /* A ping to our own broker after subscribing guarantees the
     * subscription is registered before anything is published. */
    if (!(f = eddy_rpc(h, "broker.ping", EDDY_RANK_ANY, 0, NULL, NULL, 0)) ||
        eddy_rpc_get(f, NULL) < 0)
        die_future("ping", f);
    eddy_future_destroy(f);
    f = eddy_event_publish(h, "other.event", "{}");
    if (!f || eddy_rpc_get(f, NULL) < 0)
        die_future("publish other", f);
    eddy_future_destroy(f);
    for (int i = 0; i < n; i++) {
        snprintf(body, sizeof(body), "{\"n\":%d}", i);
        if (!(f = eddy_event_publish(h, "test.event", body)) ||
            eddy_rpc_get(f, NULL) < 0)
            die_future("publish", f);
        eddy_future_destroy(f);
    }
    for (int i = 0; i < n; i++) {
        int got = -1;
        if (eddy_future_wait_for(sub, 10.0) < 0 ||
            eddy_rpc_get_unpack(sub, "{s:i}", "n", &got) < 0)
            die_future("event", sub);
        printf("%s %d\n", eddy_rpc_get_topic(sub), got);
        eddy_future_reset(sub);
    }
    eddy_future_destroy(sub);
    eddy_close(h);
    return 0;
}

struct pingstate {
    eddy_t *h;
    unsigned rank;
    int left;
    int failed;
};

static void ping_next(struct pingstate *ps);

static void ping_done(eddy_future_t *f, void *arg)
{
    struct pingstate *ps = arg;
    int rank = -1;
    if (eddy_rpc_get_unpack(f, "{s:i}", "rank", &rank) < 0 ||
        rank != (int)ps->rank) {
        fprintf(stderr, "test-client: ping: %s\n", eddy_future_error_string(f));
        ps->failed = 1;
    }
    eddy_future_destroy(f); /* from inside its own continuation */
    if (--ps->left > 0 && !ps->failed)
        ping_next(ps);
}

static void ping_next(struct pingstate *ps)
{
    eddy_future_t *f =
        eddy_rpc(ps->h, "broker.ping", ps->rank, 0, NULL, NULL, 0);
    if (!f || eddy_future_then(f, 10.0, ping_done, ps) < 0) {
        ps->failed = 1;
        eddy_future_destroy(f);
    }
}

static int pollfd(unsigned rank, int n)
{
    struct pingstate ps = {.h = open_or_die(), .rank = rank, .left = n};
    int fd = eddy_get_fd(ps.h);

    if (fd < 0) {
        perror("eddy_get_fd");
        return 1;
    }
    ping_next(&ps);
    while (ps.left > 0 && !ps.failed) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        /* libuv may have work (timers, deferred callbacks) without the
         * fd being readable, so poll with a short timeout. */
        if (poll(&pfd, 1, 10) < 0 && errno != EINTR)
            return 1;
        if (eddy_dispatch(ps.h) < 0)
            return 1;
    }
    eddy_close(ps.h);
    if (ps.failed)
        return 1;
    printf("pollfd: %d pings to rank %u ok\n", n, rank);
    return 0;
}

static int upstream(void)
{
    eddy_t *h = open_or_die();
    eddy_future_t *f =
        eddy_rpc(h, "broker.info", EDDY_RANK_UPSTREAM, 0, NULL, NULL, 0);
    int rank = -1;
    if (!f || eddy_rpc_get_unpack(f, "{s:i}", "rank", &rank) < 0)
        die_future("upstream", f);
    printf("upstream of %u is %d\n", eddy_get_rank(h), rank);
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

static int cancel(unsigned rank, const char *secs)
{
    eddy_t *h = open_or_die();
    eddy_future_t *f = eddy_rpc_pack(h, "exec.run", rank, EDDY_RPC_STREAMING,
                                     "{s:[ss]}", "cmd", "sleep", secs);
    const char *type = NULL;
    int pid = -1, status = -1;

    if (!f ||
        eddy_rpc_get_unpack(f, "{s:s s:i}", "type", &type, "pid", &pid) < 0)
        die_future("exec.run", f);
    printf("started pid %d\n", pid);
    eddy_future_reset(f);
    if (eddy_rpc_cancel(f) < 0)
        die_future("cancel", f);
    /* The stream ends with the exit of the killed process. */
    for (;;) {
        if (eddy_future_wait_for(f, 10.0) < 0)
            die_future("wait", f);
        if (eddy_rpc_get_unpack(f, "{s:s}", "type", &type) < 0) {
            printf("stream ended: %s\n", strerror(errno));
            break;
        }
        if (!strcmp(type, "exit")) {
            eddy_rpc_get_unpack(f, "{s:i}", "status", &status);
            printf("exit status %d\n", status);
        }
        eddy_future_reset(f);
    }
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

static int deadlock_done;

static void deadlock_cb(eddy_future_t *f, void *arg)
{
    eddy_future_t *other = arg;
    int rc = eddy_future_wait_for(other, 1.0);
    printf("blocking wait inside a callback: %s\n",
           rc < 0 ? strerror(errno) : "succeeded");
    eddy_future_destroy(f);
    deadlock_done = 1;
}

static int deadlock(void)
{
    eddy_t *h = open_or_die();
    /* 'never' is a subscription nobody publishes to: it is never ready. */
    eddy_future_t *never = eddy_event_subscribe(h, "test.never.");
    eddy_future_t *f =
        eddy_rpc(h, "broker.ping", EDDY_RANK_ANY, 0, NULL, NULL, 0);
    if (!never || !f || eddy_future_then(f, 5.0, deadlock_cb, never) < 0)
        die_future("setup", f);
    while (!deadlock_done)
        uv_run(eddy_get_loop(h), UV_RUN_ONCE);
    eddy_future_destroy(never);
    eddy_close(h);
    return 0;
}

/* One streaming request, any topic and body: what a client that skips
 * libeddy's checks could send.  Exit 0 whatever the answer. */
static int raw_rpc(const char *topic, uint32_t rank, const char *json)
{
    eddy_t *h = open_or_die();
    eddy_future_t *f =
        eddy_rpc(h, topic, rank, EDDY_RPC_STREAMING, json, NULL, 0);
    const char *body;

    if (!f)
        die_future("rpc", NULL);
    for (;;) {
        if (eddy_future_wait_for(f, 10.0) < 0)
            die_future("rpc wait", f);
        if (eddy_rpc_get(f, &body) < 0) {
            if (errno == ENODATA)
                printf("end\n");
            else
                printf("error %d: %s\n", errno, eddy_future_error_string(f));
            break;
        }
        printf("%s\n", body);
        eddy_future_reset(f);
    }
    eddy_future_destroy(f);
    eddy_close(h);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && !strcmp(argv[1], "rpc"))
        return raw_rpc(argv[2], (uint32_t)atoi(argv[3]), argv[4]);
    if (argc >= 3 && !strcmp(argv[1], "events"))
        return events(atoi(argv[2]));
    if (argc >= 4 && !strcmp(argv[1], "pollfd"))
        return pollfd((unsigned)atoi(argv[2]), atoi(argv[3]));
    if (argc >= 2 && !strcmp(argv[1], "upstream"))
        return upstream();
    if (argc >= 4 && !strcmp(argv[1], "cancel"))
        return cancel((unsigned)atoi(argv[2]), argv[3]);
    if (argc >= 2 && !strcmp(argv[1], "deadlock"))
        return deadlock();
    fprintf(stderr, "usage: see the top of test-client.c\n");
    return 1;
}
