/* job_io.c - the "job-io" service at rank 0: each job's output log
 * (docs/jobs-protocol.md).
 *
 * Shells send their tasks' output here (job-io.write); each job keeps its
 * records in arrival order, so the output of one task stream stays in
 * order and attachers see every record exactly once: job-io.attach
 * replays the log from the start, then follows it live until the job is
 * INACTIVE (job.h: the job manager says so).  A job's log is capped
 * (--job-output-cap, 64 MiB by default, record overhead included);
 * beyond it output is counted, not kept, and attachers are told how many
 * bytes were dropped.  EOF records are always kept (at most two per
 * task), so attachers can tell which streams closed.
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

struct record {
    struct record *next;
    uint32_t rank;
    uint8_t stream;
    bool eof;
    size_t len;
    char data[];
};

struct attacher {
    broker_req_t *req;
    struct record *last; /* last record sent, NULL if none yet */
    struct attacher *next;
};

struct io_job {
    uint64_t id;
    uint32_t ntasks;
    struct record *head, *tail;
    uint64_t kept;    /* bytes held, record overhead included */
    uint64_t dropped; /* output bytes beyond the cap */
    idset_t *eof[2];  /* task ranks whose stream reached EOF */
    bool inactive;
    struct attacher *attachers;
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

/* Send 'a' the records after the last one it got. */
static void attacher_feed(struct io_job *j, struct attacher *a)
{
    struct record *r = a->last ? a->last->next : j->head;

    for (; r; r = r->next) {
        broker_respond(a->req, record_json(r), r->len ? r->data : NULL, r->len,
                       0);
        a->last = r;
    }
}

/* The end of an attacher's stream: what was dropped, then EOS. */
static void attacher_end(struct io_job *j, struct attacher *a)
{
    attacher_feed(j, a);
    if (j->dropped)
        broker_respond(a->req,
                       json_pack("{s:I}", "dropped", (json_int_t)j->dropped),
                       NULL, 0, 0);
    broker_respond(a->req, NULL, NULL, 0, MSG_FLAG_EOS);
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
        free(r);
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
    while (j->attachers) {
        struct attacher *a = j->attachers;
        j->attachers = a->next;
        attacher_end(j, a);
        attacher_free(a);
    }
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

static int append(struct job_io *io,
                  struct io_job *j,
                  uint32_t rank,
                  int stream,
                  bool eof,
                  const void *data,
                  size_t len)
{
    struct record *r;
    uint64_t cost = sizeof(*r) + len;

    if (!eof && j->kept + cost > io->cap) {
        j->dropped += len;
        return 0;
    }
    if (!(r = malloc(sizeof(*r) + len)))
        return -1;
    memset(r, 0, sizeof(*r));
    r->rank = rank;
    r->stream = (uint8_t)stream;
    r->eof = eof;
    r->len = len;
    if (len)
        memcpy(r->data, data, len);
    if (j->tail)
        j->tail->next = r;
    else
        j->head = r;
    j->tail = r;
    j->kept += cost;
    for (struct attacher *a = j->attachers; a; a = a->next)
        attacher_feed(j, a);
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
    if ((msg->payload_len > 0 && append(io, j, (uint32_t)rank, s, false,
                                        msg->payload, msg->payload_len) < 0) ||
        (eof && (idset_set(j->eof[s], (uint32_t)rank) < 0 ||
                 append(io, j, (uint32_t)rank, s, true, NULL, 0) < 0))) {
        broker_respond_error(req, ENOMEM, "job %" PRIu64 ": out of memory",
                             j->id);
        return;
    }
    broker_respond(req, json_object(), NULL, 0, 0);
}

static void attach_req(broker_req_t *req, void *ctx)
{
    struct job_io *io = ctx;
    struct io_job *j;
    struct attacher *a;
    void **v = NULL;
    size_t n = 0;

    if (broker_req_is_cancel(req)) {
        if (!io->active || keymap_values(io->jobs, &v, &n) < 0)
            return;
        for (size_t i = 0; i < n; i++) {
            j = v[i];
            for (struct attacher **pp = &j->attachers; *pp; pp = &(*pp)->next) {
                if (broker_req_same((*pp)->req, req)) {
                    a = *pp;
                    *pp = a->next;
                    broker_respond_error(a->req, ENODATA, NULL);
                    attacher_free(a);
                    free(v);
                    return;
                }
            }
        }
        free(v);
        return;
    }
    if (!(j = req_job(io, req, NULL)))
        return;
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
    if (j->inactive) {
        attacher_end(j, a);
        attacher_free(a);
        return;
    }
    attacher_feed(j, a);
    a->next = j->attachers;
    j->attachers = a;
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
        while (*pp) {
            struct attacher *a = *pp;
            if (broker_req_origin(a->req) == origin) {
                *pp = a->next;
                attacher_free(a);
            } else
                pp = &a->next;
        }
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
