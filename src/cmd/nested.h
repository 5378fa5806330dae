/* nested.h - what `eddy alloc`, `eddy batch`, `eddy uri ID` and `eddy proxy`
 * share: nested instances, i.e. jobs whose tasks are one
 * `eddy start --pmi --print-uri` per node (docs/alloc.md).
 *
 *  1. nested_parse() reads the allocation options ([-N N] [-n T] [-t T]
 *     [--job-name] [-o BROKER-OPT]... [-v] [--tcp]) and leaves optind at
 *     CMD.
 *  2. nested_submit() submits the broker job (with 'script' as rank 0's
 *     initial program for batch, or none) and returns its ID.  Its tasks
 *     are `eddy start --pmi --print-uri --listen=auto`: rank 0 also
 *     listens for tcp:// clients on its host's address.
 *  3. nested_uri_wait() follows the job's output until rank 0 announces
 *     "EDDY_URI=URI" on stderr (eddy start --print-uri, once the whole
 *     nested tree is up; the "EDDY_TCP_URI=URI" line comes just before),
 *     forwarding other lines to our stderr if asked.
 *  4. nested_connect() picks how to reach it from here: the local:// URI
 *     when that socket answers (same host), else the tcp:// URI with the
 *     token fetched, sealed, from rank 0's node through the parent
 *     (EDDY_TOKEN_FILE then names a private copy); nested_run() runs a
 *     command against it.
 *  5. nested_shutdown() asks the nested rank 0 to shut the instance down;
 *     nested_conn_release() removes the private token copy.
 *
 * Commands are programs: these print "eddy CMD: why" and exit(1) on fatal
 * errors, except where a return value is documented.  nested_connect()
 * returns, so that alloc can cancel its job before it exits.
 */
#ifndef EDDY_CMD_NESTED_H
#define EDDY_CMD_NESTED_H

#include <stdbool.h>

#include "eddy/core.h"
#include "eddy/job.h"

#define NESTED_MAX_BROKER_OPTS 16

/* The option text shared by the usage of alloc and batch. */
#define NESTED_USAGE                                                           \
    "  -N, --nodes=N           nodes (brokers) of the allocation (default "    \
    "1)\n"                                                                     \
    "  -n, --ntasks=T          T cores in all, T/N on each node (default:\n"   \
    "                          whole nodes, given to the job alone)\n"         \
    "  -t, --time-limit=S      time limit of the allocation, in seconds\n"     \
    "      --job-name=NAME     name shown by 'eddy jobs' (default: the\n"      \
    "                          command's name)\n"                              \
    "  -o, --broker-opt=OPT    pass OPT to every nested broker (repeatable)\n" \
    "  -v, --verbose           say when the instance is ready and gone\n"      \
    "      --timeout=S         give up if the instance is not ready in S\n"    \
    "                          seconds (default 60)\n"

struct nested_opts {
    int nodes;
    int cores;         /* -n: cores in all (0: whole nodes, exclusive) */
    double time_limit; /* 0: none */
    const char *name;
    const char *broker_opts[NESTED_MAX_BROKER_OPTS];
    int nbroker_opts;
    bool verbose;
    bool tcp; /* --tcp: reach the instance by tcp:// even on its host */
    double timeout;
};

/* How a command reaches a nested instance (nested_connect()). */
struct nested_conn {
    char *uri;     /* local:// or tcp:// */
    char *tokdir;  /* private directory of the fetched token, or NULL */
    char *tokfile; /* tokdir/token (also in $EDDY_TOKEN_FILE), or NULL */
};

/* Parse the options above from argv (getopt, stops at the first non-option
 * or "--"); optind is left at CMD.  Exits on bad input. */
void nested_parse(const char *cmd,
                  const char *usage,
                  int argc,
                  char **argv,
                  struct nested_opts *o);

/* Submit the nested instance's broker job through 'h'; rank 0 runs
 * script_argv (NULL: none, the instance serves until shut down).  Returns
 * the job ID; exits with the reason if the job is refused. */
eddy_jobid_t nested_submit(const char *cmd,
                           eddy_t *h,
                           const struct nested_opts *o,
                           int script_argc,
                           char **script_argv);

/* Wait until job 'id' announces its nested URI, the job ends, or
 * 'timeout' seconds pass (<= 0: no limit).  'forward': copy the job's
 * other output to our stderr meanwhile.  Returns the local:// URI (caller
 * frees) and, if 'tcp_uri' is not NULL, the tcp:// URI announced before
 * it in '*tcp_uri' (caller frees; NULL if none was); or NULL with errno
 * ESRCH (the job ended without one: not a nested instance, or it
 * failed), ETIMEDOUT, or the errno of the attach (ENOENT: no such job).
 * '*tcp_uri' is written only on success. */
char *nested_uri_wait(
    eddy_t *h, eddy_jobid_t id, double timeout, bool forward, char **tcp_uri);

/* Whether a client of ours gets in at 'local' (a local:// URI): true on
 * the nested rank 0's host (or on a host sharing its file system and
 * sockets, like the brokers of one machine). */
bool nested_local_ok(const char *local);

/* Fill 'c' with the way to reach job 'id''s nested instance announced as
 * 'local' and 'tcp' (may be NULL): 'local' if nested_local_ok() and not
 * 'want_tcp', else 'tcp', whose token is fetched from the nested rank 0's
 * node through the parent 'h' (exec.run of `eddy proxy --seal-token`:
 * the token crosses the parent sealed to a key pair made here for this
 * call), written 0600 into a new private directory and named by
 * $EDDY_TOKEN_FILE (set in our environment, so CMD and
 * nested_shutdown() use it).  Checks that the chosen URI answers.  0, or
 * -1 after saying why on stderr (naming 'cmd' and the job), with 'c'
 * empty and no token copy left. */
int nested_connect(const char *cmd,
                   eddy_t *h,
                   eddy_jobid_t id,
                   const char *local,
                   const char *tcp,
                   bool want_tcp,
                   struct nested_conn *c);

/* Remove the token copy of 'c' and free its strings.  Accepts NULL. */
void nested_conn_release(struct nested_conn *c);

/* Catch SIGTERM and SIGHUP for nested_run() to pass on; the first one
 * caught since (0 if none). */
void nested_catch_signals(void);
int nested_got_signal(void);

/* Run argv (argc 0: an interactive $SHELL) with EDDY_URI=uri and the rest
 * of our environment, and wait for it; a SIGTERM/SIGHUP caught meanwhile
 * is passed on, SIGINT and SIGQUIT are left to it.  Its wait status. */
int nested_run(const char *cmd, const char *uri, int argc, char **argv);

/* Ask the nested instance at 'uri' to shut down.  0, or -1 with errno
 * (ENOENT/ECONNREFUSED: it is already going). */
int nested_shutdown(const char *uri);

/* `eddy proxy --seal-token=PUBKEY FILE`, run on the nested rank 0's node
 * by nested_connect(): print the token in FILE (token_read(): ours, mode
 * 0600) sealed (libsodium crypto_box_seal) to PUBKEY (64 hex digits), in
 * hex.  0, or 1 after saying why on stderr. */
int nested_seal_token(const char *pubkey_hex, const char *path);

/* This executable's path (for the job's command), or "eddy". */
const char *nested_self(void);

#endif /* !EDDY_CMD_NESTED_H */
