/* job_io.c - the "job-io" service at rank 0: each job's output log
 * (docs/jobs-protocol.md).
 *
 * Shells send their tasks' output here (job-io.write); each job keeps its
 * records in arrival order, so the output of one task stream stays in
 * order and attachers see every record exactly once: job-io.attach
 * replays the log from the start, then follows it live until the job is
 * INACTIVE (job.h: the job manager says so).  Replay and follow are one
 * loop: each attacher has a cursor into the record sequence and is sent
 * records while its credit window (job-io.credit) has room.
 *
 * The stored log is capped (--job-output-cap, 64 MiB by default, record
 * overhead included): it only bounds what is kept for later attachers.
 * Output beyond it is still appended, but held only until every current
 * attacher has been sent it; the job-io.write that brought it is answered
 * (the shell's credit) only then.  So attachers present while the job
 * runs get every byte, a slow one slows the job down like a terminal
 * would, and memory stays bounded by the cap plus 1 MiB per shell.
 * Later attachers are told how many bytes the log lacks ({"dropped"}).
 * EOF records are always stored (at most two per task), so attachers can
 * tell which streams closed.
 *
 * job-io.stdin is decoded here and forwarded by the job manager, which
 * knows where the tasks run (job_manager_stdin()).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/idset.h"
#include "src/common/log.h"
#include "job.h"
#include "keymap.h"
#include "service.h"

enum { STREAM_STDOUT = 0, STREAM_STDERR = 1 };

static const char *const stream_names[] = {"stdout", "stderr"};

/* An attacher is sent output while fewer than this many payload bytes
 * wait for its job-io.credit (docs/jobs-protocol.md). */
enum { ATTACH_WINDOW = 4 << 20 };

/* One piece of output (or an EOF).  Records within the cap are "stored":
 * they stay for later attachers.  Records beyond it are held only until
 * every current attacher has been sent them; the job-io.write that
 * brought one is answered when it is freed, so a slow attacher slows the
 * job's output down instead of losing it. */
struct record {
    struct record *prev, *next;
    uint64_t seq;        /* position in the job's record sequence */
    broker_req_t *write; /* held job-io.write (beyond the cap), or NULL */
    uint32_t rank;
    uint8_t stream;
    bool eof;
    bool stored;
    size_t len;
    char data[];
};

struct attacher {
    broker_req_t *req;
    uint64_t key;            /* chosen by the client, matches its credits */
    struct record *next_rec; /* next record to send, NULL: caught up */
    uint64_t next_seq;       /* its seq (the job's next_seq if caught up) */
    size_t unacked;          /* payload bytes sent, not yet credited */
    uint64_t missed;         /* output bytes freed before it attached */
    struct attacher *next;
};

struct io_job {
    uint64_t id;
    uint32_t ntasks;
    struct record *head, *tail;
    struct record *spill; /* first record appended once full (or NULL) */
    uint64_t next_seq;
    uint64_t kept;    /* bytes stored, record overhead included */
    uint64_t dropped; /* output bytes not stored (beyond the cap) */
    uint64_t freed;   /* of those, bytes no longer held for anyone */
    bool full;        /* the cap was reached: later output is not stored */
    idset_t *eof[2];  /* task ranks whose stream reached EOF */
    bool inactive;
    struct attacher *attachers; /* oldest first */
};

struct job_io {
    broker_t *b;
    bool active; /* rank 0 */
    keymap_t *jobs;
    uint64_t cap;
};

static void attacher_free(struct attacher *a)
{
    broker_req_decref(a->req);
    free(a);
}

