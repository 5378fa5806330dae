/* outlog.c - an output log with attachers (outlog.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "outlog.h"

/* What a record costs beyond its payload, counted against the cap: the
 * struct and its small JSON body. */
#define OUTLOG_RECORD_OVERHEAD 128

struct record {
    struct record *prev, *next;
    uint64_t seq; /* position in the log's record sequence */
    json_t *body;
    bool stored;              /* kept for later attachers */
    outlog_release_f release; /* beyond the cap: who to tell when freed */
    void *arg;
    size_t len;
    char data[];
};

struct attacher {
    broker_req_t *req;
    uint64_t key;            /* chosen by the client, matches its credits */
    struct record *next_rec; /* next record to send, NULL: caught up */
    uint64_t next_seq;       /* its seq (the log's next_seq if caught up) */
    size_t unacked;          /* payload bytes sent, not yet credited */
    uint64_t missed;         /* output bytes freed before it attached */
    struct attacher *next;
};

struct outlog {
    uint64_t cap;
    struct record *head, *tail;
    struct record *spill; /* first record appended once full (or NULL) */
    uint64_t next_seq;
    uint64_t kept;    /* bytes stored, record overhead included */
    uint64_t dropped; /* payload bytes not stored (beyond the cap) */
    uint64_t freed;   /* of those, bytes no longer held for anyone */
    bool full;        /* the cap was reached: later output is not stored */
    bool ended;
    struct attacher *attachers; /* oldest first */
};

outlog_t *outlog_create(uint64_t cap)
{
    outlog_t *log = calloc(1, sizeof(*log));

    if (!log) {
        errno = ENOMEM;
        return NULL;
    }
    log->cap = cap;
    return log;
}

static void attacher_free(struct attacher *a)
{
    broker_req_decref(a->req);
    free(a);
}

static void record_unlink(outlog_t *log, struct record *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        log->head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        log->tail = r->prev;
    if (log->spill == r)
        log->spill = r->next;
}

static void record_free(struct record *r)
{
    if (r->release)
        r->release(r->arg);
    json_decref(r->body);
    free(r);
}

void outlog_destroy(outlog_t *log)
{
    int saved = errno;

    if (!log)
        return;
    while (log->attachers) {
        struct attacher *a = log->attachers;
        log->attachers = a->next;
        attacher_free(a);
    }
    while (log->head) {
        struct record *r = log->head;
        log->head = r->next;
        record_free(r);
    }
    free(log);
    errno = saved;
}

/* Send 'a' the records after its cursor while its window has room. */
static void attacher_feed(outlog_t *log, struct attacher *a)
{
    struct record *r;

    while ((r = a->next_rec) && a->unacked < OUTLOG_ATTACH_WINDOW) {
        (void)broker_respond(a->req, json_incref(r->body),
                             r->len ? r->data : NULL, r->len, 0);
        a->unacked += r->len;
        a->next_rec = r->next;
        a->next_seq = r->next ? r->next->seq : log->next_seq;
    }
}

/* The end of an attacher's stream (it has been sent every record): what
 * it missed, then EOS. */
static void attacher_end(struct attacher *a)
{
    if (a->missed)
        (void)broker_respond(
            a->req, json_pack("{s:I}", "dropped", (json_int_t)a->missed), NULL,
            0, 0);
    (void)broker_respond(a->req, NULL, NULL, 0, MSG_FLAG_EOS);
}

/* Free the records beyond the cap that every current attacher has been
 * sent (all of them if nobody is attached). */
static void log_gc(outlog_t *log)
{
    uint64_t min = UINT64_MAX;
    struct record *r, *next;

    for (struct attacher *a = log->attachers; a; a = a->next)
        if (a->next_seq < min)
            min = a->next_seq;
    for (r = log->spill; r && r->seq < min; r = next) {
        next = r->next;
        if (r->stored)
            continue;
        record_unlink(log, r);
        log->freed += r->len;
        record_free(r);
    }
}

void outlog_pump(outlog_t *log)
{
    struct attacher **pp;

    if (!log)
        return;
    pp = &log->attachers;
    while (*pp) {
        struct attacher *a = *pp;

        attacher_feed(log, a);
        if (log->ended && !a->next_rec) {
            *pp = a->next;
            attacher_end(a);
            attacher_free(a);
        } else
            pp = &a->next;
    }
    log_gc(log);
}

