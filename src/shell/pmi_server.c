/* pmi_server.c - PMI-1 simple wire protocol engine (see pmi_server.h and
 * docs/pmi.md).
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/errprintf.h"
#include "src/shell/pmi_server.h"

/* Most key=value tokens in one request: the largest real request (put) has
 * four; spare room for clients that add keys, as RFC 13 allows. */
#define PMI_TOKENS_MAX 16

/* Longest sample of a bad line quoted in a log message. */
#define PMI_LOG_SAMPLE 64

/* Longest answer: get_result with a value at the limit, plus slack. */
#define PMI_ANSWER_MAX (PMI_SERVER_VALLEN_MAX + 128)

/* ---- a small string map kept in insertion order ---------------------- */

struct kv {
    struct kv *bucket_next;
    struct kv *order_next;
    char *key;
    char *value;
};

struct kvs {
    struct kv **buckets;
    size_t nbuckets;
    size_t count;
    struct kv *head, *tail;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    while (*s)
        h = (h ^ (unsigned char)*s++) * 0x100000001b3ull;
    return h;
}

static void kvs_release(struct kvs *m)
{
    struct kv *e = m->head;
    while (e) {
        struct kv *next = e->order_next;
        free(e->key);
        free(e->value);
        free(e);
        e = next;
    }
    free(m->buckets);
    memset(m, 0, sizeof(*m));
}

static struct kv *kvs_find(const struct kvs *m, const char *key)
{
    if (m->nbuckets == 0)
        return NULL;
    struct kv *e = m->buckets[hash_str(key) % m->nbuckets];
    while (e && strcmp(e->key, key) != 0)
        e = e->bucket_next;
    return e;
}

