/* job.c - the job API of eddy/job.h: RPCs to the rank-0 job services
 * (docs/jobs-protocol.md), strict decoding of their answers, and attach.
 *
 * Most calls are one RPC whose future is handed to the caller as is; the
 * _get functions decode its current response.  An answer that does not
 * match the protocol fails with EPROTO, and the future's error string says
 * which field is wrong.
 *
 * eddy_job_attach() is different: the caller's future is not an RPC but a
 * future that this file completes itself (see struct attach), fed by an
 * inner streaming RPC whose continuation hands every output record to the
 * caller's callback.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "eddy/job.h"
#include "src/common/idset.h"
#include "lib.h"

/* IDs are JSON integers; jansson's are signed 64-bit. */
#define JOBID_MAX ((eddy_jobid_t)INT64_MAX)

/* Fail the current read of 'f' with EPROTO and say why. */
static int proto_error(eddy_future_t *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int proto_error(eddy_future_t *f, const char *fmt, ...)
{
    char why[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(f->errbuf, sizeof(f->errbuf), "malformed response to %s: %s",
             f->topic, why);
    errno = EPROTO;
    return -1;
}

/* Wait for 'f' and return the body of its current (successful) response
 * ({} if it has none).  -1 with errno as eddy_rpc_get(). */
static int get_body(eddy_future_t *f, json_t **body)
{
    const msg_t *msg;

    if (eddy_rpc_get(f, NULL) < 0)
        return -1;
    msg = f->q[f->qhead];
    if (!msg->body) {
        if (!f->empty && !(f->empty = json_object())) {
            errno = ENOMEM;
            return -1;
        }
        *body = f->empty;
    } else {
        *body = msg->body;
    }
    return 0;
}

/* ---- submit and wait ------------------------------------------------- */

/* Send job.submit; 'with_stdin' asks for tasks that read stdin from
 * job-io.stdin messages instead of /dev/null. */
static eddy_future_t *submit_obj(eddy_t *h, json_t *jobspec, bool with_stdin)
{
    eddy_future_t *f;
    int e;

    if (with_stdin)
        f = eddy_rpc_pack(h, "job.submit", 0, 0, "{s:O s:b}", "jobspec",
                          jobspec, "stdin", 1);
    else
        f = eddy_rpc_pack(h, "job.submit", 0, 0, "{s:O}", "jobspec", jobspec);
    e = errno;
    json_decref(jobspec);
    errno = e;
    return f;
}

eddy_future_t *eddy_job_submit(eddy_t *h, const eddy_jobspec_t *js)
{
    json_t *o;

    if (!h || !js) {
        errno = EINVAL;
        return NULL;
    }
    if (!(o = jobspec_api_encode(js, NULL)))
        return NULL;
    return submit_obj(h, o, jobspec_api_stdin(js));
}

eddy_future_t *eddy_job_submit_json(eddy_t *h, const char *jobspec)
{
    json_t *o;

    if (!h || !jobspec) {
        errno = EINVAL;
        return NULL;
    }
    /* The job manager validates the content and says what is wrong; only
     * what cannot be sent at all is refused here. */
    if (!(o = json_loads(jobspec, JSON_REJECT_DUPLICATES, NULL)) ||
        !json_is_object(o)) {
        json_decref(o);
        errno = EINVAL;
        return NULL;
    }
    return submit_obj(h, o, false);
}

/* A job ID from a JSON value. */
static int decode_id(const json_t *v, eddy_jobid_t *id)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *id = (eddy_jobid_t)json_integer_value(v);
    return 0;
}

int eddy_job_submit_get_id(eddy_future_t *f, eddy_jobid_t *id)
{
    json_t *body;
    eddy_jobid_t v;

    if (!f || !id) {
        errno = EINVAL;
        return -1;
    }
    if (get_body(f, &body) < 0)
        return -1;
    if (decode_id(json_object_get(body, "id"), &v) < 0)
        return proto_error(f, "id: expected an integer >= 0");
    *id = v;
    return 0;
}

/* RPC to rank 0 with body {"id": id}. */
static eddy_future_t *id_rpc(eddy_t *h, const char *topic, eddy_jobid_t id)
{
    if (!h || id > JOBID_MAX) {
        errno = EINVAL;
        return NULL;
    }
    return eddy_rpc_pack(h, topic, 0, 0, "{s:I}", "id", (json_int_t)id);
}

eddy_future_t *eddy_job_wait(eddy_t *h, eddy_jobid_t id)
{
    return id_rpc(h, "job.wait", id);
}

/* A task or job status: null (-1 here) or an int. */
static int decode_status(const json_t *v, bool *has, int *status)
{
    json_int_t i;

    if (json_is_null(v)) {
        *has = false;
        return 0;
    }
    if (!json_is_integer(v))
        return -1;
    i = json_integer_value(v);
    if (i < 0 || i > INT32_MAX)
        return -1;
    *has = true;
    *status = (int)i;
    return 0;
}

/* An exception: null, or an object with a "note" (a string, or null when
 * the exception has none: then its "type" stands in, so that a fatal
 * exception never reads as NULL).  '*note' is NULL for null. */
static int decode_exception(const json_t *v, const char **note)
{
    const json_t *n, *t;

    if (json_is_null(v)) {
        *note = NULL;
        return 0;
    }
    if (!json_is_object(v))
        return -1;
    n = json_object_get(v, "note");
    t = json_object_get(v, "type");
    if ((n && !json_is_null(n) && !json_is_string(n)) ||
        (t && !json_is_string(t)))
        return -1;
    if (json_is_string(n))
        *note = json_string_value(n);
    else
        *note = t ? json_string_value(t) : "";
    return 0;
}

int eddy_job_wait_get(eddy_future_t *f, int *status, const char **exception)
{
    json_t *body, *v;
    const char *note = NULL;
    bool has = false;
    int st = -1;

    if (!f || !status) {
        errno = EINVAL;
        return -1;
    }
    if (get_body(f, &body) < 0)
        return -1;
    if (!(v = json_object_get(body, "status")) ||
        decode_status(v, &has, &st) < 0)
        return proto_error(f, "status: expected null or an integer >= 0");
    /* "exception" is always sent; tolerate its absence (no exception). */
    if ((v = json_object_get(body, "exception")) &&
        decode_exception(v, &note) < 0)
        return proto_error(f, "exception: expected null or an object");
    *status = has ? st : -1;
    if (exception)
        *exception = note;
    return 0;
}

/* ---- information ----------------------------------------------------- */

enum { T_SUBMIT, T_ALLOC, T_START, T_FINISH, T_CLEAN, T_COUNT };
static const char *const time_names[T_COUNT] = {"submit", "alloc", "start",
                                                "finish", "clean"};

struct node {
    uint32_t rank;
    const char *hostname;
};

struct task {
    struct eddy_taskinfo info;
    bool present;
};

struct eddy_jobinfo {
    json_t *o;  /* the answer; every string below is borrowed from it */
    char *json; /* its text */
    eddy_jobid_t id;
    const char *state, *name, *reason, *exception;
    uint32_t ntasks, nnodes;
    bool has_status;
    int status;
    double t[T_COUNT];
    struct node *nodes;
    size_t nodes_count;
    struct task *tasks;        /* indexed by task rank; NULL if none reported */
    const char *barrier_where; /* NULL: no startup barrier */
    uint32_t barrier_held;
    bool barrier_released;
};

struct eddy_joblist {
    eddy_jobinfo_t *jobs;
    size_t count;
};

/* Why decoding failed, with the field path. */
struct why {
    char text[160];
};

static int whyf(struct why *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int whyf(struct why *w, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(w->text, sizeof(w->text), fmt, ap);
    va_end(ap);
    return -1;
}

static int get_u32(const json_t *o, const char *key, uint32_t *out)
{
    const json_t *v = json_object_get(o, key);

    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > UINT32_MAX)
        return -1;
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static int get_str(const json_t *o, const char *key, const char **out)
{
    const json_t *v = json_object_get(o, key);

    if (!json_is_string(v))
        return -1;
    *out = json_string_value(v);
    return 0;
}

static int get_time(const json_t *o, const char *key, double *out)
{
    const json_t *v = json_object_get(o, key);

    if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
        json_number_value(v) < 0)
        return -1;
    *out = json_number_value(v);
    return 0;
}

static bool valid_state(const char *s)
{
    static const char *const states[] = {"NEW", "SCHED", "RUN", "CLEANUP",
                                         "INACTIVE"};

    for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
        if (!strcmp(s, states[i]))
            return true;
    }
    return false;
}

