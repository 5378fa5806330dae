/* job_io.c - the job I/O engine of `eddy run`, `eddy job attach` and the
 * output writer of `eddy submit` (see jobopts.h).
 *
 * Everything runs as continuations on the handle's libuv loop: the attach
 * stream (output, replayed from the start then live), the eventlog stream
 * (to learn when the tasks run, so stdin starts flowing then, and to print
 * exceptions as they happen), stdin chunks (one in flight at a time, so a
 * slow job never makes us buffer more than one chunk), and signals.  A
 * process runs one engine, so its state is one static struct: a late
 * continuation (a signal or stdin answer after the job ended) finds it
 * still there and only frees its future.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>
#include <uv.h>

#include "cmd.h"
#include "jobopts.h"
#include "lineout.h"
#include "src/common/idset.h"

/* Bytes of stdin per eddy_job_stdin (at most one chunk in flight). */
#define STDIN_CHUNK (64 * 1024)

struct task {
    bool seen;
    struct lineout lb[2]; /* partial stdout, stderr line (-l) */
    int fd[2];            /* where its stdout, stderr go */
};

struct outfile {
    char *path;
    int fd;
};

static struct engine {
    const char *cmd;
    eddy_t *h;
    uv_loop_t *loop;
    eddy_jobid_t id;
    const struct jobio *io;
    bool finishing;
    bool output_failed;

    eddy_future_t *attach, *events;
    bool attach_done, events_done;

    struct task *tasks; /* by rank, grown on demand */
    size_t ntasks;
    struct outfile *files;
    size_t nfiles;
    uint32_t *node_of; /* rank -> broker rank, for {{node}} */
    size_t nnode_of;

    /* stdin */
    bool started;    /* the job's tasks run: stdin may flow */
    char *eof_ranks; /* ranks that get no stdin: EOF at start */
    int in_fd;
    int in_flags;
    bool in_started, in_eof, in_failed;
    bool use_poll, poll_init, idle_init;
    uv_poll_t poll;
    uv_idle_t idle;

    /* signals */
    bool sig_init;
    uv_signal_t sigint, sigterm;
    double last_sigint;
    bool cancelled, aborted;
    int abort_status;
} E;

/* --- output ------------------------------------------------------------- */

static void write_all(int fd, const void *data, size_t len)
{
    if (lineout_write_all(fd, data, len) < 0) {
        if (!E.output_failed)
            cmd_warn(E.cmd, "cannot write output: %s", strerror(errno));
        E.output_failed = true;
    }
}

/* A labelled write failed: out of memory is fatal, the rest is reported
 * once, like write_all()'s. */
static void label_failed(void)
{
    if (errno == ENOMEM)
        cmd_die(E.cmd, "out of memory");
    if (!E.output_failed)
        cmd_warn(E.cmd, "cannot write output: %s", strerror(errno));
    E.output_failed = true;
}

/* 'tmpl' with {{id}}, {{rank}}, {{node}} replaced (caller frees). */
static char *expand(const char *tmpl, uint32_t rank)
{
    size_t cap = strlen(tmpl) + 64, len = 0;
    char *s = malloc(cap), val[32];

    if (!s)
        cmd_die(E.cmd, "out of memory");
    while (*tmpl) {
        const char *v = NULL;
        size_t skip = 0, vlen;
        if (!strncmp(tmpl, "{{id}}", 6)) {
            snprintf(val, sizeof(val), "%" PRIu64, E.id);
            v = val, skip = 6;
        } else if (!strncmp(tmpl, "{{rank}}", 8)) {
            snprintf(val, sizeof(val), "%" PRIu32, rank);
            v = val, skip = 8;
        } else if (!strncmp(tmpl, "{{node}}", 8)) {
            if (rank < E.nnode_of)
                snprintf(val, sizeof(val), "%" PRIu32, E.node_of[rank]);
            else
                snprintf(val, sizeof(val), "none");
            v = val, skip = 8;
        }
        vlen = v ? strlen(v) : 1;
        if (len + vlen + 1 > cap) {
            char *p = realloc(s, cap = 2 * (len + vlen + 1));
            if (!p)
                cmd_die(E.cmd, "out of memory");
            s = p;
        }
        if (v) {
            memcpy(s + len, v, vlen);
            tmpl += skip;
        } else {
            s[len] = *tmpl++;
        }
        len += vlen;
    }
    s[len] = '\0';
    return s;
}

