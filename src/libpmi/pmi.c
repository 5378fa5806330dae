/* pmi.c - the PMI-1 C API over the PMI-1 simple wire protocol (RFC 13).
 *
 * One static context holds the connection; every call is one request line
 * and one answer line, in lock step, as PMI-1 requires.  Answers are read
 * through a bounded buffer, so a server can never make us hold more than
 * PMI_LINE_MAX bytes, and any wire trouble (EOF, an overlong or malformed
 * line) marks the connection broken so that later calls fail at once
 * instead of reading a stream that is out of step.
 *
 * This library must not depend on the rest of eddy: it is loaded into MPI
 * programs, so it uses libc only and never prints unless PMI_DEBUG is set.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "eddy/pmi.h"

/* Longest wire line either way, newline included: room for a put of the
 * largest name, key and value below plus the command words. */
#define PMI_LINE_MAX 8192
/* Our own caps on the lengths (NUL included) the server may announce, so
 * that every request we build fits one line. */
#define PMI_NAME_CAP 256
#define PMI_KEY_CAP 256
#define PMI_VAL_CAP 4096
/* key=value tuples we accept in one answer: real answers have at most 5. */
#define PMI_TUPLES_MAX 32
/* How long PMI_Abort() lets the server end us before exiting itself. */
#define PMI_ABORT_WAIT_MS 2000
/* What a singleton calls its KVS. */
#define PMI_SINGLETON_KVS "eddy-singleton"

/* Internal results of one request/answer exchange. */
enum {
    XCHG_OK = 0,
    XCHG_BROKEN = -1, /* wire failure: the connection is now unusable */
    XCHG_REFUSED = 1, /* the server answered with rc != 0 */
};

struct kvpair {
    char *key;
    char *val;
    struct kvpair *next;
};

/* One parsed answer: pointers into line[]. */
struct answer {
    char line[PMI_LINE_MAX];
    int n;
    char *key[PMI_TUPLES_MAX];
    char *val[PMI_TUPLES_MAX];
};

static struct pmi_ctx {
    int initialized;
    int singleton;
    int broken;
    int debug;
    int fd;
    int rank;
    int size;
    int spawned;
    int appnum;
    int universe; /* -1 until asked */
    int name_max;
    int key_max;
    int val_max;
    char kvsname[PMI_NAME_CAP];
    char in[PMI_LINE_MAX]; /* bytes received and not yet consumed */
    size_t inlen;
    struct kvpair *kvs; /* singleton KVS */
} ctx = {.fd = -1};

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void trace(const char *fmt, ...)
{
    va_list ap;

    if (!ctx.debug)
        return;
    va_start(ap, fmt);
    fprintf(stderr, "pmi[%d]: ", ctx.rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Trace a wire line, without its newline. */
static void trace_line(const char *dir, const char *line)
{
    if (!ctx.debug)
        return;
    fprintf(stderr, "pmi[%d]: %s ", ctx.rank, dir);
    fwrite(line, 1, strcspn(line, "\n"), stderr);
    fputc('\n', stderr);
}

static void kvs_clear(void)
{
    while (ctx.kvs) {
        struct kvpair *p = ctx.kvs;
        ctx.kvs = p->next;
        free(p->key);
        free(p->val);
        free(p);
    }
}

/* Forget everything but the debug flag. */
static void ctx_reset(void)
{
    int debug = ctx.debug;

    kvs_clear();
    memset(&ctx, 0, sizeof(ctx));
    ctx.fd = -1;
    ctx.debug = debug;
}

/* Strict decimal int: optional sign, digits, nothing else. */
static int parse_int(const char *s, int *out)
{
    char *end;
    long v;

    if (!s || !(*s == '-' || *s == '+' || (*s >= '0' && *s <= '9')))
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end != '\0' || end == s || v < INT_MIN || v > INT_MAX)
        return -1;
    *out = (int)v;
    return 0;
}

/* Wait until fd is ready for events, retrying on EINTR; timeout_ms < 0
 * waits forever.  Returns 1 when ready, 0 on timeout, -1 on error. */
static int wait_fd(int fd, short events, int timeout_ms)
{
    struct pollfd p = {.fd = fd, .events = events};
    struct timespec start, now;
    int left = timeout_ms;
    int rc;

    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        rc = poll(&p, 1, left);
        if (rc >= 0)
            return rc > 0 ? 1 : 0;
        if (errno != EINTR)
            return -1;
        if (timeout_ms >= 0) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            long ms = (now.tv_sec - start.tv_sec) * 1000 +
                      (now.tv_nsec - start.tv_nsec) / 1000000;
            left = ms >= timeout_ms ? 0 : timeout_ms - (int)ms;
        }
    }
}

