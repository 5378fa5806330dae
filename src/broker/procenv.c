/* procenv.c - the environment of the processes a broker starts. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "procenv.h"

extern char **environ;

void procenv_destroy(char **env)
{
    int saved = errno;

    if (env) {
        for (size_t i = 0; env[i]; i++)
            free(env[i]);
        free(env);
    }
    errno = saved;
}

int procenv_set(char **env, const char *name, const char *value)
{
    size_t n = strlen(name), i, j;
    char *entry = NULL;

    if (value && asprintf(&entry, "%s=%s", name, value) < 0) {
        errno = ENOMEM;
        return -1;
    }
    for (i = 0; env[i]; i++)
        if (!strncmp(env[i], name, n) && env[i][n] == '=')
            break;
    if (env[i]) {
        free(env[i]);
        if (entry) {
            env[i] = entry;
            return 0;
        }
        for (j = i; env[j]; j++)
            env[j] = env[j + 1];
        return 0;
    }
    if (entry) {
        env[i] = entry;
        env[i + 1] = NULL;
    }
    return 0;
}

int procenv_apply(char **env, const json_t *vars)
{
    const char *key;
    json_t *val;

    json_object_foreach((json_t *)vars, key, val)
    {
        if (procenv_set(env, key, json_string_value(val)) < 0)
            return -1;
    }
    return 0;
}

char **procenv_create(broker_t *b, size_t extra)
{
    size_t n = 0, i;
    char **env;
    char rank[16];

    while (environ[n])
        n++;
    if (!(env = calloc(n + 2 + extra + 1, sizeof(*env)))) {
        errno = ENOMEM;
        return NULL;
    }
    for (i = 0; i < n; i++)
        if (!(env[i] = strdup(environ[i]))) {
            errno = ENOMEM;
            goto error;
        }
    snprintf(rank, sizeof(rank), "%u", broker_rank(b));
    if (procenv_set(env, "EDDY_URI", broker_local_uri(b)) < 0 ||
        procenv_set(env, "EDDY_BROKER_RANK", rank) < 0)
        goto error;
    return env;
error:
    procenv_destroy(env);
    return NULL;
}
