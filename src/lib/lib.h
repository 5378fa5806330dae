/* lib.h - libeddy internals shared by its source files (not installed).
 *
 * Lifecycle of a handle (handle.c):
 *  1. eddy_open() connects a unix socket synchronously, wraps it in a
 *     msgconn on a private uv loop and runs that loop until the broker's
 *     greeting arrives.
 *  2. Responses are routed by matchtag through 'tags' (tagtab.c) to their
 *     future (future.c), which queues them.
 *  3. Futures whose continuation must run are put on 'pending'; an async
 *     handle wakes the loop (and makes eddy_get_fd() readable) to run them
 *     from a fresh loop iteration, never from inside an API call.
 *  4. Losing the connection fails every unfinished future with ENOTCONN.
 *  5. eddy_close() drops the connection, frees every future, closes every
 *     libuv handle and runs the loop until their close callbacks are done.
 *     Called while the loop is running (from a continuation, or from any
 *     callback inside eddy_dispatch() or a wait), it cannot free the loop
 *     under uv_run(): it only shuts the handle down (handle_shutdown()) and
 *     the caller closes it again later.
 *
 * Invariants:
 *  - a future is in 'tags' iff it is waiting for responses
 *    (registered == true), which implies conn != NULL;
 *  - a future is ready iff it timed out, has a queued response, or has a
 *    terminal errnum (ENODATA once its last response was consumed);
 *  - the pipe is referenced (keeps uv_run() going) only while some RPC
 *    awaits a response, and the async handle only while continuations are
 *    pending, so uv_run(UV_RUN_DEFAULT) returns once all work is done.
 */
#ifndef EDDY_LIB_LIB_H
#define EDDY_LIB_LIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "eddy/core.h"
#include "src/common/msg.h"
#include "src/common/msgconn.h"
#include "src/common/token.h"

/* Internal symbols must not leak out of libeddy.so. */
#define LIB_INTERNAL __attribute__((visibility("hidden")))

/* Circular doubly linked list with a sentinel head: unlinking needs no
 * knowledge of which list an entry is on. */
struct link {
    struct link *prev, *next;
};

#define link_entry(ptr, type, member)                                          \
    ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void link_init(struct link *l)
{
    l->prev = l->next = l;
}

static inline bool link_empty(const struct link *head)
{
    return head->next == head;
}

static inline void link_add_tail(struct link *head, struct link *l)
{
    l->prev = head->prev;
    l->next = head;
    head->prev->next = l;
    head->prev = l;
}

static inline void link_del(struct link *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    link_init(l);
}

/* Move every entry of 'from' to the (empty) list 'to'. */
static inline void link_splice(struct link *from, struct link *to)
{
    link_init(to);
    if (link_empty(from))
        return;
    to->next = from->next;
    to->prev = from->prev;
    to->next->prev = to;
    to->prev->next = to;
    link_init(from);
}

/* Matchtag -> future map (open addressing, linear probing, backward-shift
 * deletion).  Key 0 is never a valid matchtag and marks an empty slot. */
struct tagtab {
    uint32_t *keys;
    void **vals;
    uint32_t bits; /* capacity is 1 << bits (0 bits: not allocated) */
    size_t count;
};

LIB_INTERNAL void tagtab_init(struct tagtab *t);
LIB_INTERNAL void tagtab_release(struct tagtab *t);
/* The value for 'key', or NULL. */
LIB_INTERNAL void *tagtab_get(const struct tagtab *t, uint32_t key);
/* Insert (key must not be present, must not be 0).  -1 with ENOMEM. */
LIB_INTERNAL int tagtab_put(struct tagtab *t, uint32_t key, void *val);
/* Remove 'key' if present. */
LIB_INTERNAL void tagtab_del(struct tagtab *t, uint32_t key);
/* Remove everything (keeps the memory). */
LIB_INTERNAL void tagtab_clear(struct tagtab *t);

