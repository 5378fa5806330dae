/* task.c - fork and exec one task, optionally held before exec.
 *
 * Everything that can allocate, search or format happens in the parent
 * before fork(): the child only runs async-signal-safe system calls
 * (sigaction, setpgid, fcntl, dup2/dup3, close, close_range, chdir,
 * sigprocmask, read, ptrace, execve, write, _exit), because the shell may
 * be multi-threaded later (libuv's thread pool) and another thread could
 * hold the malloc lock at the moment of the fork.
 *
 * The child tells the parent why it could not run the program by writing
 * a struct child_report on a close-on-exec pipe: EOF without a report means
 * execve() succeeded.  A held child waits on a socketpair rather than a
 * pipe so that releasing a child that died meanwhile fails with EPIPE
 * (send with MSG_NOSIGNAL) instead of raising SIGPIPE in the shell.
 *
 * The hold channel also carries environment changes made while the task
 * was held (task_setenv): the release is then 'E', a length, the records
 * ("NAME=VALUE\0" sets, "NAME\0" removes), and only then 'R'.  Applying
 * them and running the pre_exec hook (shell plugins' task.init) allocate
 * in the child: tolerable because the shell is single-threaded, and only
 * done when there is something to apply or a hook to run.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/common/errprintf.h"
#include "src/shell/task.h"

/* Extra fd targets are bounded so that the child's loop closing the
 * unused numbers below the highest target stays short. */
#define TASK_FD_TARGET_MAX 1024
/* Output pipe size: 1 MiB is Linux's default ceiling for unprivileged
 * users (/proc/sys/fs/pipe-max-size). */
#define TASK_PIPE_SIZE (1024 * 1024)

/* Used when the task's environment has no PATH (as execvp does). */
#define TASK_DEFAULT_PATH "/usr/local/bin:/usr/bin:/bin"

/* Byte sent on the hold channel to let a held child exec. */
#define TASK_RELEASE_BYTE 'R'
/* Byte that announces environment changes (then a uint32_t length and the
 * records) before the release byte. */
#define TASK_ENV_BYTE 'E'

/* Room for a pre_exec hook's message in the child's report. */
#define TASK_HOOK_MSG_MAX 384

/* Which step failed in the child. */
enum child_step {
    STEP_PGRP = 1,
    STEP_FD,
    STEP_CHDIR,
    STEP_TRACE,
    STEP_EXEC,
    STEP_ENV,  /* applying the environment changes of the release */
    STEP_HOOK, /* the pre_exec hook failed */
};

/* Written by the child in one write(), well under PIPE_BUF, so the parent
 * reads it whole or not at all. */
struct child_report {
    int step;
    int errnum;
    int fd;                      /* STEP_FD: the target fd being set up */
    char msg[TASK_HOOK_MSG_MAX]; /* STEP_HOOK: the hook's message */
};

struct task {
    unsigned int rank;
    char **argv;
    char **envp;
    char *cwd;
    struct task_io io[3];
    struct task_fdmap *fds;
    size_t nfds;
    bool hold;
    bool pgrp;
    bool trace_exec;
    task_pre_exec_f pre_exec;
    void *pre_exec_arg;

    enum task_state state;
    char *path;    /* resolved program, after task_start */
    pid_t pid;     /* -1 before start */
    int status;    /* wait status, -1 until exited */
    int stdio[3];  /* parent ends of TASK_IO_PIPE fds, or -1 */
    int hold_fd;   /* parent end of the hold socketpair while held */
    int report_fd; /* read end of the child's report pipe until known */
    bool released; /* task_release_begin() was called */
    bool lost;     /* the release could not be delivered */
    bool in_child; /* this copy is the forked child's (pre_exec hook) */
    char *envmods; /* changes queued while held, sent with the release */
    size_t envmods_len;
};

/* Everything the child needs, prepared by the parent so the child does
 * no allocation.  Sources src[i] (parent fds) become targets dst[i] in the
 * task; the report pipe and hold channel ride along at fixed slots. */
