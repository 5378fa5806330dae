/* main.c - eddy-broker: one per node of an instance (see broker.h). */
#include <signal.h>
#include <stdio.h>

#include "bootstrap.h"
#include "broker.h"
#include "src/common/rmtree.h"
#include "src/common/stdfds.h"

int main(int argc, char **argv)
{
    struct broker_opts opts;
    struct bootstrap *bs = NULL;
    broker_t *b = NULL;
    eddy_error_t err = {{0}};
    int status = 1;

    /* A peer that hangs up must not kill us with SIGPIPE, and a closed
     * stdin/stdout must not be reused for a socket. */
    signal(SIGPIPE, SIG_IGN);
    if (stdfds_sanitize() < 0) {
        perror("eddy-broker: /dev/null");
        return 1;
    }

    /* 1. read the command line */
    if (broker_parse_args(argc, argv, &opts) < 0)
        return 1;
    /* 2. find our place in the instance */
    if (!(bs = bootstrap_create(&opts, &err)))
        goto error;
    if (bs->rundir)
        opts.rundir = bs->rundir;
    /* 3. check rundir and key, open the log and the loop */
    if (!(b = broker_create(&opts, bs, &err)))
        goto error;
    /* 4. start services, the client socket and the overlay */
    if (broker_start(b, bs, &err) < 0)
        goto error;
    /* 5. serve until shut down */
    status = broker_run(b);
    /* 6. close everything (and the run directory the bootstrap made) */
    broker_destroy(b);
    if (bs->own_rundir)
        (void)rmtree(bs->rundir, NULL);
    bootstrap_destroy(bs);
    return status;
error:
    fprintf(stderr, "eddy-broker[%ld]: %s\n", bs ? (long)bs->rank : opts.rank,
            err.text);
    if (b)
        broker_log(b, LOG_LEVEL_DEBUG, "startup failed: %s", err.text);
    broker_destroy(b);
    if (bs && bs->own_rundir)
        (void)rmtree(bs->rundir, NULL);
    bootstrap_destroy(bs);
    bootstrap_abort(err.text);
    return 1;
}
