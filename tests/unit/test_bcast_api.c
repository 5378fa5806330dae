/* test_bcast_api.c - the bcast client API (eddy/bcast.h) against a fake
 * bcast service.
 *
 * As in test_job_api.c: a fake broker in a thread listens on a unix
 * socket in a mkdtemp directory, accepts one client and greets it.  It
 * answers bcast.open with session 7 on nodes 0-3 (or an error, chosen by
 * job ID), checks every bcast.chunk (session, increasing offsets, rawlen
 * against the payload, zstd frames decompressed) and puts the bytes back
 * together, and answers bcast.commit with a result chosen by the
 * destination path.  Chunk answers are held back: the fake answers the
 * oldest one only after the socket has been quiet for a tick, so a client
 * that ignored its window would be seen with more than 4 unanswered; the
 * test can also stop the answers altogether (fk->allow) to look at the
 * client mid-transfer, deterministically.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
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
#include <xxhash.h>
#include <zstd.h>

#include "eddy/bcast.h"
#include "eddy/core.h"
#include "src/common/bcast_proto.h"
#include "src/common/bcast_tree.h"
#include "src/common/msg.h"
#include "src/common/rmtree.h"
#include "tests/unit/support/wire.h"

static int timeout_scale = 1;

/* ---- fake broker ------------------------------------------------------ */

#define FAKE_SID 7
#define WINDOW 4            /* what the client must respect */
#define PENDING_MAX 16      /* chunks the fake can hold unanswered */
#define DATA_MAX (1u << 20) /* bytes the fake puts back together */
#define TICK_MS 5           /* quiet time before a held answer goes out */
#define CHUNK 4096          /* chunk size of most tests */

struct fake {
    char dir[64];
    char path[96];
    char uri[112];
    int listen_fd;
    pthread_t thread;
    bool running;

    pthread_mutex_t lock;
    /* set by the tests */
    int allow;          /* chunk answers the fake may still give; -1: any */
    uint32_t chunksize; /* the largest rawlen expected */
    /* the session */
    json_t *open_body;   /* of the last bcast.open */
    json_t *commit_body; /* of the last bcast.commit, or NULL */
    char dest[128];      /* its path */
    unsigned char *data; /* the bytes received, holes as zeros */
    size_t data_len;     /* end of the last chunk */
    uint64_t raw_bytes;  /* sum of the chunks' rawlen */
    int nchunks;         /* chunks received */
    int nz;              /* of which compressed */
    int answered;        /* chunk answers sent */
    msg_t *pending[PENDING_MAX];
    int npending;
    int pending_max; /* most chunks ever unanswered at once */
    int aborts_ok;   /* bcast.abort of session 7, without response */
    int aborts_bad;
    int bad; /* protocol violations; 'why' says what the first was */
    char why[256];
    bool stop; /* set by teardown: a failed test left its handle open */
};

/* Malformed answers to bcast.commit, for paths "bad/0", "bad/1", ... */
static const char *const bad_commit[] = {
    "{}",
    "{\"ok\":\"0-3\"}",
    "{\"ok\":5,\"errors\":[]}",
    "{\"ok\":\"0-3\",\"errors\":{}}",
    "{\"ok\":\"0-3\",\"errors\":[\"rank 1 failed\"]}",
    "{\"ok\":\"0-3\",\"errors\":[{\"rank\":-1,\"errnum\":5,\"errstr\":\"x\"}]}",
    "{\"ok\":\"0-3\",\"errors\":[{\"rank\":4294967296,\"errnum\":5,"
    "\"errstr\":\"x\"}]}",
    "{\"ok\":\"0-3\",\"errors\":[{\"rank\":1,\"errnum\":0,\"errstr\":\"x\"}]}",
    "{\"ok\":\"0-3\",\"errors\":[{\"rank\":1,\"errnum\":5}]}",
    "{\"ok\":\"0-3\",\"errors\":[{\"rank\":\"1\",\"errnum\":5,"
    "\"errstr\":\"x\"}]}",
};
#define NBAD_COMMIT (sizeof(bad_commit) / sizeof(bad_commit[0]))

#define PARTIAL_ERRSTR_1 "rank 1: bin/x: No space left on device"
#define PARTIAL_ERRSTR_3 "rank 3: bin/x: checksum mismatch"

/* Record the first protocol violation (lock held). */
static void violation(struct fake *fk, const char *fmt, ...)
{
    va_list ap;

    if (fk->bad++ == 0) {
        va_start(ap, fmt);
        vsnprintf(fk->why, sizeof(fk->why), fmt, ap);
        va_end(ap);
    }
}

static bool dest_is(const struct fake *fk, const char *prefix)
{
    return strncmp(fk->dest, prefix, strlen(prefix)) == 0;
}

static int respond_json(int fd, const msg_t *req, const char *text)
{
    json_t *o = json_loads(text, 0, NULL);
    msg_t *m;

    if (!o || !(m = msg_create(MSG_RESPONSE, req->topic, o, NULL, 0)))
        return -1;
    m->matchtag = req->matchtag;
    return wire_send_msg(fd, m);
}

static int respond_error(int fd, const msg_t *req, int errnum, const char *s)
{
    msg_t *m = msg_create_error(req, errnum, s);

    return m ? wire_send_msg(fd, m) : -1;
}

static void drop_pending(struct fake *fk)
{
    for (int i = 0; i < fk->npending; i++)
        msg_decref(fk->pending[i]);
    fk->npending = 0;
}

/* A new session (lock held). */
static void session_reset(struct fake *fk, const msg_t *req)
{
    const char *path = "";

    json_decref(fk->open_body);
    fk->open_body = json_incref(req->body);
    json_decref(fk->commit_body);
    fk->commit_body = NULL;
    (void)json_unpack(req->body, "{s:s}", "path", &path);
    snprintf(fk->dest, sizeof(fk->dest), "%s", path);
    free(fk->data);
    fk->data = NULL;
    fk->data_len = 0;
    fk->raw_bytes = 0;
    fk->nchunks = fk->nz = fk->answered = 0;
    fk->pending_max = 0;
    drop_pending(fk);
}

