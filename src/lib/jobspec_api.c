/* jobspec_api.c - eddy_jobspec_t: the job description builder of job.h.
 *
 * The setters only record what was asked (checking what cannot be
 * represented at all); everything else is checked by the jobspec module's
 * builder when the description is encoded, so a program and the job
 * manager apply the same rules.  The defaults that depend on the caller's
 * process (environment, working directory) are taken at encode time, which
 * is submit time for eddy_job_submit(), not when the description was made.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eddy/job.h"
#include "src/common/errprintf.h"
#include "src/common/jobspec.h"
#include "lib.h"

extern char **environ;

struct group {
    int argc;
    char **argv;
    int ntasks;
};

struct eddy_jobspec {
    struct group *groups;
    size_t ngroups;
    int nnodes, ntasks, tasks_per_node, cores_per_task;
    bool exclusive;
    bool clearenv;
    json_t *envmod; /* name -> string (set) or null (unset), in call order */
    char *cwd;
    double duration;
    char *name;
    bool stdin_msgs;  /* tasks read stdin sent with eddy_job_stdin() */
    const char *stop; /* startup barrier (a static string) or NULL */
    json_t *plugins;  /* shell plugins: [{"path","args"?}], or NULL */
};

static void group_release(struct group *g)
{
    if (g->argv) {
        for (int i = 0; i < g->argc; i++)
            free(g->argv[i]);
        free(g->argv);
    }
}

eddy_jobspec_t *eddy_jobspec_create(void)
{
    eddy_jobspec_t *js = calloc(1, sizeof(*js));

    if (!js || !(js->envmod = json_object())) {
        free(js);
        errno = ENOMEM;
        return NULL;
    }
    return js;
}

void eddy_jobspec_destroy(eddy_jobspec_t *js)
{
    int saved_errno = errno;

    if (!js)
        return;
    for (size_t i = 0; i < js->ngroups; i++)
        group_release(&js->groups[i]);
    free(js->groups);
    json_decref(js->envmod);
    free(js->cwd);
    free(js->name);
    json_decref(js->plugins);
    free(js);
    errno = saved_errno;
}

int eddy_jobspec_add_group(eddy_jobspec_t *js,
                           int argc,
                           char *const argv[],
                           int ntasks)
{
    struct group g = {0};
    struct group *ng;

    if (!js || argc < 1 || argc > JOBSPEC_ARGC_MAX || !argv || ntasks < 0) {
        errno = EINVAL;
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        if (!argv[i]) {
            errno = EINVAL;
            return -1;
        }
    }
    if (!(g.argv = calloc((size_t)argc + 1, sizeof(*g.argv))))
        goto nomem;
    g.argc = argc;
    g.ntasks = ntasks;
    for (int i = 0; i < argc; i++) {
        if (!(g.argv[i] = strdup(argv[i])))
            goto nomem;
    }
    ng = realloc(js->groups, (js->ngroups + 1) * sizeof(*ng));
    if (!ng)
        goto nomem;
    js->groups = ng;
    js->groups[js->ngroups++] = g;
    return 0;
nomem:
    group_release(&g);
    errno = ENOMEM;
    return -1;
}

static int set_count(eddy_jobspec_t *js, int *field, int n)
{
    if (!js || n < 0) {
        errno = EINVAL;
        return -1;
    }
    *field = n;
    return 0;
}

int eddy_jobspec_set_nodes(eddy_jobspec_t *js, int nnodes)
{
    return set_count(js, js ? &js->nnodes : NULL, nnodes);
}

int eddy_jobspec_set_tasks(eddy_jobspec_t *js, int ntasks)
{
    return set_count(js, js ? &js->ntasks : NULL, ntasks);
}

int eddy_jobspec_set_tasks_per_node(eddy_jobspec_t *js, int n)
{
    return set_count(js, js ? &js->tasks_per_node : NULL, n);
}

int eddy_jobspec_set_cores_per_task(eddy_jobspec_t *js, int n)
{
    return set_count(js, js ? &js->cores_per_task : NULL, n);
}

int eddy_jobspec_set_exclusive(eddy_jobspec_t *js, bool exclusive)
{
    if (!js) {
        errno = EINVAL;
        return -1;
    }
    js->exclusive = exclusive;
    return 0;
}

int eddy_jobspec_set_stdin(eddy_jobspec_t *js, bool enable)
{
    if (!js) {
        errno = EINVAL;
        return -1;
    }
    js->stdin_msgs = enable;
    return 0;
}