static int kvs_grow(struct kvs *m)
{
    size_t n = m->nbuckets ? m->nbuckets * 2 : 64;
    struct kv **b = calloc(n, sizeof(*b));
    if (!b)
        return -1;
    for (struct kv *e = m->head; e; e = e->order_next) {
        size_t i = hash_str(e->key) % n;
        e->bucket_next = b[i];
        b[i] = e;
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = n;
    return 0;
}

/* Insert or overwrite.  *delta gets the change in stored bytes. */
static int kvs_set(struct kvs *m,
                   const char *key,
                   const char *value,
                   long long *delta)
{
    struct kv *e = kvs_find(m, key);
    char *v;

    if (!(v = strdup(value)))
        return -1;
    if (e) {
        *delta = (long long)strlen(value) - (long long)strlen(e->value);
        free(e->value);
        e->value = v;
        return 0;
    }
    if (m->count >= m->nbuckets && kvs_grow(m) < 0)
        goto error;
    if (!(e = calloc(1, sizeof(*e))) || !(e->key = strdup(key))) {
        free(e);
        goto error;
    }
    e->value = v;
    size_t i = hash_str(key) % m->nbuckets;
    e->bucket_next = m->buckets[i];
    m->buckets[i] = e;
    if (m->tail)
        m->tail->order_next = e;
    else
        m->head = e;
    m->tail = e;
    m->count++;
    *delta = (long long)(strlen(key) + strlen(value));
    return 0;
error:
    free(v);
    errno = ENOMEM;
    return -1;
}

/* ---- the server ------------------------------------------------------- */

struct client {
    char *buf; /* PMI_SERVER_LINE_MAX bytes, allocated on first feed */
    size_t len;
    bool initialized;
    bool init_held; /* init answer withheld until release */
    bool finalized;
    bool in_barrier;
    bool in_spawn; /* skipping the lines of an mcmd=spawn block */
    bool broken;   /* protocol error: input ignored */
    bool gone;
};

struct pmi_server {
    struct pmi_server_params p;
    struct pmi_server_ops ops;
    void *arg;
    char *kvsname;
    int *appnum;
    struct client *clients;
    int nbarrier;       /* clients in the current barrier */
    bool fence_pending; /* ops->fence called, fence_done not yet */
    bool released;
    struct kvs kvs;     /* as last exchanged, plus local puts at fence */
    struct kvs pending; /* local puts since the last fence */
    size_t bytes;       /* keys and values in kvs and pending */
};

/* A parsed request: pointers into the client's line buffer. */
struct req {
    const char *cmd; /* value of cmd= or mcmd= */
    bool mcmd;
    int ntok;
    const char *key[PMI_TOKENS_MAX];
    const char *val[PMI_TOKENS_MAX];
};

static void answer(pmi_server_t *srv, int id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void answer(pmi_server_t *srv, int id, const char *fmt, ...)
{
    char line[PMI_ANSWER_MAX];
    va_list ap;
    int n;

    if (srv->clients[id].gone)
        return;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof(line) - 2)
        n = (int)sizeof(line) - 2; /* cannot happen: values are bounded */
    line[n++] = '\n';
    srv->ops.send(id, line, (size_t)n, srv->arg);
}

/* Log `what` with a sanitised sample of the offending line. */
static void log_bad(
    pmi_server_t *srv, int id, const char *what, const char *line, size_t len)
{
    char sample[PMI_LOG_SAMPLE + 1];
    char text[PMI_LOG_SAMPLE + 128];
    size_t i, n = len < PMI_LOG_SAMPLE ? len : PMI_LOG_SAMPLE;

    if (!srv->ops.log)
        return;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)line[i];
        sample[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    sample[n] = '\0';
    snprintf(text, sizeof(text), "pmi client %d: %s: \"%s\"%s", id, what,
             sample, len > n ? "..." : "");
    srv->ops.log(id, text, srv->arg);
}

/* A line that cannot be served at all: answer, log, stop reading. */
static int protocol_error(pmi_server_t *srv,
                          int id,
                          const char *msg,
                          const char *what,
                          const char *line,
                          size_t len)
{
    answer(srv, id, "cmd=error rc=-1 msg=%s", msg);
    log_bad(srv, id, what, line, len);
    srv->clients[id].broken = true;
    errno = EPROTO;
    return -1;
}

static const char *req_get(const struct req *r, const char *key)
{
    for (int i = 0; i < r->ntok; i++)
        if (strcmp(r->key[i], key) == 0)
            return r->val[i];
    return NULL;
}

/* Parse a decimal int; -1 if not one. */
static int parse_int(const char *s, int *out)
{
    char *end;
    long v;

    if (!s || !*s)
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < INT_MIN || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

/* Split a NUL-terminated line (printable ASCII, no newline) into
 * key=value tokens in place.  The value of `message` runs to the end of
 * the line, because abort messages contain spaces. */
static int parse_line(char *line, struct req *r)
{
    char *p = line;

    memset(r, 0, sizeof(*r));
    for (;;) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        char *k = p;
        while (*p && *p != ' ' && *p != '=')
            p++;
        if (*p != '=' || p == k || r->ntok == PMI_TOKENS_MAX)
            return -1;
        *p++ = '\0';
        char *v = p;
        if (strcmp(k, "message") == 0)
            p += strlen(p);
        else
            while (*p && *p != ' ')
                p++;
        if (*p)
            *p++ = '\0';
        r->key[r->ntok] = k;
        r->val[r->ntok] = v;
        r->ntok++;
    }
    if (r->ntok == 0)
        return -1;
    if (strcmp(r->key[0], "cmd") == 0)
        r->cmd = r->val[0];
    else if (strcmp(r->key[0], "mcmd") == 0) {
        r->cmd = r->val[0];
        r->mcmd = true;
    } else
        return -1;
    return 0;
}

/* ---- handlers: decode, validate, act, respond ------------------------- */

static void answer_init(pmi_server_t *srv, int id)
{
    answer(srv, id,
           "cmd=response_to_init pmi_version=1 pmi_subversion=1 "
           "rc=0");
}

static int h_init(pmi_server_t *srv, int id, const struct req *r)
{
    struct client *c = &srv->clients[id];
    int v, sv;

    if (parse_int(req_get(r, "pmi_version"), &v) < 0 ||
        parse_int(req_get(r, "pmi_subversion"), &sv) < 0) {
        answer(srv, id,
               "cmd=response_to_init pmi_version=1 "
               "pmi_subversion=1 rc=-1 msg=bad_version_fields");
        return 0;
    }
    /* 1.0 and 1.1 speak the same commands; PMI-2 is another protocol. */
    if (v != 1 || sv < 0 || sv > 1) {
        answer(srv, id,
               "cmd=response_to_init pmi_version=1 "
               "pmi_subversion=1 rc=-1 msg=unsupported_version");
        return 0;
    }
    if (c->initialized || c->init_held) {
        answer(srv, id,
               "cmd=response_to_init pmi_version=1 "
               "pmi_subversion=1 rc=-1 msg=already_initialized");
        return 0;
    }
    if (srv->p.hold_init && !srv->released) {
        c->init_held = true;
        return 0;
    }
    c->initialized = true;
    answer_init(srv, id);
    return 0;
}

static int h_get_maxes(pmi_server_t *srv, int id, const struct req *r)
{
    /* No rc on success, like Hydra: some clients sscanf this line. */
    answer(srv, id, "cmd=maxes kvsname_max=%d keylen_max=%d vallen_max=%d",
           PMI_SERVER_KVSNAME_MAX, PMI_SERVER_KEYLEN_MAX,
           PMI_SERVER_VALLEN_MAX);
    return 0;
}

static int h_get_appnum(pmi_server_t *srv, int id, const struct req *r)
{
    answer(srv, id, "cmd=appnum rc=0 appnum=%d", srv->appnum[id]);
    return 0;
}

static int h_get_universe(pmi_server_t *srv, int id, const struct req *r)
{
    answer(srv, id, "cmd=universe_size rc=0 size=%d", srv->p.universe_size);
    return 0;
}

static int h_get_kvsname(pmi_server_t *srv, int id, const struct req *r)
{
    answer(srv, id, "cmd=my_kvsname rc=0 kvsname=%s", srv->kvsname);
    return 0;
}

/* Check kvsname (optional) and key; answer `rescmd` with an error and
 * return -1 if they are not acceptable. */
static int check_key(pmi_server_t *srv,
                     int id,
                     const struct req *r,
                     const char *rescmd)
{
    const char *kvsname = req_get(r, "kvsname");
    const char *key = req_get(r, "key");
    const char *msg = NULL;

    if (kvsname && strcmp(kvsname, srv->kvsname) != 0)
        msg = "unknown_kvsname";
    else if (!key || !*key)
        msg = "missing_key";
    else if (strlen(key) > PMI_SERVER_KEYLEN_MAX)
        msg = "key_too_long";
    if (msg) {
        answer(srv, id, "cmd=%s rc=-1 msg=%s", rescmd, msg);
        log_bad(srv, id, msg, key ? key : "", key ? strlen(key) : 0);
        return -1;
    }
    return 0;
}

static int h_put(pmi_server_t *srv, int id, const struct req *r)
{
    const char *key = req_get(r, "key");
    const char *value = req_get(r, "value");
    long long delta;
    size_t need;

    if (check_key(srv, id, r, "put_result") < 0)
        return 0;
    if (!value) {
        answer(srv, id, "cmd=put_result rc=-1 msg=missing_value");
        log_bad(srv, id, "put without value", key, strlen(key));
        return 0;
    }
    if (strlen(value) > PMI_SERVER_VALLEN_MAX) {
        answer(srv, id, "cmd=put_result rc=-1 msg=value_too_long");
        log_bad(srv, id, "value too long", key, strlen(key));
        return 0;
    }
    /* RFC 13: a key is put once per keyval space. */
    if (kvs_find(&srv->pending, key) || kvs_find(&srv->kvs, key)) {
        answer(srv, id, "cmd=put_result rc=-1 msg=duplicate_key");
        log_bad(srv, id, "duplicate key", key, strlen(key));
        return 0;
    }
    need = strlen(key) + strlen(value);
    if (srv->bytes + need > PMI_SERVER_KVS_MAX) {
        answer(srv, id, "cmd=put_result rc=-1 msg=kvs_full");
        log_bad(srv, id, "key-value store full", key, strlen(key));
        return 0;
    }
    if (kvs_set(&srv->pending, key, value, &delta) < 0) {
        answer(srv, id, "cmd=put_result rc=-1 msg=out_of_memory");
        return 0;
    }
    srv->bytes += (size_t)delta;
    answer(srv, id, "cmd=put_result rc=0");
    return 0;
}

static int h_get(pmi_server_t *srv, int id, const struct req *r)
{
    const char *key = req_get(r, "key");
    struct kv *e;

    if (check_key(srv, id, r, "get_result") < 0)
        return 0;
    if (!(e = kvs_find(&srv->pending, key)) &&
        !(e = kvs_find(&srv->kvs, key))) {
        answer(srv, id, "cmd=get_result rc=-1 msg=key_not_found");
        return 0;
    }
    answer(srv, id, "cmd=get_result rc=0 value=%s", e->value);
    return 0;
}

/* Every local client is in the barrier: hand the local puts to the shell.
 * They become visible in the local store at once; the batch handed out
 * stays alive until the callback returns, even if it calls fence_done. */
static void start_fence(pmi_server_t *srv)
{
    struct kvs batch = srv->pending;
    struct pmi_kv *arr = NULL;
    size_t n = 0;
    long long delta;

    memset(&srv->pending, 0, sizeof(srv->pending));
    srv->fence_pending = true;
    if (batch.count > 0 && !(arr = calloc(batch.count, sizeof(*arr)))) {
        kvs_release(&batch);
        pmi_server_fence_failed(srv);
        return;
    }
    for (struct kv *e = batch.head; e; e = e->order_next) {
        /* The pending bytes move to the store (kvs_set reports what the
         * store grew by; the pending copy is freed below). */
        srv->bytes -= strlen(e->key) + strlen(e->value);
        if (kvs_set(&srv->kvs, e->key, e->value, &delta) == 0)
            srv->bytes += (size_t)delta;
        arr[n].key = e->key;
        arr[n].value = e->value;
        n++;
    }
    srv->ops.fence(arr, n, srv->arg);
    free(arr);
    kvs_release(&batch);
}

static int h_barrier_in(pmi_server_t *srv, int id, const struct req *r)
{
    struct client *c = &srv->clients[id];

    if (c->in_barrier) {
        answer(srv, id, "cmd=barrier_out rc=-1 msg=already_in_barrier");
        log_bad(srv, id, "barrier_in twice", r->cmd, strlen(r->cmd));
        return 0;
    }
    c->in_barrier = true;
    if (++srv->nbarrier == srv->p.nclients && !srv->fence_pending)
        start_fence(srv);
    return 0;
}

static int h_finalize(pmi_server_t *srv, int id, const struct req *r)
{
    srv->clients[id].finalized = true;
    answer(srv, id, "cmd=finalize_ack rc=0");
    return 0;
}

static int h_abort(pmi_server_t *srv, int id, const struct req *r)
{
    const char *msg = req_get(r, "message");
    int code = 1; /* the default in MPICH's protocol description */

    if (parse_int(req_get(r, "exitcode"), &code) < 0)
        code = 1;
    if (srv->ops.abort)
        srv->ops.abort(id, code, msg ? msg : "", srv->arg);
    return 0;
}

/* Commands of PMI-1 that eddy does not serve: answered with their own
 * response command so that the client fails cleanly instead of waiting. */
static const struct {
    const char *cmd;
    const char *response;
} unsupported[] = {
    {"publish_name", "publish_result"}, {"unpublish_name", "unpublish_result"},
    {"lookup_name", "lookup_result"},   {"spawn", "spawn_result"},
    {"create_kvs", "newkvs"},           {"destroy_kvs", "kvs_destroyed"},
    {"getbyidx", "getbyidx_results"},   {"initack", "initack"},
    {"singinit", "singinit_info"},
};

static const struct {
    const char *cmd;
    int (*fn)(pmi_server_t *srv, int id, const struct req *r);
    bool needs_init;
} handlers[] = {
    {"init", h_init, false},
    {"get_maxes", h_get_maxes, true},
    {"get_appnum", h_get_appnum, true},
    {"get_universe_size", h_get_universe, true},
    {"get_my_kvsname", h_get_kvsname, true},
    {"put", h_put, true},
    {"get", h_get, true},
    {"barrier_in", h_barrier_in, true},
    {"finalize", h_finalize, true},
    {"abort", h_abort, false},
};

/* An mcmd=spawn block: refuse once its last line (endcmd) arrives. */
static int spawn_line(pmi_server_t *srv, int id, const char *line)
{
    if (strcmp(line, "endcmd") == 0) {
        srv->clients[id].in_spawn = false;
        answer(srv, id, "cmd=spawn_result rc=-1 msg=spawn_not_supported");
    }
    return 0;
}

static int handle_line(pmi_server_t *srv, int id, char *line, size_t len)
{
    struct client *c = &srv->clients[id];
    struct req r;

    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        if (ch < 0x20 || ch > 0x7e)
            return protocol_error(srv, id, "bad_character",
                                  "byte that is not printable ASCII", line,
                                  len);
    }
    if (c->in_spawn)
        return spawn_line(srv, id, line);
    char copy[PMI_LOG_SAMPLE + 1];
    size_t n = len < PMI_LOG_SAMPLE ? len : PMI_LOG_SAMPLE;
    memcpy(copy, line, n);
    copy[n] = '\0';
    if (parse_line(line, &r) < 0)
        return protocol_error(srv, id, "unparseable_line", "malformed request",
                              copy, len);
    if (r.mcmd) {
        if (strcmp(r.cmd, "spawn") != 0)
            return protocol_error(srv, id, "unknown_command",
                                  "unknown multi-line command", copy, len);
        log_bad(srv, id, "spawn is not supported", copy, len);
        c->in_spawn = true;
        return 0;
    }
    for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++) {
        if (strcmp(r.cmd, handlers[i].cmd) != 0)
            continue;
        if (handlers[i].needs_init && !c->initialized) {
            answer(srv, id, "cmd=error rc=-1 msg=not_initialized");
            log_bad(srv, id, "request before init", copy, len);
            return 0;
        }
        return handlers[i].fn(srv, id, &r);
    }
    for (size_t i = 0; i < sizeof(unsupported) / sizeof(unsupported[0]); i++) {
        if (strcmp(r.cmd, unsupported[i].cmd) == 0) {
            answer(srv, id, "cmd=%s rc=-1 msg=not_supported",
                   unsupported[i].response);
            log_bad(srv, id, "unsupported command", copy, len);
            return 0;
        }
    }
    return protocol_error(srv, id, "unknown_command", "unknown command", copy,
                          len);
}