struct launch {
    size_t n; /* number of src/dst pairs: 3 + nfds */
    int *src;
    int *dst;
    int *tmp;             /* scratch for the child, n + 2 entries */
    int maxdst;           /* highest target, >= 2 */
    int report_wr;        /* child end of the report pipe */
    int hold_rd;          /* child end of the hold channel, or -1 */
    int fdlimit;          /* close_range() fallback bound */
    struct sigaction dfl; /* SIG_DFL, empty mask */
    sigset_t empty;
};

static void close_keep_errno(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
        *fd = -1;
    }
}

static void strv_free(char **v)
{
    if (v) {
        for (size_t i = 0; v[i]; i++)
            free(v[i]);
        free(v);
    }
}

/* Copy a NULL-terminated string vector; NULL copies as an empty one. */
static char **strv_dup(const char *const *v)
{
    size_t n = 0;
    char **copy;

    while (v && v[n])
        n++;
    if (!(copy = calloc(n + 1, sizeof(*copy))))
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (!(copy[i] = strdup(v[i]))) {
            strv_free(copy);
            errno = ENOMEM;
            return NULL;
        }
    }
    return copy;
}

static int check_spec(const struct task_spec *spec, eddy_error_t *err)
{
    int saved = errno;

    errno = EINVAL;
    if (!spec)
        return errprintf(err, "task spec is NULL");
    if (!spec->argv || !spec->argv[0])
        return errprintf(err, "rank %u: argv is empty", spec->rank);
    for (int i = 0; i < 3; i++) {
        const struct task_io *io = &spec->io[i];
        if (io->kind != TASK_IO_NULL && io->kind != TASK_IO_INHERIT &&
            io->kind != TASK_IO_PIPE)
            return errprintf(err, "rank %u: io[%d]: unknown kind %d",
                             spec->rank, i, (int)io->kind);
        if (io->kind == TASK_IO_INHERIT && io->fd < 0)
            return errprintf(err, "rank %u: io[%d]: invalid fd %d", spec->rank,
                             i, io->fd);
    }
    if (spec->nfds > 0 && !spec->fds)
        return errprintf(err, "rank %u: nfds is %zu but fds is NULL",
                         spec->rank, spec->nfds);
    for (size_t i = 0; i < spec->nfds; i++) {
        const struct task_fdmap *m = &spec->fds[i];
        if (m->fd < 0)
            return errprintf(err, "rank %u: fds[%zu]: invalid fd %d",
                             spec->rank, i, m->fd);
        if (m->target < 3 || m->target > TASK_FD_TARGET_MAX)
            return errprintf(err, "rank %u: fds[%zu]: target %d not in 3-%d",
                             spec->rank, i, m->target, TASK_FD_TARGET_MAX);
        for (size_t j = 0; j < i; j++) {
            if (spec->fds[j].target == m->target)
                return errprintf(err, "rank %u: fds[%zu]: target %d repeated",
                                 spec->rank, i, m->target);
        }
    }
    errno = saved;
    return 0;
}

task_t *task_create(const struct task_spec *spec, eddy_error_t *err)
{
    task_t *t;

    if (check_spec(spec, err) < 0)
        return NULL;
    if (!(t = calloc(1, sizeof(*t))))
        goto nomem;
    t->rank = spec->rank;
    t->pid = -1;
    t->status = -1;
    t->hold_fd = -1;
    t->report_fd = -1;
    for (int i = 0; i < 3; i++) {
        t->stdio[i] = -1;
        t->io[i] = spec->io[i];
    }
    t->hold = spec->hold;
    t->pgrp = spec->pgrp;
    t->trace_exec = spec->trace_exec;
    t->pre_exec = spec->pre_exec;
    t->pre_exec_arg = spec->pre_exec_arg;
    if (!(t->argv = strv_dup(spec->argv)) || !(t->envp = strv_dup(spec->envp)))
        goto nomem;
    if (spec->cwd && !(t->cwd = strdup(spec->cwd)))
        goto nomem;
    if (spec->nfds > 0) {
        if (!(t->fds = calloc(spec->nfds, sizeof(*t->fds))))
            goto nomem;
        memcpy(t->fds, spec->fds, spec->nfds * sizeof(*t->fds));
        t->nfds = spec->nfds;
    }
    return t;
nomem:
    task_destroy(t);
    errno = ENOMEM;
    errprintf(err, "out of memory");
    return NULL;
}

