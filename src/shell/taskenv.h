/* taskenv.h - the environment of one task (pure).
 *
 * A task sees the job's environment (the jobspec's, else the shell's
 * own) plus the variables that tell it where it is in the job.
 *
 * Lifecycle:
 *  1. taskenv_create() builds a NULL-terminated "NAME=VALUE" vector;
 *  2. pass it to task_create() as the task's envp (which copies it);
 *  3. taskenv_destroy().
 */
#ifndef EDDY_SHELL_TASKENV_H
#define EDDY_SHELL_TASKENV_H

#include <stdint.h>
#include <jansson.h>

#include "eddy/core.h"

/* What a task is told about itself. */
struct taskenv_ids {
    uint64_t jobid;      /* EDDY_JOB_ID */
    uint32_t rank;       /* EDDY_TASK_RANK: global task rank */
    uint32_t local_rank; /* EDDY_TASK_LOCAL_RANK: index on this node */
    uint32_t size;       /* EDDY_JOB_SIZE: tasks in the job */
    uint32_t nnodes;     /* EDDY_JOB_NNODES */
    const char *uri;     /* EDDY_URI: the local broker; NULL leaves it */
};

/* Build the environment: the string values of 'jobenv' (a JSON object,
 * borrowed) if it is not NULL, else the entries of 'base' (NULL-terminated,
 * e.g. environ; NULL means empty), then the EDDY_* variables of 'ids',
 * which replace any of the same name.  Returns a vector the caller frees
 * with taskenv_destroy(), or NULL with errno EINVAL ('ids' NULL, 'jobenv'
 * not an object or holding a non-string value; err names the variable) or
 * ENOMEM. */
char **taskenv_create(const json_t *jobenv,
                      const char *const *base,
                      const struct taskenv_ids *ids,
                      eddy_error_t *err);

/* The value of 'name' in 'env', or NULL. */
const char *taskenv_get(char *const *env, const char *name);

/* Set NAME=VALUE in '*env' (a vector from taskenv_create(), grown as
 * needed), replacing an entry of that name.  -1 with errno EINVAL (NULL
 * argument, or a name that is empty or holds '=') or ENOMEM; '*env' is
 * then unchanged. */
int taskenv_set(char ***env, const char *name, const char *value);

/* Remove 'name' from 'env' (no-op if absent).  -1 with errno EINVAL
 * (NULL argument, or a name that is empty or holds '='). */
int taskenv_unset(char **env, const char *name);

/* Free a vector from taskenv_create().  Accepts NULL; keeps errno. */
void taskenv_destroy(char **env);

#endif /* !EDDY_SHELL_TASKENV_H */
