/* sampler_unwind.c - stacks through libunwind's ptrace accessors (see
 * sampler.h).
 *
 * All tasks are seized and interrupted first, then one loop collects the
 * stops: a task is unwound and detached as soon as its last thread has
 * stopped, so one task that cannot stop (a thread in uninterruptible
 * sleep on a hung file system) delays nobody but itself, and no task is
 * held longer than the unwinding of the tasks that stopped before it.
 *
 * PTRACE_SEIZE rather than ATTACH: it sends no SIGSTOP, so nothing is left
 * pending to stop the task after we go, and a task in a group-stop
 * (SIGSTOP, ^Z) reports it and stays in it after the detach.
 *
 * Names come from elfsym.h (symbol sizes checked, detached debug files
 * read, each file once for all tasks), not from unw_get_proc_name(),
 * which names a static function of a stripped library after whatever
 * exported one precedes it.  As gdb does, the main thread's frames
 * outside main() (_start, __libc_start_main) are dropped, so that both
 * samplers give the same paths.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libunwind-ptrace.h>

#include "src/common/errprintf.h"
#include "src/tools/elfsym.h"
#include "src/tools/sampler.h"

/* Frames followed per thread before we call it runaway recursion; only
 * addresses are kept for these, names are looked up for the outermost
 * STACKTREE_DEPTH_MAX. */
#define UNWIND_STEPS_MAX 65536

/* Rounds of "list /proc/PID/task, seize the new threads" for a task that
 * keeps starting threads while we stop it. */
#define RELIST_MAX 100

/* /proc/PID/maps of a task with this many bytes is not one we can
 * afford to read (a normal one is a few KiB). */
#define MAPS_BYTES_MAX (64u << 20)

/* Poll for stops from this sleep up to the next. */
#define POLL_NS_MIN 20000L
#define POLL_NS_MAX 1000000L

/* Room for one "?? (LIBRARY)" or cleaned-up name. */
#define NAME_SLOT (STACKTREE_NAME_MAX + 1)

struct thr {
    pid_t tid;
    bool stopped; /* in a ptrace-stop we waited for */
    bool gone;    /* exited */
    int sig;      /* signal to deliver on detach (a signal-delivery-stop) */
};

struct task {
    struct sample *s;
    struct thr *thr;
    size_t nthr, cap;
    unsigned relists;
    bool done;
    int fail; /* errnum decided; the task is only detached */
};

struct map {
    uint64_t start, end, off, dev, ino;
    const char *path; /* into maps text; "" for anonymous memory */
};

struct frame {
    uint64_t ip;
    bool sig; /* a signal trampoline */
};

struct uw {
    const struct sampler_opts *opts;
    struct task *tasks;
    size_t ntasks;
    elfsym_t *syms;
    struct frame *frames; /* UNWIND_STEPS_MAX, reused per thread */
    const char **path;    /* STACKTREE_DEPTH_MAX, reused per thread */
    char *slots;          /* STACKTREE_DEPTH_MAX * NAME_SLOT, for names
                             made up for one thread */
    /* the task being unwound */
    char *maps_text;
    struct map *maps;
    size_t nmaps;
};

