/* bcast.c - eddy_job_bcast() (eddy/bcast.h): the sending end of a file
 * broadcast, driven by continuations on the handle's loop.
 *
 * The caller's future is not an RPC: this file completes it (as job.c does
 * for attach).  Behind it: bcast.open to rank 0, then bcast.chunk requests
 * (at most BCAST_CLIENT_WINDOW unanswered: rank 0 answers each once it has
 * passed the chunk on, which is the credit for the next), then
 * bcast.commit, whose answer is the merged result of every node
 * (docs/bcast.md).  The source is read with src/common/bcast_src.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eddy/bcast.h"
#include "src/common/hex.h"
#include "src/common/bcast_proto.h"
#include "src/common/bcast_src.h"
#include "src/common/bcast_tree.h"
#include "src/common/errprintf.h"
#include "lib.h"

/* IDs are JSON integers; jansson's are signed 64-bit. */
#define JOBID_MAX ((eddy_jobid_t)INT64_MAX)

/* Chunks in flight between us and rank 0 (as between brokers). */
#define BCAST_CLIENT_WINDOW 4

_Static_assert((int)EDDY_BCAST_PRESERVE == (int)BCAST_F_PRESERVE &&
                   (int)EDDY_BCAST_OVERWRITE == (int)BCAST_F_OVERWRITE &&
                   (int)EDDY_BCAST_COMPRESS == (int)BCAST_F_COMPRESS,
               "public and internal bcast flags differ");

struct bcast {
    eddy_future_t *bf; /* the caller's; NULL once it is freed */
    eddy_t *h;
    eddy_jobid_t id;
    bcast_src_t *src;
    eddy_future_t *open;
    eddy_future_t *chunk[BCAST_CLIENT_WINDOW];
    uint32_t chunk_len[BCAST_CLIENT_WINDOW]; /* raw bytes of each */
    int inflight;
    eddy_future_t *commit;
    eddy_future_t *watch; /* bcast.watch at our broker, while it runs */
    uint64_t sid;         /* 0 until opened */
    uint64_t sent;
    int64_t total;
    bool eof;
    bool finished; /* bf completed */
    int owned_fd;  /* the packed archive, closed with us; else -1 */
    int in_cb;     /* continuations of ours running */
};

static void bcast_free_maybe(struct bcast *st);

/* --- inner futures -------------------------------------------------------- */

/* An inner future is freed before ours (eddy_close() frees every future
 * in list order): forget it.  'arg' is the slot that points to it. */
static void inner_gone(void *arg)
{
    *(eddy_future_t **)arg = NULL;
}

/* Make 'slot' (which points to a new inner future) forget it when it is
 * freed from under us. */
static void inner_watch(eddy_future_t **slot)
{
    (*slot)->aux = slot;
    (*slot)->aux_destroy = inner_gone;
}

static void inner_drop(eddy_future_t **fp)
{
    eddy_future_t *f = *fp;

    if (!f)
        return;
    *fp = NULL;
    f->aux = NULL;
    f->aux_destroy = NULL;
    eddy_future_destroy(f); /* deferred if inside its continuation */
}

static void drop_all(struct bcast *st)
{
    inner_drop(&st->watch); /* a cancel: the broker lets go of it */
    inner_drop(&st->open);
    inner_drop(&st->commit);
    for (int i = 0; i < BCAST_CLIENT_WINDOW; i++)
        inner_drop(&st->chunk[i]);
    st->inflight = 0;
}

/* Tell the instance to drop a session that will not be committed. */
static void send_abort(struct bcast *st)
{
    eddy_future_t *f;

    if (!st->sid || st->finished || !st->h->conn)
        return;
    f = eddy_rpc_pack(st->h, "bcast.abort", 0, EDDY_RPC_NORESPONSE, "{s:I}",
                      "sid", (json_int_t)st->sid);
    eddy_future_destroy(f);
}

/* Complete the caller's future with 'msg' (stolen), or fail it with
 * 'errnum'/'text' if 'msg' is NULL. */
static void bcast_complete(struct bcast *st,
                           msg_t *msg,
                           int errnum,
                           const char *text)
{
    eddy_future_t *bf = st->bf;
    json_t *body = NULL;

    if (st->finished || !bf) {
        msg_decref(msg);
        return;
    }
    if (!msg) {
        send_abort(st);
        if (errnum == ENOTCONN) {
            st->finished = true;
            drop_all(st);
            fut_fail(bf, errnum, text);
            return;
        }
        if ((text && !(body = json_pack("{s:s}", "errstr", text))) ||
            !(msg = msg_create(MSG_RESPONSE, bf->topic, body, NULL, 0))) {
            st->finished = true;
            drop_all(st);
            fut_fail(bf, ENOMEM, "out of memory completing bcast");
            return;
        }
        msg->errnum = (uint32_t)errnum;
    }
    st->finished = true;
    drop_all(st);
    if (fut_push(bf, msg) < 0)
        fut_fail(bf, ENOMEM, "out of memory completing bcast");
}