/* The descriptor of file 'path', opened (and truncated) on first use;
 * stdout and stderr of several ranks may share one. */
static int outfile_open(char *path)
{
    struct outfile *p;

    for (size_t i = 0; i < E.nfiles; i++) {
        if (!strcmp(E.files[i].path, path)) {
            free(path);
            return E.files[i].fd;
        }
    }
    if (!(p = realloc(E.files, (E.nfiles + 1) * sizeof(*p))))
        cmd_die(E.cmd, "out of memory");
    E.files = p;
    p[E.nfiles].path = path;
    p[E.nfiles].fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (p[E.nfiles].fd < 0)
        cmd_die(E.cmd, "%s: %s", path, strerror(errno));
    return p[E.nfiles++].fd;
}

static struct task *task_get(uint32_t rank)
{
    if (rank >= E.ntasks) {
        size_t n = E.ntasks ? E.ntasks : 16;
        struct task *p;
        while (n <= rank)
            n *= 2;
        if (!(p = realloc(E.tasks, n * sizeof(*p))))
            cmd_die(E.cmd, "out of memory");
        memset(p + E.ntasks, 0, (n - E.ntasks) * sizeof(*p));
        E.tasks = p;
        E.ntasks = n;
    }
    struct task *t = &E.tasks[rank];
    if (!t->seen) {
        const char *tmpl[2] = {E.io->output,
                               E.io->error ? E.io->error : E.io->output};
        t->seen = true;
        for (int i = 0; i < 2; i++)
            t->fd[i] = tmpl[i] ? outfile_open(expand(tmpl[i], rank))
                               : (i == 0 ? STDOUT_FILENO : STDERR_FILENO);
    }
    return t;
}

static void on_output(eddy_jobid_t id,
                      uint32_t rank,
                      int stream,
                      const void *data,
                      size_t len,
                      bool eof,
                      void *arg)
{
    int idx = stream == EDDY_JOB_STDERR ? 1 : 0;
    struct task *t = task_get(rank);
    char prefix[16];

    if (!E.io->label) {
        if (len)
            write_all(t->fd[idx], data, len);
        return;
    }
    snprintf(prefix, sizeof(prefix), "%" PRIu32 ": ", rank);
    if ((len &&
         lineout_label(&t->lb[idx], t->fd[idx], prefix, data, len) < 0) ||
        (eof && lineout_flush(&t->lb[idx], t->fd[idx], prefix) < 0))
        label_failed();
}

static void check_done(void)
{
    if (E.attach_done && E.events_done)
        uv_stop(E.loop);
}

static void on_attach_done(eddy_future_t *f, void *arg)
{
    size_t dropped;

    if (E.finishing)
        return;
    if (eddy_rpc_get(f, NULL) < 0)
        jobid_die(E.cmd, E.id, f);
    /* Only an attach that came after the job's log passed its cap misses
     * output; say so, but the exit status stays the job's. */
    if ((dropped = eddy_job_attach_dropped(f)) > 0)
        cmd_warn(E.cmd,
                 "job %" PRIu64 ": %zu bytes of output were dropped (output "
                 "log cap)",
                 E.id, dropped);
    E.attach_done = true;
    check_done();
}

/* --- stdin -------------------------------------------------------------- */

static void stdin_resume(void);

static void stdin_stop(void)
{
    if (E.poll_init)
        uv_poll_stop(&E.poll);
    if (E.idle_init)
        uv_idle_stop(&E.idle);
}

static void on_stdin_ack(eddy_future_t *f, void *arg)
{
    if (!E.finishing && eddy_rpc_get(f, NULL) < 0) {
        /* a job that ended or tasks that closed stdin are normal */
        if (errno != EINVAL && errno != ESRCH && errno != EPIPE &&
            errno != ECANCELED && !E.attach_done)
            cmd_warn(E.cmd, "job %" PRIu64 ": stdin: %s", E.id,
                     eddy_future_error_string(f));
        E.in_failed = true;
    }
    eddy_future_destroy(f);
    if (!E.finishing && !E.in_eof && !E.in_failed)
        stdin_resume();
}

static void stdin_send(const char *ranks,
                       const void *data,
                       size_t len,
                       bool eof)
{
    eddy_future_t *f = eddy_job_stdin(E.h, E.id, ranks, data, len, eof);

    if (!f || eddy_future_then(f, -1, on_stdin_ack, NULL) < 0) {
        cmd_warn(E.cmd, "job %" PRIu64 ": cannot send stdin: %s", E.id,
                 strerror(errno));
        eddy_future_destroy(f);
        E.in_failed = true;
    }
}

