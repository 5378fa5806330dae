/* nested.h - what `eddy alloc`, `eddy batch`, `eddy uri ID` and `eddy proxy`
 * share: nested instances, i.e. jobs whose tasks are one
 * `eddy start --pmi --print-uri` per node (docs/alloc.md).
 *
 *  1. nested_parse() reads the allocation options ([-N N] [-t T]
 *     [--job-name] [-o BROKER-OPT]... [-v]) and leaves optind at CMD.
 *  2. nested_submit() submits the broker job (with 'script' as rank 0's
 *     initial program for batch, or none) and returns its ID.
 *  3. nested_uri_wait() follows the job's output until rank 0 announces
 *     "EDDY_URI=URI" on stderr (eddy start --print-uri, once the whole
 *     nested tree is up), forwarding other lines to our stderr if asked.
 *  4. nested_shutdown() asks the nested rank 0 to shut the instance down.
 *
 * Commands are programs: these print "eddy CMD: why" and exit(1) on fatal
 * errors, except where a return value is documented.
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
    "  -t, --time-limit=S      time limit of the allocation, in seconds\n"     \
    "      --job-name=NAME     name shown by 'eddy jobs' (default: the\n"      \
    "                          command's name)\n"                              \
    "  -o, --broker-opt=OPT    pass OPT to every nested broker (repeatable)\n" \
    "  -v, --verbose           say when the instance is ready and gone\n"      \
    "      --timeout=S         give up if the instance is not ready in S\n"    \
    "                          seconds (default 60)\n"

struct nested_opts {
    int nodes;
    double time_limit; /* 0: none */
    const char *name;
    const char *broker_opts[NESTED_MAX_BROKER_OPTS];
    int nbroker_opts;
    bool verbose;
    double timeout;
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
 * other output to our stderr meanwhile.  Returns the URI (caller frees),
 * or NULL with errno ESRCH (the job ended without one: not a nested
 * instance, or it failed), ETIMEDOUT, or the errno of the attach
 * (ENOENT: no such job). */
char *nested_uri_wait(eddy_t *h, eddy_jobid_t id, double timeout, bool forward);

/* Ask the nested instance at 'uri' to shut down.  0, or -1 with errno
 * (ENOENT/ECONNREFUSED: it is already going). */
int nested_shutdown(const char *uri);

/* This executable's path (for the job's command), or "eddy". */
const char *nested_self(void);

#endif /* !EDDY_CMD_NESTED_H */
