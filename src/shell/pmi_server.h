/* pmi_server.h - the PMI-1 simple wire protocol, served to one job's tasks
 * on this node.
 *
 * A pure protocol engine: it does no I/O.  eddy-shell reads each task's
 * PMI_FD socket and feeds the bytes here; the engine answers through the
 * send callback and asks the shell, through the fence callback, to run the
 * key exchange across the job's shells.  The wire format, limits and what
 * is refused are described in docs/pmi.md.
 *
 * Lifecycle:
 *  1. pmi_server_create() with the job's parameters (kvsname, universe
 *     size, number of local clients, appnum per client, hold_init) and the
 *     callbacks.  Clients are numbered 0 .. nclients-1 (the shell maps them
 *     to ranks).
 *  2. pmi_server_feed(srv, client, bytes, len) for every read on a task's
 *     socket.  Each complete line is parsed and answered at once through
 *     ops->send, except:
 *     - init while hold_init is set and pmi_server_release() has not been
 *       called: the answer is withheld until pmi_server_release();
 *     - barrier_in: once every local client is in the barrier, ops->fence
 *       gets the puts made on this node since the last fence; every client
 *       waits until the shell calls pmi_server_fence_done() with the
 *       job-wide key-value pairs (or pmi_server_fence_failed()).
 *     - abort: ops->abort is called; no answer is sent.
 *  3. pmi_server_client_gone() when a task's socket closes.  If the task
 *     was between init and finalize, or a barrier is in progress, ops->lost
 *     is called: a barrier can then never complete, and the shell should
 *     end the job.
 *  4. pmi_server_destroy().
 *
 * Errors on the wire: a request that parses but cannot be served (unknown
 * key, duplicate put, value too long, unsupported command such as spawn)
 * is answered with its own response command, `rc=-1` and a `msg=` word,
 * and the client may go on.  A line that cannot be parsed at all (too
 * long, bytes that are not printable ASCII, no `cmd=`, unknown command) is
 * a protocol error: it is answered `cmd=error rc=-1 msg=...`, ops->log
 * gets a short sanitised sample, further input from that client is
 * ignored, and pmi_server_feed() returns -1 with errno EPROTO so that the
 * shell closes the connection.
 *
 * Callbacks may call pmi_server_fence_done(), _fence_failed(), _release()
 * and _client_gone(), but never pmi_server_destroy().  Not thread-safe:
 * call from the shell's one thread.
 */
#ifndef EDDY_SHELL_PMI_SERVER_H
#define EDDY_SHELL_PMI_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "eddy/core.h"

/* Limits advertised by get_maxes, in bytes, excluding the terminating NUL.
 * The same as MPICH's Hydra, which MPICH's clients are tested against:
 * MPICH sizes its business cards from vallen_max. */
#define PMI_SERVER_KVSNAME_MAX 256
#define PMI_SERVER_KEYLEN_MAX 64
#define PMI_SERVER_VALLEN_MAX 1024

/* Longest request line accepted, newline included: a put at the limits
 * above is about 1.4 KiB; anything longer is not a PMI-1 client. */
#define PMI_SERVER_LINE_MAX 4096

/* Total bytes of keys and values held (exchanged plus pending), so that a
 * runaway job cannot exhaust the shell's memory. */
#define PMI_SERVER_KVS_MAX (64u << 20)

/* Most local clients per server: far above any node's core count. */
#define PMI_SERVER_CLIENTS_MAX 65536

typedef struct pmi_server pmi_server_t;

/* One key-value pair; strings are NUL-terminated. */
struct pmi_kv {
    const char *key;
    const char *value;
};

struct pmi_server_params {
    const char *kvsname; /* e.g. "eddy-<jobid>"; copied */
    int universe_size;   /* job size, answered to get_universe_size */
    int nclients;        /* local tasks, 1 .. PMI_SERVER_CLIENTS_MAX */
    const int *appnum;   /* nclients entries (copied), or NULL for all 0 */
    bool hold_init;      /* withhold init answers until _release() */
};