/* Fail with the error of the inner future 'f' (its response or state). */
static void bcast_fail_from(struct bcast *st, eddy_future_t *f)
{
    int e = errno;

    bcast_complete(st, NULL, e, eddy_future_error_string(f));
}

/* --- the sequence ------------------------------------------------------- */

static void on_commit(eddy_future_t *f, void *arg)
{
    struct bcast *st = arg;
    const msg_t *m;

    st->in_cb++;
    if (eddy_rpc_get(f, NULL) < 0) {
        bcast_fail_from(st, f);
    } else {
        m = f->q[f->qhead];
        st->sent = st->total >= 0 ? (uint64_t)st->total : st->sent;
        bcast_complete(st, msg_incref((msg_t *)m), 0, NULL);
    }
    st->in_cb--;
    bcast_free_maybe(st);
}

static void send_commit(struct bcast *st)
{
    struct bcast_file_info info;
    char hex[2 * BCAST_HASH_SIZE + 1];
    json_t *body;

    if (bcast_src_finish(st->src, &info) < 0) {
        bcast_complete(st, NULL, errno, "bcast: cannot finish the source");
        return;
    }
    st->total = (int64_t)info.size;
    hex_encode(info.hash, BCAST_HASH_SIZE, hex);
    body = json_pack("{s:I s:I s:I s:I s:I s:s}", "sid", (json_int_t)st->sid,
                     "size", (json_int_t)info.size, "mode",
                     (json_int_t)info.mode, "mtime", (json_int_t)info.mtime_sec,
                     "mtime_nsec", (json_int_t)info.mtime_nsec, "hash", hex);
    if (!body ||
        !(st->commit = rpc_send(st->h, "bcast.commit", 0, 0, body, NULL, 0)) ||
        eddy_future_then(st->commit, -1, on_commit, st) < 0) {
        bcast_complete(st, NULL, errno, "bcast: cannot send the commit");
        return;
    }
    inner_watch(&st->commit);
}

static void on_chunk(eddy_future_t *f, void *arg);

/* Send chunks while the window allows; the commit once all are answered. */
static void pump(struct bcast *st)
{
    while (!st->finished && !st->eof && st->inflight < BCAST_CLIENT_WINDOW) {
        struct bcast_chunk c;
        eddy_error_t err = {{0}};
        json_t *body;
        int slot, rc;

        if ((rc = bcast_src_next(st->src, &c, &err)) < 0) {
            bcast_complete(st, NULL, errno, err.text);
            return;
        }
        if (rc == 0) {
            st->eof = true;
            break;
        }
        for (slot = 0; st->chunk[slot]; slot++)
            ;
        body = json_pack("{s:I s:I s:I s:b}", "sid", (json_int_t)st->sid,
                         "offset", (json_int_t)c.offset, "rawlen",
                         (json_int_t)c.rawlen, "z", c.compressed);
        if (!body ||
            !(st->chunk[slot] =
                  rpc_send(st->h, "bcast.chunk", 0, 0, body, c.data, c.len)) ||
            eddy_future_then(st->chunk[slot], -1, on_chunk, st) < 0) {
            bcast_complete(st, NULL, errno, "bcast: cannot send a chunk");
            return;
        }
        inner_watch(&st->chunk[slot]);
        st->chunk_len[slot] = c.rawlen;
        st->inflight++;
    }
    if (!st->finished && st->eof && st->inflight == 0 && !st->commit)
        send_commit(st);
}

static void on_chunk(eddy_future_t *f, void *arg)
{
    struct bcast *st = arg;
    int slot;

    st->in_cb++;
    for (slot = 0; slot < BCAST_CLIENT_WINDOW && st->chunk[slot] != f; slot++)
        ;
    if (eddy_rpc_get(f, NULL) < 0) {
        bcast_fail_from(st, f);
    } else if (slot < BCAST_CLIENT_WINDOW) {
        st->sent += st->chunk_len[slot];
        inner_drop(&st->chunk[slot]);
        st->inflight--;
        pump(st);
    }
    st->in_cb--;
    bcast_free_maybe(st);
}

