/* mpir.h - the eddy command as an MPIR starter.
 *
 * The MPI Forum's MPIR Process Acquisition Interface (version 1.1): a
 * debugger runs or attaches to the starter process, reads its
 * MPIR_proctable when the starter calls MPIR_Breakpoint(), attaches to the
 * job's processes and continues the starter.  mpir.c defines the symbols
 * with the spec's names and types; this header is how `eddy run` and
 * `eddy job attach` drive them:
 *  1. mpir_wanted(): a debugger set MPIR_being_debugged (or --debug).
 *  2. Launch: the job is submitted with --stop=exec; mpir_wait_held()
 *     until every task is stopped.  Attach: nothing to wait for.
 *  3. mpir_acquire() fills MPIR_proctable from the instance (eddy/mpir.h)
 *     and the job ID symbols.
 *  4. mpir_spawned(): MPIR_debug_state = MPIR_DEBUG_SPAWNED and
 *     MPIR_Breakpoint(); returns when the debugger continues us.
 *  5. Launch: release the tasks the debugger did not attach to
 *     (eddy_job_release_untraced()).
 *  6. mpir_aborting() as jobio's on_fatal hook: MPIR_DEBUG_ABORTING, the
 *     abort string, MPIR_Breakpoint().
 * Commands are programs: on errors these print "eddy CMD: why" and exit.
 */
#ifndef EDDY_CMD_MPIR_H
#define EDDY_CMD_MPIR_H

#include <stdbool.h>

#include "eddy/core.h"
#include "eddy/job.h"

/* True if a debugger set MPIR_being_debugged or 'debug' (--debug) is
 * set; then also MPIR_being_debugged = 1, as the spec's starters do. */
bool mpir_wanted(bool debug);

/* Wait until every task of job 'id' is held at its startup barrier.
 * Returns false (without exiting) if the job failed or ended before:
 * the caller then just follows it, which reports why. */
bool mpir_wait_held(const char *cmd, eddy_t *h, eddy_jobid_t id);

/* Fill MPIR_proctable, MPIR_proctable_size, totalview_jobid and
 * eddy_jobid for job 'id'; with 'wait_start', a job whose tasks have not
 * started yet is waited for.  Exits on error. */
void mpir_acquire(const char *cmd, eddy_t *h, eddy_jobid_t id, bool wait_start);

/* MPIR_DEBUG_SPAWNED, then MPIR_Breakpoint().  If the debugger set
 * MPIR_executable_path (and maybe MPIR_server_arguments) meanwhile, that
 * tool daemon is launched on every node of job 'id' (eddy/tool.h) before
 * this returns.  Exits if the launch fails. */
void mpir_spawned(const char *cmd, eddy_t *h, eddy_jobid_t id);

/* MPIR_DEBUG_ABORTING with "TYPE: NOTE" as MPIR_debug_abort_string, then
 * MPIR_Breakpoint().  Fits struct jobio's on_fatal. */
void mpir_aborting(const char *type, const char *note);

#endif /* !EDDY_CMD_MPIR_H */
