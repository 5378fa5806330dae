/* bcast.c - the "bcast" service of every broker: ship a file to every
 * node of a job, down the broker tree, pipelined, with bounded memory
 * (docs/bcast.md).
 *
 *   bcast.open    client -> rank 0: {"id", "path", "flags", "nodes"?,
 *                 "timeout"?} -> {"sid", "nodes"}: a session for job
 *                 "id" to the job's brokers (or the subset "nodes")
 *                 parent -> child: {"sid", "id", "path", "flags",
 *                 "ranks", "timeout", "shm"?: {"pid", "fd", "cookie",
 *                 "host"}} -> {"shm": bool}: whether the child mapped
 *                 the parent's shared slots (same host only: "host" is
 *                 the parent's hostname, which must be the child's)
 *   bcast.chunk   {"sid", "offset", "rawlen", "z"} + payload -> {}: one
 *                 chunk; the answer is the sender's credit.  To a child
 *                 that mapped our slots: {..., "slot", "len"} and the
 *                 bytes in that slot instead of the payload
 *   bcast.commit  {"sid", "size", "mode", "mtime", "mtime_nsec", "hash"}
 *                 -> {"ok": idset, "errors": [{"rank", "errnum",
 *                 "errstr"}]}: the results of this broker's subtree
 *   bcast.abort   {"sid"}, no response: drop the session everywhere below
 *   bcast.watch   client -> its own broker, streaming: {"sid"}; never
 *                 answered until cancelled; if the client vanishes first,
 *                 its broker sends bcast.abort for the session to rank 0
 *                 (so a sender on any broker is noticed at once, not
 *                 after the session's timeout)
 *
 * The session spans the part of the tree that leads to the target
 * brokers: the shape of a kvs fence rooted at rank 0 (src/broker/fence.h).
 * Each broker writes a chunk to its own node (src/common/bcast_sink.h) as
 * it arrives and forwards it to each child at once while fewer than
 * BCAST_WINDOW of that child's chunks are unanswered; it answers its own
 * sender once the chunk went out to every child.  So each hop has at most
 * BCAST_WINDOW chunks in flight, a slow node slows its ancestors rather
 * than filling their memory, and no broker holds more than a few chunks
 * whatever the file size.  Nothing waits for a whole file anywhere.
 *
 * A child on this host reads the chunk bytes from a memfd we share with
 * it (src/common/bcast_shm.h): slot i holds the chunk in window position
 * i, so a slot is free exactly when the window position is, and one
 * memcpy replaces the socket's two copies and its TCP stack.  "This
 * host" means the instance's idea of it, the broker's hostname, and not
 * merely that /proc/PID/fd/FD opens: brokers in network namespaces of
 * one machine (tests/integration/netns.bash) share a /proc, yet stand
 * for hosts whose bytes must cross the (emulated) network.
 *
 * Failures stay local: a node that cannot write (bad path, full disk,
 * checksum mismatch) reports its error in the results and keeps
 * forwarding; a lost child fails every target broker of its subtree with
 * the loss; the others complete.  A session that hears nothing for its
 * timeout, or whose sender goes away, is aborted: every sink removes its
 * temp file, so nothing partial remains anywhere.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>

#include "src/broker/broker.h"
#include "src/broker/fence.h"
#include "src/broker/job.h"
#include "src/broker/service.h"
#include "src/common/bcast_proto.h"
#include "src/common/bcast_shm.h"
#include "src/common/bcast_sink.h"
#include "src/common/bcast_tree.h"
#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/log.h"
#include "src/common/hex.h"
#include "src/common/relpath.h"
#include "src/common/topology.h"

/* Chunks in flight per hop: enough to keep each link busy while the
 * receiver writes, few enough that a broker's memory stays a few chunks. */
#define BCAST_WINDOW 4

/* A same-host child gets chunk i of its window in shared slot i. */
_Static_assert(BCAST_SHM_SLOTS == BCAST_WINDOW,
               "one shared slot per chunk in flight");

/* A session that hears nothing for this long (default; the client may
 * ask for another) is aborted: its client or a broker above died. */
#define BCAST_TIMEOUT_DEFAULT 30.0
#define BCAST_TIMEOUT_MAX 3600.0

/* Test hook: the broker whose rank is in this environment variable flips
 * a byte of the first chunk it writes, so that tests can watch the
 * checksum catch it. */
#define BCAST_CORRUPT_ENV "EDDY_TEST_BCAST_CORRUPT_RANK"

/* Test hook: brokers whose rank is in this idset do not map their
 * parent's shared slots, so that tests cover the socket path (as between
 * hosts) and its mix with shared slots on one machine. */
#define BCAST_NOSHM_ENV "EDDY_TEST_BCAST_NOSHM_RANKS"

struct session;

/* One chunk (or the commit) waiting to go to children: shared by all of
 * them, answered upstream once every child has it.  Until then 'data'
 * stays valid: it is the upstream request's payload or our parent's
 * shared slot, which the parent reuses only once we answered. */
struct qitem {
    int refs;         /* children still to send it to */
    json_t *body;     /* what to send: {"sid", "offset", "rawlen", "z"} */
    const void *data; /* the chunk's bytes (NULL for the commit) */
    size_t len;
    msg_t *owner;      /* a message with 'data' as payload, for children over
                          the socket: the request, or a copy of a shared slot
                          made when first needed */
    broker_req_t *req; /* the upstream chunk request to answer, or NULL */
    bool commit;
};

struct qnode {
    struct qitem *item;
    struct qnode *next;
};

