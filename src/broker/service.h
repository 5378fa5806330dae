/* service.h - how a compiled-in broker service plugs into the broker.
 *
 * Every service is one file in src/broker/ that defines one
 * `const struct service_def <name>_service` with a static handler table,
 * listed once in services.c.  The broker:
 *  1. calls def->init(broker, &ctx) at startup (rank known, loop running);
 *  2. routes each request whose topic matches a table entry and whose
 *     target is this rank to that handler, as a broker_req_t;
 *  3. passes a request carrying MSG_FLAG_CANCEL to the handler for its
 *     topic too (check broker_req_is_cancel()); the service finds the
 *     original with broker_req_same() and ends its stream;
 *  4. calls def->disconnect(ctx, origin) when a client or peer that sent
 *     requests goes away, so the service can drop what it holds for it;
 *  5. calls def->shutdown(ctx) when the broker begins to shut down (stop
 *     processes, end streams), and def->destroy(ctx) just before exit.
 *     A service that needs the loop to finish (e.g. to reap the processes
 *     it killed and send their final responses) calls
 *     broker_shutdown_hold() from shutdown() and broker_shutdown_release()
 *     when done; the broker keeps its links open meanwhile, for at most
 *     a few seconds (then it logs and exits anyway, and destroy() runs).
 *
 * Handlers have one shape: decode -> validate -> act -> respond, with one
 * error: label that calls broker_respond_error().
 */
#ifndef EDDY_BROKER_SERVICE_H
#define EDDY_BROKER_SERVICE_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "src/common/msg.h"

typedef struct broker broker_t;
typedef struct broker_req broker_req_t;

typedef void (*service_handler_f)(broker_req_t *req, void *ctx);

struct service_handler {
    const char *topic; /* exact topic, e.g. "exec.run" */
    service_handler_f fn;
};

struct service_def {
    const char *name;                       /* "exec" */
    const struct service_handler *handlers; /* ends with {NULL, NULL} */
    int (*init)(broker_t *b, void **ctx);   /* -1 with errno: fatal */
    void (*disconnect)(void *ctx, uint64_t origin);
    void (*shutdown)(void *ctx);
    void (*destroy)(void *ctx);
};

/* --- requests ----------------------------------------------------------- */

/* The request message (borrowed; valid while the req is referenced). */
const msg_t *broker_req_msg(const broker_req_t *req);

/* Keep a request beyond the handler call (streaming responses). */
broker_req_t *broker_req_incref(broker_req_t *req);
void broker_req_decref(broker_req_t *req); /* accepts NULL */

/* An id of the connection the request came in on: a local client, or the
 * overlay peer that forwarded it.  Matches def->disconnect(origin). */
uint64_t broker_req_origin(const broker_req_t *req);

/* The uid of the client that sent the request (the instance owner or
 * root, since nobody else gets in). */
uint32_t broker_req_userid(const broker_req_t *req);

bool broker_req_is_cancel(const broker_req_t *req);
bool broker_req_is_streaming(const broker_req_t *req);

/* True if a and b are the same request (origin and matchtag), e.g. a
 * cancel and the request it cancels. */
bool broker_req_same(const broker_req_t *a, const broker_req_t *b);

/* Send a response.  'body' (may be NULL) is stolen, 'payload' copied.  For
 * a streaming request each call sends one response; pass MSG_FLAG_EOS in
 * 'flags' on the last.  A non-streaming request gets exactly one response;
 * further calls fail with EALREADY.  Responses to a NORESPONSE request or
 * to a vanished origin are dropped (return 0).  -1 with errno on error. */
int broker_respond(broker_req_t *req,
                   json_t *body,
                   const void *payload,
                   size_t payload_len,
                   int flags);