static int decode_summary(eddy_jobinfo_t *info, const json_t *o, struct why *w)
{
    const json_t *v;

    if (!json_is_object(o))
        return whyf(w, "expected an object");
    if (decode_id(json_object_get(o, "id"), &info->id) < 0)
        return whyf(w, "id: expected an integer >= 0");
    if (get_str(o, "state", &info->state) < 0 || !valid_state(info->state))
        return whyf(w, "state: expected NEW, SCHED, RUN, CLEANUP or "
                       "INACTIVE");
    if (get_str(o, "name", &info->name) < 0)
        return whyf(w, "name: expected a string");
    if (get_u32(o, "ntasks", &info->ntasks) < 0)
        return whyf(w, "ntasks: expected an integer >= 0");
    if (get_u32(o, "nnodes", &info->nnodes) < 0)
        return whyf(w, "nnodes: expected an integer >= 0");
    if (get_time(o, "t_submit", &info->t[T_SUBMIT]) < 0)
        return whyf(w, "t_submit: expected a number >= 0");
    if (!(v = json_object_get(o, "status")) ||
        decode_status(v, &info->has_status, &info->status) < 0)
        return whyf(w, "status: expected null or an integer >= 0");
    if (get_str(o, "reason", &info->reason) < 0)
        return whyf(w, "reason: expected a string");
    /* Summaries carry no exception; accept one if a newer job manager
     * sends it. */
    if ((v = json_object_get(o, "exception")) &&
        decode_exception(v, &info->exception) < 0)
        return whyf(w, "exception: expected null or an object");
    return 0;
}