int outlog_append(outlog_t *log,
                  json_t *body,
                  const void *data,
                  size_t len,
                  bool keep,
                  outlog_release_f release,
                  void *arg)
{
    struct record *r;
    uint64_t cost = OUTLOG_RECORD_OVERHEAD + len;

    if (!log || !body || log->ended) {
        json_decref(body);
        errno = EINVAL;
        return -1;
    }
    if (!keep && !log->full && log->kept + cost > log->cap)
        log->full = true; /* from here on the stored log lacks output */
    if (!(r = malloc(sizeof(*r) + len))) {
        json_decref(body);
        errno = ENOMEM;
        return -1;
    }
    memset(r, 0, sizeof(*r));
    r->seq = log->next_seq++;
    r->body = body;
    r->stored = keep || !log->full;
    r->len = len;
    if (len)
        memcpy(r->data, data, len);
    r->prev = log->tail;
    if (log->tail)
        log->tail->next = r;
    else
        log->head = r;
    log->tail = r;
    if (log->full && !log->spill)
        log->spill = r;
    for (struct attacher *a = log->attachers; a; a = a->next)
        if (!a->next_rec)
            a->next_rec = r;
    if (r->stored) {
        log->kept += cost;
        return 0;
    }
    log->dropped += len;
    r->release = release;
    r->arg = arg;
    return 1;
}

int outlog_attach(outlog_t *log, broker_req_t *req, uint64_t key)
{
    struct attacher *a, **pp;

    if (!log || !req) {
        errno = EINVAL;
        return -1;
    }
    if (!(a = calloc(1, sizeof(*a)))) {
        errno = ENOMEM;
        return -1;
    }
    a->req = broker_req_incref(req);
    a->key = key;
    a->next_rec = log->head;
    a->next_seq = log->head ? log->head->seq : log->next_seq;
    a->missed = log->freed;
    for (pp = &log->attachers; *pp; pp = &(*pp)->next)
        ;
    *pp = a;
    outlog_pump(log);
    return 0;
}

/* Credits go to the oldest matching attacher first, so a client that
 * attaches twice with one key still gets what it acknowledged. */
void outlog_credit(outlog_t *log, uint64_t origin, uint64_t key, uint64_t bytes)
{
    if (!log)
        return;
    for (struct attacher *a = log->attachers; a && bytes > 0; a = a->next) {
        size_t take;

        if (broker_req_origin(a->req) != origin || a->key != key)
            continue;
        take = bytes < a->unacked ? (size_t)bytes : a->unacked;
        a->unacked -= take;
        bytes -= take;
    }
    outlog_pump(log);
}

bool outlog_cancel(outlog_t *log, broker_req_t *cancel)
{
    if (!log)
        return false;
    for (struct attacher **pp = &log->attachers; *pp; pp = &(*pp)->next) {
        struct attacher *a = *pp;

        if (broker_req_same(a->req, cancel)) {
            *pp = a->next;
            (void)broker_respond_error(a->req, ENODATA, NULL);
            attacher_free(a);
            outlog_pump(log); /* what it held back may go */
            return true;
        }
    }
    return false;
}

void outlog_disconnect(outlog_t *log, uint64_t origin)
{
    struct attacher **pp;
    bool gone = false;

    if (!log)
        return;
    pp = &log->attachers;
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
        outlog_pump(log); /* what they held back may go */
}

void outlog_end(outlog_t *log)
{
    if (!log)
        return;
    log->ended = true;
    outlog_pump(log);
}

void outlog_fail(outlog_t *log, int errnum, const char *text)
{
    if (!log)
        return;
    while (log->attachers) {
        struct attacher *a = log->attachers;
        log->attachers = a->next;
        (void)broker_respond_error(a->req, errnum, "%s", text);
        attacher_free(a);
    }
    log_gc(log);
}

bool outlog_ended(const outlog_t *log)
{
    return log && log->ended;
}

uint64_t outlog_kept(const outlog_t *log)
{
    return log ? log->kept : 0;
}

size_t outlog_nattachers(const outlog_t *log)
{
    size_t n = 0;

    for (const struct attacher *a = log ? log->attachers : NULL; a; a = a->next)
        n++;
    return n;
}
