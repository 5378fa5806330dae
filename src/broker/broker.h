/* broker.h - the eddy-broker object, shared by the files of src/broker/
 * (services see only service.h).
 *
 * Command line (normally written by `eddy start`):
 *
 *   eddy-broker --rank=R --size=N [--fanout=K] --rundir=DIR [--key=FILE]
 *               [--listen-fd=FD | --listen=ADDR:PORT] [--parent=ADDR:PORT]
 *               [--hosts=FILE] [--ready-fd=FD] [--heartbeat=SECONDS]
 *               [--heartbeat-timeout=SECONDS] [--log-level=N]
 *               [--hostname=NAME] [--cores=N]
 *               [--job-output-cap=BYTES] [--job-kill-grace=SECONDS]
 *               [--tmpdir-base=DIR]
 *
 *   --rank, --size   place in the instance (--size may come from --hosts)
 *   --fanout         tree fanout (default 2)
 *   --rundir         instance directory: mode 0700, owned by the user
 *                    running the broker; holds local-R (client socket,
 *                    0600), broker-R.log and, by default, the key
 *   --key            64 hex chars (32 bytes), mode 0600 (default DIR/key)
 *   --listen-fd      an inherited TCP socket, already bound and listening
 *                    (test-size mode: `eddy start` binds 127.0.0.1:0 for
 *                    every rank that has children)
 *   --listen         or bind ADDR:PORT here
 *   --parent         the parent's ADDR:PORT (every rank but 0)
 *   --hosts          a hosts file (rank, host, addr:port): gives the listen
 *                    address of this rank and of its parent, and the size
 *   --ready-fd       written "ready\n" and closed once the whole tree below
 *                    this broker is up (at rank 0: the whole instance)
 *   --heartbeat      idle-link heartbeat period (default 1 s)
 *   --heartbeat-timeout  a peer silent this long is lost (default 5 s)
 *   --log-level      3 err .. 7 debug (default 6 info)
 *   --job-output-cap bytes of output kept per job by job-io at rank 0
 *                    (default BROKER_JOB_OUTPUT_CAP)
 *   --job-kill-grace seconds between SIGTERM and SIGKILL when a job is
 *                    cancelled (default BROKER_JOB_KILL_GRACE)
 *   --client-listen  rank 0 only: accept tcp://ADDR:PORT clients that
 *                    hold the instance token (tcp_client.c, docs/remote.md)
 *   --token-file     where --client-listen writes the token (default:
 *                    $XDG_RUNTIME_DIR/eddy/... or ~/.local/state/eddy/...)
 *   --tmpdir-base    an absolute path: where job-exec makes each job's
 *                    tmpdir on this node (default $TMPDIR if absolute,
 *                    else /tmp); not checked at startup: a base that does
 *                    not work fails the jobs, naming it
 *   EDDY_BROKER_TRACE=1 prints every overlay message to stderr (=2: and
 *   every client message).
 *
 * Exit status: 0 after a clean shutdown; 1 on a startup error (one line on
 * stderr, "eddy-broker[R]: ..."), when the parent is lost, or when
 * authentication with the parent fails.  Log lines go to RUNDIR/broker-R.log
 * (and err-level lines also to stderr); the last BROKER_LOG_LINES are kept
 * for broker.dmesg.  A broker refuses to start if RUNDIR/local-R answers
 * (the same rank is already running).
 *
 * Lifecycle of a broker:
 *  1. broker_parse_args() reads the command line into broker_opts.
 *  2. bootstrap_create() (bootstrap.h) fixes rank, size, listen and parent
 *     addresses.
 *  3. broker_create() checks the rundir and key, opens the log and the
 *     loop.  broker_start() starts the services, the client listener
 *     (local.c) and the overlay (overlay.c): listen for children, connect
 *     and authenticate to the parent.
 *  4. The tree comes up bottom-up: a broker sends "overlay.ready" to its
 *     parent once it is authenticated and all its children are ready (or
 *     lost); rank 0 then logs "instance of N brokers ready" and writes
 *     --ready-fd.
 *  5. broker_run() runs the loop.  Requests are routed by target rank
 *     (local delivery to the service tables, or forwarded to a child or the
 *     parent); events flood down from rank 0.
 *  6. Shutdown: "broker.shutdown" at rank 0 (or SIGTERM/SIGINT there)
 *     publishes the event "broker.shutdown"; every broker forwards it to
 *     its children, calls each service's shutdown(), stops accepting,
 *     waits (up to BROKER_SHUTDOWN_TIMEOUT_MS) for its children to leave
 *     and (up to BROKER_SHUTDOWN_HOLD_MS) for every service hold
 *     (broker_shutdown_hold()) to be released,
 *     then says goodbye to its parent, lets the links to its parent and
 *     clients flush what is queued (up to BROKER_LINGER_MS), closes
 *     everything and exits 0.  SIGTERM at rank R > 0 shuts down R's
 *     subtree the same way and R's parent sees it leave ("overlay.goodbye").
 *  7. Losing the parent (EOF or heartbeat timeout), or failing to
 *     authenticate to it, ends the broker with exit status 1.  Losing a
 *     child marks its whole subtree lost (no reconnection): requests to it
 *     fail at once with EHOSTUNREACH, and rank 0 is told ("overlay.lost").
 *  8. broker_destroy() closes every handle, drains and closes the loop.
 *
 * Connections (struct conn) are the unit of origin: every request keeps the
 * id of the connection it came in on, and a connection's id is never
 * reused, so a response to a vanished origin is simply dropped.
 */
