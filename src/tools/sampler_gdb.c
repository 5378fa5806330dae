/* sampler_gdb.c - stacks from one gdb in batch mode (see sampler.h).
 *
 * gdb takes about a quarter of a second to start, so one gdb samples all
 * the tasks of the node in turn:
 *   gdb -nx -q -batch -iex 'set debuginfod enabled off' -ex ... \
 *     -ex 'echo \n@@eddy-stackd-PID begin I@@\n' -ex 'attach PID' \
 *     -ex 'thread apply all bt' -ex 'detach' \
 *     -ex 'echo \n@@eddy-stackd-PID end I@@\n'   ... for each task I
 * gdb goes on after a failed command, so a task that cannot be attached
 * costs only its own error lines.  Its output (stdout and stderr on one
 * pipe) is cut per task on the markers and read with btparse.h.
 *
 * gdb runs in its own process group, so that a timeout can end it and
 * anything it started.  It is asked first (SIGTERM: gdb detaches from a
 * process it attached to before it quits), then told (SIGKILL).  A gdb
 * killed in the middle of an attach can leave the SIGSTOP of PTRACE_ATTACH
 * pending in the task, so every task that gdb did not finish with, and
 * that was not stopped before, gets a SIGCONT, which discards a pending
 * stop signal.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/common/btparse.h"
#include "src/tools/sampler.h"

/* A thousand threads of a thousand frames, at ~100 bytes a frame, is
 * 100 MiB of text; a node's tasks rarely need a hundredth of that. */
#define GDB_OUTPUT_MAX (64u << 20)

/* How long gdb gets to detach and quit after SIGTERM, then to die after
 * SIGKILL. */
#define GDB_GRACE_MS 1000

/* Longest wait in poll(), so a cancel that lands just before it is seen
 * soon enough. */
#define POLL_MS_MAX 100

extern char **environ;