/* ---- public API ------------------------------------------------------- */

pmi_server_t *pmi_server_create(const struct pmi_server_params *params,
                                const struct pmi_server_ops *ops,
                                void *arg,
                                eddy_error_t *err)
{
    pmi_server_t *srv = NULL;

    if (!params || !ops || !ops->send || !ops->fence) {
        errno = EINVAL;
        errprintf(err, "pmi server: params, send and fence are required");
        return NULL;
    }
    if (params->nclients < 1 || params->nclients > PMI_SERVER_CLIENTS_MAX) {
        errno = EINVAL;
        errprintf(err, "pmi server: %d local clients (1 to %d allowed)",
                  params->nclients, PMI_SERVER_CLIENTS_MAX);
        return NULL;
    }
    if (params->universe_size < params->nclients) {
        errno = EINVAL;
        errprintf(err, "pmi server: universe size %d below %d local clients",
                  params->universe_size, params->nclients);
        return NULL;
    }
    const char *k = params->kvsname;
    size_t klen = k ? strlen(k) : 0;
    bool ok = klen > 0 && klen <= PMI_SERVER_KVSNAME_MAX;
    for (size_t i = 0; ok && i < klen; i++)
        ok = k[i] > 0x20 && k[i] < 0x7f && k[i] != '=';
    if (!ok) {
        errno = EINVAL;
        errprintf(err,
                  "pmi server: kvsname must be 1 to %d printable "
                  "characters without spaces or '='",
                  PMI_SERVER_KVSNAME_MAX);
        return NULL;
    }
    if (!(srv = calloc(1, sizeof(*srv))) ||
        !(srv->kvsname = strdup(params->kvsname)) ||
        !(srv->appnum = calloc((size_t)params->nclients, sizeof(int))) ||
        !(srv->clients =
              calloc((size_t)params->nclients, sizeof(struct client))))
        goto nomem;
    srv->p = *params;
    srv->p.kvsname = srv->kvsname;
    srv->p.appnum = srv->appnum;
    if (params->appnum)
        memcpy(srv->appnum, params->appnum,
               (size_t)params->nclients * sizeof(int));
    srv->ops = *ops;
    srv->arg = arg;
    return srv;
nomem:
    pmi_server_destroy(srv);
    errno = ENOMEM;
    errprintf(err, "pmi server: out of memory");
    return NULL;
}