static int decode_nodes(eddy_jobinfo_t *info, const json_t *a, struct why *w)
{
    size_t i;
    json_t *n;

    if (!json_is_array(a))
        return whyf(w, "nodes: expected an array");
    if (json_array_size(a) == 0)
        return 0;
    if (!(info->nodes = calloc(json_array_size(a), sizeof(*info->nodes)))) {
        errno = ENOMEM;
        return whyf(w, "out of memory");
    }
    json_array_foreach(a, i, n)
    {
        struct node *nd = &info->nodes[i];

        if (!json_is_object(n) || get_u32(n, "rank", &nd->rank) < 0 ||
            get_str(n, "hostname", &nd->hostname) < 0)
            return whyf(w,
                        "nodes[%zu]: expected {\"rank\": integer, "
                        "\"hostname\": string}",
                        i);
    }
    info->nodes_count = json_array_size(a);
    return 0;
}

static int decode_task(struct eddy_taskinfo *t,
                       const json_t *o,
                       size_t i,
                       struct why *w)
{
    uint32_t pid, appnum;
    bool has = false;
    int st = 0;

    if (!json_is_object(o))
        return whyf(w, "tasks[%zu]: expected an object", i);
    if (get_u32(o, "node", &t->node) < 0)
        return whyf(w, "tasks[%zu].node: expected an integer >= 0", i);
    if (get_str(o, "hostname", &t->hostname) < 0)
        return whyf(w, "tasks[%zu].hostname: expected a string", i);
    if (get_u32(o, "pid", &pid) < 0 || pid > INT32_MAX)
        return whyf(w, "tasks[%zu].pid: expected an integer >= 0", i);
    if (get_u32(o, "appnum", &appnum) < 0 || appnum > INT32_MAX)
        return whyf(w, "tasks[%zu].appnum: expected an integer >= 0", i);
    if (get_str(o, "executable", &t->executable) < 0)
        return whyf(w, "tasks[%zu].executable: expected a string", i);
    if (decode_status(json_object_get(o, "status"), &has, &st) < 0)
        return whyf(w, "tasks[%zu].status: expected null or an integer >= 0",
                    i);
    t->pid = (pid_t)pid;
    t->appnum = (int)appnum;
    t->exited = has;
    t->status = has ? st : 0;
    return 0;
}