struct child {
    struct session *s;
    uint32_t rank;
    int inflight; /* chunk rpcs not answered yet */
    struct qnode *q, **qtail;
    broker_rpc_t *open_rpc;
    broker_rpc_t *commit_rpc;
    broker_rpc_t *chunk_rpcs[BCAST_WINDOW];
    bcast_shm_t *shm; /* slots offered to a child on this host, or NULL */
    bool shm_ok;      /* it mapped them: chunk bytes go there */
    bool failed;
    bool done; /* its commit answered (or it failed) */
};

struct session {
    struct bcast_ctx *ctx;
    struct session *prev, *next;
    uint64_t sid;
    uint64_t id; /* the job */
    char *path;
    int flags;
    char *ranks; /* the target brokers, canonical idset */
    idset_t *targets;
    fence_t *f;
    uint64_t origin;  /* where our requests come from */
    double timeout;   /* seconds */
    uv_timer_t timer; /* idle timeout */
    bool timer_init;
    bool local;         /* this broker is a target */
    bcast_sink_t *sink; /* while the local file is being written */
    char *archive;      /* BCAST_F_ARCHIVE: where the archive lands, beside
                           the destination, relative like 'path' */
    char *tmpdir;       /* the job's here, for relative paths */
    int local_errnum;   /* 0, or why the local file failed */
    char local_errstr[256];
    bool corrupted;      /* the test hook did its work */
    bcast_shm_t *shm_in; /* our parent's slots, if we share its host */
    struct child *children;
    uint32_t nchildren;
    broker_req_t *commit_req; /* answered once every child is done */
    idset_t *ok;              /* results of the subtree so far */
    json_t *errors;
    bool committing;
};

/* A client's bcast.watch: abort its session at rank 0 if it vanishes. */
struct watch {
    broker_req_t *req;
    uint64_t sid;
    struct watch *next;
};

struct bcast_ctx {
    broker_t *b;
    struct session *sessions;
    struct watch *watches;
    uint64_t next_sid;
    uint32_t corrupt_rank; /* test hook; UINT32_MAX: off */
    bool noshm;            /* test hook: this rank takes no shared slots */
};

static void session_destroy(struct session *s);

/* --- queue helpers ------------------------------------------------------ */

static void qitem_decref(struct qitem *it)
{
    if (!it || --it->refs > 0)
        return;
    if (it->req)
        broker_respond(it->req, json_object(), NULL, 0, 0);
    broker_req_decref(it->req);
    msg_decref(it->owner);
    json_decref(it->body);
    free(it);
}

static void child_drop_queue(struct child *c)
{
    struct qnode *n;

    while ((n = c->q)) {
        c->q = n->next;
        qitem_decref(n->item);
        free(n);
    }
    c->qtail = &c->q;
}

/* --- results ------------------------------------------------------------ */

static void result_error(struct session *s,
                         uint32_t rank,
                         int errnum,
                         const char *errstr)
{
    json_t *e = json_pack("{s:I s:i s:s}", "rank", (json_int_t)rank, "errnum",
                          errnum, "errstr", errstr ? errstr : strerror(errnum));
    if (!e || json_array_append_new(s->errors, e) < 0)
        broker_log(s->ctx->b, LOG_LEVEL_ERR,
                   "bcast %" PRIu64 ": out of memory recording a result",
                   s->sid);
}

/* Every target in child 'c''s subtree failed with 'errnum'/'errstr'. */
static void child_fail(struct child *c, int errnum, const char *errstr)
{
    struct session *s = c->s;
    char text[512];

    if (c->failed)
        return;
    c->failed = true;
    c->done = true;
    snprintf(text, sizeof(text), "%s", errstr ? errstr : strerror(errnum));
    for (uint32_t r = idset_first(s->targets); r != IDSET_INVALID;
         r = idset_next(s->targets, r))
        if (topo_in_subtree(c->rank, r, s->ctx->b->fanout))
            result_error(s, r, errnum, text);
    child_drop_queue(c);
    broker_log(s->ctx->b, LOG_LEVEL_WARNING, "bcast %" PRIu64 ": rank %u: %s",
               s->sid, c->rank, text);
}

/* Answer the commit once the local file and every child are done. */
static void session_check_done(struct session *s)
{
    char *ok;

    if (!s->commit_req || !s->committing)
        return;
    for (uint32_t i = 0; i < s->nchildren; i++)
        if (!s->children[i].done)
            return;
    if (!(ok = idset_encode(s->ok))) {
        broker_respond_error(s->commit_req, ENOMEM, "out of memory");
    } else {
        broker_respond(s->commit_req,
                       json_pack("{s:s s:O}", "ok", ok, "errors", s->errors),
                       NULL, 0, 0);
        free(ok);
    }
    session_destroy(s);
}

/* --- sending to children ------------------------------------------------ */

static void child_pump(struct child *c);

static void on_chunk_answer(broker_rpc_t *rpc, const msg_t *msg, void *arg)
{
    struct child *c = arg;

    for (int i = 0; i < BCAST_WINDOW; i++) {
        if (c->chunk_rpcs[i] == rpc) {
            c->chunk_rpcs[i] = NULL;
            break;
        }
    }
    broker_rpc_destroy(rpc);
    c->inflight--;
    if (msg->errnum) {
        child_fail(c, (int)msg->errnum, msg_errstr(msg));
        session_check_done(c->s);
        return;
    }
    child_pump(c);
}

