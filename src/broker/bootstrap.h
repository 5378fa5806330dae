/* bootstrap.h - how a broker learns its place in the instance.
 *
 * Every bootstrap method answers the same questions: this broker's rank,
 * the instance size, where to listen for children (an inherited socket or
 * an address to bind) and where the parent listens.  The broker itself
 * never cares which method answered.
 *
 * Methods:
 *   "args"   --rank/--size with --listen-fd or --listen and --parent
 *            (`eddy start --test-size=N` binds the sockets and passes them)
 *   "hosts"  --hosts=FILE: the file names every rank's host and address
 *   "pmi"    --bootstrap=pmi, or no --rank/--size/--hosts and PMI_FD set
 *            (a parent eddy's job shell, MPICH's mpiexec): rank and size
 *            from PMI-1; each broker with children binds a socket on an
 *            address of its host and puts it in the PMI key-value space,
 *            rank 0 puts a new instance key, one fence, then each reads
 *            its parent's address and the key (bootstrap_pmi.c).  Without
 *            --rundir it makes a private one (own_rundir).
 *            The exchange is written once against struct pmi_backend:
 *            eddy's own PMI-1 client (linked in), or, under
 *            `srun --mpi=pmi2`, Slurm's libpmi2.so.0 loaded at run time
 *            (pmi2.c; EDDY_PMI2_LIBRARY names another file).
 *
 * Lifecycle:
 *  1. bootstrap_create(opts, err) picks the method from the options and
 *     fills a struct bootstrap (all validation happens here, so a bad
 *     combination of options fails before anything is opened).
 *  2. The broker reads the fields.
 *  3. bootstrap_destroy() frees it (an inherited listen_fd is not closed:
 *     it belongs to the overlay once the broker starts).  It never
 *     removes own_rundir: the broker's main() does that once the broker
 *     has exited.
 *  On a failed bootstrap_create(), the caller reports the error, then
 *  calls bootstrap_abort() so that a PMI job does not wait for us.
 */
#ifndef EDDY_BROKER_BOOTSTRAP_H
#define EDDY_BROKER_BOOTSTRAP_H

#include <stdbool.h>
#include <stdint.h>

#include "eddy/core.h"

struct broker_opts;

struct bootstrap {
    const char *method; /* "args", "hosts", "pmi" */
    uint32_t rank;
    uint32_t size;
    uint32_t fanout;
    int listen_fd;      /* inherited listening TCP socket, or -1 */
    char *listen_addr;  /* "ADDR:PORT" to bind, or NULL */
    char *parent_addr;  /* "ADDR:PORT" of the parent, NULL at rank 0 */
    char *hostname;     /* this broker's host name */
    bool own_listen_fd; /* pmi: we bound listen_fd (the overlay takes it) */
    char *rundir;       /* pmi without --rundir: the one made, else NULL */
    bool own_rundir;    /* rundir was made here: remove it at exit */
    bool have_key;      /* pmi: the instance key is 'key', not a file */
    unsigned char key[32];
};

/* NULL with errno (EINVAL for inconsistent options) and 'err' filled. */
struct bootstrap *bootstrap_create(const struct broker_opts *o,
                                   eddy_error_t *err);
void bootstrap_destroy(struct bootstrap *bs); /* accepts NULL */

/* After a failed bootstrap_create() by the PMI method: PMI_Abort() the
 * job with 'why' (never returns) if PMI was left initialised; otherwise
 * a no-op. */
void bootstrap_abort(const char *why);

/* The PMI method (bootstrap_pmi.c): fills rank, size, hostname,
 * listen_fd, parent_addr, key and, without o->rundir, rundir.
 * -1 with errno and 'err' on failure. */
int bootstrap_pmi(struct bootstrap *bs,
                  const struct broker_opts *o,
                  eddy_error_t *err);

/* One PMI client as the "pmi" method sees it.  A process has one PMI
 * connection, so a backend keeps its state in its own file.
 *  1. init() connects and gives rank and size (-1 with errno and 'err';
 *     on failure nothing is left open).
 *  2. put() each pair, fence() once (collective), get() the others' pairs
 *     (src_rank: the rank that put it, a hint some servers use).
 *     These return 0 or the backend's own nonzero error code.
 *  3. finalize(), or abort() to end the whole job (does not return). */
struct pmi_backend {
    const char *name; /* "PMI-1", "PMI-2": for messages */
    int (*init)(int *rank, int *size, eddy_error_t *err);
    int (*put)(const char *key, const char *val);
    int (*fence)(void);
    int (*get)(int src_rank, const char *key, char *val, int len);
    void (*finalize)(void);
    void (*abort)(const char *why);
};

/* Slurm's PMI-2 through libpmi2.so.0, loaded by the first init() (pmi2.c).
 * Its init() fails with ENOENT when the library cannot be loaded, ENOSYS
 * when a symbol is missing, EPROTO when PMI2_Init() fails. */
extern const struct pmi_backend pmi2_backend;

#endif /* !EDDY_BROKER_BOOTSTRAP_H */