#ifndef EDDY_BROKER_BROKER_H
#define EDDY_BROKER_BROKER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <uv.h>

#include "src/common/log.h"
#include "src/common/msg.h"
#include "src/common/msgconn.h"
#include "keymap.h"
#include "route.h"
#include "service.h"

struct bootstrap;

/* Named limits. */
#define BROKER_KEY_SIZE 32              /* crypto_auth_KEYBYTES */
#define BROKER_NONCE_SIZE 32            /* challenge nonces */
#define BROKER_AUTH_FRAME_MAX 4096      /* hello/challenge are tiny */
#define BROKER_AUTH_TIMEOUT_MS 5000     /* silent unauthenticated peers */
#define BROKER_CONNECT_TIMEOUT_MS 60000 /* parent not up yet (hosts mode) */
#define BROKER_CONNECT_RETRY_MS 250
#define BROKER_SHUTDOWN_TIMEOUT_MS 5000 /* wait for children to leave */
/* Wait for service holds (broker_shutdown_hold()): shorter than the above,
 * so that a parent still listens when a stuck child gives up. */
#define BROKER_SHUTDOWN_HOLD_MS 3000
#define BROKER_LINGER_MS 1000               /* flush before a refusal close */
#define BROKER_CLIENT_QUEUE_MAX (64u << 20) /* a client that reads nothing */
#define BROKER_LOG_LINES 2000               /* broker.dmesg ring */
#define BROKER_FANOUT_MAX 1024
/* Unauthenticated broker links at once: real children are few, and each
 * costs a read buffer until it times out. */
#define BROKER_INBOUND_MAX 64
/* Output kept per job (job-io): enough for any sane job's log, small
 * enough that a runaway job cannot fill rank 0's memory. */
#define BROKER_JOB_OUTPUT_CAP (64ull << 20)
#define BROKER_JOB_KILL_GRACE 5.0 /* seconds from SIGTERM to SIGKILL */
/* The origin id of requests the broker sends itself (broker_rpc()):
 * connection ids count up from 1 and never get there. */
#define BROKER_RPC_ORIGIN UINT64_MAX