static void stdin_read(void)
{
    static char buf[STDIN_CHUNK];
    ssize_t n;

    stdin_stop();
    n = read(E.in_fd, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        stdin_resume();
        return;
    }
    if (n < 0) {
        if (errno != EBADF) /* a closed stdin reads as empty */
            cmd_warn(E.cmd, "stdin: %s", strerror(errno));
        n = 0;
    }
    if (n == 0)
        E.in_eof = true;
    stdin_send(E.io->input_ranks, buf, (size_t)n, n == 0);
}

static void on_stdin_poll(uv_poll_t *p, int status, int events)
{
    stdin_read();
}

static void on_stdin_idle(uv_idle_t *i)
{
    stdin_read();
}

static void stdin_resume(void)
{
    if (E.finishing || E.in_eof || E.in_failed)
        return;
    if (E.use_poll)
        uv_poll_start(&E.poll, UV_READABLE, on_stdin_poll);
    else
        uv_idle_start(&E.idle, on_stdin_idle);
}

/* Once the tasks run: ranks that get no stdin see EOF at once, the others
 * get ours (or the file's). */
static void stdin_start(void)
{
    if (!E.io->forward_stdin || E.in_started)
        return;
    E.in_started = true;
    if (E.eof_ranks)
        stdin_send(E.eof_ranks, NULL, 0, true);
    if (E.io->input) {
        if ((E.in_fd = open(E.io->input, O_RDONLY | O_CLOEXEC)) < 0)
            cmd_die(E.cmd, "--input=%s: %s", E.io->input, strerror(errno));
    } else {
        E.in_fd = STDIN_FILENO;
        E.in_flags = fcntl(STDIN_FILENO, F_GETFL);
    }
    /* epoll refuses regular files and /dev/null: read those when idle */
    if (uv_poll_init(E.loop, &E.poll, E.in_fd) == 0) {
        E.poll_init = E.use_poll = true;
        uv_unref((uv_handle_t *)&E.poll);
    } else {
        uv_idle_init(E.loop, &E.idle);
        E.idle_init = true;
        uv_unref((uv_handle_t *)&E.idle);
    }
    stdin_resume();
}

/* --- the eventlog ----------------------------------------------------- */

/* Print the job's exception (unless quiet) and pass a fatal one on to
 * the caller's hook. */
static void job_exception(const char *context)
{
    json_t *o = json_loads(context, 0, NULL);
    const char *type = "?", *note = "";
    int severity = 0;

    if (o)
        (void)json_unpack(o, "{s?s s?i s?s}", "type", &type, "severity",
                          &severity, "note", &note);
    if (!E.io->quiet_exceptions)
        cmd_warn(E.cmd, "job %" PRIu64 ": %s exception%s%s%s", E.id, type,
                 severity == 0 ? "" : " (non-fatal)", *note ? ": " : "", note);
    if (severity == 0 && E.io->on_fatal)
        E.io->on_fatal(type, note);
    json_decref(o);
}

static void on_event(eddy_future_t *f, void *arg)
{
    double ts;
    const char *name, *context;

    if (E.finishing)
        return;
    if (eddy_job_event_get(f, &ts, &name, &context) < 0) {
        if (errno == ENODATA) {
            E.events_done = true;
            check_done();
            return;
        }
        jobid_die(E.cmd, E.id, f);
    }
    if (!strcmp(name, "start")) {
        E.started = true;
        stdin_start();
    } else if (!strcmp(name, "exception")) {
        job_exception(context);
    }
    eddy_future_reset(f);
}

/* --- signals ---------------------------------------------------------- */

static void on_control_ack(eddy_future_t *f, void *arg)
{
    const char *what = arg;

    if (!E.finishing && eddy_rpc_get(f, NULL) < 0 && errno != EINVAL &&
        !E.attach_done)
        cmd_warn(E.cmd, "job %" PRIu64 ": %s: %s", E.id, what,
                 eddy_future_error_string(f));
    eddy_future_destroy(f);
}

static void control(eddy_future_t *f, const char *what)
{
    if (!f || eddy_future_then(f, -1, on_control_ack, (void *)what) < 0) {
        cmd_warn(E.cmd, "job %" PRIu64 ": %s: %s", E.id, what, strerror(errno));
        eddy_future_destroy(f);
    }
}

