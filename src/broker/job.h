/* job.h - what the job services ("job" in job_manager.c, "job-io" in
 * job_io.c, "job-exec" in job_exec.c, "proctable" in proctable.c) tell
 * each other.  Each finds the other's context with
 * broker_service_ctx(); on ranks other than 0 both exist but serve
 * nothing.
 *
 * The job manager owns the job table; the output log follows it:
 *  1. job_io_job_add() when a job is submitted (its log starts empty);
 *  2. job_io_job_inactive() when the job reached INACTIVE: attachers end
 *     once they have everything;
 *  3. job_io_job_remove() when the job is purged from the table.
 * job-io.stdin needs the job's placement, so job_io asks the manager to
 * forward it with job_manager_stdin().
 *
 * The proctable service gathers a job's process table over the tree: rank
 * 0 asks the manager which brokers run the job
 * (job_manager_job_ranks()), and every broker adds its own node's
 * tasks with job_exec_fragment().
 *
 * Job tmpdirs: job-exec makes one per job on each of its brokers before
 * the shell is spawned (under broker_tmpdir_base()) and removes it once
 * the shell has been reaped; other services of the same broker (bcast)
 * find it with job_exec_tmpdir().
 *
 * Tool daemons (tool.c) run beside a job on its nodes and share its
 * tmpdir: a node's tool service asks job-exec for the tmpdir and the
 * local tasks (job_exec_tasklist()).  When the shell has been reaped,
 * job-exec tells the tool service (tool_job_end()), which signals the
 * job's daemons and, if any still runs, takes over the tmpdir to remove
 * it after the last one.
 */
#ifndef EDDY_BROKER_JOB_H
#define EDDY_BROKER_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"
#include "service.h"
#include "src/common/proctable.h"

struct job_manager;
struct job_io;
struct jexec_ctx;
struct tool_ctx;

/* Start the output log of job 'id' with 'ntasks' tasks.  -1 with errno
 * EEXIST or ENOMEM. */
int job_io_job_add(struct job_io *io, uint64_t id, uint32_t ntasks);

/* Job 'id' is INACTIVE: no more output is expected. */
void job_io_job_inactive(struct job_io *io, uint64_t id);

/* Forget job 'id' (its attachers are ended first). */
void job_io_job_remove(struct job_io *io, uint64_t id);

/* Forward stdin bytes (borrowed) to task ranks 'ranks' ("all" or an
 * idset) of job 'id', and respond to 'req' ({} once every broker
 * concerned accepted them, or an error naming the job and reason). */
void job_manager_stdin(struct job_manager *jm,
                       broker_req_t *req,
                       uint64_t id,
                       const char *ranks,
                       bool eof,
                       const void *data,
                       size_t len);

/* What job_manager_job_ranks() waits for on every node of the job. */
enum job_ranks_need {
    JOB_RANKS_STARTED, /* every task forked (pids known): the proctable */
    JOB_RANKS_TMPDIRS, /* every tmpdir made: bcast */
};

/* The broker ranks of job 'id' as a canonical idset string (caller frees)
 * and its task count, if the job runs, is not ending and every node has
 * what 'need' says.  -1 with errno and 'err': ENOENT no such job, EAGAIN
 * not there yet (the message says the state), ESRCH the job has ended or
 * is ending (tasks on some node exited), ENOMEM. */
int job_manager_job_ranks(struct job_manager *jm,
                          uint64_t id,
                          enum job_ranks_need need,
                          char **ranks,
                          uint32_t *ntasks,
                          eddy_error_t *err);

/* Add the entries of job 'id' on this broker (its shell's tasks, with this
 * broker's rank and hostname) to 'pt'.  -1 with errno and 'err': ESRCH the
 * job does not run here, EAGAIN its tasks have not started, or the error
 * of proctable_add() (then 'pt' may hold some of this node's entries: the
 * caller drops it). */
int job_exec_fragment(struct jexec_ctx *ctx,
                      uint64_t id,
                      proctable_t *pt,
                      eddy_error_t *err);

/* The tmpdir of job 'id' on this broker, or NULL (errno ESRCH) if the
 * job does not run here (or has ended here). */
const char *job_exec_tmpdir(struct jexec_ctx *ctx, uint64_t id);

/* The tasks of job 'id' on this broker as "RANK:PID,..." in rank order
 * (caller frees).  NULL with errno ESRCH (the job does not run here, or
 * has ended here), EAGAIN (its tasks have not started) or ENOMEM. */
char *job_exec_tasklist(struct jexec_ctx *ctx, uint64_t id);

/* Job 'id' has ended on this broker (its shell reaped): its tool daemons
 * get SIGTERM, then SIGKILL after a grace period, unless launched to
 * outlive the job.  'tmpdir' (may be NULL) is the job's tmpdir here.
 * Returns true if some daemon of the job still runs: the tool service
 * then owns 'tmpdir' (a malloc'd path) and removes the directory after
 * the last daemon of the job exits; false if the caller should remove it
 * (and keeps the path).  False for a NULL ctx. */
bool tool_job_end(struct tool_ctx *ctx, uint64_t id, char *tmpdir);

#endif /* !EDDY_BROKER_JOB_H */
