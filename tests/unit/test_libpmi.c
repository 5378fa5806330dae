/* test_libpmi.c - unit tests for src/libpmi/pmi.c (the PMI-1 C API).
 *
 * A scripted fake server runs on the other end of a socketpair, in a
 * thread (or inline in the parent when the client is a forked child): it
 * checks every request line against the script and sends the scripted
 * answer.  The last test runs the library against the real engine,
 * src/shell/pmi_server.c, fed from the socket by a thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "eddy/pmi.h"
#include "src/shell/pmi_server.h"

/* One step of a script: read a line equal to `expect` (unless NULL), then
 * write `reply` verbatim (newline included; "" writes nothing) or, if
 * reply is NULL, close the connection. */
struct step {
    const char *expect;
    const char *reply;
};

struct fake {
    int sfd; /* server end */
    int cfd; /* client end, in PMI_FD */
    const struct step *steps;
    int nsteps;
    int done;
    bool keep_open; /* do not close at the end of the script */
    char err[512];
    pthread_t thread;
};

#define INIT_STEPS                                                             \
    {"cmd=init pmi_version=1 pmi_subversion=1",                                \
     "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"},            \
        {"cmd=get_maxes",                                                      \
         "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n"},    \
        {"cmd=get_appnum", "cmd=appnum rc=0 appnum=2\n"},                      \
    {                                                                          \
        "cmd=get_my_kvsname", "cmd=my_kvsname rc=0 kvsname=kvs_42\n"           \
    }