static void on_commit_answer(broker_rpc_t *rpc, const msg_t *msg, void *arg)
{
    struct child *c = arg;
    struct session *s = c->s;
    const char *ok = NULL;
    json_t *errors = NULL, *e;
    idset_t *set = NULL;
    size_t i;

    c->commit_rpc = NULL;
    broker_rpc_destroy(rpc);
    if (msg->errnum) {
        child_fail(c, (int)msg->errnum, msg_errstr(msg));
        session_check_done(s);
        return;
    }
    if (json_unpack(msg->body, "{s:s s:o}", "ok", &ok, "errors", &errors) < 0 ||
        !json_is_array(errors) || !(set = idset_decode(ok, NULL))) {
        child_fail(c, EPROTO, "malformed bcast.commit answer");
        session_check_done(s);
        return;
    }
    for (uint32_t r = idset_first(set); r != IDSET_INVALID;
         r = idset_next(set, r))
        if (idset_test(s->targets, r) &&
            topo_in_subtree(c->rank, r, s->ctx->b->fanout))
            (void)idset_set(s->ok, r);
    idset_destroy(set);
    json_array_foreach(errors, i, e)
    {
        if (json_array_append(s->errors, e) < 0)
            break;
    }
    c->done = true;
    session_check_done(s);
}

/* Send chunk 'it' to child 'c' in window slot 'slot' (free): through the
 * shared slot of the same number if the child mapped our slots (the slot
 * is free as long as the window's is: the child answered what was in it),
 * else as the payload over the socket.  -1 with errno. */
static int chunk_send(struct child *c, struct qitem *it, int slot)
{
    broker_t *b = c->s->ctx->b;
    json_t *body;

    if (c->shm_ok) {
        if (!(body = json_copy(it->body)) ||
            json_object_set_new(body, "slot", json_integer(slot)) < 0 ||
            json_object_set_new(body, "len",
                                json_integer((json_int_t)it->len)) < 0) {
            json_decref(body);
            errno = ENOMEM;
            return -1;
        }
        memcpy(bcast_shm_slot(c->shm, slot), it->data, it->len);
        c->chunk_rpcs[slot] = broker_rpc(b, "bcast.chunk", c->rank, 0, body,
                                         NULL, 0, on_chunk_answer, c);
    } else {
        /* the bytes came through a shared slot: the socket needs them in
         * a message, one copy for all such children */
        if (!it->owner && !(it->owner = msg_create(MSG_REQUEST, "bcast.chunk",
                                                   NULL, it->data, it->len)))
            return -1;
        c->chunk_rpcs[slot] = broker_rpc_shared(b, "bcast.chunk", c->rank, 0,
                                                json_incref(it->body),
                                                it->owner, on_chunk_answer, c);
    }
    return c->chunk_rpcs[slot] ? 0 : -1;
}

/* Send what the window allows from the child's queue. */
static void child_pump(struct child *c)
{
    struct session *s = c->s;
    broker_t *b = s->ctx->b;
    struct qnode *n;

    while (!c->failed && (n = c->q)) {
        struct qitem *it = n->item;
        if (it->commit) {
            /* after every chunk was answered: the child has written them */
            if (c->inflight > 0)
                return;
            c->commit_rpc =
                broker_rpc(b, "bcast.commit", c->rank, 0, json_incref(it->body),
                           NULL, 0, on_commit_answer, c);
            if (!c->commit_rpc) {
                child_fail(c, errno, "cannot send bcast.commit");
                return;
            }
        } else {
            int slot;
            if (c->inflight >= BCAST_WINDOW)
                return;
            for (slot = 0; c->chunk_rpcs[slot]; slot++)
                ;
            if (chunk_send(c, it, slot) < 0) {
                child_fail(c, errno, "cannot send bcast.chunk");
                return;
            }
            c->inflight++;
        }
        c->q = n->next;
        if (!c->q)
            c->qtail = &c->q;
        free(n);
        qitem_decref(it);
    }
}

/* Queue 'it' for every live child (taking one reference each) and send
 * what can go now.  Returns -1 ENOMEM. */
static int session_forward(struct session *s, struct qitem *it)
{
    it->refs = 1; /* ours, dropped at the end */
    for (uint32_t i = 0; i < s->nchildren; i++) {
        struct child *c = &s->children[i];
        struct qnode *n;
        if (c->failed)
            continue;
        if (!(n = calloc(1, sizeof(*n))))
            return -1;
        n->item = it;
        it->refs++;
        *c->qtail = n;
        c->qtail = &n->next;
    }
    for (uint32_t i = 0; i < s->nchildren; i++)
        child_pump(&s->children[i]);
    qitem_decref(it);
    return 0;
}

/* --- sessions ----------------------------------------------------------- */

static void on_timer_closed(uv_handle_t *h)
{
    free(h->data);
}

static void session_destroy(struct session *s)
{
    if (!s)
        return;
    if (s->prev)
        s->prev->next = s->next;
    else if (s->ctx->sessions == s)
        s->ctx->sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    for (uint32_t i = 0; s->children && i < s->nchildren; i++) {
        struct child *c = &s->children[i];
        c->failed = true; /* no pumping from the rpcs' destruction */
        child_drop_queue(c);
        broker_rpc_destroy(c->open_rpc);
        broker_rpc_destroy(c->commit_rpc);
        for (int k = 0; k < BCAST_WINDOW; k++)
            broker_rpc_destroy(c->chunk_rpcs[k]);
        bcast_shm_destroy(c->shm); /* the child keeps its own mapping */
    }
    free(s->children);
    bcast_shm_destroy(s->shm_in);
    bcast_sink_destroy(s->sink); /* removes an uncommitted temp file */
    broker_req_decref(s->commit_req);
    fence_destroy(s->f);
    idset_destroy(s->targets);
    idset_destroy(s->ok);
    json_decref(s->errors);
    free(s->path);
    free(s->archive);
    free(s->tmpdir);
    free(s->ranks);
    if (s->timer_init) {
        s->timer.data = s;
        uv_close((uv_handle_t *)&s->timer, on_timer_closed);
        return;
    }
    free(s);
}