static int task_fail(struct task *t, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Decide that 't' fails with 'errnum' (the first reason wins); its
 * threads are detached as they stop. */
static int task_fail(struct task *t, int errnum, const char *fmt, ...)
{
    va_list ap;

    if (t->fail)
        return -1;
    t->fail = errnum;
    va_start(ap, fmt);
    vsnprintf(t->s->err.text, sizeof(t->s->err.text), fmt, ap);
    va_end(ap);
    return -1;
}

static void task_warn(struct task *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Note that 't' is partial; the first warning is kept. */
static void task_warn(struct task *t, const char *fmt, ...)
{
    va_list ap;

    if (t->s->partial)
        return;
    t->s->partial = true;
    va_start(ap, fmt);
    vsnprintf(t->s->warn.text, sizeof(t->s->warn.text), fmt, ap);
    va_end(ap);
}

static struct thr *thr_find(struct task *t, pid_t tid)
{
    size_t i;

    for (i = 0; i < t->nthr; i++)
        if (t->thr[i].tid == tid)
            return &t->thr[i];
    return NULL;
}

/* A thread that is a zombie (it ended, its task lives on) cannot be
 * seized and has no stack: skip it. */
static bool thread_is_dead(pid_t pid, pid_t tid)
{
    char path[80], buf[512], *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return true;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return true;
    buf[n] = '\0';
    return (p = strrchr(buf, ')')) && (p[2] == 'Z' || p[2] == 'X');
}

/* Seize and interrupt the threads of 't' not seized yet.  Returns how
 * many were, or -1 with the task failed. */
static int seize_new(struct task *t)
{
    char path[64];
    struct dirent *d;
    DIR *dir;
    int added = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)t->s->pid);
    if (!(dir = opendir(path))) {
        if (errno == ENOENT)
            return task_fail(t, ESRCH, "no such process");
        return task_fail(t, errno, "%s: %s", path, strerror(errno));
    }
    while ((d = readdir(dir))) {
        char *end;
        long tid = strtol(d->d_name, &end, 10);
        struct thr *th;

        if (d->d_name[0] < '0' || d->d_name[0] > '9' || *end || tid <= 0 ||
            thr_find(t, (pid_t)tid))
            continue;
        if (ptrace(PTRACE_SEIZE, (pid_t)tid, NULL, NULL) < 0) {
            if (errno == ESRCH)
                continue; /* it just ended */
            if (errno == EPERM && thread_is_dead(t->s->pid, (pid_t)tid))
                continue;
            task_fail(t, errno, "cannot attach: %s", strerror(errno));
            break;
        }
        if (t->nthr == t->cap) {
            size_t cap = t->cap ? 2 * t->cap : 8;
            struct thr *p = realloc(t->thr, cap * sizeof(*p));
            if (!p) {
                /* not ours to keep: let it go before it stops */
                (void)ptrace(PTRACE_DETACH, (pid_t)tid, NULL, NULL);
                task_fail(t, ENOMEM, "out of memory");
                break;
            }
            t->thr = p;
            t->cap = cap;
        }
        th = &t->thr[t->nthr++];
        memset(th, 0, sizeof(*th));
        th->tid = (pid_t)tid;
        if (ptrace(PTRACE_INTERRUPT, (pid_t)tid, NULL, NULL) < 0)
            th->gone = true; /* ESRCH: it ended since the seize */
        added++;
    }
    closedir(dir);
    if (t->fail)
        return -1;
    return added;
}

/* Read /proc/PID/maps of the task about to be unwound into u->maps
 * (sorted by address, as the kernel lists them).  Without it, frames
 * are all "??". */
static void maps_load(struct uw *u, pid_t pid)
{
    char path[64], *line, *next;
    size_t len = 0, cap = 16384, n = 0;
    ssize_t r;
    int fd;

    free(u->maps_text);
    free(u->maps);
    u->maps_text = NULL;
    u->maps = NULL;
    u->nmaps = 0;
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return;
    if (!(u->maps_text = malloc(cap)))
        goto fail;
    for (;;) {
        if (len + 1 == cap) {
            char *p;
            if (cap >= MAPS_BYTES_MAX || !(p = realloc(u->maps_text, 2 * cap)))
                goto fail;
            u->maps_text = p;
            cap *= 2;
        }
        if ((r = read(fd, u->maps_text + len, cap - 1 - len)) < 0) {
            if (errno == EINTR)
                continue;
            goto fail;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    fd = -1;
    u->maps_text[len] = '\0';
    for (line = u->maps_text; *line; line = next + 1, n++)
        if (!(next = strchr(line, '\n')))
            break;
    if (!(u->maps = calloc(n + 1, sizeof(*u->maps))))
        goto fail;
    for (line = u->maps_text; line && *line; line = next) {
        unsigned long long start, end, off, ino;
        unsigned maj, min;
        int pos = 0;
        struct map *m;

        if ((next = strchr(line, '\n')))
            *next++ = '\0';
        if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu %n", &start, &end, &off,
                   &maj, &min, &ino, &pos) < 6 ||
            pos == 0)
            continue;
        m = &u->maps[u->nmaps++];
        m->start = start;
        m->end = end;
        m->off = off;
        m->dev = (uint64_t)maj << 32 | min;
        m->ino = ino;
        m->path = line + pos;
    }
    return;
fail:
    if (fd >= 0)
        close(fd);
    free(u->maps_text);
    u->maps_text = NULL;
    u->nmaps = 0;
}