struct eddy {
    uv_loop_t *loop;
    msgconn_t *conn;    /* NULL once the connection is gone */
    uv_stream_t *pipe;  /* the stream under 'conn' (owned by it), or NULL:
                           a uv_pipe_t (local://) or uv_tcp_t (tcp://) */
    uv_async_t *wakeup; /* runs pending continuations */
    uv_timer_t *timer;  /* deadline for eddy_open()/eddy_future_wait_for() */
    char *uri;
    bool trace;

    /* tcp:// only (docs/remote.md): the token, our nonce, whether we
     * answered the challenge, and where the token came from */
    bool tcp;
    bool answered;
    unsigned char token[TOKEN_SIZE];
    unsigned char cnonce[TOKEN_SIZE];
    char token_path[TOKEN_PATH_MAX];

    /* from the greeting */
    char version[32];
    bool greeted;
    uint32_t rank;
    uint32_t size;

    /* why eddy_open() failed, set by the connection callbacks */
    int open_errnum;
    eddy_error_t open_err;

    /* why the connection was lost ("" while connected) */
    char lost_reason[200];

    uint32_t next_tag;
    struct tagtab tags;
    struct link futures; /* every live future */
    struct link pending; /* futures whose continuation must run */
    int depth;           /* > 0 while inside one of our callbacks */
    int waiting;         /* > 0 while handle_run_until() runs the loop */
    int running;         /* > 0 while we run the loop (wait or dispatch) */
    bool closing;        /* shut down from a callback: no more callbacks */
};

struct eddy_future {
    eddy_t *h;
    struct link all;    /* in h->futures */
    struct link notify; /* in h->pending (or a batch being run) */
    bool queued;        /* 'notify' is linked */

    char *topic;
    uint32_t rank;
    uint32_t matchtag;
    int flags;       /* EDDY_RPC_* */
    bool registered; /* in h->tags, expecting responses */
    bool finished;   /* no more responses will be queued */

    msg_t **q; /* ring of queued responses; q[qhead] is current */
    size_t qhead, qlen, qcap;

    int term_errnum; /* seen once the queue is empty (ENODATA, ...) */
    char *term_text; /* NULL: strerror(term_errnum) */
    bool timed_out;  /* the continuation's timeout expired: sticky */

    char *json;       /* cached text of the current body */
    json_t *empty;    /* {} for unpacking bodiless responses */
    char errbuf[256]; /* why the last wait or unpack failed */

    eddy_continuation_f cb;
    void *cb_arg;
    double cb_timeout;
    uv_timer_t *cb_timer;
    bool notified; /* cb ran for the current state; wait for reset */
    bool in_cb;
    bool destroy_pending;

    /* State of an API built on top of the future (job.c: attach and
     * eventlog futures), released by aux_destroy(aux) first thing when the
     * future is freed (destroyed, or freed by eddy_close()). */
    void *aux;
    void (*aux_destroy)(void *aux);
};

/* future.c */

/* A new future for an RPC (not yet registered).  NULL with ENOMEM. */
LIB_INTERNAL eddy_future_t *fut_create(eddy_t *h,
                                       const char *topic,
                                       uint32_t rank,
                                       int flags);
/* Free a future at once (caller made sure no callback of it is running).
 * Sends a cancel for an unfinished stream if still connected. */
LIB_INTERNAL void fut_free(eddy_future_t *f);
LIB_INTERNAL bool fut_ready(const eddy_future_t *f);
/* Route a response to its future (steals 'msg'). */
LIB_INTERNAL void fut_deliver(eddy_future_t *f, msg_t *msg);
/* End a future with a terminal error (no more responses).  'text' may be
 * NULL for strerror(errnum). */
LIB_INTERNAL void fut_fail(eddy_future_t *f, int errnum, const char *text);
/* Queue a response without going through the matchtag table (used for
 * NORESPONSE requests).  Steals 'msg'.  -1 with ENOMEM. */
LIB_INTERNAL int fut_push(eddy_future_t *f, msg_t *msg);
/* Run the loop until 'f' is ready: 0, or -1 with errno EDEADLK, ETIMEDOUT
 * or ENOTCONN (nothing can ever make it ready). */
LIB_INTERNAL int fut_wait(eddy_future_t *f, double timeout);
/* Run the continuations of every future queued so far (async callback). */
LIB_INTERNAL void fut_run_pending(eddy_t *h);

