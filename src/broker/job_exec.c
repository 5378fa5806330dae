/* job_exec.c - the "job-exec" service of every broker: run one eddy-shell
 * per job on this node and relay between it and rank 0.
 *
 * Protocol (docs/jobs-protocol.md):
 *   job-exec.start       from rank 0, streaming, body JOBSLICE: spawn the
 *                        shell; responses relay its events ("started",
 *                        "exit", "exception"); EOS once it has exited
 *   job-exec.kill        from rank 0: {"id","signum","ranks"?}
 *   job-exec.stdin       from rank 0: {"id","rank","eof"} + payload
 *   job-exec.release     from rank 0: {"id"}: release a job held at its
 *                        startup barrier (relayed to the shell)
 *   job-exec.go          from rank 0: {"id"}: every node of the job has
 *                        its tmpdir: the shell may fork its tasks
 *   job-exec.shell-hello from the shell, streaming: first response is the
 *                        JOBSLICE, later ones are commands ("kill",
 *                        "stdin", "release")
 *   job-exec.shell-event from the shell: {"id","type",...}, relayed
 *
 * Job tmpdirs: the start handler makes the job's tmpdir on this node
 * (tmpdir_create(), before anything is spawned) and reports it to rank 0
 * as the first response of the start stream, {"type":"tmpdir","path"}.
 * The shell is spawned at once, but its hello is answered (with the
 * JOBSLICE, which lets it fork its tasks) only once rank 0 said
 * job-exec.go, which it does when every node of the job reported its
 * tmpdir: a node that cannot make one fails the job before any task of
 * it exists anywhere, and the shell's startup overlaps that round trip.
 * A job on one node goes at once (there is no other node to wait for).
 * The tmpdir is removed (tmpdir_release()) once the shell has been
 * reaped, before the start stream ends, and at broker exit for jobs still
 * present.  Removal never follows a symlink out of it (rmtree.h).
 *
 * A job is "live" from its start request until the end of its start
 * stream, which is sent only once the shell process has been reaped (so
 * rank 0 never sees the end of a job whose shell still runs).  It is freed
 * once its libuv handles (process, timer) are closed.  The shell runs in
 * its own session (UV_PROCESS_DETACHED) and puts each task in a process
 * group of its own, so the broker can signal both without the shell.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>

#include "src/broker/job.h"
#include "src/broker/procenv.h"
#include "src/broker/service.h"
#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/jobslice.h"
#include "src/common/log.h"
#include "src/common/rmtree.h"

/* A shell that has not said hello by then will not: its start failed in a
 * way it could not report (e.g. it cannot reach the broker's socket). */
#define JOB_EXEC_HELLO_TIMEOUT_MS 30000

/* At shutdown the shells get SIGTERM (they pass it to their tasks), then
 * SIGKILL after this long: well within the broker's 3 s shutdown hold. */
#define JOB_EXEC_KILL_GRACE_MS 1500

/* Stdin requests held for a shell that has not said hello yet; rank 0
 * waits for each answer, so this is only a safety bound. */
#define JOB_EXEC_STDIN_PENDING_MAX 256

/* Characters of the run directory's name kept in a tmpdir's name. */
#define JOB_EXEC_TMPDIR_INSTANCE_MAX 32

struct jexec_ctx;

/* A stdin request waiting for the shell's hello. */
struct pending {
    broker_req_t *req;
    struct pending *next;
};

struct job {
    struct jexec_ctx *ctx; /* NULL once the service is destroyed */
    struct job *prev, *next;
    uint64_t id;
    json_t *slice;            /* the start request body, given to the shell */
    struct jobslice *js;      /* decoded */
    broker_req_t *start;      /* until the end of the start stream */
    broker_req_t *hello;      /* the shell's stream, while it is connected */
    broker_req_t *hello_wait; /* its hello, until rank 0 says go */
    uint64_t hello_origin;
    uv_process_t proc;
    uv_timer_t timer; /* hello timeout, then the SIGKILL grace */
    int handles;      /* initialized and not yet closed */
    bool spawned;
    bool hello_seen;
    bool hello_timed_out;
    bool hello_held;       /* it said hello before rank 0 said go */
    bool exited;           /* shell reaped */
    bool finished;         /* start stream ended: no longer live */
    bool go;               /* job-exec.go came: the shell may fork its tasks */
    bool killed_before_go; /* nothing was forked: nothing to report */
    char *tmpdir;          /* the job's tmpdir on this node, until released */
    int64_t exit_status;
    int term_signal;
    idset_t *reported; /* task ranks that sent "exit" or "exception" */
    json_t *started;   /* "tasks" of "started": [[rank, pid, appnum, exe]..] */
    json_t *exes;      /* "executables" of "started": the exe paths */
    json_t *kills;     /* kill and release commands waiting for the hello */
    struct pending *stdin_q, **stdin_tail;
    unsigned stdin_n;
};

struct jexec_ctx {
    broker_t *b;
    bool shutting_down;
    bool holding;
    struct job *jobs; /* every job not yet freed */
    char shell_path[PATH_MAX];
};

/* --- job lifetime ------------------------------------------------------- */

static void pending_fail(struct job *j, int errnum, const char *why)
{
    struct pending *p;

    while ((p = j->stdin_q)) {
        j->stdin_q = p->next;
        if (j->ctx)
            broker_respond_error(p->req, errnum, "job %ju: rank %u: %s",
                                 (uintmax_t)j->id, broker_rank(j->ctx->b), why);
        broker_req_decref(p->req);
        free(p);
    }
    j->stdin_tail = &j->stdin_q;
    j->stdin_n = 0;
}

static void job_free(struct job *j)
{
    if (j->ctx) {
        if (j->prev)
            j->prev->next = j->next;
        else
            j->ctx->jobs = j->next;
        if (j->next)
            j->next->prev = j->prev;
    }
    pending_fail(j, EPIPE, "job ended");
    broker_req_decref(j->start);
    broker_req_decref(j->hello);
    broker_req_decref(j->hello_wait);
    free(j->tmpdir);
    json_decref(j->slice);
    json_decref(j->started);
    json_decref(j->exes);
    json_decref(j->kills);
    jobslice_destroy(j->js);
    idset_destroy(j->reported);
    free(j);
}

static void handle_closed(uv_handle_t *h)
{
    struct job *j = h->data;

    if (--j->handles == 0)
        job_free(j);
}