/* Send an error response (it also ends a stream). 'fmt' may be NULL. */
int broker_respond_error(broker_req_t *req, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* --- the broker, as services see it ------------------------------------- */

uint32_t broker_rank(const broker_t *b);
uint32_t broker_size(const broker_t *b);
const char *broker_hostname(const broker_t *b);
struct uv_loop_s *broker_loop(broker_t *b);

/* "local://RUNDIR/local-R": the URI of this broker's client socket, given
 * to processes the broker starts as EDDY_URI. */
const char *broker_local_uri(const broker_t *b);

void broker_log(broker_t *b, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Delay the broker's exit during shutdown until the matching release:
 * holds count, and the broker finishes once none is left (and its
 * children have gone), or after a bounded wait.  A release after the
 * broker gave up waiting, or outside a shutdown, is harmless. */
void broker_shutdown_hold(broker_t *b);
void broker_shutdown_release(broker_t *b);

/* --- requests from the broker itself (broker-internal RPC) ---------------
 *
 * A service sends a request to any rank (this one included) and gets the
 * responses through a callback, like a client would.  Lifecycle:
 *  1. broker_rpc() routes the request at once (to a local handler, or
 *     toward 'rank' on the overlay) and returns the rpc object.
 *  2. 'cb' is called once per response, always from the event loop, never
 *     from inside broker_rpc() itself.  The message is borrowed for the
 *     call.  A non-streaming rpc gets exactly one response; a streaming one
 *     (BROKER_RPC_STREAMING) gets responses until one carries MSG_FLAG_EOS
 *     or an errnum (an error always ends the stream).  A request that cannot
 *     be routed, or whose target or a hop toward it is lost, ends with an
 *     error response (EHOSTUNREACH and an errstr naming the rank), like any
 *     request.  broker_rpc_done() says whether the final response came.
 *  3. broker_rpc_cancel() asks the target to end a stream (a cancel
 *     request, as a client would send): responses keep coming until the
 *     service ends the stream.
 *  4. broker_rpc_destroy() frees it: no callback is made after that.  If
 *     the stream has not ended, a cancel is sent first.  Safe to call from
 *     inside the rpc's own callback (the memory is freed after it returns).
 * With BROKER_RPC_NORESPONSE no callback is ever made: the rpc is only a
 * handle to destroy (or pass NULL 'cb' and destroy it at once).
 */
typedef struct broker_rpc broker_rpc_t;

/* A response: 'msg' is borrowed; msg->errnum != 0 for an error response
 * (its text is msg_errstr(msg)). */
typedef void (*broker_rpc_f)(broker_rpc_t *rpc, const msg_t *msg, void *arg);

enum {
    BROKER_RPC_STREAMING = 0x01,  /* many responses wanted */
    BROKER_RPC_NORESPONSE = 0x02, /* none wanted */
};

/* Send 'topic' to 'rank' (a real rank, EDDY_RANK_ANY or
 * EDDY_RANK_UPSTREAM) with 'body' (stolen, also on failure; may be NULL)
 * and 'data' (copied; may be NULL).  Returns the rpc (caller destroys with
 * broker_rpc_destroy()), or NULL with errno EINVAL (bad topic, flags or
 * body) or ENOMEM, in which case 'cb' is never called. */
broker_rpc_t *broker_rpc(broker_t *b,
                         const char *topic,
                         uint32_t rank,
                         int flags,
                         json_t *body,
                         const void *data,
                         size_t len,
                         broker_rpc_f cb,
                         void *arg);

/* Like broker_rpc() with the raw payload of 'owner' (a request or
 * response this broker holds) passed on without a copy: the request
 * shares it and keeps a reference to 'owner'.  For bulk data forwarded to
 * several ranks.  NULL with errno EINVAL also for a NULL 'owner'. */
broker_rpc_t *broker_rpc_shared(broker_t *b,
                                const char *topic,
                                uint32_t rank,
                                int flags,
                                json_t *body,
                                const msg_t *owner,
                                broker_rpc_f cb,
                                void *arg);

/* Ask the target to end a streaming rpc.  No effect once it ended. */
void broker_rpc_cancel(broker_rpc_t *rpc);

/* True once the final response was delivered to the callback. */
bool broker_rpc_done(const broker_rpc_t *rpc);

/* The rank and topic the rpc was sent to (the rank as given). */
uint32_t broker_rpc_rank(const broker_rpc_t *rpc);
const char *broker_rpc_topic(const broker_rpc_t *rpc);

/* Free 'rpc' (see above).  Accepts NULL, leaves errno alone. */
void broker_rpc_destroy(broker_rpc_t *rpc);

/* The context of the service named 'name' once its init() succeeded
 * (services that work together, e.g. "job" and "job-io"), or NULL. */
void *broker_service_ctx(broker_t *b, const char *name);

/* --- the overlay, as rank 0's services need it ---------------------------- */

/* True if 'rank' is known to be lost (this broker's view: at rank 0 every
 * loss in the instance; elsewhere losses in its own subtree). */
bool broker_rank_lost(broker_t *b, uint32_t rank);

/* Job service tunables from the command line (broker.h). */
uint64_t broker_job_output_cap(const broker_t *b);
double broker_job_kill_grace(const broker_t *b);

/* The directory job tmpdirs are made in (eddy-broker --tmpdir-base, an
 * absolute path) and the instance's run directory, whose name job-exec
 * puts in each tmpdir's name. */
const char *broker_tmpdir_base(const broker_t *b);
const char *broker_rundir(const broker_t *b);

#endif /* !EDDY_BROKER_SERVICE_H */