struct broker_opts {
    long rank; /* -1 if not given */
    long size; /* -1 if not given */
    long fanout;
    const char *rundir;
    const char *keyfile; /* NULL: RUNDIR/key */
    int listen_fd;       /* -1 if not given */
    const char *listen_addr;
    const char *parent_addr;
    const char *hosts;
    int ready_fd; /* -1 if not given */
    double heartbeat;
    double heartbeat_timeout;
    int log_level;
    const char *hostname;
    long cores; /* 0: detect from the CPU affinity mask */
    uint64_t job_output_cap;
    double job_kill_grace;
    const char *tmpdir_base; /* absolute */
    const char *bootstrap;   /* "pmi", or NULL: args or hosts */
    /* rank 0: tcp:// clients on ADDR:PORT (tcp_client.c) */
    const char *client_listen;
    /* where rank 0 writes their token (NULL: the default places) */
    const char *token_file;
};

enum conn_kind {
    CONN_CLIENT,      /* local client, authenticated by SO_PEERCRED */
    CONN_INBOUND,     /* a broker connected to us, not yet authenticated */
    CONN_CHILD,       /* an authenticated child broker */
    CONN_PARENT_AUTH, /* our link to the parent, authenticating */
    CONN_PARENT,      /* our authenticated link to the parent */
};

struct conn {
    broker_t *b;
    uint64_t id; /* never 0, never reused */
    enum conn_kind kind;
    msgconn_t *mc; /* NULL once closed */
    char name[96]; /* "uid 1000 pid 42", "127.0.0.1:4000" */
    uint32_t rank; /* peer rank (children, parent) */
    uint32_t uid;  /* peer uid (clients) */
    uint32_t pid;
    uint32_t next_tag; /* matchtags of requests we send on it */
    uint64_t t_open;   /* uv_now() ms */
    uint64_t t_recv;
    uint64_t t_send;
    bool lingering; /* closing once its queue is flushed */
    uint64_t linger_deadline;
    bool leaving;             /* peer said goodbye: its EOF is no loss */
    uint64_t pending_refused; /* requests refused: too many pending */
    unsigned char nonce[BROKER_NONCE_SIZE]; /* challenge sent / our nonce */
    struct conn *next; /* b->conns_list, or b->zombies once dropped */
    struct conn *prev;
};

enum broker_state {
    BROKER_STARTING,
    BROKER_RUNNING,
    BROKER_SHUTDOWN, /* services told, waiting for children */
    BROKER_FINISHED, /* everything closed, loop draining */
};

struct service_instance {
    const struct service_def *def;
    void *ctx;
    bool inited;
};

struct topic_entry {
    const char *topic;
    service_handler_f fn;
    struct service_instance *svc;
};

struct subscription {
    broker_req_t *req; /* NULL once dropped (swept later) */
    char *prefix;
    struct subscription *next;
};

struct overlay;
struct local;

struct broker {
    uv_loop_t loop;
    struct broker_opts opts;
    uint32_t rank;
    uint32_t size;
    uint32_t fanout;
    char *hostname;
    uint32_t ncores; /* cores this broker offers to jobs */
    char *rundir;
    char *local_path;
    char *local_uri;
    uid_t uid;
    unsigned char key[BROKER_KEY_SIZE];
    logbuf_t *log;
    FILE *logfile;
    uint64_t t_start_ns;
    bool trace;
    bool trace_clients;
    int delivering; /* nesting of event delivery */

    struct service_instance *svcs;
    size_t nsvcs;
    struct topic_entry *topics; /* sorted by topic */
    size_t ntopics;

    keymap_t *conns; /* id -> struct conn */
    struct conn *conns_list;
    struct conn *zombies; /* dropped, freed from the reaper */
    uint64_t next_conn_id;
    route_t *route;
    struct subscription *subs;

    struct overlay *ov;
    struct local *local;

    uv_signal_t sigterm;
    uv_signal_t sigint;
    uv_timer_t shutdown_timer;
    uv_timer_t hold_timer;
    uv_timer_t linger_timer;
    uv_timer_t exit_timer;
    uv_check_t reaper;
    bool handles_init;

