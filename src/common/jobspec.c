/* jobspec.c - job specifications: parse, validate strictly, build.
 *
 * One validator (jobspec_decode) serves the wire and the builder: the
 * builder writes JSON and decodes it, so a rule can never hold in one and
 * not the other.  Validation walks the document once, checking at each
 * object its type, then its keys (unknown keys are errors, so a typo never
 * silently means "default"), then its fields, and reports the first fault
 * with its path.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errprintf.h"
#include "jobspec.h"

/* Longest field path we print ("tasks[4095].command[65535]" and the like);
 * environment names are cut to keep messages inside eddy_error_t. */
#define PATH_LEN 128

struct group {
    int argc;
    char **argv; /* argc entries, NULL-terminated */
    uint32_t ntasks;
    uint32_t first_rank;
};

struct jobspec {
    int version;
    uint32_t nnodes;         /* 0: no node level */
    uint32_t slots_per_node; /* 0: no node level */
    uint32_t nslots;
    uint32_t cores_per_slot;
    bool exclusive;
    uint32_t ngroups;
    struct group *groups;
    double duration;
    char *cwd;
    char *name;
    json_t *env;     /* object of strings, or NULL */
    json_t *options; /* shell options object, or NULL */
    json_t *user;    /* attributes.user, or NULL */
};

