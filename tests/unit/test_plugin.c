/* test_plugin.c - unit tests for the pure parts of shell plugins: the
 * -o plugin=PATH[,ARGS] option and the jobspec's plugins list
 * (src/common/jobspec.c), the plugin directory listing, the process
 * table exchange records and the environment API (src/shell/plugin.c),
 * and environment changes carried by a task's release plus the pre_exec
 * hook (src/shell/task.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "src/common/jobspec.h"
#include "src/common/proctable.h"
#include "src/shell/plugin.h"
#include "src/shell/task.h"
#include "src/shell/taskenv.h"

/* --- -o plugin= ---------------------------------------------------------- */

static void check_parse(const char *opt,
                        const char *cwd,
                        const char *path,
                        const char *args)
{
    eddy_error_t err;
    json_t *o = NULL;

    assert_int_equal(jobspec_plugin_parse(opt, cwd, &o, &err), 0);
    assert_string_equal(json_string_value(json_object_get(o, "path")), path);
    if (args)
        assert_string_equal(json_string_value(json_object_get(o, "args")),
                            args);
    else
        assert_null(json_object_get(o, "args"));
    json_decref(o);
}

static void check_parse_fails(const char *opt, const char *cwd, int errnum)
{
    eddy_error_t err = {{0}};
    json_t *o = NULL;

    errno = 0;
    assert_int_equal(jobspec_plugin_parse(opt, cwd, &o, &err), -1);
    assert_int_equal(errno, errnum);
    assert_null(o);
    assert_non_null(strstr(err.text, "plugin"));
}

static void test_option(void **state)
{
    char longpath[JOBSPEC_PLUGIN_PATH_MAX + 8];

    check_parse("/a/b.so", NULL, "/a/b.so", NULL);
    /* ARGS is everything after the first comma, commas included */
    check_parse("/a/b.so,x=1,y", NULL, "/a/b.so", "x=1,y");
    check_parse("/a/b.so,", NULL, "/a/b.so", "");
    check_parse("rel.so,z", "/c", "/c/rel.so", "z");
    check_parse_fails("", "/c", EINVAL);
    check_parse_fails(",x", "/c", EINVAL);
    check_parse_fails("rel.so", NULL, EINVAL);
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[0] = '/';
    longpath[sizeof(longpath) - 1] = '\0';
    check_parse_fails(longpath, NULL, E2BIG);
    check_parse_fails(NULL, NULL, EINVAL);
}

/* --- the jobspec's list -------------------------------------------------- */

static const char jobspec_fmt[] =
    "{\"version\":1,\"resources\":[{\"type\":\"slot\",\"count\":1,"
    "\"label\":\"task\",\"with\":[{\"type\":\"core\",\"count\":1}]}],"
    "\"tasks\":[{\"command\":[\"true\"],\"slot\":\"task\","
    "\"count\":{\"per_slot\":1}}],\"attributes\":{\"system\":{\"shell\":"
    "{\"options\":{\"plugins\":%s}}}}}";

static jobspec_t *decode_with(const char *plugins, eddy_error_t *err)
{
    char text[8192];
    json_t *o;
    jobspec_t *js;

    snprintf(text, sizeof(text), jobspec_fmt, plugins);
    o = json_loads(text, JSON_ALLOW_NUL, NULL);
    assert_non_null(o);
    js = jobspec_decode(o, err);
    json_decref(o);
    return js;
}

static void check_refused(const char *plugins, int errnum, const char *what)
{
    eddy_error_t err = {{0}};

    errno = 0;
    assert_null(decode_with(plugins, &err));
    assert_int_equal(errno, errnum);
    if (!strstr(err.text, what))
        fail_msg("'%s' not in '%s'", what, err.text);
}