    enum broker_state state;
    int exit_code;
    /* Services still finishing their shutdown (broker_shutdown_hold()):
     * the broker does not close its links until this drops to 0 or
     * BROKER_SHUTDOWN_HOLD_MS has passed. */
    unsigned shutdown_holds;
    bool holds_expired; /* BROKER_SHUTDOWN_HOLD_MS passed: go anyway */

    /* broker_rpc() (rpc.c): live rpcs by matchtag, and the responses
     * waiting to be handed to their callbacks from rpc_timer. */
    keymap_t *rpcs;
    uint32_t rpc_next_tag;
    struct rpc_queued *rpc_head;
    struct rpc_queued *rpc_tail;
    uv_timer_t rpc_timer;
};

/* The table of compiled-in services (services.c), NULL-terminated. */
extern const struct service_def *const broker_services[];

/* --- broker.c: lifecycle ------------------------------------------- */

/* Parse argv into 'o'.  Prints a message to stderr and returns -1 on a
 * usage error (this is main's helper, not library code). */
int broker_parse_args(int argc, char **argv, struct broker_opts *o);

/* Check rundir and key, open the log and the loop.  NULL with 'err'. */
broker_t *broker_create(const struct broker_opts *o,
                        const struct bootstrap *bs,
                        eddy_error_t *err);

/* Start services, the client listener and the overlay.  -1 with 'err'. */
int broker_start(broker_t *b, const struct bootstrap *bs, eddy_error_t *err);

/* Run until shut down; returns the exit status. */
int broker_run(broker_t *b);

/* Close every handle, drain and close the loop, free.  Accepts NULL. */
void broker_destroy(broker_t *b);

void broker_vlog(broker_t *b, int level, const char *fmt, va_list ap);

/* Begin the clean shutdown of this broker and its subtree. */
void broker_shutdown(broker_t *b, const char *why);

/* End at once with 'exit_code' (parent lost, auth failure). */
void broker_abort(broker_t *b, int exit_code);

/* Called by the overlay when a child left: ends the shutdown wait once
 * the last one is gone. */
void broker_children_gone(broker_t *b);

/* In BROKER_FINISHED: stop the loop's last handles once nothing lingers. */
void broker_finished_check(broker_t *b);

/* Publish "broker.shutdown" from rank 0 to the whole instance. */
void broker_shutdown_instance(broker_t *b, const char *why);

/* --- broker.c: connections ------------------------------------------ */

/* Wrap a connected stream (ownership passes, also on failure) in a new
 * conn of 'kind'.  NULL with errno. */
struct conn *conn_create(broker_t *b,
                         enum conn_kind kind,
                         uv_stream_t *stream,
                         const char *name);

struct conn *conn_lookup(broker_t *b, uint64_t id);

