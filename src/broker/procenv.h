/* procenv.h - the environment of the processes a broker starts (exec
 * commands, job shells, tool daemons).
 *
 * Each starts from the broker's own environment plus EDDY_URI (this
 * broker's socket) and EDDY_BROKER_RANK; callers then add their own
 * variables.  A vector is a NULL-terminated array of malloc'd "NAME=VALUE"
 * strings, as execve() and uv_spawn() take it, made with room for a
 * number of additions chosen at creation.
 */
#ifndef EDDY_BROKER_PROCENV_H
#define EDDY_BROKER_PROCENV_H

#include <stddef.h>
#include <jansson.h>

#include "service.h"

/* The broker's environment, EDDY_URI and EDDY_BROKER_RANK, with room for
 * 'extra' more variables.  The caller destroys it.  NULL with errno
 * ENOMEM. */
char **procenv_create(broker_t *b, size_t extra);

/* Set NAME to VALUE, or unset it if 'value' is NULL.  Adding a name uses
 * one of the entries made room for (the caller counts).  -1 with errno
 * ENOMEM. */
int procenv_set(char **env, const char *name, const char *value);

/* procenv_set() each member of JSON object 'vars' (string values set,
 * null values unset; the caller validated it), which needs room for
 * json_object_size(vars) additions.  -1 with errno ENOMEM. */
int procenv_apply(char **env, const json_t *vars);

/* Free a vector.  Accepts NULL; leaves errno alone. */
void procenv_destroy(char **env);

#endif /* !EDDY_BROKER_PROCENV_H */