static int serve_open(struct fake *fk, int fd, const msg_t *req)
{
    json_int_t id = -1;

    pthread_mutex_lock(&fk->lock);
    session_reset(fk, req);
    pthread_mutex_unlock(&fk->lock);
    if (req->body)
        (void)json_unpack(req->body, "{s:I}", "id", &id);
    if (id == 5)
        return respond_error(fd, req, ENOENT, "job 5: no such job");
    if (id == 6)
        return respond_json(fd, req, "{\"sid\":0,\"nodes\":\"0-3\"}");
    if (id == 8)
        return respond_json(fd, req, "{\"nodes\":\"0-3\"}");
    return respond_json(fd, req, "{\"sid\":7,\"nodes\":\"0-3\"}");
}

/* Check one chunk and put its bytes in place (lock held). */
static void take_chunk(struct fake *fk, const msg_t *req)
{
    json_int_t sid = -1, offset = -1, rawlen = -1;
    int z = 0;
    unsigned char *buf = NULL;
    const void *raw = req->payload;

    if (json_unpack(req->body, "{s:I s:I s:I s:b !}", "sid", &sid, "offset",
                    &offset, "rawlen", &rawlen, "z", &z) < 0) {
        violation(fk, "chunk %d: malformed body", fk->nchunks);
        return;
    }
    if (sid != FAKE_SID)
        violation(fk, "chunk %d: sid %lld", fk->nchunks, (long long)sid);
    if (offset < 0 || (uint64_t)offset < fk->data_len)
        violation(fk, "chunk %d: offset %lld before %zu", fk->nchunks,
                  (long long)offset, fk->data_len);
    if (rawlen <= 0 || rawlen > (json_int_t)fk->chunksize)
        violation(fk, "chunk %d: rawlen %lld", fk->nchunks, (long long)rawlen);
    if (offset < 0 || rawlen <= 0 || offset > DATA_MAX ||
        rawlen > DATA_MAX - offset) {
        violation(fk, "chunk %d: out of the fake's range", fk->nchunks);
        return;
    }
    if (z) {
        size_t r;

        fk->nz++;
        if (req->payload_len >= (size_t)rawlen)
            violation(fk, "chunk %d: compressed to %zu of %lld bytes",
                      fk->nchunks, req->payload_len, (long long)rawlen);
        if (!(buf = malloc((size_t)rawlen)))
            return;
        r = ZSTD_decompress(buf, (size_t)rawlen, req->payload,
                            req->payload_len);
        if (ZSTD_isError(r) || r != (size_t)rawlen) {
            violation(fk, "chunk %d: not a zstd frame of %lld bytes",
                      fk->nchunks, (long long)rawlen);
            free(buf);
            return;
        }
        raw = buf;
    } else if (req->payload_len != (size_t)rawlen) {
        violation(fk, "chunk %d: %zu bytes, rawlen %lld", fk->nchunks,
                  req->payload_len, (long long)rawlen);
        return;
    }
    if (!fk->data && !(fk->data = calloc(1, DATA_MAX))) {
        free(buf);
        return;
    }
    memcpy(fk->data + offset, raw, (size_t)rawlen);
    fk->data_len = (size_t)(offset + rawlen);
    fk->raw_bytes += (uint64_t)rawlen;
    free(buf);
}

static int serve_chunk(struct fake *fk, int fd, const msg_t *req)
{
    pthread_mutex_lock(&fk->lock);
    take_chunk(fk, req);
    fk->nchunks++;
    if (fk->npending == PENDING_MAX) {
        violation(fk, "more than %d chunks unanswered", PENDING_MAX);
        pthread_mutex_unlock(&fk->lock);
        return -1;
    }
    fk->pending[fk->npending++] = msg_incref((msg_t *)req);
    if (fk->npending > fk->pending_max)
        fk->pending_max = fk->npending;
    pthread_mutex_unlock(&fk->lock);
    return 0;
}

/* The socket was quiet for a tick: answer the oldest held chunk, if the
 * test allows it. */
static int answer_one(struct fake *fk, int fd)
{
    msg_t *req;
    bool fail;
    int rc;

    pthread_mutex_lock(&fk->lock);
    if (fk->npending == 0 || fk->allow == 0 || dest_is(fk, "hold")) {
        pthread_mutex_unlock(&fk->lock);
        return 0;
    }
    req = fk->pending[0];
    memmove(fk->pending, fk->pending + 1,
            (size_t)(fk->npending - 1) * sizeof(fk->pending[0]));
    fk->npending--;
    if (fk->allow > 0)
        fk->allow--;
    fail = dest_is(fk, "chunkfail") && fk->answered == 1;
    fk->answered++;
    pthread_mutex_unlock(&fk->lock);
    if (fail)
        rc = respond_error(fd, req, ENOSPC,
                           "rank 2: chunkfail/x: No space left on device");
    else
        rc = respond_json(fd, req, "{}");
    msg_decref(req);
    return rc;
}