static void on_signal(uv_signal_t *s, int signum)
{
    double now = cmd_now();

    if (E.cancelled) {
        /* still here after cancelling: stop waiting */
        cmd_warn(E.cmd, "job %" PRIu64 ": detaching", E.id);
        E.aborted = true;
        E.abort_status = 128 + signum;
        uv_stop(E.loop);
        return;
    }
    /* a job that has not started: ours is cancelled, another's left */
    if (!E.started && !E.io->owner) {
        cmd_warn(E.cmd, "job %" PRIu64 ": detaching (it has not started)",
                 E.id);
        E.aborted = true;
        E.abort_status = 128 + signum;
        uv_stop(E.loop);
        return;
    }
    /* twice within a second, or our job that has not started: cancel */
    if (!E.started ||
        (signum == SIGINT && E.last_sigint > 0 && now - E.last_sigint < 1.0)) {
        cmd_warn(E.cmd, "job %" PRIu64 ": cancelling", E.id);
        E.cancelled = true;
        control(eddy_job_cancel(E.h, E.id), "cancel");
        return;
    }
    if (signum == SIGINT) {
        E.last_sigint = now;
        cmd_warn(E.cmd,
                 "job %" PRIu64 ": sending SIGINT (Ctrl-C again within "
                 "a second cancels the job)",
                 E.id);
    }
    control(eddy_job_signal(E.h, E.id, signum, NULL), "signal");
}

static void signals_init(void)
{
    uv_signal_init(E.loop, &E.sigint);
    uv_signal_init(E.loop, &E.sigterm);
    uv_signal_start(&E.sigint, on_signal, SIGINT);
    uv_signal_start(&E.sigterm, on_signal, SIGTERM);
    uv_unref((uv_handle_t *)&E.sigint);
    uv_unref((uv_handle_t *)&E.sigterm);
    E.sig_init = true;
}

/* --- setup ------------------------------------------------------------ */

/* {{node}} needs the rank -> node map, known once the job has started:
 * wait for that (or for the job to end without starting), then ask. */
static void learn_nodes(void)
{
    eddy_future_t *f = eddy_job_event_watch(E.h, E.id, EDDY_JOB_EVENT_FOLLOW);
    eddy_jobinfo_t *info;
    const char *name, *context;
    double ts;
    uint32_t n;

    if (!f)
        cmd_die(E.cmd, "job %" PRIu64 ": %s", E.id, strerror(errno));
    for (;;) {
        if (eddy_job_event_get(f, &ts, &name, &context) < 0) {
            if (errno == ENODATA)
                break;
            jobid_die(E.cmd, E.id, f);
        }
        if (!strcmp(name, "start") || !strcmp(name, "finish") ||
            !strcmp(name, "clean"))
            break;
        eddy_future_reset(f);
    }
    eddy_future_destroy(f);
    if (!(f = eddy_job_info(E.h, E.id)) || !(info = eddy_job_info_get(f)))
        jobid_die(E.cmd, E.id, f);
    n = eddy_jobinfo_ntasks(info);
    if (!(E.node_of = calloc(n ? n : 1, sizeof(*E.node_of))))
        cmd_die(E.cmd, "out of memory");
    for (uint32_t r = 0; r < n; r++) {
        struct eddy_taskinfo t;
        if (eddy_jobinfo_task(info, r, &t) == 0)
            E.node_of[r] = t.node;
    }
    E.nnode_of = n;
    eddy_jobinfo_destroy(info);
    eddy_future_destroy(f);
}

/* The task ranks not in --input-ranks, which get EOF at start. */
static void compute_eof_ranks(void)
{
    eddy_future_t *f;
    eddy_jobinfo_t *info;
    idset_t *want, *rest;
    eddy_error_t err;
    uint32_t n;

    if (!(f = eddy_job_info(E.h, E.id)) || !(info = eddy_job_info_get(f)))
        jobid_die(E.cmd, E.id, f);
    n = eddy_jobinfo_ntasks(info);
    eddy_jobinfo_destroy(info);
    eddy_future_destroy(f);
    if (!(want = idset_decode(E.io->input_ranks, &err)))
        cmd_die(E.cmd, "--input-ranks: %s", err.text);
    for (uint32_t r = idset_first(want); r != IDSET_INVALID;
         r = idset_next(want, r))
        if (r >= n)
            cmd_die(E.cmd,
                    "--input-ranks: rank %" PRIu32 " is not in job %" PRIu64
                    " (%" PRIu32 " tasks)",
                    r, E.id, n);
    if (!(rest = idset_create()))
        cmd_die(E.cmd, "out of memory");
    for (uint32_t r = 0; r < n; r++)
        if (!idset_test(want, r) && idset_set(rest, r) < 0)
            cmd_die(E.cmd, "out of memory");
    if (idset_count(rest) > 0 && !(E.eof_ranks = idset_encode(rest)))
        cmd_die(E.cmd, "out of memory");
    idset_destroy(rest);
    idset_destroy(want);
}

