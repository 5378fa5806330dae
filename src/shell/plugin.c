/* plugin.c - job-shell plugins: loading, callbacks, and the functions of
 * include/eddy/shell.h.
 *
 * eddy-shell is linked with ENABLE_EXPORTS, so the eddy_shell_* functions
 * defined here are what a plugin's undefined symbols resolve to: plugins
 * link no library.  Each plugin is loaded RTLD_LOCAL so that two plugins
 * may define the same symbols.
 *
 * Which plugin is running is tracked (current), so that a message or a
 * failure names it.  task.init runs in a forked child (task.c's pre_exec
 * hook): there the context is a copy, in_child is set, and only the
 * task's environment, the task's stderr and the failure message matter.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/common/hex.h"
#include "src/common/errprintf.h"
#include "src/shell/plugin.h"
#include "src/shell/taskenv.h"

extern char **environ;

/* A failure message is cut to this (it becomes part of a job exception
 * note, itself cut to 512 bytes by the job manager). */
#define PLUGIN_MSG_MAX 384
/* A log line's message part. */
#define PLUGIN_LOG_MAX 1024

enum topic {
    TOPIC_SHELL_INIT = 0,
    TOPIC_TASK_INIT,
    TOPIC_SHELL_START,
    TOPIC_TASK_EXIT,
    TOPIC_SHELL_EXIT,
    NTOPICS,
};

static const char *const topic_names[NTOPICS] = {
    "shell.init", "task.init", "shell.start", "task.exit", "shell.exit",
};

/* Where the job is, for what plugins may do to the environment. */
enum stage {
    STAGE_BEFORE_FORK = 0, /* changes recorded, applied at fork */
    STAGE_HELD,            /* changes go to the held tasks */
    STAGE_RUNNING,         /* too late */
};

struct cb {
    eddy_shell_cb_f fn;
    void *arg;
};

struct eddy_shell_plugin {
    eddy_shell_t *sh;
    char *path;
    void *dl;
    struct cb cbs[NTOPICS];
};

struct eddy_shell_task {
    eddy_shell_t *sh;
    uint32_t rank;
    task_t *t; /* borrowed from the shell; NULL until forked */
    pid_t pid;
    int code; /* -1 until exited */
};

struct spawned {
    struct spawned *next;
    task_t *t;
    eddy_shell_plugin_t *p;
    eddy_shell_exit_f cb;
    void *arg;
    bool exited;
};

struct envmod {
    char *name;
    char *value; /* NULL: remove */
};

struct eddy_shell {
    struct plugins_info info;
    const struct plugins_ops *ops;
    void *arg;
    eddy_shell_plugin_t *plugins[PLUGIN_MAX];
    size_t nplugins;
    struct eddy_shell_task *tasks; /* info.nlocal */
    proctable_t *pt;
    struct envmod *env;
    size_t nenv;
    struct spawned *spawned;
    enum stage stage;
    /* the plugin whose code runs, and what it said */
    eddy_shell_plugin_t *current;
    bool loading;
    bool in_call;
    bool failset;
    char failmsg[PLUGIN_MSG_MAX];
    /* task.init: this copy of the context is a forked task's */
    bool in_child;
    struct eddy_shell_task *child_task;
};

static int topic_index(const char *topic)
{
    for (int i = 0; topic && i < NTOPICS; i++)
        if (!strcmp(topic, topic_names[i]))
            return i;
    return -1;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');

    return s ? s + 1 : path;
}

/* --- lifecycle ---------------------------------------------------------- */