static void test_jobspec(void **state)
{
    eddy_error_t err;
    jobspec_t *js;
    json_t *list;
    char many[4096];
    size_t off;

    js = decode_with("[{\"path\":\"/p/a.so\"},{\"path\":\"/p/b.so\","
                     "\"args\":\"x,y\"}]",
                     &err);
    assert_non_null(js);
    list = json_object_get(jobspec_shell_options(js), "plugins");
    assert_int_equal(json_array_size(list), 2);
    jobspec_destroy(js);

    check_refused("{}", EINVAL, "plugins: must be an array");
    check_refused("[\"/p/a.so\"]", EINVAL, "plugins[0]: must be an object");
    check_refused("[{}]", EINVAL, "plugins[0]: missing 'path'");
    check_refused("[{\"path\":\"a.so\"}]", EINVAL,
                  "plugins[0].path: must be an absolute path");
    check_refused("[{\"path\":\"/a.so\",\"arg\":\"x\"}]", EINVAL,
                  "unknown key 'arg'");
    check_refused("[{\"path\":\"/a.so\"},{\"path\":\"/b.so\",\"args\":1}]",
                  EINVAL, "plugins[1].args: must be a string");
    check_refused("[{\"path\":\"/a\\u0000.so\"}]", EINVAL, "NUL");
    off = (size_t)snprintf(many, sizeof(many), "[");
    for (int i = 0; i <= JOBSPEC_PLUGINS_MAX; i++)
        off += (size_t)snprintf(many + off, sizeof(many) - off,
                                "%s{\"path\":\"/p.so\"}", i ? "," : "");
    snprintf(many + off, sizeof(many) - off, "]");
    check_refused(many, E2BIG, "more than");
}

/* --- plugin directories -------------------------------------------------- */

static void touch(const char *dir, const char *name)
{
    char path[PATH_MAX];
    int fd;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);
}