static bool uses_node(const char *tmpl)
{
    return tmpl && strstr(tmpl, "{{node}}");
}

/* Stop what we added to the loop; flush partial lines; close files. */
static void finish(void)
{
    E.finishing = true;
    stdin_stop();
    if (E.poll_init)
        uv_close((uv_handle_t *)&E.poll, NULL);
    if (E.idle_init)
        uv_close((uv_handle_t *)&E.idle, NULL);
    if (E.sig_init) {
        uv_close((uv_handle_t *)&E.sigint, NULL);
        uv_close((uv_handle_t *)&E.sigterm, NULL);
    }
    eddy_future_destroy(E.attach);
    eddy_future_destroy(E.events);
    E.attach = E.events = NULL;
    uv_run(E.loop, UV_RUN_NOWAIT);
    if (E.in_started && E.in_fd == STDIN_FILENO && E.in_flags >= 0)
        (void)fcntl(STDIN_FILENO, F_SETFL, E.in_flags);
    if (E.in_started && E.in_fd > STDERR_FILENO)
        close(E.in_fd);
    for (size_t r = 0; r < E.ntasks; r++) {
        char prefix[32];

        if (!E.tasks[r].seen)
            continue;
        snprintf(prefix, sizeof(prefix), "%zu: ", r);
        for (int i = 0; i < 2; i++)
            if (lineout_flush(&E.tasks[r].lb[i], E.tasks[r].fd[i], prefix) < 0)
                label_failed();
    }
    for (size_t i = 0; i < E.nfiles; i++) {
        if (close(E.files[i].fd) < 0 && !E.output_failed) {
            cmd_warn(E.cmd, "%s: %s", E.files[i].path, strerror(errno));
            E.output_failed = true;
        }
        free(E.files[i].path);
    }
    free(E.files);
    free(E.tasks);
    free(E.node_of);
    free(E.eof_ranks);
}

int jobio_attach(const char *cmd,
                 eddy_t *h,
                 eddy_jobid_t id,
                 const struct jobio *io)
{
    eddy_future_t *f;
    const char *exception = NULL;
    int status = 0;

    memset(&E, 0, sizeof(E));
    E.cmd = cmd;
    E.h = h;
    E.loop = eddy_get_loop(h);
    E.id = id;
    E.io = io;
    E.in_flags = -1;

    /* 1. what we must know before output flows */
    if (uses_node(io->output) || uses_node(io->error))
        learn_nodes();
    if (io->forward_stdin && io->input_ranks)
        compute_eof_ranks();

    /* 2. attach to the output and the eventlog; run until both end */
    if (io->signals)
        signals_init();
    if (!(E.attach = eddy_job_attach(h, id, on_output, NULL)) ||
        eddy_future_then(E.attach, -1, on_attach_done, NULL) < 0)
        cmd_die(cmd, "job %" PRIu64 ": cannot attach: %s", id, strerror(errno));
    if (!(E.events = eddy_job_event_watch(h, id, EDDY_JOB_EVENT_FOLLOW)) ||
        eddy_future_then(E.events, -1, on_event, NULL) < 0)
        cmd_die(cmd, "job %" PRIu64 ": cannot watch: %s", id, strerror(errno));
    while (!(E.attach_done && E.events_done) && !E.aborted) {
        if (uv_run(E.loop, UV_RUN_DEFAULT) == 0 &&
            !(E.attach_done && E.events_done) && !E.aborted)
            cmd_die(cmd, "job %" PRIu64 ": lost the connection to the instance",
                    id);
    }
    finish();
    if (E.aborted)
        return E.abort_status;

    /* 3. the job's status */
    if (!(f = eddy_job_wait(h, id)) ||
        eddy_job_wait_get(f, &status, &exception) < 0)
        jobid_die(cmd, id, f);
    eddy_future_destroy(f);
    if (status < 0)
        status = 1; /* never ran: the exception was printed */
    if (E.output_failed && status == 0)
        status = 1;
    return status;
}