/* Tasks are reported all at once (once the job has its nodes) or not at
 * all: the table is indexed by rank, sized by what was actually received
 * so a bogus "ntasks" cannot make us allocate. */
static int decode_tasks(eddy_jobinfo_t *info, const json_t *a, struct why *w)
{
    size_t i, n;
    json_t *o;

    if (!json_is_array(a))
        return whyf(w, "tasks: expected an array");
    if ((n = json_array_size(a)) == 0)
        return 0;
    if (n != info->ntasks)
        return whyf(w, "tasks: %zu entries for %u tasks", n, info->ntasks);
    if (!(info->tasks = calloc(n, sizeof(*info->tasks)))) {
        errno = ENOMEM;
        return whyf(w, "out of memory");
    }
    json_array_foreach(a, i, o)
    {
        uint32_t rank;
        struct task *t;

        if (!json_is_object(o) || get_u32(o, "rank", &rank) < 0 || rank >= n)
            return whyf(w, "tasks[%zu].rank: expected an integer < %zu", i, n);
        t = &info->tasks[rank];
        if (t->present)
            return whyf(w, "tasks[%zu].rank: task %u listed twice", i, rank);
        if (decode_task(&t->info, o, i, w) < 0)
            return -1;
        t->info.rank = rank;
        t->present = true;
    }
    return 0;
}

/* "barrier": null (or absent, from a job manager without startup
 * barriers) or {"where", "held", "released"}. */
static int decode_barrier(eddy_jobinfo_t *info, const json_t *b, struct why *w)
{
    const json_t *v;

    if (!b || json_is_null(b))
        return 0;
    if (!json_is_object(b))
        return whyf(w, "barrier: expected null or an object");
    if (get_str(b, "where", &info->barrier_where) < 0 ||
        (strcmp(info->barrier_where, "fork") &&
         strcmp(info->barrier_where, "exec") &&
         strcmp(info->barrier_where, "init"))) {
        info->barrier_where = NULL;
        return whyf(w, "barrier.where: expected fork, exec or init");
    }
    if (get_u32(b, "held", &info->barrier_held) < 0)
        return whyf(w, "barrier.held: expected an integer >= 0");
    if (!json_is_boolean(v = json_object_get(b, "released")))
        return whyf(w, "barrier.released: expected a boolean");
    info->barrier_released = json_is_true(v);
    return 0;
}

static int decode_info(eddy_jobinfo_t *info, const json_t *o, struct why *w)
{
    static const char *const tkeys[T_COUNT] = {"t_submit", "t_alloc", "t_start",
                                               "t_finish", "t_clean"};

    if (decode_summary(info, o, w) < 0)
        return -1;
    if (!json_is_object(json_object_get(o, "jobspec")))
        return whyf(w, "jobspec: expected an object");
    for (int i = T_ALLOC; i < T_COUNT; i++) {
        if (get_time(o, tkeys[i], &info->t[i]) < 0)
            return whyf(w, "%s: expected a number >= 0", tkeys[i]);
    }
    if (decode_exception(json_object_get(o, "exception"), &info->exception) < 0)
        return whyf(w, "exception: expected null or an object");
    if (decode_nodes(info, json_object_get(o, "nodes"), w) < 0)
        return -1;
    if (decode_barrier(info, json_object_get(o, "barrier"), w) < 0)
        return -1;
    return decode_tasks(info, json_object_get(o, "tasks"), w);
}

