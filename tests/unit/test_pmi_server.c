/* test_pmi_server.c - the PMI-1 wire protocol engine, driven by scripted
 * clients without sockets.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "src/shell/pmi_server.h"

#define NCLIENTS_MAX 4
#define OUT_MAX 8192

/* What the callbacks saw. */
struct ctx {
    char out[NCLIENTS_MAX][OUT_MAX]; /* answers, concatenated */
    char log[OUT_MAX];               /* last log line */
    int nlog;
    int nfence;
    struct pmi_kv batch[16]; /* copy of the last fence batch */
    char batchbuf[4096];
    size_t nbatch;
    bool fence_inline; /* call fence_done from inside the fence callback */
    pmi_server_t *srv;
    int abort_client, abort_code;
    char abort_msg[256];
    int lost_client;
    int nlost;
};

static void cb_send(int client, const char *line, size_t len, void *arg)
{
    struct ctx *x = arg;
    size_t cur = strlen(x->out[client]);

    assert_true(client >= 0 && client < NCLIENTS_MAX);
    assert_true(len > 0 && line[len - 1] == '\n');
    assert_true(cur + len < OUT_MAX);
    memcpy(x->out[client] + cur, line, len);
    x->out[client][cur + len] = '\0';
}

static void cb_fence(const struct pmi_kv *kvs, size_t count, void *arg)
{
    struct ctx *x = arg;
    size_t off = 0;

    x->nfence++;
    x->nbatch = count;
    assert_true(count <= 16);
    for (size_t i = 0; i < count; i++) {
        int n = snprintf(x->batchbuf + off, sizeof(x->batchbuf) - off, "%s%c%s",
                         kvs[i].key, '\0', kvs[i].value);
        x->batch[i].key = x->batchbuf + off;
        x->batch[i].value = x->batchbuf + off + strlen(kvs[i].key) + 1;
        off += (size_t)n + 1;
        assert_true(off < sizeof(x->batchbuf));
    }
    if (x->fence_inline)
        assert_int_equal(pmi_server_fence_done(x->srv, kvs, count, NULL), 0);
}

static void cb_abort(int client, int code, const char *msg, void *arg)
{
    struct ctx *x = arg;
    x->abort_client = client;
    x->abort_code = code;
    snprintf(x->abort_msg, sizeof(x->abort_msg), "%s", msg);
}

static void cb_log(int client, const char *text, void *arg)
{
    struct ctx *x = arg;
    x->nlog++;
    snprintf(x->log, sizeof(x->log), "%s", text);
}

static void cb_lost(int client, void *arg)
{
    struct ctx *x = arg;
    x->nlost++;
    x->lost_client = client;
}

static const struct pmi_server_ops ops = {
    .send = cb_send,
    .fence = cb_fence,
    .abort = cb_abort,
    .log = cb_log,
    .lost = cb_lost,
};

static pmi_server_t *mk(struct ctx *x, int n, bool hold)
{
    static const int appnum[NCLIENTS_MAX] = {0, 0, 1, 1};
    struct pmi_server_params p = {
        .kvsname = "eddy-42",
        .universe_size = n * 2,
        .nclients = n,
        .appnum = appnum,
        .hold_init = hold,
    };
    memset(x, 0, sizeof(*x));
    x->abort_client = -1;
    x->lost_client = -1;
    x->srv = pmi_server_create(&p, &ops, x, NULL);
    assert_non_null(x->srv);
    return x->srv;
}

static int feed(pmi_server_t *srv, int c, const char *s)
{
    return pmi_server_feed(srv, c, s, strlen(s));
}

/* Feed one request and check the whole answer (then forget it). */
static void expect(struct ctx *x, int c, const char *req, const char *resp)
{
    assert_int_equal(feed(x->srv, c, req), 0);
    assert_string_equal(x->out[c], resp);
    x->out[c][0] = '\0';
}