/* Write all of buf.  send(MSG_NOSIGNAL) so that a vanished server is a
 * PMI_FAIL rather than a SIGPIPE; plain write() if PMI_FD is not a
 * socket.  A non-blocking descriptor is waited on rather than failed. */
static int write_all(const char *buf, size_t len)
{
    int use_write = 0;

    while (len > 0) {
        ssize_t n = use_write ? write(ctx.fd, buf, len)
                              : send(ctx.fd, buf, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == ENOTSOCK && !use_write) {
                use_write = 1;
                continue;
            }
            if (errno == EINTR)
                continue;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) &&
                wait_fd(ctx.fd, POLLOUT, -1) >= 0)
                continue;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Read one line into out (NUL-terminated, newline dropped).  Bytes past
 * the newline stay in ctx.in for the next call. */
static int read_line(char *out)
{
    for (;;) {
        char *nl = memchr(ctx.in, '\n', ctx.inlen);
        if (nl) {
            size_t len = (size_t)(nl - ctx.in);
            memcpy(out, ctx.in, len);
            out[len] = '\0';
            ctx.inlen -= len + 1;
            memmove(ctx.in, nl + 1, ctx.inlen);
            if (memchr(out, '\0', len)) {
                trace("answer contains a NUL byte");
                return -1;
            }
            return 0;
        }
        if (ctx.inlen == sizeof(ctx.in)) {
            trace("answer longer than %d bytes", PMI_LINE_MAX);
            return -1;
        }
        ssize_t n =
            read(ctx.fd, ctx.in + ctx.inlen, sizeof(ctx.in) - ctx.inlen);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if ((errno == EAGAIN || errno == EWOULDBLOCK) &&
                wait_fd(ctx.fd, POLLIN, -1) >= 0)
                continue;
            trace("read: %s", strerror(errno));
            return -1;
        }
        if (n == 0) {
            trace("connection closed by the server%s",
                  ctx.inlen ? " in the middle of a line" : "");
            return -1;
        }
        ctx.inlen += (size_t)n;
    }
}

/* Split a line into key=value tuples at spaces and tabs; a tuple splits at
 * its first '=' (values may contain '=').  Words without '=' (e.g. the
 * rest of a msg= with spaces) are skipped, as RFC 13 asks parsers to be
 * lenient.  Control characters make the line malformed. */
static int parse_answer(struct answer *a)
{
    char *p = a->line;

    for (const unsigned char *c = (unsigned char *)p; *c; c++) {
        if ((*c < 0x20 && *c != '\t') || *c == 0x7f)
            return -1;
    }
    a->n = 0;
    for (;;) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0')
            break;
        char *word = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        if (*p)
            *p++ = '\0';
        char *eq = strchr(word, '=');
        if (!eq || eq == word)
            continue;
        if (a->n == PMI_TUPLES_MAX)
            return -1;
        *eq = '\0';
        a->key[a->n] = word;
        a->val[a->n] = eq + 1;
        a->n++;
    }
    return 0;
}