void pmi_server_destroy(pmi_server_t *srv)
{
    int saved = errno;

    if (srv) {
        if (srv->clients)
            for (int i = 0; i < srv->p.nclients; i++)
                free(srv->clients[i].buf);
        free(srv->clients);
        free(srv->appnum);
        free(srv->kvsname);
        kvs_release(&srv->kvs);
        kvs_release(&srv->pending);
        free(srv);
    }
    errno = saved;
}

int pmi_server_feed(pmi_server_t *srv, int client, const void *data, size_t len)
{
    const char *p = data;
    struct client *c;

    if (!srv || client < 0 || client >= srv->p.nclients || (!data && len)) {
        errno = EINVAL;
        return -1;
    }
    c = &srv->clients[client];
    if (c->gone) {
        errno = ENOTCONN;
        return -1;
    }
    if (c->broken) {
        errno = EPROTO;
        return -1;
    }
    if (len && !c->buf && !(c->buf = malloc(PMI_SERVER_LINE_MAX + 1))) {
        errno = ENOMEM;
        return -1;
    }
    while (len > 0) {
        const char *nl = memchr(p, '\n', len);
        size_t take = nl ? (size_t)(nl - p) : len;

        /* The line (without its newline) must leave room for it. */
        if (c->len + take > PMI_SERVER_LINE_MAX - 1) {
            size_t n = PMI_SERVER_LINE_MAX - 1 - c->len;
            memcpy(c->buf + c->len, p, n);
            return protocol_error(srv, client, "line_too_long", "line too long",
                                  c->buf, PMI_SERVER_LINE_MAX - 1);
        }
        memcpy(c->buf + c->len, p, take);
        c->len += take;
        if (!nl)
            break;
        p += take + 1;
        len -= take + 1;
        c->buf[c->len] = '\0';
        size_t linelen = c->len;
        c->len = 0;
        if (handle_line(srv, client, c->buf, linelen) < 0)
            return -1;
        /* A callback may have marked the client gone. */
        if (c->gone) {
            errno = ENOTCONN;
            return -1;
        }
    }
    return 0;
}

