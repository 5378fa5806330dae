/* job_manager.c - the "job" service at rank 0: job manager and FCFS
 * scheduler (docs/jobs-protocol.md).
 *
 * Every job is a struct job in one table (by id, and a list in submit
 * order).  Its state only changes through job_event(), which appends the
 * event to the job's eventlog after jobstate_next() accepted it, so the
 * state is always what replaying the log gives.  A job's life:
 *  1. job.submit: decode the jobspec, refuse what can never fit, assign
 *     the next id (a counter from 1: ids are unique for the life of the
 *     instance and increase in submit order), events "submit" and
 *     "validate" (SCHED), queue it (sched.h).
 *  2. A scheduler pass (deferred to the loop, after any change) allocates
 *     from the head of the queue: event "alloc" with R, then one
 *     streaming job-exec.start per allocated broker with its JOBSLICE.
 *     Each broker first reports the job's tmpdir on its node ("tmpdir");
 *     once every one has, job-exec.go lets their shells fork the tasks,
 *     so a node that cannot make its tmpdir fails the job before any task
 *     exists (job.tmpdir answers the paths from then on).
 *  3. "start" once every broker reported "started" (with a startup
 *     barrier, jobspec shell option "stop": "barrier-held" once every
 *     shell reported "held", "barrier-release" on job.release, which is
 *     relayed as job-exec.release; a PMI "abort" from a shell is a fatal
 *     exception whose exit code is the job's status); task exits are
 *     collected; a start failure, a lost broker or a cancel is a fatal
 *     exception, after which every broker is told to kill the job
 *     (SIGTERM, SIGKILL after the grace period, and after a further
 *     JOB_ABANDON_MS a broker that still did not end its stream is given
 *     up on, so a job always ends).
 *  4. Once every broker's stream ended: "finish" (if any task exited),
 *     "release" (final), the cores go back to the pool, "clean":
 *     INACTIVE.  Waiters and eventlog followers are answered.
 *  5. INACTIVE jobs stay for job.info/job.wait/attach after the fact; the
 *     oldest are purged beyond JOB_INACTIVE_MAX.
 *
 * Resources: at startup rank 0 asks broker.info of every rank for its
 * cores (retrying ranks that are not up yet); submits wait until every
 * rank answered or is lost.  Lost ranks are set down in the pool.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "src/common/errprintf.h"
#include "src/common/eventlog.h"
#include "src/common/idset.h"
#include "src/common/jobspec.h"
#include "src/common/jobstate.h"
#include "src/common/log.h"
#include "src/common/rpool.h"
#include "job.h"
#include "keymap.h"
#include "sched.h"
#include "service.h"

/* A job's eventlog: R is compact (rpool groups ranks) and exception notes
 * are truncated, so this is far more than any job needs. */
#define JOB_EVENTLOG_MAX (4u << 20)
/* INACTIVE jobs kept for queries: bounded memory in a long-lived
 * instance, plenty for any tool looking at recent jobs. */
#define JOB_INACTIVE_MAX 10000
/* Exceptions recorded per job beyond the first fatal one: a flapping
 * broker cannot grow a log without bound. */
#define JOB_EXCEPTIONS_MAX 16
#define JOB_NOTE_MAX 512
/* Resource discovery: retry ranks not up yet, give up after a minute. */
#define JOB_DISCOVER_RETRY_MS 200
#define JOB_DISCOVER_TIMEOUT_MS 60000
#define JOB_LOST_CHECK_MS 1000
/* After SIGKILL, how long a broker may take to end its job-exec stream
 * before we stop waiting for it. */
#define JOB_ABANDON_MS 10000
/* Submits held while resources are discovered. */
#define JOB_HELD_SUBMITS_MAX 4096

struct job;

/* One allocated broker of a job. */
struct job_node {
    struct job *job;
    uint32_t rank;
    uint32_t first_task;
    uint32_t ntasks;
    broker_rpc_t *rpc; /* job-exec.start */
    char *tmpdir;      /* its "tmpdir" report, until it ended */
    bool started;
    bool held; /* its shell reported "held" */
    bool ended;
};

struct job_task {
    int64_t pid;   /* 0 until started */
    int status;    /* -1 until it exited */
    uint32_t node; /* index in job->nodes */
};

/* A request held by a job: a job.wait, or a job.eventlog follower. */
struct held {
    broker_req_t *req;
    size_t next; /* followers: next entry to send */
    struct held *next_held;
};

struct job {
    struct job_manager *jm;
    uint64_t id;
    uint32_t userid;
    jobspec_t *js;
    json_t *spec; /* canonical jobspec */
    bool has_stdin;
    eventlog_t *log;
    int state;
    unsigned nexceptions;
    bool fatal;
    rpool_alloc_t *alloc;
    struct job_node *nodes;
    uint32_t nnodes;
    struct job_task *tasks;
    uint32_t ntasks;
    uint32_t nstarted;
    uint32_t nended;
    uint32_t ntmpdirs; /* nodes that reported their tmpdir */
    int kill_stage;    /* 0 none, 1 SIGTERM sent, 2 SIGKILL sent, 3 gave up */
    uv_timer_t *kill_timer;
    uv_timer_t *limit_timer; /* jobspec duration, from alloc */
    struct held *waiters;
    struct held *followers;
    struct job *prev, *next;
    /* startup barrier (jobspec shell option "stop"): NULL if none */
    const char *stop;
    uint32_t nheld; /* brokers whose shell reported "held" */
    uint32_t held_tasks;
    bool released; /* job.release was accepted */
    bool aborted;  /* a task called PMI abort: its status is the job's */
    int abort_status;
};

/* A request fanned out to brokers (job.kill, job-io.stdin): answered once
 * every broker answered.  'req' NULL: internal, errors are logged. */
struct fanout {
    struct job_manager *jm;
    broker_req_t *req;
    uint64_t id;
    unsigned pending;
    int errnum;
    char errstr[256];
    broker_rpc_t **rpcs;
    unsigned nrpcs;
    struct fanout *prev, *next;
};

struct job_manager {
    broker_t *b;
    bool active; /* rank 0 */
    rpool_t *pool;
    sched_t *sched;
    keymap_t *jobs;
    struct job *head, *tail;
    size_t njobs;
    size_t ninactive;
    uint64_t next_id;
    /* resource discovery */
    char **hostnames;
    bool *known;
    broker_rpc_t **disc;
    uint32_t nknown;
    bool discovered;
    uint64_t t_discover;
    struct held *held_submits; /* in arrival order */
    size_t nheld;
    uv_timer_t timer; /* discovery retries, then lost-rank checks */
    uv_timer_t sched_timer;
    int closing; /* timers whose close callback is still to come */
    struct fanout *fanouts;
    bool shutdown;
};