static void jobinfo_release(eddy_jobinfo_t *info)
{
    free(info->tasks);
    free(info->nodes);
    free(info->json);
    json_decref(info->o);
}

/* Take a reference on 'o' and its text into 'info'. */
static int jobinfo_hold(eddy_jobinfo_t *info, json_t *o)
{
    info->o = json_incref(o);
    if (!(info->json = json_dumps(o, JSON_COMPACT))) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

eddy_future_t *eddy_job_info(eddy_t *h, eddy_jobid_t id)
{
    return id_rpc(h, "job.info", id);
}

eddy_jobinfo_t *eddy_job_info_get(eddy_future_t *f)
{
    eddy_jobinfo_t *info = NULL;
    json_t *body, *o = NULL;
    struct why w = {{0}};

    if (!f) {
        errno = EINVAL;
        return NULL;
    }
    if (get_body(f, &body) < 0)
        return NULL;
    /* A private copy: the snapshot outlives the future. */
    if (!(info = calloc(1, sizeof(*info))) || !(o = json_deep_copy(body)) ||
        jobinfo_hold(info, o) < 0) {
        errno = ENOMEM;
        goto error;
    }
    json_decref(o);
    o = NULL;
    if (decode_info(info, info->o, &w) < 0) {
        if (errno != ENOMEM)
            proto_error(f, "%s", w.text);
        goto error;
    }
    return info;
error:
    json_decref(o);
    eddy_jobinfo_destroy(info);
    return NULL;
}

void eddy_jobinfo_destroy(eddy_jobinfo_t *info)
{
    int saved_errno = errno;

    if (!info)
        return;
    jobinfo_release(info);
    free(info);
    errno = saved_errno;
}

eddy_jobid_t eddy_jobinfo_id(const eddy_jobinfo_t *info)
{
    return info ? info->id : 0;
}

const char *eddy_jobinfo_state(const eddy_jobinfo_t *info)
{
    return info ? info->state : NULL;
}

const char *eddy_jobinfo_name(const eddy_jobinfo_t *info)
{
    return info ? info->name : NULL;
}

const char *eddy_jobinfo_reason(const eddy_jobinfo_t *info)
{
    return info ? info->reason : NULL;
}

uint32_t eddy_jobinfo_ntasks(const eddy_jobinfo_t *info)
{
    return info ? info->ntasks : 0;
}

uint32_t eddy_jobinfo_nnodes(const eddy_jobinfo_t *info)
{
    return info ? info->nnodes : 0;
}

int eddy_jobinfo_status(const eddy_jobinfo_t *info, int *status)
{
    if (!info || !status) {
        errno = EINVAL;
        return -1;
    }
    if (!info->has_status) {
        errno = ENODATA;
        return -1;
    }
    *status = info->status;
    return 0;
}

const char *eddy_jobinfo_exception(const eddy_jobinfo_t *info)
{
    return info ? info->exception : NULL;
}

double eddy_jobinfo_time(const eddy_jobinfo_t *info, const char *event)
{
    if (!info || !event)
        return 0;
    for (int i = 0; i < T_COUNT; i++) {
        if (!strcmp(event, time_names[i]))
            return info->t[i];
    }
    return 0;
}

int eddy_jobinfo_node(const eddy_jobinfo_t *info,
                      uint32_t i,
                      uint32_t *rank,
                      const char **hostname)
{
    if (!info) {
        errno = EINVAL;
        return -1;
    }
    if (i >= info->nodes_count) {
        errno = ERANGE;
        return -1;
    }
    if (rank)
        *rank = info->nodes[i].rank;
    if (hostname)
        *hostname = info->nodes[i].hostname;
    return 0;
}

int eddy_jobinfo_task(const eddy_jobinfo_t *info,
                      uint32_t rank,
                      struct eddy_taskinfo *task)
{
    if (!info || !task) {
        errno = EINVAL;
        return -1;
    }
    if (!info->tasks || rank >= info->ntasks || !info->tasks[rank].present) {
        errno = ERANGE;
        return -1;
    }
    *task = info->tasks[rank].info;
    return 0;
}

int eddy_jobinfo_barrier(const eddy_jobinfo_t *info,
                         const char **where,
                         uint32_t *held,
                         bool *released)
{
    if (!info) {
        errno = EINVAL;
        return -1;
    }
    if (!info->barrier_where) {
        errno = ENODATA;
        return -1;
    }
    if (where)
        *where = info->barrier_where;
    if (held)
        *held = info->barrier_held;
    if (released)
        *released = info->barrier_released;
    return 0;
}

const char *eddy_jobinfo_json(const eddy_jobinfo_t *info)
{
    return info ? info->json : NULL;
}

/* ---- listing --------------------------------------------------------- */

eddy_future_t *eddy_job_list(eddy_t *h, int flags)
{
    if (!h || (flags & ~EDDY_JOB_LIST_ALL)) {
        errno = EINVAL;
        return NULL;
    }
    return eddy_rpc_pack(h, "job.list", 0, 0, "{s:b}", "all",
                         (flags & EDDY_JOB_LIST_ALL) ? 1 : 0);
}

eddy_joblist_t *eddy_job_list_get(eddy_future_t *f)
{
    eddy_joblist_t *l = NULL;
    json_t *body, *jobs, *o = NULL, *entry;
    struct why w = {{0}};
    size_t i;

    if (!f) {
        errno = EINVAL;
        return NULL;
    }
    if (get_body(f, &body) < 0)
        return NULL;
    if (!(jobs = json_object_get(body, "jobs")) || !json_is_array(jobs)) {
        proto_error(f, "jobs: expected an array");
        return NULL;
    }
    if (!(l = calloc(1, sizeof(*l))) || !(o = json_deep_copy(jobs)) ||
        (json_array_size(o) > 0 &&
         !(l->jobs = calloc(json_array_size(o), sizeof(*l->jobs))))) {
        errno = ENOMEM;
        goto error;
    }
    json_array_foreach(o, i, entry)
    {
        eddy_jobinfo_t *info = &l->jobs[i];

        l->count = i + 1; /* released on error from here on */
        if (jobinfo_hold(info, entry) < 0)
            goto error;
        if (decode_summary(info, entry, &w) < 0) {
            if (errno != ENOMEM)
                proto_error(f, "jobs[%zu]: %s", i, w.text);
            goto error;
        }
    }
    json_decref(o);
    return l;
error:
    json_decref(o);
    eddy_joblist_destroy(l);
    return NULL;
}

size_t eddy_joblist_count(const eddy_joblist_t *l)
{
    return l ? l->count : 0;
}

const eddy_jobinfo_t *eddy_joblist_at(const eddy_joblist_t *l, size_t i)
{
    if (!l) {
        errno = EINVAL;
        return NULL;
    }
    if (i >= l->count) {
        errno = ERANGE;
        return NULL;
    }
    return &l->jobs[i];
}

void eddy_joblist_destroy(eddy_joblist_t *l)
{
    int saved_errno = errno;

    if (!l)
        return;
    for (size_t i = 0; i < l->count; i++)
        jobinfo_release(&l->jobs[i]);
    free(l->jobs);
    free(l);
    errno = saved_errno;
}

/* ---- control --------------------------------------------------------- */

/* An idset of task ranks: refuse one the services would refuse anyway,
 * before anything is sent. */
static bool valid_ranks(const char *ranks)
{
    idset_t *s;

    if (!ranks)
        return true;
    if (!(s = idset_decode(ranks, NULL)))
        return false;
    idset_destroy(s);
    return true;
}

eddy_future_t *eddy_job_signal(eddy_t *h,
                               eddy_jobid_t id,
                               int signum,
                               const char *ranks)
{
    if (!h || id > JOBID_MAX || signum <= 0 || signum >= NSIG ||
        !valid_ranks(ranks)) {
        errno = EINVAL;
        return NULL;
    }
    if (ranks)
        return eddy_rpc_pack(h, "job.kill", 0, 0, "{s:I s:i s:s}", "id",
                             (json_int_t)id, "signum", signum, "ranks", ranks);
    return eddy_rpc_pack(h, "job.kill", 0, 0, "{s:I s:i}", "id", (json_int_t)id,
                         "signum", signum);
}

eddy_future_t *eddy_job_cancel(eddy_t *h, eddy_jobid_t id)
{
    return id_rpc(h, "job.cancel", id);
}

eddy_future_t *eddy_job_release(eddy_t *h, eddy_jobid_t id)
{
    return id_rpc(h, "job.release", id);
}

eddy_future_t *eddy_job_release_untraced(eddy_t *h, eddy_jobid_t id)
{
    if (!h || id > JOBID_MAX) {
        errno = EINVAL;
        return NULL;
    }
    return eddy_rpc_pack(h, "job.release", 0, 0, "{s:I s:b}", "id",
                         (json_int_t)id, "untraced", 1);
}

eddy_future_t *eddy_job_stdin(eddy_t *h,
                              eddy_jobid_t id,
                              const char *ranks,
                              const void *data,
                              size_t len,
                              bool eof)
{
    eddy_future_t *f;
    json_t *o;
    char *text;
    int e;

    if (!h || id > JOBID_MAX || (len > 0 && !data) || !valid_ranks(ranks)) {
        errno = EINVAL;
        return NULL;
    }
    if (!(o = json_pack("{s:I s:s s:b}", "id", (json_int_t)id, "ranks",
                        ranks ? ranks : "all", "eof", eof ? 1 : 0)) ||
        !(text = json_dumps(o, JSON_COMPACT))) {
        json_decref(o);
        errno = ENOMEM;
        return NULL;
    }
    json_decref(o);
    f = eddy_rpc(h, "job-io.stdin", 0, 0, text, data, len);
    e = errno;
    free(text);
    errno = e;
    return f;
}

/* ---- eventlog -------------------------------------------------------- */

/* The context text of the current entry, kept with a reference on the
 * response it came from: when the head of the queue is another response,
 * the text is stale (the pointer cannot be reused while we hold it). */
struct evcache {
    msg_t *msg;
    char *context;
};

static void evcache_clear(struct evcache *c)
{
    msg_decref(c->msg);
    free(c->context);
    c->msg = NULL;
    c->context = NULL;
}

static void evcache_destroy(void *arg)
{
    struct evcache *c = arg;

    evcache_clear(c);
    free(c);
}

eddy_future_t *eddy_job_event_watch(eddy_t *h, eddy_jobid_t id, int flags)
{
    struct evcache *c;
    eddy_future_t *f;

    if (!h || id > JOBID_MAX || (flags & ~EDDY_JOB_EVENT_FOLLOW)) {
        errno = EINVAL;
        return NULL;
    }
    if (!(c = calloc(1, sizeof(*c)))) {
        errno = ENOMEM;
        return NULL;
    }
    f = eddy_rpc_pack(h, "job.eventlog", 0, EDDY_RPC_STREAMING, "{s:I s:b}",
                      "id", (json_int_t)id, "follow",
                      (flags & EDDY_JOB_EVENT_FOLLOW) ? 1 : 0);
    if (!f) {
        free(c);
        return NULL;
    }
    f->aux = c;
    f->aux_destroy = evcache_destroy;
    return f;
}

int eddy_job_event_get(eddy_future_t *f,
                       double *timestamp,
                       const char **name,
                       const char **context)
{
    struct evcache *c;
    json_t *body, *v, *ctx;
    double ts;
    const char *nm;

    if (!f || f->aux_destroy != evcache_destroy) {
        errno = EINVAL;
        return -1;
    }
    c = f->aux;
    if (get_body(f, &body) < 0)
        return -1;
    if (!(v = json_object_get(body, "timestamp")) || !json_is_number(v) ||
        !isfinite(json_number_value(v)))
        return proto_error(f, "timestamp: expected a number");
    ts = json_number_value(v);
    if (!(v = json_object_get(body, "name")) || !json_is_string(v))
        return proto_error(f, "name: expected a string");
    nm = json_string_value(v);
    ctx = json_object_get(body, "context");
    if (ctx && !json_is_object(ctx))
        return proto_error(f, "context: expected an object");
    if (context && c->msg != f->q[f->qhead]) {
        char *text = ctx ? json_dumps(ctx, JSON_COMPACT) : strdup("{}");

        if (!text) {
            errno = ENOMEM;
            return -1;
        }
        evcache_clear(c);
        c->msg = msg_incref(f->q[f->qhead]);
        c->context = text;
    }
    if (timestamp)
        *timestamp = ts;
    if (name)
        *name = nm;
    if (context)
        *context = c->context;
    return 0;
}

/* ---- attach ---------------------------------------------------------- */

/* What eddy_job_attach() hands to the shared attach machinery
 * (logattach.c). */
struct job_attach {
    eddy_jobid_t id;
    eddy_job_output_f cb;
    void *arg;
};

/* One output record: {"rank","stream","eof"?} + payload. */
static int job_record(const json_t *body,
                      const void *data,
                      size_t len,
                      void *arg,
                      char *why,
                      size_t whysize)
{
    struct job_attach *ja = arg;
    const json_t *v;
    const char *s;
    uint32_t rank;
    int stream;
    bool eof = false;

    if (get_u32(body, "rank", &rank) < 0) {
        snprintf(why, whysize, "rank: expected an integer >= 0");
        return -1;
    }
    if (get_str(body, "stream", &s) < 0 ||
        (strcmp(s, "stdout") && strcmp(s, "stderr"))) {
        snprintf(why, whysize, "stream: expected \"stdout\" or \"stderr\"");
        return -1;
    }
    stream = !strcmp(s, "stdout") ? EDDY_JOB_STDOUT : EDDY_JOB_STDERR;
    if ((v = json_object_get(body, "eof"))) {
        if (!json_is_boolean(v)) {
            snprintf(why, whysize, "eof: expected a boolean");
            return -1;
        }
        eof = json_is_true(v);
    }
    /* one record is either output or an end of stream (outlog.h) */
    if (len > 0)
        ja->cb(ja->id, rank, stream, data, len, false, ja->arg);
    else if (eof)
        ja->cb(ja->id, rank, stream, NULL, 0, true, ja->arg);
    return 0;
}

eddy_future_t *eddy_job_attach(eddy_t *h,
                               eddy_jobid_t id,
                               eddy_job_output_f cb,
                               void *arg)
{
    struct job_attach *ja;

    if (!h || !cb || id > JOBID_MAX) {
        errno = EINVAL;
        return NULL;
    }
    if (!(ja = calloc(1, sizeof(*ja)))) {
        errno = ENOMEM;
        return NULL;
    }
    ja->id = id;
    ja->cb = cb;
    ja->arg = arg;
    return logattach_create(h, "job-io.attach", "job-io.credit", "id", id,
                            job_record, ja, free);
}

size_t eddy_job_attach_dropped(eddy_future_t *f)
{
    return logattach_dropped(f);
}