/* Drop the session here and below; 'why' goes to the log. */
static void session_abort(struct session *s, const char *why)
{
    broker_t *b = s->ctx->b;

    broker_log(b, LOG_LEVEL_INFO, "bcast %" PRIu64 ": aborted: %s", s->sid,
               why);
    for (uint32_t i = 0; i < s->nchildren; i++) {
        struct child *c = &s->children[i];
        broker_rpc_t *r;
        if (c->failed)
            continue;
        r = broker_rpc(b, "bcast.abort", c->rank, BROKER_RPC_NORESPONSE,
                       json_pack("{s:I}", "sid", (json_int_t)s->sid), NULL, 0,
                       NULL, NULL);
        broker_rpc_destroy(r);
    }
    if (s->commit_req)
        broker_respond_error(s->commit_req, ECONNABORTED,
                             "bcast %" PRIu64 ": aborted: %s", s->sid, why);
    session_destroy(s);
}

static void on_timeout(uv_timer_t *t)
{
    struct session *s = t->data;

    session_abort(s, "nothing heard for the session's timeout");
}

static void session_touch(struct session *s)
{
    if (s->timer_init)
        uv_timer_start(&s->timer, on_timeout,
                       (uint64_t)(s->timeout * 1000.0 + 0.5), 0);
}

static struct session *session_lookup(struct bcast_ctx *ctx, uint64_t sid)
{
    for (struct session *s = ctx->sessions; s; s = s->next)
        if (s->sid == sid)
            return s;
    return NULL;
}

/* The local part: a sink in the job's tmpdir (relative paths) or at the
 * absolute path.  A failure is this node's result, not the session's. */
static void session_open_local(struct session *s)
{
    struct bcast_ctx *ctx = s->ctx;
    broker_t *b = ctx->b;
    const char *tmpdir;
    eddy_error_t err = {{0}};

    tmpdir = job_exec_tmpdir(broker_service_ctx(b, "job-exec"), s->id);
    if (!tmpdir) {
        s->local_errnum = ESRCH;
        snprintf(s->local_errstr, sizeof(s->local_errstr),
                 "job %" PRIu64 ": not running on rank %u", s->id, b->rank);
        return;
    }
    if (!(s->tmpdir = strdup(tmpdir)))
        goto nomem;
    if (s->flags & BCAST_F_ARCHIVE) {
        /* the archive goes beside the destination under a name of its
         * own (nodes of one machine may share an absolute destination),
         * and is extracted at commit */
        const char *slash = strrchr(s->path, '/');
        int n = slash ? (int)(slash - s->path + 1) : 0;
        if (asprintf(&s->archive, "%.*s.%s.eddy-tar-%" PRIu64 "-%u", n, s->path,
                     s->path + n, s->sid, b->rank) < 0) {
            s->archive = NULL;
            goto nomem;
        }
        s->sink =
            bcast_sink_create(tmpdir, s->archive, BCAST_F_OVERWRITE, &err);
    } else {
        s->sink = bcast_sink_create(tmpdir, s->path, s->flags, &err);
    }
    if (!s->sink) {
        s->local_errnum = errno;
        snprintf(s->local_errstr, sizeof(s->local_errstr), "%s", err.text);
    }
    return;
nomem:
    s->local_errnum = ENOMEM;
    snprintf(s->local_errstr, sizeof(s->local_errstr), "out of memory");
}

/* BCAST_F_ARCHIVE, after the archive file is complete and verified:
 * extract it as the destination directory, then remove it. */
static int extract_local(struct session *s, eddy_error_t *err)
{
    char *arch = NULL, *dest = NULL;
    int rc = -1;

    if (s->path[0] == '/') {
        arch = strdup(s->archive);
        dest = strdup(s->path);
    } else if (asprintf(&arch, "%s/%s", s->tmpdir, s->archive) < 0 ||
               asprintf(&dest, "%s/%s", s->tmpdir, s->path) < 0) {
        arch = dest = NULL;
    }
    if (!arch || !dest) {
        errno = ENOMEM;
        errprintf(err, "out of memory");
        goto done;
    }
    rc = bcast_tree_extract(arch, dest, (s->flags & BCAST_F_OVERWRITE) != 0,
                            (s->flags & BCAST_F_PRESERVE) != 0, err);
done:
    if (arch) {
        int e = errno;
        (void)unlink(arch);
        errno = e;
    }
    free(arch);
    free(dest);
    return rc;
}

/* The child's answer to our open says whether it mapped our slots.  Any
 * other outcome (an error, an old broker) leaves the child on the socket;
 * a child that failed shows that in its chunks' answers. */
static void on_open_answer(broker_rpc_t *rpc, const msg_t *msg, void *arg)
{
    struct child *c = arg;
    int shm = 0;

    c->open_rpc = NULL;
    broker_rpc_destroy(rpc);
    if (msg->errnum) {
        /* the child has no session: say why, not "no such session" later */
        bcast_shm_destroy(c->shm);
        c->shm = NULL;
        child_fail(c, (int)msg->errnum, msg_errstr(msg));
        session_check_done(c->s);
        return;
    }
    if (c->shm && json_unpack(msg->body, "{s:b}", "shm", &shm) == 0 && shm) {
        c->shm_ok = true;
        bcast_shm_close_fd(c->shm); /* mapped on both sides now */
    } else {
        bcast_shm_destroy(c->shm);
        c->shm = NULL;
    }
}

