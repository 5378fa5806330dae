/* test_task.c - the task spawn engine: exec, stdio, hold/release, signals.
 *
 * The test process is a child subreaper, so that a grandchild orphaned by a
 * test is reparented here; each test's teardown then checks that no child
 * of ours is left at all (running or zombie).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "src/shell/task.h"

static const char *const test_env[] = {"PATH=/usr/bin:/bin", NULL};

/* Reap the task's process and record its status; returns the exit code. */
static int reap(task_t *t)
{
    int st;
    pid_t rc;

    do {
        rc = waitpid(task_pid(t), &st, 0);
    } while (rc < 0 && errno == EINTR);
    assert_int_equal(rc, task_pid(t));
    assert_int_equal(task_set_exited(t, st), 0);
    assert_int_equal(task_state(t), TASK_EXITED);
    return task_exit_code(st);
}

/* After a failed test: kill every child still there (a held one would
 * wait forever) and reap them all, orphaned grandchildren included. */
static void kill_and_reap_all(void)
{
    char path[64];
    FILE *f;
    int pid;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(),
             (int)getpid());
    if ((f = fopen(path, "r"))) {
        while (fscanf(f, "%d", &pid) == 1)
            kill(pid, SIGKILL);
        fclose(f);
    }
    while (waitpid(-1, NULL, 0) > 0 || errno == EINTR)
        ;
}

static int no_children(void **state)
{
    pid_t rc = waitpid(-1, NULL, WNOHANG);
    int e = errno;

    /* Clean up before failing so one bad test does not spoil the rest. */
    if (rc != -1 || e != ECHILD) {
        kill_and_reap_all();
        fail_msg("a child process was left behind (waitpid: %d)", (int)rc);
    }
    return 0;
}

/* Read fd (non-blocking) to EOF into buf, NUL-terminated. */
static size_t read_all(int fd, char *buf, size_t size)
{
    size_t len = 0;

    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;

        assert_true(poll(&p, 1, 10000) == 1);
        n = read(fd, buf + len, size - 1 - len);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        assert_true(n >= 0);
        if (n == 0)
            break;
        len += (size_t)n;
        assert_true(len < size - 1);
    }
    buf[len] = '\0';
    return len;
}

static task_t *start_ok(const struct task_spec *spec)
{
    eddy_error_t err = {{0}};
    task_t *t = task_create(spec, &err);

    assert_non_null(t);
    if (task_start(t, &err) < 0)
        fail_msg("task_start: %s", err.text);
    assert_true(task_pid(t) > 0);
    return t;
}

/* Run argv to completion (stdout/stderr to /dev/null); its exit code. */
static int run(const char *const *argv)
{
    struct task_spec spec = {.argv = argv, .envp = test_env, .pgrp = true};
    task_t *t = start_ok(&spec);
    int code;

    assert_int_equal(task_state(t), TASK_RUNNING);
    code = reap(t);
    task_destroy(t);
    return code;
}

static char tmpdir[64];

static int make_tmpdir(void **state)
{
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_task.XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    return 0;
}

static int remove_tmpdir(void **state)
{
    char cmd[PATH_MAX + 16];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    assert_int_equal(system(cmd), 0);
    return no_children(state);
}

static void tmppath(char *buf, size_t size, const char *name)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_true(void **state)
{
    struct task_spec spec = {
        .rank = 1, .argv = (const char *[]){"true", NULL}, .envp = test_env};
    task_t *t = start_ok(&spec);

    assert_int_equal(task_state(t), TASK_RUNNING);
    assert_int_equal(task_rank(t), 1);
    assert_string_equal(task_path(t), "/usr/bin/true");
    assert_int_equal(task_status(t), -1);
    assert_int_equal(task_fd(t, 1), -1);
    assert_int_equal(reap(t), 0);
    assert_true(WIFEXITED(task_status(t)));
    task_destroy(t);
}

static void test_exit3(void **state)
{
    assert_int_equal(run((const char *[]){"sh", "-c", "exit 3", NULL}), 3);
}

