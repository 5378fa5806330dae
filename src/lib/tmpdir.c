/* tmpdir.c - the job tmpdir API of eddy/tmpdir.h: one job.tmpdir RPC to
 * rank 0 (docs/jobs-protocol.md), its answer decoded strictly.
 *
 * The answer lists each node's tmpdir once and maps task ranks to nodes
 * by runs ([first, count, node index]), so it stays small for jobs of
 * many tasks; a task's node is found by binary search over the runs.
 * Nothing is sized by a count the answer claims: arrays are as long as
 * what was actually received, and the runs must cover 0..ntasks-1
 * exactly, in order.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eddy/tmpdir.h"
#include "lib.h"

/* IDs are JSON integers; jansson's are signed 64-bit. */
#define JOBID_MAX ((eddy_jobid_t)INT64_MAX)

struct run {
    uint32_t first, count, node;
};

struct eddy_tmpdirs {
    json_t *o; /* the answer: owns the strings */
    char *json;
    uint32_t ntasks;
    uint32_t nnodes;
    struct eddy_tmpdir *nodes;
    struct run *runs; /* in rank order, covering 0..ntasks-1 */
    size_t nruns;
};

eddy_future_t *eddy_job_tmpdir(eddy_t *h, eddy_jobid_t id)
{
    if (!h || id > JOBID_MAX) {
        errno = EINVAL;
        return NULL;
    }
    return eddy_rpc_pack(h, "job.tmpdir", 0, 0, "{s:I}", "id", (json_int_t)id);
}

