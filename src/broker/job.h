/* job.h - what the rank-0 job services ("job" in job_manager.c, "job-io"
 * in job_io.c) tell each other.  Each finds the other's context with
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
 */
#ifndef EDDY_BROKER_JOB_H
#define EDDY_BROKER_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "service.h"

struct job_manager;
struct job_io;

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

#endif /* !EDDY_BROKER_JOB_H */
