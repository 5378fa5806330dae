/* taskenv.c - the environment of one task. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/errprintf.h"
#include "src/shell/taskenv.h"

void taskenv_destroy(char **env)
{
    int saved_errno = errno;

    if (env) {
        for (size_t i = 0; env[i]; i++)
            free(env[i]);
        free(env);
    }
    errno = saved_errno;
}

const char *taskenv_get(char *const *env, const char *name)
{
    size_t n = strlen(name);

    for (size_t i = 0; env && env[i]; i++)
        if (!strncmp(env[i], name, n) && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

/* Set NAME=VALUE in 'env' (room for one more entry is guaranteed by the
 * caller), replacing an entry of that name.  -1 ENOMEM. */
static int env_put(char **env, const char *name, const char *value)
{
    size_t n = strlen(name), i;
    char *entry;

    if (asprintf(&entry, "%s=%s", name, value) < 0)
        return -1;
    for (i = 0; env[i]; i++)
        if (!strncmp(env[i], name, n) && env[i][n] == '=')
            break;
    if (env[i])
        free(env[i]);
    else
        env[i + 1] = NULL;
    env[i] = entry;
    return 0;
}

/* The EDDY_* variables a task gets. */
#define TASKENV_NVARS 6

char **taskenv_create(const json_t *jobenv,
                      const char *const *base,
                      const struct taskenv_ids *ids,
                      eddy_error_t *err)
{
    size_t n = 0, i = 0;
    char **env = NULL;
    char num[5][24];
    const char *key;
    json_t *v;

    if (!ids || (jobenv && !json_is_object(jobenv))) {
        errno = EINVAL;
        errprintf(err, "taskenv: invalid argument");
        return NULL;
    }
    if (jobenv)
        n = json_object_size(jobenv);
    else
        while (base && base[n])
            n++;
    if (!(env = calloc(n + TASKENV_NVARS + 1, sizeof(*env))))
        goto nomem;
    if (jobenv) {
        json_object_foreach((json_t *)jobenv, key, v)
        {
            if (!json_is_string(v)) {
                taskenv_destroy(env);
                errno = EINVAL;
                errprintf(err, "taskenv: %s: value must be a string", key);
                return NULL;
            }
            if (asprintf(&env[i], "%s=%s", key, json_string_value(v)) < 0) {
                env[i] = NULL;
                goto nomem;
            }
            i++;
        }
    } else {
        for (i = 0; i < n; i++)
            if (!(env[i] = strdup(base[i])))
                goto nomem;
    }
    snprintf(num[0], sizeof(num[0]), "%" PRIu64, ids->jobid);
    snprintf(num[1], sizeof(num[1]), "%" PRIu32, ids->rank);
    snprintf(num[2], sizeof(num[2]), "%" PRIu32, ids->local_rank);
    snprintf(num[3], sizeof(num[3]), "%" PRIu32, ids->size);
    snprintf(num[4], sizeof(num[4]), "%" PRIu32, ids->nnodes);
    if (env_put(env, "EDDY_JOB_ID", num[0]) < 0 ||
        env_put(env, "EDDY_TASK_RANK", num[1]) < 0 ||
        env_put(env, "EDDY_TASK_LOCAL_RANK", num[2]) < 0 ||
        env_put(env, "EDDY_JOB_SIZE", num[3]) < 0 ||
        env_put(env, "EDDY_JOB_NNODES", num[4]) < 0 ||
        (ids->uri && env_put(env, "EDDY_URI", ids->uri) < 0))
        goto nomem;
    return env;
nomem:
    taskenv_destroy(env);
    errno = ENOMEM;
    errprintf(err, "taskenv: out of memory");
    return NULL;
}

int taskenv_set(char ***env, const char *name, const char *value)
{
    size_t n = 0;
    char **v;

    if (!env || !*env || !name || !*name || strchr(name, '=') || !value) {
        errno = EINVAL;
        return -1;
    }
    if (taskenv_get(*env, name))
        return env_put(*env, name, value);
    while ((*env)[n])
        n++;
    if (!(v = realloc(*env, (n + 2) * sizeof(*v))))
        return -1;
    v[n] = NULL;
    *env = v;
    if (env_put(v, name, value) < 0) {
        v[n] = NULL;
        return -1;
    }
    return 0;
}

int taskenv_unset(char **env, const char *name)
{
    size_t len, i, n = 0;

    if (!env || !name || !*name || strchr(name, '=')) {
        errno = EINVAL;
        return -1;
    }
    len = strlen(name);
    while (env[n])
        n++;
    for (i = 0; i < n; i++) {
        if (!strncmp(env[i], name, len) && env[i][len] == '=') {
            free(env[i]);
            memmove(&env[i], &env[i + 1], (n - i) * sizeof(*env));
            return 0;
        }
    }
    return 0;
}