static int read_req(int fd, char *buf, size_t size)
{
    size_t n = 0;

    while (n + 1 < size) {
        ssize_t r = read(fd, buf + n, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        if (buf[n] == '\n') {
            buf[n] = '\0';
            return 0;
        }
        n++;
    }
    return -1;
}

static void run_script(struct fake *f)
{
    char line[8192];

    for (int i = 0; i < f->nsteps; i++) {
        const struct step *s = &f->steps[i];
        if (s->expect) {
            if (read_req(f->sfd, line, sizeof(line)) < 0) {
                snprintf(f->err, sizeof(f->err), "step %d: no request", i);
                goto out;
            }
            if (strcmp(line, s->expect) != 0) {
                snprintf(f->err, sizeof(f->err),
                         "step %d: got '%.200s', expected '%.200s'", i, line,
                         s->expect);
                goto out;
            }
        }
        if (!s->reply) {
            f->done = i + 1;
            goto out;
        }
        size_t len = strlen(s->reply);
        if (len && write(f->sfd, s->reply, len) != (ssize_t)len) {
            snprintf(f->err, sizeof(f->err), "step %d: write failed", i);
            goto out;
        }
        f->done = i + 1;
    }
    if (f->keep_open)
        return;
out:
    close(f->sfd);
    f->sfd = -1;
}

static void *script_thread(void *arg)
{
    run_script(arg);
    return NULL;
}

static void set_env(int fd, const char *rank, const char *size)
{
    char s[16];

    snprintf(s, sizeof(s), "%d", fd);
    setenv("PMI_FD", s, 1);
    setenv("PMI_RANK", rank, 1);
    setenv("PMI_SIZE", size, 1);
    setenv("PMI_SPAWNED", "0", 1);
}

static void clear_env(void)
{
    unsetenv("PMI_FD");
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("PMI_SPAWNED");
}

/* Socketpair + environment for rank 3 of 8; no server yet. */
static void fake_open(struct fake *f, const struct step *steps, int n)
{
    int sv[2];

    memset(f, 0, sizeof(*f));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    f->sfd = sv[0];
    f->cfd = sv[1];
    f->steps = steps;
    f->nsteps = n;
    set_env(f->cfd, "3", "8");
}

static void fake_start(struct fake *f, const struct step *steps, int n)
{
    fake_open(f, steps, n);
    assert_int_equal(pthread_create(&f->thread, NULL, script_thread, f), 0);
}

/* Join the server; the script must have run to its end.  close_client:
 * the library did not close PMI_FD (no successful PMI_Finalize). */
static void fake_finish(struct fake *f, bool close_client)
{
    pthread_join(f->thread, NULL);
    if (f->sfd >= 0)
        close(f->sfd);
    if (close_client)
        close(f->cfd);
    clear_env();
    if (f->err[0])
        fail_msg("%s", f->err);
    assert_int_equal(f->done, f->nsteps);
}

#define N(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void test_full_session(void **state)
{
    static const struct step s[] = {
        INIT_STEPS,
        {"cmd=get_universe_size", "cmd=universe_size rc=0 size=16\n"},
        {"cmd=put kvsname=kvs_42 key=k3 value=v=3!", "cmd=put_result rc=0\n"},
        /* Lenient parsing: reordered tuples, extra blanks and keys. */
        {"cmd=put kvsname=kvs_42 key=empty value=",
         "  rc=0 \t cmd=put_result  extra=1 msg=all is well\n"},
        /* Two answers in one write: the second stays buffered. */
        {"cmd=barrier_in",
         "cmd=barrier_out rc=0\ncmd=get_result rc=0 msg=success "
         "value=abc=def\n"},
        {"cmd=get kvsname=kvs_42 key=k5", ""},
        {"cmd=get kvsname=kvs_42 key=k6", "cmd=get_result value=\n"},
        {"cmd=finalize", "cmd=finalize_ack rc=0\n"},
    };
    struct fake f;
    int v = -5, spawned = -5;
    char buf[256];

    fake_start(&f, s, N(s));
    assert_int_equal(PMI_Initialized(&v), PMI_SUCCESS);
    assert_int_equal(v, 0);
    assert_int_equal(PMI_Init(&spawned), PMI_SUCCESS);
    assert_int_equal(spawned, 0);
    assert_int_equal(PMI_Initialized(&v), PMI_SUCCESS);
    assert_int_equal(v, 1);
    assert_int_equal(PMI_Get_rank(&v), PMI_SUCCESS);
    assert_int_equal(v, 3);
    assert_int_equal(PMI_Get_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 8);
    assert_int_equal(PMI_Get_appnum(&v), PMI_SUCCESS);
    assert_int_equal(v, 2);
    assert_int_equal(PMI_KVS_Get_name_length_max(&v), PMI_SUCCESS);
    assert_int_equal(v, 256);
    assert_int_equal(PMI_Get_id_length_max(&v), PMI_SUCCESS);
    assert_int_equal(v, 256);
    assert_int_equal(PMI_KVS_Get_key_length_max(&v), PMI_SUCCESS);
    assert_int_equal(v, 64);
    assert_int_equal(PMI_KVS_Get_value_length_max(&v), PMI_SUCCESS);
    assert_int_equal(v, 1024);
    assert_int_equal(PMI_KVS_Get_my_name(buf, sizeof(buf)), PMI_SUCCESS);
    assert_string_equal(buf, "kvs_42");
    assert_int_equal(PMI_Get_id(buf, 7), PMI_SUCCESS);
    assert_string_equal(buf, "kvs_42");
    assert_int_equal(PMI_Get_kvs_domain_id(buf, 7), PMI_SUCCESS);
    /* Asked once, then remembered. */
    assert_int_equal(PMI_Get_universe_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 16);
    v = 0;
    assert_int_equal(PMI_Get_universe_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 16);
    assert_int_equal(PMI_KVS_Put("kvs_42", "k3", "v=3!"), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Put("kvs_42", "empty", ""), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Commit("kvs_42"), PMI_SUCCESS);
    assert_int_equal(PMI_Barrier(), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Get("kvs_42", "k5", buf, sizeof(buf)),
                     PMI_SUCCESS);
    assert_string_equal(buf, "abc=def");
    assert_int_equal(PMI_KVS_Get("kvs_42", "k6", buf, sizeof(buf)),
                     PMI_SUCCESS);
    assert_string_equal(buf, "");
    assert_int_equal(PMI_Finalize(), PMI_SUCCESS);
    assert_int_equal(PMI_Initialized(&v), PMI_SUCCESS);
    assert_int_equal(v, 0);
    assert_int_equal(PMI_Get_rank(&v), PMI_ERR_INIT);
    assert_int_equal(PMI_Barrier(), PMI_ERR_INIT);
    assert_int_equal(PMI_Finalize(), PMI_ERR_INIT);
    /* PMI_Finalize closed PMI_FD. */
    assert_int_equal(fcntl(f.cfd, F_GETFD), -1);
    fake_finish(&f, false);
}

static void test_error_answers(void **state)
{
    static const struct step s[] = {
        INIT_STEPS,
        {"cmd=put kvsname=kvs_42 key=a value=1",
         "cmd=put_result rc=-1 msg=duplicate_key\n"},
        {"cmd=get kvsname=kvs_42 key=nope",
         "cmd=get_result rc=-1 msg=key_not_found\n"},
        {"cmd=get kvsname=kvs_42 key=PMI_process_mapping",
         "cmd=get_result rc=-1 msg=key_not_found\n"},
        {"cmd=barrier_in", "cmd=barrier_out rc=-1 msg=barrier_failed\n"},
        {"cmd=get_universe_size", "cmd=universe_size rc=1\n"},
        /* Still in step after refusals. */
        {"cmd=barrier_in", "cmd=barrier_out rc=0\n"},
        {"cmd=finalize", "cmd=finalize_ack rc=-1\n"},
    };
    struct fake f;
    int spawned, v = -7;
    char buf[64] = "untouched";

    fake_start(&f, s, N(s));
    assert_int_equal(PMI_Init(&spawned), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Put("kvs_42", "a", "1"), PMI_FAIL);
    assert_int_equal(PMI_KVS_Get("kvs_42", "nope", buf, sizeof(buf)), PMI_FAIL);
    assert_string_equal(buf, "untouched");
    /* RFC 13: a missing PMI_ key reads as "". */
    assert_int_equal(
        PMI_KVS_Get("kvs_42", "PMI_process_mapping", buf, sizeof(buf)),
        PMI_SUCCESS);
    assert_string_equal(buf, "");
    assert_int_equal(PMI_Barrier(), PMI_FAIL);
    assert_int_equal(PMI_Get_universe_size(&v), PMI_FAIL);
    assert_int_equal(v, -7);
    assert_int_equal(PMI_Barrier(), PMI_SUCCESS);
    /* A refused finalize still finalizes and closes PMI_FD. */
    assert_int_equal(PMI_Finalize(), PMI_FAIL);
    assert_int_equal(PMI_Initialized(&v), PMI_SUCCESS);
    assert_int_equal(v, 0);
    fake_finish(&f, false);
}

/* Run init against one bad answer at `bad_step` (replacing INIT_STEPS'
 * answer there); PMI_Init must fail and leave nothing initialised. */
static void init_fails_with(int bad_step, const char *reply)
{
    struct step s[] = {INIT_STEPS};
    struct fake f;
    int spawned = -3, v;

    s[bad_step].reply = reply;
    fake_start(&f, s, bad_step + 1);
    assert_int_equal(PMI_Init(&spawned), PMI_FAIL);
    assert_int_equal(spawned, -3);
    assert_int_equal(PMI_Initialized(&v), PMI_SUCCESS);
    assert_int_equal(v, 0);
    fake_finish(&f, true);
}

static void test_init_errors(void **state)
{
    init_fails_with(0, "cmd=response_to_init rc=-1 msg=no\n");
    init_fails_with(0, "cmd=response_to_init rc=0 pmi_version=2\n");
    init_fails_with(0, NULL); /* closed during init */
    init_fails_with(1, "cmd=maxes rc=0 kvsname_max=256 vallen_max=1024\n");
    init_fails_with(1, "cmd=maxes kvsname_max=256 keylen_max=1 "
                       "vallen_max=1024\n");
    init_fails_with(1, "cmd=maxes kvsname_max=x keylen_max=64 "
                       "vallen_max=1024\n");
    init_fails_with(2, "cmd=appnum rc=0 appnum=abc\n");
    init_fails_with(2, "cmd=appnum rc=0\n");
    init_fails_with(3, "cmd=my_kvsname rc=0\n");
    init_fails_with(3, "cmd=my_kvsname rc=0 kvsname=\n");
    init_fails_with(3, "cmd=kvsname rc=0 kvsname=x\n");
}

/* After a good init, one barrier gets `reply`: PMI_FAIL, and the
 * connection is unusable afterwards (later calls fail without I/O). */
static void barrier_fails_with(const char *reply)
{
    struct step s[] = {INIT_STEPS, {"cmd=barrier_in", reply}};
    struct fake f;
    int spawned;

    fake_start(&f, s, N(s));
    assert_int_equal(PMI_Init(&spawned), PMI_SUCCESS);
    assert_int_equal(PMI_Barrier(), PMI_FAIL);
    pthread_join(f.thread, NULL); /* the script is over */
    assert_int_equal(PMI_KVS_Put("kvs_42", "k", "v"), PMI_FAIL);
    /* Finalize cannot talk any more but still closes PMI_FD. */
    assert_int_equal(PMI_Finalize(), PMI_FAIL);
    if (f.sfd >= 0)
        close(f.sfd);
    clear_env();
    if (f.err[0])
        fail_msg("%s", f.err);
    assert_int_equal(f.done, f.nsteps);
}

static void test_server_gone_and_malformed(void **state)
{
    static char longline[9001];

    barrier_fails_with(NULL);                    /* closed mid-call */
    barrier_fails_with("cmd=barrier_o");         /* closed mid-line */
    barrier_fails_with("cmd=barrier_ou rc=0\n"); /* wrong command */
    barrier_fails_with("rc=0\n");                /* no command */
    barrier_fails_with("cmd=barrier_out rc=zero\n");
    barrier_fails_with("cmd=barrier_out rc=0\x01\n"); /* control char */
    barrier_fails_with("cmd=barrier_out rc=0 msg=\x7f\n");
    memset(longline, 'a', sizeof(longline) - 1);
    barrier_fails_with(longline); /* over the line limit, no newline */
}

static void test_get_errors(void **state)
{
    static const struct step s[] = {
        INIT_STEPS,
        {"cmd=get kvsname=kvs_42 key=big",
         "cmd=get_result rc=0 value=0123456789\n"},
        {"cmd=get kvsname=kvs_42 key=novalue", "cmd=get_result rc=0\n"},
    };
    struct fake f;
    int spawned;
    char buf[10] = "untouched";

    fake_start(&f, s, N(s));
    assert_int_equal(PMI_Init(&spawned), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Get("kvs_42", "big", buf, sizeof(buf)),
                     PMI_ERR_INVALID_LENGTH);
    assert_string_equal(buf, "untouched");
    assert_int_equal(PMI_KVS_Get("kvs_42", "novalue", buf, sizeof(buf)),
                     PMI_FAIL);
    pthread_join(f.thread, NULL);
    assert_int_equal(PMI_Finalize(), PMI_FAIL);
    clear_env();
    if (f.err[0])
        fail_msg("%s", f.err);
    assert_int_equal(f.done, f.nsteps);
}

static void test_bad_args(void **state)
{
    char big[2048];
    char buf[64] = "untouched";
    int v = -9, spawned;

    clear_env();
    /* Not initialised. */
    assert_int_equal(PMI_Init(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_Initialized(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_Get_rank(&v), PMI_ERR_INIT);
    assert_int_equal(PMI_Get_size(&v), PMI_ERR_INIT);
    assert_int_equal(PMI_Get_appnum(&v), PMI_ERR_INIT);
    assert_int_equal(PMI_Get_universe_size(&v), PMI_ERR_INIT);
    assert_int_equal(PMI_KVS_Put("a", "b", "c"), PMI_ERR_INIT);
    assert_int_equal(PMI_KVS_Get("a", "b", buf, 5), PMI_ERR_INIT);
    assert_int_equal(PMI_Barrier(), PMI_ERR_INIT);
    assert_int_equal(v, -9);

    /* Initialised (as a singleton). */
    assert_int_equal(PMI_Init(&spawned), PMI_SUCCESS);
    assert_int_equal(PMI_Init(&spawned), PMI_FAIL); /* twice */
    assert_int_equal(PMI_Get_size(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_Get_rank(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_Get_appnum(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_Get_universe_size(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_Get_clique_size(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_Get_clique_ranks(NULL, 4), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Get_name_length_max(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Get_key_length_max(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Get_value_length_max(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Get_my_name(NULL, 64), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Get_my_name(buf, 3), PMI_ERR_INVALID_LENGTH);
    assert_string_equal(buf, "untouched");
    assert_int_equal(PMI_KVS_Put(NULL, "k", "v"), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Put("eddy-singleton", NULL, "v"),
                     PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Put("eddy-singleton", "k", NULL),
                     PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Put("other", "k", "v"), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Put("eddy-singleton", "", "v"),
                     PMI_ERR_INVALID_KEY_LENGTH);
    assert_int_equal(PMI_KVS_Put("eddy-singleton", "a=b", "v"),
                     PMI_ERR_INVALID_KEY);
    assert_int_equal(PMI_KVS_Put("eddy-singleton", "a b", "v"),
                     PMI_ERR_INVALID_KEY);
    memset(big, 'k', 300);
    big[300] = '\0';
    assert_int_equal(PMI_KVS_Put("eddy-singleton", big, "v"),
                     PMI_ERR_INVALID_KEY_LENGTH);
    assert_int_equal(PMI_KVS_Put("eddy-singleton", "k", "a b"),
                     PMI_ERR_INVALID_VAL);
    assert_int_equal(PMI_KVS_Put("eddy-singleton", "k", "a\nb"),
                     PMI_ERR_INVALID_VAL);
    memset(big, 'v', sizeof(big));
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(PMI_KVS_Put("eddy-singleton", "k", big), PMI_SUCCESS);
    {
        char *huge = malloc(8192);
        assert_non_null(huge);
        memset(huge, 'v', 8191);
        huge[8191] = '\0';
        assert_int_equal(PMI_KVS_Put("eddy-singleton", "k", huge),
                         PMI_ERR_INVALID_VAL_LENGTH);
        free(huge);
    }
    assert_int_equal(PMI_KVS_Commit(NULL), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Commit("other"), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Get(NULL, "k", buf, 64), PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Get("eddy-singleton", NULL, buf, 64),
                     PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Get("eddy-singleton", "k", NULL, 64),
                     PMI_ERR_INVALID_ARG);
    assert_int_equal(PMI_KVS_Get("eddy-singleton", "k", buf, 0),
                     PMI_ERR_INVALID_LENGTH);
    /* The stored value is 2047 bytes: too big for buf. */
    assert_int_equal(PMI_KVS_Get("eddy-singleton", "k", buf, sizeof(buf)),
                     PMI_ERR_INVALID_LENGTH);
    assert_string_equal(buf, "untouched");
    /* Optional functions. */
    assert_int_equal(PMI_Publish_name("s", "p"), PMI_FAIL);
    assert_int_equal(PMI_Unpublish_name("s"), PMI_FAIL);
    assert_int_equal(PMI_Lookup_name("s", buf), PMI_FAIL);
    assert_int_equal(PMI_KVS_Create(buf, 64), PMI_FAIL);
    assert_int_equal(PMI_KVS_Destroy("x"), PMI_FAIL);
    assert_int_equal(PMI_KVS_Iter_first("x", buf, 8, buf, 8), PMI_FAIL);
    assert_int_equal(PMI_KVS_Iter_next("x", buf, 8, buf, 8), PMI_FAIL);
    assert_int_equal(
        PMI_Spawn_multiple(0, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL),
        PMI_FAIL);
    assert_int_equal(PMI_Finalize(), PMI_SUCCESS);
}

/* Environment errors: PMI_Init fails and sends nothing. */
static void env_fails(const char *fd,
                      const char *rank,
                      const char *size,
                      const char *spawned)
{
    int sv[2], sp = -4;
    char buf[8];
    char fds[16];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    clear_env();
    if (fd) {
        snprintf(fds, sizeof(fds), "%d", sv[1]);
        setenv("PMI_FD", strcmp(fd, "ok") == 0 ? fds : fd, 1);
    }
    if (rank)
        setenv("PMI_RANK", rank, 1);
    if (size)
        setenv("PMI_SIZE", size, 1);
    if (spawned)
        setenv("PMI_SPAWNED", spawned, 1);
    assert_int_equal(PMI_Init(&sp), PMI_FAIL);
    assert_int_equal(sp, -4);
    assert_int_equal(recv(sv[0], buf, sizeof(buf), MSG_DONTWAIT), -1);
    assert_int_equal(errno, EAGAIN);
    close(sv[0]);
    close(sv[1]);
    clear_env();
}

static void test_env_errors(void **state)
{
    env_fails("abc", "0", "1", NULL);
    env_fails("3x", "0", "1", NULL);
    env_fails("-1", "0", "1", NULL);
    env_fails("999", "0", "1", NULL); /* not open */
    env_fails("ok", NULL, "4", NULL);
    env_fails("ok", "0", NULL, NULL);
    env_fails("ok", "4", "4", NULL);
    env_fails("ok", "-1", "4", NULL);
    env_fails("ok", "1", "0", NULL);
    env_fails("ok", " 1", "4", NULL);
    env_fails("ok", "1", "4", "2");
    env_fails("ok", "1", "4", "yes");
    env_fails(NULL, NULL, "4", NULL); /* a lost rank, not a singleton */
}

static void test_singleton(void **state)
{
    int v = -1, spawned = -1, ranks[4] = {-1, -1, -1, -1};
    char buf[64];

    clear_env();
    setenv("PMI_SIZE", "1", 1); /* consistent with a singleton */
    assert_int_equal(PMI_Init(&spawned), PMI_SUCCESS);
    unsetenv("PMI_SIZE");
    assert_int_equal(spawned, 0);
    assert_int_equal(PMI_Get_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 1);
    assert_int_equal(PMI_Get_rank(&v), PMI_SUCCESS);
    assert_int_equal(v, 0);
    assert_int_equal(PMI_Get_appnum(&v), PMI_SUCCESS);
    assert_int_equal(v, 0);
    assert_int_equal(PMI_Get_universe_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 1);
    assert_int_equal(PMI_KVS_Get_my_name(buf, sizeof(buf)), PMI_SUCCESS);
    assert_string_equal(buf, "eddy-singleton");
    assert_int_equal(PMI_KVS_Put(buf, "a", "1"), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Put(buf, "b", "2"), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Put(buf, "a", "3"), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Commit(buf), PMI_SUCCESS);
    assert_int_equal(PMI_Barrier(), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Get(buf, "a", buf + 32, 32), PMI_SUCCESS);
    assert_string_equal(buf + 32, "3");
    assert_int_equal(PMI_KVS_Get(buf, "b", buf + 32, 32), PMI_SUCCESS);
    assert_string_equal(buf + 32, "2");
    assert_int_equal(PMI_KVS_Get(buf, "c", buf + 32, 32), PMI_FAIL);
    assert_int_equal(PMI_KVS_Get(buf, "PMI_x", buf + 32, 32), PMI_SUCCESS);
    assert_string_equal(buf + 32, "");
    assert_int_equal(PMI_Get_clique_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 1);
    assert_int_equal(PMI_Get_clique_ranks(ranks, 4), PMI_SUCCESS);
    assert_int_equal(ranks[0], 0);
    assert_int_equal(ranks[1], -1);
    assert_int_equal(PMI_Finalize(), PMI_SUCCESS);
    /* A fresh singleton starts with an empty KVS. */
    assert_int_equal(PMI_Init(&spawned), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Get("eddy-singleton", "a", buf, 32), PMI_FAIL);
    assert_int_equal(PMI_Finalize(), PMI_SUCCESS);
}

#define MAPGET "cmd=get kvsname=kvs_42 key=PMI_process_mapping"

static void test_clique(void **state)
{
    static const struct step s[] = {
        INIT_STEPS,
        /* rank 3 of 8: node0 {0,1}, node1 {2,3}, node2 {4..7} */
        {MAPGET, "cmd=get_result rc=0 value=(vector,(0,2,2),(2,1,4))\n"},
        {MAPGET, "cmd=get_result rc=0 value=(vector,(0,2,2),(2,1,4))\n"},
        /* cyclic over two nodes: node1 {1,3,5,7} */
        {MAPGET, "cmd=get_result rc=0 value=(vector,(0,2,1),(0,2,1))\n"},
        {MAPGET, "cmd=get_result rc=0 value=(vector,(0,2,1),(0,2,1))\n"},
        {MAPGET, "cmd=get_result rc=0 value=(vector,(0,2,1),(0,2,1))\n"},
        /* unreadable or missing: this rank alone */
        {MAPGET, "cmd=get_result rc=0 value=(vector,(0,2,0))\n"},
        {MAPGET, "cmd=get_result rc=0 value=junk\n"},
        {MAPGET, "cmd=get_result rc=-1 msg=key_not_found\n"},
        {MAPGET, "cmd=get_result rc=0 value=\n"},
        {"cmd=finalize", "cmd=finalize_ack rc=0\n"},
    };
    struct fake f;
    int spawned, v = -1, r[8];

    fake_start(&f, s, N(s));
    assert_int_equal(PMI_Init(&spawned), PMI_SUCCESS);
    assert_int_equal(PMI_Get_clique_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 2);
    memset(r, -1, sizeof(r));
    assert_int_equal(PMI_Get_clique_ranks(r, 8), PMI_SUCCESS);
    assert_int_equal(r[0], 2);
    assert_int_equal(r[1], 3);
    assert_int_equal(r[2], -1);
    assert_int_equal(PMI_Get_clique_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 4);
    assert_int_equal(PMI_Get_clique_ranks(r, 3), PMI_ERR_INVALID_LENGTH);
    assert_int_equal(PMI_Get_clique_ranks(r, 4), PMI_SUCCESS);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 3);
    assert_int_equal(r[2], 5);
    assert_int_equal(r[3], 7);
    for (int i = 0; i < 4; i++) {
        v = -1;
        assert_int_equal(PMI_Get_clique_size(&v), PMI_SUCCESS);
        assert_int_equal(v, 1);
    }
    assert_int_equal(PMI_Finalize(), PMI_SUCCESS);
    fake_finish(&f, false);
}

/* Fork a client that initialises and aborts; the parent is the server.
 * Returns the child's wait status. */
static int abort_child(bool server_closes, const char *msg, const char *exp)
{
    struct step s[] = {INIT_STEPS, {exp, server_closes ? NULL : ""}};
    struct fake f;
    int status;
    pid_t pid;

    fake_open(&f, s, N(s));
    f.keep_open = !server_closes;
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int spawned;
        close(f.sfd);
        if (PMI_Init(&spawned) != PMI_SUCCESS)
            _exit(98);
        PMI_Abort(7, msg);
        _exit(99);
    }
    close(f.cfd);
    run_script(&f);
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (f.sfd >= 0)
        close(f.sfd);
    clear_env();
    if (f.err[0])
        fail_msg("%s", f.err);
    assert_int_equal(f.done, f.nsteps);
    return status;
}

static void test_abort(void **state)
{
    int status;
    pid_t pid;

    status = abort_child(true, "boom\nnow  =x",
                         "cmd=abort exitcode=7 message=boom now  =x");
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 7);
    /* The server never ends us: PMI_Abort exits by itself. */
    status = abort_child(false, NULL, "cmd=abort exitcode=7");
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 7);
    /* Uninitialised: just exits. */
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        PMI_Abort(5, "x");
        _exit(99);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 5);
}

/* --- against the real engine ------------------------------------------- */

struct engine {
    pmi_server_t *srv;
    int fd;
    int fences;
    int aborts;
    int abort_code;
    char abort_msg[128];
    int proto_errors;
};

static void eng_send(int client, const char *line, size_t len, void *arg)
{
    struct engine *e = arg;

    if (write(e->fd, line, len) != (ssize_t)len)
        e->proto_errors++;
}

static void eng_fence(const struct pmi_kv *kvs, size_t count, void *arg)
{
    struct engine *e = arg;

    /* One node: this node's pairs are the whole job's. */
    e->fences++;
    if (pmi_server_fence_done(e->srv, kvs, count, NULL) < 0)
        e->proto_errors++;
}

static void eng_abort(int client, int code, const char *msg, void *arg)
{
    struct engine *e = arg;

    e->aborts++;
    e->abort_code = code;
    snprintf(e->abort_msg, sizeof(e->abort_msg), "%s", msg);
}

/* Feed the engine until the client hangs up (or aborts). */
static void *engine_thread(void *arg)
{
    struct engine *e = arg;
    char buf[512];
    ssize_t n;

    for (;;) {
        n = read(e->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        if (pmi_server_feed(e->srv, 0, buf, (size_t)n) < 0)
            e->proto_errors++;
        if (e->aborts)
            break;
    }
    pmi_server_client_gone(e->srv, 0);
    close(e->fd);
    return NULL;
}

static void engine_start(struct engine *e, int *cfd)
{
    struct pmi_server_params p = {
        .kvsname = "eddy-7", .universe_size = 1, .nclients = 1};
    struct pmi_server_ops ops = {
        .send = eng_send, .fence = eng_fence, .abort = eng_abort};
    int sv[2];

    memset(e, 0, sizeof(*e));
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    e->fd = sv[0];
    *cfd = sv[1];
    e->srv = pmi_server_create(&p, &ops, e, NULL);
    assert_non_null(e->srv);
    set_env(sv[1], "0", "1");
}

static void test_real_engine(void **state)
{
    struct engine e;
    pthread_t t;
    int cfd, spawned, v;
    char name[256], val[1100], big[1024];

    engine_start(&e, &cfd);
    assert_int_equal(pthread_create(&t, NULL, engine_thread, &e), 0);
    assert_int_equal(PMI_Init(&spawned), PMI_SUCCESS);
    assert_int_equal(spawned, 0);
    assert_int_equal(PMI_Get_appnum(&v), PMI_SUCCESS);
    assert_int_equal(v, 0);
    assert_int_equal(PMI_Get_universe_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 1);
    assert_int_equal(PMI_KVS_Get_value_length_max(&v), PMI_SUCCESS);
    assert_true(v >= 1024);
    assert_int_equal(PMI_KVS_Get_my_name(name, sizeof(name)), PMI_SUCCESS);
    assert_string_equal(name, "eddy-7");
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(PMI_KVS_Put(name, "card-0", "tcp://h:1=2"), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Put(name, "big", big), PMI_SUCCESS);
    /* The engine refuses a second put of a key. */
    assert_int_equal(PMI_KVS_Put(name, "card-0", "again"), PMI_FAIL);
    assert_int_equal(PMI_KVS_Commit(name), PMI_SUCCESS);
    assert_int_equal(PMI_Barrier(), PMI_SUCCESS);
    assert_int_equal(PMI_KVS_Get(name, "card-0", val, sizeof(val)),
                     PMI_SUCCESS);
    assert_string_equal(val, "tcp://h:1=2");
    assert_int_equal(PMI_KVS_Get(name, "big", val, sizeof(val)), PMI_SUCCESS);
    assert_string_equal(val, big);
    assert_int_equal(PMI_KVS_Get(name, "missing", val, sizeof(val)), PMI_FAIL);
    assert_int_equal(PMI_Get_clique_size(&v), PMI_SUCCESS);
    assert_int_equal(v, 1);
    assert_int_equal(PMI_Barrier(), PMI_SUCCESS);
    assert_int_equal(PMI_Finalize(), PMI_SUCCESS);
    pthread_join(t, NULL);
    assert_int_equal(e.fences, 2);
    assert_int_equal(e.proto_errors, 0);
    pmi_server_destroy(e.srv);
    clear_env();
}

static void test_real_engine_abort(void **state)
{
    struct engine e;
    int cfd, status;
    pid_t pid;

    engine_start(&e, &cfd);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int spawned;
        close(e.fd);
        if (PMI_Init(&spawned) != PMI_SUCCESS)
            _exit(98);
        PMI_Abort(3, "rank 0 gave up");
        _exit(99);
    }
    close(cfd);
    engine_thread(&e); /* returns at the abort and closes: child exits */
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 3);
    assert_int_equal(e.aborts, 1);
    assert_int_equal(e.abort_code, 3);
    assert_string_equal(e.abort_msg, "rank 0 gave up");
    assert_int_equal(e.proto_errors, 0);
    pmi_server_destroy(e.srv);
    clear_env();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_session),
        cmocka_unit_test(test_error_answers),
        cmocka_unit_test(test_init_errors),
        cmocka_unit_test(test_server_gone_and_malformed),
        cmocka_unit_test(test_get_errors),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_env_errors),
        cmocka_unit_test(test_singleton),
        cmocka_unit_test(test_clique),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_real_engine),
        cmocka_unit_test(test_real_engine_abort),
    };
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");

    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    unsetenv("PMI_DEBUG");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