/* Rename c (logs, traces). */
void conn_set_name(struct conn *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Send on c, stamping t_send.  A client whose unread queue grows past
 * BROKER_CLIENT_QUEUE_MAX is dropped.  -1 with errno. */
int conn_send(struct conn *c, const msg_t *msg);

/* Close c now and clean up after it (pending requests, subscriptions,
 * services, overlay loss handling).  'reason' is logged.  Safe from any
 * callback: the memory is freed later. */
void conn_drop(struct conn *c, int errnum, const char *reason);

/* The linger timer's callback, and whether any conn lingers. */
void conn_linger_cb(uv_timer_t *t);
bool conn_any_lingering(broker_t *b);

/* Free the memory of dropped conns now (end of broker_destroy). */
void conn_free_zombies(broker_t *b);

/* Close c once its queued output is written (or after BROKER_LINGER_MS),
 * without loss handling: used after a refusal was sent. */
void conn_linger(struct conn *c);

/* --- router.c: routing --------------------------------------------- */

/* A message from an authenticated conn (client, child, parent). Steals. */
void broker_dispatch(struct conn *c, msg_t *msg);

/* After conn c went away: fail requests routed through it, cancel those
 * it originated, drop its subscriptions, tell the services. */
void broker_conn_cleanup(broker_t *b, struct conn *c, const char *reason);

/* Drop every subscription (end of shutdown). */
void broker_unsubscribe_all(broker_t *b);

/* Route a request that arrived on 'from' (NULL: made by this broker,
 * which then wants no response).  Steals msg. */
void broker_route_request(broker_t *b, struct conn *from, msg_t *msg);

/* Deliver an event locally and forward it to the children.  Borrows. */
void broker_deliver_event(broker_t *b, const msg_t *msg);

/* Respond to a request with a custom topic (event streams). */
int broker_respond_topic(broker_req_t *req,
                         const char *topic,
                         json_t *body,
                         const void *payload,
                         size_t len,
                         int flags);

/* Subscriptions (broker.subscribe). */
int broker_subscribe(broker_t *b, broker_req_t *req, const char *prefix);
void broker_unsubscribe(broker_t *b, const broker_req_t *cancel);

/* Whether 'origin' is an authenticated child broker (internal topics). */
struct conn *broker_origin_child(broker_t *b, uint64_t origin);

/* Route a request on behalf of 'origin' (a conn id, BROKER_RPC_ORIGIN, or 0
 * for none); 'from' is the conn it arrived on, or NULL.  Steals msg. */
void broker_route_request_origin(broker_t *b,
                                 struct conn *from,
                                 uint64_t origin,
                                 msg_t *msg);

/* --- rpc.c: broker-internal requests (service.h broker_rpc()) -------- */

/* Set up / tear down the rpc state (broker_create, broker_destroy): the
 * teardown frees every rpc still alive and drops queued responses. */
int rpc_init(broker_t *b);
void rpc_fini(broker_t *b);

/* A response addressed to BROKER_RPC_ORIGIN (borrowed): queued for the
 * rpc's callback. */
void rpc_response(broker_t *b, const msg_t *msg);

/* --- overlay.c ------------------------------------------------------ */

int overlay_create(broker_t *b, const struct bootstrap *bs, eddy_error_t *err);
/* Start listening and connecting.  -1 with err. */
int overlay_start(broker_t *b, eddy_error_t *err);
void overlay_destroy(broker_t *b);

/* Messages on an unauthenticated peer link (CONN_INBOUND,
 * CONN_PARENT_AUTH).  Steals msg. */
void overlay_recv_unauth(struct conn *c, msg_t *msg);

/* A peer link closed (called from conn_drop before cleanup). */
void overlay_conn_closed(struct conn *c, int errnum, const char *reason);

/* The authenticated link for next hop 'rank' (a child or the parent), or
 * NULL with 'err' saying why. */
struct conn *overlay_link(broker_t *b, uint32_t rank, eddy_error_t *err);

/* lost_by[] for route_resolve(). */
const uint32_t *overlay_lost_by(broker_t *b);

void overlay_forward_event(broker_t *b, const msg_t *msg);
void overlay_stop_listening(broker_t *b);
/* Number of children still connected (authenticating or up). */
unsigned overlay_children_connected(broker_t *b);
/* Send "overlay.goodbye" to the parent and close our end after it. */
void overlay_leave(broker_t *b);
/* Close all peer links without loss handling (end of shutdown). */
void overlay_close_all(broker_t *b);
/* "ADDR:PORT" we listen on, or NULL. */
const char *overlay_listen_addr(broker_t *b);

/* Internal service hooks (overlay_svc.c). */
int overlay_child_ready(broker_t *b,
                        struct conn *child,
                        json_t *ranks,
                        eddy_error_t *err);
void overlay_mark_lost(broker_t *b, uint32_t rank, const char *reason);
void overlay_child_goodbye(broker_t *b, struct conn *child);
json_t *overlay_status(broker_t *b);

/* --- local.c -------------------------------------------------------- */

/* Bind RUNDIR/local-R (0600) and listen.  -1 with err. */
int local_start(broker_t *b, eddy_error_t *err);
/* Stop accepting and remove the socket file. */
void local_stop(broker_t *b);
void local_destroy(broker_t *b);

#endif /* !EDDY_BROKER_BROKER_H */