/* Format a field path; a cut-short path still names the place. */
static void mkpath(char *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void mkpath(char *p, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(p, PATH_LEN, fmt, ap);
    va_end(ap);
}

/* Copy 's' into 'buf' for a message: printable ASCII only, cut short. */
static const char *safe(const char *s, char *buf, size_t size)
{
    size_t i, n = 0;
    const size_t keep = size > 4 ? size - 4 : 0;

    for (i = 0; s[i] != '\0' && n < keep; i++)
        buf[n++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (s[i] != '\0' && size >= 4) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

/* Fill 'err' with "jobspec: PATH: MESSAGE", set errno, return -1. */
static int bad(eddy_error_t *err,
               int errnum,
               const char *path,
               const char *fmt,
               ...) __attribute__((format(printf, 4, 5)));

static int bad(
    eddy_error_t *err, int errnum, const char *path, const char *fmt, ...)
{
    char msg[sizeof(err->text)];
    va_list ap;

    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    errno = errnum;
    if (path && path[0] != '\0')
        return errprintf(err, "jobspec: %s: %s", path, msg);
    return errprintf(err, "jobspec: %s", msg);
}

static int oom(eddy_error_t *err)
{
    return bad(err, ENOMEM, NULL, "out of memory");
}

/* Refuse any key of object 'o' not in the NULL-terminated 'allowed'. */
static int check_keys(const json_t *o,
                      const char *path,
                      const char *const *allowed,
                      eddy_error_t *err)
{
    const char *key;
    size_t klen;
    json_t *v;
    char buf[48];

    /* Iterating does not modify; jansson's iterator API is not const. */
    json_object_keylen_foreach((json_t *)o, key, klen, v)
    {
        int i;
        for (i = 0; allowed[i]; i++) {
            if (strlen(allowed[i]) == klen &&
                memcmp(allowed[i], key, klen) == 0)
                break;
        }
        if (!allowed[i])
            return bad(err, EINVAL, path, "unknown key '%s'",
                       safe(key, buf, sizeof(buf)));
    }
    return 0;
}

static int need_object(const json_t *o, const char *path, eddy_error_t *err)
{
    if (!json_is_object(o))
        return bad(err, EINVAL, path, "must be an object");
    return 0;
}

/* The value of required key 'key', or NULL with the error filled. */
static json_t *need(const json_t *o,
                    const char *key,
                    const char *path,
                    eddy_error_t *err)
{
    json_t *v = json_object_get(o, key);

    if (!v)
        bad(err, EINVAL, path, "missing '%s'", key);
    return v;
}

/* A string without NUL bytes (and non-empty if 'nonempty'). */
static int get_string(const json_t *v,
                      const char *path,
                      bool nonempty,
                      const char **out,
                      eddy_error_t *err)
{
    const char *s;

    if (!json_is_string(v))
        return bad(err, EINVAL, path, "must be a string");
    s = json_string_value(v);
    if (strlen(s) != json_string_length(v))
        return bad(err, EINVAL, path, "contains a NUL byte");
    if (nonempty && s[0] == '\0')
        return bad(err, EINVAL, path, "must be a non-empty string");
    *out = s;
    return 0;
}

/* A string that must equal 'want'. */
static int get_word(const json_t *v,
                    const char *path,
                    const char *want,
                    eddy_error_t *err)
{
    const char *s;
    char buf[48];

    if (get_string(v, path, false, &s, err) < 0)
        return -1;
    if (strcmp(s, want) != 0)
        return bad(err, EINVAL, path, "expected '%s', got '%s'", want,
                   safe(s, buf, sizeof(buf)));
    return 0;
}

/* An integer count in 1..max. */
static int get_count(const json_t *v,
                     const char *path,
                     uint32_t max,
                     uint32_t *out,
                     eddy_error_t *err)
{
    json_int_t n;

    if (!json_is_integer(v) || (n = json_integer_value(v)) < 1)
        return bad(err, EINVAL, path, "must be an integer >= 1");
    if (n > (json_int_t)max)
        return bad(err, E2BIG, path, "%lld exceeds the limit of %u",
                   (long long)n, max);
    *out = (uint32_t)n;
    return 0;
}

static int copy_object(const json_t *v, json_t **out, eddy_error_t *err)
{
    if (!(*out = json_deep_copy(v)))
        return oom(err);
    return 0;
}

/* S := {"type":"slot","count":T,"label":"task",
 *       "with":[{"type":"core","count":C}]} */
static int parse_slot(jobspec_t *js,
                      const json_t *s,
                      const char *path,
                      uint32_t *count,
                      eddy_error_t *err)
{
    static const char *const slot_keys[] = {"type", "count", "label", "with",
                                            NULL};
    static const char *const core_keys[] = {"type", "count", NULL};
    char p[PATH_LEN];
    const json_t *v, *core;

    if (need_object(s, path, err) < 0)
        return -1;
    mkpath(p, "%s.type", path);
    if (!(v = need(s, "type", path, err)) || get_word(v, p, "slot", err) < 0)
        return -1;
    if (check_keys(s, path, slot_keys, err) < 0)
        return -1;
    mkpath(p, "%s.count", path);
    if (!(v = need(s, "count", path, err)) ||
        get_count(v, p, JOBSPEC_SLOTS_MAX, count, err) < 0)
        return -1;
    mkpath(p, "%s.label", path);
    if (!(v = need(s, "label", path, err)) || get_word(v, p, "task", err) < 0)
        return -1;
    mkpath(p, "%s.with", path);
    if (!(v = need(s, "with", path, err)))
        return -1;
    if (!json_is_array(v) || json_array_size(v) != 1)
        return bad(err, EINVAL, p, "must be an array with one entry");
    core = json_array_get(v, 0);
    mkpath(p, "%s.with[0]", path);
    if (need_object(core, p, err) < 0)
        return -1;
    if (!(v = need(core, "type", p, err)))
        return -1;
    mkpath(p, "%s.with[0].type", path);
    if (get_word(v, p, "core", err) < 0)
        return -1;
    mkpath(p, "%s.with[0]", path);
    if (check_keys(core, p, core_keys, err) < 0 ||
        !(v = need(core, "count", p, err)))
        return -1;
    mkpath(p, "%s.with[0].count", path);
    return get_count(v, p, JOBSPEC_CORES_MAX, &js->cores_per_slot, err);
}

static int parse_resources(jobspec_t *js, const json_t *a, eddy_error_t *err)
{
    static const char *const node_keys[] = {"type", "count", "exclusive",
                                            "with", NULL};
    const json_t *r, *v;
    const char *type;
    char buf[48];

    if (!json_is_array(a) || json_array_size(a) != 1)
        return bad(err, EINVAL, "resources", "must be an array with one entry");
    r = json_array_get(a, 0);
    if (need_object(r, "resources[0]", err) < 0 ||
        !(v = need(r, "type", "resources[0]", err)) ||
        get_string(v, "resources[0].type", false, &type, err) < 0)
        return -1;
    if (strcmp(type, "slot") == 0) {
        /* No node level: slots go wherever the scheduler finds cores. */
        return parse_slot(js, r, "resources[0]", &js->nslots, err);
    }
    if (strcmp(type, "node") != 0)
        return bad(err, EINVAL, "resources[0].type",
                   "expected 'node' or 'slot', got '%s'",
                   safe(type, buf, sizeof(buf)));
    if (check_keys(r, "resources[0]", node_keys, err) < 0)
        return -1;
    if (!(v = need(r, "count", "resources[0]", err)) ||
        get_count(v, "resources[0].count", JOBSPEC_NODES_MAX, &js->nnodes,
                  err) < 0)
        return -1;
    if ((v = json_object_get(r, "exclusive"))) {
        if (!json_is_boolean(v))
            return bad(err, EINVAL, "resources[0].exclusive",
                       "must be true or false");
        js->exclusive = json_is_true(v);
    }
    if (!(v = need(r, "with", "resources[0]", err)))
        return -1;
    if (!json_is_array(v) || json_array_size(v) != 1)
        return bad(err, EINVAL, "resources[0].with",
                   "must be an array with one entry");
    if (parse_slot(js, json_array_get(v, 0), "resources[0].with[0]",
                   &js->slots_per_node, err) < 0)
        return -1;
    if ((uint64_t)js->nnodes * js->slots_per_node > JOBSPEC_SLOTS_MAX)
        return bad(err, E2BIG, "resources[0]",
                   "%u nodes of %u slots exceed the limit of %u slots",
                   js->nnodes, js->slots_per_node, JOBSPEC_SLOTS_MAX);
    js->nslots = js->nnodes * js->slots_per_node;
    return 0;
}

static int parse_command(struct group *g,
                         const json_t *a,
                         const char *path,
                         eddy_error_t *err)
{
    char p[PATH_LEN];
    size_t i, n;

    if (!json_is_array(a) || (n = json_array_size(a)) == 0)
        return bad(err, EINVAL, path, "must be a non-empty array of strings");
    if (n > JOBSPEC_ARGC_MAX)
        return bad(err, E2BIG, path, "%zu arguments exceed the limit of %d", n,
                   JOBSPEC_ARGC_MAX);
    if (!(g->argv = calloc(n + 1, sizeof(g->argv[0]))))
        return oom(err);
    for (i = 0; i < n; i++) {
        const char *s;
        mkpath(p, "%s[%zu]", path, i);
        if (get_string(json_array_get(a, i), p, i == 0, &s, err) < 0)
            return -1;
        if (!(g->argv[i] = strdup(s)))
            return oom(err);
        g->argc = (int)i + 1;
    }
    return 0;
}

/* count := {"per_slot":1} (single group only) | {"total":K} */
static int parse_task_count(jobspec_t *js,
                            struct group *g,
                            const json_t *c,
                            const char *path,
                            eddy_error_t *err)
{
    static const char *const count_keys[] = {"per_slot", "total", NULL};
    const json_t *per_slot, *total;
    char p[PATH_LEN];

    if (need_object(c, path, err) < 0 || check_keys(c, path, count_keys, err))
        return -1;
    per_slot = json_object_get(c, "per_slot");
    total = json_object_get(c, "total");
    if (!per_slot == !total)
        return bad(err, EINVAL, path,
                   "must have exactly one of 'per_slot' or 'total'");
    if (total) {
        mkpath(p, "%s.total", path);
        return get_count(total, p, JOBSPEC_SLOTS_MAX, &g->ntasks, err);
    }
    mkpath(p, "%s.per_slot", path);
    if (!json_is_integer(per_slot) || json_integer_value(per_slot) != 1)
        return bad(err, EINVAL, p, "must be 1 (one task per slot)");
    if (js->ngroups > 1)
        return bad(err, EINVAL, p,
                   "only allowed with a single task group; use 'total'");
    g->ntasks = js->nslots;
    return 0;
}

static int parse_tasks(jobspec_t *js, const json_t *a, eddy_error_t *err)
{
    static const char *const task_keys[] = {"command", "slot", "count", NULL};
    char path[PATH_LEN], p[PATH_LEN];
    uint64_t sum = 0;
    size_t i, n;

    if (!json_is_array(a) || (n = json_array_size(a)) == 0)
        return bad(err, EINVAL, "tasks", "must be a non-empty array");
    if (n > JOBSPEC_GROUPS_MAX)
        return bad(err, E2BIG, "tasks",
                   "%zu task groups exceed the limit of %d", n,
                   JOBSPEC_GROUPS_MAX);
    if (!(js->groups = calloc(n, sizeof(js->groups[0]))))
        return oom(err);
    js->ngroups = (uint32_t)n;
    for (i = 0; i < n; i++) {
        const json_t *t = json_array_get(a, i), *v;
        struct group *g = &js->groups[i];

        mkpath(path, "tasks[%zu]", i);
        if (need_object(t, path, err) < 0 ||
            check_keys(t, path, task_keys, err) < 0)
            return -1;
        mkpath(p, "%s.command", path);
        if (!(v = need(t, "command", path, err)) ||
            parse_command(g, v, p, err) < 0)
            return -1;
        mkpath(p, "%s.slot", path);
        if (!(v = need(t, "slot", path, err)) ||
            get_word(v, p, "task", err) < 0)
            return -1;
        mkpath(p, "%s.count", path);
        if (!(v = need(t, "count", path, err)) ||
            parse_task_count(js, g, v, p, err) < 0)
            return -1;
        /* sum <= 4096 * 2^24: no overflow; ranks fit once it matches. */
        g->first_rank = (uint32_t)(sum < UINT32_MAX ? sum : UINT32_MAX);
        sum += g->ntasks;
    }
    if (sum != js->nslots)
        return bad(err, EINVAL, "tasks",
                   "totals add up to %llu but there are %u slots",
                   (unsigned long long)sum, js->nslots);
    return 0;
}

static int parse_environment(jobspec_t *js, const json_t *o, eddy_error_t *err)
{
    static const char path[] = "attributes.system.environment";
    const char *key;
    size_t klen;
    json_t *v;
    char buf[48], p[PATH_LEN];

    if (need_object(o, path, err) < 0)
        return -1;
    json_object_keylen_foreach((json_t *)o, key, klen, v)
    {
        const char *s;
        if (klen == 0)
            return bad(err, EINVAL, path, "empty variable name");
        if (strlen(key) != klen)
            return bad(err, EINVAL, path, "variable name contains a NUL byte");
        safe(key, buf, sizeof(buf));
        if (strchr(key, '='))
            return bad(err, EINVAL, path, "variable name '%s' contains '='",
                       buf);
        mkpath(p, "%s.%s", path, buf);
        if (get_string(v, p, false, &s, err) < 0)
            return -1;
    }
    return copy_object(o, &js->env, err);
}

/* shell.options.plugins: [{"path": ABSOLUTE, "args"?: STRING}, ...] */
static int check_plugins(const json_t *v, eddy_error_t *err)
{
    static const char *const plugin_keys[] = {"path", "args", NULL};
    const char *base = "attributes.system.shell.options.plugins";
    char path[96];
    const json_t *e, *w;
    const char *s;
    size_t i;

    if (!json_is_array(v))
        return bad(err, EINVAL, base, "must be an array");
    if (json_array_size(v) > JOBSPEC_PLUGINS_MAX)
        return bad(err, E2BIG, base, "more than %d plugins",
                   JOBSPEC_PLUGINS_MAX);
    /* jansson's array iterator is not const; nothing is modified */
    json_array_foreach((json_t *)v, i, e)
    {
        snprintf(path, sizeof(path), "%s[%zu]", base, i);
        if (need_object(e, path, err) < 0 ||
            check_keys(e, path, plugin_keys, err) < 0 ||
            !(w = need(e, "path", path, err)))
            return -1;
        snprintf(path, sizeof(path), "%s[%zu].path", base, i);
        if (get_string(w, path, true, &s, err) < 0)
            return -1;
        if (s[0] != '/')
            return bad(err, EINVAL, path, "must be an absolute path");
        if (strlen(s) >= JOBSPEC_PLUGIN_PATH_MAX)
            return bad(err, E2BIG, path, "longer than %d bytes",
                       JOBSPEC_PLUGIN_PATH_MAX - 1);
        if ((w = json_object_get(e, "args"))) {
            snprintf(path, sizeof(path), "%s[%zu].args", base, i);
            if (get_string(w, path, false, &s, err) < 0)
                return -1;
            if (strlen(s) > JOBSPEC_PLUGIN_ARGS_MAX)
                return bad(err, E2BIG, path, "longer than %d bytes",
                           JOBSPEC_PLUGIN_ARGS_MAX);
        }
    }
    return 0;
}

int jobspec_plugin_parse(const char *opt,
                         const char *cwd,
                         json_t **out,
                         eddy_error_t *err)
{
    const char *comma;
    char *path = NULL;
    json_t *o = NULL, *a = NULL;
    int rc;

    if (!opt || !out) {
        errno = EINVAL;
        return errprintf(err, "plugin: no option");
    }
    comma = strchr(opt, ',');
    if (comma == opt || *opt == '\0') {
        errno = EINVAL;
        return errprintf(err, "plugin=%s: expected plugin=PATH[,ARGS]", opt);
    }
    if (opt[0] != '/') {
        if (!cwd || cwd[0] != '/') {
            errno = EINVAL;
            return errprintf(err, "plugin=%s: the path must be absolute", opt);
        }
        rc = asprintf(&path, "%s/%.*s", cwd,
                      (int)(comma ? (size_t)(comma - opt) : strlen(opt)), opt);
    } else {
        rc = asprintf(&path, "%.*s",
                      (int)(comma ? (size_t)(comma - opt) : strlen(opt)), opt);
    }
    if (rc < 0) {
        errno = ENOMEM;
        return errprintf(err, "out of memory");
    }
    /* jansson refuses strings that are not UTF-8 */
    o = json_object();
    rc = o ? json_object_set_new(o, "path", json_string(path)) : -1;
    if (rc == 0 && comma)
        rc = json_object_set_new(o, "args", json_string(comma + 1));
    free(path);
    if (rc < 0 || !(a = json_array()) || json_array_append(a, o) < 0) {
        json_decref(o);
        json_decref(a);
        errno = EINVAL;
        return errprintf(err, "plugin=%s: not valid UTF-8 (or out of memory)",
                         opt);
    }
    /* the same rules as a submitted jobspec */
    if (check_plugins(a, err) < 0) {
        json_decref(o);
        json_decref(a);
        return -1;
    }
    json_decref(a);
    *out = o;
    return 0;
}

static int parse_system(jobspec_t *js, const json_t *o, eddy_error_t *err)
{
    static const char *const system_keys[] = {"duration", "cwd", "environment",
                                              "shell",    "job", NULL};
    static const char *const shell_keys[] = {"options", NULL};
    static const char *const job_keys[] = {"name", NULL};
    const json_t *v, *w;
    const char *s;

    if (need_object(o, "attributes.system", err) < 0 ||
        check_keys(o, "attributes.system", system_keys, err) < 0)
        return -1;
    if ((v = json_object_get(o, "duration"))) {
        if (!json_is_number(v) || !(json_number_value(v) >= 0) ||
            !isfinite(json_number_value(v)))
            return bad(err, EINVAL, "attributes.system.duration",
                       "must be a number >= 0 (seconds, 0 = unlimited)");
        js->duration = json_number_value(v);
    }
    if ((v = json_object_get(o, "cwd"))) {
        if (get_string(v, "attributes.system.cwd", true, &s, err) < 0)
            return -1;
        if (s[0] != '/')
            return bad(err, EINVAL, "attributes.system.cwd",
                       "must be an absolute path");
        if (!(js->cwd = strdup(s)))
            return oom(err);
    }
    if ((v = json_object_get(o, "environment")) &&
        parse_environment(js, v, err) < 0)
        return -1;
    if ((v = json_object_get(o, "shell"))) {
        if (need_object(v, "attributes.system.shell", err) < 0 ||
            check_keys(v, "attributes.system.shell", shell_keys, err) < 0)
            return -1;
        if ((w = json_object_get(v, "options"))) {
            if (need_object(w, "attributes.system.shell.options", err) < 0)
                return -1;
            if (json_object_get(w, "plugins") &&
                check_plugins(json_object_get(w, "plugins"), err) < 0)
                return -1;
            if (copy_object(w, &js->options, err) < 0)
                return -1;
        }
    }
    if ((v = json_object_get(o, "job"))) {
        if (need_object(v, "attributes.system.job", err) < 0 ||
            check_keys(v, "attributes.system.job", job_keys, err) < 0)
            return -1;
        if ((w = json_object_get(v, "name"))) {
            if (get_string(w, "attributes.system.job.name", true, &s, err) < 0)
                return -1;
            if (!(js->name = strdup(s)))
                return oom(err);
        }
    }
    return 0;
}

static int parse_attributes(jobspec_t *js, const json_t *o, eddy_error_t *err)
{
    static const char *const attr_keys[] = {"system", "user", NULL};
    const json_t *v;

    if (need_object(o, "attributes", err) < 0 ||
        check_keys(o, "attributes", attr_keys, err) < 0)
        return -1;
    if ((v = json_object_get(o, "system")) && parse_system(js, v, err) < 0)
        return -1;
    if ((v = json_object_get(o, "user"))) {
        if (need_object(v, "attributes.user", err) < 0 ||
            copy_object(v, &js->user, err) < 0)
            return -1;
    }
    return 0;
}

jobspec_t *jobspec_decode(const json_t *o, eddy_error_t *err)
{
    static const char *const top_keys[] = {"version", "resources", "tasks",
                                           "attributes", NULL};
    jobspec_t *js = NULL;
    const json_t *v;
    size_t size;

    if (!o || !json_is_object(o)) {
        bad(err, EINVAL, NULL, "must be a JSON object");
        return NULL;
    }
    /* Bound what one job can make the job manager keep and send. */
    size = json_dumpb(o, NULL, 0, JSON_COMPACT);
    if (size > JOBSPEC_SIZE_MAX) {
        bad(err, E2BIG, NULL, "encoded size %zu exceeds the limit of %u bytes",
            size, JOBSPEC_SIZE_MAX);
        return NULL;
    }
    if (!(js = calloc(1, sizeof(*js)))) {
        oom(err);
        return NULL;
    }
    if (check_keys(o, NULL, top_keys, err) < 0)
        goto error;
    if (!(v = need(o, "version", NULL, err)))
        goto error;
    if (!json_is_integer(v)) {
        bad(err, EINVAL, "version", "must be an integer");
        goto error;
    }
    if (json_integer_value(v) != JOBSPEC_VERSION) {
        bad(err, EINVAL, "version", "unsupported version %lld (expected %d)",
            (long long)json_integer_value(v), JOBSPEC_VERSION);
        goto error;
    }
    js->version = JOBSPEC_VERSION;
    if (!(v = need(o, "resources", NULL, err)) ||
        parse_resources(js, v, err) < 0)
        goto error;
    if (!(v = need(o, "tasks", NULL, err)) || parse_tasks(js, v, err) < 0)
        goto error;
    if ((v = json_object_get(o, "attributes")) &&
        parse_attributes(js, v, err) < 0)
        goto error;
    return js;
error:
    jobspec_destroy(js);
    return NULL;
}

jobspec_t *jobspec_decode_str(const char *s, size_t len, eddy_error_t *err)
{
    json_error_t jerr;
    jobspec_t *js;
    json_t *o;

    if (!s) {
        bad(err, EINVAL, NULL, "no document");
        return NULL;
    }
    if (len > JOBSPEC_SIZE_MAX) {
        bad(err, E2BIG, NULL, "document of %zu bytes exceeds the limit of %u",
            len, JOBSPEC_SIZE_MAX);
        return NULL;
    }
    if (!(o = json_loadb(s, len, JSON_REJECT_DUPLICATES, &jerr))) {
        bad(err, EINVAL, NULL, "invalid JSON: %s (line %d, column %d)",
            jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    js = jobspec_decode(o, err);
    json_decref(o);
    return js;
}

void jobspec_destroy(jobspec_t *js)
{
    if (js) {
        int saved_errno = errno;
        for (uint32_t i = 0; js->groups && i < js->ngroups; i++) {
            for (int k = 0; js->groups[i].argv && k < js->groups[i].argc; k++)
                free(js->groups[i].argv[k]);
            free(js->groups[i].argv);
        }
        free(js->groups);
        free(js->cwd);
        free(js->name);
        json_decref(js->env);
        json_decref(js->options);
        json_decref(js->user);
        free(js);
        errno = saved_errno;
    }
}

/* --- encoding ----------------------------------------------------------- */

/* json_object_set_new()/json_array_append_new() release 'v' on failure and
 * fail on a NULL 'v' or container, so building can run unchecked and be
 * judged once by the flag. */
static void put(json_t *o, const char *key, json_t *v, bool *ok)
{
    if (json_object_set_new(o, key, v) < 0)
        *ok = false;
}

static void append(json_t *a, json_t *v, bool *ok)
{
    if (json_array_append_new(a, v) < 0)
        *ok = false;
}

static json_t *encode_slot(uint32_t count, uint32_t cores, bool *ok)
{
    json_t *s = json_object(), *core = json_object(), *with = json_array();

    put(core, "type", json_string("core"), ok);
    put(core, "count", json_integer(cores), ok);
    append(with, core, ok);
    put(s, "type", json_string("slot"), ok);
    put(s, "count", json_integer(count), ok);
    put(s, "label", json_string("task"), ok);
    put(s, "with", with, ok);
    return s;
}

json_t *jobspec_encode(const jobspec_t *js)
{
    json_t *o, *r, *res, *tasks, *attr, *sys;
    bool ok = true;

    if (!js) {
        errno = EINVAL;
        return NULL;
    }
    o = json_object();
    put(o, "version", json_integer(js->version), &ok);
    if (js->nnodes > 0) {
        json_t *with = json_array();
        r = json_object();
        put(r, "type", json_string("node"), &ok);
        put(r, "count", json_integer(js->nnodes), &ok);
        if (js->exclusive)
            put(r, "exclusive", json_true(), &ok);
        append(with, encode_slot(js->slots_per_node, js->cores_per_slot, &ok),
               &ok);
        put(r, "with", with, &ok);
    } else {
        r = encode_slot(js->nslots, js->cores_per_slot, &ok);
    }
    res = json_array();
    append(res, r, &ok);
    put(o, "resources", res, &ok);
    tasks = json_array();
    for (uint32_t i = 0; i < js->ngroups; i++) {
        const struct group *g = &js->groups[i];
        json_t *t = json_object(), *cmd = json_array(), *count = json_object();
        for (int k = 0; k < g->argc; k++)
            append(cmd, json_string(g->argv[k]), &ok);
        /* One group always means one task per slot: say it that way. */
        if (js->ngroups == 1)
            put(count, "per_slot", json_integer(1), &ok);
        else
            put(count, "total", json_integer(g->ntasks), &ok);
        put(t, "command", cmd, &ok);
        put(t, "slot", json_string("task"), &ok);
        put(t, "count", count, &ok);
        append(tasks, t, &ok);
    }
    put(o, "tasks", tasks, &ok);
    sys = json_object();
    put(sys, "duration", json_real(js->duration), &ok);
    if (js->cwd)
        put(sys, "cwd", json_string(js->cwd), &ok);
    if (js->env)
        put(sys, "environment", json_deep_copy(js->env), &ok);
    if (js->options) {
        json_t *shell = json_object();
        put(shell, "options", json_deep_copy(js->options), &ok);
        put(sys, "shell", shell, &ok);
    }
    if (js->name) {
        json_t *job = json_object();
        put(job, "name", json_string(js->name), &ok);
        put(sys, "job", job, &ok);
    }
    attr = json_object();
    put(attr, "system", sys, &ok);
    if (js->user)
        put(attr, "user", json_deep_copy(js->user), &ok);
    put(o, "attributes", attr, &ok);
    if (!ok) {
        json_decref(o);
        errno = ENOMEM;
        return NULL;
    }
    return o;
}

/* --- accessors ---------------------------------------------------------- */

int jobspec_version(const jobspec_t *js)
{
    return js ? js->version : 0;
}

uint32_t jobspec_nnodes(const jobspec_t *js)
{
    return js ? js->nnodes : 0;
}

uint32_t jobspec_slots_per_node(const jobspec_t *js)
{
    return js ? js->slots_per_node : 0;
}

uint32_t jobspec_nslots(const jobspec_t *js)
{
    return js ? js->nslots : 0;
}

uint32_t jobspec_ntasks(const jobspec_t *js)
{
    return js ? js->nslots : 0;
}

uint32_t jobspec_cores_per_slot(const jobspec_t *js)
{
    return js ? js->cores_per_slot : 0;
}

bool jobspec_exclusive(const jobspec_t *js)
{
    return js ? js->exclusive : false;
}

uint32_t jobspec_ngroups(const jobspec_t *js)
{
    return js ? js->ngroups : 0;
}

static const struct group *group_get(const jobspec_t *js, uint32_t g)
{
    if (!js || g >= js->ngroups) {
        errno = EINVAL;
        return NULL;
    }
    return &js->groups[g];
}

int jobspec_group_argc(const jobspec_t *js, uint32_t g)
{
    const struct group *gr = group_get(js, g);
    return gr ? gr->argc : -1;
}

const char *const *jobspec_group_argv(const jobspec_t *js, uint32_t g)
{
    const struct group *gr = group_get(js, g);
    return gr ? (const char *const *)gr->argv : NULL;
}

int jobspec_group_ntasks(const jobspec_t *js, uint32_t g)
{
    const struct group *gr = group_get(js, g);
    return gr ? (int)gr->ntasks : -1;
}

int jobspec_group_first_rank(const jobspec_t *js, uint32_t g)
{
    const struct group *gr = group_get(js, g);
    return gr ? (int)gr->first_rank : -1;
}

int jobspec_task_group(const jobspec_t *js, uint32_t rank)
{
    uint32_t lo = 0, hi;

    if (!js || rank >= js->nslots) {
        errno = EINVAL;
        return -1;
    }
    /* The last group whose first rank is <= rank; groups are non-empty. */
    hi = js->ngroups - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (js->groups[mid].first_rank <= rank)
            lo = mid;
        else
            hi = mid - 1;
    }
    return (int)lo;
}

double jobspec_duration(const jobspec_t *js)
{
    return js ? js->duration : 0;
}

const char *jobspec_cwd(const jobspec_t *js)
{
    return js ? js->cwd : NULL;
}

json_t *jobspec_environment(const jobspec_t *js)
{
    return js ? js->env : NULL;
}

json_t *jobspec_shell_options(const jobspec_t *js)
{
    return js ? js->options : NULL;
}

const char *jobspec_job_name(const jobspec_t *js)
{
    return js ? js->name : NULL;
}

json_t *jobspec_user(const jobspec_t *js)
{
    return js ? js->user : NULL;
}

/* --- builder ------------------------------------------------------------ */

struct bgroup {
    json_t *command; /* array of strings */
    uint32_t ntasks; /* 0: one per slot */
};

struct jobspec_builder {
    uint32_t nnodes;
    uint32_t ntasks;
    uint32_t tasks_per_node;
    uint32_t cores; /* 0: default 1 */
    bool exclusive;
    double duration;
    json_t *cwd;     /* string or NULL */
    json_t *name;    /* string or NULL */
    json_t *env;     /* object */
    bool env_given;  /* emit "environment" even when empty */
    json_t *options; /* object */
    struct bgroup *groups;
    size_t ngroups;
    size_t cap;
};

/* A JSON string for 's', or NULL with errno EINVAL (not UTF-8) or ENOMEM. */
static json_t *jstring(const char *s)
{
    json_t *v;

    if ((v = json_string(s)))
        return v;
    /* json_string() fails on bad UTF-8 or no memory: tell them apart. */
    if ((v = json_stringn_nocheck(s, strlen(s)))) {
        json_decref(v);
        errno = EINVAL;
    } else {
        errno = ENOMEM;
    }
    return NULL;
}

jobspec_builder_t *jobspec_builder_create(void)
{
    jobspec_builder_t *b = calloc(1, sizeof(*b));

    if (!b)
        return NULL;
    if (!(b->env = json_object()) || !(b->options = json_object())) {
        jobspec_builder_destroy(b);
        errno = ENOMEM;
        return NULL;
    }
    return b;
}

void jobspec_builder_destroy(jobspec_builder_t *b)
{
    if (b) {
        int saved_errno = errno;
        for (size_t i = 0; i < b->ngroups; i++)
            json_decref(b->groups[i].command);
        free(b->groups);
        json_decref(b->cwd);
        json_decref(b->name);
        json_decref(b->env);
        json_decref(b->options);
        free(b);
        errno = saved_errno;
    }
}

static int set_u32(jobspec_builder_t *b, uint32_t *field, uint32_t value)
{
    if (!b) {
        errno = EINVAL;
        return -1;
    }
    *field = value;
    return 0;
}

int jobspec_builder_set_nnodes(jobspec_builder_t *b, uint32_t nnodes)
{
    return set_u32(b, b ? &b->nnodes : NULL, nnodes);
}

int jobspec_builder_set_ntasks(jobspec_builder_t *b, uint32_t ntasks)
{
    return set_u32(b, b ? &b->ntasks : NULL, ntasks);
}

int jobspec_builder_set_tasks_per_node(jobspec_builder_t *b, uint32_t tpn)
{
    return set_u32(b, b ? &b->tasks_per_node : NULL, tpn);
}

int jobspec_builder_set_cores_per_task(jobspec_builder_t *b, uint32_t cores)
{
    return set_u32(b, b ? &b->cores : NULL, cores);
}

int jobspec_builder_set_exclusive(jobspec_builder_t *b, bool exclusive)
{
    if (!b) {
        errno = EINVAL;
        return -1;
    }
    b->exclusive = exclusive;
    return 0;
}

int jobspec_builder_set_duration(jobspec_builder_t *b, double seconds)
{
    if (!b || !isfinite(seconds)) {
        errno = EINVAL;
        return -1;
    }
    b->duration = seconds;
    return 0;
}

/* Replace string '*field' with a copy of 's' (NULL clears it). */
static int set_string(jobspec_builder_t *b, json_t **field, const char *s)
{
    json_t *v = NULL;

    if (!b) {
        errno = EINVAL;
        return -1;
    }
    if (s && !(v = jstring(s)))
        return -1;
    json_decref(*field);
    *field = v;
    return 0;
}

int jobspec_builder_set_cwd(jobspec_builder_t *b, const char *cwd)
{
    return set_string(b, b ? &b->cwd : NULL, cwd);
}

int jobspec_builder_set_job_name(jobspec_builder_t *b, const char *name)
{
    return set_string(b, b ? &b->name : NULL, name);
}

/* Set or (v NULL) delete o[key]; 'v' is stolen. */
static int set_member(json_t *o, const char *key, json_t *v)
{
    if (!v) {
        (void)json_object_del(o, key); /* absent already is fine */
        return 0;
    }
    if (json_object_set_new(o, key, v) < 0) {
        /* jansson refuses keys that are not UTF-8. */
        errno = EINVAL;
        return -1;
    }
    return 0;
}

int jobspec_builder_setenv(jobspec_builder_t *b,
                           const char *key,
                           const char *value)
{
    json_t *v = NULL;

    if (!b || !key) {
        errno = EINVAL;
        return -1;
    }
    if (value && !(v = jstring(value)))
        return -1;
    return set_member(b->env, key, v);
}

int jobspec_builder_clearenv(jobspec_builder_t *b)
{
    if (!b) {
        errno = EINVAL;
        return -1;
    }
    json_object_clear(b->env);
    b->env_given = true;
    return 0;
}

int jobspec_builder_set_shell_option(jobspec_builder_t *b,
                                     const char *key,
                                     const json_t *value)
{
    json_t *v = NULL;

    if (!b || !key) {
        errno = EINVAL;
        return -1;
    }
    if (value && !(v = json_deep_copy(value))) {
        errno = ENOMEM;
        return -1;
    }
    return set_member(b->options, key, v);
}

int jobspec_builder_add_group(jobspec_builder_t *b,
                              int argc,
                              const char *const *argv,
                              uint32_t ntasks)
{
    json_t *cmd;

    if (!b || argc < 0 || (argc > 0 && !argv)) {
        errno = EINVAL;
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        if (!argv[i]) {
            errno = EINVAL;
            return -1;
        }
    }
    if (b->ngroups == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4;
        struct bgroup *g = realloc(b->groups, cap * sizeof(*g));
        if (!g) {
            errno = ENOMEM;
            return -1;
        }
        b->groups = g;
        b->cap = cap;
    }
    if (!(cmd = json_array())) {
        errno = ENOMEM;
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        json_t *s = jstring(argv[i]);
        if (!s || json_array_append_new(cmd, s) < 0) {
            int saved_errno = s ? ENOMEM : errno;
            json_decref(cmd);
            errno = saved_errno;
            return -1;
        }
    }
    b->groups[b->ngroups].command = cmd;
    b->groups[b->ngroups].ntasks = ntasks;
    b->ngroups++;
    return 0;
}

/* Total tasks and the node layout, by the rules in jobspec.h. */
static int builder_shape(const jobspec_builder_t *b,
                         uint64_t *total,
                         uint64_t *per_node,
                         eddy_error_t *err)
{
    bool all_counted = true;
    uint64_t sum = 0;

    if (b->ngroups == 0)
        return bad(err, EINVAL, NULL, "no task group: add a command to run");
    if (b->tasks_per_node && !b->nnodes)
        return bad(err, EINVAL, NULL, "tasks per node needs a node count");
    if (b->tasks_per_node && b->ntasks)
        return bad(err, EINVAL, NULL,
                   "give a total task count or tasks per node, not both");
    if (b->exclusive && !b->nnodes)
        return bad(err, EINVAL, NULL, "exclusive needs a node count");
    for (size_t i = 0; i < b->ngroups; i++) {
        if (b->groups[i].ntasks == 0)
            all_counted = false;
        sum += b->groups[i].ntasks;
    }
    if (b->ntasks)
        *total = b->ntasks;
    else if (b->tasks_per_node)
        *total = (uint64_t)b->nnodes * b->tasks_per_node;
    else if (all_counted)
        *total = sum;
    else
        *total = b->nnodes ? b->nnodes : 1;
    if (b->nnodes) {
        if (*total % b->nnodes != 0)
            return bad(err, EINVAL, NULL,
                       "%llu tasks do not divide evenly over %u nodes",
                       (unsigned long long)*total, b->nnodes);
        *per_node = *total / b->nnodes;
    }
    return 0;
}

/* Jobspec JSON from the builder's settings, or NULL (out of memory). */
static json_t *builder_json(const jobspec_builder_t *b,
                            uint64_t total,
                            uint64_t per_node)
{
    json_t *o = json_object(), *res = json_array(), *tasks = json_array();
    json_t *slot, *core, *with, *attr, *sys;
    bool ok = true;

    core = json_object();
    put(core, "type", json_string("core"), &ok);
    put(core, "count", json_integer(b->cores ? b->cores : 1), &ok);
    with = json_array();
    append(with, core, &ok);
    slot = json_object();
    put(slot, "type", json_string("slot"), &ok);
    put(slot, "count", json_integer((json_int_t)(b->nnodes ? per_node : total)),
        &ok);
    put(slot, "label", json_string("task"), &ok);
    put(slot, "with", with, &ok);
    if (b->nnodes) {
        json_t *node = json_object();
        with = json_array();
        append(with, slot, &ok);
        put(node, "type", json_string("node"), &ok);
        put(node, "count", json_integer(b->nnodes), &ok);
        if (b->exclusive)
            put(node, "exclusive", json_true(), &ok);
        put(node, "with", with, &ok);
        slot = node;
    }
    append(res, slot, &ok);
    for (size_t i = 0; i < b->ngroups; i++) {
        json_t *t = json_object(), *count = json_object();
        if (b->groups[i].ntasks)
            put(count, "total", json_integer(b->groups[i].ntasks), &ok);
        else
            put(count, "per_slot", json_integer(1), &ok);
        put(t, "command", json_incref(b->groups[i].command), &ok);
        put(t, "slot", json_string("task"), &ok);
        put(t, "count", count, &ok);
        append(tasks, t, &ok);
    }
    sys = json_object();
    put(sys, "duration", json_real(b->duration), &ok);
    if (b->cwd)
        put(sys, "cwd", json_incref(b->cwd), &ok);
    if (b->env_given || json_object_size(b->env) > 0)
        put(sys, "environment", json_incref(b->env), &ok);
    if (json_object_size(b->options) > 0) {
        json_t *shell = json_object();
        put(shell, "options", json_incref(b->options), &ok);
        put(sys, "shell", shell, &ok);
    }
    if (b->name) {
        json_t *job = json_object();
        put(job, "name", json_incref(b->name), &ok);
        put(sys, "job", job, &ok);
    }
    attr = json_object();
    put(attr, "system", sys, &ok);
    put(o, "version", json_integer(JOBSPEC_VERSION), &ok);
    put(o, "resources", res, &ok);
    put(o, "tasks", tasks, &ok);
    put(o, "attributes", attr, &ok);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

jobspec_t *jobspec_builder_finish(const jobspec_builder_t *b, eddy_error_t *err)
{
    uint64_t total = 0, per_node = 0;
    jobspec_t *js;
    json_t *o;

    if (!b) {
        bad(err, EINVAL, NULL, "no builder");
        return NULL;
    }
    if (builder_shape(b, &total, &per_node, err) < 0)
        return NULL;
    if (!(o = builder_json(b, total, per_node))) {
        oom(err);
        return NULL;
    }
    /* The decoded jobspec copies what it keeps, so the builder's shared
     * pieces (incref'd above) stay the builder's. */
    js = jobspec_decode(o, err);
    json_decref(o);
    return js;
}