/* The value of key in an answer (the first one), or NULL. */
static const char *answer_get(const struct answer *a, const char *key)
{
    for (int i = 0; i < a->n; i++) {
        if (!strcmp(a->key[i], key))
            return a->val[i];
    }
    return NULL;
}

/* Send one request line and read its answer, which must be "cmd=expect".
 * A non-zero rc is XCHG_REFUSED; anything malformed breaks the
 * connection. */
static int exchange(const char *req, const char *expect, struct answer *a)
{
    const char *cmd, *rcs;
    int rc;

    if (ctx.broken) {
        trace("connection unusable after an earlier failure");
        return XCHG_BROKEN;
    }
    trace_line(">", req);
    if (write_all(req, strlen(req)) < 0) {
        trace("write: %s", strerror(errno));
        goto broken;
    }
    if (read_line(a->line) < 0)
        goto broken;
    trace_line("<", a->line);
    if (parse_answer(a) < 0) {
        trace("malformed answer");
        goto broken;
    }
    if (!(cmd = answer_get(a, "cmd")) || strcmp(cmd, expect) != 0) {
        trace("expected cmd=%s, got cmd=%s", expect, cmd ? cmd : "(none)");
        goto broken;
    }
    if ((rcs = answer_get(a, "rc"))) {
        if (parse_int(rcs, &rc) < 0) {
            trace("malformed rc=%s", rcs);
            goto broken;
        }
        if (rc != 0) {
            const char *msg = answer_get(a, "msg");
            trace("%s: server error rc=%d%s%s", expect, rc, msg ? " msg=" : "",
                  msg ? msg : "");
            return XCHG_REFUSED;
        }
    }
    return XCHG_OK;
broken:
    ctx.broken = 1;
    return XCHG_BROKEN;
}

/* An integer field of an answer, or -1 if missing/malformed/out of range.
 */
static int answer_int(const struct answer *a,
                      const char *key,
                      int min,
                      int *out)
{
    const char *s = answer_get(a, key);
    int v;

    if (!s || parse_int(s, &v) < 0 || v < min) {
        trace("answer lacks a valid %s (>= %d)", key, min);
        ctx.broken = 1;
        return -1;
    }
    *out = v;
    return 0;
}

/* Keys: printable ASCII except space and '='.  Values: '!'..'~'. */
static int check_key(const char *key)
{
    size_t len = strlen(key);

    if (len == 0 || len >= (size_t)ctx.key_max)
        return PMI_ERR_INVALID_KEY_LENGTH;
    for (const char *c = key; *c; c++) {
        if (*c < 0x21 || *c > 0x7e || *c == '=')
            return PMI_ERR_INVALID_KEY;
    }
    return PMI_SUCCESS;
}

static int check_value(const char *val)
{
    size_t len = strlen(val);

    if (len >= (size_t)ctx.val_max)
        return PMI_ERR_INVALID_VAL_LENGTH;
    for (const char *c = val; *c; c++) {
        if (*c < 0x21 || *c > 0x7e)
            return PMI_ERR_INVALID_VAL;
    }
    return PMI_SUCCESS;
}

static int check_kvsname(const char *kvsname)
{
    if (strcmp(kvsname, ctx.kvsname) != 0) {
        trace("unknown KVS '%s'", kvsname);
        return PMI_ERR_INVALID_ARG;
    }
    return PMI_SUCCESS;
}

/* --- initialisation -------------------------------------------------- */