static void on_open(eddy_future_t *f, void *arg)
{
    struct bcast *st = arg;
    json_int_t sid;

    st->in_cb++;
    if (eddy_rpc_get_unpack(f, "{s:I}", "sid", &sid) < 0) {
        bcast_fail_from(st, f);
    } else if (sid <= 0) {
        bcast_complete(st, NULL, EPROTO,
                       "malformed response to bcast.open: 'sid' must be "
                       "a session number > 0");
    } else {
        st->sid = (uint64_t)sid;
        inner_drop(&st->open);
        /* our broker aborts the session if we vanish (a failure here
         * only leaves that to the session's timeout) */
        st->watch = eddy_rpc_pack(st->h, "bcast.watch", EDDY_RANK_ANY,
                                  EDDY_RPC_STREAMING, "{s:I}", "sid",
                                  (json_int_t)st->sid);
        if (st->watch)
            inner_watch(&st->watch);
        pump(st);
    }
    st->in_cb--;
    bcast_free_maybe(st);
}

/* --- lifecycle ------------------------------------------------------------ */

static void bcast_free_maybe(struct bcast *st)
{
    if (st->bf || st->in_cb)
        return;
    bcast_src_destroy(st->src);
    if (st->owned_fd >= 0)
        close(st->owned_fd);
    free(st);
}

/* The caller's future is being freed: abort what still runs. */
static void bcast_release(void *arg)
{
    struct bcast *st = arg;

    send_abort(st);
    st->finished = true;
    drop_all(st);
    st->bf = NULL;
    bcast_free_maybe(st);
}

/* eddy_job_bcast_opts(), also for the archive of eddy_job_bcast_paths()
 * (BCAST_F_ARCHIVE in 'flags'). */
static eddy_future_t *bcast_start(eddy_t *h,
                                  eddy_jobid_t id,
                                  int fd,
                                  const char *destpath,
                                  size_t chunksize,
                                  int flags,
                                  const struct eddy_bcast_options *opts)
{
    struct bcast *st = NULL;
    eddy_future_t *bf = NULL;
    eddy_error_t err = {{0}};
    json_t *body;
    int e;

    if (!h || !destpath || !*destpath || id > JOBID_MAX ||
        (flags & ~BCAST_F_ALL) || chunksize > BCAST_CHUNK_MAX ||
        (opts && opts->timeout < 0)) {
        errno = EINVAL;
        return NULL;
    }
    if (!h->conn) {
        errno = ENOTCONN;
        return NULL;
    }
    if (!(st = calloc(1, sizeof(*st))))
        goto nomem;
    st->owned_fd = -1;
    st->h = h;
    st->id = id;
    if (!(st->src = bcast_src_create(fd, chunksize, flags, &err)))
        goto error;
    st->total = bcast_src_size(st->src);
    if (!(bf = fut_create(h, "bcast", 0, 0)))
        goto nomem;
    st->bf = bf;
    bf->aux = st;
    bf->aux_destroy = bcast_release;
    body = json_pack("{s:I s:s s:i}", "id", (json_int_t)id, "path", destpath,
                     "flags", flags);
    if (body && opts && opts->nodes &&
        json_object_set_new(body, "nodes", json_string(opts->nodes)) < 0)
        json_decref(body), body = NULL;
    if (body && opts && opts->timeout > 0 &&
        json_object_set_new(body, "timeout", json_real(opts->timeout)) < 0)
        json_decref(body), body = NULL;
    if (!body)
        goto nomem;
    if (!(st->open = rpc_send(h, "bcast.open", 0, 0, body, NULL, 0)) ||
        eddy_future_then(st->open, -1, on_open, st) < 0)
        goto error;
    inner_watch(&st->open);
    return bf;
nomem:
    errno = ENOMEM;
error:
    e = errno;
    if (bf)
        fut_free(bf); /* bcast_release() frees 'st' */
    else if (st) {
        bcast_src_destroy(st->src);
        free(st);
    }
    errno = e;
    return NULL;
}

eddy_future_t *eddy_job_bcast_opts(eddy_t *h,
                                   eddy_jobid_t id,
                                   int fd,
                                   const char *destpath,
                                   size_t chunksize,
                                   int flags,
                                   const struct eddy_bcast_options *opts)
{
    if (flags & BCAST_F_ARCHIVE) {
        errno = EINVAL;
        return NULL;
    }
    return bcast_start(h, id, fd, destpath, chunksize, flags, opts);
}

eddy_future_t *eddy_job_bcast(eddy_t *h,
                              eddy_jobid_t id,
                              int fd,
                              const char *destpath,
                              size_t chunksize,
                              int flags)
{
    return eddy_job_bcast_opts(h, id, fd, destpath, chunksize, flags, NULL);
}