void task_destroy(task_t *t)
{
    if (t) {
        int saved = errno;
        for (int i = 0; i < 3; i++)
            close_keep_errno(&t->stdio[i]);
        close_keep_errno(&t->hold_fd);
        close_keep_errno(&t->report_fd);
        strv_free(t->argv);
        strv_free(t->envp);
        free(t->cwd);
        free(t->fds);
        free(t->path);
        free(t->envmods);
        free(t);
        errno = saved;
    }
}

static const char *env_get(char **envp, const char *name)
{
    size_t len = strlen(name);

    for (size_t i = 0; envp[i]; i++) {
        if (!strncmp(envp[i], name, len) && envp[i][len] == '=')
            return envp[i] + len + 1;
    }
    return NULL;
}

static void __attribute__((noreturn))
child_fail(int report_fd, int step, int fd);

static bool env_name_ok(const char *name)
{
    return name && *name && !strchr(name, '=');
}

/* Set (value != NULL) or remove 'name' in the NULL-terminated vector
 * '*envp' of malloc'd strings.  -1 with errno ENOMEM, '*envp' unchanged. */
static int envp_set(char ***envp, const char *name, const char *value)
{
    size_t len = strlen(name), n = 0, i;
    char *entry = NULL, **v = *envp;

    while (v[n])
        n++;
    for (i = 0; i < n; i++)
        if (!strncmp(v[i], name, len) && v[i][len] == '=')
            break;
    if (!value) {
        if (i < n) {
            free(v[i]);
            memmove(&v[i], &v[i + 1], (n - i) * sizeof(*v));
        }
        return 0;
    }
    if (asprintf(&entry, "%s=%s", name, value) < 0) {
        errno = ENOMEM;
        return -1;
    }
    if (i < n) {
        free(v[i]);
        v[i] = entry;
        return 0;
    }
    if (!(v = realloc(v, (n + 2) * sizeof(*v)))) {
        free(entry);
        errno = ENOMEM;
        return -1;
    }
    v[n] = entry;
    v[n + 1] = NULL;
    *envp = v;
    return 0;
}

/* Apply records "NAME=VALUE\0" / "NAME\0" (from the release) to the
 * child's envp.  -1 with errno EPROTO (malformed) or ENOMEM. */
static int envp_apply(char ***envp, char *data, size_t len)
{
    char *p = data, *end = data + len;

    while (p < end) {
        char *nul = memchr(p, '\0', (size_t)(end - p));
        char *eq;
        if (!nul || nul == p) {
            errno = EPROTO;
            return -1;
        }
        if ((eq = strchr(p, '=')))
            *eq = '\0';
        if (envp_set(envp, p, eq ? eq + 1 : NULL) < 0)
            return -1;
        p = nul + 1;
    }
    return 0;
}

int task_setenv(task_t *t, const char *name, const char *value)
{
    size_t nl, vl, add;
    char *p;

    if (!t || !env_name_ok(name)) {
        errno = EINVAL;
        return -1;
    }
    if (t->in_child || t->state == TASK_CREATED)
        return envp_set(&t->envp, name, value);
    if (t->state != TASK_HELD || t->released || t->hold_fd < 0) {
        errno = EBUSY;
        return -1;
    }
    nl = strlen(name);
    vl = value ? strlen(value) : 0;
    add = nl + (value ? vl + 1 : 0) + 1;
    if (add > TASK_ENVMODS_MAX - t->envmods_len) {
        errno = E2BIG;
        return -1;
    }
    if (!(p = realloc(t->envmods, t->envmods_len + add))) {
        errno = ENOMEM;
        return -1;
    }
    t->envmods = p;
    p += t->envmods_len;
    memcpy(p, name, nl);
    if (value) {
        p[nl] = '=';
        memcpy(p + nl + 1, value, vl);
    }
    p[add - 1] = '\0';
    t->envmods_len += add;
    return 0;
}