/* Read PMI_FD, PMI_RANK, PMI_SIZE, PMI_SPAWNED (see pmi.h). */
static int read_environment(void)
{
    const char *fd = getenv("PMI_FD");
    const char *rank = getenv("PMI_RANK");
    const char *size = getenv("PMI_SIZE");
    const char *spawned = getenv("PMI_SPAWNED");

    ctx.spawned = 0;
    if (spawned && (parse_int(spawned, &ctx.spawned) < 0 ||
                    (ctx.spawned != 0 && ctx.spawned != 1))) {
        trace("PMI_SPAWNED='%s' is not 0 or 1", spawned);
        return -1;
    }
    if (!fd) {
        if (size && (parse_int(size, &ctx.size) < 0 || ctx.size != 1)) {
            trace("PMI_SIZE='%s' but no PMI_FD: not a singleton", size);
            return -1;
        }
        ctx.singleton = 1;
        ctx.size = 1;
        ctx.rank = 0;
        return 0;
    }
    if (parse_int(fd, &ctx.fd) < 0 || ctx.fd < 0 ||
        fcntl(ctx.fd, F_GETFD) < 0) {
        trace("PMI_FD='%s' is not an open descriptor", fd);
        ctx.fd = -1;
        return -1;
    }
    if (!size || parse_int(size, &ctx.size) < 0 || ctx.size < 1) {
        trace("PMI_SIZE='%s' is not a size", size ? size : "(unset)");
        return -1;
    }
    if (!rank || parse_int(rank, &ctx.rank) < 0 || ctx.rank < 0 ||
        ctx.rank >= ctx.size) {
        trace("PMI_RANK='%s' is not in 0..%d", rank ? rank : "(unset)",
              ctx.size - 1);
        return -1;
    }
    return 0;
}

static int cap(int v, int limit)
{
    return v > limit ? limit : v;
}

/* init, get_maxes, get_appnum, get_my_kvsname. */
static int handshake(void)
{
    struct answer a;
    const char *s;
    int v;

    if (exchange("cmd=init pmi_version=1 pmi_subversion=1\n",
                 "response_to_init", &a) != XCHG_OK)
        return -1;
    if ((s = answer_get(&a, "pmi_version")) &&
        (parse_int(s, &v) < 0 || v != 1)) {
        trace("server speaks PMI version %s, not 1", s);
        return -1;
    }
    if (exchange("cmd=get_maxes\n", "maxes", &a) != XCHG_OK)
        return -1;
    if (answer_int(&a, "kvsname_max", 2, &ctx.name_max) < 0 ||
        answer_int(&a, "keylen_max", 2, &ctx.key_max) < 0 ||
        answer_int(&a, "vallen_max", 1, &ctx.val_max) < 0)
        return -1;
    ctx.name_max = cap(ctx.name_max, PMI_NAME_CAP);
    ctx.key_max = cap(ctx.key_max, PMI_KEY_CAP);
    ctx.val_max = cap(ctx.val_max, PMI_VAL_CAP);
    if (exchange("cmd=get_appnum\n", "appnum", &a) != XCHG_OK)
        return -1;
    if (answer_int(&a, "appnum", -1, &ctx.appnum) < 0)
        return -1;
    if (exchange("cmd=get_my_kvsname\n", "my_kvsname", &a) != XCHG_OK)
        return -1;
    s = answer_get(&a, "kvsname");
    if (!s || *s == '\0' || strlen(s) >= (size_t)ctx.name_max) {
        trace("answer lacks a valid kvsname (1..%d characters)",
              ctx.name_max - 1);
        return -1;
    }
    memcpy(ctx.kvsname, s, strlen(s) + 1);
    return 0;
}

int PMI_Init(int *spawned)
{
    if (!spawned)
        return PMI_ERR_INVALID_ARG;
    ctx.debug = getenv("PMI_DEBUG") != NULL;
    if (ctx.initialized) {
        trace("PMI_Init: already initialized");
        return PMI_FAIL;
    }
    ctx_reset();
    ctx.universe = -1;
    if (read_environment() < 0)
        goto error;
    if (ctx.singleton) {
        ctx.name_max = PMI_NAME_CAP;
        ctx.key_max = PMI_KEY_CAP;
        ctx.val_max = PMI_VAL_CAP;
        ctx.appnum = 0;
        ctx.universe = 1;
        memcpy(ctx.kvsname, PMI_SINGLETON_KVS, sizeof(PMI_SINGLETON_KVS));
        trace("no PMI_FD: running as a singleton");
    } else if (handshake() < 0)
        goto error;
    ctx.initialized = 1;
    trace("initialized: rank %d of %d, appnum %d, kvs %s", ctx.rank, ctx.size,
          ctx.appnum, ctx.kvsname);
    *spawned = ctx.spawned;
    return PMI_SUCCESS;
error:
    /* PMI_FD is left open: it is the launcher's descriptor, and the
     * caller may want to report on it. */
    ctx_reset();
    return PMI_FAIL;
}