static int serve_commit(struct fake *fk, int fd, const msg_t *req)
{
    json_int_t sid = -1;
    char dest[sizeof(fk->dest)];
    unsigned i;

    pthread_mutex_lock(&fk->lock);
    (void)json_unpack(req->body, "{s:I}", "sid", &sid);
    if (sid != FAKE_SID)
        violation(fk, "commit: sid %lld", (long long)sid);
    if (fk->npending > 0)
        violation(fk, "commit with %d chunks unanswered", fk->npending);
    json_decref(fk->commit_body);
    fk->commit_body = json_incref(req->body);
    snprintf(dest, sizeof(dest), "%s", fk->dest);
    pthread_mutex_unlock(&fk->lock);

    if (sscanf(dest, "bad/%u", &i) == 1 && i < NBAD_COMMIT)
        return respond_json(fd, req, bad_commit[i]);
    if (!strncmp(dest, "partial", 7)) {
        char text[512];
        snprintf(
            text, sizeof(text),
            "{\"ok\":\"0,2\",\"errors\":["
            "{\"rank\":1,\"errnum\":%d,\"errstr\":\"" PARTIAL_ERRSTR_1 "\"},"
            "{\"rank\":3,\"errnum\":%d,\"errstr\":\"" PARTIAL_ERRSTR_3 "\"}]}",
            ENOSPC, EBADMSG);
        return respond_json(fd, req, text);
    }
    if (!strncmp(dest, "aborted", 7))
        return respond_error(fd, req, ECONNABORTED,
                             "bcast 7: aborted: rank 1 lost");
    return respond_json(fd, req, "{\"ok\":\"0-3\",\"errors\":[]}");
}

static void serve_abort(struct fake *fk, const msg_t *req)
{
    json_int_t sid = -1;

    pthread_mutex_lock(&fk->lock);
    if ((req->flags & MSG_FLAG_NORESPONSE) &&
        json_unpack(req->body, "{s:I}", "sid", &sid) == 0 && sid == FAKE_SID)
        fk->aborts_ok++;
    else
        fk->aborts_bad++;
    drop_pending(fk);
    pthread_mutex_unlock(&fk->lock);
}

static int serve_one(struct fake *fk, int fd, const msg_t *req)
{
    const char *t = req->topic;

    if (!strcmp(t, "bcast.open"))
        return serve_open(fk, fd, req);
    if (!strcmp(t, "bcast.chunk"))
        return serve_chunk(fk, fd, req);
    if (!strcmp(t, "bcast.commit"))
        return serve_commit(fk, fd, req);
    if (!strcmp(t, "bcast.abort")) {
        serve_abort(fk, req);
        return 0;
    }
    if (!strcmp(t, "test.sync"))
        return respond_json(fd, req, "{}");
    return respond_error(fd, req, ENOSYS, "unknown topic");
}

static void *fake_main(void *arg)
{
    struct fake *fk = arg;
    struct pollfd pfd = {.fd = fk->listen_fd, .events = POLLIN};
    struct timeval tv = {.tv_sec = 10 * timeout_scale};
    int quiet = 0, quiet_max = 10000 / TICK_MS * timeout_scale;
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
    pfd.fd = fd;
    while (quiet < quiet_max) {
        int rc = 0, n = poll(&pfd, 1, TICK_MS);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            break;
        if (n == 0) {
            bool stop;

            pthread_mutex_lock(&fk->lock);
            stop = fk->stop;
            pthread_mutex_unlock(&fk->lock);
            if (stop)
                break;
            quiet++;
            if (answer_one(fk, fd) < 0)
                break;
            continue;
        }
        quiet = 0;
        if (!(req = wire_read_msg(fd)))
            break;
        if (!(req->flags & MSG_FLAG_CANCEL))
            rc = serve_one(fk, fd, req);
        msg_decref(req);
        if (rc < 0)
            break;
    }
    pthread_mutex_lock(&fk->lock);
    drop_pending(fk);
    pthread_mutex_unlock(&fk->lock);
    close(fd);
    return NULL;
}

static int setup(void **state)
{
    struct fake *fk = calloc(1, sizeof(*fk));

    assert_non_null(fk);
    pthread_mutex_init(&fk->lock, NULL);
    fk->allow = -1;
    fk->chunksize = CHUNK;
    snprintf(fk->dir, sizeof(fk->dir), "/tmp/test_bcast_api.XXXXXX");
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
    pthread_mutex_lock(&fk->lock);
    fk->stop = true;
    pthread_mutex_unlock(&fk->lock);
    if (fk->running)
        pthread_join(fk->thread, NULL);
    close(fk->listen_fd);
    (void)rmtree(fk->dir, NULL);
    json_decref(fk->open_body);
    json_decref(fk->commit_body);
    free(fk->data);
    pthread_mutex_destroy(&fk->lock);
    free(fk);
    *state = NULL;
    return 0;
}

/* ---- helpers ------------------------------------------------------------ */

/* What the fake saw, copied out under its lock, so that the tests assert
 * without holding it (a failed assertion leaves the function). */
struct seen {
    json_t *open_body;
    json_t *commit_body;
    unsigned char *data;
    size_t data_len;
    uint64_t raw_bytes;
    int nchunks, nz, pending_max, aborts_ok, aborts_bad, bad;
    char why[256];
};

static void seen_get(struct fake *fk, struct seen *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_lock(&fk->lock);
    s->open_body = fk->open_body ? json_incref(fk->open_body) : NULL;
    s->commit_body = fk->commit_body ? json_incref(fk->commit_body) : NULL;
    if (fk->data && (s->data = malloc(fk->data_len + 1)))
        memcpy(s->data, fk->data, fk->data_len);
    s->data_len = fk->data_len;
    s->raw_bytes = fk->raw_bytes;
    s->nchunks = fk->nchunks;
    s->nz = fk->nz;
    s->pending_max = fk->pending_max;
    s->aborts_ok = fk->aborts_ok;
    s->aborts_bad = fk->aborts_bad;
    s->bad = fk->bad;
    memcpy(s->why, fk->why, sizeof(s->why));
    pthread_mutex_unlock(&fk->lock);
    if (fk->data)
        assert_non_null(s->data);
}

static void seen_release(struct seen *s)
{
    json_decref(s->open_body);
    json_decref(s->commit_body);
    free(s->data);
}

static int seen_nchunks(struct fake *fk)
{
    int n;

    pthread_mutex_lock(&fk->lock);
    n = fk->nchunks;
    pthread_mutex_unlock(&fk->lock);
    return n;
}