int pmi_server_client_gone(pmi_server_t *srv, int client)
{
    struct client *c;
    bool lost;

    if (!srv || client < 0 || client >= srv->p.nclients) {
        errno = EINVAL;
        return -1;
    }
    c = &srv->clients[client];
    if (c->gone) {
        errno = EALREADY;
        return -1;
    }
    lost = ((c->initialized || c->init_held) && !c->finalized) ||
           srv->nbarrier > 0;
    c->gone = true;
    c->len = 0;
    free(c->buf);
    c->buf = NULL;
    if (lost && srv->ops.lost)
        srv->ops.lost(client, srv->arg);
    return 0;
}

int pmi_server_release(pmi_server_t *srv)
{
    if (!srv) {
        errno = EINVAL;
        return -1;
    }
    if (srv->released)
        return 0;
    srv->released = true;
    for (int i = 0; i < srv->p.nclients; i++) {
        struct client *c = &srv->clients[i];
        if (c->init_held) {
            c->init_held = false;
            c->initialized = true;
            answer_init(srv, i);
        }
    }
    return 0;
}

/* Answer every client in the barrier and start afresh.  A client that
 * entered while the fence ran is answered too: it cannot enter twice. */
static void end_barrier(pmi_server_t *srv, bool ok)
{
    srv->fence_pending = false;
    srv->nbarrier = 0;
    for (int i = 0; i < srv->p.nclients; i++) {
        struct client *c = &srv->clients[i];
        if (!c->in_barrier)
            continue;
        c->in_barrier = false;
        if (ok)
            answer(srv, i, "cmd=barrier_out rc=0");
        else
            answer(srv, i, "cmd=barrier_out rc=-1 msg=barrier_failed");
    }
}