/* logattach.c: attach to an output log kept at rank 0 (job-io, tool).
 *
 * 'record' decodes one record (body borrowed, payload 'data'/'len') and
 * calls the user's callback; it returns -1 with a reason in 'why' for a
 * malformed one (the attach then fails with EPROTO).  The user's callback
 * may destroy the attach future.  {"dropped"} records are handled here. */
typedef int (*logattach_record_f)(const json_t *body,
                                  const void *data,
                                  size_t len,
                                  void *arg,
                                  char *why,
                                  size_t whysize);
/* Send streaming 'topic' to rank 0 with {IDKEY: id, "key"} and return the
 * future the caller gets (ready at the end of the log, or failed); credits
 * go out as 'credit_topic' {IDKEY: id, "key", "bytes"}.  'arg' is freed
 * with 'arg_free' (may be NULL) when the future is, or on failure.  NULL
 * with errno ENOTCONN or ENOMEM. */
LIB_INTERNAL eddy_future_t *logattach_create(eddy_t *h,
                                             const char *topic,
                                             const char *credit_topic,
                                             const char *idkey,
                                             uint64_t id,
                                             logattach_record_f record,
                                             void *arg,
                                             void (*arg_free)(void *arg));
/* Payload bytes the log had dropped before this attach (valid once 'af'
 * is ready); 0 for a future that is not an attach. */
LIB_INTERNAL size_t logattach_dropped(eddy_future_t *af);

/* rpc.c */

/* eddy_rpc() with a body already built: 'body' (may be NULL) is stolen,
 * also on failure; 'data' copied.  Same errors. */
LIB_INTERNAL eddy_future_t *rpc_send(eddy_t *h,
                                     const char *topic,
                                     uint32_t rank,
                                     int flags,
                                     json_t *body,
                                     const void *data,
                                     size_t len);

/* jobspec_api.c */

/* The jobspec JSON of 'js' with the submit-time defaults applied (caller's
 * environment, working directory, name), validated by the jobspec module.
 * A new reference, or NULL with errno (EINVAL, E2BIG, ENOMEM, or getcwd's)
 * and 'err' filled. */
struct eddy_jobspec;
LIB_INTERNAL json_t *jobspec_api_encode(const struct eddy_jobspec *js,
                                        eddy_error_t *err);
/* True if the job's tasks read stdin from messages ("stdin" in job.submit). */
LIB_INTERNAL bool jobspec_api_stdin(const struct eddy_jobspec *js);

/* handle.c */

/* Register 'f' under a fresh matchtag.  -1 with ENOMEM. */
LIB_INTERNAL int handle_register(eddy_t *h, eddy_future_t *f);
LIB_INTERNAL void handle_unregister(eddy_t *h, eddy_future_t *f);
/* Run the loop once (UV_RUN_ONCE) until '*done' or the timeout ('timeout'
 * < 0: none) expires.  0 when done; -1 ETIMEDOUT; -1 ENOTCONN/EDEADLK
 * when nothing left in the loop could ever set '*done'. */
LIB_INTERNAL int handle_run_until(eddy_t *h,
                                  bool (*done)(void *arg),
                                  void *arg,
                                  double timeout);
/* True while running the loop again would reenter uv_run(): inside one of
 * our continuations, or inside any callback of a loop run we started. */
LIB_INTERNAL bool handle_busy(const eddy_t *h);
/* A future became ready: if we are running the loop in a wait, make the
 * current uv_run(UV_RUN_ONCE) return instead of blocking in poll (events
 * handled before the poll phase, such as timers, would otherwise leave it
 * blocked until the next I/O). */
LIB_INTERNAL void handle_wake(eddy_t *h);
/* Milliseconds for a timeout in seconds, rounded up, capped. */
LIB_INTERNAL uint64_t timeout_ms(double seconds);
/* uv_close() callback that frees a malloc'ed handle. */
LIB_INTERNAL void free_handle_cb(uv_handle_t *handle);

#endif /* !EDDY_LIB_LIB_H */