static void test_signal(void **state)
{
    struct task_spec spec = {.argv = (const char *[]){"sleep", "100", NULL},
                             .envp = test_env,
                             .pgrp = true};
    task_t *t;

    assert_int_equal(run((const char *[]){"sh", "-c", "kill -TERM $$", NULL}),
                     128 + SIGTERM);

    t = start_ok(&spec);
    assert_int_equal(task_kill(t, SIGKILL), 0);
    assert_int_equal(reap(t), 137);
    assert_true(WIFSIGNALED(task_status(t)));
    task_destroy(t);
}

static void test_missing(void **state)
{
    eddy_error_t err = {{0}};
    struct task_spec spec = {
        .rank = 3, .argv = (const char *[]){"nosuch", NULL}, .envp = test_env};
    task_t *t = task_create(&spec, &err);

    /* not on PATH: found out in the parent, no process made */
    assert_non_null(t);
    assert_int_equal(task_start(t, &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(err.text,
                        "rank 3: cannot run 'nosuch': No such file or "
                        "directory");
    assert_int_equal(task_pid(t), -1);
    assert_int_equal(task_state(t), TASK_CREATED);
    task_destroy(t);

    /* a path: execve fails in the child, which start reaps */
    spec.argv = (const char *[]){"/nonexistent/prog", NULL};
    assert_non_null(t = task_create(&spec, &err));
    assert_int_equal(task_start(t, &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(err.text, "rank 3: cannot run '/nonexistent/prog': "
                                  "No such file or directory");
    assert_int_equal(task_state(t), TASK_EXITED);
    assert_int_equal(task_exit_code(task_status(t)), 127);
    task_destroy(t);

    /* held: reported by the release */
    spec.hold = true;
    assert_non_null(t = task_create(&spec, &err));
    assert_int_equal(task_start(t, &err), 0);
    assert_int_equal(task_state(t), TASK_HELD);
    assert_int_equal(task_release(t, &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(err.text, "rank 3: cannot run '/nonexistent/prog': "
                                  "No such file or directory");
    assert_int_equal(task_exit_code(task_status(t)), 127);
    task_destroy(t);

    /* no PATH at all: the default one is searched */
    spec.hold = false;
    spec.envp = NULL;
    spec.argv = (const char *[]){"true", NULL};
    t = start_ok(&spec);
    assert_int_equal(reap(t), 0);
    task_destroy(t);
}

static void write_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);

    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(close(fd), 0);
    assert_int_equal(chmod(path, mode), 0);
}

static void test_noexec(void **state)
{
    eddy_error_t err = {{0}};
    char dir1[128], dir2[128], prog[256], path[1024];
    const char *env[] = {path, NULL};
    struct task_spec spec = {
        .rank = 2, .argv = (const char *[]){"prog", NULL}, .envp = env};
    task_t *t;

    tmppath(dir1, sizeof(dir1), "a");
    tmppath(dir2, sizeof(dir2), "b");
    assert_int_equal(mkdir(dir1, 0700), 0);
    assert_int_equal(mkdir(dir2, 0700), 0);
    snprintf(prog, sizeof(prog), "%s/prog", dir1);
    write_file(prog, "#!/bin/sh\nexit 7\n", 0644);
    snprintf(path, sizeof(path), "PATH=%s:/nonexistent", dir1);

    /* only a non-executable candidate: EACCES, like a shell */
    assert_non_null(t = task_create(&spec, &err));
    assert_int_equal(task_start(t, &err), -1);
    assert_int_equal(errno, EACCES);
    assert_string_equal(err.text, "rank 2: cannot run 'prog': Permission "
                                  "denied");
    assert_int_equal(task_pid(t), -1);
    task_destroy(t);

    /* a later executable candidate wins */
    snprintf(prog, sizeof(prog), "%s/prog", dir2);
    write_file(prog, "#!/bin/sh\nexit 7\n", 0755);
    snprintf(path, sizeof(path), "PATH=%s:%s", dir1, dir2);
    t = start_ok(&spec);
    assert_string_equal(task_path(t), prog);
    assert_int_equal(reap(t), 7);
    task_destroy(t);

    /* a relative PATH entry is relative to the task's cwd */
    snprintf(path, sizeof(path), "PATH=b");
    spec.cwd = tmpdir;
    t = start_ok(&spec);
    assert_int_equal(reap(t), 7);
    task_destroy(t);
    spec.cwd = NULL;

    /* by path: execve itself refuses, exit code 126 */
    snprintf(prog, sizeof(prog), "%s/prog", dir1);
    spec.argv = (const char *[]){prog, NULL};
    assert_non_null(t = task_create(&spec, &err));
    assert_int_equal(task_start(t, &err), -1);
    assert_int_equal(errno, EACCES);
    assert_non_null(strstr(err.text, "rank 2: cannot run '"));
    assert_non_null(strstr(err.text, "': Permission denied"));
    assert_int_equal(task_exit_code(task_status(t)), 126);
    task_destroy(t);
}

static void test_bad_cwd(void **state)
{
    eddy_error_t err = {{0}};
    struct task_spec spec = {.rank = 3,
                             .argv = (const char *[]){"true", NULL},
                             .envp = test_env,
                             .cwd = "/nonexistent-eddy"};
    task_t *t;

    assert_non_null(t = task_create(&spec, &err));
    assert_int_equal(task_start(t, &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(err.text, "rank 3: cannot chdir to "
                                  "'/nonexistent-eddy': No such file or "
                                  "directory");
    assert_int_equal(task_state(t), TASK_EXITED);
    task_destroy(t);

    /* held: the child fails before the hold; the release reports it,
     * even when the reaper got the child first */
    spec.hold = true;
    assert_non_null(t = task_create(&spec, &err));
    assert_int_equal(task_start(t, &err), 0);
    assert_int_equal(reap(t), 127);
    memset(&err, 0, sizeof(err));
    assert_int_equal(task_release(t, &err), -1);
    assert_int_equal(errno, ENOENT);
    assert_string_equal(err.text, "rank 3: cannot chdir to "
                                  "'/nonexistent-eddy': No such file or "
                                  "directory");
    task_destroy(t);
}

static void test_env_cwd(void **state)
{
    const char *env[] = {"PATH=/usr/bin:/bin", "FOO=bar baz", NULL};
    struct task_spec spec = {
        .argv = (const char *[]){"sh", "-c", "echo \"$FOO\"; pwd -P", NULL},
        .envp = env,
        .cwd = tmpdir,
        .io[1] = {.kind = TASK_IO_PIPE}};
    char want[PATH_MAX + 64], real[PATH_MAX], buf[8192];
    task_t *t = start_ok(&spec);

    assert_non_null(realpath(tmpdir, real));
    snprintf(want, sizeof(want), "bar baz\n%s\n", real);
    read_all(task_fd(t, 1), buf, sizeof(buf));
    assert_string_equal(buf, want);
    assert_int_equal(reap(t), 0);
    task_destroy(t);

    /* the environment is exactly envp, nothing of ours leaks in */
    spec.argv = (const char *[]){"env", NULL};
    spec.cwd = NULL;
    setenv("EDDY_TEST_TASK_LEAK", "1", 1);
    t = start_ok(&spec);
    read_all(task_fd(t, 1), buf, sizeof(buf));
    assert_string_equal(buf, "PATH=/usr/bin:/bin\nFOO=bar baz\n");
    assert_int_equal(reap(t), 0);
    task_destroy(t);
    unsetenv("EDDY_TEST_TASK_LEAK");
}

static void test_stdout_stderr(void **state)
{
    struct task_spec spec = {
        .argv = (const char *[]){"sh", "-c", "echo out; echo err >&2", NULL},
        .envp = test_env,
        .io[1] = {.kind = TASK_IO_PIPE},
        .io[2] = {.kind = TASK_IO_PIPE}};
    char buf[256];
    task_t *t = start_ok(&spec);

    for (int i = 1; i <= 2; i++) {
        int fd = task_fd(t, i);
        assert_true(fd > 2);
        assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
        assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    }
    read_all(task_fd(t, 1), buf, sizeof(buf));
    assert_string_equal(buf, "out\n");
    read_all(task_fd(t, 2), buf, sizeof(buf));
    assert_string_equal(buf, "err\n");
    assert_int_equal(reap(t), 0);
    task_destroy(t);

    /* inherit: the task writes into the caller's own fd */
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
    spec.io[1] = (struct task_io){.kind = TASK_IO_INHERIT, .fd = p[1]};
    spec.io[2] = (struct task_io){.kind = TASK_IO_INHERIT, .fd = p[1]};
    t = start_ok(&spec);
    close(p[1]);
    read_all(p[0], buf, sizeof(buf));
    assert_string_equal(buf, "out\nerr\n");
    close(p[0]);
    assert_int_equal(reap(t), 0);
    task_destroy(t);
}

static void test_stdin(void **state)
{
    struct task_spec spec = {.argv = (const char *[]){"cat", NULL},
                             .envp = test_env,
                             .io[0] = {.kind = TASK_IO_PIPE},
                             .io[1] = {.kind = TASK_IO_PIPE}};
    char buf[256];
    task_t *t = start_ok(&spec);
    int in = task_take_fd(t, 0);

    assert_true(in > 2);
    assert_int_equal(task_fd(t, 0), -1);
    assert_int_equal(write(in, "hello\n", 6), 6);
    close(in);
    read_all(task_fd(t, 1), buf, sizeof(buf));
    assert_string_equal(buf, "hello\n");
    assert_int_equal(reap(t), 0);
    task_destroy(t);

    /* /dev/null: cat sees EOF at once; stdout to /dev/null is writable */
    spec.argv = (const char *[]){"sh", "-c", "cat; echo x >&2", NULL};
    spec.io[0] = (struct task_io){.kind = TASK_IO_NULL};
    spec.io[2] = (struct task_io){.kind = TASK_IO_PIPE};
    t = start_ok(&spec);
    read_all(task_fd(t, 1), buf, sizeof(buf));
    assert_string_equal(buf, "");
    read_all(task_fd(t, 2), buf, sizeof(buf));
    assert_string_equal(buf, "x\n");
    assert_int_equal(reap(t), 0);
    task_destroy(t);
}

static void test_hold(void **state)
{
    char marker[PATH_MAX], comm[64], buf[64], self[64];
    struct task_spec spec = {
        .argv = (const char *[]){"sh", "-c", "touch marker; exit 4", NULL},
        .envp = test_env,
        .cwd = tmpdir,
        .hold = true,
        .pgrp = true};
    eddy_error_t err = {{0}};
    task_t *t = start_ok(&spec);
    FILE *f;

    tmppath(marker, sizeof(marker), "marker");
    assert_int_equal(task_state(t), TASK_HELD);
    assert_int_equal(kill(task_pid(t), 0), 0);
    assert_int_equal(getpgid(task_pid(t)), task_pid(t));
    /* still a copy of this test program, not yet sh */
    assert_non_null(f = fopen("/proc/self/comm", "r"));
    assert_non_null(fgets(self, sizeof(self), f));
    fclose(f);
    snprintf(comm, sizeof(comm), "/proc/%d/comm", (int)task_pid(t));
    assert_non_null(f = fopen(comm, "r"));
    assert_non_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    assert_string_equal(buf, self);
    usleep(50 * 1000); /* a child that ignored the hold would be done */
    assert_false(exists(marker));
    assert_int_equal(waitpid(task_pid(t), NULL, WNOHANG), 0);

    if (task_release(t, &err) < 0)
        fail_msg("task_release: %s", err.text);
    assert_int_equal(task_state(t), TASK_RUNNING);
    assert_int_equal(task_release(t, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(reap(t), 4);
    assert_true(exists(marker));
    task_destroy(t);
}

static void test_cancel(void **state)
{
    char marker[PATH_MAX];
    struct task_spec spec = {
        .argv = (const char *[]){"sh", "-c", "touch marker", NULL},
        .envp = test_env,
        .cwd = tmpdir,
        .hold = true,
        .pgrp = true};
    eddy_error_t err = {{0}};
    task_t *t;

    tmppath(marker, sizeof(marker), "marker");

    /* task_cancel */
    t = start_ok(&spec);
    task_cancel(t);
    assert_int_equal(reap(t), TASK_EXIT_CANCELLED);
    assert_int_equal(task_release(t, &err), -1);
    assert_int_equal(errno, EINVAL);
    task_destroy(t);

    /* task_destroy of a held task cancels it too */
    t = start_ok(&spec);
    pid_t pid = task_pid(t);
    int st;
    task_destroy(t);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_int_equal(task_exit_code(st), TASK_EXIT_CANCELLED);

    /* killed while held: the release says it died */
    t = start_ok(&spec);
    assert_int_equal(task_kill(t, SIGKILL), 0);
    assert_int_equal(reap(t), 128 + SIGKILL);
    assert_int_equal(task_release(t, &err), -1);
    assert_int_equal(errno, ESRCH);
    assert_string_equal(err.text, "rank 0: task died before release");
    task_destroy(t);

    /* killed while held, before the reaper ran */
    t = start_ok(&spec);
    assert_int_equal(task_kill(t, SIGTERM), 0);
    siginfo_t info;
    assert_int_equal(waitid(P_PID, (id_t)task_pid(t), &info, WEXITED | WNOWAIT),
                     0);
    assert_int_equal(task_release(t, &err), -1);
    assert_int_equal(errno, ESRCH);
    assert_int_equal(reap(t), 128 + SIGTERM);
    task_destroy(t);

    assert_false(exists(marker));
}

static void on_usr2(int sig)
{
}

/* The shell's ignored signals, handlers and blocked mask must not reach
 * the task (an ignored SIGPIPE or blocked SIGTERM would change how it
 * dies). */
static void test_signals_reset(void **state)
{
    struct task_spec spec = {
        .argv = (const char *[]){"cat", "/proc/self/status", NULL},
        .envp = test_env,
        .io[1] = {.kind = TASK_IO_PIPE}};
    struct sigaction ign = {.sa_handler = SIG_IGN};
    struct sigaction usr2 = {.sa_handler = on_usr2};
    struct sigaction old_pipe, old_usr2;
    sigset_t term, old_mask;
    char buf[8192];
    task_t *t;

    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    assert_int_equal(sigaction(SIGPIPE, &ign, &old_pipe), 0);
    assert_int_equal(sigaction(SIGUSR2, &usr2, &old_usr2), 0);
    assert_int_equal(sigprocmask(SIG_BLOCK, &term, &old_mask), 0);
    t = start_ok(&spec);
    sigaction(SIGPIPE, &old_pipe, NULL);
    sigaction(SIGUSR2, &old_usr2, NULL);
    sigprocmask(SIG_SETMASK, &old_mask, NULL);

    read_all(task_fd(t, 1), buf, sizeof(buf));
    if (!strstr(buf, "\nSigIgn:\t0000000000000000\n"))
        print_message("task status:\n%s", buf);
    assert_non_null(strstr(buf, "\nSigBlk:\t0000000000000000\n"));
    assert_non_null(strstr(buf, "\nSigIgn:\t0000000000000000\n"));
    assert_non_null(strstr(buf, "\nSigCgt:\t0000000000000000\n"));
    assert_int_equal(reap(t), 0);
    task_destroy(t);
}

static void test_pgrp_kill(void **state)
{
    struct task_spec spec = {
        .argv = (const char *[]){"sh", "-c", "sleep 100 & echo $!; wait", NULL},
        .envp = test_env,
        .io[1] = {.kind = TASK_IO_PIPE},
        .pgrp = true};
    task_t *t = start_ok(&spec);
    char buf[64] = "";
    size_t len = 0;
    pid_t gpid;

    /* read the grandchild's pid line (the pipe stays open: sleep has it) */
    while (!strchr(buf, '\n')) {
        struct pollfd p = {.fd = task_fd(t, 1), .events = POLLIN};
        assert_int_equal(poll(&p, 1, 10000), 1);
        ssize_t n = read(task_fd(t, 1), buf + len, sizeof(buf) - 1 - len);
        assert_true(n > 0);
        len += (size_t)n;
        buf[len] = '\0';
    }
    gpid = (pid_t)atoi(buf);
    assert_true(gpid > 0 && gpid != task_pid(t));
    assert_int_equal(getpgid(gpid), task_pid(t));

    assert_int_equal(task_kill(t, SIGTERM), 0);
    assert_int_equal(reap(t), 128 + SIGTERM);
    /* sleep was orphaned to us (subreaper): it died of the same signal */
    int st;
    pid_t rc;
    do {
        rc = waitpid(gpid, &st, 0);
    } while (rc < 0 && errno == EINTR);
    assert_int_equal(rc, gpid);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
    /* the group is gone */
    assert_int_equal(task_kill(t, 0), -1);
    assert_int_equal(errno, ESRCH);
    task_destroy(t);
}

static void test_no_fd_leak(void **state)
{
    int leak = open("/dev/null", O_RDONLY); /* no O_CLOEXEC on purpose */
    int p[2], extra[2];
    char buf[4096];
    struct task_fdmap map[1];
    char self[PATH_MAX];
    /* this program lists its fds (see list_fds): a shell would show its
     * own pipes to ls, a plain ls its directory fd */
    struct task_spec spec = {.argv = (const char *[]){self, "--list-fds", NULL},
                             .envp = test_env,
                             .io[1] = {.kind = TASK_IO_PIPE},
                             .fds = map,
                             .nfds = 1,
                             .hold = true};
    task_t *t;
    eddy_error_t err = {{0}};

    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    assert_true(n > 0);
    self[n] = '\0';
    assert_true(leak >= 0);
    assert_int_equal(pipe(p), 0); /* not close-on-exec either */
    assert_int_equal(pipe2(extra, O_CLOEXEC | O_NONBLOCK), 0);
    map[0] = (struct task_fdmap){.fd = extra[1], .target = 7};
    t = start_ok(&spec);
    close(extra[1]);
    assert_int_equal(task_release(t, &err), 0);
    read_all(task_fd(t, 1), buf, sizeof(buf));
    assert_string_equal(buf, "0 1 2 7 ");
    read_all(extra[0], buf, sizeof(buf));
    assert_string_equal(buf, "extra\n");
    assert_int_equal(reap(t), 0);
    task_destroy(t);
    close(extra[0]);
    close(p[0]);
    close(p[1]);
    close(leak);
}

/* Extra fds whose numbers collide with each other's targets are all put
 * in place (the child must not overwrite a source before copying it). */
static void test_fd_shuffle(void **state)
{
    int a[2], b[2];
    char buf[256];
    /* single-digit fds: a shell's own fds start at 10 */
    struct task_fdmap map[] = {{.fd = 5, .target = 6}, {.fd = 6, .target = 5}};
    struct task_spec spec = {
        .argv = (const char *[]){"sh", "-c", "echo A >&6; echo B >&5", NULL},
        .envp = test_env,
        .fds = map,
        .nfds = 2};
    task_t *t;

    assert_int_equal(pipe2(a, O_CLOEXEC | O_NONBLOCK), 0);
    assert_int_equal(pipe2(b, O_CLOEXEC | O_NONBLOCK), 0);
    /* keep the read ends out of the way of 5 and 6 */
    for (int i = 0; i < 2; i++) {
        int fa = fcntl(a[i], F_DUPFD_CLOEXEC, 20);
        int fb = fcntl(b[i], F_DUPFD_CLOEXEC, 20);
        assert_true(fa >= 20 && fb >= 20);
        close(a[i]);
        close(b[i]);
        a[i] = fa;
        b[i] = fb;
    }
    assert_int_equal(dup2(a[1], 5), 5);
    assert_int_equal(dup2(b[1], 6), 6);
    close(a[1]);
    close(b[1]);
    t = start_ok(&spec);
    close(5);
    close(6);
    read_all(a[0], buf, sizeof(buf));
    assert_string_equal(buf, "A\n");
    read_all(b[0], buf, sizeof(buf));
    assert_string_equal(buf, "B\n");
    assert_int_equal(reap(t), 0);
    task_destroy(t);
    close(a[0]);
    close(b[0]);

    /* a closed fd to inherit is reported with the fd being set up */
    eddy_error_t err = {{0}};
    spec.argv = (const char *[]){"true", NULL};
    spec.nfds = 0;
    spec.rank = 5;
    spec.io[1] = (struct task_io){.kind = TASK_IO_INHERIT, .fd = 1000};
    assert_non_null(t = task_create(&spec, &err));
    assert_int_equal(task_start(t, &err), -1);
    assert_int_equal(errno, EBADF);
    assert_string_equal(err.text,
                        "rank 5: cannot set up fd 1: Bad file descriptor");
    task_destroy(t);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define NTASKS 256

static void test_many(void **state)
{
    struct task_spec spec = {.argv = (const char *[]){"true", NULL},
                             .envp = test_env,
                             .io[1] = {.kind = TASK_IO_PIPE},
                             .hold = true,
                             .pgrp = true};
    task_t **tasks = calloc(NTASKS, sizeof(*tasks));
    eddy_error_t err = {{0}};
    double t0, t1, t2, t3;

    assert_non_null(tasks);
    t0 = now();
    for (int i = 0; i < NTASKS; i++) {
        spec.rank = (unsigned int)i;
        tasks[i] = start_ok(&spec);
        assert_int_equal(task_state(tasks[i]), TASK_HELD);
    }
    t1 = now();
    for (int i = 0; i < NTASKS; i++)
        assert_int_equal(task_release_begin(tasks[i], &err), 0);
    for (int i = 0; i < NTASKS; i++) {
        if (task_release_end(tasks[i], &err) < 0)
            fail_msg("release: %s", err.text);
    }
    t2 = now();
    for (int i = 0; i < NTASKS; i++) {
        char buf[16];
        read_all(task_fd(tasks[i], 1), buf, sizeof(buf));
        assert_int_equal(reap(tasks[i]), 0);
        task_destroy(tasks[i]);
    }
    t3 = now();
    free(tasks);
    print_message("%d tasks: start held %.1f ms, release until all exec'd "
                  "%.1f ms, all exited %.1f ms\n",
                  NTASKS, (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3);
}

static void test_trace_exec(void **state)
{
    struct task_spec spec = {.argv = (const char *[]){"true", NULL},
                             .envp = test_env,
                             .hold = true,
                             .trace_exec = true};
    eddy_error_t err = {{0}};
    task_t *t = start_ok(&spec);
    char path[64], line[256];
    bool stopped = false;
    int st;
    FILE *f;

    if (task_release(t, &err) < 0) {
        /* ptrace forbidden here (seccomp, Yama): nothing more to test */
        assert_int_equal(errno, EPERM);
        assert_int_equal(task_state(t), TASK_EXITED);
        task_destroy(t);
        skip();
    }
    /* stopped by the exec: the program has not run a single instruction */
    assert_int_equal(waitpid(task_pid(t), &st, WUNTRACED), task_pid(t));
    assert_true(WIFSTOPPED(st) && WSTOPSIG(st) == SIGTRAP);
    assert_int_equal(task_set_exited(t, st), -1);
    assert_int_equal(errno, EINVAL);

    /* detach leaving it stopped, as for a debugger to attach */
    assert_int_equal(task_trace_detach(t, SIGSTOP), 0);
    assert_int_equal(waitpid(task_pid(t), &st, WUNTRACED), task_pid(t));
    assert_true(WIFSTOPPED(st) && WSTOPSIG(st) == SIGSTOP);
    snprintf(path, sizeof(path), "/proc/%d/status", (int)task_pid(t));
    assert_non_null(f = fopen(path, "r"));
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, "State:", 6))
            stopped = strchr(line, 'T') != NULL;
    }
    fclose(f);
    assert_true(stopped);
    assert_int_equal(task_kill(t, SIGCONT), 0);
    assert_int_equal(reap(t), 0);
    task_destroy(t);
}

static void test_invalid(void **state)
{
    eddy_error_t err = {{0}};
    struct task_spec spec = {.rank = 9, .argv = (const char *[]){NULL}};
    task_t *t;

    assert_null(task_create(NULL, &err));
    assert_int_equal(errno, EINVAL);
    assert_null(task_create(&spec, &err));
    assert_int_equal(errno, EINVAL);
    assert_string_equal(err.text, "rank 9: argv is empty");

    spec.argv = (const char *[]){"true", NULL};
    spec.io[1].kind = 42;
    assert_null(task_create(&spec, &err));
    assert_int_equal(errno, EINVAL);
    assert_string_equal(err.text, "rank 9: io[1]: unknown kind 42");

    spec.io[1] = (struct task_io){.kind = TASK_IO_INHERIT, .fd = -1};
    assert_null(task_create(&spec, &err));
    assert_string_equal(err.text, "rank 9: io[1]: invalid fd -1");
    spec.io[1].kind = TASK_IO_NULL;

    spec.fds = (struct task_fdmap[]){{.fd = 0, .target = 2}};
    spec.nfds = 1;
    assert_null(task_create(&spec, &err));
    assert_int_equal(errno, EINVAL);
    assert_string_equal(err.text, "rank 9: fds[0]: target 2 not in 3-1024");

    spec.fds =
        (struct task_fdmap[]){{.fd = 0, .target = 4}, {.fd = 1, .target = 4}};
    spec.nfds = 2;
    assert_null(task_create(&spec, &err));
    assert_string_equal(err.text, "rank 9: fds[1]: target 4 repeated");
    spec.nfds = 0;

    /* state errors */
    assert_non_null(t = task_create(&spec, &err));
    assert_int_equal(task_release(t, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(task_kill(t, SIGTERM), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(task_set_exited(t, 0), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(task_start(t, &err), 0);
    assert_int_equal(task_start(t, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(task_release_end(t, &err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(task_trace_detach(t, 0), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(reap(t), 0);
    task_destroy(t);

    assert_int_equal(task_exit_code(0), 0);
    assert_int_equal(task_exit_code(3 << 8), 3);
    assert_int_equal(task_exit_code(SIGKILL), 137);
    assert_int_equal(task_exit_code(0x137f), -1); /* stopped */
    assert_int_equal(task_pid(NULL), -1);
    assert_int_equal(task_fd(NULL, 1), -1);
    assert_int_equal(task_take_fd(NULL, 1), -1);
    errno = 42;
    task_destroy(NULL);
    task_cancel(NULL);
    assert_int_equal(errno, 42);
}

/* Helper mode for test_no_fd_leak, run as the task: print the open fds
 * (but not the one reading the directory), then write to fd 7. */
static int list_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;

    if (!d)
        return 1;
    while ((e = readdir(d))) {
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
            printf("%s ", e->d_name);
    }
    closedir(d);
    fflush(stdout);
    return dprintf(7, "extra\n") == 6 ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *scale = getenv("EDDY_TEST_TIMEOUT_SCALE");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_true, no_children),
        cmocka_unit_test_teardown(test_exit3, no_children),
        cmocka_unit_test_teardown(test_signal, no_children),
        cmocka_unit_test_teardown(test_missing, no_children),
        cmocka_unit_test_setup_teardown(test_noexec, make_tmpdir,
                                        remove_tmpdir),
        cmocka_unit_test_teardown(test_bad_cwd, no_children),
        cmocka_unit_test_setup_teardown(test_env_cwd, make_tmpdir,
                                        remove_tmpdir),
        cmocka_unit_test_teardown(test_stdout_stderr, no_children),
        cmocka_unit_test_teardown(test_stdin, no_children),
        cmocka_unit_test_setup_teardown(test_hold, make_tmpdir, remove_tmpdir),
        cmocka_unit_test_setup_teardown(test_cancel, make_tmpdir,
                                        remove_tmpdir),
        cmocka_unit_test_teardown(test_signals_reset, no_children),
        cmocka_unit_test_teardown(test_pgrp_kill, no_children),
        cmocka_unit_test_teardown(test_no_fd_leak, no_children),
        cmocka_unit_test_teardown(test_fd_shuffle, no_children),
        cmocka_unit_test_teardown(test_many, no_children),
        cmocka_unit_test_teardown(test_trace_exec, no_children),
        cmocka_unit_test_teardown(test_invalid, no_children),
    };

    if (argc == 2 && !strcmp(argv[1], "--list-fds"))
        return list_fds();
    /* Orphaned grandchildren come back to us, so the teardown's check
     * that no child is left covers them too. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
        perror("prctl");
        return 1;
    }
    /* A hung test fails instead of blocking the suite. */
    alarm(30 * (scale && atoi(scale) > 0 ? (unsigned)atoi(scale) : 1));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
