/* sched.c - the FCFS job queue (see sched.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/errprintf.h"
#include "keymap.h"
#include "sched.h"

/* The head's reason is the pool's message: an eddy_error_t text. */
#define SCHED_REASON_MAX (sizeof(((eddy_error_t *)0)->text) + 32)

struct entry {
    uint64_t id;
    struct rpool_request req;
    struct entry *prev, *next;
};

struct sched {
    rpool_t *pool;
    keymap_t *byid; /* id -> entry */
    struct entry *head, *tail;
    size_t count;
    bool ran; /* head_reason is meaningful */
    char head_reason[SCHED_REASON_MAX];
    char *rbuf; /* sched_reason() for non-head jobs (not const data) */
};

sched_t *sched_create(rpool_t *pool)
{
    sched_t *s;

    if (!pool) {
        errno = EINVAL;
        return NULL;
    }
    if (!(s = calloc(1, sizeof(*s))) || !(s->byid = keymap_create()) ||
        !(s->rbuf = calloc(1, SCHED_REASON_MAX))) {
        sched_destroy(s);
        errno = ENOMEM;
        return NULL;
    }
    s->pool = pool;
    return s;
}

void sched_destroy(sched_t *s)
{
    int saved_errno = errno;

    if (s) {
        while (s->head) {
            struct entry *e = s->head;
            s->head = e->next;
            free(e);
        }
        keymap_destroy(s->byid);
        free(s->rbuf);
        free(s);
    }
    errno = saved_errno;
}

static void unlink_entry(sched_t *s, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        s->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        s->tail = e->prev;
    keymap_remove(s->byid, e->id, 0);
    s->count--;
    free(e);
}

int sched_enqueue(sched_t *s,
                  uint64_t id,
                  const struct rpool_request *req,
                  eddy_error_t *err)
{
    struct entry *e;

    if (!s || !req) {
        errno = EINVAL;
        return errprintf(err, "invalid argument");
    }
    if (keymap_get(s->byid, id, 0)) {
        errno = EEXIST;
        return errprintf(err, "job %ju is already queued", (uintmax_t)id);
    }
    if (rpool_fits_ever(s->pool, req, err) < 0)
        return -1;
    if (!(e = calloc(1, sizeof(*e)))) {
        errno = ENOMEM;
        return errprintf(err, "out of memory");
    }
    e->id = id;
    e->req = *req;
    if (keymap_put(s->byid, id, 0, e) < 0) {
        free(e);
        return errprintf(err, "out of memory");
    }
    e->prev = s->tail;
    if (s->tail)
        s->tail->next = e;
    else {
        s->head = e;
        s->ran = false; /* a new head has not been tried yet */
    }
    s->tail = e;
    s->count++;
    return 0;
}

int sched_remove(sched_t *s, uint64_t id)
{
    struct entry *e;

    if (!s || !(e = keymap_get(s->byid, id, 0))) {
        errno = ENOENT;
        return -1;
    }
    if (e == s->head)
        s->ran = false; /* the next head has not been tried */
    unlink_entry(s, e);
    return 0;
}

size_t sched_run(sched_t *s, sched_alloc_f cb, void *arg)
{
    size_t n = 0;

    while (s && s->head) {
        struct entry *e = s->head;
        uint64_t id = e->id;
        rpool_alloc_t *alloc = NULL;
        eddy_error_t err = {{0}};
        int errnum;

        if (rpool_alloc(s->pool, &e->req, &alloc, &err) == 0)
            errnum = 0;
        else if ((errnum = errno) == EAGAIN || errnum == ENOMEM) {
            snprintf(s->head_reason, sizeof(s->head_reason), "%s",
                     err.text[0] ? err.text : strerror(errnum));
            s->ran = true;
            break;
        }
        /* Allocated, or it can never run: either way it leaves. */
        s->ran = false;
        unlink_entry(s, e);
        n++;
        if (cb)
            cb(id, alloc, errnum, errnum ? err.text : NULL, arg);
        else if (alloc) {
            rpool_free(s->pool, alloc);
            rpool_alloc_destroy(alloc);
        }
    }
    return n;
}

const char *sched_reason(const sched_t *s, uint64_t id)
{
    const struct entry *e;

    if (!s || !(e = keymap_get(s->byid, id, 0)))
        return "";
    if (e == s->head)
        return s->ran ? s->head_reason : "queued";
    snprintf(s->rbuf, SCHED_REASON_MAX, "waiting behind job %ju",
             (uintmax_t)s->head->id);
    return s->rbuf;
}

size_t sched_count(const sched_t *s)
{
    return s ? s->count : 0;
}