int PMI_Initialized(int *initialized)
{
    if (!initialized)
        return PMI_ERR_INVALID_ARG;
    *initialized = ctx.initialized ? PMI_TRUE : PMI_FALSE;
    return PMI_SUCCESS;
}

int PMI_Finalize(void)
{
    struct answer a;
    int rc = PMI_SUCCESS;

    if (!ctx.initialized)
        return PMI_ERR_INIT;
    if (!ctx.singleton) {
        if (exchange("cmd=finalize\n", "finalize_ack", &a) != XCHG_OK)
            rc = PMI_FAIL;
        while (close(ctx.fd) < 0 && errno == EINTR)
            ;
    }
    ctx_reset();
    return rc;
}

int PMI_Abort(int exit_code, const char error_msg[])
{
    char line[PMI_LINE_MAX];
    int len;

    if (!ctx.initialized || ctx.singleton || ctx.broken)
        _exit(exit_code);
    len = snprintf(line, sizeof(line), "cmd=abort exitcode=%d", exit_code);
    if (error_msg && *error_msg) {
        /* Leave room for the newline; cut what does not fit. */
        size_t room = sizeof(line) - (size_t)len - 2;
        size_t n = strlen(error_msg);
        char *p = line + len;

        if (n > room - strlen(" message="))
            n = room - strlen(" message=");
        p += snprintf(p, sizeof(line) - (size_t)len, " message=");
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)error_msg[i];
            *p++ = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
        }
        len = (int)(p - line);
    }
    line[len++] = '\n';
    line[len] = '\0';
    trace_line(">", line);
    if (write_all(line, (size_t)len) == 0) {
        /* The server ends the job, us included; if it answers, closes or
         * stays silent too long, we end ourselves. */
        (void)wait_fd(ctx.fd, POLLIN, PMI_ABORT_WAIT_MS);
    }
    _exit(exit_code);
}

/* --- process group information --------------------------------------- */

int PMI_Get_size(int *size)
{
    if (!size)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    *size = ctx.size;
    return PMI_SUCCESS;
}

int PMI_Get_rank(int *rank)
{
    if (!rank)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    *rank = ctx.rank;
    return PMI_SUCCESS;
}

int PMI_Get_universe_size(int *size)
{
    struct answer a;

    if (!size)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    if (ctx.universe < 0) {
        int v;
        if (exchange("cmd=get_universe_size\n", "universe_size", &a) !=
                XCHG_OK ||
            answer_int(&a, "size", 1, &v) < 0)
            return PMI_FAIL;
        ctx.universe = v;
    }
    *size = ctx.universe;
    return PMI_SUCCESS;
}

int PMI_Get_appnum(int *appnum)
{
    if (!appnum)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    *appnum = ctx.appnum;
    return PMI_SUCCESS;
}

/* --- key value store --------------------------------------------------- */

int PMI_KVS_Get_my_name(char kvsname[], int length)
{
    if (!kvsname)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    if (length < 1 || strlen(ctx.kvsname) >= (size_t)length)
        return PMI_ERR_INVALID_LENGTH;
    memcpy(kvsname, ctx.kvsname, strlen(ctx.kvsname) + 1);
    return PMI_SUCCESS;
}

static int get_max(int *length, const int *value)
{
    if (!length)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    *length = *value;
    return PMI_SUCCESS;
}