static void init_client(struct ctx *x, int c)
{
    expect(x, c, "cmd=init pmi_version=1 pmi_subversion=1\n",
           "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
}

static void test_transcript_two_ranks(void **state)
{
    struct ctx x;
    pmi_server_t *srv = mk(&x, 2, false);

    init_client(&x, 0);
    init_client(&x, 1);
    expect(&x, 0, "cmd=get_maxes\n",
           "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n");
    expect(&x, 1, "cmd=get_appnum\n", "cmd=appnum rc=0 appnum=0\n");
    expect(&x, 0, "cmd=get_universe_size\n", "cmd=universe_size rc=0 size=4\n");
    expect(&x, 1, "cmd=get_my_kvsname\n",
           "cmd=my_kvsname rc=0 kvsname=eddy-42\n");
    expect(&x, 0, "cmd=put kvsname=eddy-42 key=P0-bc value=host$1234#x\n",
           "cmd=put_result rc=0\n");
    expect(&x, 1, "cmd=put kvsname=eddy-42 key=P1-bc value=a=b\n",
           "cmd=put_result rc=0\n");
    /* Local puts are visible on this node before the fence. */
    expect(&x, 1, "cmd=get kvsname=eddy-42 key=P0-bc\n",
           "cmd=get_result rc=0 value=host$1234#x\n");

    expect(&x, 0, "cmd=barrier_in\n", "");
    assert_int_equal(x.nfence, 0);
    expect(&x, 1, "cmd=barrier_in\n", "");
    assert_int_equal(x.nfence, 1);
    assert_int_equal(x.nbatch, 2);
    assert_string_equal(x.batch[0].key, "P0-bc");
    assert_string_equal(x.batch[0].value, "host$1234#x");
    assert_string_equal(x.batch[1].key, "P1-bc");
    assert_string_equal(x.batch[1].value, "a=b");

    /* Another node's pair arrives with the exchange. */
    struct pmi_kv merged[3] = {x.batch[0], x.batch[1], {"P2-bc", "remote"}};
    assert_int_equal(pmi_server_fence_done(srv, merged, 3, NULL), 0);
    assert_string_equal(x.out[0], "cmd=barrier_out rc=0\n");
    assert_string_equal(x.out[1], "cmd=barrier_out rc=0\n");
    x.out[0][0] = x.out[1][0] = '\0';
    assert_int_equal(pmi_server_kvs_count(srv), 3);

    expect(&x, 0, "cmd=get kvsname=eddy-42 key=P2-bc\n",
           "cmd=get_result rc=0 value=remote\n");
    expect(&x, 0, "cmd=get kvsname=eddy-42 key=P1-bc\n",
           "cmd=get_result rc=0 value=a=b\n");
    /* A second barrier with no puts hands out an empty batch. */
    expect(&x, 0, "cmd=barrier_in\n", "");
    expect(&x, 1, "cmd=barrier_in\n", "");
    assert_int_equal(x.nfence, 2);
    assert_int_equal(x.nbatch, 0);
    assert_int_equal(pmi_server_fence_done(srv, NULL, 0, NULL), 0);
    assert_string_equal(x.out[1], "cmd=barrier_out rc=0\n");
    x.out[0][0] = x.out[1][0] = '\0';

    expect(&x, 0, "cmd=finalize\n", "cmd=finalize_ack rc=0\n");
    expect(&x, 1, "cmd=finalize\n", "cmd=finalize_ack rc=0\n");
    assert_int_equal(pmi_server_client_gone(srv, 0), 0);
    assert_int_equal(pmi_server_client_gone(srv, 1), 0);
    assert_int_equal(x.nlost, 0);
    assert_int_equal(x.nlog, 0);
    pmi_server_destroy(srv);
}

static void test_split_and_batched(void **state)
{
    struct ctx x;
    pmi_server_t *srv = mk(&x, 1, false);
    const char *s = "cmd=init pmi_version=1 pmi_subversion=1\n";

    /* One byte at a time. */
    for (size_t i = 0; i < strlen(s); i++) {
        assert_int_equal(pmi_server_feed(srv, 0, s + i, 1), 0);
        if (i + 1 < strlen(s))
            assert_string_equal(x.out[0], "");
    }
    assert_string_equal(
        x.out[0], "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
    x.out[0][0] = '\0';
    /* Several lines in one feed, the last one split. */
    assert_int_equal(feed(srv, 0, "cmd=get_appnum\ncmd=get_my_kvsname\ncmd=ge"),
                     0);
    assert_string_equal(x.out[0], "cmd=appnum rc=0 appnum=0\n"
                                  "cmd=my_kvsname rc=0 kvsname=eddy-42\n");
    x.out[0][0] = '\0';
    /* Extra spaces and extra keys are tolerated (RFC 13). */
    expect(&x, 0, "t_universe_size  extra=1 \n",
           "cmd=universe_size rc=0 size=2\n");
    expect(&x, 0, "  cmd=get_appnum\n", "cmd=appnum rc=0 appnum=0\n");
    /* Zero-length feed. */
    assert_int_equal(pmi_server_feed(srv, 0, NULL, 0), 0);
    pmi_server_destroy(srv);
}

/* A protocol error: generic answer, log naming the problem, EPROTO now
 * and for later feeds. */
static void check_proto_error(const char *line,
                              const char *msg,
                              const char *logpart)
{
    struct ctx x;
    pmi_server_t *srv = mk(&x, 1, false);
    char want[128];

    init_client(&x, 0);
    errno = 0;
    assert_int_equal(pmi_server_feed(srv, 0, line, strlen(line)), -1);
    assert_int_equal(errno, EPROTO);
    snprintf(want, sizeof(want), "cmd=error rc=-1 msg=%s\n", msg);
    assert_string_equal(x.out[0], want);
    assert_int_equal(x.nlog, 1);
    assert_non_null(strstr(x.log, logpart));
    for (const char *p = x.log; *p; p++)
        assert_true(*p >= 0x20 && *p < 0x7f);
    assert_int_equal(feed(srv, 0, "cmd=get_appnum\n"), -1);
    assert_int_equal(errno, EPROTO);
    pmi_server_destroy(srv);
}

static void test_protocol_errors(void **state)
{
    check_proto_error("cmd=frobnicate\n", "unknown_command", "unknown command");
    check_proto_error("hello world\n", "unparseable_line", "malformed request");
    check_proto_error("key=value\n", "unparseable_line", "malformed");
    check_proto_error("\n", "unparseable_line", "malformed");
    check_proto_error("cmd=put =x\n", "unparseable_line", "malformed");
    check_proto_error("cmd=get key\n", "unparseable_line", "malformed");
    check_proto_error("cmd=get\tkey=x\n", "bad_character", "not printable");
    check_proto_error("cmd=get key=\x01\x02\n", "bad_character",
                      "\"cmd=get key=??\"");
    check_proto_error("cmd=get key=\xff\n", "bad_character", "not printable");
    check_proto_error("mcmd=frob\nendcmd\n", "unknown_command", "multi-line");
    /* More tokens than any request has. */
    check_proto_error("cmd=get a=1 a=1 a=1 a=1 a=1 a=1 a=1 a=1 a=1 a=1 a=1 "
                      "a=1 a=1 a=1 a=1 a=1 a=1\n",
                      "unparseable_line", "malformed");

    /* An overlong line is refused as soon as it passes the limit, without
     * waiting for its newline; the log sample is bounded. */
    char *big = malloc(PMI_SERVER_LINE_MAX + 10);
    assert_non_null(big);
    memset(big, 'a', PMI_SERVER_LINE_MAX + 9);
    big[PMI_SERVER_LINE_MAX + 9] = '\0';
    check_proto_error(big, "line_too_long", "line too long");
    /* Exactly at the limit (newline included) is accepted. */
    struct ctx x;
    pmi_server_t *srv = mk(&x, 1, false);
    init_client(&x, 0);
    memcpy(big, "cmd=get_appnum x=", 17);
    big[PMI_SERVER_LINE_MAX - 1] = '\n';
    big[PMI_SERVER_LINE_MAX] = '\0';
    expect(&x, 0, big, "cmd=appnum rc=0 appnum=0\n");
    big[PMI_SERVER_LINE_MAX - 1] = 'a';
    big[PMI_SERVER_LINE_MAX] = '\n';
    big[PMI_SERVER_LINE_MAX + 1] = '\0';
    assert_int_equal(feed(srv, 0, big), -1);
    assert_int_equal(errno, EPROTO);
    assert_true(strlen(x.log) < 200);
    free(big);
    pmi_server_destroy(srv);
}

static void test_request_errors(void **state)
{
    struct ctx x;
    pmi_server_t *srv = mk(&x, 2, false);
    char line[2048];

    /* Before init. */
    expect(&x, 0, "cmd=get_maxes\n", "cmd=error rc=-1 msg=not_initialized\n");
    assert_non_null(strstr(x.log, "before init"));
    /* Bad versions. */
    expect(&x, 0, "cmd=init pmi_version=2 pmi_subversion=0\n",
           "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 "
           "msg=unsupported_version\n");
    expect(&x, 0, "cmd=init pmi_version=1\n",
           "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 "
           "msg=bad_version_fields\n");
    expect(&x, 0, "cmd=init pmi_version=1x pmi_subversion=1\n",
           "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 "
           "msg=bad_version_fields\n");
    /* 1.0 is accepted and answered as 1.1. */
    expect(&x, 0, "cmd=init pmi_version=1 pmi_subversion=0\n",
           "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
    expect(&x, 0, "cmd=init pmi_version=1 pmi_subversion=1\n",
           "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 "
           "msg=already_initialized\n");

    x.nlog = 0;
    expect(&x, 0, "cmd=put kvsname=other key=k value=v\n",
           "cmd=put_result rc=-1 msg=unknown_kvsname\n");
    expect(&x, 0, "cmd=put kvsname=eddy-42 value=v\n",
           "cmd=put_result rc=-1 msg=missing_key\n");
    expect(&x, 0, "cmd=put kvsname=eddy-42 key=k\n",
           "cmd=put_result rc=-1 msg=missing_value\n");
    expect(&x, 0, "cmd=get kvsname=eddy-42 key=nosuch\n",
           "cmd=get_result rc=-1 msg=key_not_found\n");
    expect(&x, 0, "cmd=get kvsname=nope key=k\n",
           "cmd=get_result rc=-1 msg=unknown_kvsname\n");
    assert_int_equal(x.nlog, 4); /* key_not_found is normal, not logged */

    /* Key length limit: at the limit ok, one more refused. */
    snprintf(line, sizeof(line), "cmd=put key=%0*d value=v\n",
             PMI_SERVER_KEYLEN_MAX, 7);
    expect(&x, 0, line, "cmd=put_result rc=0\n");
    snprintf(line, sizeof(line), "cmd=put key=%0*d value=v\n",
             PMI_SERVER_KEYLEN_MAX + 1, 7);
    expect(&x, 0, line, "cmd=put_result rc=-1 msg=key_too_long\n");
    assert_non_null(strstr(x.log, "key_too_long"));
    snprintf(line, sizeof(line), "cmd=get key=%0*d\n",
             PMI_SERVER_KEYLEN_MAX + 1, 7);
    expect(&x, 0, line, "cmd=get_result rc=-1 msg=key_too_long\n");
    /* Value length limit. */
    snprintf(line, sizeof(line), "cmd=put key=v1 value=%0*d\n",
             PMI_SERVER_VALLEN_MAX, 1);
    expect(&x, 0, line, "cmd=put_result rc=0\n");
    snprintf(line, sizeof(line), "cmd=put key=v2 value=%0*d\n",
             PMI_SERVER_VALLEN_MAX + 1, 1);
    expect(&x, 0, line, "cmd=put_result rc=-1 msg=value_too_long\n");
    assert_non_null(strstr(x.log, "value too long"));
    /* A value at the limit comes back whole. */
    snprintf(line, sizeof(line), "cmd=get_result rc=0 value=%0*d\n",
             PMI_SERVER_VALLEN_MAX, 1);
    expect(&x, 0, "cmd=get key=v1\n", line);
    /* Empty value is valid (RFC 13). */
    expect(&x, 0, "cmd=put key=empty value=\n", "cmd=put_result rc=0\n");
    expect(&x, 0, "cmd=get key=empty\n", "cmd=get_result rc=0 value=\n");
    /* Duplicate put, pending and after a fence. */
    expect(&x, 0, "cmd=put key=dup value=1\n", "cmd=put_result rc=0\n");
    expect(&x, 0, "cmd=put key=dup value=2\n",
           "cmd=put_result rc=-1 msg=duplicate_key\n");
    assert_non_null(strstr(x.log, "duplicate key"));
    init_client(&x, 1);
    expect(&x, 1, "cmd=put key=dup value=3\n",
           "cmd=put_result rc=-1 msg=duplicate_key\n");

    /* Unsupported PMI-1 commands get their own response. */
    expect(&x, 0, "cmd=publish_name service=s port=p\n",
           "cmd=publish_result rc=-1 msg=not_supported\n");
    expect(&x, 0, "cmd=lookup_name service=s\n",
           "cmd=lookup_result rc=-1 msg=not_supported\n");
    /* spawn: a multi-line request answered once, at endcmd; the client
     * can go on. */
    expect(&x, 0, "mcmd=spawn\nnprocs=2\nexecname=/bin/true\n", "");
    assert_non_null(strstr(x.log, "spawn"));
    expect(&x, 0,
           "totspawns=1\nspawnssofar=1\narg1=a b c\nargcnt=1\n"
           "preput_num=0\ninfo_num=0\nendcmd\n",
           "cmd=spawn_result rc=-1 msg=spawn_not_supported\n");
    expect(&x, 0, "cmd=get_appnum\n", "cmd=appnum rc=0 appnum=0\n");

    /* barrier_in twice. */
    expect(&x, 0, "cmd=barrier_in\n", "");
    expect(&x, 0, "cmd=barrier_in\n",
           "cmd=barrier_out rc=-1 msg=already_in_barrier\n");

    /* Bad arguments to the API. */
    errno = 0;
    assert_int_equal(feed(srv, 2, "x"), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(pmi_server_feed(srv, -1, "x", 1), -1);
    assert_int_equal(pmi_server_feed(srv, 0, NULL, 1), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(pmi_server_fence_failed(srv), -1);
    assert_int_equal(errno, EINVAL);
    eddy_error_t err = {{0}};
    assert_int_equal(pmi_server_fence_done(srv, NULL, 0, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "no fence"));
    pmi_server_destroy(srv);
}

static void test_hold_init(void **state)
{
    struct ctx x;
    pmi_server_t *srv = mk(&x, 2, true);

    expect(&x, 0, "cmd=init pmi_version=1 pmi_subversion=1\n", "");
    /* A wrong version is refused at once, hold or not. */
    expect(&x, 1, "cmd=init pmi_version=3 pmi_subversion=1\n",
           "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=-1 "
           "msg=unsupported_version\n");
    expect(&x, 1, "cmd=init pmi_version=1 pmi_subversion=1\n", "");
    assert_int_equal(pmi_server_release(srv), 0);
    const char *ok = "cmd=response_to_init pmi_version=1 pmi_subversion=1 "
                     "rc=0\n";
    assert_string_equal(x.out[0], ok);
    assert_string_equal(x.out[1], ok);
    x.out[0][0] = x.out[1][0] = '\0';
    /* Released once only; later inits answered at once. */
    assert_int_equal(pmi_server_release(srv), 0);
    assert_string_equal(x.out[0], "");
    expect(&x, 0, "cmd=get_appnum\n", "cmd=appnum rc=0 appnum=0\n");
    assert_int_equal(pmi_server_release(NULL), -1);
    assert_int_equal(errno, EINVAL);
    pmi_server_destroy(srv);

    /* Not holding: answered at once. */
    srv = mk(&x, 1, false);
    init_client(&x, 0);
    pmi_server_destroy(srv);
}

static void test_abort(void **state)
{
    struct ctx x;
    pmi_server_t *srv = mk(&x, 2, false);

    init_client(&x, 1);
    expect(&x, 1, "cmd=abort exitcode=7 message=MPI_Abort called: rank 1\n",
           "");
    assert_int_equal(x.abort_client, 1);
    assert_int_equal(x.abort_code, 7);
    assert_string_equal(x.abort_msg, "MPI_Abort called: rank 1");
    /* Without fields: exit code 1, empty message; allowed before init. */
    expect(&x, 0, "cmd=abort\n", "");
    assert_int_equal(x.abort_client, 0);
    assert_int_equal(x.abort_code, 1);
    assert_string_equal(x.abort_msg, "");
    expect(&x, 0, "cmd=abort exitcode=zz\n", "");
    assert_int_equal(x.abort_code, 1);
    pmi_server_destroy(srv);
}

static void test_client_gone(void **state)
{
    struct ctx x;
    pmi_server_t *srv = mk(&x, 3, false);

    init_client(&x, 0);
    init_client(&x, 1);
    /* Client 2 never used PMI and exits: nothing is lost yet. */
    assert_int_equal(pmi_server_client_gone(srv, 2), 0);
    assert_int_equal(x.nlost, 0);
    assert_int_equal(pmi_server_client_gone(srv, 2), -1);
    assert_int_equal(errno, EALREADY);
    assert_int_equal(feed(srv, 2, "cmd=init\n"), -1);
    assert_int_equal(errno, ENOTCONN);
    /* Client 0 waits in the barrier; client 1 dies: reported. */
    expect(&x, 0, "cmd=barrier_in\n", "");
    assert_int_equal(feed(srv, 1, "cmd=barri"), 0);
    assert_int_equal(pmi_server_client_gone(srv, 1), 0);
    assert_int_equal(x.nlost, 1);
    assert_int_equal(x.lost_client, 1);
    assert_int_equal(x.nfence, 0);
    assert_int_equal(pmi_server_client_gone(srv, 7), -1);
    assert_int_equal(errno, EINVAL);
    pmi_server_destroy(srv);

    /* Initialized and not finalized: lost even with no barrier. */
    srv = mk(&x, 1, false);
    init_client(&x, 0);
    assert_int_equal(pmi_server_client_gone(srv, 0), 0);
    assert_int_equal(x.nlost, 1);
    pmi_server_destroy(srv);
}

static void test_fence_inline_and_failed(void **state)
{
    struct ctx x;
    pmi_server_t *srv = mk(&x, 1, false);

    /* A one-node job: the shell answers from inside the callback. */
    x.fence_inline = true;
    init_client(&x, 0);
    expect(&x, 0, "cmd=put key=a value=1\n", "cmd=put_result rc=0\n");
    expect(&x, 0, "cmd=barrier_in\n", "cmd=barrier_out rc=0\n");
    assert_int_equal(x.nbatch, 1);
    expect(&x, 0, "cmd=get key=a\n", "cmd=get_result rc=0 value=1\n");
    assert_int_equal(pmi_server_kvs_count(srv), 1);

    /* A failed exchange. */
    x.fence_inline = false;
    expect(&x, 0, "cmd=barrier_in\n", "");
    assert_int_equal(pmi_server_fence_failed(srv), 0);
    assert_string_equal(x.out[0], "cmd=barrier_out rc=-1 msg=barrier_failed\n");
    x.out[0][0] = '\0';

    /* A merged batch that breaks the limits fails the barrier. */
    eddy_error_t err = {{0}};
    char longkey[PMI_SERVER_KEYLEN_MAX + 2];
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    struct pmi_kv bad[2] = {{"ok", "1"}, {longkey, "v"}};
    expect(&x, 0, "cmd=barrier_in\n", "");
    assert_int_equal(pmi_server_fence_done(srv, bad, 2, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "pair 1"));
    assert_string_equal(x.out[0], "cmd=barrier_out rc=-1 msg=barrier_failed\n");
    x.out[0][0] = '\0';
    /* Nothing of it was merged. */
    expect(&x, 0, "cmd=get key=ok\n",
           "cmd=get_result rc=-1 msg=key_not_found\n");
    pmi_server_destroy(srv);
}

static void test_kvs_limit(void **state)
{
    struct ctx x;
    pmi_server_t *srv = mk(&x, 1, false);
    char line[2048];
    int i, ok = 0;

    init_client(&x, 0);
    /* Fill the store with values at the limit until it refuses. */
    for (i = 0; i < (int)(PMI_SERVER_KVS_MAX / PMI_SERVER_VALLEN_MAX) + 10;
         i++) {
        snprintf(line, sizeof(line), "cmd=put key=k%d value=%0*d\n", i,
                 PMI_SERVER_VALLEN_MAX, 0);
        assert_int_equal(feed(srv, 0, line), 0);
        if (strcmp(x.out[0], "cmd=put_result rc=0\n") == 0)
            ok++;
        else
            break;
        x.out[0][0] = '\0';
    }
    assert_string_equal(x.out[0], "cmd=put_result rc=-1 msg=kvs_full\n");
    assert_true(ok > 60000 && ok < 65536);
    assert_non_null(strstr(x.log, "full"));
    pmi_server_destroy(srv);
}

/* Pairs the shell knows up front (PMI_process_mapping) are there for the
 * first get, before any fence; bad ones are refused. */
static void test_kvs_put(void **state)
{
    struct ctx x;
    eddy_error_t err = {{0}};
    pmi_server_t *srv = mk(&x, 1, false);

    assert_int_equal(pmi_server_kvs_put(srv, "PMI_process_mapping",
                                        "(vector,(0,4,16))", &err),
                     0);
    init_client(&x, 0);
    expect(&x, 0, "cmd=get kvsname=eddy-42 key=PMI_process_mapping\n",
           "cmd=get_result rc=0 value=(vector,(0,4,16))\n");
    assert_int_equal(pmi_server_kvs_put(srv, "", "x", &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(pmi_server_kvs_put(NULL, "k", "v", &err), -1);
    assert_int_equal(errno, EINVAL);
    pmi_server_destroy(srv);
}

static void test_create_bad(void **state)
{
    struct pmi_server_params p = {
        .kvsname = "eddy-1", .universe_size = 2, .nclients = 2};
    struct pmi_server_ops noops = {0};
    eddy_error_t err = {{0}};

    errno = 0;
    assert_null(pmi_server_create(&p, &noops, NULL, &err));
    assert_int_equal(errno, EINVAL);
    assert_non_null(strstr(err.text, "send"));
    p.nclients = 0;
    assert_null(pmi_server_create(&p, &ops, NULL, &err));
    assert_non_null(strstr(err.text, "0 local clients"));
    p.nclients = 3;
    assert_null(pmi_server_create(&p, &ops, NULL, &err));
    assert_non_null(strstr(err.text, "universe size 2"));
    p.nclients = 2;
    p.kvsname = "has space";
    assert_null(pmi_server_create(&p, &ops, NULL, &err));
    assert_non_null(strstr(err.text, "kvsname"));
    p.kvsname = "";
    assert_null(pmi_server_create(&p, &ops, NULL, &err));
    assert_int_equal(errno, EINVAL);
    errno = 42;
    pmi_server_destroy(NULL);
    assert_int_equal(errno, 42);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transcript_two_ranks),
        cmocka_unit_test(test_split_and_batched),
        cmocka_unit_test(test_protocol_errors),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_hold_init),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_client_gone),
        cmocka_unit_test(test_fence_inline_and_failed),
        cmocka_unit_test(test_kvs_limit),
        cmocka_unit_test(test_kvs_put),
        cmocka_unit_test(test_create_bad),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
