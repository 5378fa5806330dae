/* shell.h - eddy-shell's job state: one job's tasks on this node.
 *
 * Lifecycle:
 *  1. shell_create() connects to the local broker ($EDDY_URI), says
 *     job-exec.shell-hello and decodes the JOBSLICE and jobspec it gets.
 *  2. shell_start() forks every local task held, releases them together
 *     and reports "started" (or an "exception" per task that cannot start,
 *     after which the other local tasks are killed).  With a startup
 *     barrier (jobspec shell option "stop", docs/jobs-protocol.md) the
 *     tasks stay held before exec ("fork"), are stopped at their exec
 *     ("exec": reported once reap() saw every exec stop) or run until PMI
 *     init ("init"); "started" then "held" are reported once they are,
 *     and a "release" command lets them go.  Every task talks PMI-1 to
 *     the shell over PMI_FD (pmi_server.h).
 *  3. shell_run() runs the loop: forwards output and stdin (io.h), reaps
 *     tasks and reports each "exit", obeys "kill" commands and SIGTERM,
 *     until every task is reported, all output is flushed and every report
 *     answered.  If the broker connection drops, it kills the tasks and
 *     returns once they are reaped.
 *  4. shell_destroy().
 *
 * Every task gets exactly one report: "exit" if it was forked and reaped
 * (including tasks cancelled or killed because another failed), or
 * "exception" if it could not start.
 */
#ifndef EDDY_SHELL_SHELL_H
#define EDDY_SHELL_SHELL_H

#include <stdint.h>

#include "eddy/core.h"

/* How long the shell waits for its broker to answer the hello. */
#define SHELL_HELLO_TIMEOUT 30.0

struct shell;

/* Connect and fetch job 'id''s slice.  NULL with errno and 'err' filled
 * (the broker connection's errors, ESRCH if the broker has no such job
 * for us, ETIMEDOUT, EPROTO for a bad slice). */
struct shell *shell_create(uint64_t id, eddy_error_t *err);

/* Start the tasks (see lifecycle).  A task that cannot start is reported,
 * not an error: -1 only when the shell itself cannot go on (out of
 * memory, lost connection), with 'err' filled. */
int shell_start(struct shell *sh, eddy_error_t *err);

/* Run until the job is over on this node.  Returns the shell's exit
 * code: 0 when everything was reported, 1 otherwise. */
int shell_run(struct shell *sh);

/* Free everything.  Accepts NULL; keeps errno. */
void shell_destroy(struct shell *sh);

#endif /* !EDDY_SHELL_SHELL_H */