int PMI_KVS_Get_name_length_max(int *length)
{
    return get_max(length, &ctx.name_max);
}

int PMI_KVS_Get_key_length_max(int *length)
{
    return get_max(length, &ctx.key_max);
}

int PMI_KVS_Get_value_length_max(int *length)
{
    return get_max(length, &ctx.val_max);
}

static struct kvpair *kvs_find(const char *key)
{
    for (struct kvpair *p = ctx.kvs; p; p = p->next) {
        if (!strcmp(p->key, key))
            return p;
    }
    return NULL;
}

/* Singleton put: a later put of the same key replaces the value. */
static int kvs_put(const char *key, const char *value)
{
    struct kvpair *p = kvs_find(key);
    char *v = strdup(value);

    if (!v)
        return PMI_ERR_NOMEM;
    if (p) {
        free(p->val);
        p->val = v;
        return PMI_SUCCESS;
    }
    if (!(p = calloc(1, sizeof(*p))) || !(p->key = strdup(key))) {
        free(p);
        free(v);
        return PMI_ERR_NOMEM;
    }
    p->val = v;
    p->next = ctx.kvs;
    ctx.kvs = p;
    return PMI_SUCCESS;
}

int PMI_KVS_Put(const char kvsname[], const char key[], const char value[])
{
    char line[PMI_LINE_MAX];
    struct answer a;
    int rc;

    if (!kvsname || !key || !value)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    if ((rc = check_kvsname(kvsname)) != PMI_SUCCESS ||
        (rc = check_key(key)) != PMI_SUCCESS ||
        (rc = check_value(value)) != PMI_SUCCESS)
        return rc;
    if (ctx.singleton)
        return kvs_put(key, value);
    /* Lengths are bounded by the caps, so this always fits. */
    snprintf(line, sizeof(line), "cmd=put kvsname=%s key=%s value=%s\n",
             kvsname, key, value);
    if (exchange(line, "put_result", &a) != XCHG_OK)
        return PMI_FAIL;
    return PMI_SUCCESS;
}

int PMI_KVS_Commit(const char kvsname[])
{
    if (!kvsname)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    return check_kvsname(kvsname);
}

/* Copy a value out, or PMI_ERR_INVALID_LENGTH if it does not fit. */
static int copy_value(const char *v, char *value, int length)
{
    size_t len = strlen(v);

    if (len >= (size_t)length) {
        trace("value of %zu bytes does not fit in %d", len, length);
        return PMI_ERR_INVALID_LENGTH;
    }
    memcpy(value, v, len + 1);
    return PMI_SUCCESS;
}

int PMI_KVS_Get(const char kvsname[],
                const char key[],
                char value[],
                int length)
{
    char line[PMI_LINE_MAX];
    struct answer a;
    const char *v;
    int rc;

    if (!kvsname || !key || !value)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    if (length < 1)
        return PMI_ERR_INVALID_LENGTH;
    if ((rc = check_kvsname(kvsname)) != PMI_SUCCESS ||
        (rc = check_key(key)) != PMI_SUCCESS)
        return rc;
    if (ctx.singleton) {
        struct kvpair *p = kvs_find(key);
        v = p ? p->val : !strncmp(key, "PMI_", 4) ? "" : NULL;
        if (!v) {
            trace("get %s: no such key", key);
            return PMI_FAIL;
        }
        return copy_value(v, value, length);
    }
    snprintf(line, sizeof(line), "cmd=get kvsname=%s key=%s\n", kvsname, key);
    switch (exchange(line, "get_result", &a)) {
    case XCHG_OK:
        break;
    case XCHG_REFUSED:
        /* RFC 13: a missing key of the reserved namespace reads as "". */
        if (!strncmp(key, "PMI_", 4))
            return copy_value("", value, length);
        return PMI_FAIL;
    default:
        return PMI_FAIL;
    }
    if (!(v = answer_get(&a, "value"))) {
        trace("get_result lacks a value");
        ctx.broken = 1;
        return PMI_FAIL;
    }
    return copy_value(v, value, length);
}

