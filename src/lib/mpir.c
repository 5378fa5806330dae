/* mpir.c - the process-table API of eddy/mpir.h: one proctable.get RPC to
 * rank 0, whose answer is the compact encoding of src/common/proctable.h
 * in the raw payload, decoded strictly here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "eddy/mpir.h"
#include "src/common/proctable.h"
#include "lib.h"

/* IDs are JSON integers; jansson's are signed 64-bit. */
#define JOBID_MAX ((eddy_jobid_t)INT64_MAX)

struct eddy_proctable {
    proctable_t *pt; /* owns the strings the entries point to */
    size_t size;
    struct eddy_procdesc *d; /* by rank */
};

eddy_future_t *eddy_job_proctable(eddy_t *h, eddy_jobid_t id)
{
    if (!h || id > JOBID_MAX) {
        errno = EINVAL;
        return NULL;
    }
    return eddy_rpc_pack(h, "proctable.get", 0, 0, "{s:I}", "id",
                         (json_int_t)id);
}

eddy_proctable_t *eddy_job_proctable_get(eddy_future_t *f)
{
    eddy_proctable_t *t = NULL;
    const void *data;
    size_t len;
    eddy_error_t err = {{0}};
    struct proctable_entry e;

    if (!f) {
        errno = EINVAL;
        return NULL;
    }
    if (eddy_rpc_get_raw(f, &data, &len) < 0)
        return NULL;
    if (!(t = calloc(1, sizeof(*t))) || !(t->pt = proctable_create()))
        goto nomem;
    if (proctable_merge_encoded(t->pt, data, len, &err) < 0) {
        if (errno == ENOMEM)
            goto error;
        goto malformed;
    }
    t->size = proctable_count(t->pt);
    if (!proctable_is_complete(t->pt, (uint32_t)t->size)) {
        snprintf(err.text, sizeof(err.text),
                 "the ranks are not 0-%zu, each once", t->size - 1);
        goto malformed;
    }
    if (t->size > 0 && !(t->d = calloc(t->size, sizeof(*t->d))))
        goto nomem;
    for (size_t i = 0; i < t->size; i++) {
        if (proctable_get(t->pt, i, &e) < 0)
            goto nomem;
        t->d[i] = (struct eddy_procdesc){
            .rank = e.rank,
            .hostname = e.hostname,
            .executable = e.executable,
            .pid = e.pid,
            .broker_rank = e.broker_rank,
            .appnum = e.appnum,
        };
    }
    return t;
malformed:
    snprintf(f->errbuf, sizeof(f->errbuf), "malformed response to %s: %.160s",
             f->topic, err.text);
    eddy_proctable_destroy(t);
    errno = EPROTO;
    return NULL;
nomem:
    errno = ENOMEM;
error:
    eddy_proctable_destroy(t);
    return NULL;
}

size_t eddy_proctable_size(const eddy_proctable_t *pt)
{
    return pt ? pt->size : 0;
}

int eddy_proctable_entry(const eddy_proctable_t *pt,
                         uint32_t rank,
                         struct eddy_procdesc *d)
{
    if (!pt || !d || rank >= pt->size) {
        errno = EINVAL;
        return -1;
    }
    *d = pt->d[rank];
    return 0;
}

void eddy_proctable_destroy(eddy_proctable_t *pt)
{
    int saved = errno;

    if (pt) {
        proctable_destroy(pt->pt);
        free(pt->d);
        free(pt);
    }
    errno = saved;
}