int eddy_jobspec_set_stop(eddy_jobspec_t *js, const char *mode)
{
    static const char *const modes[] = {"fork", "exec", "init"};

    if (!js) {
        errno = EINVAL;
        return -1;
    }
    if (!mode) {
        js->stop = NULL;
        return 0;
    }
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        if (!strcmp(mode, modes[i])) {
            js->stop = modes[i];
            return 0;
        }
    }
    errno = EINVAL;
    return -1;
}

int eddy_jobspec_add_plugin(eddy_jobspec_t *js,
                            const char *path,
                            const char *args)
{
    json_t *p;

    if (!js || !path || path[0] != '/' ||
        (js->plugins && json_array_size(js->plugins) >= JOBSPEC_PLUGINS_MAX)) {
        errno = EINVAL;
        return -1;
    }
    if (!(p = json_pack("{s:s}", "path", path)) ||
        (args && json_object_set_new(p, "args", json_string(args)) < 0) ||
        (!js->plugins && !(js->plugins = json_array())) ||
        json_array_append_new(js->plugins, p) < 0) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

bool jobspec_api_stdin(const struct eddy_jobspec *js)
{
    return js && js->stdin_msgs;
}

int eddy_jobspec_setenv(eddy_jobspec_t *js, const char *name, const char *value)
{
    json_t *v;

    if (!js || !name || !*name || strchr(name, '=')) {
        errno = EINVAL;
        return -1;
    }
    /* JSON strings are UTF-8: a name or value that is not cannot be
     * carried. */
    if (!(v = value ? json_string(value) : json_null())) {
        errno = EINVAL;
        return -1;
    }
    /* Delete first so that the object's order stays the call order. */
    (void)json_object_del(js->envmod, name);
    if (json_object_set_new(js->envmod, name, v) < 0) {
        errno = EINVAL; /* not UTF-8, or out of memory */
        return -1;
    }
    return 0;
}

int eddy_jobspec_clearenv(eddy_jobspec_t *js)
{
    if (!js) {
        errno = EINVAL;
        return -1;
    }
    /* Like clearenv(3): what was set before is gone too. */
    json_object_clear(js->envmod);
    js->clearenv = true;
    return 0;
}

/* Replace '*field' by a copy of 's'. */
static int set_string(eddy_jobspec_t *js, char **field, const char *s)
{
    char *cpy;

    if (!js || !s || !*s) {
        errno = EINVAL;
        return -1;
    }
    if (!(cpy = strdup(s))) {
        errno = ENOMEM;
        return -1;
    }
    free(*field);
    *field = cpy;
    return 0;
}

int eddy_jobspec_set_cwd(eddy_jobspec_t *js, const char *cwd)
{
    return set_string(js, js ? &js->cwd : NULL, cwd);
}

int eddy_jobspec_set_name(eddy_jobspec_t *js, const char *name)
{
    return set_string(js, js ? &js->name : NULL, name);
}

int eddy_jobspec_set_duration(eddy_jobspec_t *js, double seconds)
{
    if (!js || !isfinite(seconds) || seconds < 0) {
        errno = EINVAL;
        return -1;
    }
    js->duration = seconds;
    return 0;
}

/* The tasks' environment: the caller's (unless cleared) with the
 * overrides applied.  Variables whose text is not UTF-8 cannot travel in
 * JSON and are left out. */
static json_t *build_env(const eddy_jobspec_t *js)
{
    json_t *env = json_object();
    const char *key;
    json_t *v;

    if (!env)
        return NULL;
    if (!js->clearenv && environ) {
        for (char **ep = environ; *ep; ep++) {
            const char *eq = strchr(*ep, '=');
            char name[256];
            size_t n;

            if (!eq || eq == *ep)
                continue;
            n = (size_t)(eq - *ep);
            if (n >= sizeof(name)) /* no sane variable name is this long */
                continue;
            memcpy(name, *ep, n);
            name[n] = '\0';
            if (json_object_get(env, name)) /* the first one wins (getenv) */
                continue;
            if (!(v = json_string(eq + 1)))
                continue;
            if (json_object_set_new(env, name, v) < 0)
                continue;
        }
    }
    json_object_foreach(js->envmod, key, v)
    {
        if (json_is_null(v))
            (void)json_object_del(env, key);
        else if (json_object_set(env, key, v) < 0)
            goto nomem;
    }
    return env;
nomem:
    json_decref(env);
    return NULL;
}

/* Transfer the settings to a jobspec builder with the defaults applied. */
static int fill_builder(const eddy_jobspec_t *js,
                        jobspec_builder_t *b,
                        eddy_error_t *err)
{
    json_t *env = NULL, *v;
    const char *key;
    char cwd[PATH_MAX];
    const char *name = js->name;

    if (jobspec_builder_set_nnodes(b, (uint32_t)js->nnodes) < 0 ||
        jobspec_builder_set_ntasks(b, (uint32_t)js->ntasks) < 0 ||
        jobspec_builder_set_tasks_per_node(b, (uint32_t)js->tasks_per_node) <
            0 ||
        jobspec_builder_set_cores_per_task(b, (uint32_t)js->cores_per_task) <
            0 ||
        jobspec_builder_set_exclusive(b, js->exclusive) < 0 ||
        jobspec_builder_set_duration(b, js->duration) < 0)
        goto error;
    for (size_t i = 0; i < js->ngroups; i++) {
        const struct group *g = &js->groups[i];

        if (jobspec_builder_add_group(b, g->argc, (const char *const *)g->argv,
                                      (uint32_t)g->ntasks) < 0)
            goto error;
    }
    /* The environment is always spelled out, even when it ends up empty:
     * a missing one would mean "the shell's own". */
    if (jobspec_builder_clearenv(b) < 0)
        goto error;
    if (!(env = build_env(js))) {
        errno = ENOMEM;
        goto error;
    }
    json_object_foreach(env, key, v)
    {
        if (jobspec_builder_setenv(b, key, json_string_value(v)) < 0)
            goto error;
    }
    json_decref(env);
    env = NULL;
    if (js->cwd) {
        if (jobspec_builder_set_cwd(b, js->cwd) < 0)
            goto error;
    } else {
        if (!getcwd(cwd, sizeof(cwd)))
            return errprintf(err,
                             "jobspec: cwd: cannot get the current "
                             "directory: %s",
                             strerror(errno));
        if (jobspec_builder_set_cwd(b, cwd) < 0)
            goto error;
    }
    if (!name && js->ngroups > 0) {
        const char *slash = strrchr(js->groups[0].argv[0], '/');

        name = slash ? slash + 1 : js->groups[0].argv[0];
        if (!*name)
            name = NULL;
    }
    if (name && jobspec_builder_set_job_name(b, name) < 0)
        goto error;
    if (js->stop) {
        json_t *mode = json_string(js->stop);
        int rc = mode ? jobspec_builder_set_shell_option(b, "stop", mode) : -1;

        json_decref(mode);
        if (rc < 0) {
            errno = ENOMEM;
            goto error;
        }
    }
    if (js->plugins &&
        jobspec_builder_set_shell_option(b, "plugins", js->plugins) < 0) {
        errno = ENOMEM;
        goto error;
    }
    return 0;
error:
    json_decref(env);
    return errprintf(err, "jobspec: %s", strerror(errno));
}

json_t *jobspec_api_encode(const struct eddy_jobspec *js, eddy_error_t *err)
{
    jobspec_builder_t *b = NULL;
    jobspec_t *spec = NULL;
    json_t *o = NULL;
    int e;

    if (!js) {
        errno = EINVAL;
        errprintf(err, "jobspec: no job description");
        return NULL;
    }
    if (!(b = jobspec_builder_create())) {
        errprintf(err, "jobspec: out of memory");
        return NULL;
    }
    if (fill_builder(js, b, err) < 0)
        goto error;
    if (!(spec = jobspec_builder_finish(b, err)))
        goto error;
    if (!(o = jobspec_encode(spec))) {
        errprintf(err, "jobspec: out of memory");
        goto error;
    }
    jobspec_destroy(spec);
    jobspec_builder_destroy(b);
    return o;
error:
    e = errno;
    jobspec_destroy(spec);
    jobspec_builder_destroy(b);
    errno = e;
    return NULL;
}

char *eddy_jobspec_encode(const eddy_jobspec_t *js, eddy_error_t *err)
{
    json_t *o = jobspec_api_encode(js, err);
    char *s;

    if (!o)
        return NULL;
    s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) {
        errno = ENOMEM;
        errprintf(err, "jobspec: out of memory");
    }
    return s;
}