int pmi_server_fence_done(pmi_server_t *srv,
                          const struct pmi_kv *kvs,
                          size_t count,
                          eddy_error_t *err)
{
    size_t need = 0;
    long long delta;

    if (!srv || !srv->fence_pending || (!kvs && count)) {
        errno = EINVAL;
        return errprintf(err, "pmi fence_done: no fence in progress");
    }
    /* Validate everything first so that a bad batch changes nothing. */
    for (size_t i = 0; i < count; i++) {
        size_t kl = kvs[i].key ? strlen(kvs[i].key) : 0;
        size_t vl = kvs[i].value ? strlen(kvs[i].value) : SIZE_MAX;
        if (kl == 0 || kl > PMI_SERVER_KEYLEN_MAX ||
            vl > PMI_SERVER_VALLEN_MAX) {
            end_barrier(srv, false);
            errno = EINVAL;
            return errprintf(err,
                             "pmi fence_done: pair %zu: bad key or "
                             "value",
                             i);
        }
        need += kl + vl;
    }
    if (srv->bytes + need > PMI_SERVER_KVS_MAX) {
        end_barrier(srv, false);
        errno = ENOSPC;
        return errprintf(err,
                         "pmi fence_done: %zu bytes would pass the "
                         "%u byte store limit",
                         srv->bytes + need, PMI_SERVER_KVS_MAX);
    }
    for (size_t i = 0; i < count; i++) {
        if (kvs_set(&srv->kvs, kvs[i].key, kvs[i].value, &delta) < 0) {
            end_barrier(srv, false);
            return errprintf(err, "pmi fence_done: out of memory");
        }
        srv->bytes = (size_t)((long long)srv->bytes + delta);
    }
    end_barrier(srv, true);
    return 0;
}