static const struct map *maps_find(const struct uw *u, uint64_t ip)
{
    size_t lo = 0, hi = u->nmaps;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ip < u->maps[mid].start)
            hi = mid;
        else if (ip >= u->maps[mid].end)
            lo = mid + 1;
        else
            return &u->maps[mid];
    }
    return NULL;
}

/* The name of the function holding 'ip' (already moved back into the
 * call instruction for a return address), frame 'slot' of the thread
 * being unwound.  Borrowed until the next thread. */
static const char *frame_name(struct uw *u, pid_t pid, uint64_t ip, size_t slot)
{
    static char unknown[] = "??";
    const struct map *m = maps_find(u, ip);
    char *buf = u->slots + slot * NAME_SLOT;
    const char *name = NULL, *base, *p;
    char alt[96];

    /* anonymous memory (JIT code, a smashed stack): no file, no name */
    if (!m || m->path[0] == '\0')
        return unknown;
    if (m->path[0] == '/') {
        snprintf(alt, sizeof(alt), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64,
                 (int)pid, m->start, m->end);
        name = elfsym_lookup(u->syms, m->path, alt, m->dev, m->ino,
                             ip - m->start + m->off);
    }
    if (!name) {
        base = strrchr(m->path, '/');
        base = base ? base + 1 : m->path;
        snprintf(buf, NAME_SLOT, "?? (%.*s)", NAME_SLOT - 8, base);
        sampler_clean_name(buf, buf, false);
        return buf;
    }
    /* symbol names are printable ASCII but for hostile files */
    for (p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
            break;
    if (*p || p - name > STACKTREE_NAME_MAX) {
        char tmp[NAME_SLOT];
        snprintf(tmp, sizeof(tmp), "%s", name);
        sampler_clean_name(buf, tmp, p - name > STACKTREE_NAME_MAX);
        return buf;
    }
    return name;
}

/* Unwind thread 'th' of 't' into t's tree.  -1 if it could not be
 * unwound at all (the task is then partial, or fails if no thread was). */
static int unwind_thread(struct uw *u,
                         unw_addr_space_t as,
                         struct task *t,
                         struct thr *th)
{
    static char sigframe[] = "<signal handler called>";
    unw_cursor_t c;
    size_t n = 0, keep, i, first = 0;
    void *ui;
    int r;

    if (!(ui = _UPT_create(th->tid))) {
        task_warn(t, "thread %d: out of memory", (int)th->tid);
        return -1;
    }
    if ((r = unw_init_remote(&c, as, ui)) < 0) {
        task_warn(t, "thread %d: cannot unwind: %s", (int)th->tid,
                  unw_strerror(r));
        _UPT_destroy(ui);
        return -1;
    }
    do {
        unw_word_t ip;

        if (n == UNWIND_STEPS_MAX) {
            task_warn(t, "thread %d: more than %d frames", (int)th->tid,
                      UNWIND_STEPS_MAX);
            r = 0;
            break;
        }
        if ((r = unw_get_reg(&c, UNW_REG_IP, &ip)) < 0)
            break;
        /* the end of some stacks: a zero return address */
        if (ip == 0 && n > 0) {
            r = 0;
            break;
        }
        u->frames[n].ip = ip;
        u->frames[n].sig = unw_is_signal_frame(&c) > 0;
        n++;
    } while ((r = unw_step(&c)) > 0);
    if (r < 0)
        task_warn(t, "thread %d: unwinding stopped after %zu frames: %s",
                  (int)th->tid, n, unw_strerror(r));
    if (n == 0) {
        _UPT_destroy(ui);
        return -1;
    }
    /* outermost first; past STACKTREE_DEPTH_MAX the innermost are dropped
     * (runaway recursion), as btparse.h does */
    keep = n > STACKTREE_DEPTH_MAX ? STACKTREE_DEPTH_MAX : n;
    for (i = 0; i < keep; i++) {
        size_t k = n - 1 - i; /* frame index, 0 the innermost */
        uint64_t ip = u->frames[k].ip;

        if (u->frames[k].sig) {
            u->path[i] = sigframe;
            continue;
        }
        /* a return address may be past the end of its function (a call
         * to a noreturn function): look up the call itself, unless the
         * frame is the innermost or was interrupted by a signal */
        if (k > 0 && !u->frames[k - 1].sig && ip > 0)
            ip--;
        u->path[i] = frame_name(u, t->s->pid, ip, i);
    }
    _UPT_destroy(ui);
    if (r < 0) {
        /* the outermost frames are unknown: say so where they would be,
         * so an incomplete path never passes for a whole one */
        static char cut[] = "...";

        if (keep == STACKTREE_DEPTH_MAX)
            keep--; /* the innermost goes, as for runaway recursion */
        memmove(u->path + 1, u->path, keep * sizeof(u->path[0]));
        u->path[0] = cut;
        keep++;
    }
    /* the main thread starts at main(), as gdb shows it */
    if (th->tid == t->s->pid) {
        for (i = 0; i < keep && strcmp(u->path[i], "main") != 0; i++)
            ;
        if (i < keep) {
            first = i;
            keep -= i;
        }
    }
    if (stacktree_add(t->s->tree, u->path + first, keep, t->s->rank) < 0) {
        task_warn(t, "thread %d: %s", (int)th->tid, strerror(errno));
        return -1;
    }
    return 0;
}

/* Unwind every stopped thread of 't' (all of them are). */
static void unwind_task(struct uw *u, struct task *t)
{
    unw_addr_space_t as;
    unsigned ok = 0;
    size_t i;

    if (!(t->s->tree = stacktree_create())) {
        task_fail(t, ENOMEM, "out of memory");
        return;
    }
    if (!(as = unw_create_addr_space(&_UPT_accessors, 0))) {
        task_fail(t, ENOMEM, "out of memory");
        return;
    }
    unw_set_caching_policy(as, UNW_CACHE_GLOBAL);
    maps_load(u, t->s->pid);
    for (i = 0; i < t->nthr; i++) {
        if (t->thr[i].stopped && unwind_thread(u, as, t, &t->thr[i]) == 0)
            ok++;
    }
    unw_destroy_addr_space(as);
    t->s->threads = ok;
    if (ok == 0) {
        /* every thread failed: its reason is the task's */
        task_fail(t, EIO, "%s",
                  t->s->partial ? t->s->warn.text : "cannot unwind");
    }
}

/* Let every stopped thread of 't' go, with the signal it was stopped
 * for, if any. */
static void detach_task(struct task *t)
{
    size_t i;

    for (i = 0; i < t->nthr; i++) {
        struct thr *th = &t->thr[i];
        if (th->stopped && !th->gone) {
            (void)ptrace(PTRACE_DETACH, th->tid, NULL, (void *)(long)th->sig);
            th->stopped = false;
            th->gone = true; /* not ours any more */
        }
    }
}

/* Called after each event of 't': once all its threads have stopped,
 * look for threads started meanwhile, then unwind and detach. */
static void task_progress(struct uw *u, struct task *t)
{
    size_t i, live;

    if (t->done)
        return;
    for (;;) {
        live = 0;
        for (i = 0; i < t->nthr; i++) {
            if (!t->thr[i].stopped && !t->thr[i].gone)
                return; /* still waiting for one */
            if (!t->thr[i].gone)
                live++;
        }
        if (!t->fail && live == 0)
            task_fail(t, ESRCH, "no such process (it exited while sampled)");
        if (t->fail)
            break;
        /* all stopped, so none can start a thread now: one more look
         * finds those started before the stop */
        int r = seize_new(t);
        if (r == 0)
            break;
        if (r > 0 && ++t->relists > RELIST_MAX)
            task_fail(t, EAGAIN, "threads keep appearing");
    }
    if (!t->fail)
        unwind_task(u, t);
    detach_task(t);
    if (t->fail) {
        stacktree_destroy(t->s->tree);
        t->s->tree = NULL;
        t->s->errnum = t->fail;
    }
    t->done = true;
}

/* Account for a wait status of thread 'tid'. */
static void on_wait(struct uw *u, pid_t tid, int status)
{
    size_t i;

    for (i = 0; i < u->ntasks; i++) {
        struct task *t = &u->tasks[i];
        struct thr *th;

        if (t->done || !(th = thr_find(t, tid)))
            continue;
        if (WIFSTOPPED(status)) {
            th->stopped = true;
            /* event 0: a signal on its way to the thread, which it must
             * still get; PTRACE_EVENT_STOP: our interrupt, or a group-stop
             * that lasts after the detach by itself */
            th->sig = (status >> 16) == 0 ? WSTOPSIG(status) : 0;
        } else if (WIFEXITED(status) || WIFSIGNALED(status)) {
            th->gone = true;
            th->stopped = false;
        }
        task_progress(u, t);
        return;
    }
}

/* Give up on the tasks not done, with 'errnum'. */
static void give_up(struct uw *u, int errnum)
{
    size_t i, j;

    for (i = 0; i < u->ntasks; i++) {
        struct task *t = &u->tasks[i];
        unsigned waiting = 0, total = 0;

        if (t->done)
            continue;
        for (j = 0; j < t->nthr; j++) {
            if (!t->thr[j].gone)
                total++;
            if (!t->thr[j].stopped && !t->thr[j].gone)
                waiting++;
        }
        if (errnum == ETIMEDOUT)
            task_fail(t, errnum, "timed out: %u of %u threads did not stop",
                      waiting, total);
        else if (errnum == EINTR)
            task_fail(t, errnum, "interrupted");
        else
            task_fail(t, errnum, "lost track of its threads");
        detach_task(t); /* the others go when this process exits */
        t->s->errnum = t->fail;
        t->done = true;
    }
}

static bool all_done(const struct uw *u)
{
    size_t i;

    for (i = 0; i < u->ntasks; i++)
        if (!u->tasks[i].done)
            return false;
    return true;
}

/* Collect stops until every task is done, the deadline or a cancel. */
static void wait_loop(struct uw *u)
{
    long ns = POLL_NS_MIN;

    while (!all_done(u)) {
        int status;
        pid_t pid;

        if (u->opts->cancel && *u->opts->cancel) {
            give_up(u, EINTR);
            return;
        }
        pid = waitpid(-1, &status, __WALL | WNOHANG);
        if (pid > 0) {
            on_wait(u, pid, status);
            ns = POLL_NS_MIN;
            continue;
        }
        if (pid < 0 && errno == EINTR)
            continue;
        if (pid < 0) {
            give_up(u, EIO); /* ECHILD: nothing left to wait for */
            return;
        }
        if (sampler_ms_left(u->opts) == 0) {
            give_up(u, ETIMEDOUT);
            return;
        }
        nanosleep(&(struct timespec){.tv_nsec = ns}, NULL);
        if ((ns *= 2) > POLL_NS_MAX)
            ns = POLL_NS_MAX;
    }
}

int sampler_unwind(struct sample *s, size_t n, const struct sampler_opts *opts)
{
    struct uw u = {.opts = opts};
    size_t i;

    if ((!s && n > 0) || !opts) {
        errno = EINVAL;
        return -1;
    }
    if (n == 0)
        return 0;
    u.ntasks = n;
    u.tasks = calloc(n, sizeof(*u.tasks));
    u.frames = malloc(UNWIND_STEPS_MAX * sizeof(*u.frames));
    u.path = malloc(STACKTREE_DEPTH_MAX * sizeof(*u.path));
    u.slots = malloc((size_t)STACKTREE_DEPTH_MAX * NAME_SLOT);
    u.syms = elfsym_create();
    if (!u.tasks || !u.frames || !u.path || !u.slots || !u.syms) {
        for (i = 0; i < n; i++) {
            s[i].errnum = ENOMEM;
            snprintf(s[i].err.text, sizeof(s[i].err.text), "out of memory");
        }
        goto done;
    }
    /* seize and interrupt everything, so all tasks stop together */
    for (i = 0; i < n; i++) {
        struct task *t = &u.tasks[i];

        t->s = &s[i];
        if (seize_new(t) == 0)
            task_fail(t, ESRCH, "no such process");
        if (t->fail && t->nthr == 0) {
            t->s->errnum = t->fail;
            t->done = true;
        }
    }
    /* a task whose threads all ended at once sends no stop */
    for (i = 0; i < n; i++)
        task_progress(&u, &u.tasks[i]);
    wait_loop(&u);
done:
    if (u.tasks) {
        for (i = 0; i < n; i++)
            free(u.tasks[i].thr);
    }
    elfsym_destroy(u.syms);
    free(u.slots);
    free(u.maps_text);
    free(u.maps);
    free(u.frames);
    free(u.path);
    free(u.tasks);
    return 0;
}