static void job_close(struct job *j)
{
    uv_handle_t *hs[] = {(uv_handle_t *)&j->proc, (uv_handle_t *)&j->timer};

    for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); i++)
        if (hs[i]->data == j && !uv_is_closing(hs[i]))
            uv_close(hs[i], handle_closed);
}

static unsigned live_count(const struct jexec_ctx *ctx)
{
    unsigned n = 0;

    for (const struct job *j = ctx->jobs; j; j = j->next)
        if (!j->finished)
            n++;
    return n;
}

static void shutdown_release_check(struct jexec_ctx *ctx)
{
    if (ctx->holding && live_count(ctx) == 0) {
        ctx->holding = false;
        broker_log(ctx->b, LOG_LEVEL_DEBUG,
                   "job-exec: every shell reaped after shutdown");
        broker_shutdown_release(ctx->b);
    }
}

static struct job *job_lookup(struct jexec_ctx *ctx, uint64_t id)
{
    for (struct job *j = ctx->jobs; j; j = j->next)
        if (j->id == id && !j->finished)
            return j;
    return NULL;
}

/* --- the job tmpdir ------------------------------------------------------ */

/* The run directory's name, for tmpdir names: without a leading "eddy-"
 * (eddy start's own run directories are eddy-XXXXXX), letters, digits
 * and ._- only (others become '_'), at most JOB_EXEC_TMPDIR_INSTANCE_MAX
 * characters. */
static void instance_name(const char *rundir, char *buf, size_t size)
{
    const char *end = rundir + strlen(rundir), *start;
    size_t n = 0;

    while (end > rundir && end[-1] == '/')
        end--;
    for (start = end; start > rundir && start[-1] != '/'; start--)
        ;
    if (end - start > 5 && !strncmp(start, "eddy-", 5))
        start += 5;
    for (; start < end && n + 1 < size; start++) {
        char c = *start;
        buf[n++] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                           (c >= '0' && c <= '9') || c == '.' || c == '_' ||
                           c == '-'
                       ? c
                       : '_';
    }
    if (n == 0 && size > 1)
        buf[n++] = '_';
    buf[n] = '\0';
}

/* Make the job's tmpdir on this node, owned by us (the instance owner,
 * who is the user), mode 0700:
 *   BASE/eddy-INSTANCE-rRANK-jID-XXXXXX
 * INSTANCE (the run directory's name) and RANK single out this broker
 * among all the brokers of all instances on the machine, ID the job, and
 * mkdtemp()'s random suffix keeps the name unused even by what a killed
 * broker of an instance with a reused run directory left behind.  -1
 * with errno and 'err' naming the base. */