struct gdb_run {
    const struct sampler_opts *opts;
    char **argv;
    size_t argc, argcap;
    char **envp;
    pid_t pid;
    int fd;
    char *out;
    size_t len, cap;
    int why; /* 0, or why gdb was stopped early */
};

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int arg_add(struct gdb_run *g, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int arg_add(struct gdb_run *g, const char *fmt, ...)
{
    va_list ap;
    char *s;
    int r;

    if (g->argc + 2 > g->argcap) {
        size_t cap = g->argcap ? 2 * g->argcap : 64;
        char **p = realloc(g->argv, cap * sizeof(*p));
        if (!p)
            return -1;
        g->argv = p;
        g->argcap = cap;
    }
    va_start(ap, fmt);
    r = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (r < 0)
        return -1;
    g->argv[g->argc++] = s;
    g->argv[g->argc] = NULL;
    return 0;
}

/* gdb's argv: the settings, then five commands per task to sample. */
static int build_argv(struct gdb_run *g,
                      const struct sample *s,
                      size_t n,
                      const bool *skip)
{
    int me = (int)getpid();
    size_t i;

    if (arg_add(g, "%s", g->opts->gdb ? g->opts->gdb : "gdb") < 0 ||
        arg_add(g, "-nx") < 0 || arg_add(g, "-q") < 0 ||
        arg_add(g, "-batch") < 0 || arg_add(g, "-iex") < 0 ||
        arg_add(g, "set debuginfod enabled off") < 0 || arg_add(g, "-ex") < 0 ||
        arg_add(g, "set pagination off") < 0 || arg_add(g, "-ex") < 0 ||
        arg_add(g, "set width 0") < 0 || arg_add(g, "-ex") < 0 ||
        arg_add(g, "set confirm off") < 0)
        return -1;
    for (i = 0; i < n; i++) {
        if (skip[i])
            continue;
        if (arg_add(g, "-ex") < 0 ||
            arg_add(g, "echo \\n@@eddy-stackd-%d begin %zu@@\\n", me, i) < 0 ||
            arg_add(g, "-ex") < 0 ||
            arg_add(g, "attach %d", (int)s[i].pid) < 0 ||
            arg_add(g, "-ex") < 0 || arg_add(g, "thread apply all bt") < 0 ||
            arg_add(g, "-ex") < 0 || arg_add(g, "detach") < 0 ||
            arg_add(g, "-ex") < 0 ||
            arg_add(g, "echo \\n@@eddy-stackd-%d end %zu@@\\n", me, i) < 0)
            return -1;
    }
    return 0;
}

/* Our environment with LC_ALL=C, so that gdb's messages are the English
 * ones we look for. */
static int build_envp(struct gdb_run *g)
{
    size_t n = 0, k = 0, i;

    while (environ[n])
        n++;
    if (!(g->envp = calloc(n + 2, sizeof(*g->envp))))
        return -1;
    for (i = 0; i < n; i++)
        if (strncmp(environ[i], "LC_ALL=", 7) != 0)
            g->envp[k++] = environ[i];
    g->envp[k] = (char *)"LC_ALL=C";
    return 0;
}

/* Start gdb with stdout and stderr on one pipe (g->fd) and stdin on
 * /dev/null, in a process group of its own.  -1 with errno (exec's
 * errno if gdb could not be run). */
static int spawn(struct gdb_run *g)
{
    int out[2] = {-1, -1}, ep[2] = {-1, -1}, nullfd = -1, e = 0;
    pid_t parent = getpid();
    sigset_t all, old;
    ssize_t r;

    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0 ||
        (nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
        goto error;
    /* no handler of ours may run in the child before exec */
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &old);
    if ((g->pid = fork()) == 0) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigset_t none;
        int sig;

        setpgid(0, 0);
        /* if we die, gdb is asked to detach and quit */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        for (sig = 1; sig < NSIG; sig++)
            (void)sigaction(sig, &dfl, NULL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (dup2(nullfd, 0) < 0 || dup2(out[1], 1) < 0 || dup2(out[1], 2) < 0)
            e = errno;
        else
            execvpe(g->argv[0], g->argv, g->envp);
        if (!e)
            e = errno;
        (void)!write(ep[1], &e, sizeof(e));
        _exit(127);
    }
    e = errno;
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (g->pid < 0) {
        errno = e;
        goto error;
    }
    (void)setpgid(g->pid, g->pid); /* whichever of us runs first */
    close(out[1]);
    close(ep[1]);
    close(nullfd);
    out[1] = ep[1] = nullfd = -1;
    while ((r = read(ep[0], &e, sizeof(e))) < 0 && errno == EINTR)
        ;
    close(ep[0]);
    ep[0] = -1;
    if (r == sizeof(e)) {
        (void)waitpid(g->pid, NULL, 0);
        g->pid = -1;
        errno = e;
        goto error;
    }
    g->fd = out[0];
    return 0;
error:
    e = errno;
    if (out[0] >= 0)
        close(out[0]);
    if (out[1] >= 0)
        close(out[1]);
    if (ep[0] >= 0)
        close(ep[0]);
    if (ep[1] >= 0)
        close(ep[1]);
    if (nullfd >= 0)
        close(nullfd);
    errno = e;
    return -1;
}

/* Read what is there; 0 at EOF, 1 for more, with output past
 * GDB_OUTPUT_MAX dropped (g->why E2BIG). */
static int drain(struct gdb_run *g)
{
    char scratch[65536];
    ssize_t r;

    if (g->len == g->cap && g->cap < GDB_OUTPUT_MAX) {
        size_t cap = g->cap ? 2 * g->cap : 65536;
        char *p = realloc(g->out, cap + 1); /* + 1: a NUL after */
        if (p) {
            g->out = p;
            g->cap = cap;
        }
    }
    if (g->len < g->cap)
        r = read(g->fd, g->out + g->len, g->cap - g->len);
    else
        r = read(g->fd, scratch, sizeof(scratch));
    if (r < 0)
        return errno == EINTR || errno == EAGAIN ? 1 : 0;
    if (r == 0)
        return 0;
    if (g->len < g->cap)
        g->len += (size_t)r;
    else if (!g->why)
        g->why = E2BIG;
    return 1;
}

/* Collect gdb's output until it closes it; stop gdb at the deadline, on
 * cancel or when its output is too long.  Then reap it. */
static void collect(struct gdb_run *g)
{
    enum { RUNNING, TERMED, KILLED } phase = RUNNING;
    long until = 0;
    int status;

    for (;;) {
        struct pollfd pfd = {.fd = g->fd, .events = POLLIN};
        long wait = POLL_MS_MAX;

        if (phase == RUNNING) {
            long left = sampler_ms_left(g->opts);
            if (!g->why && g->opts->cancel && *g->opts->cancel)
                g->why = EINTR;
            if (!g->why && left == 0)
                g->why = ETIMEDOUT;
            if (g->why) {
                (void)kill(-g->pid, SIGTERM);
                phase = TERMED;
                until = now_ms() + GDB_GRACE_MS;
            } else if (left < wait) {
                wait = left;
            }
        } else if (now_ms() >= until) {
            if (phase == KILLED)
                break; /* someone else holds the pipe: give up on it */
            (void)kill(-g->pid, SIGKILL);
            phase = KILLED;
            until = now_ms() + GDB_GRACE_MS;
        }
        if (poll(&pfd, 1, (int)wait) > 0 && drain(g) == 0)
            break;
    }
    /* the pipe is closed: gdb has exited or is about to */
    until = now_ms() + GDB_GRACE_MS;
    while (waitpid(g->pid, &status, WNOHANG) == 0) {
        if (now_ms() >= until) {
            (void)kill(-g->pid, SIGKILL);
            (void)waitpid(g->pid, &status, 0);
            break;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    g->pid = -1;
}

static const char *find_mem(const char *h, size_t hlen, const char *needle)
{
    return memmem(h, hlen, needle, strlen(needle));
}

struct seg_ctx {
    struct sample *s;
};

static int on_thread(const struct btparse_thread *th, void *arg)
{
    struct sample *s = ((struct seg_ctx *)arg)->s;

    if (th->truncated && !s->partial) {
        s->partial = true;
        snprintf(s->warn.text, sizeof(s->warn.text),
                 "thread %lu: more than %d frames", th->lwp ? th->lwp : th->num,
                 BTPARSE_FRAMES_MAX);
    }
    if (stacktree_add(s->tree, th->frames, th->nframes, s->rank) < 0)
        return -1;
    s->threads++;
    return 0;
}

/* Why gdb got no stack out of a task, from its messages in [p, e). */
static void explain(struct sample *s, const char *p, const char *e)
{
    const char *line, *eol, *first = NULL, *first_end = NULL;
    char msg[200];
    size_t len;

    for (line = p; line < e; line = eol + 1) {
        if (!(eol = memchr(line, '\n', (size_t)(e - line))))
            eol = e;
        if (eol - line > 8 && memcmp(line, "ptrace: ", 8) == 0) {
            first = line + 8;
            first_end = eol;
            break;
        }
        if (!first && eol > line && *line != '@')
            first = line, first_end = eol;
    }
    if (!first) {
        s->errnum = EIO;
        snprintf(s->err.text, sizeof(s->err.text), "gdb found no stack");
        return;
    }
    len = (size_t)(first_end - first);
    while (len > 0 && (first[len - 1] == '.' || first[len - 1] == '\r' ||
                       first[len - 1] == ' '))
        len--;
    if (len > sizeof(msg) - 1)
        len = sizeof(msg) - 1;
    memcpy(msg, first, len);
    msg[len] = '\0';
    sampler_clean_name(msg, msg, false);
    if (strcmp(msg, "No such process") == 0) {
        s->errnum = ESRCH;
        snprintf(s->err.text, sizeof(s->err.text), "no such process");
    } else if (strcmp(msg, "Operation not permitted") == 0) {
        s->errnum = EPERM;
        snprintf(s->err.text, sizeof(s->err.text),
                 "cannot attach: Operation not permitted");
    } else {
        s->errnum = EIO;
        snprintf(s->err.text, sizeof(s->err.text), "gdb: %s", msg);
    }
}

/* Read task i's part of the output.  false if gdb never finished it. */
static bool parse_task(struct gdb_run *g, struct sample *s, size_t i)
{
    char begin[80], end[80];
    const char *b, *e;
    struct seg_ctx ctx = {.s = s};
    eddy_error_t err;
    int r;

    snprintf(begin, sizeof(begin), "@@eddy-stackd-%d begin %zu@@\n",
             (int)getpid(), i);
    snprintf(end, sizeof(end), "@@eddy-stackd-%d end %zu@@", (int)getpid(), i);
    if (!(b = find_mem(g->out, g->len, begin)))
        return false;
    b += strlen(begin);
    if (!(e = find_mem(b, g->len - (size_t)(b - g->out), end)))
        return false;
    if (!(s->tree = stacktree_create())) {
        s->errnum = ENOMEM;
        snprintf(s->err.text, sizeof(s->err.text), "out of memory");
        return true;
    }
    r = btparse(b, (size_t)(e - b), on_thread, &ctx, &err);
    if (r < 0) {
        s->errnum = errno == ENOMEM ? ENOMEM : EIO;
        snprintf(s->err.text, sizeof(s->err.text), "gdb output: %.200s",
                 err.text);
    } else if (r == 0) {
        explain(s, b, e);
    }
    if (s->errnum) {
        stacktree_destroy(s->tree);
        s->tree = NULL;
        s->threads = 0;
    }
    return true;
}

static void fail_all(struct sample *s, size_t n, const bool *skip, int errnum)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (skip[i])
            continue;
        s[i].errnum = errnum;
        snprintf(s[i].err.text, sizeof(s[i].err.text), "cannot run gdb: %s",
                 strerror(errnum));
    }
}

int sampler_gdb(struct sample *s, size_t n, const struct sampler_opts *opts)
{
    struct gdb_run g = {.opts = opts, .pid = -1, .fd = -1};
    bool *skip = NULL;
    char *was = NULL;
    size_t i, alive = 0;

    if ((!s && n > 0) || !opts) {
        errno = EINVAL;
        return -1;
    }
    if (n == 0)
        return 0;
    if (!(skip = calloc(n, sizeof(*skip))) || !(was = calloc(n, 1))) {
        for (i = 0; i < n; i++) {
            s[i].errnum = ENOMEM;
            snprintf(s[i].err.text, sizeof(s[i].err.text), "out of memory");
        }
        goto done;
    }
    /* a task already gone needs no gdb; note who was stopped before */
    for (i = 0; i < n; i++) {
        if (kill(s[i].pid, 0) < 0 && errno == ESRCH) {
            s[i].errnum = ESRCH;
            snprintf(s[i].err.text, sizeof(s[i].err.text), "no such process");
            skip[i] = true;
            continue;
        }
        was[i] = sampler_proc_state(s[i].pid);
        alive++;
    }
    if (alive == 0)
        goto done;
    if (build_argv(&g, s, n, skip) < 0 || build_envp(&g) < 0) {
        fail_all(s, n, skip, ENOMEM);
        goto done;
    }
    if (spawn(&g) < 0) {
        fail_all(s, n, skip, errno);
        goto done;
    }
    collect(&g);
    for (i = 0; i < n; i++) {
        if (skip[i] || parse_task(&g, &s[i], i))
            continue;
        s[i].errnum = g.why ? g.why : EIO;
        if (g.why == ETIMEDOUT)
            snprintf(s[i].err.text, sizeof(s[i].err.text), "timed out");
        else if (g.why == EINTR)
            snprintf(s[i].err.text, sizeof(s[i].err.text), "interrupted");
        else if (g.why == E2BIG)
            snprintf(s[i].err.text, sizeof(s[i].err.text),
                     "gdb output over %u MiB", GDB_OUTPUT_MAX >> 20);
        else
            snprintf(s[i].err.text, sizeof(s[i].err.text),
                     "gdb ended before sampling it");
        /* see the top of the file */
        if (was[i] != 'T' && was[i] != 't')
            (void)kill(s[i].pid, SIGCONT);
    }
done:
    if (g.fd >= 0)
        close(g.fd);
    for (i = 0; i < g.argc; i++)
        free(g.argv[i]);
    free(g.argv);
    free(g.envp);
    free(g.out);
    free(skip);
    free(was);
    return 0;
}