/* Read exactly 'len' bytes (child side, blocking).  -1 on EOF or error. */
static int read_full(int fd, void *buf, size_t len)
{
    char *p = buf;

    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Child side: wait on the hold channel for the release, applying the
 * environment changes that come before it.  Exits cancelled on EOF or a
 * malformed release. */
static void child_wait_release(task_t *t, int hold, int report)
{
    for (;;) {
        char c = 0;
        uint32_t len;
        char *data;

        if (read_full(hold, &c, 1) < 0)
            _exit(TASK_EXIT_CANCELLED);
        if (c == TASK_RELEASE_BYTE)
            return;
        if (c != TASK_ENV_BYTE || read_full(hold, &len, sizeof(len)) < 0 ||
            len == 0 || len > TASK_ENVMODS_MAX)
            _exit(TASK_EXIT_CANCELLED);
        if (!(data = malloc(len))) {
            errno = ENOMEM;
            child_fail(report, STEP_ENV, -1);
        }
        if (read_full(hold, data, len) < 0)
            _exit(TASK_EXIT_CANCELLED);
        if (envp_apply(&t->envp, data, len) < 0)
            child_fail(report, STEP_ENV, -1);
        free(data);
    }
}

/* Is `path` something execve() could run?  -1 with ENOENT-like errno if
 * it is absent, EACCES if present but not runnable. */
static int check_candidate(const char *path)
{
    struct stat st;

    if (stat(path, &st) < 0)
        return -1;
    if (!S_ISREG(st.st_mode) || access(path, X_OK) < 0) {
        errno = EACCES;
        return -1;
    }
    return 0;
}

/* Find the program like a shell: argv[0] with a '/' is used as is (execve
 * reports its errors); otherwise each PATH entry of the task's own
 * environment is tried in order, and if none works the error is EACCES if
 * some candidate existed but could not be run, else ENOENT.  A relative
 * PATH entry is taken relative to the task's cwd, where execve would have
 * looked. */
static char *resolve_path(const task_t *t)
{
    const char *prog = t->argv[0];
    const char *p;
    bool eacces = false;

    if (strchr(prog, '/'))
        return strdup(prog);
    if (*prog == '\0') {
        errno = ENOENT;
        return NULL;
    }
    if (!(p = env_get(t->envp, "PATH")))
        p = TASK_DEFAULT_PATH;
    for (;;) {
        const char *end = strchrnul(p, ':');
        int dirlen = (int)(end - p);
        const char *dir = dirlen > 0 ? p : ".";
        bool relative = dir[0] != '/';
        char *cand;
        int n;

        if (dirlen == 0)
            dirlen = 1;
        if (relative && t->cwd)
            n = asprintf(&cand, "%s/%.*s/%s", t->cwd, dirlen, dir, prog);
        else
            n = asprintf(&cand, "%.*s/%s", dirlen, dir, prog);
        if (n < 0) {
            errno = ENOMEM;
            return NULL;
        }
        if (check_candidate(cand) == 0)
            return cand;
        if (errno == EACCES)
            eacces = true;
        free(cand);
        if (*end == '\0')
            break;
        p = end + 1;
    }
    errno = eacces ? EACCES : ENOENT;
    return NULL;
}

/* Child side: report a failed step to the parent and exit as a shell
 * would (127 not found, 126 otherwise). */
static void __attribute__((noreturn))
child_fail_msg(int report_fd, int step, int fd, const char *msg)
{
    struct child_report r = {.step = step, .errnum = errno, .fd = fd};
    ssize_t n;

    if (msg)
        snprintf(r.msg, sizeof(r.msg), "%s", msg);

    do {
        n = write(report_fd, &r, sizeof(r));
    } while (n < 0 && errno == EINTR);
    _exit(r.errnum == ENOENT && step != STEP_HOOK ? 127 : 126);
}

static void __attribute__((noreturn))
child_fail(int report_fd, int step, int fd)
{
    child_fail_msg(report_fd, step, fd, NULL);
}

/* The C library refuses to touch the signals it reserves for itself (32
 * and 33 with glibc), so an "ignore" inherited from some ancestor would
 * reach the task.  Reset them with the raw system call, which is
 * async-signal-safe; the kernel's sigaction takes the handler first. */
static void reset_reserved_signal(int sig)
{
    struct {
        void (*handler)(int);
        unsigned long flags;
        void (*restorer)(void);
        uint64_t mask;
    } ksa = {.handler = SIG_DFL};

    (void)syscall(SYS_rt_sigaction, sig, &ksa, NULL, sizeof(ksa.mask));
}

/* Runs in the forked child with every signal blocked.  Only
 * async-signal-safe calls from here on. */
static void __attribute__((noreturn)) child_main(task_t *t, struct launch *l)
{
    size_t nslot = l->n + 2;
    int base = l->maxdst + 1;
    int report = l->report_wr;

    /* Default dispositions before unblocking, so a pending signal cannot
     * run one of the shell's handlers in the child.  Errors are expected
     * for SIGKILL, SIGSTOP and the C library's internal signals. */
    for (int sig = 1; sig < NSIG; sig++) {
        if (sigaction(sig, &l->dfl, NULL) < 0 && sig != SIGKILL &&
            sig != SIGSTOP)
            reset_reserved_signal(sig);
    }

    if (t->pgrp && setpgid(0, 0) < 0)
        child_fail(report, STEP_PGRP, -1);

    /* Place the fds: first copy every fd we need above all the slots,
     * then into fixed slots base.., close everything above the slots
     * (fds the shell forgot to mark close-on-exec, other tasks' pipes),
     * and only then dup2 onto the targets, so no source can be
     * overwritten before it is copied. */
    int high = base + (int)nslot;
    if ((l->tmp[l->n] = fcntl(report, F_DUPFD_CLOEXEC, high)) < 0)
        child_fail(report, STEP_FD, -1);
    report = l->tmp[l->n];
    l->tmp[l->n + 1] = -1;
    if (l->hold_rd >= 0 &&
        (l->tmp[l->n + 1] = fcntl(l->hold_rd, F_DUPFD_CLOEXEC, high)) < 0)
        child_fail(report, STEP_FD, -1);
    for (size_t i = 0; i < l->n; i++) {
        if ((l->tmp[i] = fcntl(l->src[i], F_DUPFD_CLOEXEC, high)) < 0)
            child_fail(report, STEP_FD, l->dst[i]);
    }
    for (size_t i = 0; i < nslot; i++) {
        if (l->tmp[i] < 0)
            continue;
        if (dup3(l->tmp[i], base + (int)i, O_CLOEXEC) < 0)
            child_fail(report, STEP_FD, i < l->n ? l->dst[i] : -1);
    }
    report = base + (int)l->n;
    int hold = l->hold_rd >= 0 ? base + (int)l->n + 1 : -1;
    if (close_range((unsigned int)high, ~0U, 0) < 0) {
        for (int fd = high; fd < l->fdlimit; fd++)
            (void)close(fd);
    }
    for (size_t i = 0; i < l->n; i++) {
        if (dup2(base + (int)i, l->dst[i]) < 0)
            child_fail(report, STEP_FD, l->dst[i]);
    }
    for (int fd = 3; fd < base; fd++) {
        bool target = false;
        for (size_t i = 0; i < l->n && !target; i++)
            target = l->dst[i] == fd;
        if (!target)
            (void)close(fd);
    }

    if (t->cwd && chdir(t->cwd) < 0)
        child_fail(report, STEP_CHDIR, -1);

    sigprocmask(SIG_SETMASK, &l->empty, NULL);

    t->in_child = true;
    if (hold >= 0)
        child_wait_release(t, hold, report);
    if (t->pre_exec) {
        char msg[TASK_HOOK_MSG_MAX] = "";
        errno = 0;
        if (t->pre_exec(t, t->pre_exec_arg, msg, sizeof(msg)) < 0) {
            if (errno == 0)
                errno = ECANCELED;
            child_fail_msg(report, STEP_HOOK, -1, msg);
        }
    }
    if (t->trace_exec && ptrace(PTRACE_TRACEME, 0, NULL, NULL) < 0)
        child_fail(report, STEP_TRACE, -1);
    execve(t->path, t->argv, t->envp);
    child_fail(report, STEP_EXEC, -1);
}

static void launch_free(struct launch *l)
{
    free(l->src);
    free(l->dst);
    free(l->tmp);
}

/* Reap a child that reported a failure: it exits right after writing the
 * report, so this does not block for long.  Skipped if the caller's reaper
 * got there first. */
static void reap_failed(task_t *t)
{
    int st;
    pid_t rc;

    if (t->state == TASK_EXITED)
        return;
    do {
        rc = waitpid(t->pid, &st, 0);
    } while (rc < 0 && errno == EINTR);
    if (rc == t->pid)
        t->status = st;
    t->state = TASK_EXITED;
}

/* Read the child's report: EOF means execve() succeeded (the pipe closed
 * on exec) or the child died before trying; a report means it failed. */
static int wait_exec(task_t *t, eddy_error_t *err)
{
    struct child_report r;
    ssize_t n;

    do {
        n = read(t->report_fd, &r, sizeof(r));
    } while (n < 0 && errno == EINTR);
    close_keep_errno(&t->report_fd);
    if (n == 0) {
        if (t->lost || t->state == TASK_EXITED) {
            errno = ESRCH;
            return errprintf(err, "rank %u: task died before release", t->rank);
        }
        t->state = TASK_RUNNING;
        return 0;
    }
    if (n != (ssize_t)sizeof(r)) {
        int e = n < 0 ? errno : EIO;
        reap_failed(t);
        errno = e;
        return errprintf(err, "rank %u: cannot read exec status: %s", t->rank,
                         strerror(e));
    }
    reap_failed(t);
    errno = r.errnum;
    switch (r.step) {
    case STEP_PGRP:
        return errprintf(err, "rank %u: cannot create process group: %s",
                         t->rank, strerror(r.errnum));
    case STEP_FD:
        if (r.fd < 0)
            return errprintf(err, "rank %u: cannot set up fds: %s", t->rank,
                             strerror(r.errnum));
        return errprintf(err, "rank %u: cannot set up fd %d: %s", t->rank, r.fd,
                         strerror(r.errnum));
    case STEP_CHDIR:
        return errprintf(err, "rank %u: cannot chdir to '%s': %s", t->rank,
                         t->cwd, strerror(r.errnum));
    case STEP_TRACE:
        return errprintf(err, "rank %u: cannot trace '%s': %s", t->rank,
                         t->argv[0], strerror(r.errnum));
    case STEP_ENV:
        return errprintf(err, "rank %u: cannot apply environment changes: %s",
                         t->rank, strerror(r.errnum));
    case STEP_HOOK:
        r.msg[sizeof(r.msg) - 1] = '\0';
        return errprintf(err, "rank %u: %s", t->rank,
                         r.msg[0] ? r.msg : strerror(r.errnum));
    default:
        return errprintf(err, "rank %u: cannot run '%s': %s", t->rank,
                         t->argv[0], strerror(r.errnum));
    }
}

static int max_open_fds(void)
{
    long n = sysconf(_SC_OPEN_MAX);

    /* Only used if close_range() is missing; bound the loop. */
    return n > 0 && n < 65536 ? (int)n : 65536;
}

int task_start(task_t *t, eddy_error_t *err)
{
    struct launch l = {.report_wr = -1, .hold_rd = -1};
    int child_std[3] = {-1, -1, -1};
    int parent_std[3] = {-1, -1, -1};
    int devnull = -1;
    int report[2] = {-1, -1};
    int hold[2] = {-1, -1};
    sigset_t all, old;
    char *path = NULL;
    pid_t pid;
    int e;

    if (!t || t->state != TASK_CREATED || t->pid >= 0) {
        errno = EINVAL;
        return errprintf(err, "task already started");
    }
    if (!(path = resolve_path(t)))
        return errprintf(err, "rank %u: cannot run '%s': %s", t->rank,
                         t->argv[0], strerror(errno));

    l.n = 3 + t->nfds;
    if (!(l.src = calloc(l.n, sizeof(int))) ||
        !(l.dst = calloc(l.n, sizeof(int))) ||
        !(l.tmp = calloc(l.n + 2, sizeof(int)))) {
        errno = ENOMEM;
        errprintf(err, "out of memory");
        goto error;
    }
    l.maxdst = 2;
    for (int i = 0; i < 3; i++) {
        switch (t->io[i].kind) {
        case TASK_IO_INHERIT:
            l.src[i] = t->io[i].fd;
            break;
        case TASK_IO_PIPE: {
            int p[2];
            if (pipe2(p, O_CLOEXEC) < 0) {
                errprintf(err, "rank %u: pipe: %s", t->rank, strerror(errno));
                goto error;
            }
            /* stdin: the parent writes; stdout/stderr: the parent reads */
            parent_std[i] = i == 0 ? p[1] : p[0];
            child_std[i] = i == 0 ? p[0] : p[1];
            /* the parent end is for libuv; the child keeps blocking I/O */
            int fl = fcntl(parent_std[i], F_GETFL);
            if (fl < 0 || fcntl(parent_std[i], F_SETFL, fl | O_NONBLOCK) < 0) {
                errprintf(err, "rank %u: fcntl: %s", t->rank, strerror(errno));
                goto error;
            }
            /* A bigger pipe lets a task that writes fast hand over more
             * per read; best effort (the system may cap it). */
            if (i > 0)
                (void)fcntl(parent_std[i], F_SETPIPE_SZ, TASK_PIPE_SIZE);
            l.src[i] = child_std[i];
            break;
        }
        default:
            if (devnull < 0 &&
                (devnull = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0) {
                errprintf(err, "rank %u: /dev/null: %s", t->rank,
                          strerror(errno));
                goto error;
            }
            l.src[i] = devnull;
            break;
        }
        l.dst[i] = i;
    }
    for (size_t i = 0; i < t->nfds; i++) {
        l.src[3 + i] = t->fds[i].fd;
        l.dst[3 + i] = t->fds[i].target;
        if (t->fds[i].target > l.maxdst)
            l.maxdst = t->fds[i].target;
    }
    if (pipe2(report, O_CLOEXEC) < 0) {
        errprintf(err, "rank %u: pipe: %s", t->rank, strerror(errno));
        goto error;
    }
    l.report_wr = report[1];
    if (t->hold) {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, hold) < 0) {
            errprintf(err, "rank %u: socketpair: %s", t->rank, strerror(errno));
            goto error;
        }
        l.hold_rd = hold[1];
    }
    l.fdlimit = max_open_fds();
    l.dfl.sa_handler = SIG_DFL;
    sigemptyset(&l.dfl.sa_mask);
    sigemptyset(&l.empty);
    t->path = path; /* child_main execs t->path */

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid = fork();
    if (pid == 0)
        child_main(t, &l);
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        t->path = NULL;
        errno = e;
        errprintf(err, "rank %u: fork: %s", t->rank, strerror(e));
        goto error;
    }

    /* Also make the group from this side, so task_kill() right after
     * task_start() reaches it even if the child has not run yet.  It fails
     * harmlessly once the child has exec'd (EACCES) or exited. */
    if (t->pgrp)
        (void)setpgid(pid, pid);
    t->pid = pid;
    for (int i = 0; i < 3; i++) {
        close_keep_errno(&child_std[i]);
        t->stdio[i] = parent_std[i];
    }
    close_keep_errno(&devnull);
    close_keep_errno(&report[1]);
    close_keep_errno(&hold[1]);
    t->report_fd = report[0];
    t->hold_fd = hold[0];
    launch_free(&l);
    if (t->hold) {
        t->state = TASK_HELD;
        return 0;
    }
    return wait_exec(t, err);