/* The body of the open for child 'c': with our slots if we made some. */
static json_t *open_body(struct session *s, struct child *c)
{
    json_t *body =
        json_pack("{s:I s:I s:s s:i s:s s:f}", "sid", (json_int_t)s->sid, "id",
                  (json_int_t)s->id, "path", s->path, "flags", s->flags,
                  "ranks", s->ranks, "timeout", s->timeout);

    if (body && c->shm &&
        json_object_set_new(body, "shm",
                            json_pack("{s:i s:i s:s s:s}", "pid",
                                      (int)bcast_shm_pid(c->shm), "fd",
                                      bcast_shm_fd(c->shm), "cookie",
                                      bcast_shm_cookie(c->shm), "host",
                                      broker_hostname(s->ctx->b))) < 0) {
        json_decref(body);
        body = NULL;
    }
    return body;
}

/* Our parent offered its slots ({"pid", "fd", "cookie", "host"}): map
 * them if we share its host.  Failing is normal on another host; the
 * chunks then come over the socket.  A parent whose hostname is not ours
 * is on another host even when its fd would open (network namespaces of
 * one machine): refused before trying. */
static void session_attach_shm(struct session *s, json_t *shm)
{
    json_int_t pid, fd;
    const char *cookie, *host;
    eddy_error_t err = {{0}};

    if (!shm || s->ctx->noshm ||
        json_unpack(shm, "{s:I s:I s:s s:s}", "pid", &pid, "fd", &fd, "cookie",
                    &cookie, "host", &host) < 0 ||
        pid <= 0 || pid > INT32_MAX || fd < 0 || fd > INT32_MAX)
        return;
    if (strcmp(host, broker_hostname(s->ctx->b)) != 0) {
        broker_log(s->ctx->b, LOG_LEVEL_DEBUG,
                   "bcast %" PRIu64 ": chunks over the socket: parent on "
                   "host %.64s",
                   s->sid, host);
        return;
    }
    if (!(s->shm_in = bcast_shm_attach((pid_t)pid, (int)fd, cookie, &err)))
        broker_log(s->ctx->b, LOG_LEVEL_DEBUG,
                   "bcast %" PRIu64 ": chunks over the socket: %s", s->sid,
                   err.text);
}

/* Create the session for 'req' (an open from the client at rank 0, or
 * from our parent, which may offer shared slots in 'shm') and send the
 * open on to the children.  NULL with errno and 'err' (nothing sent) on
 * failure. */
static struct session *session_create(struct bcast_ctx *ctx,
                                      broker_req_t *req,
                                      uint64_t sid,
                                      uint64_t id,
                                      const char *path,
                                      int flags,
                                      const char *ranks,
                                      double timeout,
                                      json_t *shm,
                                      eddy_error_t *err)
{
    broker_t *b = ctx->b;
    struct session *s;
    uint32_t nslots;

    if (!(s = calloc(1, sizeof(*s))))
        goto nomem;
    s->ctx = ctx;
    s->sid = sid;
    s->id = id;
    s->flags = flags;
    s->timeout = timeout;
    s->origin = broker_req_origin(req);
    if ((s->next = ctx->sessions))
        s->next->prev = s;
    ctx->sessions = s;
    if (!(s->path = strdup(path)) || !(s->ranks = strdup(ranks)) ||
        !(s->ok = idset_create()) || !(s->errors = json_array()))
        goto nomem;
    if (!(s->targets = idset_decode(ranks, err)) ||
        !(s->f = fence_create(b->rank, b->size, b->fanout, s->targets, err))) {
        errno = EINVAL;
        goto error;
    }
    nslots = fence_nslots(s->f);
    if (!(s->children = calloc(nslots, sizeof(*s->children))))
        goto nomem;
    for (uint32_t slot = 1; slot < nslots; slot++) {
        struct child *c;
        if (!fence_slot_expected(s->f, (int)slot))
            continue;
        c = &s->children[s->nchildren++];
        c->s = s;
        c->rank = fence_slot_rank(s->f, (int)slot);
        c->qtail = &c->q;
    }
    uv_timer_init(broker_loop(b), &s->timer);
    s->timer.data = s;
    s->timer_init = true;
    session_touch(s);
    s->local = fence_expects_local(s->f);
    if (s->local)
        session_open_local(s);
    session_attach_shm(s, shm);
    for (uint32_t i = 0; i < s->nchildren; i++) {
        struct child *c = &s->children[i];
        /* slots for a child on this host; without them (no memfd here)
         * the socket carries everything */
        c->shm = bcast_shm_create(NULL);
        /* chunks do not wait for the answer: those sent before it go
         * over the socket */
        c->open_rpc = broker_rpc(b, "bcast.open", c->rank, 0, open_body(s, c),
                                 NULL, 0, on_open_answer, c);
        if (!c->open_rpc) {
            bcast_shm_destroy(c->shm);
            c->shm = NULL;
        }
    }
    return s;
nomem:
    errno = ENOMEM;
    errprintf(err, "out of memory");
error:
    session_destroy(s);
    return NULL;
}

/* --- handlers ------------------------------------------------------------ */

static json_t *body_of(broker_req_t *req)
{
    return broker_req_msg(req)->body;
}

/* A relative path must stay below the tmpdir: no ".." component (the
 * sinks also refuse symlinks on the way, per node). */
static bool path_escapes(const char *path)
{
    return path[0] != '/' && relpath_has_dotdot(path);
}