int pmi_server_kvs_put(pmi_server_t *srv,
                       const char *key,
                       const char *value,
                       eddy_error_t *err)
{
    size_t kl = key ? strlen(key) : 0;
    size_t vl = value ? strlen(value) : SIZE_MAX;
    long long delta;

    if (!srv || kl == 0 || kl > PMI_SERVER_KEYLEN_MAX ||
        vl > PMI_SERVER_VALLEN_MAX) {
        errno = EINVAL;
        return errprintf(err, "pmi kvs_put: bad key or value");
    }
    if (srv->bytes + kl + vl > PMI_SERVER_KVS_MAX) {
        errno = ENOSPC;
        return errprintf(err, "pmi kvs_put: store full");
    }
    if (kvs_set(&srv->kvs, key, value, &delta) < 0)
        return errprintf(err, "pmi kvs_put: out of memory");
    srv->bytes = (size_t)((long long)srv->bytes + delta);
    return 0;
}

int pmi_server_fence_failed(pmi_server_t *srv)
{
    if (!srv || !srv->fence_pending) {
        errno = EINVAL;
        return -1;
    }
    end_barrier(srv, false);
    return 0;
}

size_t pmi_server_kvs_count(const pmi_server_t *srv)
{
    return srv ? srv->kvs.count : 0;
}