static json_t *record_json(const struct record *r)
{
    json_t *o = json_pack("{s:I s:s}", "rank", (json_int_t)r->rank, "stream",
                          stream_names[r->stream]);

    if (o && r->eof && json_object_set_new(o, "eof", json_true()) < 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* Send 'a' the records after its cursor while its window has room. */
static void attacher_feed(struct io_job *j, struct attacher *a)
{
    struct record *r;

    while ((r = a->next_rec) && a->unacked < ATTACH_WINDOW) {
        broker_respond(a->req, record_json(r), r->len ? r->data : NULL, r->len,
                       0);
        a->unacked += r->len;
        a->next_rec = r->next;
        a->next_seq = r->next ? r->next->seq : j->next_seq;
    }
}

/* The end of an attacher's stream (it has been sent every record): what
 * it missed, then EOS. */
static void attacher_end(struct attacher *a)
{
    if (a->missed)
        broker_respond(a->req,
                       json_pack("{s:I}", "dropped", (json_int_t)a->missed),
                       NULL, 0, 0);
    broker_respond(a->req, NULL, NULL, 0, MSG_FLAG_EOS);
}

static void record_unlink(struct io_job *j, struct record *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        j->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        j->tail = r->prev;
    if (j->spill == r)
        j->spill = r->next;
}

/* Free a record and answer the write it held back. */
static void record_free(struct record *r)
{
    if (r->write) {
        broker_respond(r->write, json_object(), NULL, 0, 0);
        broker_req_decref(r->write);
    }
    free(r);
}

/* Free the records beyond the cap that every current attacher has been
 * sent (all of them if nobody is attached). */
static void job_gc(struct io_job *j)
{
    uint64_t min = UINT64_MAX;
    struct record *r, *next;

    for (struct attacher *a = j->attachers; a; a = a->next)
        if (a->next_seq < min)
            min = a->next_seq;
    for (r = j->spill; r && r->seq < min; r = next) {
        next = r->next;
        if (r->stored)
            continue;
        record_unlink(j, r);
        j->freed += r->len;
        record_free(r);
    }
}

/* Feed every attacher, end those that got everything of an INACTIVE
 * job, and free what nobody needs any more. */
static void job_pump(struct io_job *j)
{
    struct attacher **pp = &j->attachers;

    while (*pp) {
        struct attacher *a = *pp;

        attacher_feed(j, a);
        if (j->inactive && !a->next_rec) {
            *pp = a->next;
            attacher_end(a);
            attacher_free(a);
        } else
            pp = &a->next;
    }
    job_gc(j);
}

static void io_job_destroy(struct io_job *j)
{
    if (!j)
        return;
    while (j->attachers) {
        struct attacher *a = j->attachers;
        j->attachers = a->next;
        attacher_free(a);
    }
    while (j->head) {
        struct record *r = j->head;
        j->head = r->next;
        record_free(r);
    }
    idset_destroy(j->eof[0]);
    idset_destroy(j->eof[1]);
    free(j);
}

/* --- called by the job manager (job.h) ---------------------------------- */

int job_io_job_add(struct job_io *io, uint64_t id, uint32_t ntasks)
{
    struct io_job *j;

    if (!io->active) {
        errno = EINVAL;
        return -1;
    }
    if (keymap_get(io->jobs, id, 0)) {
        errno = EEXIST;
        return -1;
    }
    if (!(j = calloc(1, sizeof(*j))) || !(j->eof[0] = idset_create()) ||
        !(j->eof[1] = idset_create()) || keymap_put(io->jobs, id, 0, j) < 0) {
        io_job_destroy(j);
        errno = ENOMEM;
        return -1;
    }
    j->id = id;
    j->ntasks = ntasks;
    return 0;
}

void job_io_job_inactive(struct job_io *io, uint64_t id)
{
    struct io_job *j = io->active ? keymap_get(io->jobs, id, 0) : NULL;

    if (!j)
        return;
    j->inactive = true;
    job_pump(j);
}

void job_io_job_remove(struct job_io *io, uint64_t id)
{
    struct io_job *j = io->active ? keymap_remove(io->jobs, id, 0) : NULL;

    if (!j)
        return;
    while (j->attachers) {
        struct attacher *a = j->attachers;
        j->attachers = a->next;
        broker_respond_error(a->req, ENOENT, "job %" PRIu64 " was purged",
                             j->id);
        attacher_free(a);
    }
    io_job_destroy(j);
}

/* --- handlers ------------------------------------------------------------ */

static bool check_active(struct job_io *io, broker_req_t *req)
{
    if (io->active)
        return true;
    broker_respond_error(req, EINVAL,
                         "rank %u: the job-io service runs on rank 0",
                         broker_rank(io->b));
    return false;
}

/* Decode "id" and find the job's log; respond with an error if none. */
static struct io_job *req_job(struct job_io *io,
                              broker_req_t *req,
                              uint64_t *idp)
{
    const msg_t *msg = broker_req_msg(req);
    json_int_t id;
    struct io_job *j;

    if (!check_active(io, req))
        return NULL;
    if (json_unpack(msg->body, "{s:I}", "id", &id) < 0 || id < 0) {
        broker_respond_error(req, EPROTO, "%s: expected {\"id\": job id, ...}",
                             msg->topic);
        return NULL;
    }
    if (idp)
        *idp = (uint64_t)id;
    if (!(j = keymap_get(io->jobs, (uint64_t)id, 0))) {
        broker_respond_error(req, ENOENT, "job %lld: no such job",
                             (long long)id);
        return NULL;
    }
    return j;
}

/* Add a record at the end of the log.  Data beyond the cap is held for
 * the current attachers only, and keeps 'write' (if not NULL) to answer
 * once freed: then *held is set.  -1 with ENOMEM. */
static int append(struct job_io *io,
                  struct io_job *j,
                  uint32_t rank,
                  int stream,
                  bool eof,
                  const void *data,
                  size_t len,
                  broker_req_t *write,
                  bool *held)
{
    struct record *r;
    uint64_t cost = sizeof(*r) + len;

    if (!eof && !j->full && j->kept + cost > io->cap)
        j->full = true; /* from here on the stored log lacks output */
    if (!(r = malloc(sizeof(*r) + len)))
        return -1;
    memset(r, 0, sizeof(*r));
    r->seq = j->next_seq++;
    r->rank = rank;
    r->stream = (uint8_t)stream;
    r->eof = eof;
    r->stored = eof || !j->full;
    r->len = len;
    if (len)
        memcpy(r->data, data, len);
    r->prev = j->tail;
    if (j->tail)
        j->tail->next = r;
    else
        j->head = r;
    j->tail = r;
    if (j->full && !j->spill)
        j->spill = r;
    if (r->stored)
        j->kept += cost;
    else {
        j->dropped += len;
        if (write) {
            r->write = broker_req_incref(write);
            *held = true;
        }
    }
    for (struct attacher *a = j->attachers; a; a = a->next)
        if (!a->next_rec)
            a->next_rec = r;
    return 0;
}

static void write_req(broker_req_t *req, void *ctx)
{
    struct job_io *io = ctx;
    const msg_t *msg = broker_req_msg(req);
    struct io_job *j;
    json_int_t rank;
    const char *stream;
    int eof = 0, s;
    bool held = false;

    if (broker_req_is_cancel(req) || !(j = req_job(io, req, NULL)))
        return;
    if (json_unpack(msg->body, "{s:I s:s s?b}", "rank", &rank, "stream",
                    &stream, "eof", &eof) < 0) {
        broker_respond_error(req, EPROTO,
                             "job %" PRIu64 ": job-io.write: expected "
                             "{\"id\", \"rank\", \"stream\", \"eof\"?}",
                             j->id);
        return;
    }
    if (rank < 0 || rank >= (json_int_t)j->ntasks) {
        broker_respond_error(req, EINVAL,
                             "job %" PRIu64 ": no task rank %lld (the job has "
                             "%u tasks)",
                             j->id, (long long)rank, j->ntasks);
        return;
    }
    if (!strcmp(stream, "stdout"))
        s = STREAM_STDOUT;
    else if (!strcmp(stream, "stderr"))
        s = STREAM_STDERR;
    else {
        broker_respond_error(req, EINVAL,
                             "job %" PRIu64 ": stream must be stdout or "
                             "stderr, not '%.32s'",
                             j->id, stream);
        return;
    }
    if (idset_test(j->eof[s], (uint32_t)rank) &&
        (msg->payload_len > 0 || eof)) {
        broker_respond_error(req, EINVAL,
                             "job %" PRIu64 ": task %lld %s is already "
                             "closed",
                             j->id, (long long)rank, stream);
        return;
    }
    if ((msg->payload_len > 0 &&
         append(io, j, (uint32_t)rank, s, false, msg->payload, msg->payload_len,
                req, &held) < 0) ||
        (eof &&
         (idset_set(j->eof[s], (uint32_t)rank) < 0 ||
          append(io, j, (uint32_t)rank, s, true, NULL, 0, NULL, &held) < 0))) {
        /* a held record answers 'req' when freed: answer nothing here */
        if (!held)
            broker_respond_error(req, ENOMEM, "job %" PRIu64 ": out of memory",
                                 j->id);
        job_pump(j);
        return;
    }
    /* Answer now unless a record beyond the cap holds the answer back
     * (job_pump() may free it, and so answer, at once). */
    if (!held)
        broker_respond(req, json_object(), NULL, 0, 0);
    job_pump(j);
}

/* Find the attacher that 'req' (a cancel) cancels, and its job. */
static struct attacher *attacher_unlink_req(struct job_io *io,
                                            broker_req_t *req,
                                            struct io_job **jp)
{
    void **v = NULL;
    size_t n = 0;

    if (!io->active || keymap_values(io->jobs, &v, &n) < 0)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        struct io_job *j = v[i];
        for (struct attacher **pp = &j->attachers; *pp; pp = &(*pp)->next) {
            if (broker_req_same((*pp)->req, req)) {
                struct attacher *a = *pp;
                *pp = a->next;
                *jp = j;
                free(v);
                return a;
            }
        }
    }
    free(v);
    return NULL;
}

static void attach_req(broker_req_t *req, void *ctx)
{
    struct job_io *io = ctx;
    const msg_t *msg;
    struct io_job *j;
    struct attacher *a, **pp;
    json_int_t key = 0;

    if (broker_req_is_cancel(req)) {
        if ((a = attacher_unlink_req(io, req, &j))) {
            broker_respond_error(a->req, ENODATA, NULL);
            attacher_free(a);
            job_pump(j); /* what it held back may go */
        }
        return;
    }
    if (!(j = req_job(io, req, NULL)))
        return;
    msg = broker_req_msg(req);
    if (json_unpack(msg->body, "{s?I}", "key", &key) < 0) {
        broker_respond_error(req, EPROTO,
                             "job %" PRIu64 ": job-io.attach: expected "
                             "{\"id\", \"key\"?: integer}",
                             j->id);
        return;
    }
    if (!broker_req_is_streaming(req)) {
        broker_respond_error(req, EPROTO,
                             "job-io.attach must be a streaming request");
        return;
    }
    if (!(a = calloc(1, sizeof(*a)))) {
        broker_respond_error(req, ENOMEM, "job %" PRIu64 ": out of memory",
                             j->id);
        return;
    }
    a->req = broker_req_incref(req);
    a->key = (uint64_t)key;
    a->next_rec = j->head;
    a->next_seq = j->head ? j->head->seq : j->next_seq;
    a->missed = j->freed;
    for (pp = &j->attachers; *pp; pp = &(*pp)->next)
        ;
    *pp = a;
    job_pump(j);
}

/* job-io.credit {"id", "key", "bytes"}: the client delivered 'bytes' of
 * output of its attach with that key.  Usually sent NORESPONSE.  Credits
 * go to the oldest matching attacher first, so a client that attaches
 * twice with one key still gets what it acknowledged. */
static void credit_req(broker_req_t *req, void *ctx)
{
    struct job_io *io = ctx;
    const msg_t *msg = broker_req_msg(req);
    struct io_job *j;
    json_int_t key = 0, bytes;
    uint64_t origin = broker_req_origin(req);

    if (broker_req_is_cancel(req) || !(j = req_job(io, req, NULL)))
        return;
    if (json_unpack(msg->body, "{s?I s:I}", "key", &key, "bytes", &bytes) < 0 ||
        bytes < 0) {
        broker_respond_error(req, EPROTO,
                             "job %" PRIu64 ": job-io.credit: expected "
                             "{\"id\", \"key\"?, \"bytes\": integer >= 0}",
                             j->id);
        return;
    }
    for (struct attacher *a = j->attachers; a && bytes > 0; a = a->next) {
        size_t take;

        if (broker_req_origin(a->req) != origin || a->key != (uint64_t)key)
            continue;
        take = (uint64_t)bytes < a->unacked ? (size_t)bytes : a->unacked;
        a->unacked -= take;
        bytes -= (json_int_t)take;
    }
    broker_respond(req, json_object(), NULL, 0, 0);
    job_pump(j);
}

static void stdin_req(broker_req_t *req, void *ctx)
{
    struct job_io *io = ctx;
    const msg_t *msg = broker_req_msg(req);
    struct job_manager *jm;
    uint64_t id;
    const char *ranks = "all";
    int eof = 0;

    if (broker_req_is_cancel(req) || !req_job(io, req, &id))
        return;
    if (json_unpack(msg->body, "{s?s s?b}", "ranks", &ranks, "eof", &eof) < 0) {
        broker_respond_error(req, EPROTO,
                             "job %" PRIu64 ": job-io.stdin: expected "
                             "{\"id\", \"ranks\": idset or \"all\", "
                             "\"eof\": bool}",
                             id);
        return;
    }
    if (!(jm = broker_service_ctx(io->b, "job"))) {
        broker_respond_error(req, ENOSYS, "job %" PRIu64 ": no job manager",
                             id);
        return;
    }
    job_manager_stdin(jm, req, id, ranks, eof, msg->payload, msg->payload_len);
}

/* --- service ------------------------------------------------------------- */

static void io_disconnect(void *ctx, uint64_t origin)
{
    struct job_io *io = ctx;
    void **v = NULL;
    size_t n = 0;

    if (!io->active || keymap_values(io->jobs, &v, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        struct io_job *j = v[i];
        struct attacher **pp = &j->attachers;
        bool gone = false;

        while (*pp) {
            struct attacher *a = *pp;
            if (broker_req_origin(a->req) == origin) {
                *pp = a->next;
                attacher_free(a);
                gone = true;
            } else
                pp = &a->next;
        }
        if (gone)
            job_pump(j); /* what they held back may go */
    }
    free(v);
}

static void io_destroy(void *ctx)
{
    struct job_io *io = ctx;
    void **v = NULL;
    size_t n = 0;

    if (!io)
        return;
    if (io->jobs && keymap_values(io->jobs, &v, &n) == 0) {
        for (size_t i = 0; i < n; i++)
            io_job_destroy(v[i]);
        free(v);
    }
    keymap_destroy(io->jobs);
    free(io);
}

static int io_init(broker_t *b, void **ctx)
{
    struct job_io *io;

    if (!(io = calloc(1, sizeof(*io))))
        return -1;
    io->b = b;
    io->cap = broker_job_output_cap(b);
    if (broker_rank(b) == 0) {
        if (!(io->jobs = keymap_create())) {
            free(io);
            errno = ENOMEM;
            return -1;
        }
        io->active = true;
    }
    *ctx = io;
    return 0;
}

static const struct service_handler handlers[] = {
    {"job-io.write", write_req},
    {"job-io.attach", attach_req},
    {"job-io.credit", credit_req},
    {"job-io.stdin", stdin_req},
    {NULL, NULL},
};

const struct service_def job_io_service = {
    .name = "job-io",
    .handlers = handlers,
    .init = io_init,
    .disconnect = io_disconnect,
    .destroy = io_destroy,
};