/* bcast.open from a client: only at rank 0 */
static void open_client(struct bcast_ctx *ctx, broker_req_t *req)
{
    json_int_t id;
    const char *path, *nodes = NULL;
    int flags = 0;
    double timeout = BCAST_TIMEOUT_DEFAULT;
    char *ranks = NULL, *canon = NULL;
    uint32_t ntasks;
    idset_t *job = NULL, *want = NULL;
    struct session *s;
    eddy_error_t err = {{0}};

    if (ctx->b->rank != 0) {
        broker_respond_error(req, EINVAL, "rank %u: bcast.open goes to rank 0",
                             ctx->b->rank);
        return;
    }
    if (json_unpack(body_of(req), "{s:I s:s s?i s?s s?F}", "id", &id, "path",
                    &path, "flags", &flags, "nodes", &nodes, "timeout",
                    &timeout) < 0 ||
        id < 0) {
        broker_respond_error(req, EPROTO,
                             "bcast.open: expected {\"id\", \"path\", "
                             "\"flags\"?, \"nodes\"?, \"timeout\"?}");
        return;
    }
    if (!*path || strlen(path) >= 4096 || path_escapes(path)) {
        broker_respond_error(req, EINVAL, "bcast: '%.200s': %s", path,
                             !*path ? "empty destination"
                             : path_escapes(path)
                                 ? "a relative destination may not leave "
                                   "the job tmpdir ('..')"
                                 : "destination too long");
        return;
    }
    if (flags & ~BCAST_F_ALL) {
        broker_respond_error(req, EINVAL, "bcast: unknown flags 0x%x", flags);
        return;
    }
    if ((flags & BCAST_F_ARCHIVE) && path[strlen(path) - 1] == '/') {
        broker_respond_error(req, EINVAL,
                             "bcast: '%.200s': a directory destination is "
                             "named without a trailing '/'",
                             path);
        return;
    }
    if (!(timeout > 0) || timeout > BCAST_TIMEOUT_MAX) {
        broker_respond_error(req, EINVAL,
                             "bcast: timeout must be in (0, %.0f] seconds",
                             BCAST_TIMEOUT_MAX);
        return;
    }
    if (job_manager_job_ranks(broker_service_ctx(ctx->b, "job"), (uint64_t)id,
                              JOB_RANKS_TMPDIRS, &ranks, &ntasks, &err) < 0) {
        int e = errno;
        broker_respond_error(req, e, "%s", err.text);
        return;
    }
    if (!(job = idset_decode(ranks, NULL)))
        goto nomem;
    if (nodes) {
        if (!(want = idset_decode(nodes, &err))) {
            broker_respond_error(req, EINVAL, "bcast: nodes: %s", err.text);
            goto done;
        }
        for (uint32_t r = idset_first(want); r != IDSET_INVALID;
             r = idset_next(want, r)) {
            if (!idset_test(job, r)) {
                broker_respond_error(req, EINVAL,
                                     "bcast: node %u does not run job %lld "
                                     "(its nodes: %s)",
                                     r, (long long)id, ranks);
                goto done;
            }
        }
        if (idset_count(want) == 0) {
            broker_respond_error(req, EINVAL, "bcast: no nodes given");
            goto done;
        }
        if (!(canon = idset_encode(want)))
            goto nomem;
    }
    if (!(s = session_create(ctx, req, ++ctx->next_sid, (uint64_t)id, path,
                             flags, canon ? canon : ranks, timeout, NULL,
                             &err))) {
        broker_respond_error(req, errno, "bcast: %s", err.text);
        goto done;
    }
    broker_respond(
        req,
        json_pack("{s:I s:s}", "sid", (json_int_t)s->sid, "nodes", s->ranks),
        NULL, 0, 0);
    goto done;
nomem:
    broker_respond_error(req, ENOMEM, "out of memory");
done:
    idset_destroy(job);
    idset_destroy(want);
    free(canon);
    free(ranks);
}

static void open_handler(broker_req_t *req, void *arg)
{
    struct bcast_ctx *ctx = arg;
    json_int_t sid, id;
    const char *path, *ranks;
    int flags;
    double timeout;
    eddy_error_t err = {{0}};
    struct session *s;

    if (broker_req_is_cancel(req))
        return;
    if (!json_object_get(body_of(req), "sid")) {
        open_client(ctx, req);
        return;
    }
    if (json_unpack(body_of(req), "{s:I s:I s:s s:i s:s s:F}", "sid", &sid,
                    "id", &id, "path", &path, "flags", &flags, "ranks", &ranks,
                    "timeout", &timeout) < 0 ||
        sid <= 0 || id < 0 || !(timeout > 0) || timeout > BCAST_TIMEOUT_MAX) {
        broker_respond_error(req, EPROTO, "bcast.open: malformed request");
        return;
    }
    if (session_lookup(ctx, (uint64_t)sid)) {
        broker_respond_error(req, EEXIST, "bcast %lld: already open",
                             (long long)sid);
        return;
    }
    if (!(s = session_create(ctx, req, (uint64_t)sid, (uint64_t)id, path, flags,
                             ranks, timeout,
                             json_object_get(body_of(req), "shm"), &err))) {
        broker_respond_error(req, errno, "rank %u: bcast: %s", ctx->b->rank,
                             err.text);
        return;
    }
    broker_respond(req, json_pack("{s:b}", "shm", s->shm_in != NULL), NULL, 0,
                   0);
}

/* The session a request names; answers the request with an error if none. */
static struct session *req_session(struct bcast_ctx *ctx, broker_req_t *req)
{
    json_int_t sid = 0;
    struct session *s;

    if (json_unpack(body_of(req), "{s:I}", "sid", &sid) < 0 || sid <= 0) {
        broker_respond_error(req, EPROTO, "%s: expected {\"sid\", ...}",
                             broker_req_msg(req)->topic);
        return NULL;
    }
    if (!(s = session_lookup(ctx, (uint64_t)sid))) {
        broker_respond_error(req, ENOENT,
                             "rank %u: bcast %lld: no such session (aborted "
                             "or timed out?)",
                             ctx->b->rank, (long long)sid);
        return NULL;
    }
    session_touch(s);
    return s;
}