eddy_shell_t *plugins_create(const struct plugins_info *info,
                             const struct plugins_ops *ops,
                             void *arg)
{
    eddy_shell_t *ps;

    if (!info || !ops || (info->nlocal > 0 && !info->local_ranks)) {
        errno = EINVAL;
        return NULL;
    }
    if (!(ps = calloc(1, sizeof(*ps))))
        return NULL;
    ps->info = *info;
    ps->info.local_ranks = NULL;
    ps->ops = ops;
    ps->arg = arg;
    if (info->nlocal > 0 &&
        !(ps->tasks = calloc(info->nlocal, sizeof(*ps->tasks)))) {
        free(ps);
        errno = ENOMEM;
        return NULL;
    }
    for (uint32_t i = 0; i < info->nlocal; i++) {
        ps->tasks[i].sh = ps;
        ps->tasks[i].rank = info->local_ranks[i];
        ps->tasks[i].pid = -1;
        ps->tasks[i].code = -1;
    }
    return ps;
}

void plugins_destroy(eddy_shell_t *ps)
{
    int saved = errno;

    if (!ps)
        return;
    plugins_kill_spawned(ps);
    while (ps->spawned) {
        struct spawned *s = ps->spawned;
        ps->spawned = s->next;
        task_destroy(s->t);
        free(s);
    }
    for (size_t i = 0; i < ps->nenv; i++) {
        free(ps->env[i].name);
        free(ps->env[i].value);
    }
    free(ps->env);
    proctable_destroy(ps->pt);
    for (size_t i = ps->nplugins; i-- > 0;) {
        eddy_shell_plugin_t *p = ps->plugins[i];
        if (p->dl)
            dlclose(p->dl);
        free(p->path);
        free(p);
    }
    free(ps->tasks);
    free(ps);
    errno = saved;
}

/* --- calling plugins ---------------------------------------------------- */

/* Run one callback of plugin 'p' with the failure message reset; the
 * caller turns a -1 into a note with fail_note(). */
static int run_cb(eddy_shell_t *ps,
                  eddy_shell_plugin_t *p,
                  int topic,
                  struct eddy_shell_task *task)
{
    int rc;

    ps->current = p;
    ps->in_call = true;
    ps->failset = false;
    ps->failmsg[0] = '\0';
    errno = 0;
    rc = p->cbs[topic].fn(ps, topic_names[topic], task, p->cbs[topic].arg);
    if (rc < 0 && errno == 0)
        errno = ECANCELED;
    ps->in_call = false;
    ps->current = NULL;
    return rc < 0 ? -1 : 0;
}

/* The exception note for plugin 'p' failing at 'what' (errno kept). */
static int fail_note(eddy_shell_t *ps,
                     eddy_shell_plugin_t *p,
                     const char *what,
                     eddy_error_t *err)
{
    return errprintf(err, "node %u: plugin %s: %s: %s", ps->info.node_rank,
                     p->path, what,
                     ps->failset ? ps->failmsg : strerror(errno));
}

int plugins_call(eddy_shell_t *ps,
                 const char *topic,
                 int task,
                 eddy_error_t *err)
{
    int t = topic_index(topic);
    struct eddy_shell_task *st = NULL;

    if (!ps || t < 0 || (task >= 0 && (uint32_t)task >= ps->info.nlocal)) {
        errno = EINVAL;
        return errprintf(err, "plugins: bad call of '%s'",
                         topic ? topic : "(null)");
    }
    if (task >= 0)
        st = &ps->tasks[task];
    for (size_t i = 0; i < ps->nplugins; i++) {
        eddy_shell_plugin_t *p = ps->plugins[i];
        if (!p->cbs[t].fn)
            continue;
        if (run_cb(ps, p, t, st) < 0)
            return fail_note(ps, p, topic, err);
    }
    return 0;
}

bool plugins_has(const eddy_shell_t *ps, const char *topic)
{
    int t = topic_index(topic);

    for (size_t i = 0; ps && t >= 0 && i < ps->nplugins; i++)
        if (ps->plugins[i]->cbs[t].fn)
            return true;
    return false;
}

/* --- loading ------------------------------------------------------------ */