static int tmpdir_create(struct job *j, eddy_error_t *err)
{
    broker_t *b = j->ctx->b;
    const char *base = broker_tmpdir_base(b);
    size_t blen = strlen(base);
    char inst[JOB_EXEC_TMPDIR_INSTANCE_MAX + 1];
    char *path = NULL;
    int fd, errnum;

    while (blen > 1 && base[blen - 1] == '/')
        blen--;
    instance_name(broker_rundir(b), inst, sizeof(inst));
    if (asprintf(&path, "%.*s/eddy-%s-r%u-j%ju-XXXXXX", (int)blen, base, inst,
                 broker_rank(b), (uintmax_t)j->id) < 0) {
        errno = ENOMEM;
        return errprintf(err, "cannot create a job tmpdir: out of memory");
    }
    if (!mkdtemp(path))
        goto error;
    /* exactly 0700, whatever our umask */
    if ((fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        goto error_rmdir;
    if (fchmod(fd, 0700) < 0) {
        errnum = errno;
        close(fd);
        errno = errnum;
        goto error_rmdir;
    }
    close(fd);
    j->tmpdir = path;
    return 0;
error_rmdir:
    errnum = errno;
    (void)rmdir(path);
    errno = errnum;
error:
    errnum = errno;
    free(path);
    errno = errnum;
    return errprintf(err, "cannot create a job tmpdir in %s: %s", base,
                     strerror(errnum));
}

/* The job's tasks are gone from this node: its tool daemons are told,
 * and the tmpdir is removed with all it holds (never following a symlink
 * out of it), now if no daemon of the job runs here, else by the tool
 * service once the last one has exited. */
static void tmpdir_release(struct job *j, broker_t *b)
{
    eddy_error_t err = {{0}};

    if (tool_job_end(broker_service_ctx(b, "tool"), j->id, j->tmpdir)) {
        j->tmpdir = NULL; /* the tool service's now */
        return;
    }
    if (!j->tmpdir)
        return;
    if (rmtree(j->tmpdir, &err) < 0 && errno != ENOENT)
        broker_log(b, LOG_LEVEL_ERR,
                   "job-exec: job %ju: cannot remove its tmpdir: %s",
                   (uintmax_t)j->id, err.text);
    else
        broker_log(b, LOG_LEVEL_DEBUG, "job-exec: job %ju: removed %s",
                   (uintmax_t)j->id, j->tmpdir);
    free(j->tmpdir);
    j->tmpdir = NULL;
}

/* qsort() order of (rank, pid) pairs: by rank. */
static int pair_cmp(const void *a, const void *b)
{
    json_int_t x = *(const json_int_t *)a, y = *(const json_int_t *)b;

    return x < y ? -1 : x > y;
}

const char *job_exec_tmpdir(struct jexec_ctx *ctx, uint64_t id)
{
    struct job *j = ctx ? job_lookup(ctx, id) : NULL;

    if (!j || j->exited || !j->tmpdir) {
        errno = ESRCH;
        return NULL;
    }
    return j->tmpdir;
}

char *job_exec_tasklist(struct jexec_ctx *ctx, uint64_t id)
{
    struct job *j = ctx ? job_lookup(ctx, id) : NULL;
    size_t n, i, len = 0, size;
    json_int_t *pairs = NULL;
    char *buf = NULL;

    if (!j || j->exited) {
        errno = ESRCH;
        return NULL;
    }
    if (!j->started || (n = json_array_size(j->started)) == 0) {
        errno = EAGAIN;
        return NULL;
    }
    /* "started" lists tasks as forked, not by rank */
    if (!(pairs = calloc(n, 2 * sizeof(*pairs))))
        goto nomem;
    for (i = 0; i < n; i++) {
        json_t *t = json_array_get(j->started, i);
        pairs[2 * i] = json_integer_value(json_array_get(t, 0));
        pairs[2 * i + 1] = json_integer_value(json_array_get(t, 1));
    }
    qsort(pairs, n, 2 * sizeof(*pairs), pair_cmp);
    size = n * 24 + 1; /* two integers of at most 10 digits, ':' and ',' */
    if (!(buf = malloc(size)))
        goto nomem;
    buf[0] = '\0';
    for (i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%lld:%lld",
                                i ? "," : "", (long long)pairs[2 * i],
                                (long long)pairs[2 * i + 1]);
    free(pairs);
    return buf;
nomem:
    free(pairs);
    errno = ENOMEM;
    return NULL;
}

/* --- the start stream ---------------------------------------------------- */

/* Send one response on the start stream (body stolen); failures can only
 * be logged: the stream belongs to rank 0. */
static void start_respond(struct job *j, json_t *o, int flags)
{
    if (!o || broker_respond(j->start, o, NULL, 0, flags) < 0)
        broker_log(j->ctx->b, LOG_LEVEL_ERR,
                   "job-exec: job %ju: cannot respond to rank 0: %s",
                   (uintmax_t)j->id, strerror(errno));
}

/* An exception for the task ranks that have not reported yet, naming the
 * first one in "rank" (all of them in "ranks") and this broker in the
 * note. */
static void start_exception(struct job *j, int errnum, const char *note)
{
    uint32_t first = IDSET_INVALID;
    idset_t *ranks = idset_create();
    char *enc = NULL;
    json_t *o;

    for (uint32_t r = idset_first(j->js->tasks); r != IDSET_INVALID;
         r = idset_next(j->js->tasks, r)) {
        if (idset_test(j->reported, r))
            continue;
        if (first == IDSET_INVALID)
            first = r;
        if (ranks)
            idset_set(ranks, r);
    }
    if (first == IDSET_INVALID)
        first = idset_first(j->js->tasks);
    if (ranks)
        enc = idset_encode(ranks);
    o = json_pack("{s:s s:I s:i s:s s:s}", "type", "exception", "rank",
                  (json_int_t)first, "errnum", errnum, "note", note, "ranks",
                  enc ? enc : "");
    start_respond(j, o, 0);
    free(enc);
    idset_destroy(ranks);
}

/* The shell has been reaped: say what went wrong, if anything, and end
 * the start stream. */
static void job_finish(struct job *j)
{
    struct jexec_ctx *ctx = j->ctx;
    char note[256];
    bool all_reported = true;

    if (j->finished || !ctx)
        return;
    j->finished = true;
    for (uint32_t r = idset_first(j->js->tasks); r != IDSET_INVALID;
         r = idset_next(j->js->tasks, r))
        if (!idset_test(j->reported, r))
            all_reported = false;
    if (j->killed_before_go) {
        /* killed before it forked anything (the job failed or was
         * cancelled while it started): no task to report */
    } else if (j->hello_timed_out) {
        if (j->hello_held)
            snprintf(note, sizeof(note),
                     "job %ju: rank %u (%s): not told to start the tasks "
                     "within %d s",
                     (uintmax_t)j->id, broker_rank(ctx->b),
                     broker_hostname(ctx->b), JOB_EXEC_HELLO_TIMEOUT_MS / 1000);
        else
            snprintf(note, sizeof(note),
                     "job %ju: rank %u (%s): eddy-shell did not say hello "
                     "within %d s",
                     (uintmax_t)j->id, broker_rank(ctx->b),
                     broker_hostname(ctx->b), JOB_EXEC_HELLO_TIMEOUT_MS / 1000);
        start_exception(j, ETIMEDOUT, note);
    } else if (j->term_signal || j->exit_status != 0 || !all_reported) {
        if (j->term_signal)
            snprintf(note, sizeof(note),
                     "job %ju: rank %u (%s): eddy-shell killed by signal %d",
                     (uintmax_t)j->id, broker_rank(ctx->b),
                     broker_hostname(ctx->b), j->term_signal);
        else if (j->exit_status != 0)
            snprintf(note, sizeof(note),
                     "job %ju: rank %u (%s): eddy-shell exited with status %d",
                     (uintmax_t)j->id, broker_rank(ctx->b),
                     broker_hostname(ctx->b), (int)j->exit_status);
        else
            snprintf(note, sizeof(note),
                     "job %ju: rank %u (%s): eddy-shell exited before"
                     " reporting every task",
                     (uintmax_t)j->id, broker_rank(ctx->b),
                     broker_hostname(ctx->b));
        start_exception(j, j->term_signal ? EINTR : EIO, note);
        broker_log(ctx->b, LOG_LEVEL_WARNING, "job-exec: %s", note);
    }
    /* the last task is gone with the shell: so goes the tmpdir, before
     * rank 0 hears of the end */
    tmpdir_release(j, ctx->b);
    if (broker_respond(j->start, NULL, NULL, 0, MSG_FLAG_EOS) < 0)
        broker_log(ctx->b, LOG_LEVEL_ERR,
                   "job-exec: job %ju: cannot end start stream: %s",
                   (uintmax_t)j->id, strerror(errno));
    broker_req_decref(j->start);
    j->start = NULL;
    if (j->hello) {
        /* the shell is gone: end its stream (a no-op if disconnected) */
        (void)broker_respond(j->hello, NULL, NULL, 0, MSG_FLAG_EOS);
        broker_req_decref(j->hello);
        j->hello = NULL;
    }
    broker_req_decref(j->hello_wait);
    j->hello_wait = NULL;
    pending_fail(j, EPIPE, "eddy-shell exited");
    job_close(j);
    shutdown_release_check(ctx);
}

/* --- signals ------------------------------------------------------------ */

/* Signal every task process group the shell reported as started. */
static void kill_task_groups(struct job *j, int signum)
{
    size_t i;
    json_t *pair;

    json_array_foreach(j->started, i, pair)
    {
        json_int_t pid = json_integer_value(json_array_get(pair, 1));
        if (pid > 1)
            (void)kill(-(pid_t)pid, signum);
    }
}

static void kill_shell(struct job *j, int signum)
{
    if (j->spawned && !j->exited)
        (void)kill(-j->proc.pid, signum);
}

/* Send the shell a command on its hello stream (body stolen). */
static int hello_send(struct job *j, json_t *o, const void *data, size_t len)
{
    if (!o) {
        errno = ENOMEM;
        return -1;
    }
    return broker_respond(j->hello, o, data, len, 0);
}

/* Deliver 'signum' to the tasks of 'ranks' (NULL: all): through the shell
 * when it is connected; before its hello, queued for it (and SIGKILL also
 * kills the shell at once); after it went away, straight to the task
 * process groups it reported.  Before rank 0 said go, the shell has
 * forked nothing: SIGTERM or SIGKILL to all (a job failing or cancelled
 * while it starts) ends the shell at once. */
static int job_signal(struct job *j, int signum, const char *ranks)
{
    json_t *o;

    if (j->exited)
        return 0;
    if (!j->go && !j->hello_seen && !ranks &&
        (signum == SIGTERM || signum == SIGKILL)) {
        j->killed_before_go = true;
        kill_shell(j, SIGKILL);
        return 0;
    }
    o = ranks ? json_pack("{s:s s:i s:s}", "type", "kill", "signum", signum,
                          "ranks", ranks)
              : json_pack("{s:s s:i}", "type", "kill", "signum", signum);
    if (!o) {
        errno = ENOMEM;
        return -1;
    }
    if (j->hello)
        return hello_send(j, o, NULL, 0);
    if (!j->hello_seen) {
        if (signum == SIGKILL && !ranks) {
            json_decref(o);
            kill_shell(j, SIGKILL);
            return 0;
        }
        return json_array_append_new(j->kills, o) < 0 ? -1 : 0;
    }
    json_decref(o);
    if (!ranks)
        kill_task_groups(j, signum);
    else {
        idset_t *set = idset_decode(ranks, NULL);
        size_t i;
        json_t *pair;

        json_array_foreach(j->started, i, pair)
        {
            json_int_t r = json_integer_value(json_array_get(pair, 0));
            json_int_t pid = json_integer_value(json_array_get(pair, 1));
            if (set && idset_test(set, (uint32_t)r) && pid > 1)
                (void)kill(-(pid_t)pid, signum);
        }
        idset_destroy(set);
    }
    return 0;
}

/* Kill everything of the job now (rank 0 went away or cancelled). */
static void job_kill_hard(struct job *j)
{
    (void)job_signal(j, SIGKILL, NULL);
    kill_task_groups(j, SIGKILL);
    kill_shell(j, SIGKILL);
}

/* --- shell process ------------------------------------------------------ */

static void on_shell_exit(uv_process_t *h, int64_t exit_status, int term_signal)
{
    struct job *j = h->data;

    j->exited = true;
    j->exit_status = exit_status;
    j->term_signal = term_signal;
    uv_timer_stop(&j->timer);
    if (!j->ctx)
        return;
    /* tasks the shell could not clean up (it was killed) must not stay */
    if (term_signal)
        kill_task_groups(j, SIGKILL);
    broker_log(j->ctx->b, LOG_LEVEL_DEBUG,
               "job-exec: job %ju: shell exited (status %jd, signal %d)",
               (uintmax_t)j->id, (intmax_t)exit_status, term_signal);
    job_finish(j);
}

static void on_timer(uv_timer_t *t)
{
    struct job *j = t->data;

    if (j->exited || !j->ctx)
        return;
    if (!j->hello_seen && !j->ctx->shutting_down) {
        j->hello_timed_out = true;
        broker_log(j->ctx->b, LOG_LEVEL_WARNING,
                   "job-exec: job %ju: shell pid %d silent for %d ms: killed",
                   (uintmax_t)j->id, j->proc.pid, JOB_EXEC_HELLO_TIMEOUT_MS);
    }
    /* hello timeout or the end of the shutdown grace period */
    kill_task_groups(j, SIGKILL);
    kill_shell(j, SIGKILL);
}

/* The broker's environment plus EDDY_URI, EDDY_BROKER_RANK and
 * EDDY_JOB_TMPDIR (which the shell passes on to the tasks). */
static char **shell_env(broker_t *b, const char *tmpdir)
{
    char **env = procenv_create(b, 1);

    if (env && procenv_set(env, "EDDY_JOB_TMPDIR", tmpdir) < 0) {
        procenv_destroy(env);
        return NULL;
    }
    return env;
}

/* Spawn the shell; -1 with errno (uv_spawn's) on failure, the job's
 * handles then being initialized all the same. */
static int shell_spawn(struct job *j)
{
    struct jexec_ctx *ctx = j->ctx;
    uv_process_options_t opts = {0};
    uv_stdio_container_t stdio[3];
    char arg0[] = "eddy-shell";
    char jobarg[64];
    char *argv[] = {arg0, jobarg, NULL};
    char **env;
    int rc;

    snprintf(jobarg, sizeof(jobarg), "--jobid=%ju", (uintmax_t)j->id);
    if (!(env = shell_env(ctx->b, j->tmpdir)))
        return -1;
    /* no stdin; diagnostics go where the broker's own go */
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_INHERIT_FD;
    stdio[1].data.fd = 2;
    stdio[2].flags = UV_INHERIT_FD;
    stdio[2].data.fd = 2;
    opts.exit_cb = on_shell_exit;
    opts.file = ctx->shell_path;
    opts.args = argv;
    opts.env = env;
    opts.flags = UV_PROCESS_DETACHED; /* own session and process group */
    opts.stdio_count = 3;
    opts.stdio = stdio;
    j->proc.data = j;
    j->handles++; /* uv_spawn initializes the handle even when it fails */
    rc = uv_spawn(broker_loop(ctx->b), &j->proc, &opts);
    procenv_destroy(env);
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    j->spawned = true;
    return 0;
}

/* --- handlers ----------------------------------------------------------- */

static json_t *req_body(broker_req_t *req)
{
    return broker_req_msg(req)->body;
}

/* "id" of a request body: -1 EINVAL if missing or not a job ID. */
static int get_id(json_t *body, uint64_t *id)
{
    json_t *v = json_object_get(body, "id");
    json_int_t i;

    if (!json_is_integer(v) || (i = json_integer_value(v)) < 0 ||
        (uint64_t)i > JOBSLICE_ID_MAX) {
        errno = EINVAL;
        return -1;
    }
    *id = (uint64_t)i;
    return 0;
}

static void start_cancel(struct jexec_ctx *ctx, broker_req_t *req)
{
    for (struct job *j = ctx->jobs; j; j = j->next) {
        if (!j->finished && j->start && broker_req_same(j->start, req)) {
            broker_log(ctx->b, LOG_LEVEL_DEBUG,
                       "job-exec: job %ju: start cancelled: killing",
                       (uintmax_t)j->id);
            job_kill_hard(j);
        }
    }
}

/* Nothing could be spawned: one exception for every task rank, and the
 * end of the start stream. */
static void job_start_failed(struct job *j, int errnum, const char *note)
{
    j->exited = true;
    start_exception(j, errnum, note);
    /* every rank is accounted for: no second exception at the end */
    for (uint32_t r = idset_first(j->js->tasks); r != IDSET_INVALID;
         r = idset_next(j->js->tasks, r))
        (void)idset_set(j->reported, r);
    job_finish(j);
}

static void start_handler(broker_req_t *req, void *arg)
{
    struct jexec_ctx *ctx = arg;
    json_t *body = req_body(req);
    struct jobslice *js = NULL;
    struct job *j = NULL;
    eddy_error_t err = {{0}};
    char note[PATH_MAX + 256];
    int errnum = EINVAL;

    if (broker_req_is_cancel(req)) {
        start_cancel(ctx, req);
        return;
    }

    /* decode, validate */
    if (!broker_req_is_streaming(req)) {
        errnum = EPROTO;
        snprintf(err.text, sizeof(err.text),
                 "job-exec.start: must be a streaming request");
        goto error;
    }
    if (!(js = jobslice_decode(body, &err))) {
        errnum = errno;
        goto error;
    }
    if (job_lookup(ctx, js->id)) {
        errnum = EEXIST;
        snprintf(err.text, sizeof(err.text), "job %ju: already running here",
                 (uintmax_t)js->id);
        goto error;
    }
    if (ctx->shutting_down) {
        errnum = ECANCELED;
        snprintf(err.text, sizeof(err.text), "broker is shutting down");
        goto error;
    }

    /* act */
    errnum = ENOMEM;
    snprintf(err.text, sizeof(err.text), "out of memory");
    if (!(j = calloc(1, sizeof(*j))))
        goto error;
    j->id = js->id;
    j->js = js;
    js = NULL;
    j->stdin_tail = &j->stdin_q;
    if (!(j->reported = idset_create()) || !(j->started = json_array()) ||
        !(j->kills = json_array())) {
        job_free(j);
        goto error;
    }
    j->slice = json_incref(body);
    j->start = broker_req_incref(req);
    j->ctx = ctx;
    if ((j->next = ctx->jobs))
        j->next->prev = j;
    ctx->jobs = j;
    uv_timer_init(broker_loop(ctx->b), &j->timer);
    j->timer.data = j;
    j->handles++;
    if (tmpdir_create(j, &err) < 0) {
        errnum = errno;
        snprintf(note, sizeof(note), "job %ju: rank %u (%s): %s",
                 (uintmax_t)j->id, broker_rank(ctx->b), broker_hostname(ctx->b),
                 err.text);
        broker_log(ctx->b, LOG_LEVEL_WARNING, "job-exec: %s", note);
        job_start_failed(j, errnum, note); /* proc was never initialized */
        return;
    }
    start_respond(
        j, json_pack("{s:s s:s}", "type", "tmpdir", "path", j->tmpdir), 0);
    /* alone, this node has nothing to wait for */
    j->go = j->js->nnodes <= 1;
    if (shell_spawn(j) < 0) {
        errnum = errno;
        snprintf(note, sizeof(note),
                 "job %ju: rank %u (%s): cannot run eddy-shell '%s': %s",
                 (uintmax_t)j->id, broker_rank(ctx->b), broker_hostname(ctx->b),
                 ctx->shell_path, strerror(errnum));
        broker_log(ctx->b, LOG_LEVEL_ERR, "job-exec: %s", note);
        job_start_failed(j, errnum, note);
        return;
    }
    uv_timer_start(&j->timer, on_timer, JOB_EXEC_HELLO_TIMEOUT_MS, 0);
    broker_log(ctx->b, LOG_LEVEL_DEBUG, "job-exec: job %ju: shell pid %d",
               (uintmax_t)j->id, j->proc.pid);
    return;
error:
    jobslice_destroy(js);
    broker_respond_error(req, errnum, "rank %u: job-exec.start: %s",
                         broker_rank(ctx->b), err.text);
}

static void kill_handler(broker_req_t *req, void *arg)
{
    struct jexec_ctx *ctx = arg;
    json_t *body = req_body(req);
    json_t *sig = json_object_get(body, "signum");
    json_t *ranks = json_object_get(body, "ranks");
    const char *errmsg = NULL;
    struct job *j;
    uint64_t id;
    idset_t *set;
    int errnum = EINVAL;

    if (broker_req_is_cancel(req))
        return;
    if (get_id(body, &id) < 0) {
        errmsg = "job-exec.kill: 'id' must be a job ID";
        goto error;
    }
    if (!json_is_integer(sig) || json_integer_value(sig) < 1 ||
        json_integer_value(sig) >= NSIG) {
        errmsg = "job-exec.kill: 'signum' must be a signal number";
        goto error;
    }
    if (ranks) {
        if (!json_is_string(ranks) ||
            !(set = idset_decode(json_string_value(ranks), NULL))) {
            errmsg = "job-exec.kill: 'ranks' must be an idset";
            goto error;
        }
        idset_destroy(set);
    }
    if (!(j = job_lookup(ctx, id))) {
        broker_respond_error(req, ESRCH, "job %ju: not running on rank %u",
                             (uintmax_t)id, broker_rank(ctx->b));
        return;
    }
    if (job_signal(j, (int)json_integer_value(sig), json_string_value(ranks)) <
        0) {
        broker_respond_error(req, errno, "job %ju: rank %u: kill: %s",
                             (uintmax_t)id, broker_rank(ctx->b),
                             strerror(errno));
        return;
    }
    broker_respond(req, json_object(), NULL, 0, 0);
    return;
error:
    broker_respond_error(req, errnum, "%s", errmsg);
}

/* Forward one stdin request to the connected shell and answer it. */
static void stdin_forward(struct job *j, broker_req_t *req)
{
    const msg_t *msg = broker_req_msg(req);
    json_t *body = req_body(req);
    json_t *o = json_pack("{s:s s:O s:b}", "type", "stdin", "rank",
                          json_object_get(body, "rank"), "eof",
                          json_is_true(json_object_get(body, "eof")));

    if (hello_send(j, o, msg->payload, msg->payload_len) < 0)
        broker_respond_error(req, errno, "job %ju: rank %u: stdin: %s",
                             (uintmax_t)j->id, broker_rank(j->ctx->b),
                             strerror(errno));
    else
        broker_respond(req, json_object(), NULL, 0, 0);
}

static void stdin_handler(broker_req_t *req, void *arg)
{
    struct jexec_ctx *ctx = arg;
    json_t *body = req_body(req);
    json_t *rank = json_object_get(body, "rank");
    json_t *eof = json_object_get(body, "eof");
    const char *errmsg = NULL;
    struct pending *p;
    struct job *j;
    uint64_t id;
    int errnum = EINVAL;

    if (broker_req_is_cancel(req))
        return;
    if (get_id(body, &id) < 0) {
        errmsg = "job-exec.stdin: 'id' must be a job ID";
        goto error;
    }
    if (!json_is_integer(rank) || json_integer_value(rank) < 0 ||
        json_integer_value(rank) > UINT32_MAX) {
        errmsg = "job-exec.stdin: 'rank' must be a task rank";
        goto error;
    }
    if (eof && !json_is_boolean(eof)) {
        errmsg = "job-exec.stdin: 'eof' must be a boolean";
        goto error;
    }
    if (!(j = job_lookup(ctx, id))) {
        broker_respond_error(req, ESRCH, "job %ju: not running on rank %u",
                             (uintmax_t)id, broker_rank(ctx->b));
        return;
    }
    if (!j->js->has_stdin ||
        !idset_test(j->js->tasks, (uint32_t)json_integer_value(rank))) {
        errmsg = !j->js->has_stdin
                     ? "job-exec.stdin: the job was started without stdin"
                     : "job-exec.stdin: that task rank does not run here";
        goto error;
    }
    if (j->hello) {
        stdin_forward(j, req);
        return;
    }
    if (j->hello_seen || j->exited) {
        broker_respond_error(req, EPIPE, "job %ju: rank %u: shell is gone",
                             (uintmax_t)id, broker_rank(ctx->b));
        return;
    }
    if (j->stdin_n >= JOB_EXEC_STDIN_PENDING_MAX) {
        broker_respond_error(req, EAGAIN,
                             "job %ju: rank %u: shell not up yet and %u"
                             " stdin messages already wait for it",
                             (uintmax_t)id, broker_rank(ctx->b), j->stdin_n);
        return;
    }
    if (!(p = calloc(1, sizeof(*p)))) {
        errnum = ENOMEM;
        errmsg = "out of memory";
        goto error;
    }
    p->req = broker_req_incref(req);
    *j->stdin_tail = p;
    j->stdin_tail = &p->next;
    j->stdin_n++;
    return;
error:
    broker_respond_error(req, errnum, "%s", errmsg);
}

/* Release a job held at its startup barrier: the shell lets its tasks
 * go.  Before the shell's hello, the command waits for it, in order with
 * kills. */
static void release_handler(broker_req_t *req, void *arg)
{
    struct jexec_ctx *ctx = arg;
    struct job *j;
    json_t *o;
    uint64_t id;
    int rc, untraced;

    if (broker_req_is_cancel(req))
        return;
    if (get_id(req_body(req), &id) < 0) {
        broker_respond_error(req, EINVAL,
                             "job-exec.release: 'id' must be a job ID");
        return;
    }
    if (!(j = job_lookup(ctx, id)) || j->exited) {
        broker_respond_error(req, ESRCH, "job %ju: not running on rank %u",
                             (uintmax_t)id, broker_rank(ctx->b));
        return;
    }
    untraced = json_is_true(json_object_get(req_body(req), "untraced"));
    o = json_pack("{s:s s:b}", "type", "release", "untraced", untraced);
    if (j->hello)
        rc = hello_send(j, o, NULL, 0);
    else if (!j->hello_seen)
        rc = o && json_array_append_new(j->kills, o) == 0 ? 0 : -1;
    else {
        json_decref(o);
        errno = EPIPE;
        rc = -1;
    }
    if (rc < 0) {
        broker_respond_error(req, errno, "job %ju: rank %u: release: %s",
                             (uintmax_t)id, broker_rank(ctx->b),
                             strerror(errno));
        return;
    }
    broker_respond(req, json_object(), NULL, 0, 0);
}

static void hello_cancel(struct jexec_ctx *ctx, broker_req_t *req)
{
    for (struct job *j = ctx->jobs; j; j = j->next) {
        if (j->hello_wait && broker_req_same(j->hello_wait, req)) {
            (void)broker_respond(j->hello_wait, NULL, NULL, 0, MSG_FLAG_EOS);
            broker_req_decref(j->hello_wait);
            j->hello_wait = NULL;
        }
        if (j->hello && broker_req_same(j->hello, req)) {
            (void)broker_respond(j->hello, NULL, NULL, 0, MSG_FLAG_EOS);
            broker_req_decref(j->hello);
            j->hello = NULL;
        }
    }
}

/* Answer the shell's hello with the JOBSLICE (it forks its tasks then),
 * and send it what came before, in order. */
static void hello_accept(struct job *j, broker_req_t *req)
{
    struct jexec_ctx *ctx = j->ctx;
    struct pending *p;
    json_t *o;
    size_t i;

    if (broker_respond(req, json_incref(j->slice), NULL, 0, 0) < 0) {
        broker_log(ctx->b, LOG_LEVEL_ERR,
                   "job-exec: job %ju: cannot answer hello: %s",
                   (uintmax_t)j->id, strerror(errno));
        return;
    }
    j->hello_seen = true;
    j->hello = broker_req_incref(req);
    j->hello_origin = broker_req_origin(req);
    uv_timer_stop(&j->timer);
    /* what came before the hello, in order */
    json_array_foreach(j->kills, i, o)
    {
        (void)hello_send(j, json_incref(o), NULL, 0);
    }
    json_array_clear(j->kills);
    while ((p = j->stdin_q)) {
        j->stdin_q = p->next;
        stdin_forward(j, p->req);
        broker_req_decref(p->req);
        free(p);
    }
    j->stdin_tail = &j->stdin_q;
    j->stdin_n = 0;
    if (ctx->shutting_down)
        (void)job_signal(j, SIGTERM, NULL);
}

/* The shell is up: answered at once if rank 0 said go already, else kept
 * until it does (the hello timer still runs). */
static void hello_handler(broker_req_t *req, void *arg)
{
    struct jexec_ctx *ctx = arg;
    struct job *j;
    uint64_t id;

    if (broker_req_is_cancel(req)) {
        hello_cancel(ctx, req);
        return;
    }
    if (!broker_req_is_streaming(req)) {
        broker_respond_error(req, EPROTO,
                             "job-exec.shell-hello: must be streaming");
        return;
    }
    if (get_id(req_body(req), &id) < 0) {
        broker_respond_error(req, EINVAL,
                             "job-exec.shell-hello: 'id' must be a job ID");
        return;
    }
    if (!(j = job_lookup(ctx, id)) || j->exited) {
        broker_respond_error(req, ESRCH, "job %ju: not running on rank %u",
                             (uintmax_t)id, broker_rank(ctx->b));
        return;
    }
    if (j->hello_seen || j->hello_wait) {
        broker_respond_error(req, EEXIST,
                             "job %ju: rank %u: its shell already said hello",
                             (uintmax_t)id, broker_rank(ctx->b));
        return;
    }
    if (!j->go) {
        j->hello_wait = broker_req_incref(req);
        j->hello_held = true;
        return;
    }
    hello_accept(j, req);
}

/* job-exec.go {"id"}: every node of the job has its tmpdir, the tasks may
 * be forked. */
static void go_handler(broker_req_t *req, void *arg)
{
    struct jexec_ctx *ctx = arg;
    broker_req_t *hello;
    struct job *j;
    uint64_t id;

    if (broker_req_is_cancel(req))
        return;
    if (get_id(req_body(req), &id) < 0) {
        broker_respond_error(req, EINVAL, "job-exec.go: 'id' must be a job ID");
        return;
    }
    if (!(j = job_lookup(ctx, id)) || j->exited || j->killed_before_go) {
        broker_respond_error(req, ESRCH, "job %ju: not running on rank %u",
                             (uintmax_t)id, broker_rank(ctx->b));
        return;
    }
    if (!j->go) {
        j->go = true;
        if ((hello = j->hello_wait)) {
            j->hello_wait = NULL;
            hello_accept(j, hello);
            broker_req_decref(hello);
        }
    }
    broker_respond(req, json_object(), NULL, 0, 0);
}

/* Check the event fields rank 0 relies on; NULL if fine, else why. */
static const char *event_check(struct job *j, const json_t *body)
{
    const char *type = json_string_value(json_object_get(body, "type"));
    json_t *rank = json_object_get(body, "rank");
    json_t *tasks, *pair;
    size_t i;

    if (!type)
        return "'type' must be a string";
    if (!strcmp(type, "started")) {
        json_t *exes = json_object_get(body, "executables");
        json_t *v;
        json_int_t rank, pid, appnum, exe;

        tasks = json_object_get(body, "tasks");
        if (!json_is_array(tasks) || !json_is_array(exes))
            return "started: 'tasks' and 'executables' must be arrays";
        json_array_foreach(exes, i, v)
        {
            if (!json_is_string(v) || !*json_string_value(v))
                return "started: 'executables' must hold paths";
        }
        json_array_foreach(tasks, i, pair)
        {
            if (json_unpack(pair, "[IIII!]", &rank, &pid, &appnum, &exe) < 0 ||
                rank < 0 || rank > UINT32_MAX ||
                !idset_test(j->js->tasks, (uint32_t)rank) || pid <= 0 ||
                pid > INT32_MAX || appnum < 0 || appnum > INT32_MAX ||
                exe < 0 || (size_t)exe >= json_array_size(exes))
                return "started: 'tasks' must hold [rank, pid, appnum, exe] "
                       "of this node's tasks";
        }
        return NULL;
    }
    if (!strcmp(type, "held")) {
        if (!json_is_string(json_object_get(body, "where")) ||
            !json_is_integer(json_object_get(body, "count")))
            return "held: 'where' must be a string, 'count' an integer";
        return NULL;
    }
    if (!strcmp(type, "exits")) {
        json_int_t r, status;
        tasks = json_object_get(body, "tasks");
        if (!json_is_array(tasks) || json_array_size(tasks) == 0)
            return "exits: 'tasks' must be a non-empty array";
        json_array_foreach(tasks, i, pair)
        {
            if (json_unpack(pair, "[II!]", &r, &status) < 0 || r < 0 ||
                r > UINT32_MAX || !idset_test(j->js->tasks, (uint32_t)r))
                return "exits: 'tasks' must hold [rank, status] of this "
                       "node's tasks";
        }
        return NULL;
    }
    if (strcmp(type, "exit") != 0 && strcmp(type, "exception") != 0 &&
        strcmp(type, "abort") != 0)
        return "'type' must be started, held, exit, exits, exception or "
               "abort";
    if (!json_is_integer(rank) || json_integer_value(rank) < 0 ||
        json_integer_value(rank) > UINT32_MAX ||
        !idset_test(j->js->tasks, (uint32_t)json_integer_value(rank)))
        return "'rank' must be a task rank of this node";
    if ((!strcmp(type, "exit") || !strcmp(type, "abort")) &&
        !json_is_integer(json_object_get(body, "status")))
        return "exit: 'status' must be an integer";
    return NULL;
}

static void event_handler(broker_req_t *req, void *arg)
{
    struct jexec_ctx *ctx = arg;
    json_t *body = req_body(req);
    const char *type, *why;
    struct job *j;
    json_t *o;
    uint64_t id;

    if (broker_req_is_cancel(req))
        return;
    if (get_id(body, &id) < 0) {
        broker_respond_error(req, EINVAL,
                             "job-exec.shell-event: 'id' must be a job ID");
        return;
    }
    if (!(j = job_lookup(ctx, id))) {
        broker_respond_error(req, ESRCH, "job %ju: not running on rank %u",
                             (uintmax_t)id, broker_rank(ctx->b));
        return;
    }
    if (!j->hello_seen || j->hello_origin != broker_req_origin(req)) {
        broker_respond_error(req, EPERM,
                             "job %ju: shell events come from its shell",
                             (uintmax_t)id);
        return;
    }
    if ((why = event_check(j, body))) {
        broker_respond_error(req, EINVAL, "job-exec.shell-event: %s", why);
        return;
    }
    type = json_string_value(json_object_get(body, "type"));
    if (!strcmp(type, "started")) {
        json_decref(j->started);
        json_decref(j->exes);
        j->started = json_incref(json_object_get(body, "tasks"));
        j->exes = json_incref(json_object_get(body, "executables"));
    } else if (!strcmp(type, "exit") || !strcmp(type, "exception")) {
        idset_set(j->reported,
                  (uint32_t)json_integer_value(json_object_get(body, "rank")));
    } else if (!strcmp(type, "exits")) {
        size_t i;
        json_t *pair;
        json_array_foreach(json_object_get(body, "tasks"), i, pair)
        {
            idset_set(j->reported,
                      (uint32_t)json_integer_value(json_array_get(pair, 0)));
        }
    }
    /* relay without the id: the start stream is the job's already */
    if (!(o = json_deep_copy(body))) {
        broker_respond_error(req, ENOMEM, "out of memory");
        return;
    }
    json_object_del(o, "id");
    start_respond(j, o, 0);
    broker_respond(req, json_object(), NULL, 0, 0);
}

/* --- the proctable (proctable.c gathers it) ------------------------------ */

int job_exec_fragment(struct jexec_ctx *ctx,
                      uint64_t id,
                      proctable_t *pt,
                      eddy_error_t *err)
{
    struct job *j = job_lookup(ctx, id);
    uint32_t rank = broker_rank(ctx->b);
    size_t i;
    json_t *t;

    if (!j || j->finished) {
        errno = ESRCH;
        return errprintf(err, "job %ju: not running on rank %u", (uintmax_t)id,
                         rank);
    }
    if (!j->exes) {
        errno = EAGAIN;
        return errprintf(err, "job %ju: rank %u: tasks not started yet",
                         (uintmax_t)id, rank);
    }
    /* event_check() validated every field when the shell sent them */
    json_array_foreach(j->started, i, t)
    {
        struct proctable_entry e = {
            .rank = (uint32_t)json_integer_value(json_array_get(t, 0)),
            .pid = (int32_t)json_integer_value(json_array_get(t, 1)),
            .appnum = (int32_t)json_integer_value(json_array_get(t, 2)),
            .broker_rank = rank,
            .hostname = broker_hostname(ctx->b),
            .executable = json_string_value(json_array_get(
                j->exes, (size_t)json_integer_value(json_array_get(t, 3)))),
        };
        if (proctable_add(pt, &e) < 0)
            return errprintf(err, "job %ju: rank %u: proctable: %s",
                             (uintmax_t)id, rank, strerror(errno));
    }
    return 0;
}

/* --- service lifecycle -------------------------------------------------- */

/* eddy-shell lives beside the broker executable (build tree and install
 * alike); $EDDY_SHELL overrides, e.g. to run it under a debugger. */
static void find_shell(struct jexec_ctx *ctx)
{
    const char *env = getenv("EDDY_SHELL");
    char self[PATH_MAX];
    ssize_t n;
    char *slash;

    if (env && *env) {
        snprintf(ctx->shell_path, sizeof(ctx->shell_path), "%s", env);
        return;
    }
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        if ((slash = strrchr(self, '/'))) {
            *slash = '\0';
            snprintf(ctx->shell_path, sizeof(ctx->shell_path),
                     "%.*s/eddy-shell", PATH_MAX - 16, self);
            return;
        }
    }
    snprintf(ctx->shell_path, sizeof(ctx->shell_path), "eddy-shell");
}

static int jexec_init(broker_t *b, void **ctxp)
{
    struct jexec_ctx *ctx = calloc(1, sizeof(*ctx));

    if (!ctx)
        return -1;
    ctx->b = b;
    find_shell(ctx);
    *ctxp = ctx;
    return 0;
}

static void jexec_disconnect(void *arg, uint64_t origin)
{
    struct jexec_ctx *ctx = arg;

    for (struct job *j = ctx->jobs; j; j = j->next) {
        if (j->finished)
            continue;
        if (j->hello && j->hello_origin == origin) {
            /* the shell hung up; its exit will end the job */
            broker_req_decref(j->hello);
            j->hello = NULL;
        }
        if (j->hello_wait && broker_req_origin(j->hello_wait) == origin) {
            broker_req_decref(j->hello_wait);
            j->hello_wait = NULL;
        }
        if (j->start && broker_req_origin(j->start) == origin) {
            broker_log(ctx->b, LOG_LEVEL_WARNING,
                       "job-exec: job %ju: rank 0 link gone: killing",
                       (uintmax_t)j->id);
            job_kill_hard(j);
        }
    }
}

/* SIGTERM every shell (it passes it to its tasks and reports their exit),
 * SIGKILL after a grace period, and hold the broker's exit until each has
 * been reaped and its start stream ended. */
static void jexec_shutdown(void *arg)
{
    struct jexec_ctx *ctx = arg;
    unsigned n;

    if (ctx->shutting_down)
        return;
    ctx->shutting_down = true;
    for (struct job *j = ctx->jobs; j; j = j->next) {
        if (j->finished || j->exited)
            continue;
        if (!j->go && !j->hello_seen)
            j->killed_before_go = true; /* nothing forked to report */
        kill_shell(j, SIGTERM);
        uv_timer_stop(&j->timer);
        uv_timer_start(&j->timer, on_timer, JOB_EXEC_KILL_GRACE_MS, 0);
    }
    if ((n = live_count(ctx)) > 0) {
        broker_log(ctx->b, LOG_LEVEL_DEBUG,
                   "job-exec: shutdown: waiting for %u shells", n);
        ctx->holding = true;
        broker_shutdown_hold(ctx->b);
    }
}

static void jexec_destroy(void *arg)
{
    struct jexec_ctx *ctx = arg;
    struct job *j, *next;
    int saved_errno = errno;

    if (!ctx)
        return;
    if (live_count(ctx) > 0)
        broker_log(ctx->b, LOG_LEVEL_WARNING,
                   "job-exec: %u shells not reaped at exit: killed",
                   live_count(ctx));
    for (j = ctx->jobs; j; j = next) {
        next = j->next;
        if (!j->exited) {
            kill_task_groups(j, SIGKILL);
            kill_shell(j, SIGKILL);
        }
        pending_fail(j, ECANCELED, "broker exiting");
        tmpdir_release(j, ctx->b);
        j->finished = true;
        j->ctx = NULL;
        j->prev = j->next = NULL;
        broker_req_decref(j->start);
        j->start = NULL;
        broker_req_decref(j->hello);
        j->hello = NULL;
        broker_req_decref(j->hello_wait);
        j->hello_wait = NULL;
        job_close(j);
    }
    free(ctx);
    errno = saved_errno;
}

static const struct service_handler jexec_handlers[] = {
    {"job-exec.start", start_handler},
    {"job-exec.kill", kill_handler},
    {"job-exec.stdin", stdin_handler},
    {"job-exec.release", release_handler},
    {"job-exec.go", go_handler},
    {"job-exec.shell-hello", hello_handler},
    {"job-exec.shell-event", event_handler},
    {NULL, NULL},
};

const struct service_def job_exec_service = {
    .name = "job-exec",
    .handlers = jexec_handlers,
    .init = jexec_init,
    .disconnect = jexec_disconnect,
    .shutdown = jexec_shutdown,
    .destroy = jexec_destroy,
};