struct pmi_server_ops {
    /* Required.  Write one answer line (newline included, not
     * NUL-terminated) to the client's socket.  Borrowed for the call. */
    void (*send)(int client, const char *line, size_t len, void *arg);
    /* Required.  Every local client is in the barrier: exchange `kvs`
     * (the puts made on this node since the last fence, in put order,
     * borrowed for the call) across the job, then call
     * pmi_server_fence_done() (possibly from inside this callback). */
    void (*fence)(const struct pmi_kv *kvs, size_t count, void *arg);
    /* Optional.  The client asked to abort the job with `code`; msg is its
     * message or "" (printable ASCII, at most a line). */
    void (*abort)(int client, int code, const char *msg, void *arg);
    /* Optional.  A human line about a bad request; `text` is sanitised
     * (printable ASCII only, bounded). */
    void (*log)(int client, const char *text, void *arg);
    /* Optional.  A client went away while it was using PMI (initialized,
     * not finalized) or while a barrier was in progress: the job cannot
     * go on. */
    void (*lost)(int client, void *arg);
};

/* Create a server.  `params` and `ops` are copied; `arg` is passed to every
 * callback.  Returns NULL with errno EINVAL (bad parameter, named in err)
 * or ENOMEM. */
pmi_server_t *pmi_server_create(const struct pmi_server_params *params,
                                const struct pmi_server_ops *ops,
                                void *arg,
                                eddy_error_t *err);

/* Free the server and everything it holds.  Accepts NULL; preserves
 * errno.  Never call it from inside one of the server's callbacks. */
void pmi_server_destroy(pmi_server_t *srv);

/* Feed `len` bytes read from `client`'s socket.  Returns 0, or -1 with
 * errno EINVAL (bad client id or NULL data with len > 0), ENOTCONN (the
 * client is gone), or EPROTO (a protocol error on this or an earlier
 * feed: answered and logged; the shell should close the connection). */
int pmi_server_feed(pmi_server_t *srv,
                    int client,
                    const void *data,
                    size_t len);

/* The client's socket closed (or the shell gave up on it).  Its partial
 * input is dropped and later feeds fail with ENOTCONN.  Calls ops->lost as
 * described above.  Returns 0, or -1 with errno EINVAL (bad id) or
 * EALREADY (already gone). */
int pmi_server_client_gone(pmi_server_t *srv, int client);

/* The job is released from its --stop=init barrier: answer every init
 * withheld so far, and answer later inits at once.  Returns 0, or -1 with
 * errno EINVAL (NULL). */
int pmi_server_release(pmi_server_t *srv);

/* The exchange asked for by ops->fence is done: merge `kvs` (the job's
 * pairs, borrowed) into the server's store, later pairs overwriting
 * earlier ones, and answer barrier_out to every client in the barrier.
 * Returns 0, or -1 with errno EINVAL (no fence in progress, or a key or
 * value that breaks the limits: named in err; the barrier then fails) or
 * ENOSPC (store full: the barrier fails).  When it fails with a barrier in
 * progress, the clients get `cmd=barrier_out rc=-1`. */
int pmi_server_fence_done(pmi_server_t *srv,
                          const struct pmi_kv *kvs,
                          size_t count,
                          eddy_error_t *err);

/* Put a pair into the exchanged store directly, as if a fence had
 * brought it: for keys the server side knows before any task does, such
 * as PMI_process_mapping.  -1 with errno EINVAL (key or value breaks the
 * limits), ENOSPC (store full) or ENOMEM. */
int pmi_server_kvs_put(pmi_server_t *srv,
                       const char *key,
                       const char *value,
                       eddy_error_t *err);

/* The exchange failed: answer `cmd=barrier_out rc=-1` to every client in
 * the barrier.  Returns 0, or -1 with errno EINVAL (no fence in
 * progress). */
int pmi_server_fence_failed(pmi_server_t *srv);

/* Number of pairs in the exchanged store (for tests and `job info`). */
size_t pmi_server_kvs_count(const pmi_server_t *srv);

#endif /* !EDDY_SHELL_PMI_SERVER_H */