static void test_dir_list(void **state)
{
    char dir[] = "/tmp/test_plugin.XXXXXX", sub[PATH_MAX], bad[PATH_MAX];
    eddy_error_t err = {{0}};
    char **paths = NULL;
    char want[PATH_MAX];

    assert_non_null(mkdtemp(dir));
    touch(dir, "b.so");
    touch(dir, "a.so");
    touch(dir, "notes.txt");
    touch(dir, ".hidden.so");
    touch(dir, ".so");
    snprintf(sub, sizeof(sub), "%s/dir.so", dir);
    assert_int_equal(mkdir(sub, 0755), 0);

    assert_int_equal(plugin_dir_list(dir, &paths, &err), 0);
    snprintf(want, sizeof(want), "%s/a.so", dir);
    assert_string_equal(paths[0], want);
    snprintf(want, sizeof(want), "%s/b.so", dir);
    assert_string_equal(paths[1], want);
    assert_null(paths[2]);
    plugin_strv_free(paths);

    /* an empty directory lists nothing */
    paths = NULL;
    assert_int_equal(plugin_dir_list(sub, &paths, &err), 0);
    assert_null(paths[0]);
    plugin_strv_free(paths);

    snprintf(bad, sizeof(bad), "%s/nonexistent", dir);
    errno = 0;
    paths = NULL;
    assert_int_equal(plugin_dir_list(bad, &paths, &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_null(paths);
    assert_non_null(strstr(err.text, bad));

    rmdir(sub);
    snprintf(want, sizeof(want), "rm -rf '%s'", dir);
    assert_int_equal(system(want), 0);
}

/* --- process table exchange --------------------------------------------- */

static proctable_t *node_table(uint32_t node, uint32_t first, uint32_t n)
{
    proctable_t *pt = proctable_create();

    assert_non_null(pt);
    for (uint32_t r = first; r < first + n; r++) {
        struct proctable_entry e = {
            .rank = r,
            .broker_rank = node,
            .appnum = 0,
            .pid = (int32_t)(1000 + r),
            .hostname = node ? "h1" : "h0",
            .executable = "/bin/prog",
        };
        assert_int_equal(proctable_add(pt, &e), 0);
    }
    return pt;
}

/* Append record KEY\0VALUE\0 to buf. */
static size_t put_record(char *buf, size_t off, const char *k, const char *v)
{
    memcpy(buf + off, k, strlen(k) + 1);
    off += strlen(k) + 1;
    memcpy(buf + off, v, strlen(v) + 1);
    return off + strlen(v) + 1;
}

static void test_exchange(void **state)
{
    proctable_t *a = node_table(0, 0, 2), *b = node_table(5, 2, 3);
    proctable_t *all = proctable_create();
    char *ka, *va, *kb, *vb;
    char buf[4096];
    size_t off = 0;
    struct proctable_entry e;
    eddy_error_t err = {{0}};

    assert_int_equal(plugin_pt_record(a, 0, &ka, &va), 0);
    assert_int_equal(plugin_pt_record(b, 1, &kb, &vb), 0);
    assert_string_equal(ka, PLUGIN_PT_KEY_PREFIX "0");
    assert_string_equal(kb, PLUGIN_PT_KEY_PREFIX "1");
    /* values are hex: no NUL inside a fence record */
    assert_int_equal(strspn(va, "0123456789abcdef"), strlen(va));

    /* records of other kinds (PMI keys) are ignored */
    off = put_record(buf, off, kb, vb);
    off = put_record(buf, off, "PMI_process_mapping", "(vector,(0,2,1))");
    off = put_record(buf, off, ka, va);
    assert_int_equal(plugin_pt_merge(all, buf, off, &err), 0);
    assert_true(proctable_is_complete(all, 5));
    assert_int_equal(proctable_get(all, 3, &e), 0);
    assert_int_equal(e.rank, 3);
    assert_int_equal(e.pid, 1003);
    assert_int_equal(e.broker_rank, 5);
    assert_string_equal(e.hostname, "h1");

    /* the same node twice: a rank twice */
    errno = 0;
    assert_int_equal(plugin_pt_merge(all, buf, off, &err), -1);
    assert_int_equal(errno, EEXIST);
    proctable_destroy(all);

    /* bad hex, odd length, a record cut short */
    all = proctable_create();
    off = put_record(buf, 0, PLUGIN_PT_KEY_PREFIX "0", "zz");
    errno = 0;
    assert_int_equal(plugin_pt_merge(all, buf, off, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_non_null(strstr(err.text, "malformed value"));
    off = put_record(buf, 0, PLUGIN_PT_KEY_PREFIX "0", "abc");
    assert_int_equal(plugin_pt_merge(all, buf, off, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_int_equal(plugin_pt_merge(all, "key", 3, &err), -1);
    assert_int_equal(errno, EPROTO);
    assert_int_equal(proctable_count(all), 0);

    proctable_destroy(all);
    proctable_destroy(a);
    proctable_destroy(b);
    free(ka);
    free(va);
    free(kb);
    free(vb);
}

/* --- the environment API before fork ------------------------------------- */

static void no_log(const char *line, void *arg)
{
}

static void no_fail(const char *note, void *arg)
{
    fail_msg("unexpected failure: %s", note);
}

static const struct plugins_ops ops = {.log_job = no_log, .fail = no_fail};

static void test_env_api(void **state)
{
    const uint32_t ranks[] = {4, 5};
    struct plugins_info info = {
        .jobid = 7,
        .ntasks = 8,
        .nnodes = 4,
        .node_index = 2,
        .node_rank = 9,
        .nlocal = 2,
        .local_ranks = ranks,
    };
    eddy_shell_t *ps = plugins_create(&info, &ops, NULL);
    const char *base[] = {"KEEP=1", "GONE=2", NULL};
    char **env;
    eddy_error_t err;
    struct eddy_shell_proc p;

    assert_non_null(ps);
    assert_int_equal(eddy_shell_jobid(ps), 7);
    assert_int_equal(eddy_shell_ntasks(ps), 8);
    assert_int_equal(eddy_shell_node_rank(ps), 9);
    assert_int_equal(eddy_shell_local_ntasks(ps), 2);
    assert_int_equal(eddy_shell_task_rank(eddy_shell_local_task(ps, 1)), 5);
    assert_int_equal(eddy_shell_task_pid(eddy_shell_local_task(ps, 1)), -1);
    assert_null(eddy_shell_local_task(ps, 2));
    errno = 0;
    assert_int_equal(eddy_shell_task_exit_code(eddy_shell_local_task(ps, 0)),
                     -1);
    assert_int_equal(errno, EAGAIN);
    /* no table before shell.start */
    assert_int_equal(eddy_shell_proctable_count(ps), 0);
    errno = 0;
    assert_int_equal(eddy_shell_proctable_get(ps, 0, &p), -1);
    assert_int_equal(errno, EAGAIN);
    /* no plugin: nothing registered, calls succeed */
    assert_false(plugins_has(ps, "shell.start"));
    assert_int_equal(plugins_call(ps, "shell.init", -1, &err), 0);
    assert_int_equal(plugins_call(ps, "no.such", -1, &err), -1);

    assert_int_equal(eddy_shell_setenv(ps, "A", "1"), 0);
    assert_int_equal(eddy_shell_setenv(ps, "A", "2"), 0);
    assert_int_equal(eddy_shell_setenv(ps, "GONE", NULL), 0);
    errno = 0;
    assert_int_equal(eddy_shell_setenv(ps, "B=C", "1"), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(eddy_shell_setenv(ps, "", "1"), -1);
    /* task_setenv belongs to task.init only */
    errno = 0;
    assert_int_equal(
        eddy_shell_task_setenv(eddy_shell_local_task(ps, 0), "X", "1"), -1);
    assert_int_equal(errno, EINVAL);

    env = taskenv_create(NULL, base, &(struct taskenv_ids){.jobid = 7}, NULL);
    assert_non_null(env);
    assert_int_equal(plugins_env_apply(ps, &env), 0);
    assert_string_equal(taskenv_get(env, "A"), "2");
    assert_string_equal(taskenv_get(env, "KEEP"), "1");
    assert_null(taskenv_get(env, "GONE"));
    taskenv_destroy(env);

    plugins_task_exited(ps, 1, 3);
    assert_int_equal(eddy_shell_task_exit_code(eddy_shell_local_task(ps, 1)),
                     3);
    plugins_started(ps);
    errno = 0;
    assert_int_equal(eddy_shell_setenv(ps, "A", "3"), -1);
    assert_int_equal(errno, EBUSY);
    /* spawn is for the shell, and needs a program */
    errno = 0;
    assert_int_equal(
        eddy_shell_spawn(ps, (const char *[]){NULL}, NULL, NULL, NULL), -1);
    assert_int_equal(errno, EINVAL);
    plugins_destroy(ps);
}

/* --- a held task's release carries environment changes ------------------- */

static int hook_fail;

static int hook(task_t *t, void *arg, char *msg, size_t size)
{
    if (task_setenv(t, "HOOK", "yes") < 0)
        return -1;
    if (hook_fail) {
        snprintf(msg, size, "plugin x: task.init: %s", (char *)arg);
        errno = EPERM;
        return -1;
    }
    return 0;
}

static char *run_held(bool fail, eddy_error_t *err, int *rc, int *errnum)
{
    char dir[] = "/tmp/test_plugin.XXXXXX", file[PATH_MAX], cmd[PATH_MAX + 64];
    const char *env[] = {"PATH=/usr/bin:/bin", "OLD=old", "DROP=1", NULL};
    const char *argv[] = {"sh", "-c", cmd, NULL};
    struct task_spec spec = {0};
    static char out[256];
    task_t *t;
    FILE *f;
    int status;

    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof(file), "%s/out", dir);
    snprintf(cmd, sizeof(cmd), "echo \"$OLD $NEW ${DROP-none} $HOOK\" >%s",
             file);
    spec.argv = argv;
    spec.envp = env;
    spec.hold = true;
    spec.pre_exec = hook;
    spec.pre_exec_arg = (void *)"told to";
    hook_fail = fail;
    assert_non_null(t = task_create(&spec, err));
    /* before start: the copied environment */
    assert_int_equal(task_setenv(t, "OLD", "older"), 0);
    assert_int_equal(task_start(t, err), 0);
    /* held: queued for the release */
    assert_int_equal(task_setenv(t, "NEW", "new"), 0);
    assert_int_equal(task_setenv(t, "DROP", NULL), 0);
    errno = 0;
    assert_int_equal(task_setenv(t, "A=B", "x"), -1);
    assert_int_equal(errno, EINVAL);
    *rc = task_release(t, err);
    *errnum = errno;
    errno = 0;
    assert_int_equal(task_setenv(t, "LATE", "x"), -1);
    assert_int_equal(errno, EBUSY);
    out[0] = '\0';
    if (*rc == 0) {
        assert_int_equal(waitpid(task_pid(t), &status, 0), task_pid(t));
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        assert_non_null(f = fopen(file, "r"));
        assert_non_null(fgets(out, sizeof(out), f));
        fclose(f);
    } else {
        assert_int_equal(task_exit_code(task_status(t)), 126);
    }
    task_destroy(t);
    unlink(file);
    rmdir(dir);
    return out;
}

static void test_release_env(void **state)
{
    eddy_error_t err = {{0}};
    int rc, errnum;
    char *out = run_held(false, &err, &rc, &errnum);

    assert_int_equal(rc, 0);
    assert_string_equal(out, "older new none yes\n");

    out = run_held(true, &err, &rc, &errnum);
    assert_int_equal(rc, -1);
    assert_int_equal(errnum, EPERM);
    assert_string_equal(err.text, "rank 0: plugin x: task.init: told to");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_option),   cmocka_unit_test(test_jobspec),
        cmocka_unit_test(test_dir_list), cmocka_unit_test(test_exchange),
        cmocka_unit_test(test_env_api),  cmocka_unit_test(test_release_env),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