static void set_allow(struct fake *fk, int allow)
{
    pthread_mutex_lock(&fk->lock);
    fk->allow = allow;
    pthread_mutex_unlock(&fk->lock);
}

static eddy_t *open_ok(struct fake *fk)
{
    eddy_error_t err = {{0}};
    eddy_t *h = eddy_open(fk->uri, 0, &err);

    if (!h)
        fail_msg("eddy_open: %s", err.text);
    return h;
}

/* A round trip: every request sent before it has been served. */
static void sync_fake(eddy_t *h)
{
    eddy_future_t *f = eddy_rpc(h, "test.sync", 0, 0, NULL, NULL, 0);

    assert_non_null(f);
    assert_int_equal(eddy_future_wait_for(f, 10.0 * timeout_scale), 0);
    eddy_future_destroy(f);
}

static void check_no_violation(const struct seen *s)
{
    if (s->bad)
        fail_msg("the fake saw %d protocol violations; first: %s", s->bad,
                 s->why);
}

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Deterministic bytes: random-looking, so zstd cannot shrink them. */
static void fill_random(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 32);
    }
}

/* A regular file in the fake's directory holding 'len' bytes of 'data',
 * mode 0640, mtime 1700000000.123456789; an fd open for reading. */
static int make_file(struct fake *fk,
                     const char *name,
                     const void *data,
                     size_t len)
{
    char path[160];
    struct timespec ts[2] = {{.tv_sec = 0, .tv_nsec = UTIME_OMIT},
                             {.tv_sec = 1700000000, .tv_nsec = 123456789}};
    int fd;

    snprintf(path, sizeof(path), "%s/%s", fk->dir, name);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, 0640), 0);
    assert_int_equal(futimens(fd, ts), 0);
    return fd;
}

