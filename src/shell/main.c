/* eddy-shell - runs one job's tasks on one node, started by the broker's
 * job-exec service as `eddy-shell --jobid=ID` with EDDY_URI set to that
 * broker (docs/jobs-protocol.md). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/jobslice.h"
#include "src/common/stdfds.h"
#include "src/shell/shell.h"

static const char usage[] =
    "Usage: eddy-shell --jobid=ID\n"
    "Run job ID's tasks on this node.  Started by eddy-broker, which sets\n"
    "EDDY_URI; not meant to be run by hand.\n";

/* The job ID from --jobid=ID; -1 if the arguments are not exactly that. */
static int parse_args(int argc, char **argv, uint64_t *id)
{
    const char *s;
    char *end;
    unsigned long long v;

    if (argc != 2 || strncmp(argv[1], "--jobid=", 8) != 0)
        return -1;
    s = argv[1] + 8;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *end || *s == '-' || v > JOBSLICE_ID_MAX)
        return -1;
    *id = v;
    return 0;
}

int main(int argc, char **argv)
{
    struct shell *sh;
    eddy_error_t err = {{0}};
    uint64_t id;
    int rc;

    /* which job */
    if (parse_args(argc, argv, &id) < 0) {
        fputs(usage, stderr);
        return 2;
    }
    /* fds 0-2 open, so that no pipe of ours lands on them */
    (void)stdfds_sanitize();
    /* connect to the broker and get this node's slice of the job */
    if (!(sh = shell_create(id, &err))) {
        fprintf(stderr, "eddy-shell: job %ju: %s\n", (uintmax_t)id, err.text);
        return 1;
    }
    /* fork every local task held, then release them together */
    if (shell_start(sh, &err) < 0) {
        fprintf(stderr, "eddy-shell: job %ju: %s\n", (uintmax_t)id, err.text);
        shell_destroy(sh);
        return 1;
    }
    /* forward I/O, reap and report until the job is over here */
    rc = shell_run(sh);
    shell_destroy(sh);
    return rc;
}
