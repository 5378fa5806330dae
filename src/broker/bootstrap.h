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
 * A PMI method would slot in here: put this broker's listen address in
 * the KVS, fence, then read the parent's.
 *
 * Lifecycle:
 *  1. bootstrap_create(opts, err) picks the method from the options and
 *     fills a struct bootstrap (all validation happens here, so a bad
 *     combination of options fails before anything is opened).
 *  2. The broker reads the fields.
 *  3. bootstrap_destroy() frees it (an inherited listen_fd is not closed:
 *     it belongs to the overlay once the broker starts).
 */
#ifndef EDDY_BROKER_BOOTSTRAP_H
#define EDDY_BROKER_BOOTSTRAP_H

#include <stdint.h>

#include "eddy/core.h"

struct broker_opts;

struct bootstrap {
    const char *method; /* "args", "hosts" */
    uint32_t rank;
    uint32_t size;
    uint32_t fanout;
    int listen_fd;     /* inherited listening TCP socket, or -1 */
    char *listen_addr; /* "ADDR:PORT" to bind, or NULL */
    char *parent_addr; /* "ADDR:PORT" of the parent, NULL at rank 0 */
    char *hostname;    /* this broker's host name */
};

/* NULL with errno (EINVAL for inconsistent options) and 'err' filled. */
struct bootstrap *bootstrap_create(const struct broker_opts *o,
                                   eddy_error_t *err);
void bootstrap_destroy(struct bootstrap *bs); /* accepts NULL */

#endif /* !EDDY_BROKER_BOOTSTRAP_H */