/* An unlinked file to pack into: O_TMPFILE where the file system has it. */
static int tmpfile_fd(eddy_error_t *err)
{
    const char *dir = getenv("TMPDIR");
    char path[4096];
    int fd;

    if (!dir || !*dir)
        dir = "/tmp";
    if ((fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600)) >= 0)
        return fd;
    snprintf(path, sizeof(path), "%s/eddy-bcast-XXXXXX", dir);
    if ((fd = mkostemp(path, O_CLOEXEC)) < 0)
        return errprintf(err, "%s: cannot make a temp file: %s", dir,
                         strerror(errno));
    (void)unlink(path);
    return fd;
}

eddy_future_t *eddy_job_bcast_paths(eddy_t *h,
                                    eddy_jobid_t id,
                                    const char *const *paths,
                                    size_t n,
                                    const char *destpath,
                                    size_t chunksize,
                                    int flags,
                                    const struct eddy_bcast_options *opts,
                                    eddy_error_t *err)
{
    eddy_future_t *f;
    struct bcast *st;
    int fd, e;

    if (!h || !paths || n == 0 || !destpath || !*destpath ||
        (flags & BCAST_F_ARCHIVE)) {
        errno = EINVAL;
        errprintf(err, "bcast: no paths, no destination or bad flags");
        return NULL;
    }
    if ((fd = tmpfile_fd(err)) < 0)
        return NULL;
    if (bcast_tree_pack(fd, paths, n, err) < 0)
        goto error;
    if (!(f = bcast_start(h, id, fd, destpath, chunksize,
                          flags | BCAST_F_ARCHIVE, opts))) {
        errprintf(err, "bcast: %s", strerror(errno));
        goto error;
    }
    st = f->aux;
    st->owned_fd = fd;
    return f;
error:
    e = errno;
    close(fd);
    errno = e;
    return NULL;
}

static struct bcast *bcast_of(eddy_future_t *f)
{
    if (!f || f->aux_destroy != bcast_release) {
        errno = EINVAL;
        return NULL;
    }
    return f->aux;
}

/* The current answer's "errors" array, checked, or NULL (EPROTO set on
 * the future). */
static int result_of(eddy_future_t *f, const char **ok, json_t **errors)
{
    const msg_t *m;
    const char *s;
    json_t *e, *errs;
    size_t i;

    if (eddy_rpc_get(f, NULL) < 0)
        return -1;
    m = f->q[f->qhead];
    if (json_unpack(m->body, "{s:s s:o}", "ok", &s, "errors", &errs) < 0 ||
        !json_is_array(errs))
        goto malformed;
    json_array_foreach(errs, i, e)
    {
        json_int_t rank;
        int errnum;
        const char *text;
        if (json_unpack(e, "{s:I s:i s:s}", "rank", &rank, "errnum", &errnum,
                        "errstr", &text) < 0 ||
            rank < 0 || rank > UINT32_MAX || errnum <= 0)
            goto malformed;
    }
    *ok = s;
    *errors = errs;
    return 0;
malformed:
    snprintf(f->errbuf, sizeof(f->errbuf),
             "malformed response to bcast.commit: expected {\"ok\": idset, "
             "\"errors\": [{\"rank\", \"errnum\", \"errstr\"}]}");
    errno = EPROTO;
    return -1;
}

int eddy_job_bcast_get(eddy_future_t *f, const char **ok, size_t *nfailed)
{
    const char *s;
    json_t *errs;

    if (!bcast_of(f) || result_of(f, &s, &errs) < 0)
        return -1;
    if (ok)
        *ok = s;
    if (nfailed)
        *nfailed = json_array_size(errs);
    return 0;
}

int eddy_job_bcast_failure(eddy_future_t *f,
                           size_t i,
                           uint32_t *rank,
                           int *errnum,
                           const char **errstr)
{
    const char *s;
    json_t *errs, *e;
    json_int_t r;
    int n;
    const char *text;

    if (!bcast_of(f) || result_of(f, &s, &errs) < 0)
        return -1;
    if (!(e = json_array_get(errs, i))) {
        errno = EINVAL;
        return -1;
    }
    (void)json_unpack(e, "{s:I s:i s:s}", "rank", &r, "errnum", &n, "errstr",
                      &text);
    if (rank)
        *rank = (uint32_t)r;
    if (errnum)
        *errnum = n;
    if (errstr)
        *errstr = text;
    return 0;
}

int eddy_job_bcast_progress(eddy_future_t *f, uint64_t *sent, int64_t *total)
{
    struct bcast *st = bcast_of(f);

    if (!st)
        return -1;
    if (sent)
        *sent = st->sent;
    if (total)
        *total = st->total;
    return 0;
}