int PMI_Barrier(void)
{
    struct answer a;

    if (!ctx.initialized)
        return PMI_ERR_INIT;
    if (ctx.singleton)
        return PMI_SUCCESS;
    if (exchange("cmd=barrier_in\n", "barrier_out", &a) != XCHG_OK)
        return PMI_FAIL;
    return PMI_SUCCESS;
}

/* --- clique (ranks on this node), from PMI_process_mapping -------------- */

struct block {
    int node;
    int nnodes;
    int ppn;
};

/* Parse "(vector,(node,nnodes,ppn),...)" into a malloc'd array.  Blocks
 * with zero nodes or zero ranks per node are refused, which bounds the
 * walk below by the job size. */
static struct block *parse_mapping(const char *s, int *count)
{
    size_t max = strlen(s) / 7 + 1; /* a block takes at least 7 chars */
    struct block *b = calloc(max, sizeof(*b));
    int n = 0;

    if (!b)
        return NULL;
    if (strncmp(s, "(vector,", 8) != 0)
        goto error;
    s += 8;
    for (;;) {
        struct block *x = &b[n];
        int used = 0;
        if ((size_t)n == max ||
            sscanf(s, "(%d,%d,%d)%n", &x->node, &x->nnodes, &x->ppn, &used) !=
                3 ||
            used == 0 || x->node < 0 || x->nnodes < 1 || x->ppn < 1)
            goto error;
        n++;
        s += used;
        if (*s == ',') {
            s++;
            continue;
        }
        if (s[0] == ')' && s[1] == '\0')
            break;
        goto error;
    }
    *count = n;
    return b;
error:
    free(b);
    return NULL;
}

/* Deal ranks 0..size-1 to nodes as the mapping says, cycling through the
 * blocks until every rank has a node.  Returns the node of `rank`; if out
 * is not NULL, also stores the ranks on node `want` (at most outlen) and
 * counts them in *count. */
static long walk_mapping(const struct block *b,
                         int nb,
                         int size,
                         int rank,
                         long want,
                         int *out,
                         int outlen,
                         int *count)
{
    long mine = -1;
    int r = 0;

    if (count)
        *count = 0;
    while (r < size) {
        for (int i = 0; i < nb && r < size; i++) {
            for (long nd = b[i].node;
                 nd < (long)b[i].node + b[i].nnodes && r < size; nd++) {
                for (int k = 0; k < b[i].ppn && r < size; k++, r++) {
                    if (r == rank)
                        mine = nd;
                    if (count && nd == want) {
                        if (*count < outlen)
                            out[*count] = r;
                        (*count)++;
                    }
                }
            }
        }
    }
    return mine;
}

/* The clique of this rank into a malloc'd array (this rank alone if the
 * mapping is unknown).  PMI_SUCCESS or PMI_FAIL/PMI_ERR_NOMEM. */
static int get_clique(int **ranks, int *count)
{
    char kvsname[PMI_NAME_CAP];
    char *map = NULL;
    struct block *b = NULL;
    int nb = 0;
    int rc;

    memcpy(kvsname, ctx.kvsname, sizeof(kvsname));
    if (!(map = malloc(PMI_VAL_CAP)))
        return PMI_ERR_NOMEM;
    rc = PMI_KVS_Get(kvsname, "PMI_process_mapping", map, PMI_VAL_CAP);
    if (rc == PMI_ERR_INVALID_LENGTH) {
        map[0] = '\0'; /* too long to be useful: mapping unknown */
        rc = PMI_SUCCESS;
    }
    if (rc != PMI_SUCCESS)
        goto done;
    if (!ctx.singleton && (b = parse_mapping(map, &nb))) {
        long node = walk_mapping(b, nb, ctx.size, ctx.rank, -1, NULL, 0, NULL);
        walk_mapping(b, nb, ctx.size, ctx.rank, node, NULL, 0, count);
        if (!(*ranks = calloc((size_t)*count, sizeof(int)))) {
            rc = PMI_ERR_NOMEM;
            goto done;
        }
        walk_mapping(b, nb, ctx.size, ctx.rank, node, *ranks, *count, count);
    } else {
        if (map[0] != '\0' && !ctx.singleton)
            trace("PMI_process_mapping '%s' unreadable: clique is me", map);
        if (!(*ranks = malloc(sizeof(int)))) {
            rc = PMI_ERR_NOMEM;
            goto done;
        }
        (*ranks)[0] = ctx.rank;
        *count = 1;
    }
done:
    free(b);
    free(map);
    return rc;
}