/* The XXH3-128 of 'data' in lowercase hex, as the commit carries it. */
static void hash_hex(const void *data, size_t len, char out[33])
{
    XXH128_canonical_t c;

    XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

/* Wait for the end of a transfer (bounded). */
static void wait_done(eddy_future_t *f)
{
    if (eddy_future_wait_for(f, 10.0 * timeout_scale) < 0)
        fail_msg("bcast did not end: %s", strerror(errno));
}

/* Run the loop until the fake has received 'n' chunks; the transfer must
 * not end meanwhile. */
static void wait_chunks(struct fake *fk, eddy_future_t *f, int n)
{
    double end = now() + 10.0 * timeout_scale;
    int got;

    while ((got = seen_nchunks(fk)) < n) {
        if (now() > end)
            fail_msg("the fake has %d chunks, not %d", got, n);
        errno = 0;
        assert_int_equal(eddy_future_wait_for(f, 0.01), -1);
        assert_int_equal(errno, ETIMEDOUT);
    }
}

/* Check that the fake received exactly 'data' and a commit that
 * describes it: its size and hash, and (mode >= 0) the mode and mtime of
 * make_file().  Returns the snapshot for more checks (caller releases). */
static void check_received(struct fake *fk,
                           const unsigned char *data,
                           size_t len,
                           json_int_t mode,
                           struct seen *s)
{
    json_int_t sid = 0, size = 0, m = 0, mtime = 0, nsec = 0;
    const char *hash = NULL;
    char want[33];

    seen_get(fk, s);
    check_no_violation(s);
    assert_true(s->data_len <= len);
    assert_non_null(s->data);
    assert_memory_equal(s->data, data, s->data_len);
    /* a trailing hole is not sent */
    for (size_t i = s->data_len; i < len; i++)
        assert_int_equal(data[i], 0);
    assert_non_null(s->commit_body);
    assert_int_equal(json_unpack(s->commit_body, "{s:I s:I s:I s:I s:I s:s !}",
                                 "sid", &sid, "size", &size, "mode", &m,
                                 "mtime", &mtime, "mtime_nsec", &nsec, "hash",
                                 &hash),
                     0);
    assert_int_equal(sid, FAKE_SID);
    assert_int_equal(size, len);
    if (mode >= 0) {
        assert_int_equal(m & 07777, mode);
        assert_int_equal(mtime, 1700000000);
        assert_int_equal(nsec, 123456789);
    }
    hash_hex(data, len, want);
    assert_string_equal(hash, want);
}

/* ---- tests ------------------------------------------------------------- */

/* A regular file of several chunks arrives byte for byte, with its
 * metadata and hash; never more than 4 chunks unanswered; progress rises
 * by whole chunks to the size. */
static void test_file(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    size_t len = 9 * CHUNK + 1234;
    unsigned char *data = malloc(len);
    uint64_t sent = 1, last = 0;
    int64_t total = 0;
    const char *ok = NULL;
    size_t nfailed = 9;
    json_int_t id = 0, flags = -1;
    const char *path = NULL;
    eddy_future_t *f;
    struct seen s;
    int fd, samples = 0;

    assert_non_null(data);
    fill_random(data, len, 1);
    fd = make_file(fk, "src", data, len);
    assert_non_null(
        f = eddy_job_bcast(h, 1, fd, "bin/tool", CHUNK, EDDY_BCAST_PRESERVE));
    /* a regular file's size is known at once */
    assert_int_equal(eddy_job_bcast_progress(f, &sent, &total), 0);
    assert_int_equal(sent, 0);
    assert_int_equal(total, len);
    /* progress goes up by whole chunks while the fake holds answers */
    while (eddy_future_wait_for(f, 0.002) < 0) {
        assert_int_equal(errno, ETIMEDOUT);
        assert_int_equal(eddy_job_bcast_progress(f, &sent, &total), 0);
        assert_true(sent >= last && sent <= len);
        assert_true(sent % CHUNK == 0 || sent == len);
        assert_int_equal(total, len);
        last = sent;
        if (++samples > 5000 * timeout_scale)
            fail_msg("bcast did not end");
    }
    assert_int_equal(eddy_job_bcast_get(f, &ok, &nfailed), 0);
    assert_string_equal(ok, "0-3");
    assert_int_equal(nfailed, 0);
    assert_int_equal(eddy_job_bcast_get(f, NULL, NULL), 0);
    errno = 0;
    assert_int_equal(eddy_job_bcast_failure(f, 0, NULL, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(eddy_job_bcast_progress(f, &sent, &total), 0);
    assert_int_equal(sent, len);
    assert_int_equal(total, len);

    /* what the service saw */
    check_received(fk, data, len, 0640, &s);
    assert_int_equal(json_unpack(s.open_body, "{s:I s:s s:I !}", "id", &id,
                                 "path", &path, "flags", &flags),
                     0);
    assert_int_equal(id, 1);
    assert_string_equal(path, "bin/tool");
    assert_int_equal(flags, EDDY_BCAST_PRESERVE);
    assert_int_equal(s.nchunks, 10);
    assert_int_equal(s.nz, 0);
    assert_int_equal(s.raw_bytes, len);
    /* the window is respected (test_pipe shows it is used to the full:
     * here a loaded machine could pause the client between two chunks
     * long enough for the fake to answer one) */
    assert_true(s.pending_max >= 1 && s.pending_max <= WINDOW);
    seen_release(&s);
    eddy_future_destroy(f);

    /* the descriptor is the caller's: still open */
    assert_int_equal(fcntl(fd, F_GETFD), FD_CLOEXEC);
    close(fd);
    free(data);
    eddy_close(h);
}

/* -z: compressible chunks travel as zstd frames, the others raw; both
 * decompress to the source's bytes. */
static void test_compress(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    size_t len = 8 * CHUNK + 100;
    unsigned char *data = malloc(len);
    json_int_t flags = -1;
    eddy_future_t *f;
    struct seen s;
    int fd;

    assert_non_null(data);
    fill_random(data, 3 * CHUNK, 2);
    for (size_t i = 3 * CHUNK; i < len; i++)
        data[i] = "eddy bcast ships files to every node\n"[i % 37];
    fd = make_file(fk, "src", data, len);
    assert_non_null(
        f = eddy_job_bcast(h, 1, fd, "z", CHUNK,
                           EDDY_BCAST_COMPRESS | EDDY_BCAST_OVERWRITE));
    wait_done(f);
    assert_int_equal(eddy_job_bcast_get(f, NULL, NULL), 0);
    check_received(fk, data, len, -1, &s);
    assert_int_equal(json_unpack(s.open_body, "{s:I}", "flags", &flags), 0);
    assert_int_equal(flags, EDDY_BCAST_COMPRESS | EDDY_BCAST_OVERWRITE);
    assert_int_equal(s.nchunks, 9);
    /* the random chunks were not worth compressing, the text was */
    assert_int_equal(s.nz, 6);
    seen_release(&s);
    eddy_future_destroy(f);
    close(fd);
    free(data);
    eddy_close(h);
}

/* A sparse file: the holes (trailing one included) read as zeros at the
 * other end, and the size and hash cover them. */
static void test_sparse(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    size_t len = 128 * 1024;
    unsigned char *data = calloc(1, len);
    eddy_future_t *f;
    struct seen s;
    int fd;

    assert_non_null(data);
    fill_random(data, CHUNK, 3);
    fill_random(data + 64 * 1024, 2 * CHUNK, 4);
    fd = make_file(fk, "src", data, CHUNK);
    assert_int_equal(pwrite(fd, data + 64 * 1024, 2 * CHUNK, 64 * 1024),
                     2 * CHUNK);
    assert_int_equal(ftruncate(fd, (off_t)len), 0);
    assert_non_null(f = eddy_job_bcast(h, 1, fd, "sparse", CHUNK, 0));
    wait_done(f);
    assert_int_equal(eddy_job_bcast_get(f, NULL, NULL), 0);
    check_received(fk, data, len, -1, &s);
    assert_true(s.raw_bytes <= len);
    seen_release(&s);
    eddy_future_destroy(f);
    close(fd);
    free(data);
    eddy_close(h);
}

/* A pipe: its size is unknown (-1) until its end; the fake, told to hold
 * its answers, sees exactly the window, then progress follows its
 * answers one by one. */
static void test_pipe(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    size_t len = 5 * CHUNK + 100; /* fits in a pipe's buffer */
    unsigned char *data = malloc(len);
    uint64_t sent = 1;
    int64_t total = 0;
    eddy_future_t *f;
    struct seen s;
    double end;
    int p[2];

    assert_non_null(data);
    fill_random(data, len, 5);
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    assert_int_equal(write(p[1], data, len), (ssize_t)len);
    close(p[1]);
    set_allow(fk, 0);

    assert_non_null(f = eddy_job_bcast(h, 1, p[0], "from-pipe", CHUNK, 0));
    assert_int_equal(eddy_job_bcast_progress(f, &sent, &total), 0);
    assert_int_equal(sent, 0);
    assert_int_equal(total, -1);
    /* the window fills, and stays full while nothing is answered */
    wait_chunks(fk, f, WINDOW);
    errno = 0;
    assert_int_equal(eddy_future_wait_for(f, 0.05), -1);
    assert_int_equal(errno, ETIMEDOUT);
    assert_int_equal(seen_nchunks(fk), WINDOW);
    set_allow(fk, 2);
    /* two answers: two chunks acknowledged, two more sent; the end of the
     * pipe is not reached yet, so its size is still unknown */
    end = now() + 10.0 * timeout_scale;
    do {
        assert_int_equal(eddy_future_wait_for(f, 0.01), -1);
        assert_int_equal(eddy_job_bcast_progress(f, &sent, &total), 0);
        if (now() > end)
            fail_msg("progress stuck at %ju", (uintmax_t)sent);
    } while (sent < 2 * CHUNK);
    assert_int_equal(sent, 2 * CHUNK);
    assert_int_equal(total, -1);
    wait_chunks(fk, f, WINDOW + 2);
    seen_get(fk, &s);
    assert_int_equal(s.nchunks, WINDOW + 2);
    assert_int_equal(s.pending_max, WINDOW);
    seen_release(&s);
    set_allow(fk, -1);

    wait_done(f);
    assert_int_equal(eddy_job_bcast_get(f, NULL, NULL), 0);
    assert_int_equal(eddy_job_bcast_progress(f, &sent, &total), 0);
    assert_int_equal(sent, len);
    assert_int_equal(total, len);
    check_received(fk, data, len, -1, &s);
    seen_release(&s);
    eddy_future_destroy(f);
    close(p[0]);
    free(data);
    eddy_close(h);
}

/* Some nodes failed: the transfer succeeds, and says which and why. */
static void test_results(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    const char *ok = NULL, *errstr = NULL;
    size_t nfailed = 0;
    uint32_t rank = 99;
    int errnum = 0, fd;
    eddy_future_t *f;
    struct seen s;

    fd = make_file(fk, "src", "hello\n", 6);
    assert_non_null(f = eddy_job_bcast(h, 1, fd, "partial/x", 0, 0));
    wait_done(f);
    assert_int_equal(eddy_job_bcast_get(f, &ok, &nfailed), 0);
    assert_string_equal(ok, "0,2");
    assert_int_equal(nfailed, 2);
    assert_int_equal(eddy_job_bcast_failure(f, 0, &rank, &errnum, &errstr), 0);
    assert_int_equal(rank, 1);
    assert_int_equal(errnum, ENOSPC);
    assert_string_equal(errstr, PARTIAL_ERRSTR_1);
    assert_int_equal(eddy_job_bcast_failure(f, 1, &rank, &errnum, &errstr), 0);
    assert_int_equal(rank, 3);
    assert_int_equal(errnum, EBADMSG);
    assert_string_equal(errstr, PARTIAL_ERRSTR_3);
    assert_int_equal(eddy_job_bcast_failure(f, 1, NULL, NULL, NULL), 0);
    errno = 0;
    rank = 99;
    assert_int_equal(eddy_job_bcast_failure(f, 2, &rank, &errnum, &errstr), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(rank, 99);
    check_received(fk, (const unsigned char *)"hello\n", 6, -1, &s);
    seen_release(&s);
    eddy_future_destroy(f);
    close(fd);
    eddy_close(h);
}

/* Malformed answers to the commit (and to the open) fail with EPROTO and
 * a message, and leave the outputs alone. */
static void test_malformed(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *f;
    char path[32];
    const char *ok = "untouched";
    size_t nfailed = 42;
    struct seen s;
    int fd;

    fd = make_file(fk, "src", "x", 1);
    for (unsigned i = 0; i < NBAD_COMMIT; i++) {
        snprintf(path, sizeof(path), "bad/%u", i);
        assert_non_null(f = eddy_job_bcast(h, 1, fd, path, 0, 0));
        wait_done(f);
        errno = 0;
        if (eddy_job_bcast_get(f, &ok, &nfailed) == 0)
            fail_msg("%s: the malformed answer %s was accepted", path,
                     bad_commit[i]);
        assert_int_equal(errno, EPROTO);
        if (!strstr(eddy_future_error_string(f),
                    "malformed response to bcast.commit"))
            fail_msg("%s: message '%s'", path, eddy_future_error_string(f));
        assert_string_equal(ok, "untouched");
        assert_int_equal(nfailed, 42);
        errno = 0;
        assert_int_equal(eddy_job_bcast_failure(f, 0, NULL, NULL, NULL), -1);
        assert_int_equal(errno, EPROTO);
        eddy_future_destroy(f);
    }

    /* an open answered without a session ID: 0 (job 6), none (job 8) */
    for (eddy_jobid_t id = 6; id <= 8; id += 2) {
        assert_non_null(f = eddy_job_bcast(h, id, fd, "x", 0, 0));
        wait_done(f);
        errno = 0;
        assert_int_equal(eddy_job_bcast_get(f, &ok, &nfailed), -1);
        if (errno != EPROTO)
            fail_msg("job %ju: errno %d (%s), not EPROTO", (uintmax_t)id, errno,
                     strerror(errno));
        eddy_future_destroy(f);
    }
    sync_fake(h);
    seen_get(fk, &s);
    assert_int_equal(s.nchunks, 0);
    assert_int_equal(s.aborts_bad, 0);
    seen_release(&s);
    close(fd);
    eddy_close(h);
}

/* The service's errors pass through with their message: to the open
 * (nothing is sent after it) and to the commit. */
static void test_errors(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_future_t *f;
    const char *ok = "untouched";
    struct seen s;
    int fd;

    fd = make_file(fk, "src", "x", 1);
    assert_non_null(f = eddy_job_bcast(h, 5, fd, "x", 0, 0));
    wait_done(f);
    errno = 0;
    assert_int_equal(eddy_job_bcast_get(f, &ok, NULL), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(eddy_future_error_string(f), "job 5: no such job");
    assert_string_equal(ok, "untouched");
    errno = 0;
    assert_int_equal(eddy_job_bcast_failure(f, 0, NULL, NULL, NULL), -1);
    assert_int_equal(errno, ENOENT);
    eddy_future_destroy(f);
    sync_fake(h);
    seen_get(fk, &s);
    assert_int_equal(s.nchunks, 0);
    assert_null(s.commit_body);
    assert_int_equal(s.aborts_ok + s.aborts_bad, 0); /* no session */
    seen_release(&s);

    assert_non_null(f = eddy_job_bcast(h, 1, fd, "aborted/x", 0, 0));
    wait_done(f);
    errno = 0;
    assert_int_equal(eddy_job_bcast_get(f, NULL, NULL), -1);
    assert_int_equal(errno, ECONNABORTED);
    assert_string_equal(eddy_future_error_string(f),
                        "bcast 7: aborted: rank 1 lost");
    eddy_future_destroy(f);
    close(fd);
    eddy_close(h);
}

/* An error answer to a chunk fails the transfer with it, and the
 * session is aborted: no commit follows. */
static void test_chunk_error(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    size_t len = 10 * CHUNK;
    unsigned char *data = malloc(len);
    eddy_future_t *f;
    struct seen s;
    int fd;

    assert_non_null(data);
    fill_random(data, len, 6);
    fd = make_file(fk, "src", data, len);
    assert_non_null(f = eddy_job_bcast(h, 1, fd, "chunkfail/x", CHUNK, 0));
    wait_done(f);
    errno = 0;
    assert_int_equal(eddy_job_bcast_get(f, NULL, NULL), -1);
    assert_int_equal(errno, ENOSPC);
    assert_string_equal(eddy_future_error_string(f),
                        "rank 2: chunkfail/x: No space left on device");
    eddy_future_destroy(f);
    sync_fake(h);
    seen_get(fk, &s);
    check_no_violation(&s);
    assert_int_equal(s.aborts_ok, 1);
    assert_int_equal(s.aborts_bad, 0);
    assert_null(s.commit_body);
    assert_true(s.nchunks <= 2 + WINDOW);
    seen_release(&s);
    close(fd);
    free(data);
    eddy_close(h);
}

/* Destroying the future mid-transfer aborts the session; closing the
 * handle mid-transfer frees everything (the sanitizer build checks). */
static void test_destroy(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    size_t len = 10 * CHUNK;
    unsigned char *data = malloc(len);
    eddy_future_t *f;
    struct seen s;
    int fd;

    assert_non_null(data);
    fill_random(data, len, 7);
    fd = make_file(fk, "src", data, len);
    assert_non_null(f = eddy_job_bcast(h, 1, fd, "hold/x", CHUNK, 0));
    wait_chunks(fk, f, WINDOW);
    assert_false(eddy_future_is_ready(f));
    eddy_future_destroy(f);
    sync_fake(h);
    seen_get(fk, &s);
    check_no_violation(&s);
    assert_int_equal(s.nchunks, WINDOW);
    assert_int_equal(s.aborts_ok, 1);
    assert_int_equal(s.aborts_bad, 0);
    assert_null(s.commit_body);
    seen_release(&s);

    assert_non_null(f = eddy_job_bcast(h, 1, fd, "hold/y", CHUNK, 0));
    wait_chunks(fk, f, WINDOW);
    eddy_close(h);
    close(fd);
    free(data);
}

static void test_args(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    struct eddy_bcast_options opts = {.nodes = "1,3", .timeout = 2.5};
    struct eddy_bcast_options bad_timeout = {.timeout = -1};
    const char *nodes = NULL;
    double timeout = 0;
    eddy_future_t *f;
    struct seen s;
    uint64_t sent;
    int fd, dfd;

    fd = make_file(fk, "src", "abc", 3);
    assert_true((dfd = open(fk->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0);
#define BAD(call, e)                                                           \
    do {                                                                       \
        errno = 0;                                                             \
        assert_null(call);                                                     \
        assert_int_equal(errno, e);                                            \
    } while (0)
    BAD(eddy_job_bcast(NULL, 1, fd, "x", 0, 0), EINVAL);
    BAD(eddy_job_bcast(h, 1, fd, NULL, 0, 0), EINVAL);
    BAD(eddy_job_bcast(h, 1, fd, "", 0, 0), EINVAL);
    BAD(eddy_job_bcast(h, (eddy_jobid_t)INT64_MAX + 1, fd, "x", 0, 0), EINVAL);
    BAD(eddy_job_bcast(h, 1, fd, "x", 0, 0x10), EINVAL);
    BAD(eddy_job_bcast(h, 1, fd, "x", 0, -1), EINVAL);
    BAD(eddy_job_bcast(h, 1, fd, "x", BCAST_CHUNK_MAX + 1, 0), EINVAL);
    BAD(eddy_job_bcast(h, 1, fd, "x", SIZE_MAX, 0), EINVAL);
    /* the archive flag is eddy_job_bcast_paths()'s own */
    BAD(eddy_job_bcast(h, 1, fd, "x", 0, BCAST_F_ARCHIVE), EINVAL);
    BAD(eddy_job_bcast_opts(h, 1, fd, "x", 0, BCAST_F_ARCHIVE, NULL), EINVAL);
    BAD(eddy_job_bcast_opts(h, 1, fd, "x", 0,
                            BCAST_F_ARCHIVE | EDDY_BCAST_PRESERVE, &opts),
        EINVAL);
    BAD(eddy_job_bcast_opts(h, 1, fd, "x", 0, 0, &bad_timeout), EINVAL);
    BAD(eddy_job_bcast(h, 1, -1, "x", 0, 0), EBADF);
    BAD(eddy_job_bcast(h, 1, dfd, "x", 0, 0), EISDIR);
#undef BAD

    errno = 0;
    assert_int_equal(eddy_job_bcast_get(NULL, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_job_bcast_failure(NULL, 0, NULL, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_job_bcast_progress(NULL, &sent, NULL), -1);
    assert_int_equal(errno, EINVAL);
    /* a future that is not a bcast's */
    assert_non_null(f = eddy_rpc(h, "test.sync", 0, 0, NULL, NULL, 0));
    errno = 0;
    assert_int_equal(eddy_job_bcast_get(f, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_job_bcast_progress(f, &sent, NULL), -1);
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_int_equal(eddy_job_bcast_failure(f, 0, NULL, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
    eddy_future_destroy(f);
    sync_fake(h);
    seen_get(fk, &s);
    assert_null(s.open_body); /* none of the above reached the service */
    seen_release(&s);

    /* the largest chunk size is fine; options reach the open */
    pthread_mutex_lock(&fk->lock);
    fk->chunksize = BCAST_CHUNK_MAX;
    pthread_mutex_unlock(&fk->lock);
    assert_non_null(
        f = eddy_job_bcast_opts(h, 1, fd, "x", BCAST_CHUNK_MAX, 0, &opts));
    wait_done(f);
    assert_int_equal(eddy_job_bcast_get(f, NULL, NULL), 0);
    check_received(fk, (const unsigned char *)"abc", 3, -1, &s);
    assert_int_equal(json_unpack(s.open_body, "{s:s s:F}", "nodes", &nodes,
                                 "timeout", &timeout),
                     0);
    assert_string_equal(nodes, "1,3");
    assert_true(timeout == 2.5);
    seen_release(&s);
    eddy_future_destroy(f);
    close(dfd);
    close(fd);
    eddy_close(h);
}

static void write_text(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");

    assert_non_null(fp);
    assert_true(fputs(text, fp) >= 0);
    assert_int_equal(fclose(fp), 0);
}

static void check_text(const char *path, const char *text)
{
    char buf[256];
    FILE *fp = fopen(path, "r");
    size_t n;

    assert_non_null(fp);
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    assert_string_equal(buf, text);
}

/* eddy_job_bcast_paths() packs a tree: the service receives a pax
 * archive (flag 0x8) that extracts to the same tree. */
static void test_paths(void **state)
{
    struct fake *fk = *state;
    eddy_t *h = open_ok(fk);
    eddy_error_t err = {{0}};
    char top[160], p[200], arc[160], out[160], link[16];
    const char *paths[2];
    json_int_t flags = -1;
    const char *dest = NULL;
    eddy_future_t *f;
    struct seen s;
    int fd;

    snprintf(top, sizeof(top), "%s/tree", fk->dir);
    assert_int_equal(mkdir(top, 0755), 0);
    snprintf(p, sizeof(p), "%s/a", top);
    write_text(p, "alpha\n");
    snprintf(p, sizeof(p), "%s/sub", top);
    assert_int_equal(mkdir(p, 0750), 0);
    snprintf(p, sizeof(p), "%s/sub/b", top);
    write_text(p, "beta\n");
    snprintf(p, sizeof(p), "%s/l", top);
    assert_int_equal(symlink("a", p), 0);

    paths[0] = top;
    f = eddy_job_bcast_paths(h, 1, paths, 1, "tools", CHUNK,
                             EDDY_BCAST_PRESERVE, NULL, &err);
    if (!f)
        fail_msg("eddy_job_bcast_paths: %s", err.text);
    wait_done(f);
    assert_int_equal(eddy_job_bcast_get(f, NULL, NULL), 0);
    eddy_future_destroy(f);

    seen_get(fk, &s);
    check_no_violation(&s);
    assert_int_equal(
        json_unpack(s.open_body, "{s:s s:I}", "path", &dest, "flags", &flags),
        0);
    assert_string_equal(dest, "tools");
    assert_int_equal(flags, EDDY_BCAST_PRESERVE | BCAST_F_ARCHIVE);
    /* a pax/ustar header: the magic at offset 257 */
    assert_true(s.data_len > 512);
    assert_memory_equal(s.data + 257, "ustar", 6);
    /* extract what arrived, as a node would */
    snprintf(arc, sizeof(arc), "%s/archive", fk->dir);
    fd = open(arc, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, s.data, s.data_len), (ssize_t)s.data_len);
    close(fd);
    seen_release(&s);
    snprintf(out, sizeof(out), "%s/out", fk->dir);
    if (bcast_tree_extract(arc, out, false, true, &err) < 0)
        fail_msg("bcast_tree_extract: %s", err.text);
    snprintf(p, sizeof(p), "%s/a", out);
    check_text(p, "alpha\n");
    snprintf(p, sizeof(p), "%s/sub/b", out);
    check_text(p, "beta\n");
    snprintf(p, sizeof(p), "%s/l", out);
    assert_int_equal(readlink(p, link, sizeof(link)), 1);
    assert_memory_equal(link, "a", 1);

    /* the packing's errors, with the culprit named */
    errno = 0;
    err.text[0] = '\0';
    assert_null(eddy_job_bcast_paths(NULL, 1, paths, 1, "t", 0, 0, NULL, &err));
    assert_int_equal(errno, EINVAL);
    assert_true(strlen(err.text) > 0);
    errno = 0;
    assert_null(eddy_job_bcast_paths(h, 1, paths, 0, "t", 0, 0, NULL, &err));
    assert_int_equal(errno, EINVAL);
    errno = 0;
    assert_null(eddy_job_bcast_paths(h, 1, NULL, 1, "t", 0, 0, NULL, &err));
    assert_int_equal(errno, EINVAL);
    snprintf(p, sizeof(p), "%s/missing", fk->dir);
    paths[1] = p;
    errno = 0;
    err.text[0] = '\0';
    assert_null(eddy_job_bcast_paths(h, 1, paths, 2, "t", 0, 0, NULL, &err));
    assert_int_equal(errno, ENOENT);
    if (!strstr(err.text, "missing"))
        fail_msg("the message does not name the path: %s", err.text);
    snprintf(p, sizeof(p), "%s/fifo", fk->dir);
    assert_int_equal(mkfifo(p, 0600), 0);
    errno = 0;
    err.text[0] = '\0';
    assert_null(eddy_job_bcast_paths(h, 1, paths, 2, "t", 0, 0, NULL, &err));
    assert_int_equal(errno, EINVAL);
    if (!strstr(err.text, "fifo"))
        fail_msg("the message does not name the path: %s", err.text);
    eddy_close(h);
}

int main(void)
{
    const char *s = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sparse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_results, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunk_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_args, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paths, setup, teardown),
    };

    if (s && atoi(s) > 0)
        timeout_scale = atoi(s);
    setvbuf(stdout, NULL, _IOLBF, 0); /* keep the log if the alarm fires */
    signal(SIGPIPE, SIG_IGN);
    alarm((unsigned)(60 * timeout_scale));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