int plugins_load(eddy_shell_t *ps,
                 const char *path,
                 const char *args,
                 eddy_error_t *err)
{
    eddy_shell_plugin_t *p;
    eddy_plugin_init_f init;
    const char *why;
    int rc;

    if (!ps || !path || !*path) {
        errno = EINVAL;
        return errprintf(err, "plugin: no path");
    }
    if (ps->nplugins == PLUGIN_MAX) {
        errno = E2BIG;
        return errprintf(err, "plugin %s: more than %d plugins", path,
                         PLUGIN_MAX);
    }
    if (!(p = calloc(1, sizeof(*p))) || !(p->path = strdup(path))) {
        free(p);
        errno = ENOMEM;
        return errprintf(err, "plugin %s: out of memory", path);
    }
    p->sh = ps;
    (void)dlerror();
    if (!(p->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
        why = dlerror();
        /* say ENOENT/EACCES when that is the reason, else "not a plugin" */
        if (access(path, R_OK) == 0)
            errno = ENOEXEC;
        errprintf(err, "node %u: plugin %s: cannot load: %s",
                  ps->info.node_rank, path, why ? why : "dlopen failed");
        free(p->path);
        free(p);
        return -1;
    }
    *(void **)(&init) = dlsym(p->dl, EDDY_SHELL_PLUGIN_INIT);
    if (!init) {
        dlclose(p->dl);
        free(p->path);
        free(p);
        errno = ENOEXEC;
        return errprintf(err, "node %u: plugin %s: no %s symbol",
                         ps->info.node_rank, path, EDDY_SHELL_PLUGIN_INIT);
    }
    ps->plugins[ps->nplugins++] = p;
    ps->current = p;
    ps->loading = true;
    ps->in_call = true;
    ps->failset = false;
    ps->failmsg[0] = '\0';
    errno = 0;
    rc = init(p, args ? args : "");
    if (rc < 0 && errno == 0)
        errno = ECANCELED;
    ps->loading = false;
    ps->in_call = false;
    ps->current = NULL;
    if (rc < 0)
        return fail_note(ps, p, "init", err);
    return 0;
}

void plugin_strv_free(char **v)
{
    for (size_t i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_so(const char *name)
{
    size_t n = strlen(name);

    return name[0] != '.' && n > 3 && !strcmp(name + n - 3, ".so");
}

int plugin_dir_list(const char *dir, char ***paths, eddy_error_t *err)
{
    DIR *d;
    struct dirent *de;
    char **v = NULL, **nv;
    size_t n = 0;
    int e;

    if (!dir || !*dir || !paths) {
        errno = EINVAL;
        return errprintf(err, "plugin dir: no path");
    }
    if (!(d = opendir(dir)))
        return errprintf(err, "plugin dir %s: %s", dir, strerror(errno));
    if (!(v = calloc(1, sizeof(*v))))
        goto nomem;
    while ((errno = 0, de = readdir(d))) {
        struct stat sb;
        char *path;
        if (!is_so(de->d_name))
            continue;
        if (asprintf(&path, "%s/%s", dir, de->d_name) < 0)
            goto nomem;
        /* symlinks to plugins are fine; directories named x.so are not */
        if (stat(path, &sb) < 0 || !S_ISREG(sb.st_mode)) {
            free(path);
            continue;
        }
        if (!(nv = realloc(v, (n + 2) * sizeof(*v)))) {
            free(path);
            goto nomem;
        }
        v = nv;
        v[n++] = path;
        v[n] = NULL;
    }
    if (errno) {
        e = errno;
        closedir(d);
        plugin_strv_free(v);
        errno = e;
        return errprintf(err, "plugin dir %s: %s", dir, strerror(e));
    }
    closedir(d);
    qsort(v, n, sizeof(*v), cmp_str);
    *paths = v;
    return 0;
nomem:
    closedir(d);
    plugin_strv_free(v);
    errno = ENOMEM;
    return errprintf(err, "plugin dir %s: out of memory", dir);
}

int plugins_load_dirs(eddy_shell_t *ps, const char *dirs, eddy_error_t *err)
{
    char *copy, *dir, *save = NULL;
    int rc = 0;

    if (!dirs || !*dirs)
        return 0;
    if (!(copy = strdup(dirs))) {
        errno = ENOMEM;
        return errprintf(err, "plugin dirs: out of memory");
    }
    for (dir = strtok_r(copy, ":", &save); dir && rc == 0;
         dir = strtok_r(NULL, ":", &save)) {
        char **paths = NULL;
        if (plugin_dir_list(dir, &paths, err) < 0) {
            rc = -1;
            break;
        }
        for (size_t i = 0; paths[i] && rc == 0; i++)
            rc = plugins_load(ps, paths[i], "", err);
        plugin_strv_free(paths);
    }
    free(copy);
    return rc;
}

/* --- tasks -------------------------------------------------------------- */

void plugins_task_forked(eddy_shell_t *ps, uint32_t index, task_t *t)
{
    if (!ps || index >= ps->info.nlocal)
        return;
    ps->tasks[index].t = t;
    ps->tasks[index].pid = t ? task_pid(t) : -1;
    if (t && ps->stage == STAGE_BEFORE_FORK)
        ps->stage = STAGE_HELD;
}

void *plugins_task_arg(eddy_shell_t *ps, uint32_t index)
{
    if (!ps || index >= ps->info.nlocal)
        return NULL;
    return &ps->tasks[index];
}

int plugins_task_init(task_t *t, void *arg, char *msg, size_t size)
{
    struct eddy_shell_task *st = arg;
    eddy_shell_t *ps = st->sh;
    eddy_error_t e;

    /* this is the child's copy of the shell: nothing here reaches it */
    ps->in_child = true;
    ps->child_task = st;
    st->t = t;
    st->pid = getpid();
    if (plugins_call(ps, "task.init", (int)(st - ps->tasks), &e) < 0) {
        snprintf(msg, size, "%s", e.text);
        return -1;
    }
    return 0;
}

void plugins_started(eddy_shell_t *ps)
{
    if (ps)
        ps->stage = STAGE_RUNNING;
}

void plugins_task_exited(eddy_shell_t *ps, uint32_t index, int code)
{
    if (ps && index < ps->info.nlocal)
        ps->tasks[index].code = code;
}

void plugins_set_proctable(eddy_shell_t *ps, proctable_t *pt)
{
    if (!ps) {
        proctable_destroy(pt);
        return;
    }
    proctable_destroy(ps->pt);
    ps->pt = pt;
}

int plugins_env_apply(const eddy_shell_t *ps, char ***env)
{
    for (size_t i = 0; ps && i < ps->nenv; i++) {
        const struct envmod *m = &ps->env[i];
        if (m->value ? taskenv_set(env, m->name, m->value) < 0
                     : taskenv_unset(*env, m->name) < 0)
            return -1;
    }
    return 0;
}

/* --- spawned processes -------------------------------------------------- */

bool plugins_reaped(eddy_shell_t *ps, pid_t pid, int wstatus)
{
    struct spawned *s;
    eddy_error_t e;
    int rc;

    for (s = ps ? ps->spawned : NULL; s; s = s->next)
        if (!s->exited && task_pid(s->t) == pid)
            break;
    if (!s)
        return false;
    if (!WIFEXITED(wstatus) && !WIFSIGNALED(wstatus))
        return true;
    s->exited = true;
    (void)task_set_exited(s->t, wstatus);
    if (!s->cb)
        return true;
    ps->current = s->p;
    ps->in_call = true;
    ps->failset = false;
    ps->failmsg[0] = '\0';
    errno = 0;
    rc = s->cb(ps, pid, task_exit_code(wstatus), s->arg);
    if (rc < 0 && errno == 0)
        errno = ECANCELED;
    ps->in_call = false;
    ps->current = NULL;
    if (rc < 0) {
        (void)fail_note(ps, s->p, "spawned process exit", &e);
        ps->ops->fail(e.text, ps->arg);
    }
    return true;
}

void plugins_kill_spawned(eddy_shell_t *ps)
{
    for (struct spawned *s = ps ? ps->spawned : NULL; s; s = s->next)
        if (!s->exited)
            (void)task_kill(s->t, SIGKILL);
}

/* --- the process table exchange ----------------------------------------- */

int plugin_pt_record(proctable_t *local,
                     uint32_t node_index,
                     char **key,
                     char **value)
{
    void *buf = NULL;
    size_t len = 0;
    char *k = NULL, *v = NULL;

    if (!local || !key || !value) {
        errno = EINVAL;
        return -1;
    }
    if (proctable_encode(local, &buf, &len) < 0)
        return -1;
    if (asprintf(&k, "%s%u", PLUGIN_PT_KEY_PREFIX, node_index) < 0 ||
        !(v = malloc(2 * len + 1))) {
        free(buf);
        free(k);
        errno = ENOMEM;
        return -1;
    }
    hex_encode(buf, len, v);
    free(buf);
    *key = k;
    *value = v;
    return 0;
}

int plugin_pt_merge(proctable_t *pt,
                    const char *data,
                    size_t len,
                    eddy_error_t *err)
{
    const char *p = data, *end = data + len, *key, *val, *nul;
    size_t plen = strlen(PLUGIN_PT_KEY_PREFIX);

    if (!pt || (!data && len > 0)) {
        errno = EINVAL;
        return errprintf(err, "proctable exchange: bad arguments");
    }
    while (p < end) {
        size_t vlen;
        unsigned char *bin;
        eddy_error_t e;
        int rc;

        key = p;
        if (!(nul = memchr(p, '\0', (size_t)(end - p))))
            goto bad;
        val = nul + 1;
        if (val >= end || !(nul = memchr(val, '\0', (size_t)(end - val))))
            goto bad;
        p = nul + 1;
        if (strncmp(key, PLUGIN_PT_KEY_PREFIX, plen) != 0)
            continue;
        vlen = (size_t)(nul - val);
        if (vlen % 2)
            goto badhex;
        if (!(bin = malloc(vlen / 2 + 1))) {
            errno = ENOMEM;
            return errprintf(err, "proctable exchange: out of memory");
        }
        if (hex_decode(val, vlen, bin, vlen / 2) < 0) {
            free(bin);
            goto badhex;
        }
        rc = proctable_merge_encoded(pt, bin, vlen / 2, &e);
        free(bin);
        if (rc < 0)
            return errprintf(err, "proctable exchange: %.64s: %s", key, e.text);
    }
    return 0;
bad:
    errno = EPROTO;
    return errprintf(err, "proctable exchange: malformed records");
badhex:
    errno = EPROTO;
    return errprintf(err, "proctable exchange: %.64s: malformed value", key);
}

/* --- the plugins' API (include/eddy/shell.h) ---------------------------- */

int eddy_shell_plugin_on(eddy_shell_plugin_t *p,
                         const char *topic,
                         eddy_shell_cb_f cb,
                         void *arg)
{
    int t = topic_index(topic);

    if (!p || !cb || t < 0 || !p->sh->loading || p->sh->current != p) {
        errno = EINVAL;
        return -1;
    }
    p->cbs[t].fn = cb;
    p->cbs[t].arg = arg;
    return 0;
}

eddy_shell_t *eddy_shell_plugin_shell(eddy_shell_plugin_t *p)
{
    return p ? p->sh : NULL;
}

uint64_t eddy_shell_jobid(const eddy_shell_t *sh)
{
    return sh ? sh->info.jobid : 0;
}

uint32_t eddy_shell_ntasks(const eddy_shell_t *sh)
{
    return sh ? sh->info.ntasks : 0;
}

uint32_t eddy_shell_nnodes(const eddy_shell_t *sh)
{
    return sh ? sh->info.nnodes : 0;
}

uint32_t eddy_shell_node_index(const eddy_shell_t *sh)
{
    return sh ? sh->info.node_index : 0;
}

uint32_t eddy_shell_node_rank(const eddy_shell_t *sh)
{
    return sh ? sh->info.node_rank : 0;
}

uint32_t eddy_shell_local_ntasks(const eddy_shell_t *sh)
{
    return sh ? sh->info.nlocal : 0;
}

eddy_shell_task_t *eddy_shell_local_task(eddy_shell_t *sh, uint32_t index)
{
    if (!sh || index >= sh->info.nlocal) {
        errno = EINVAL;
        return NULL;
    }
    return &sh->tasks[index];
}

uint32_t eddy_shell_task_rank(const eddy_shell_task_t *t)
{
    return t ? t->rank : 0;
}

pid_t eddy_shell_task_pid(const eddy_shell_task_t *t)
{
    return t ? t->pid : -1;
}

int eddy_shell_task_exit_code(const eddy_shell_task_t *t)
{
    if (!t || t->code < 0) {
        errno = t ? EAGAIN : EINVAL;
        return -1;
    }
    return t->code;
}

size_t eddy_shell_proctable_count(const eddy_shell_t *sh)
{
    return sh && sh->pt ? proctable_count(sh->pt) : 0;
}

int eddy_shell_proctable_get(const eddy_shell_t *sh,
                             size_t index,
                             struct eddy_shell_proc *out)
{
    struct proctable_entry e;

    if (!sh || !out) {
        errno = EINVAL;
        return -1;
    }
    if (!sh->pt) {
        errno = EAGAIN;
        return -1;
    }
    /* the table sorts itself on first read: not a visible change */
    if (proctable_get(sh->pt, index, &e) < 0)
        return -1;
    out->rank = e.rank;
    out->pid = (pid_t)e.pid;
    out->node = e.broker_rank;
    out->appnum = e.appnum;
    out->host = e.hostname;
    out->executable = e.executable;
    return 0;
}

int eddy_shell_task_setenv(eddy_shell_task_t *t,
                           const char *name,
                           const char *value)
{
    if (!t || !t->sh->in_child || t->sh->child_task != t || !t->t) {
        errno = EINVAL;
        return -1;
    }
    return task_setenv(t->t, name, value);
}

int eddy_shell_setenv(eddy_shell_t *sh, const char *name, const char *value)
{
    struct envmod *v;

    if (!sh || !name || !*name || strchr(name, '=')) {
        errno = EINVAL;
        return -1;
    }
    if (sh->in_child)
        return eddy_shell_task_setenv(sh->child_task, name, value);
    switch (sh->stage) {
    case STAGE_BEFORE_FORK:
        if (!(v = realloc(sh->env, (sh->nenv + 1) * sizeof(*v))))
            goto nomem;
        sh->env = v;
        v[sh->nenv].name = strdup(name);
        v[sh->nenv].value = value ? strdup(value) : NULL;
        if (!v[sh->nenv].name || (value && !v[sh->nenv].value)) {
            free(v[sh->nenv].name);
            free(v[sh->nenv].value);
            goto nomem;
        }
        sh->nenv++;
        return 0;
    case STAGE_HELD:
        for (uint32_t i = 0; i < sh->info.nlocal; i++) {
            task_t *t = sh->tasks[i].t;
            /* a task that is gone (killed while held) needs nothing */
            if (t && task_state(t) == TASK_HELD &&
                task_setenv(t, name, value) < 0 && errno != EBUSY)
                return -1;
        }
        return 0;
    default:
        errno = EBUSY;
        return -1;
    }
nomem:
    errno = ENOMEM;
    return -1;
}

pid_t eddy_shell_spawn(eddy_shell_t *sh,
                       const char *const argv[],
                       const char *const env_add[],
                       eddy_shell_exit_f exit_cb,
                       void *arg)
{
    struct task_spec spec = {0};
    struct spawned *s = NULL;
    eddy_error_t e;
    char **env = NULL;
    size_t n = 0;
    int errnum;

    if (!sh || sh->in_child || !argv || !argv[0] || !*argv[0]) {
        errno = EINVAL;
        return -1;
    }
    /* the shell's environment plus env_add */
    while (environ && environ[n])
        n++;
    if (!(env = calloc(n + 1, sizeof(*env))))
        goto nomem;
    for (size_t i = 0; i < n; i++)
        if (!(env[i] = strdup(environ[i])))
            goto nomem;
    for (size_t i = 0; env_add && env_add[i]; i++) {
        const char *eq = strchr(env_add[i], '=');
        char *name;
        int rc;
        if (!eq || eq == env_add[i]) {
            taskenv_destroy(env);
            eddy_shell_log(sh, EDDY_SHELL_LOG_ERR,
                           "spawn %s: '%.64s' is not NAME=VALUE", argv[0],
                           env_add[i]);
            errno = EINVAL;
            return -1;
        }
        if (!(name = strndup(env_add[i], (size_t)(eq - env_add[i]))))
            goto nomem;
        rc = taskenv_set(&env, name, eq + 1);
        free(name);
        if (rc < 0)
            goto nomem;
    }
    if (!(s = calloc(1, sizeof(*s))))
        goto nomem;
    spec.argv = argv;
    spec.envp = (const char *const *)env;
    spec.io[0].kind = TASK_IO_NULL;
    spec.io[1].kind = TASK_IO_INHERIT;
    spec.io[1].fd = STDOUT_FILENO;
    spec.io[2].kind = TASK_IO_INHERIT;
    spec.io[2].fd = STDERR_FILENO;
    spec.pgrp = true;
    if (!(s->t = task_create(&spec, &e)) || task_start(s->t, &e) < 0) {
        errnum = errno;
        /* the engine reaped a child that failed to exec */
        task_destroy(s->t);
        free(s);
        taskenv_destroy(env);
        eddy_shell_log(sh, EDDY_SHELL_LOG_ERR, "spawn: %s",
                       strncmp(e.text, "rank 0: ", 8) ? e.text : e.text + 8);
        errno = errnum;
        return -1;
    }
    taskenv_destroy(env);
    s->p = sh->current;
    s->cb = exit_cb;
    s->arg = arg;
    s->next = sh->spawned;
    sh->spawned = s;
    return task_pid(s->t);
nomem:
    taskenv_destroy(env);
    free(s);
    errno = ENOMEM;
    return -1;
}

void eddy_shell_log(eddy_shell_t *sh, int level, const char *fmt, ...)
{
    char msg[PLUGIN_LOG_MAX], line[PLUGIN_LOG_MAX + 256];
    const char *who;
    va_list ap;
    int n;

    if (!sh || !fmt)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    who = sh->current ? base_name(sh->current->path) : "plugin";
    n = snprintf(line, sizeof(line), "eddy-shell: job %ju: node %u: %s: %s\n",
                 (uintmax_t)sh->info.jobid, sh->info.node_rank, who, msg);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line)) {
        n = (int)sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    if (sh->in_child) {
        /* the task's stderr: its pipe to the job's output */
        (void)!write(STDERR_FILENO, line, (size_t)n);
        return;
    }
    fputs(line, stderr);
    if (sh->ops->log_broker)
        sh->ops->log_broker(level, line, sh->arg);
    if (level <= EDDY_SHELL_LOG_INFO && sh->ops->log_job)
        sh->ops->log_job(line, sh->arg);
}

int eddy_shell_fail(eddy_shell_t *sh, const char *fmt, ...)
{
    char msg[PLUGIN_MSG_MAX], note[PLUGIN_MSG_MAX + 64];
    va_list ap;
    int saved = errno;

    if (!sh || !fmt) {
        errno = EINVAL;
        return -1;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (sh->in_call || sh->in_child) {
        /* the first message of a callback is the one that counts */
        if (!sh->failset) {
            snprintf(sh->failmsg, sizeof(sh->failmsg), "%s", msg);
            sh->failset = true;
        }
    } else {
        snprintf(note, sizeof(note), "node %u: plugin: %s", sh->info.node_rank,
                 msg);
        sh->ops->fail(note, sh->arg);
    }
    errno = saved ? saved : ECANCELED;
    return -1;
}