static void job_fatal(struct job *job, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void job_signal_all(struct job *job, int signum);
static void schedule_soon(struct job_manager *jm);
static void job_limit(struct job *job);
static void process_held_submits(struct job_manager *jm);

static double now_wall(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct job *job_lookup(struct job_manager *jm, uint64_t id)
{
    return keymap_get(jm->jobs, id, 0);
}

static struct job_io *job_io(struct job_manager *jm)
{
    return broker_service_ctx(jm->b, "job-io");
}

/* --- held requests --------------------------------------------------- */

static int held_add(struct held **list, broker_req_t *req, size_t next)
{
    struct held *h = calloc(1, sizeof(*h));
    struct held **pp = list;

    if (!h)
        return -1;
    h->req = broker_req_incref(req);
    h->next = next;
    while (*pp)
        pp = &(*pp)->next_held;
    *pp = h;
    return 0;
}

static void held_free_all(struct held **list)
{
    while (*list) {
        struct held *h = *list;
        *list = h->next_held;
        broker_req_decref(h->req);
        free(h);
    }
}

/* Remove and return the held request matching 'origin' (and, if 'same'
 * is not NULL, the same request); NULL if none. */
static struct held *held_take(struct held **list,
                              uint64_t origin,
                              const broker_req_t *same)
{
    for (struct held **pp = list; *pp; pp = &(*pp)->next_held) {
        struct held *h = *pp;
        if (same ? broker_req_same(h->req, same)
                 : broker_req_origin(h->req) == origin) {
            *pp = h->next_held;
            return h;
        }
    }
    return NULL;
}

/* --- JSON views of a job ----------------------------------------------- */

static json_t *exception_json(const struct jobstate_info *info)
{
    if (!info->fatal)
        return json_null();
    return json_pack("{s:s s:i s:s?}", "type", info->exception_type, "severity",
                     0, "note", info->exception_note);
}

static bool job_info(const struct job *job, struct jobstate_info *info)
{
    eddy_error_t err;

    return jobstate_result(job->log, info, &err) == 0;
}

static json_t *status_json(const struct jobstate_info *info)
{
    return info->finished ? json_integer(info->status) : json_null();
}

static json_t *job_summary(struct job_manager *jm, const struct job *job)
{
    struct jobstate_info info;
    const char *name = jobspec_job_name(job->js);
    const char *reason = "";

    if (!job_info(job, &info))
        memset(&info, 0, sizeof(info));
    if (job->state == JOBSTATE_SCHED)
        reason = jm->discovered ? sched_reason(jm->sched, job->id)
                                : "waiting for resources to be discovered";
    return json_pack(
        "{s:I s:s s:s s:I s:I s:f s:o s:s}", "id", (json_int_t)job->id, "state",
        jobstate_str(job->state), "name",
        name ? name : jobspec_group_argv(job->js, 0)[0], "ntasks",
        (json_int_t)jobspec_ntasks(job->js), "nnodes",
        (json_int_t)(job->alloc ? job->nnodes : jobspec_nnodes(job->js)),
        "t_submit", info.t_submit, "status", status_json(&info), "reason",
        reason);
}

/* null without a startup barrier, else where it is, how many tasks
 * reported held and whether it was released. */
static json_t *barrier_json(const struct job *job)
{
    if (!job->stop)
        return json_null();
    return json_pack("{s:s s:I s:b}", "where", job->stop, "held",
                     (json_int_t)job->held_tasks, "released", job->released);
}

static json_t *job_info_json(struct job_manager *jm, const struct job *job)
{
    struct jobstate_info info;
    json_t *o = NULL, *nodes = NULL, *tasks = NULL;

    if (!job_info(job, &info) || !(o = job_summary(jm, job)) ||
        !(nodes = json_array()) || !(tasks = json_array()))
        goto nomem;
    for (uint32_t i = 0; i < job->nnodes; i++) {
        const struct job_node *n = &job->nodes[i];
        const char *host = jm->hostnames[n->rank];
        if (json_array_append_new(
                nodes, json_pack("{s:I s:s}", "rank", (json_int_t)n->rank,
                                 "hostname", host ? host : "")) < 0)
            goto nomem;
    }
    for (uint32_t t = 0; job->nodes && t < job->ntasks; t++) {
        const struct job_task *tk = &job->tasks[t];
        const struct job_node *n = &job->nodes[tk->node];
        const char *host = jm->hostnames[n->rank];
        int g = jobspec_task_group(job->js, t);
        json_t *e =
            json_pack("{s:I s:I s:s s:I s:i s:s s:o}", "rank", (json_int_t)t,
                      "node", (json_int_t)n->rank, "hostname", host ? host : "",
                      "pid", (json_int_t)tk->pid, "appnum", g, "executable",
                      jobspec_group_argv(job->js, (uint32_t)g)[0], "status",
                      tk->status >= 0 ? json_integer(tk->status) : json_null());
        if (!e || json_array_append_new(tasks, e) < 0)
            goto nomem;
    }
    if (json_object_set(o, "jobspec", job->spec) < 0 ||
        json_object_set_new(o, "t_alloc", json_real(info.t_alloc)) < 0 ||
        json_object_set_new(o, "t_start", json_real(info.t_start)) < 0 ||
        json_object_set_new(o, "t_finish", json_real(info.t_finish)) < 0 ||
        json_object_set_new(o, "t_clean", json_real(info.t_clean)) < 0 ||
        json_object_set_new(o, "exception", exception_json(&info)) < 0 ||
        json_object_set_new(o, "barrier", barrier_json(job)) < 0 ||
        json_object_set_new(o, "nodes", nodes) < 0)
        goto nomem;
    nodes = NULL;
    if (json_object_set_new(o, "tasks", tasks) < 0) {
        tasks = NULL;
        goto nomem;
    }
    return o;
nomem:
    json_decref(tasks);
    json_decref(nodes);
    json_decref(o);
    return NULL;
}

static json_t *wait_json(const struct job *job)
{
    struct jobstate_info info;

    if (!job_info(job, &info))
        return NULL;
    return json_pack("{s:I s:o s:o}", "id", (json_int_t)job->id, "status",
                     status_json(&info), "exception", exception_json(&info));
}

/* --- the job table ----------------------------------------------------- */

static void job_destroy(struct job *job)
{
    if (!job)
        return;
    held_free_all(&job->waiters);
    held_free_all(&job->followers);
    for (uint32_t i = 0; i < job->nnodes; i++) {
        broker_rpc_destroy(job->nodes[i].rpc);
        free(job->nodes[i].tmpdir);
    }
    if (job->kill_timer)
        uv_close((uv_handle_t *)job->kill_timer, (uv_close_cb)free);
    if (job->limit_timer)
        uv_close((uv_handle_t *)job->limit_timer, (uv_close_cb)free);
    if (job->alloc) {
        rpool_free(job->jm->pool, job->alloc); /* EINVAL if not live */
        rpool_alloc_destroy(job->alloc);
    }
    free(job->nodes);
    free(job->tasks);
    eventlog_destroy(job->log);
    json_decref(job->spec);
    jobspec_destroy(job->js);
    free(job);
}

static void job_unlink(struct job_manager *jm, struct job *job)
{
    if (job->prev)
        job->prev->next = job->next;
    else
        jm->head = job->next;
    if (job->next)
        job->next->prev = job->prev;
    else
        jm->tail = job->prev;
    keymap_remove(jm->jobs, job->id, 0);
    jm->njobs--;
    if (job->state == JOBSTATE_INACTIVE)
        jm->ninactive--;
}

/* Forget the oldest INACTIVE jobs beyond JOB_INACTIVE_MAX. */
static void purge_inactive(struct job_manager *jm)
{
    struct job *job = jm->head;

    while (job && jm->ninactive > JOB_INACTIVE_MAX) {
        struct job *next = job->next;
        if (job->state == JOBSTATE_INACTIVE) {
            job_unlink(jm, job);
            if (job_io(jm))
                job_io_job_remove(job_io(jm), job->id);
            job_destroy(job);
        }
        job = next;
    }
}

/* --- events ------------------------------------------------------------ */

static json_t *entry_json(const eventlog_t *log, size_t i)
{
    double t;
    const char *name;
    const json_t *ctx;

    if (eventlog_entry(log, i, &t, &name, &ctx) < 0)
        return NULL;
    return json_pack("{s:f s:s s:o}", "timestamp", t, "name", name, "context",
                     ctx ? json_incref((json_t *)ctx) : json_object());
}

/* Send a follower what it has not seen; end its stream after "clean". */
static void follower_feed(struct job *job, struct held *h)
{
    size_t n = eventlog_count(job->log);
    json_t *o;

    for (; h->next < n; h->next++) {
        if (!(o = entry_json(job->log, h->next)))
            break;
        broker_respond(h->req, o, NULL, 0, 0);
    }
}

static void job_inactive(struct job *job)
{
    struct job_manager *jm = job->jm;
    struct held *h;

    while ((h = job->waiters)) {
        job->waiters = h->next_held;
        broker_respond(h->req, wait_json(job), NULL, 0, 0);
        broker_req_decref(h->req);
        free(h);
    }
    while ((h = job->followers)) {
        job->followers = h->next_held;
        follower_feed(job, h);
        broker_respond(h->req, NULL, NULL, 0, MSG_FLAG_EOS);
        broker_req_decref(h->req);
        free(h);
    }
    if (job_io(jm))
        job_io_job_inactive(job_io(jm), job->id);
    jm->ninactive++;
    purge_inactive(jm);
}

/* Append event 'name' (context stolen, may be NULL) if it is valid in
 * the job's state, and move the job to the state it leads to.  The job
 * may be purged on the way to INACTIVE: callers touch it no more after
 * "clean". */
static int job_event(struct job *job, const char *name, json_t *context)
{
    struct job_manager *jm = job->jm;
    eddy_error_t err = {{0}};
    int next;

    if (jobstate_next(job->state, name, context, &next, &err) < 0) {
        broker_log(jm->b, LOG_LEVEL_ERR, "job %" PRIu64 ": event %s: %s",
                   job->id, name, err.text);
        json_decref(context);
        return -1;
    }
    if (eventlog_append(job->log, now_wall(), name, context) < 0) {
        broker_log(jm->b, LOG_LEVEL_ERR,
                   "job %" PRIu64 ": cannot log event %s: %s", job->id, name,
                   strerror(errno));
        json_decref(context);
        return -1;
    }
    json_decref(context);
    job->state = next;
    for (struct held *h = job->followers; h; h = h->next_held)
        follower_feed(job, h);
    if (next == JOBSTATE_INACTIVE)
        job_inactive(job);
    return 0;
}

/* --- ending a job ------------------------------------------------------ */

/* Every broker's stream ended (or the job never ran): finish, release,
 * clean.  The job may be gone afterwards. */
static void job_end(struct job *job)
{
    struct job_manager *jm = job->jm;
    bool any = false;
    int status = 0;
    char *ranks;

    if (job->kill_timer)
        uv_timer_stop(job->kill_timer);
    if (job->limit_timer)
        uv_timer_stop(job->limit_timer);
    /* Every stream ended: the rpcs are done (destroying the one whose
     * callback runs now is safe). */
    for (uint32_t i = 0; i < job->nnodes; i++) {
        broker_rpc_destroy(job->nodes[i].rpc);
        job->nodes[i].rpc = NULL;
    }
    for (uint32_t t = 0; t < job->ntasks; t++) {
        if (job->tasks[t].status >= 0) {
            any = true;
            if (job->tasks[t].status > status)
                status = job->tasks[t].status;
        }
    }
    if (job->aborted) {
        any = true;
        status = job->abort_status;
    }
    if (job->state == JOBSTATE_RUN && !any)
        job_fatal(job, "exec", "no task of the job reported an exit");
    if (any)
        job_event(job, "finish", json_pack("{s:i}", "status", status));
    if (job->alloc) {
        ranks = idset_encode(rpool_alloc_ranks(job->alloc));
        job_event(
            job, "release",
            json_pack("{s:s s:b}", "ranks", ranks ? ranks : "", "final", 1));
        free(ranks);
        rpool_free(jm->pool, job->alloc);
        schedule_soon(jm);
    }
    job_event(job, "clean", NULL);
}

static void node_ended(struct job_node *n)
{
    struct job *job = n->job;

    if (n->ended)
        return;
    n->ended = true;
    job->nended++;
    free(n->tmpdir); /* removed there by now */
    n->tmpdir = NULL;
    for (uint32_t t = n->first_task; t < n->first_task + n->ntasks; t++) {
        if (job->tasks[t].status < 0 && !job->fatal) {
            job_fatal(job, "exec",
                      "rank %u: the shell ended before task %u reported an "
                      "exit",
                      n->rank, t);
            break;
        }
    }
    if (job->nended == job->nnodes)
        job_end(job);
}

/* --- killing ----------------------------------------------------------- */

static void fanout_destroy(struct fanout *f)
{
    struct job_manager *jm = f->jm;

    for (unsigned i = 0; i < f->nrpcs; i++)
        broker_rpc_destroy(f->rpcs[i]);
    if (f->prev)
        f->prev->next = f->next;
    else
        jm->fanouts = f->next;
    if (f->next)
        f->next->prev = f->prev;
    broker_req_decref(f->req);
    free(f->rpcs);
    free(f);
}

static void fanout_cb(broker_rpc_t *rpc, const msg_t *msg, void *arg)
{
    struct fanout *f = arg;

    if (msg->errnum && !f->errnum) {
        const char *s = msg_errstr(msg);
        f->errnum = (int)msg->errnum;
        snprintf(f->errstr, sizeof(f->errstr), "job %" PRIu64 ": rank %u: %s",
                 f->id, broker_rpc_rank(rpc),
                 s ? s : strerror((int)msg->errnum));
    }
    if (--f->pending > 0)
        return;
    if (f->req) {
        if (f->errnum)
            broker_respond_error(f->req, f->errnum, "%s", f->errstr);
        else
            broker_respond(f->req, json_object(), NULL, 0, 0);
    } else if (f->errnum)
        broker_log(f->jm->b, LOG_LEVEL_DEBUG, "%s: %s", broker_rpc_topic(rpc),
                   f->errstr);
    fanout_destroy(f); /* destroys 'rpc' too: safe from its callback */
}

static struct fanout *fanout_create(struct job_manager *jm,
                                    broker_req_t *req,
                                    uint64_t id,
                                    unsigned n)
{
    struct fanout *f = calloc(1, sizeof(*f));

    if (!f || !(f->rpcs = calloc(n ? n : 1, sizeof(f->rpcs[0])))) {
        free(f);
        return NULL;
    }
    f->jm = jm;
    f->req = broker_req_incref(req);
    f->id = id;
    f->next = jm->fanouts;
    if (f->next)
        f->next->prev = f;
    jm->fanouts = f;
    return f;
}

/* Send one request of a fanout; an rpc that cannot even be created counts
 * as an answered error. */
static void fanout_send(struct fanout *f,
                        const char *topic,
                        uint32_t rank,
                        json_t *body,
                        const void *data,
                        size_t len)
{
    broker_rpc_t *rpc;

    rpc = broker_rpc(f->jm->b, topic, rank, 0, body, data, len, fanout_cb, f);
    if (!rpc) {
        if (!f->errnum) {
            f->errnum = errno;
            snprintf(f->errstr, sizeof(f->errstr),
                     "job %" PRIu64 ": rank %u: %s: %s", f->id, rank, topic,
                     strerror(errno));
        }
        return;
    }
    f->rpcs[f->nrpcs++] = rpc;
    f->pending++;
}

/* After sending: answer at once if nothing is pending. */
static void fanout_sent(struct fanout *f)
{
    if (f->pending > 0)
        return;
    if (f->req) {
        if (f->errnum)
            broker_respond_error(f->req, f->errnum, "%s", f->errstr);
        else
            broker_respond(f->req, json_object(), NULL, 0, 0);
    }
    fanout_destroy(f);
}

/* Signal the tasks in 'tasks' (NULL: all) on the brokers still running
 * the job.  'req' (may be NULL) gets {} or the first error. */
static void job_signal(struct job *job,
                       int signum,
                       const idset_t *tasks,
                       broker_req_t *req)
{
    struct fanout *f;

    if (!(f = fanout_create(job->jm, req, job->id, job->nnodes))) {
        if (req)
            broker_respond_error(req, ENOMEM, "out of memory");
        return;
    }
    for (uint32_t i = 0; i < job->nnodes; i++) {
        struct job_node *n = &job->nodes[i];
        idset_t *mine = NULL;
        char *s = NULL;
        json_t *body;

        if (n->ended)
            continue;
        if (tasks) {
            if (!(mine = idset_create()))
                continue;
            for (uint32_t t = n->first_task; t < n->first_task + n->ntasks;
                 t++) {
                if (idset_test(tasks, t))
                    idset_set(mine, t);
            }
            if (idset_count(mine) == 0 || !(s = idset_encode(mine))) {
                idset_destroy(mine);
                continue;
            }
            idset_destroy(mine);
        }
        body =
            json_pack("{s:I s:i}", "id", (json_int_t)job->id, "signum", signum);
        if (body && s)
            json_object_set_new(body, "ranks", json_string(s));
        free(s);
        fanout_send(f, "job-exec.kill", n->rank, body, NULL, 0);
    }
    fanout_sent(f);
}

static void kill_timer_cb(uv_timer_t *t)
{
    struct job *job = t->data;
    struct job_manager *jm = job->jm;

    if (job->kill_stage == 1) {
        job->kill_stage = 2;
        job_signal(job, SIGKILL, NULL, NULL);
        uv_timer_start(t, kill_timer_cb, JOB_ABANDON_MS, 0);
        return;
    }
    /* SIGKILL was not enough: stop waiting for the brokers that never
     * ended their stream (lost messages, a stuck broker). */
    job->kill_stage = 3;
    for (uint32_t i = 0; i < job->nnodes; i++) {
        struct job_node *n = &job->nodes[i];
        if (!n->ended) {
            broker_log(jm->b, LOG_LEVEL_ERR,
                       "job %" PRIu64 ": rank %u did not end the job after "
                       "SIGKILL: giving up on it",
                       job->id, n->rank);
            broker_rpc_destroy(n->rpc);
            n->rpc = NULL;
            node_ended(n);
            if (job->nended == job->nnodes)
                return; /* the job may be gone */
        }
    }
}

/* SIGTERM now, SIGKILL after the grace period, then give up. */
static void job_signal_all(struct job *job, int signum)
{
    struct job_manager *jm = job->jm;

    if (job->kill_stage > 0 || job->nended == job->nnodes)
        return;
    if (!job->kill_timer) {
        if (!(job->kill_timer = calloc(1, sizeof(*job->kill_timer))))
            return;
        uv_timer_init(broker_loop(jm->b), job->kill_timer);
        job->kill_timer->data = job;
    }
    job->kill_stage = 1;
    job_signal(job, signum, NULL, NULL);
    uv_timer_start(job->kill_timer, kill_timer_cb,
                   (uint64_t)(broker_job_kill_grace(jm->b) * 1000), 0);
}

/* Record an exception of severity 0 and stop the job.  Only the first
 * fatal exception counts (jobstate_result()); later ones are logged only
 * up to JOB_EXCEPTIONS_MAX. */
static void job_fatal(struct job *job, const char *type, const char *fmt, ...)
{
    char note[JOB_NOTE_MAX];
    va_list ap;
    bool was_pending = (job->state & JOBSTATE_PENDING) != 0;

    va_start(ap, fmt);
    vsnprintf(note, sizeof(note), fmt, ap);
    va_end(ap);
    if (job->state == JOBSTATE_INACTIVE)
        return;
    if (job->nexceptions < JOB_EXCEPTIONS_MAX) {
        job->nexceptions++;
        job_event(job, "exception",
                  json_pack("{s:s s:i s:s}", "type", type, "severity", 0,
                            "note", note));
    }
    if (job->fatal)
        return;
    job->fatal = true;
    broker_log(job->jm->b, LOG_LEVEL_INFO, "job %" PRIu64 ": exception %s: %s",
               job->id, type, note);
    if (was_pending) {
        sched_remove(job->jm->sched, job->id);
        if (job->alloc) /* allocated, but it failed before running */
            rpool_free(job->jm->pool, job->alloc);
        schedule_soon(job->jm);
        job_event(job, "clean", NULL); /* job may be gone */
        return;
    }
    job_signal_all(job, SIGTERM);
}

/* --- starting a job ------------------------------------------------------ */

static void exec_started(struct job_node *n, json_t *body)
{
    struct job *job = n->job;
    json_t *tasks, *e;
    size_t i;
    json_int_t rank, pid;

    if (json_unpack(body, "{s:o}", "tasks", &tasks) == 0 &&
        json_is_array(tasks)) {
        json_array_foreach(tasks, i, e)
        {
            if (json_unpack(e, "[II]", &rank, &pid) == 0 &&
                rank >= n->first_task &&
                rank < (json_int_t)(n->first_task + n->ntasks))
                job->tasks[rank].pid = pid;
        }
    }
    if (n->started)
        return;
    n->started = true;
    if (++job->nstarted == job->nnodes && !job->fatal)
        job_event(job, "start", json_object());
}

static void exec_exit_one(struct job_node *n,
                          json_int_t rank,
                          json_int_t status)
{
    struct job *job = n->job;

    if (rank < n->first_task ||
        rank >= (json_int_t)(n->first_task + n->ntasks) || status < 0) {
        broker_log(job->jm->b, LOG_LEVEL_WARNING,
                   "job %" PRIu64 ": rank %u: malformed exit report", job->id,
                   n->rank);
        return;
    }
    job->tasks[rank].status = status > 255 + 128 ? 255 + 128 : (int)status;
}

/* {"rank", "status"} of one task, or {"tasks": [[rank, status], ...]}
 * ("exits": those one reap pass of the shell found). */
static void exec_exit(struct job_node *n, json_t *body)
{
    json_int_t rank = -1, status = -1;
    json_t *tasks = json_object_get(body, "tasks"), *pair;
    size_t i;

    if (!tasks) {
        (void)json_unpack(body, "{s:I s:I}", "rank", &rank, "status", &status);
        exec_exit_one(n, rank, status);
        return;
    }
    json_array_foreach(tasks, i, pair)
    {
        rank = status = -1;
        (void)json_unpack(pair, "[II]", &rank, &status);
        exec_exit_one(n, rank, status);
    }
}

static void exec_exception(struct job_node *n, json_t *body)
{
    struct job *job = n->job;
    json_int_t rank = -1, errnum = 0;
    const char *note = NULL;

    json_unpack(body, "{s?I s?I s?s}", "rank", &rank, "errnum", &errnum, "note",
                &note);
    /* job-exec's note already names the job, rank and error. */
    if (note && *note)
        job_fatal(job, "exec", "%s", note);
    else
        job_fatal(job, "exec", "task %lld on rank %u: %s", (long long)rank,
                  n->rank, errnum ? strerror((int)errnum) : "cannot start");
}

/* Every node has its tmpdir: let the shells fork the tasks.  An answer
 * can only be an error that the start stream reports too (the job ended
 * there), so answers are only logged. */
static void job_go(struct job *job)
{
    struct fanout *f;

    if (!(f = fanout_create(job->jm, NULL, job->id, job->nnodes))) {
        job_fatal(job, "exec", "cannot start the tasks: out of memory");
        return;
    }
    for (uint32_t i = 0; i < job->nnodes; i++) {
        if (job->nodes[i].ended)
            continue;
        fanout_send(f, "job-exec.go", job->nodes[i].rank,
                    json_pack("{s:I}", "id", (json_int_t)job->id), NULL, 0);
    }
    fanout_sent(f);
}

/* A broker made the job's tmpdir on its node (before spawning the shell,
 * which waits for job-exec.go). */
static void exec_tmpdir(struct job_node *n, json_t *body)
{
    struct job *job = n->job;
    const char *path = NULL;

    if (n->tmpdir)
        return;
    if (json_unpack(body, "{s:s}", "path", &path) < 0 || path[0] != '/') {
        job_fatal(job, "exec", "rank %u: malformed tmpdir report", n->rank);
        return;
    }
    if (!(n->tmpdir = strdup(path))) {
        job_fatal(job, "exec", "rank %u: tmpdir: out of memory", n->rank);
        return;
    }
    /* a job on one node does not wait for others: it went already */
    if (++job->ntmpdirs == job->nnodes && job->nnodes > 1 && !job->fatal)
        job_go(job);
}

/* A shell's tasks are all at the startup barrier; once every shell's
 * are, the job is held ("barrier-held"). */
static void exec_held(struct job_node *n, json_t *body)
{
    struct job *job = n->job;
    json_int_t count = 0;

    if (n->held || !job->stop)
        return;
    json_unpack(body, "{s?I}", "count", &count);
    n->held = true;
    job->held_tasks += count > 0 ? (uint32_t)count : 0;
    if (++job->nheld == job->nnodes && !job->fatal && !job->released)
        job_event(job, "barrier-held",
                  json_pack("{s:s s:I}", "where", job->stop, "count",
                            (json_int_t)job->held_tasks));
}

/* A task called PMI abort: the job ends with a fatal exception naming
 * the rank, and its status is that task's exit code.  "status" -1: the
 * task left PMI without finalize (the others would wait for it forever):
 * the job ends, its status being the tasks' own. */
static void exec_abort(struct job_node *n, json_t *body)
{
    struct job *job = n->job;
    json_int_t rank = -1, status = 1;
    const char *note = NULL;

    json_unpack(body, "{s?I s?I s?s}", "rank", &rank, "status", &status, "note",
                &note);
    if (job->fatal)
        return;
    if (status < 0) {
        job_fatal(job, "exec", "%s", note && *note ? note : "PMI lost");
        return;
    }
    job->aborted = true;
    job->abort_status = status < 0 ? 1 : status > 255 ? 255 : (int)status;
    job_fatal(job, "abort", "rank %lld called abort (exit code %d)%s%s",
              (long long)rank, job->abort_status, note && *note ? ": " : "",
              note ? note : "");
}

static void exec_cb(broker_rpc_t *rpc, const msg_t *msg, void *arg)
{
    struct job_node *n = arg;
    struct job *job = n->job;
    const char *type = NULL;

    if (msg->errnum) {
        const char *s = msg_errstr(msg);
        if (!job->fatal)
            job_fatal(job, "exec", "rank %u: %s", n->rank,
                      s ? s : strerror((int)msg->errnum));
        node_ended(n); /* the job may be gone */
        return;
    }
    if (msg->body && json_unpack(msg->body, "{s:s}", "type", &type) == 0) {
        if (!strcmp(type, "tmpdir"))
            exec_tmpdir(n, msg->body);
        else if (!strcmp(type, "started"))
            exec_started(n, msg->body);
        else if (!strcmp(type, "exit") || !strcmp(type, "exits"))
            exec_exit(n, msg->body);
        else if (!strcmp(type, "exception"))
            exec_exception(n, msg->body);
        else if (!strcmp(type, "held"))
            exec_held(n, msg->body);
        else if (!strcmp(type, "abort"))
            exec_abort(n, msg->body);
    }
    if (msg->flags & MSG_FLAG_EOS)
        node_ended(n); /* the job may be gone */
}

static json_t *jobslice_json(struct job *job,
                             uint32_t index,
                             const struct rpool_slice *sl)
{
    idset_t *tasks = idset_create();
    char *ts = NULL, *cs = NULL, *rs = NULL;
    json_t *o = NULL;

    if (!tasks)
        return NULL;
    for (uint32_t t = sl->first_task; t < sl->first_task + sl->ntasks; t++)
        idset_set(tasks, t);
    if ((ts = idset_encode(tasks)) && (cs = idset_encode(sl->cores)) &&
        (rs = idset_encode(rpool_alloc_ranks(job->alloc))))
        o = json_pack(
            "{s:I s:O s:I s:I s:I s:s s:s s:b s:s}", "id", (json_int_t)job->id,
            "jobspec", job->spec, "size", (json_int_t)job->ntasks, "nnodes",
            (json_int_t)job->nnodes, "node_index", (json_int_t)index, "tasks",
            ts, "cores", cs, "stdin", job->has_stdin, "ranks", rs);
    free(ts);
    free(cs);
    free(rs);
    idset_destroy(tasks);
    return o;
}

static void job_run(struct job *job, rpool_alloc_t *alloc)
{
    struct job_manager *jm = job->jm;
    size_t nslices = rpool_alloc_nslices(alloc);
    struct rpool_slice sl;
    json_t *R;

    job->alloc = alloc;
    if (!(R = rpool_alloc_encode(alloc)) ||
        !(job->nodes = calloc(nslices ? nslices : 1, sizeof(job->nodes[0])))) {
        json_decref(R);
        job_fatal(job, "alloc", "out of memory");
        return;
    }
    job->nnodes = (uint32_t)nslices;
    for (size_t i = 0; i < nslices; i++) {
        rpool_alloc_slice(alloc, i, &sl);
        job->nodes[i].job = job;
        job->nodes[i].rank = sl.rank;
        job->nodes[i].first_task = sl.first_task;
        job->nodes[i].ntasks = sl.ntasks;
        for (uint32_t t = sl.first_task;
             t < sl.first_task + sl.ntasks && t < job->ntasks; t++)
            job->tasks[t].node = (uint32_t)i;
    }
    if (job_event(job, "alloc", json_pack("{s:o}", "R", R)) < 0) {
        /* Still SCHED: job_fatal() gives the cores back and cleans. */
        job_fatal(job, "alloc", "cannot record the allocation");
        return;
    }
    job_limit(job);
    for (uint32_t i = 0; i < job->nnodes; i++) {
        struct job_node *n = &job->nodes[i];
        json_t *slice;

        rpool_alloc_slice(alloc, i, &sl);
        if (job->fatal || !(slice = jobslice_json(job, i, &sl)) ||
            !(n->rpc = broker_rpc(jm->b, "job-exec.start", n->rank,
                                  BROKER_RPC_STREAMING, slice, NULL, 0, exec_cb,
                                  n))) {
            /* Never sent: nothing to wait for on this broker. */
            if (!job->fatal)
                job_fatal(job, "exec", "rank %u: cannot send the job: %s",
                          n->rank, strerror(errno));
            n->ended = true;
            job->nended++;
        }
    }
    if (job->nended == job->nnodes)
        job_end(job);
}

static void limit_timer_cb(uv_timer_t *t)
{
    struct job *job = t->data;

    if (job->state == JOBSTATE_RUN && !job->fatal)
        job_fatal(job, "timeout", "job %" PRIu64 ": time limit of %g s reached",
                  job->id, jobspec_duration(job->js));
}

/* Arm the job's time limit (jobspec duration), counted from alloc. */
static void job_limit(struct job *job)
{
    double d = jobspec_duration(job->js);

    if (d <= 0 || job->limit_timer ||
        !(job->limit_timer = calloc(1, sizeof(*job->limit_timer))))
        return;
    uv_timer_init(broker_loop(job->jm->b), job->limit_timer);
    job->limit_timer->data = job;
    uv_timer_start(job->limit_timer, limit_timer_cb,
                   d > 1e9 ? (uint64_t)1e12 : (uint64_t)(d * 1000), 0);
}

static void sched_alloc_cb(uint64_t id,
                           rpool_alloc_t *alloc,
                           int errnum,
                           const char *errstr,
                           void *arg)
{
    struct job_manager *jm = arg;
    struct job *job = job_lookup(jm, id);

    if (!job || job->state != JOBSTATE_SCHED) {
        if (alloc) {
            rpool_free(jm->pool, alloc);
            rpool_alloc_destroy(alloc);
        }
        return;
    }
    if (!alloc) {
        job_fatal(job, "alloc", "%s",
                  errstr && *errstr ? errstr : strerror(errnum));
        return;
    }
    job_run(job, alloc);
}

/* Mark lost ranks down so that nothing new is placed there.  True if
 * any changed. */
static bool sync_lost(struct job_manager *jm)
{
    bool changed = false;

    for (uint32_t r = 0; r < broker_size(jm->b); r++) {
        if (rpool_rank_up(jm->pool, r) && broker_rank_lost(jm->b, r)) {
            broker_log(jm->b, LOG_LEVEL_INFO,
                       "rank %u is lost: no new jobs there", r);
            rpool_set_up(jm->pool, r, false);
            changed = true;
        }
    }
    return changed;
}

static void sched_timer_cb(uv_timer_t *t)
{
    struct job_manager *jm = t->data;

    if (!jm->discovered || jm->shutdown)
        return;
    sync_lost(jm);
    sched_run(jm->sched, sched_alloc_cb, jm);
}

static void schedule_soon(struct job_manager *jm)
{
    if (jm->discovered && !jm->shutdown)
        uv_timer_start(&jm->sched_timer, sched_timer_cb, 0, 0);
}

/* --- resource discovery ------------------------------------------------ */

static void discovered(struct job_manager *jm)
{
    uint64_t ncores = 0;

    jm->discovered = true;
    uv_timer_set_repeat(&jm->timer, JOB_LOST_CHECK_MS);
    for (uint32_t r = 0; r < broker_size(jm->b); r++)
        ncores += rpool_rank_cores(jm->pool, r);
    broker_log(jm->b, LOG_LEVEL_INFO,
               "job manager: %u ranks, %" PRIu64 " cores for jobs",
               broker_size(jm->b), ncores);
    process_held_submits(jm);
    schedule_soon(jm);
}

static void discover_cb(broker_rpc_t *rpc, const msg_t *msg, void *arg)
{
    struct job_manager *jm = arg;
    uint32_t r = broker_rpc_rank(rpc);
    json_int_t cores;
    const char *host;

    jm->disc[r] = NULL;
    broker_rpc_destroy(rpc);
    if (jm->known[r] || jm->discovered)
        return;
    if (msg->errnum) {
        if (!broker_rank_lost(jm->b, r))
            return; /* not up yet: the timer retries */
        rpool_set_up(jm->pool, r, false);
    } else if (json_unpack(msg->body, "{s:I s:s}", "cores", &cores, "hostname",
                           &host) < 0 ||
               cores < 0 || cores > RPOOL_CORES_MAX) {
        broker_log(jm->b, LOG_LEVEL_ERR,
                   "rank %u: malformed broker.info: rank not used for jobs", r);
        rpool_set_up(jm->pool, r, false);
    } else {
        rpool_set_cores(jm->pool, r, (uint32_t)cores);
        free(jm->hostnames[r]);
        jm->hostnames[r] = strdup(host);
    }
    jm->known[r] = true;
    if (++jm->nknown == broker_size(jm->b))
        discovered(jm);
}

static void timer_cb(uv_timer_t *t)
{
    struct job_manager *jm = t->data;
    uint32_t size = broker_size(jm->b);

    if (jm->shutdown)
        return;
    if (jm->discovered) {
        if (sync_lost(jm))
            schedule_soon(jm);
        return;
    }
    if (uv_now(broker_loop(jm->b)) - jm->t_discover > JOB_DISCOVER_TIMEOUT_MS) {
        for (uint32_t r = 0; r < size; r++) {
            if (!jm->known[r]) {
                broker_log(jm->b, LOG_LEVEL_ERR,
                           "rank %u did not say its cores: not used for jobs",
                           r);
                broker_rpc_destroy(jm->disc[r]);
                jm->disc[r] = NULL;
                rpool_set_up(jm->pool, r, false);
                jm->known[r] = true;
            }
        }
        jm->nknown = size;
        discovered(jm);
        return;
    }
    for (uint32_t r = 0; r < size; r++) {
        if (jm->known[r] || jm->disc[r])
            continue;
        jm->disc[r] = broker_rpc(jm->b, "broker.info", r, 0, NULL, NULL, 0,
                                 discover_cb, jm);
    }
}

/* --- handlers ---------------------------------------------------------- */

/* The startup barrier a jobspec asks for: "fork", "exec", "init", or
 * NULL for none.  -1 EINVAL if the "stop" shell option is not one. */
static int stop_mode(const jobspec_t *js, const char **stop, eddy_error_t *err)
{
    static const char *const modes[] = {"fork", "exec", "init"};
    json_t *o = json_object_get(jobspec_shell_options(js), "stop");
    const char *s = json_string_value(o);

    *stop = NULL;
    if (!o)
        return 0;
    for (size_t i = 0; s && i < sizeof(modes) / sizeof(modes[0]); i++) {
        if (!strcmp(s, modes[i])) {
            *stop = modes[i];
            return 0;
        }
    }
    errno = EINVAL;
    return errprintf(err, "attributes.system.shell.options.stop: must be"
                          " \"fork\", \"exec\" or \"init\"");
}

/* Decode {"id": ID} and find the job; respond with an error if none. */
static struct job *req_job(struct job_manager *jm, broker_req_t *req)
{
    const msg_t *msg = broker_req_msg(req);
    json_int_t id;
    struct job *job;

    if (!jm->active) {
        broker_respond_error(req, EINVAL,
                             "rank %u: the job service runs on rank 0",
                             broker_rank(jm->b));
        return NULL;
    }
    if (json_unpack(msg->body, "{s:I}", "id", &id) < 0 || id < 0) {
        broker_respond_error(req, EPROTO, "%s: expected {\"id\": job id, ...}",
                             msg->topic);
        return NULL;
    }
    if (!(job = job_lookup(jm, (uint64_t)id))) {
        broker_respond_error(req, ENOENT, "job %lld: no such job",
                             (long long)id);
        return NULL;
    }
    return job;
}

static bool check_active(struct job_manager *jm, broker_req_t *req)
{
    if (jm->active)
        return true;
    broker_respond_error(req, EINVAL, "rank %u: the job service runs on rank 0",
                         broker_rank(jm->b));
    return false;
}

static void request_from_jobspec(const jobspec_t *js, struct rpool_request *r)
{
    memset(r, 0, sizeof(*r));
    r->nnodes = jobspec_nnodes(js);
    r->ntasks = jobspec_ntasks(js);
    r->cores_per_task = jobspec_cores_per_slot(js);
    r->exclusive = jobspec_exclusive(js);
}

static void do_submit(struct job_manager *jm, broker_req_t *req)
{
    const msg_t *msg = broker_req_msg(req);
    json_t *spec = NULL;
    int has_stdin = 0;
    jobspec_t *js = NULL;
    struct rpool_request rr;
    eddy_error_t err = {{0}};
    struct job *job = NULL;
    uint64_t id = jm->next_id;
    const char *stop = NULL;
    int errnum;

    if (json_unpack(msg->body, "{s:o s?b}", "jobspec", &spec, "stdin",
                    &has_stdin) < 0) {
        errnum = EPROTO;
        snprintf(err.text, sizeof(err.text),
                 "job.submit: expected {\"jobspec\": object}");
        goto error;
    }
    if (!(js = jobspec_decode(spec, &err)) || stop_mode(js, &stop, &err) < 0) {
        errnum = errno;
        goto error;
    }
    request_from_jobspec(js, &rr);
    if (sched_enqueue(jm->sched, id, &rr, &err) < 0) {
        errnum = errno;
        goto error;
    }
    if (!(job = calloc(1, sizeof(*job))) ||
        !(job->log = eventlog_create(JOB_EVENTLOG_MAX)) ||
        !(job->spec = jobspec_encode(js)) ||
        !(job->tasks = calloc(jobspec_ntasks(js), sizeof(job->tasks[0]))) ||
        keymap_put(jm->jobs, id, 0, job) < 0) {
        sched_remove(jm->sched, id);
        errnum = ENOMEM;
        snprintf(err.text, sizeof(err.text), "out of memory");
        goto error;
    }
    jm->next_id++;
    job->jm = jm;
    job->id = id;
    job->userid = broker_req_userid(req);
    job->js = js;
    js = NULL;
    job->has_stdin = has_stdin;
    job->stop = stop;
    job->ntasks = jobspec_ntasks(job->js);
    for (uint32_t t = 0; t < job->ntasks; t++)
        job->tasks[t].status = -1;
    job->prev = jm->tail;
    if (jm->tail)
        jm->tail->next = job;
    else
        jm->head = job;
    jm->tail = job;
    jm->njobs++;
    if (job_io(jm))
        job_io_job_add(job_io(jm), id, job->ntasks);
    job_event(job, "submit",
              json_pack("{s:I s:I}", "userid", (json_int_t)job->userid,
                        "ntasks", (json_int_t)job->ntasks));
    job_event(job, "validate", NULL);
    broker_respond(req, json_pack("{s:I}", "id", (json_int_t)id), NULL, 0, 0);
    schedule_soon(jm);
    return;
error:
    if (job) {
        json_decref(job->spec);
        eventlog_destroy(job->log);
        free(job->tasks);
        free(job);
    }
    jobspec_destroy(js);
    broker_respond_error(req, errnum, "%s", err.text);
}

static void process_held_submits(struct job_manager *jm)
{
    struct held *h;

    while ((h = jm->held_submits)) {
        jm->held_submits = h->next_held;
        jm->nheld--;
        do_submit(jm, h->req);
        broker_req_decref(h->req);
        free(h);
    }
}

static void submit(broker_req_t *req, void *ctx)
{
    struct job_manager *jm = ctx;

    if (broker_req_is_cancel(req) || !check_active(jm, req))
        return;
    if (!jm->discovered) {
        /* Answer once we know what the instance offers. */
        if (jm->nheld >= JOB_HELD_SUBMITS_MAX ||
            held_add(&jm->held_submits, req, 0) < 0) {
            broker_respond_error(req, EAGAIN,
                                 "job.submit: the job manager is still "
                                 "discovering resources; try again");
            return;
        }
        jm->nheld++;
        return;
    }
    do_submit(jm, req);
}

static void list(broker_req_t *req, void *ctx)
{
    struct job_manager *jm = ctx;
    int all = 0;
    json_t *jobs;

    if (broker_req_is_cancel(req) || !check_active(jm, req))
        return;
    if (broker_req_msg(req)->body &&
        json_unpack(broker_req_msg(req)->body, "{s?b}", "all", &all) < 0) {
        broker_respond_error(req, EPROTO,
                             "job.list: expected {\"all\": boolean}");
        return;
    }
    if (!(jobs = json_array()))
        goto nomem;
    for (struct job *job = jm->head; job; job = job->next) {
        if (!all && job->state == JOBSTATE_INACTIVE)
            continue;
        if (json_array_append_new(jobs, job_summary(jm, job)) < 0)
            goto nomem;
    }
    broker_respond(req, json_pack("{s:o}", "jobs", jobs), NULL, 0, 0);
    return;
nomem:
    json_decref(jobs);
    broker_respond_error(req, ENOMEM, "out of memory");
}

static void info(broker_req_t *req, void *ctx)
{
    struct job_manager *jm = ctx;
    struct job *job;
    json_t *o;

    if (broker_req_is_cancel(req) || !(job = req_job(jm, req)))
        return;
    if (!(o = job_info_json(jm, job))) {
        broker_respond_error(req, ENOMEM, "job %" PRIu64 ": out of memory",
                             job->id);
        return;
    }
    broker_respond(req, o, NULL, 0, 0);
}

static void eventlog_req(broker_req_t *req, void *ctx)
{
    struct job_manager *jm = ctx;
    struct job *job;
    struct held h = {0};
    int follow = 0;

    if (broker_req_is_cancel(req)) {
        /* Find the follower among all jobs and end its stream. */
        for (job = jm->head; job; job = job->next) {
            struct held *f = held_take(&job->followers, 0, req);
            if (f) {
                broker_respond_error(f->req, ENODATA, NULL);
                broker_req_decref(f->req);
                free(f);
                return;
            }
        }
        return;
    }
    if (!(job = req_job(jm, req)))
        return;
    if (json_unpack(broker_req_msg(req)->body, "{s?b}", "follow", &follow) <
        0) {
        broker_respond_error(req, EPROTO,
                             "job.eventlog: 'follow' must be a "
                             "boolean");
        return;
    }
    if (!broker_req_is_streaming(req)) {
        broker_respond_error(req, EPROTO,
                             "job.eventlog must be a streaming request");
        return;
    }
    h.req = req;
    follower_feed(job, &h);
    if (!follow || job->state == JOBSTATE_INACTIVE) {
        broker_respond(req, NULL, NULL, 0, MSG_FLAG_EOS);
        return;
    }
    if (held_add(&job->followers, req, h.next) < 0)
        broker_respond_error(req, ENOMEM, "job %" PRIu64 ": out of memory",
                             job->id);
}

static void wait_req(broker_req_t *req, void *ctx)
{
    struct job_manager *jm = ctx;
    struct job *job;

    if (broker_req_is_cancel(req) || !(job = req_job(jm, req)))
        return;
    if (job->state == JOBSTATE_INACTIVE) {
        broker_respond(req, wait_json(job), NULL, 0, 0);
        return;
    }
    if (held_add(&job->waiters, req, 0) < 0)
        broker_respond_error(req, ENOMEM, "job %" PRIu64 ": out of memory",
                             job->id);
}

static void kill_req(broker_req_t *req, void *ctx)
{
    struct job_manager *jm = ctx;
    const msg_t *msg = broker_req_msg(req);
    struct job *job;
    int signum;
    const char *ranks = NULL;
    idset_t *tasks = NULL;
    eddy_error_t err = {{0}};

    if (broker_req_is_cancel(req) || !(job = req_job(jm, req)))
        return;
    if (json_unpack(msg->body, "{s:i s?s}", "signum", &signum, "ranks",
                    &ranks) < 0) {
        broker_respond_error(req, EPROTO,
                             "job %" PRIu64 ": job.kill: expected "
                             "{\"id\", \"signum\", \"ranks\"?: idset}",
                             job->id);
        return;
    }
    if (signum <= 0 || signum >= NSIG) {
        broker_respond_error(req, EINVAL,
                             "job %" PRIu64 ": %d is not a signal number",
                             job->id, signum);
        return;
    }
    if (ranks && strcmp(ranks, "all")) {
        if (!(tasks = idset_decode(ranks, &err))) {
            broker_respond_error(req, EINVAL, "job %" PRIu64 ": ranks: %s",
                                 job->id, err.text);
            return;
        }
        if (idset_count(tasks) == 0 || idset_last(tasks) >= job->ntasks) {
            broker_respond_error(req, EINVAL,
                                 "job %" PRIu64 ": ranks '%s': the job has "
                                 "tasks 0-%u",
                                 job->id, ranks, job->ntasks - 1);
            idset_destroy(tasks);
            return;
        }
    }
    if (!(job->state & JOBSTATE_RUNNING) || job->nended == job->nnodes) {
        broker_respond_error(req, EINVAL,
                             "job %" PRIu64 " is not running (state %s)",
                             job->id, jobstate_str(job->state));
        idset_destroy(tasks);
        return;
    }
    job_signal(job, signum, tasks, req);
    idset_destroy(tasks);
}

static void cancel_req(broker_req_t *req, void *ctx)
{
    struct job_manager *jm = ctx;
    struct job *job;
    const char *note = NULL;
    uint64_t id;

    if (broker_req_is_cancel(req) || !(job = req_job(jm, req)))
        return;
    if (json_unpack(broker_req_msg(req)->body, "{s?s}", "note", &note) < 0) {
        broker_respond_error(req, EPROTO,
                             "job.cancel: 'note' must be a string");
        return;
    }
    id = job->id;
    if (job->state == JOBSTATE_INACTIVE) {
        broker_respond_error(req, EINVAL,
                             "job %" PRIu64 " is not active "
                             "(state INACTIVE)",
                             id);
        return;
    }
    /* Respond first: the job may be gone once the exception is raised. */
    broker_respond(req, json_object(), NULL, 0, 0);
    if (job->fatal)
        return; /* already ending */
    if (!note || !*note)
        note = "cancelled by the user";
    job_fatal(job, "cancel", "%s", note);
}

/* job.release {"id"}: let a job held at its startup barrier go.  Only
 * a job submitted with a stop mode, allocated (so its brokers know it),
 * not ending and not released yet. */
static void release_req(broker_req_t *req, void *ctx)
{
    struct job_manager *jm = ctx;
    struct fanout *f;
    struct job *job;
    int untraced = 0;

    if (broker_req_is_cancel(req) || !(job = req_job(jm, req)))
        return;
    if (json_unpack(broker_req_msg(req)->body, "{s?b}", "untraced", &untraced) <
        0) {
        broker_respond_error(req, EPROTO,
                             "job.release: 'untraced' must be a boolean");
        return;
    }
    if (!job->stop || job->released) {
        broker_respond_error(req, EINVAL,
                             "job %" PRIu64 " is not held at a startup barrier"
                             "%s",
                             job->id,
                             !job->stop ? " (submitted without a stop mode)"
                                        : " (already released)");
        return;
    }
    if (job->state != JOBSTATE_RUN || job->fatal ||
        job->nended == job->nnodes) {
        broker_respond_error(req, EINVAL,
                             "job %" PRIu64 " is not held at a startup barrier"
                             " (state %s%s)",
                             job->id, jobstate_str(job->state),
                             job->fatal ? ", ending" : "");
        return;
    }
    if (!(f = fanout_create(jm, req, job->id, job->nnodes))) {
        broker_respond_error(req, ENOMEM, "out of memory");
        return;
    }
    job->released = true;
    job_event(job, "barrier-release", json_pack("{s:s}", "where", job->stop));
    for (uint32_t i = 0; i < job->nnodes; i++) {
        if (job->nodes[i].ended)
            continue;
        fanout_send(f, "job-exec.release", job->nodes[i].rank,
                    json_pack("{s:I s:b}", "id", (json_int_t)job->id,
                              "untraced", untraced),
                    NULL, 0);
    }
    fanout_sent(f);
}

/* job.tmpdir {"id"}: where the job's tmpdir is on each of its nodes, and
 * which node each task rank runs on (as ranges, so that the answer grows
 * with the nodes, not with the tasks): from the moment every node made
 * its tmpdir until the job begins to end. */
static void tmpdir_req(broker_req_t *req, void *ctx)
{
    struct job_manager *jm = ctx;
    struct job *job;
    json_t *o = NULL, *nodes = NULL, *tasks = NULL;

    if (broker_req_is_cancel(req) || !(job = req_job(jm, req)))
        return;
    if (job->state == JOBSTATE_INACTIVE || job->state == JOBSTATE_CLEANUP ||
        job->fatal || job->nended > 0) {
        broker_respond_error(req, ESRCH,
                             "job %" PRIu64 " has ended or is ending (state "
                             "%s): its tmpdirs are removed",
                             job->id, jobstate_str(job->state));
        return;
    }
    if (job->state != JOBSTATE_RUN || job->ntmpdirs < job->nnodes) {
        broker_respond_error(req, EAGAIN,
                             "job %" PRIu64 " has not started yet (state %s):"
                             " its tmpdirs do not exist yet",
                             job->id, jobstate_str(job->state));
        return;
    }
    if (!(nodes = json_array()) || !(tasks = json_array()))
        goto nomem;
    for (uint32_t i = 0; i < job->nnodes; i++) {
        const struct job_node *n = &job->nodes[i];
        const char *host = jm->hostnames[n->rank];
        if (json_array_append_new(nodes, json_pack("{s:I s:s s:s}", "rank",
                                                   (json_int_t)n->rank,
                                                   "hostname", host ? host : "",
                                                   "path", n->tmpdir)) < 0)
            goto nomem;
    }
    /* runs of consecutive task ranks on one node: [first, count, node] */
    for (uint32_t t = 0; t < job->ntasks;) {
        uint32_t node = job->tasks[t].node, first = t;
        while (t < job->ntasks && job->tasks[t].node == node)
            t++;
        if (json_array_append_new(tasks, json_pack("[I I I]", (json_int_t)first,
                                                   (json_int_t)(t - first),
                                                   (json_int_t)node)) < 0)
            goto nomem;
    }
    if (!(o = json_pack("{s:I s:I s:o s:o}", "id", (json_int_t)job->id,
                        "ntasks", (json_int_t)job->ntasks, "nodes", nodes,
                        "tasks", tasks)))
        goto nomem_packed;
    broker_respond(req, o, NULL, 0, 0);
    return;
nomem:
    json_decref(nodes);
    json_decref(tasks);
nomem_packed:
    broker_respond_error(req, ENOMEM, "job %" PRIu64 ": out of memory",
                         job->id);
}

/* --- the proctable (called by proctable.c) ------------------------------- */

int job_manager_job_ranks(struct job_manager *jm,
                          uint64_t id,
                          enum job_ranks_need need,
                          char **ranks,
                          uint32_t *ntasks,
                          eddy_error_t *err)
{
    struct job *job;
    idset_t *set = NULL;
    char *s = NULL;

    if (!jm->active || !(job = job_lookup(jm, id))) {
        errno = ENOENT;
        return errprintf(err, "job %" PRIu64 ": no such job", id);
    }
    if (job->state == JOBSTATE_INACTIVE || job->state == JOBSTATE_CLEANUP ||
        job->fatal) {
        errno = ESRCH;
        return errprintf(err,
                         "job %" PRIu64 " has ended or is ending (state %s)",
                         id, jobstate_str(job->state));
    }
    if (job->nended > 0) {
        errno = ESRCH;
        return errprintf(err,
                         "job %" PRIu64 " is ending: its tasks on %u of its "
                         "%u nodes have exited",
                         id, job->nended, job->nnodes);
    }
    if (job->state != JOBSTATE_RUN ||
        (need == JOB_RANKS_STARTED ? job->nstarted : job->ntmpdirs) <
            job->nnodes) {
        errno = EAGAIN;
        return errprintf(err,
                         need == JOB_RANKS_STARTED
                             ? "job %" PRIu64 ": its tasks have not all "
                               "started (state %s)"
                             : "job %" PRIu64 ": its tmpdirs do not all "
                               "exist yet (state %s)",
                         id, jobstate_str(job->state));
    }
    if (!(set = idset_create()))
        goto nomem;
    for (uint32_t i = 0; i < job->nnodes; i++)
        if (idset_set(set, job->nodes[i].rank) < 0)
            goto nomem;
    if (!(s = idset_encode(set)))
        goto nomem;
    idset_destroy(set);
    *ranks = s;
    *ntasks = job->ntasks;
    return 0;
nomem:
    idset_destroy(set);
    errno = ENOMEM;
    return errprintf(err, "job %" PRIu64 ": out of memory", id);
}

/* --- stdin (called by job_io.c) ---------------------------------------- */

void job_manager_stdin(struct job_manager *jm,
                       broker_req_t *req,
                       uint64_t id,
                       const char *ranks,
                       bool eof,
                       const void *data,
                       size_t len)
{
    struct job *job;
    idset_t *tasks = NULL;
    eddy_error_t err = {{0}};
    struct fanout *f;

    if (!(job = job_lookup(jm, id))) {
        broker_respond_error(req, ENOENT, "job %" PRIu64 ": no such job", id);
        return;
    }
    if (strcmp(ranks, "all")) {
        if (!(tasks = idset_decode(ranks, &err))) {
            broker_respond_error(req, EINVAL, "job %" PRIu64 ": ranks: %s", id,
                                 err.text);
            return;
        }
        if (idset_count(tasks) == 0 || idset_last(tasks) >= job->ntasks) {
            broker_respond_error(req, EINVAL,
                                 "job %" PRIu64 ": ranks '%s': the job has "
                                 "tasks 0-%u",
                                 id, ranks, job->ntasks - 1);
            goto done;
        }
    }
    if (job->state != JOBSTATE_RUN || job->nended == job->nnodes) {
        broker_respond_error(req, EINVAL,
                             "job %" PRIu64 " is not running (state %s)", id,
                             jobstate_str(job->state));
        goto done;
    }
    if (!job->has_stdin) {
        broker_respond_error(
            req, EINVAL, "job %" PRIu64 " was not submitted with stdin", id);
        goto done;
    }
    /* job-exec.stdin takes one task rank per request. */
    if (!(f = fanout_create(jm, req, id,
                            tasks ? (unsigned)idset_count(tasks)
                                  : job->ntasks))) {
        broker_respond_error(req, ENOMEM, "out of memory");
        goto done;
    }
    for (uint32_t t = 0; t < job->ntasks; t++) {
        struct job_node *n = &job->nodes[job->tasks[t].node];

        if ((tasks && !idset_test(tasks, t)) || n->ended)
            continue;
        fanout_send(f, "job-exec.stdin", n->rank,
                    json_pack("{s:I s:I s:b}", "id", (json_int_t)id, "rank",
                              (json_int_t)t, "eof", eof),
                    data, len);
    }
    fanout_sent(f);
done:
    idset_destroy(tasks);
}

/* --- service ------------------------------------------------------------- */

static void jm_disconnect(void *ctx, uint64_t origin)
{
    struct job_manager *jm = ctx;
    struct held *h;

    for (struct job *job = jm->head; job; job = job->next) {
        while ((h = held_take(&job->waiters, origin, NULL)) ||
               (h = held_take(&job->followers, origin, NULL))) {
            broker_req_decref(h->req);
            free(h);
        }
    }
    while ((h = held_take(&jm->held_submits, origin, NULL))) {
        jm->nheld--;
        broker_req_decref(h->req);
        free(h);
    }
}

static void jm_timer_closed(uv_handle_t *h)
{
    struct job_manager *jm = h->data;

    if (--jm->closing == 0)
        free(jm);
}

static void jm_destroy(void *ctx)
{
    struct job_manager *jm = ctx;

    if (!jm)
        return;
    while (jm->fanouts)
        fanout_destroy(jm->fanouts);
    while (jm->head) {
        struct job *job = jm->head;
        jm->head = job->next;
        job_destroy(job);
    }
    held_free_all(&jm->held_submits);
    for (uint32_t r = 0; jm->disc && r < broker_size(jm->b); r++)
        broker_rpc_destroy(jm->disc[r]);
    for (uint32_t r = 0; jm->hostnames && r < broker_size(jm->b); r++)
        free(jm->hostnames[r]);
    free(jm->hostnames);
    free(jm->known);
    free(jm->disc);
    sched_destroy(jm->sched);
    rpool_destroy(jm->pool);
    keymap_destroy(jm->jobs);
    if (jm->active) {
        /* libuv still holds the embedded timers until their close
         * callbacks run: free the struct from the last one. */
        jm->closing = 2;
        uv_close((uv_handle_t *)&jm->timer, jm_timer_closed);
        uv_close((uv_handle_t *)&jm->sched_timer, jm_timer_closed);
        return;
    }
    free(jm);
}

static void jm_shutdown(void *ctx)
{
    struct job_manager *jm = ctx;

    jm->shutdown = true;
    if (jm->active) {
        uv_timer_stop(&jm->timer);
        uv_timer_stop(&jm->sched_timer);
    }
}

static int jm_init(broker_t *b, void **ctx)
{
    struct job_manager *jm;
    uint32_t size = broker_size(b);

    if (!(jm = calloc(1, sizeof(*jm))))
        return -1;
    jm->b = b;
    jm->active = broker_rank(b) == 0;
    *ctx = jm;
    if (!jm->active)
        return 0;
    jm->next_id = 1;
    if (!(jm->jobs = keymap_create()) || !(jm->pool = rpool_create(size)) ||
        !(jm->sched = sched_create(jm->pool)) ||
        !(jm->hostnames = calloc(size, sizeof(char *))) ||
        !(jm->known = calloc(size, sizeof(bool))) ||
        !(jm->disc = calloc(size, sizeof(broker_rpc_t *)))) {
        jm->active = false;
        jm_destroy(jm);
        *ctx = NULL;
        errno = ENOMEM;
        return -1;
    }
    uv_timer_init(broker_loop(b), &jm->timer);
    uv_timer_init(broker_loop(b), &jm->sched_timer);
    jm->timer.data = jm->sched_timer.data = jm;
    jm->t_discover = uv_now(broker_loop(b));
    /* The first tick asks at once; later ticks retry, then watch for lost
     * ranks. */
    uv_timer_start(&jm->timer, timer_cb, 0, JOB_DISCOVER_RETRY_MS);
    return 0;
}

static const struct service_handler handlers[] = {
    {"job.submit", submit},     {"job.list", list},
    {"job.info", info},         {"job.eventlog", eventlog_req},
    {"job.wait", wait_req},     {"job.kill", kill_req},
    {"job.cancel", cancel_req}, {"job.release", release_req},
    {"job.tmpdir", tmpdir_req}, {NULL, NULL},
};

const struct service_def job_service = {
    .name = "job",
    .handlers = handlers,
    .init = jm_init,
    .disconnect = jm_disconnect,
    .shutdown = jm_shutdown,
    .destroy = jm_destroy,
};