/* Say why the answer is malformed (into 'why'); -1. */
static int whyf(char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int whyf(char *why, size_t size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
    return -1;
}

static int get_u32(const json_t *v, uint32_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > UINT32_MAX)
        return -1;
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

static int decode_nodes(eddy_tmpdirs_t *t,
                        const json_t *a,
                        char *why,
                        size_t size)
{
    size_t i, n;
    json_t *o;

    if (!json_is_array(a))
        return whyf(why, size, "nodes: expected an array");
    if ((n = json_array_size(a)) > UINT32_MAX)
        return whyf(why, size, "nodes: too many");
    if (n > 0 && !(t->nodes = calloc(n, sizeof(*t->nodes)))) {
        errno = ENOMEM;
        return -1;
    }
    json_array_foreach(a, i, o)
    {
        struct eddy_tmpdir *d = &t->nodes[i];
        const json_t *host = json_object_get(o, "hostname");
        const json_t *path = json_object_get(o, "path");

        if (!json_is_object(o) ||
            get_u32(json_object_get(o, "rank"), &d->node) < 0)
            return whyf(why, size, "nodes[%zu].rank: expected an integer >= 0",
                        i);
        if (!json_is_string(host))
            return whyf(why, size, "nodes[%zu].hostname: expected a string", i);
        if (!json_is_string(path) || json_string_value(path)[0] != '/')
            return whyf(why, size, "nodes[%zu].path: expected an absolute path",
                        i);
        d->index = (uint32_t)i;
        d->hostname = json_string_value(host);
        d->path = json_string_value(path);
    }
    t->nnodes = (uint32_t)n;
    return 0;
}

static int decode_runs(eddy_tmpdirs_t *t,
                       const json_t *a,
                       char *why,
                       size_t size)
{
    uint64_t next = 0;
    size_t i, n;
    json_t *r;

    if (!json_is_array(a))
        return whyf(why, size, "tasks: expected an array");
    if ((n = json_array_size(a)) > 0 &&
        !(t->runs = calloc(n, sizeof(*t->runs)))) {
        errno = ENOMEM;
        return -1;
    }
    json_array_foreach(a, i, r)
    {
        struct run *run = &t->runs[i];

        if (!json_is_array(r) || json_array_size(r) != 3 ||
            get_u32(json_array_get(r, 0), &run->first) < 0 ||
            get_u32(json_array_get(r, 1), &run->count) < 0 ||
            get_u32(json_array_get(r, 2), &run->node) < 0)
            return whyf(why, size,
                        "tasks[%zu]: expected [first rank, count, node "
                        "index]",
                        i);
        if (run->first != next)
            return whyf(why, size, "tasks[%zu]: starts at rank %u, not %ju", i,
                        run->first, (uintmax_t)next);
        if (run->count == 0)
            return whyf(why, size, "tasks[%zu]: a run of 0 tasks", i);
        if (run->node >= t->nnodes)
            return whyf(why, size,
                        "tasks[%zu]: node index %u, but the job has %u nodes",
                        i, run->node, t->nnodes);
        next = (uint64_t)run->first + run->count;
    }
    t->nruns = n;
    if (next != t->ntasks)
        return whyf(why, size, "tasks: ranks 0-%jd given for %u tasks",
                    (intmax_t)next - 1, t->ntasks);
    return 0;
}

eddy_tmpdirs_t *eddy_job_tmpdir_get(eddy_future_t *f)
{
    eddy_tmpdirs_t *t = NULL;
    const msg_t *msg;
    char why[200] = "";

    if (!f) {
        errno = EINVAL;
        return NULL;
    }
    if (eddy_rpc_get(f, NULL) < 0)
        return NULL;
    msg = f->q[f->qhead];
    /* a private copy: the mapping outlives the future */
    if (!(t = calloc(1, sizeof(*t))) ||
        !(t->o = msg->body ? json_deep_copy(msg->body) : json_object()) ||
        !(t->json = json_dumps(t->o, JSON_COMPACT))) {
        errno = ENOMEM;
        goto error;
    }
    if (!json_is_object(t->o)) {
        whyf(why, sizeof(why), "expected an object");
        goto malformed;
    }
    if (!json_is_integer(json_object_get(t->o, "id")) ||
        json_integer_value(json_object_get(t->o, "id")) < 0) {
        whyf(why, sizeof(why), "id: expected an integer >= 0");
        goto malformed;
    }
    if (get_u32(json_object_get(t->o, "ntasks"), &t->ntasks) < 0) {
        whyf(why, sizeof(why), "ntasks: expected an integer >= 0");
        goto malformed;
    }
    if (decode_nodes(t, json_object_get(t->o, "nodes"), why, sizeof(why)) < 0 ||
        decode_runs(t, json_object_get(t->o, "tasks"), why, sizeof(why)) < 0) {
        if (!why[0])
            goto error; /* ENOMEM */
        goto malformed;
    }
    return t;
malformed:
    snprintf(f->errbuf, sizeof(f->errbuf), "malformed response to %s: %s",
             f->topic, why);
    eddy_tmpdirs_destroy(t);
    errno = EPROTO;
    return NULL;
error:
    eddy_tmpdirs_destroy(t);
    return NULL;
}

uint32_t eddy_tmpdirs_ntasks(const eddy_tmpdirs_t *t)
{
    return t ? t->ntasks : 0;
}

uint32_t eddy_tmpdirs_nnodes(const eddy_tmpdirs_t *t)
{
    return t ? t->nnodes : 0;
}

int eddy_tmpdirs_task(const eddy_tmpdirs_t *t,
                      uint32_t rank,
                      struct eddy_tmpdir *d)
{
    size_t lo = 0, hi;

    if (!t || !d) {
        errno = EINVAL;
        return -1;
    }
    if (rank >= t->ntasks) {
        errno = ERANGE;
        return -1;
    }
    /* the last run whose first rank is <= rank (the runs cover all) */
    hi = t->nruns;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->runs[mid].first <= rank)
            lo = mid;
        else
            hi = mid;
    }
    *d = t->nodes[t->runs[lo].node];
    return 0;
}

int eddy_tmpdirs_node(const eddy_tmpdirs_t *t,
                      uint32_t index,
                      struct eddy_tmpdir *d)
{
    if (!t || !d) {
        errno = EINVAL;
        return -1;
    }
    if (index >= t->nnodes) {
        errno = ERANGE;
        return -1;
    }
    *d = t->nodes[index];
    return 0;
}

const char *eddy_tmpdirs_json(const eddy_tmpdirs_t *t)
{
    return t ? t->json : NULL;
}

void eddy_tmpdirs_destroy(eddy_tmpdirs_t *t)
{
    int saved = errno;

    if (t) {
        free(t->nodes);
        free(t->runs);
        free(t->json);
        json_decref(t->o);
        free(t);
    }
    errno = saved;
}
