/* jobslice.c - decode and validate a JOBSLICE. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/errprintf.h"
#include "src/common/jobslice.h"

void jobslice_destroy(struct jobslice *s)
{
    int saved_errno = errno;

    if (s) {
        json_decref(s->jobspec);
        idset_destroy(s->tasks);
        idset_destroy(s->cores);
        free(s->ranks);
        free(s);
    }
    errno = saved_errno;
}

/* An integer in [min, max] into *out; -1 EINVAL with a message. */
static int get_uint(const json_t *v,
                    const char *key,
                    json_int_t min,
                    json_int_t max,
                    uint64_t *out,
                    eddy_error_t *err)
{
    json_int_t i;

    if (!json_is_integer(v) || (i = json_integer_value(v)) < min || i > max) {
        errno = EINVAL;
        return errprintf(err, "JOBSLICE: '%s': must be an integer in %jd..%jd",
                         key, (intmax_t)min, (intmax_t)max);
    }
    *out = (uint64_t)i;
    return 0;
}

static idset_t *get_idset(const json_t *v, const char *key, eddy_error_t *err)
{
    eddy_error_t e;
    idset_t *s;

    if (!json_is_string(v)) {
        errno = EINVAL;
        errprintf(err, "JOBSLICE: '%s': must be an idset string", key);
        return NULL;
    }
    if (!(s = idset_decode(json_string_value(v), &e))) {
        if (errno != ENOMEM)
            errno = EINVAL;
        errprintf(err, "JOBSLICE: '%s': %s", key, e.text);
        return NULL;
    }
    return s;
}

struct jobslice *jobslice_decode(const json_t *o, eddy_error_t *err)
{
    struct jobslice *s = NULL;
    const char *key;
    json_t *v, *id = NULL, *jobspec = NULL, *size = NULL, *nnodes = NULL;
    json_t *node_index = NULL, *tasks = NULL, *cores = NULL, *jstdin = NULL;
    json_t *ranks = NULL;
    uint64_t u = 0;

    if (!json_is_object(o)) {
        errno = EINVAL;
        errprintf(err, "JOBSLICE: must be a JSON object");
        return NULL;
    }
    json_object_foreach((json_t *)o, key, v)
    {
        if (!strcmp(key, "id"))
            id = v;
        else if (!strcmp(key, "jobspec"))
            jobspec = v;
        else if (!strcmp(key, "size"))
            size = v;
        else if (!strcmp(key, "nnodes"))
            nnodes = v;
        else if (!strcmp(key, "node_index"))
            node_index = v;
        else if (!strcmp(key, "tasks"))
            tasks = v;
        else if (!strcmp(key, "cores"))
            cores = v;
        else if (!strcmp(key, "stdin"))
            jstdin = v;
        else if (!strcmp(key, "ranks"))
            ranks = v;
        else {
            errno = EINVAL;
            errprintf(err, "JOBSLICE: unknown key '%.64s'", key);
            return NULL;
        }
    }
    if (!(s = calloc(1, sizeof(*s))))
        goto nomem;
    if (get_uint(id, "id", 0, (json_int_t)JOBSLICE_ID_MAX, &s->id, err) < 0)
        goto error;
    if (!json_is_object(jobspec)) {
        errno = EINVAL;
        errprintf(err, "JOBSLICE: 'jobspec': must be an object");
        goto error;
    }
    s->jobspec = json_incref(jobspec);
    if (get_uint(size, "size", 1, UINT32_MAX, &u, err) < 0)
        goto error;
    s->size = (uint32_t)u;
    if (get_uint(nnodes, "nnodes", 1, UINT32_MAX, &u, err) < 0)
        goto error;
    s->nnodes = (uint32_t)u;
    if (get_uint(node_index, "node_index", 0, s->nnodes - 1, &u, err) < 0)
        goto error;
    s->node_index = (uint32_t)u;
    if (!(s->tasks = get_idset(tasks, "tasks", err)))
        goto error;
    if (idset_count(s->tasks) == 0 || idset_last(s->tasks) >= s->size) {
        errno = EINVAL;
        errprintf(err,
                  "JOBSLICE: 'tasks': must be a non-empty set of task"
                  " ranks below size %u",
                  s->size);
        goto error;
    }
    if (cores) {
        if (!(s->cores = get_idset(cores, "cores", err)))
            goto error;
    } else if (!(s->cores = idset_create()))
        goto nomem;
    if (jstdin && !json_is_boolean(jstdin)) {
        errno = EINVAL;
        errprintf(err, "JOBSLICE: 'stdin': must be a boolean");
        goto error;
    }
    s->has_stdin = json_is_true(jstdin);
    if (ranks) {
        idset_t *set = get_idset(ranks, "ranks", err);
        if (!set)
            goto error;
        s->ranks = idset_encode(set);
        idset_destroy(set);
        if (!s->ranks)
            goto nomem;
    }
    return s;
nomem:
    errno = ENOMEM;
    errprintf(err, "JOBSLICE: out of memory");
error:
    jobslice_destroy(s);
    return NULL;
}
