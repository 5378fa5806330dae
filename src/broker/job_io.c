/* job_io.c - the "job-io" service at rank 0: each job's output log
 * (docs/jobs-protocol.md).
 *
 * Shells send their tasks' output here (job-io.write); each job keeps its
 * records in arrival order, so the output of one task stream stays in
 * order and attachers see every record exactly once: job-io.attach
 * replays the log from the start, then follows it live until the job is
 * INACTIVE (job.h: the job manager says so).  The log and its attachers
 * are an outlog (outlog.h), the engine the tool service's logs share:
 * each attacher has a cursor into the record sequence and is sent records
 * while its credit window (job-io.credit) has room.
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
#include "outlog.h"
#include "service.h"

enum { STREAM_STDOUT = 0, STREAM_STDERR = 1 };

static const char *const stream_names[] = {"stdout", "stderr"};

struct io_job {
    uint64_t id;
    uint32_t ntasks;
    outlog_t *log;
    idset_t *eof[2]; /* task ranks whose stream reached EOF */
};

struct job_io {
    broker_t *b;
    bool active; /* rank 0 */
    keymap_t *jobs;
    uint64_t cap;
};

static void io_job_destroy(struct io_job *j)
{
    if (!j)
        return;
    outlog_destroy(j->log);
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
    if (!(j = calloc(1, sizeof(*j))) || !(j->log = outlog_create(io->cap)) ||
        !(j->eof[0] = idset_create()) || !(j->eof[1] = idset_create()) ||
        keymap_put(io->jobs, id, 0, j) < 0) {
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
    outlog_end(j->log);
}

void job_io_job_remove(struct job_io *io, uint64_t id)
{
    char text[64];
    struct io_job *j = io->active ? keymap_remove(io->jobs, id, 0) : NULL;

    if (!j)
        return;
    snprintf(text, sizeof(text), "job %" PRIu64 " was purged", j->id);
    outlog_fail(j->log, ENOENT, text);
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

/* The log freed a record beyond the cap: answer the job-io.write that
 * brought it (the shell's credit). */
static void write_release(void *arg)
{
    broker_req_t *write = arg;

    (void)broker_respond(write, json_object(), NULL, 0, 0);
    broker_req_decref(write);
}

/* Add a record at the end of the log.  Data beyond the cap is held for
 * the current attachers only, and keeps 'write' (if not NULL) to answer
 * once freed: then *held is set.  -1 with ENOMEM. */
static int append(struct io_job *j,
                  uint32_t rank,
                  int stream,
                  bool eof,
                  const void *data,
                  size_t len,
                  broker_req_t *write,
                  bool *held)
{
    json_t *o = json_pack("{s:I s:s}", "rank", (json_int_t)rank, "stream",
                          stream_names[stream]);
    int rc;

    if (o && eof && json_object_set_new(o, "eof", json_true()) < 0) {
        json_decref(o);
        o = NULL;
    }
    if (!o) {
        errno = ENOMEM;
        return -1;
    }
    if (write)
        broker_req_incref(write);
    rc = outlog_append(j->log, o, data, len, eof, write ? write_release : NULL,
                       write);
    if (rc == 1 && write)
        *held = true;
    else
        broker_req_decref(write);
    return rc < 0 ? -1 : 0;
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
         append(j, (uint32_t)rank, s, false, msg->payload, msg->payload_len,
                req, &held) < 0) ||
        (eof &&
         (idset_set(j->eof[s], (uint32_t)rank) < 0 ||
          append(j, (uint32_t)rank, s, true, NULL, 0, NULL, &held) < 0))) {
        /* a held record answers 'req' when freed: answer nothing here */
        if (!held)
            broker_respond_error(req, ENOMEM, "job %" PRIu64 ": out of memory",
                                 j->id);
        outlog_pump(j->log);
        return;
    }
    /* Answer now unless a record beyond the cap holds the answer back
     * (outlog_pump() may free it, and so answer, at once). */
    if (!held)
        broker_respond(req, json_object(), NULL, 0, 0);
    outlog_pump(j->log);
}

/* End the attach that 'req' (a cancel) cancels, whichever job it is of. */
static void attach_cancel(struct job_io *io, broker_req_t *req)
{
    void **v = NULL;
    size_t n = 0;

    if (!io->active || keymap_values(io->jobs, &v, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        struct io_job *j = v[i];
        if (outlog_cancel(j->log, req))
            break;
    }
    free(v);
}

static void attach_req(broker_req_t *req, void *ctx)
{
    struct job_io *io = ctx;
    const msg_t *msg;
    struct io_job *j;
    json_int_t key = 0;

    if (broker_req_is_cancel(req)) {
        attach_cancel(io, req);
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
    if (outlog_attach(j->log, req, (uint64_t)key) < 0)
        broker_respond_error(req, ENOMEM, "job %" PRIu64 ": out of memory",
                             j->id);
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
    broker_respond(req, json_object(), NULL, 0, 0);
    outlog_credit(j->log, origin, (uint64_t)key, (uint64_t)bytes);
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
        outlog_disconnect(j->log, origin);
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