/* Write a chunk here, unless this node already failed. */
static void local_write(struct session *s, struct bcast_chunk *c)
{
    struct bcast_ctx *ctx = s->ctx;
    eddy_error_t err = {{0}};
    void *copy = NULL;

    if (!s->sink)
        return;
    if (ctx->corrupt_rank == ctx->b->rank && !s->corrupted && c->len > 0 &&
        (copy = malloc(c->len))) {
        memcpy(copy, c->data, c->len);
        ((unsigned char *)copy)[0] ^= 0xff;
        c->data = copy;
        s->corrupted = true;
    }
    if (bcast_sink_write(s->sink, c, &err) < 0) {
        s->local_errnum = errno;
        snprintf(s->local_errstr, sizeof(s->local_errstr), "%s", err.text);
        bcast_sink_destroy(s->sink);
        s->sink = NULL;
    }
    free(copy);
}

static void chunk_handler(broker_req_t *req, void *arg)
{
    struct bcast_ctx *ctx = arg;
    const msg_t *msg = broker_req_msg(req);
    struct session *s;
    json_int_t offset, rawlen, slot = -1, len = -1;
    int z = 0;
    struct bcast_chunk c;
    const void *data;
    struct qitem *it;

    if (broker_req_is_cancel(req) || !(s = req_session(ctx, req)))
        return;
    if (json_unpack(msg->body, "{s:I s:I s?b s?I s?I}", "offset", &offset,
                    "rawlen", &rawlen, "z", &z, "slot", &slot, "len",
                    &len) < 0 ||
        offset < 0 || rawlen <= 0 || rawlen > BCAST_CHUNK_MAX || s->committing)
        goto malformed;
    if (json_object_get(msg->body, "slot")) {
        /* the bytes are in our parent's shared slot */
        if (!s->shm_in || slot < 0 || slot >= BCAST_SHM_SLOTS ||
            msg->payload_len != 0 || len <= 0 || len > rawlen ||
            (!z && len != rawlen))
            goto malformed;
        data = bcast_shm_slot(s->shm_in, (int)slot);
    } else {
        if (msg->payload_len == 0 || msg->payload_len > (size_t)rawlen ||
            (!z && msg->payload_len != (size_t)rawlen))
            goto malformed;
        data = msg->payload;
        len = (json_int_t)msg->payload_len;
    }
    c = (struct bcast_chunk){
        .offset = (uint64_t)offset,
        .rawlen = (uint32_t)rawlen,
        .len = (uint32_t)len,
        .data = data,
        .compressed = z != 0,
    };
    local_write(s, &c);
    if (s->nchildren == 0) {
        broker_respond(req, json_object(), NULL, 0, 0);
        return;
    }
    if (!(it = calloc(1, sizeof(*it))) ||
        !(it->body = json_pack("{s:I s:I s:I s:b}", "sid", (json_int_t)s->sid,
                               "offset", offset, "rawlen", rawlen, "z", z))) {
        free(it);
        broker_respond_error(req, ENOMEM, "rank %u: out of memory",
                             ctx->b->rank);
        return;
    }
    it->data = data;
    it->len = (size_t)len;
    if (msg->payload_len > 0)
        it->owner = msg_incref((msg_t *)msg);
    it->req = broker_req_incref(req);
    if (session_forward(s, it) < 0)
        broker_log(ctx->b, LOG_LEVEL_ERR, "bcast %" PRIu64 ": out of memory",
                   s->sid);
    return;
malformed:
    broker_respond_error(req, EPROTO,
                         "bcast.chunk: expected {\"sid\", \"offset\", "
                         "\"rawlen\", \"z\"?} and 1..rawlen bytes in the "
                         "payload or in a shared slot (\"slot\", \"len\"), "
                         "before the commit");
}

static void commit_handler(broker_req_t *req, void *arg)
{
    struct bcast_ctx *ctx = arg;
    const msg_t *msg = broker_req_msg(req);
    struct session *s;
    json_int_t size, mode, mtime, nsec;
    const char *hash;
    struct bcast_file_info info = {0};
    eddy_error_t err = {{0}};
    struct qitem *it;

    if (broker_req_is_cancel(req) || !(s = req_session(ctx, req)))
        return;
    if (s->committing ||
        json_unpack(msg->body, "{s:I s:I s:I s:I s:s}", "size", &size, "mode",
                    &mode, "mtime", &mtime, "mtime_nsec", &nsec, "hash",
                    &hash) < 0 ||
        size < 0 || mode < 0 || mode > 07777 || nsec < 0 || nsec > 999999999 ||
        hex_decode(hash, strlen(hash), info.hash, BCAST_HASH_SIZE) < 0) {
        broker_respond_error(req, EPROTO,
                             "bcast.commit: expected {\"sid\", \"size\", "
                             "\"mode\", \"mtime\", \"mtime_nsec\", \"hash\"}, "
                             "once");
        return;
    }
    info.size = (uint64_t)size;
    info.mode = (uint32_t)mode;
    info.mtime_sec = mtime;
    info.mtime_nsec = (uint32_t)nsec;
    s->committing = true;
    s->commit_req = broker_req_incref(req);
    /* The sender has said everything: what is left is this node's
     * checks and extraction and its children's, whose loss surfaces as
     * an error on their requests.  A timeout now would abort a slow but
     * healthy commit (a large tree takes a while to extract) and lose
     * every node's result. */
    if (s->timer_init)
        uv_timer_stop(&s->timer);
    /* the local result */
    if (s->local) {
        /* a file in the tmpdir went with the job: say so rather than
         * report the rename's ENOENT */
        if (s->sink && s->path[0] != '/' &&
            !job_exec_tmpdir(broker_service_ctx(ctx->b, "job-exec"), s->id)) {
            s->local_errnum = ESRCH;
            snprintf(s->local_errstr, sizeof(s->local_errstr),
                     "job %" PRIu64 " ended during the transfer", s->id);
        } else if (s->sink && (bcast_sink_commit(s->sink, &info, &err) < 0 ||
                               (s->archive && extract_local(s, &err) < 0))) {
            s->local_errnum = errno;
            snprintf(s->local_errstr, sizeof(s->local_errstr), "%s", err.text);
        }
        bcast_sink_destroy(s->sink);
        s->sink = NULL;
        if (s->local_errnum)
            result_error(s, ctx->b->rank, s->local_errnum, s->local_errstr);
        else
            (void)idset_set(s->ok, ctx->b->rank);
    }
    /* then the children's, behind their chunks */
    if (s->nchildren > 0) {
        if (!(it = calloc(1, sizeof(*it)))) {
            broker_respond_error(req, ENOMEM, "out of memory");
            session_destroy(s);
            return;
        }
        it->commit = true;
        it->body = json_incref(msg->body);
        if (session_forward(s, it) < 0) {
            broker_respond_error(req, ENOMEM, "out of memory");
            session_destroy(s);
            return;
        }
    }
    session_check_done(s);
}