int PMI_Get_clique_size(int *size)
{
    int *ranks, count, rc;

    if (!size)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    if ((rc = get_clique(&ranks, &count)) != PMI_SUCCESS)
        return rc;
    free(ranks);
    *size = count;
    return PMI_SUCCESS;
}

int PMI_Get_clique_ranks(int ranks[], int length)
{
    int *r, count, rc;

    if (!ranks)
        return PMI_ERR_INVALID_ARG;
    if (!ctx.initialized)
        return PMI_ERR_INIT;
    if ((rc = get_clique(&r, &count)) != PMI_SUCCESS)
        return rc;
    if (count > length) {
        free(r);
        return PMI_ERR_INVALID_LENGTH;
    }
    memcpy(ranks, r, (size_t)count * sizeof(int));
    free(r);
    return PMI_SUCCESS;
}

/* --- aliases ------------------------------------------------------------- */

int PMI_Get_id_length_max(int *length)
{
    return PMI_KVS_Get_name_length_max(length);
}

int PMI_Get_id(char id_str[], int length)
{
    return PMI_KVS_Get_my_name(id_str, length);
}

int PMI_Get_kvs_domain_id(char id_str[], int length)
{
    return PMI_KVS_Get_my_name(id_str, length);
}

/* --- optional functions, not supported ------------------------------------ */

int PMI_KVS_Create(char kvsname[], int length)
{
    return PMI_FAIL;
}

int PMI_KVS_Destroy(const char kvsname[])
{
    return PMI_FAIL;
}

int PMI_KVS_Iter_first(
    const char kvsname[], char key[], int key_len, char val[], int val_len)
{
    return PMI_FAIL;
}

int PMI_KVS_Iter_next(
    const char kvsname[], char key[], int key_len, char val[], int val_len)
{
    return PMI_FAIL;
}

int PMI_Spawn_multiple(int count,
                       const char *cmds[],
                       const char **argvs[],
                       const int maxprocs[],
                       const int info_keyval_sizesp[],
                       const PMI_keyval_t *info_keyval_vectors[],
                       int preput_keyval_size,
                       const PMI_keyval_t preput_keyval_vector[],
                       int errors[])
{
    return PMI_FAIL;
}

int PMI_Publish_name(const char service_name[], const char port[])
{
    return PMI_FAIL;
}

int PMI_Unpublish_name(const char service_name[])
{
    return PMI_FAIL;
}

int PMI_Lookup_name(const char service_name[], char port[])
{
    return PMI_FAIL;
}

int PMI_Parse_option(int num_args,
                     char *args[],
                     int *num_parsed,
                     PMI_keyval_t **keyvalp,
                     int *size)
{
    return PMI_FAIL;
}

int PMI_Args_to_keyval(int *argcp,
                       char *((*argvp)[]),
                       PMI_keyval_t **keyvalp,
                       int *size)
{
    return PMI_FAIL;
}

int PMI_Free_keyvals(PMI_keyval_t keyvalp[], int size)
{
    return PMI_FAIL;
}

int PMI_Get_options(char *str, int *length)
{
    return PMI_FAIL;
}
