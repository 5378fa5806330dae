/* tcp_client.h - rank 0's listener for remote (tcp://) clients.
 *
 * Lifecycle (driven by local.c, which owns the client listeners):
 *  1. tcp_client_start() binds --client-listen=ADDR:PORT, writes a fresh
 *     token file (src/common/token.h) and RUNDIR/tcp-uri (the URI, for
 *     `eddy start`), and listens.
 *  2. Each accepted connection gets a "client.challenge" and must answer
 *     with "client.auth" within BROKER_AUTH_TIMEOUT_MS, in frames of at
 *     most BROKER_AUTH_FRAME_MAX bytes; at most BROKER_INBOUND_MAX
 *     connections may be authenticating at once.  A good answer turns the
 *     connection into a CONN_CLIENT (acting as the instance owner) greeted
 *     with a proof of the token; a bad one gets an EPERM greeting that
 *     says why, then is closed.
 *  3. tcp_client_stop() stops accepting, closes the connections still
 *     authenticating and removes the token and URI files.
 *  4. tcp_client_destroy() frees what is left (after the loop closed the
 *     handles).
 * Protocol: docs/remote.md.
 */
#ifndef EDDY_BROKER_TCP_CLIENT_H
#define EDDY_BROKER_TCP_CLIENT_H

#include "src/common/errprintf.h"
#include "broker.h"

struct tcp_client;

/* NULL with err if ADDR:PORT cannot be bound or the token not written. */
struct tcp_client *tcp_client_start(broker_t *b,
                                    const char *addr,
                                    eddy_error_t *err);
void tcp_client_stop(struct tcp_client *t);
/* Accepts NULL. */
void tcp_client_destroy(struct tcp_client *t);

/* The URI clients use ("tcp://HOST:PORT"). */
const char *tcp_client_uri(const struct tcp_client *t);

#endif /* !EDDY_BROKER_TCP_CLIENT_H */