static void abort_handler(broker_req_t *req, void *arg)
{
    struct bcast_ctx *ctx = arg;
    json_int_t sid = 0;
    struct session *s;

    if (broker_req_is_cancel(req))
        return;
    if (json_unpack(body_of(req), "{s:I}", "sid", &sid) < 0 ||
        !(s = session_lookup(ctx, (uint64_t)sid)))
        return; /* no response: a late abort of a finished session is fine */
    session_abort(s, "aborted by the sender");
}

static void watch_handler(broker_req_t *req, void *arg)
{
    struct bcast_ctx *ctx = arg;
    struct watch *w, **wp;
    json_int_t sid = 0;

    if (broker_req_is_cancel(req)) {
        /* the transfer ended: the client lets go of its watch */
        for (wp = &ctx->watches; (w = *wp); wp = &w->next) {
            if (broker_req_same(w->req, req)) {
                *wp = w->next;
                broker_respond(w->req, NULL, NULL, 0, MSG_FLAG_EOS);
                broker_req_decref(w->req);
                free(w);
                return;
            }
        }
        return;
    }
    if (json_unpack(body_of(req), "{s:I}", "sid", &sid) < 0 || sid <= 0 ||
        !broker_req_is_streaming(req)) {
        broker_respond_error(req, EPROTO,
                             "bcast.watch: expected a streaming request "
                             "{\"sid\"}");
        return;
    }
    if (!(w = calloc(1, sizeof(*w)))) {
        broker_respond_error(req, ENOMEM, "out of memory");
        return;
    }
    w->req = broker_req_incref(req);
    w->sid = (uint64_t)sid;
    w->next = ctx->watches;
    ctx->watches = w;
}

/* --- service lifecycle -------------------------------------------------- */

static void bcast_disconnect(void *arg, uint64_t origin)
{
    struct bcast_ctx *ctx = arg;
    struct session *s, *next;
    struct watch *w, **wp = &ctx->watches;

    for (s = ctx->sessions; s; s = next) {
        next = s->next;
        if (s->origin == origin)
            session_abort(s, "the sender went away");
    }
    /* after the sessions: on rank 0 the abort below is handled at once
     * and may free one */
    while ((w = *wp)) {
        if (broker_req_origin(w->req) != origin) {
            wp = &w->next;
            continue;
        }
        *wp = w->next;
        broker_rpc_destroy(
            broker_rpc(ctx->b, "bcast.abort", 0, BROKER_RPC_NORESPONSE,
                       json_pack("{s:I}", "sid", (json_int_t)w->sid), NULL, 0,
                       NULL, NULL));
        broker_req_decref(w->req);
        free(w);
    }
}

static int bcast_init(broker_t *b, void **ctxp)
{
    struct bcast_ctx *ctx;
    const char *hook = getenv(BCAST_CORRUPT_ENV);
    const char *noshm = getenv(BCAST_NOSHM_ENV);
    idset_t *set;

    if (!(ctx = calloc(1, sizeof(*ctx))))
        return -1;
    ctx->b = b;
    ctx->corrupt_rank =
        hook && *hook ? (uint32_t)strtoul(hook, NULL, 10) : UINT32_MAX;
    if (noshm && *noshm && (set = idset_decode(noshm, NULL))) {
        ctx->noshm = idset_test(set, b->rank);
        idset_destroy(set);
    }
    *ctxp = ctx;
    return 0;
}

static void bcast_shutdown(void *arg)
{
    struct bcast_ctx *ctx = arg;
    struct watch *w;

    while ((w = ctx->watches)) {
        ctx->watches = w->next;
        broker_respond_error(w->req, ENOSYS, "the broker is shutting down");
        broker_req_decref(w->req);
        free(w);
    }

    while (ctx->sessions)
        session_abort(ctx->sessions, "the broker is shutting down");
}

static void bcast_destroy(void *arg)
{
    struct bcast_ctx *ctx = arg;

    if (!ctx)
        return;
    bcast_shutdown(ctx);
    free(ctx);
}

static const struct service_handler handlers[] = {
    {"bcast.open", open_handler},     {"bcast.chunk", chunk_handler},
    {"bcast.commit", commit_handler}, {"bcast.abort", abort_handler},
    {"bcast.watch", watch_handler},   {NULL, NULL},
};

const struct service_def bcast_service = {
    .name = "bcast",
    .handlers = handlers,
    .init = bcast_init,
    .disconnect = bcast_disconnect,
    .shutdown = bcast_shutdown,
    .destroy = bcast_destroy,
};