error:
    for (int i = 0; i < 3; i++) {
        close_keep_errno(&child_std[i]);
        close_keep_errno(&parent_std[i]);
    }
    close_keep_errno(&devnull);
    close_keep_errno(&report[0]);
    close_keep_errno(&report[1]);
    close_keep_errno(&hold[0]);
    close_keep_errno(&hold[1]);
    launch_free(&l);
    e = errno;
    free(path);
    errno = e;
    return -1;
}

/* Send all of 'buf' on the hold channel.  -1 if the child is gone. */
static int send_full(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int task_release_begin(task_t *t, eddy_error_t *err)
{
    char c = TASK_RELEASE_BYTE;
    int rc = 0;

    if (!t || t->hold_fd < 0 || t->released) {
        errno = EINVAL;
        return errprintf(err, "task is not held");
    }
    /* Environment changes first: the child applies them before exec.  The
     * channel is blocking; the child reads as we write. */
    if (t->envmods_len > 0) {
        char head[1 + sizeof(uint32_t)];
        uint32_t len = (uint32_t)t->envmods_len;
        head[0] = TASK_ENV_BYTE;
        memcpy(head + 1, &len, sizeof(len));
        rc = send_full(t->hold_fd, head, sizeof(head));
        if (rc == 0)
            rc = send_full(t->hold_fd, t->envmods, t->envmods_len);
    }
    /* A child that died while held (failed chdir, killed) has closed its
     * end: remember that, and let _end report why. */
    if (rc < 0 || send_full(t->hold_fd, &c, 1) < 0)
        t->lost = true;
    free(t->envmods);
    t->envmods = NULL;
    t->envmods_len = 0;
    close_keep_errno(&t->hold_fd);
    t->released = true;
    return 0;
}

int task_release_end(task_t *t, eddy_error_t *err)
{
    if (!t || !t->released || t->report_fd < 0) {
        errno = EINVAL;
        return errprintf(err, "task is not being released");
    }
    return wait_exec(t, err);
}

int task_release(task_t *t, eddy_error_t *err)
{
    if (task_release_begin(t, err) < 0)
        return -1;
    return task_release_end(t, err);
}

void task_cancel(task_t *t)
{
    if (t && t->hold_fd >= 0 && !t->released) {
        close_keep_errno(&t->hold_fd);
        close_keep_errno(&t->report_fd);
        if (t->state == TASK_HELD)
            t->state = TASK_RUNNING;
    }
}

int task_kill(task_t *t, int sig)
{
    if (!t || t->pid <= 0) {
        errno = EINVAL;
        return -1;
    }
    /* After the reaper collected the leader, its pid cannot be handed to a
     * new process while the group still has members, so the group id is
     * still safe to signal; without a group the pid may be reused. */
    if (t->pgrp)
        return kill(-t->pid, sig);
    if (t->state == TASK_EXITED) {
        errno = ESRCH;
        return -1;
    }
    return kill(t->pid, sig);
}

int task_trace_detach(task_t *t, int sig)
{
    if (!t || t->pid <= 0 || !t->trace_exec) {
        errno = EINVAL;
        return -1;
    }
    return ptrace(PTRACE_DETACH, t->pid, NULL, (void *)(long)sig) < 0 ? -1 : 0;
}

int task_set_exited(task_t *t, int wstatus)
{
    if (!t || t->pid <= 0 || !(WIFEXITED(wstatus) || WIFSIGNALED(wstatus))) {
        errno = EINVAL;
        return -1;
    }
    t->status = wstatus;
    t->state = TASK_EXITED;
    return 0;
}

int task_exit_code(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return -1;
}

enum task_state task_state(const task_t *t)
{
    return t ? t->state : TASK_CREATED;
}

pid_t task_pid(const task_t *t)
{
    return t ? t->pid : -1;
}

unsigned int task_rank(const task_t *t)
{
    return t ? t->rank : 0;
}

int task_status(const task_t *t)
{
    return t ? t->status : -1;
}

const char *task_path(const task_t *t)
{
    return t ? t->path : NULL;
}

int task_fd(const task_t *t, int stdfd)
{
    if (!t || stdfd < 0 || stdfd > 2)
        return -1;
    return t->stdio[stdfd];
}

int task_take_fd(task_t *t, int stdfd)
{
    int fd;

    if (!t || stdfd < 0 || stdfd > 2)
        return -1;
    fd = t->stdio[stdfd];
    t->stdio[stdfd] = -1;
    return fd;
}
