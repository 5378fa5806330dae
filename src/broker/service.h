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

#endif /* !EDDY_BROKER_SERVICE_H */
