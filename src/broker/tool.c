/* tool.c - the "tool" service: tool daemons beside a job (docs/tools.md).
 *
 * Protocol (docs/tools.md):
 *   rank 0, from clients:
 *     tool.launch  {"id","cmd","env"?,"cwd"?,"nodes"?,"keep"?}
 *                  -> {"tool","nodes"} once every node was asked
 *     tool.attach  streaming {"tool","key"?}: the launch's log
 *     tool.credit  {"tool","key"?,"bytes"}: attach flow control
 *     tool.kill    {"tool","signum","nodes"?}
 *     tool.list    {"id"?}
 *   every rank, from rank 0:
 *     tool.spawn   streaming {"tool","id","cmd","env","cwd"?,"rank",
 *                  "size","keep"}: start the daemon; responses
 *                  "started", "output" (+ raw payload), "eof", and
 *                  "exit" (with EOS)
 *     tool.drain   {"tool","bytes"} (no response): rank 0 has taken that
 *                  much output off the node's hands
 *     tool.signal  {"tool","signum"}
 *
 * Rank 0 keeps one record per launch: which nodes run it and how each
 * ended, and an output log (outlog.h, the engine job-io uses) of every
 * node's output, end-of-stream, exit and failure, which the launcher and
 * later attachers replay.  Output flows from each node under a window:
 * a node stops reading its daemon's pipes while TOOL_WINDOW bytes wait
 * for rank 0's tool.drain, which rank 0 sends once the bytes are kept in
 * the log or, beyond its cap, sent to every attacher.  So a daemon that
 * prints faster than its attachers read is slowed down, never buffered
 * without bound.
 *
 * On each node a daemon runs in its own session (so its whole process
 * group can be signalled), in the job's tmpdir unless told otherwise.
 * When the job ends on the node (tool_job_end(), called by job-exec once
 * the shell is reaped), its daemons get SIGTERM and, after
 * TOOL_KILL_GRACE_MS, SIGKILL, except those launched with "keep"; the
 * tmpdir is handed to this service and removed once the job's last
 * daemon on the node is gone.  A daemon is "live" until its exit response
 * is sent, and freed once its libuv handles are closed.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>

#include "src/broker/job.h"
#include "src/broker/outlog.h"
#include "src/broker/procenv.h"
#include "src/broker/service.h"
#include "src/common/errprintf.h"
#include "src/common/idset.h"
#include "src/common/log.h"
#include "src/common/relpath.h"
#include "src/common/rmtree.h"

/* Output bytes a node sends before rank 0 must drain them. */
#define TOOL_WINDOW (256 * 1024)

/* One output response carries at most this many bytes. */
#define TOOL_CHUNK_MAX (64 * 1024)

/* What rank 0 keeps of one launch's output for later attachers. */
#define TOOL_OUTPUT_CAP (16u << 20)

/* Between SIGTERM and SIGKILL when the job ends or the broker stops (the
 * broker's shutdown hold lasts 3 s). */
#define TOOL_KILL_GRACE_MS 1500

/* Finished launches rank 0 keeps (for attach and list) beyond the live
 * ones, and the output they may hold together; the oldest go first. */
#define TOOL_FINISHED_MAX 256
#define TOOL_FINISHED_BYTES (64u << 20)

/* After a daemon exits, how long its pipes may stay open: a descendant
 * that left its process group (setsid) and kept stdout would otherwise
 * hold the launch, the job's tmpdir and the broker's shutdown forever. */
#define TOOL_EOF_GRACE_MS 1000

/* Launches rank 0 runs at once: each keeps up to TOOL_OUTPUT_CAP of
 * output, so this bounds rank 0's memory (64 x 16 MiB). */
#define TOOL_LIVE_MAX 64

/* Variables a daemon gets beyond the broker's environment. */
#define TOOL_ENV_VARS 7

struct tool_ctx;

/* --- rank 0: launches ------------------------------------------------------
 */

enum tnode_state { TN_STARTING, TN_RUNNING, TN_EXITED, TN_FAILED };

struct tnode {
    struct tool *t;
    uint32_t rank;
    broker_rpc_t *rpc; /* tool.spawn, until its final response */
    enum tnode_state state;
    int status; /* TN_EXITED: wait status */
    int errnum; /* TN_FAILED */
    char *errstr;
    char *host;
    int64_t pid;
};

struct tool {
    struct tool_ctx *ctx;
    struct tool *prev, *next;
    uint64_t id;
    uint64_t jobid;
    json_t *cmd;
    bool keep;
    char *nodes; /* idset of the broker ranks it runs on */
    struct tnode *n;
    size_t nn;
    size_t ndone; /* nodes exited or failed */
    outlog_t *log;
};

/* A record beyond the log's cap: once freed, rank 0 drains its node. */
struct held {
    struct tool_ctx *ctx;
    uint64_t tool;
    uint32_t rank;
    size_t len;
};

/* --- every rank: daemons ---------------------------------------------------
 */

struct daemon {
    struct tool_ctx *ctx; /* NULL once the service is destroyed */
    struct daemon *prev, *next;
    uint64_t tool;
    uint64_t jobid;
    broker_req_t *req; /* tool.spawn, until the exit response */
    uv_process_t proc;
    uv_pipe_t out, err;
    uv_timer_t timer; /* the SIGKILL grace */
    int handles;      /* initialized and not yet closed */
    bool spawned;
    bool keep;
    bool out_eof, err_eof;
    bool exited;
    bool finished; /* exit response sent: no longer live */
    bool paused;   /* reads stopped: window full */
    bool discard;  /* nobody will drain its output: read and drop it */
    size_t unacked;
    int64_t exit_status;
    int term_signal;
};

/* A job's tmpdir handed over by job-exec while daemons of the job ran. */
struct jdir {
    uint64_t jobid;
    char *path;
    struct jdir *next;
};

struct tool_ctx {
    broker_t *b;
    uint64_t next_id; /* rank 0 */
    struct tool *tools, *tools_tail;
    size_t nfinished;
    struct daemon *daemons; /* every daemon not yet freed */
    struct jdir *dirs;
    bool shutting_down;
    bool holding;
    bool destroying; /* no more messages: the broker is going away */
    char readbuf[TOOL_CHUNK_MAX];
};

static json_t *req_body(broker_req_t *req)
{
    return broker_req_msg(req)->body;
}

static bool is_rank0(broker_req_t *req, struct tool_ctx *ctx)
{
    if (broker_rank(ctx->b) == 0)
        return true;
    broker_respond_error(req, EINVAL, "rank %u: %s is served by rank 0",
                         broker_rank(ctx->b), broker_req_msg(req)->topic);
    return false;
}

/* ===== every rank: the daemons ============================================ */

static unsigned live_count(const struct tool_ctx *ctx)
{
    unsigned n = 0;

    for (const struct daemon *d = ctx->daemons; d; d = d->next)
        if (!d->finished)
            n++;
    return n;
}

static bool job_has_daemons(const struct tool_ctx *ctx, uint64_t jobid)
{
    for (const struct daemon *d = ctx->daemons; d; d = d->next)
        if (!d->finished && d->jobid == jobid)
            return true;
    return false;
}

static void jdir_remove(struct tool_ctx *ctx, struct jdir *dir)
{
    eddy_error_t err = {{0}};

    if (rmtree(dir->path, &err) < 0 && errno != ENOENT)
        broker_log(ctx->b, LOG_LEVEL_ERR,
                   "tool: job %ju: cannot remove its tmpdir: %s",
                   (uintmax_t)dir->jobid, err.text);
    else
        broker_log(ctx->b, LOG_LEVEL_DEBUG,
                   "tool: job %ju: removed %s after its last tool daemon",
                   (uintmax_t)dir->jobid, dir->path);
    free(dir->path);
    free(dir);
}

/* Remove the tmpdir of 'jobid' if this service holds it and no daemon of
 * the job runs any more. */
static void jdir_check(struct tool_ctx *ctx, uint64_t jobid)
{
    for (struct jdir **pp = &ctx->dirs; *pp; pp = &(*pp)->next) {
        if ((*pp)->jobid == jobid) {
            struct jdir *dir = *pp;
            if (job_has_daemons(ctx, jobid))
                return;
            *pp = dir->next;
            jdir_remove(ctx, dir);
            return;
        }
    }
}

static void shutdown_release_check(struct tool_ctx *ctx)
{
    if (ctx->holding && live_count(ctx) == 0) {
        ctx->holding = false;
        broker_shutdown_release(ctx->b);
    }
}

static void daemon_free(struct daemon *d)
{
    if (d->ctx) {
        if (d->prev)
            d->prev->next = d->next;
        else
            d->ctx->daemons = d->next;
        if (d->next)
            d->next->prev = d->prev;
    }
    broker_req_decref(d->req);
    free(d);
}

static void handle_closed(uv_handle_t *h)
{
    struct daemon *d = h->data;

    if (--d->handles == 0)
        daemon_free(d);
}

static void close_handle(struct daemon *d, uv_handle_t *h)
{
    if (h->data == d && !uv_is_closing(h))
        uv_close(h, handle_closed);
}

static void daemon_close(struct daemon *d)
{
    close_handle(d, (uv_handle_t *)&d->proc);
    close_handle(d, (uv_handle_t *)&d->out);
    close_handle(d, (uv_handle_t *)&d->err);
    close_handle(d, (uv_handle_t *)&d->timer);
}

static void daemon_signal(struct daemon *d, int signum)
{
    if (d->spawned && !d->exited)
        (void)kill(-d->proc.pid, signum);
}

static void daemon_respond(
    struct daemon *d, json_t *o, const void *data, size_t len, int flags)
{
    if (!o || broker_respond(d->req, o, data, len, flags) < 0)
        broker_log(d->ctx->b, LOG_LEVEL_ERR,
                   "tool: %ju: cannot respond to rank 0: %s",
                   (uintmax_t)d->tool, strerror(errno));
}

/* Once the process has exited and both pipes reached EOF: the exit
 * response ends the stream. */
static void daemon_check_done(struct daemon *d)
{
    struct tool_ctx *ctx = d->ctx;
    int status;

    if (d->finished || !ctx || !d->exited || !d->out_eof || !d->err_eof)
        return;
    d->finished = true;
    status = d->term_signal ? d->term_signal & 0x7f
                            : (int)((d->exit_status & 0xff) << 8);
    daemon_respond(d, json_pack("{s:s s:i}", "type", "exit", "status", status),
                   NULL, 0, MSG_FLAG_EOS);
    daemon_close(d);
    jdir_check(ctx, d->jobid);
    shutdown_release_check(ctx);
}

static void read_stop(struct daemon *d);

/* The daemon exited some time ago and a pipe is still open: whatever
 * holds it escaped the daemon's process group.  End the streams here. */
static void on_eof_grace(uv_timer_t *t)
{
    struct daemon *d = t->data;
    static const char *const names[] = {"stdout", "stderr"};
    bool *eof[] = {&d->out_eof, &d->err_eof};

    if (!d->ctx || d->finished)
        return;
    read_stop(d);
    for (int i = 0; i < 2; i++) {
        if (*eof[i])
            continue;
        *eof[i] = true;
        daemon_respond(
            d, json_pack("{s:s s:s}", "type", "eof", "stream", names[i]), NULL,
            0, 0);
    }
    broker_log(d->ctx->b, LOG_LEVEL_WARNING,
               "tool: %ju: a process that left the daemon's process group "
               "still holds its output; not waiting for it",
               (uintmax_t)d->tool);
    daemon_check_done(d);
}

static void on_daemon_exit(uv_process_t *h,
                           int64_t exit_status,
                           int term_signal)
{
    struct daemon *d = h->data;

    d->exited = true;
    d->exit_status = exit_status;
    d->term_signal = term_signal;
    /* anything left in its group goes with it */
    (void)kill(-h->pid, SIGKILL);
    if (!d->out_eof || !d->err_eof) {
        /* what it wrote is still being read (under the window); do not
         * wait for a descendant that got away */
        uv_timer_stop(&d->timer);
        uv_timer_start(&d->timer, on_eof_grace, TOOL_EOF_GRACE_MS, 0);
    }
    daemon_check_done(d);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct daemon *d = h->data;

    (void)suggested;
    if (d->ctx) {
        buf->base = d->ctx->readbuf;
        buf->len = sizeof(d->ctx->readbuf);
    } else {
        buf->base = NULL;
        buf->len = 0;
    }
}

static void read_stop(struct daemon *d)
{
    if (!d->out_eof)
        uv_read_stop((uv_stream_t *)&d->out);
    if (!d->err_eof)
        uv_read_stop((uv_stream_t *)&d->err);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void read_start(struct daemon *d)
{
    if (!d->out_eof)
        uv_read_start((uv_stream_t *)&d->out, on_alloc, on_read);
    if (!d->err_eof)
        uv_read_start((uv_stream_t *)&d->err, on_alloc, on_read);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct daemon *d = s->data;
    bool is_out = s == (uv_stream_t *)&d->out;
    const char *stream = is_out ? "stdout" : "stderr";

    if (nread == 0 || !d->ctx)
        return;
    if (nread < 0) {
        uv_read_stop(s);
        if (is_out)
            d->out_eof = true;
        else
            d->err_eof = true;
        daemon_respond(d,
                       json_pack("{s:s s:s}", "type", "eof", "stream", stream),
                       NULL, 0, 0);
        daemon_check_done(d);
        return;
    }
    if (d->discard)
        return;
    daemon_respond(d,
                   json_pack("{s:s s:s}", "type", "output", "stream", stream),
                   buf->base, (size_t)nread, 0);
    d->unacked += (size_t)nread;
    if (d->unacked >= TOOL_WINDOW && !d->paused) {
        d->paused = true;
        read_stop(d);
    }
}

static void on_grace(uv_timer_t *t)
{
    struct daemon *d = t->data;

    daemon_signal(d, SIGKILL);
}

/* SIGTERM now, SIGKILL after the grace period if it still runs. */
static void daemon_terminate(struct daemon *d)
{
    if (!d->spawned || d->exited)
        return;
    daemon_signal(d, SIGTERM);
    if (!uv_is_active((uv_handle_t *)&d->timer))
        uv_timer_start(&d->timer, on_grace, TOOL_KILL_GRACE_MS, 0);
}

/* Nobody will drain this daemon's output any more (rank 0 is gone, or
 * the broker is stopping): read and drop it, so that its pipes reach EOF
 * and it can finish. */
static void daemon_discard(struct daemon *d)
{
    d->discard = true;
    if (d->paused) {
        d->paused = false;
        read_start(d);
    }
}

static struct daemon *daemon_lookup(struct tool_ctx *ctx, uint64_t tool)
{
    for (struct daemon *d = ctx->daemons; d; d = d->next)
        if (!d->finished && d->tool == tool)
            return d;
    return NULL;
}

/* Where the daemon starts: the tmpdir, a path under it, or an absolute
 * path.  Rank 0 refused ".." already. */
static char *daemon_cwd(const char *tmpdir, const char *cwd)
{
    char *path;

    if (!cwd || !*cwd)
        return strdup(tmpdir);
    if (cwd[0] == '/')
        return strdup(cwd);
    if (asprintf(&path, "%s/%s", tmpdir, cwd) < 0)
        return NULL;
    return path;
}

static char **daemon_env(struct tool_ctx *ctx,
                         uint64_t tool,
                         uint64_t jobid,
                         const char *tmpdir,
                         const char *tasks,
                         json_int_t rank,
                         json_int_t size,
                         const json_t *vars)
{
    char **env = procenv_create(ctx->b, TOOL_ENV_VARS + json_object_size(vars));
    char num[4][24];

    if (!env)
        return NULL;
    snprintf(num[0], sizeof(num[0]), "%ju", (uintmax_t)jobid);
    snprintf(num[1], sizeof(num[1]), "%ju", (uintmax_t)tool);
    snprintf(num[2], sizeof(num[2]), "%lld", (long long)rank);
    snprintf(num[3], sizeof(num[3]), "%lld", (long long)size);
    if (procenv_set(env, "EDDY_JOB_ID", num[0]) < 0 ||
        procenv_set(env, "EDDY_JOB_TMPDIR", tmpdir) < 0 ||
        procenv_set(env, "EDDY_TOOL_ID", num[1]) < 0 ||
        procenv_set(env, "EDDY_TOOL_RANK", num[2]) < 0 ||
        procenv_set(env, "EDDY_TOOL_SIZE", num[3]) < 0 ||
        procenv_set(env, "EDDY_TOOL_TASKS", tasks) < 0 ||
        (vars && procenv_apply(env, vars) < 0)) {
        procenv_destroy(env);
        return NULL;
    }
    return env;
}

static int daemon_spawn(struct daemon *d,
                        json_t *cmd,
                        char **env,
                        const char *cwd)
{
    struct tool_ctx *ctx = d->ctx;
    uv_loop_t *loop = broker_loop(ctx->b);
    uv_process_options_t opts = {0};
    uv_stdio_container_t stdio[3];
    size_t n = json_array_size(cmd), i;
    char **argv;
    int rc;

    d->out.data = d->err.data = d->timer.data = d;
    uv_pipe_init(loop, &d->out, 0);
    uv_pipe_init(loop, &d->err, 0);
    uv_timer_init(loop, &d->timer);
    d->handles = 3;
    if (!(argv = calloc(n + 1, sizeof(*argv)))) {
        errno = ENOMEM;
        return -1;
    }
    for (i = 0; i < n; i++)
        argv[i] = (char *)json_string_value(json_array_get(cmd, i));
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&d->out;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&d->err;
    opts.exit_cb = on_daemon_exit;
    opts.file = argv[0];
    opts.args = argv;
    opts.env = env;
    opts.cwd = cwd;
    opts.flags = UV_PROCESS_DETACHED; /* own session and process group */
    opts.stdio_count = 3;
    opts.stdio = stdio;
    d->proc.data = d;
    d->handles++; /* uv_spawn initializes the handle even when it fails */
    rc = uv_spawn(loop, &d->proc, &opts);
    free(argv);
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    d->spawned = true;
    read_start(d);
    return 0;
}

/* A relative cwd must stay under the tmpdir: no ".." component. */
static bool cwd_escapes(const char *cwd)
{
    return cwd && cwd[0] != '/' && relpath_has_dotdot(cwd);
}

static bool valid_env(const json_t *vars)
{
    const char *key;
    json_t *val;

    if (!vars)
        return true;
    if (!json_is_object(vars))
        return false;
    json_object_foreach((json_t *)vars, key, val)
    {
        if (!*key || strchr(key, '=') || !json_is_string(val))
            return false;
    }
    return true;
}

static bool valid_cmd(const json_t *cmd)
{
    size_t i;
    json_t *s;

    if (!json_is_array(cmd) || json_array_size(cmd) == 0)
        return false;
    json_array_foreach(cmd, i, s)
    {
        if (!json_is_string(s) || (i == 0 && !*json_string_value(s)))
            return false;
    }
    return true;
}

static void spawn_cancel(struct tool_ctx *ctx, broker_req_t *req)
{
    for (struct daemon *d = ctx->daemons; d; d = d->next) {
        if (!d->finished && d->req && broker_req_same(d->req, req)) {
            broker_log(ctx->b, LOG_LEVEL_DEBUG,
                       "tool: %ju: rank 0 cancelled: terminating",
                       (uintmax_t)d->tool);
            daemon_terminate(d);
        }
    }
}

static void spawn_handler(broker_req_t *req, void *arg)
{
    struct tool_ctx *ctx = arg;
    json_t *body = req_body(req);
    struct jexec_ctx *jx = broker_service_ctx(ctx->b, "job-exec");
    json_int_t tool, id, rank, size;
    json_t *cmd, *vars = NULL;
    const char *cwd = NULL, *tmpdir;
    int keep = 0;
    char *tasks = NULL, *dir = NULL, **env = NULL;
    struct daemon *d = NULL;
    int errnum;

    if (broker_req_is_cancel(req)) {
        spawn_cancel(ctx, req);
        return;
    }
    if (json_unpack(body, "{s:I s:I s:o s?o s?s s:I s:I s?b}", "tool", &tool,
                    "id", &id, "cmd", &cmd, "env", &vars, "cwd", &cwd, "rank",
                    &rank, "size", &size, "keep", &keep) < 0 ||
        !valid_cmd(cmd) || !valid_env(vars) || cwd_escapes(cwd) ||
        !broker_req_is_streaming(req)) {
        broker_respond_error(req, EPROTO, "tool.spawn: malformed request");
        return;
    }
    if (ctx->shutting_down) {
        broker_respond_error(req, ESHUTDOWN, "rank %u (%s): shutting down",
                             broker_rank(ctx->b), broker_hostname(ctx->b));
        return;
    }
    if (!(tmpdir = job_exec_tmpdir(jx, (uint64_t)id)) ||
        !(tasks = job_exec_tasklist(jx, (uint64_t)id))) {
        errnum = errno;
        broker_respond_error(req, errnum, "rank %u (%s): job %lld %s",
                             broker_rank(ctx->b), broker_hostname(ctx->b),
                             (long long)id,
                             errnum == EAGAIN ? "has not started its tasks"
                                              : "does not run here (ended?)");
        return;
    }
    if (!(dir = daemon_cwd(tmpdir, cwd)) ||
        !(env = daemon_env(ctx, (uint64_t)tool, (uint64_t)id, tmpdir, tasks,
                           rank, size, vars)) ||
        !(d = calloc(1, sizeof(*d)))) {
        broker_respond_error(req, ENOMEM, "rank %u (%s): out of memory",
                             broker_rank(ctx->b), broker_hostname(ctx->b));
        goto done;
    }
    d->ctx = ctx;
    d->tool = (uint64_t)tool;
    d->jobid = (uint64_t)id;
    d->keep = keep;
    d->req = broker_req_incref(req);
    d->next = ctx->daemons;
    if (ctx->daemons)
        ctx->daemons->prev = d;
    ctx->daemons = d;
    if (daemon_spawn(d, cmd, env, dir) < 0) {
        errnum = errno;
        d->finished = true;
        broker_respond_error(req, errnum, "rank %u (%s): cannot start %s: %s",
                             broker_rank(ctx->b), broker_hostname(ctx->b),
                             json_string_value(json_array_get(cmd, 0)),
                             strerror(errnum));
        daemon_close(d);
        goto done;
    }
    daemon_respond(d,
                   json_pack("{s:s s:I s:s}", "type", "started", "pid",
                             (json_int_t)d->proc.pid, "host",
                             broker_hostname(ctx->b)),
                   NULL, 0, 0);
done:
    procenv_destroy(env);
    free(dir);
    free(tasks);
}

static void drain_handler(broker_req_t *req, void *arg)
{
    struct tool_ctx *ctx = arg;
    json_int_t tool, bytes;
    struct daemon *d;

    if (broker_req_is_cancel(req))
        return;
    if (json_unpack(req_body(req), "{s:I s:I}", "tool", &tool, "bytes",
                    &bytes) < 0 ||
        bytes < 0) {
        broker_respond_error(req, EPROTO, "tool.drain: malformed request");
        return;
    }
    broker_respond(req, json_object(), NULL, 0, 0);
    if (!(d = daemon_lookup(ctx, (uint64_t)tool)))
        return;
    d->unacked = (uint64_t)bytes < d->unacked ? d->unacked - (size_t)bytes : 0;
    if (d->paused && d->unacked < TOOL_WINDOW) {
        d->paused = false;
        read_start(d);
    }
}

static void signal_handler(broker_req_t *req, void *arg)
{
    struct tool_ctx *ctx = arg;
    json_int_t tool;
    int signum;
    struct daemon *d;

    if (broker_req_is_cancel(req))
        return;
    if (json_unpack(req_body(req), "{s:I s:i}", "tool", &tool, "signum",
                    &signum) < 0 ||
        signum <= 0 || signum >= NSIG) {
        broker_respond_error(req, EPROTO, "tool.signal: malformed request");
        return;
    }
    if ((d = daemon_lookup(ctx, (uint64_t)tool)))
        daemon_signal(d, signum);
    broker_respond(req, json_object(), NULL, 0, 0);
}

bool tool_job_end(struct tool_ctx *ctx, uint64_t id, char *tmpdir)
{
    struct jdir *dir;

    if (!ctx)
        return false;
    for (struct daemon *d = ctx->daemons; d; d = d->next) {
        if (d->finished || d->jobid != id)
            continue;
        if (d->keep)
            broker_log(ctx->b, LOG_LEVEL_DEBUG,
                       "tool: %ju: job %ju ended; kept running",
                       (uintmax_t)d->tool, (uintmax_t)id);
        else
            daemon_terminate(d);
    }
    if (!tmpdir || !job_has_daemons(ctx, id))
        return false;
    if (!(dir = calloc(1, sizeof(*dir)))) {
        /* cannot wait for them: the caller removes it now */
        broker_log(ctx->b, LOG_LEVEL_ERR, "tool: job %ju: out of memory",
                   (uintmax_t)id);
        return false;
    }
    dir->jobid = id;
    dir->path = tmpdir;
    dir->next = ctx->dirs;
    ctx->dirs = dir;
    return true;
}

/* ===== rank 0: launches =================================================== */

static struct tool *tool_lookup(struct tool_ctx *ctx, uint64_t id)
{
    for (struct tool *t = ctx->tools; t; t = t->next)
        if (t->id == id)
            return t;
    return NULL;
}

static void tool_destroy(struct tool *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->nn; i++) {
        broker_rpc_destroy(t->n[i].rpc);
        free(t->n[i].errstr);
        free(t->n[i].host);
    }
    free(t->n);
    /* held records may drain nodes: the ctx is still there */
    outlog_destroy(t->log);
    json_decref(t->cmd);
    free(t->nodes);
    free(t);
}

static void tool_unlink(struct tool_ctx *ctx, struct tool *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        ctx->tools = t->next;
    if (t->next)
        t->next->prev = t->prev;
    else
        ctx->tools_tail = t->prev;
}

/* Launches whose daemons have not all exited or failed. */
static unsigned live_launches(const struct tool_ctx *ctx)
{
    unsigned n = 0;

    for (const struct tool *t = ctx->tools; t; t = t->next)
        if (t->ndone < t->nn)
            n++;
    return n;
}

/* Bytes the finished launches' logs keep. */
static uint64_t finished_bytes(const struct tool_ctx *ctx)
{
    uint64_t n = 0;

    for (const struct tool *t = ctx->tools; t; t = t->next)
        if (t->ndone == t->nn)
            n += outlog_kept(t->log);
    return n;
}

/* Keep at most TOOL_FINISHED_MAX finished launches holding at most
 * TOOL_FINISHED_BYTES of output: drop the oldest.  Never 'busy' (the
 * launch whose last node just reported, still in use by the caller) nor
 * one that attachers are still being sent (dropping it would leave them
 * waiting for an end that never comes). */
static void tools_trim(struct tool_ctx *ctx, const struct tool *busy)
{
    struct tool *t = ctx->tools, *next;
    uint64_t bytes = finished_bytes(ctx);

    for (; t &&
           (ctx->nfinished > TOOL_FINISHED_MAX || bytes > TOOL_FINISHED_BYTES);
         t = next) {
        next = t->next;
        if (t == busy || t->ndone < t->nn || outlog_nattachers(t->log) > 0)
            continue;
        bytes -= outlog_kept(t->log);
        tool_unlink(ctx, t);
        ctx->nfinished--;
        tool_destroy(t);
    }
}

static void send_drain(struct tool_ctx *ctx,
                       uint64_t tool,
                       uint32_t rank,
                       size_t len)
{
    broker_rpc_t *rpc;

    if (ctx->destroying)
        return;
    rpc = broker_rpc(ctx->b, "tool.drain", rank, BROKER_RPC_NORESPONSE,
                     json_pack("{s:I s:I}", "tool", (json_int_t)tool, "bytes",
                               (json_int_t)len),
                     NULL, 0, NULL, NULL);
    broker_rpc_destroy(rpc);
}

static void held_release(void *arg)
{
    struct held *h = arg;

    send_drain(h->ctx, h->tool, h->rank, h->len);
    free(h);
}

/* Append a record about node 'tn' (body stolen) to its launch's log. */
static void log_append(
    struct tnode *tn, json_t *o, const void *data, size_t len, bool keep)
{
    struct tool *t = tn->t;
    struct held *h = NULL;
    int rc;

    if (o &&
        (json_object_set_new(o, "node", json_integer(tn->rank)) < 0 ||
         json_object_set_new(o, "host", json_string(tn->host ? tn->host : ""))))
        goto nomem;
    if (len && !(h = calloc(1, sizeof(*h))))
        goto nomem;
    if (h) {
        h->ctx = t->ctx;
        h->tool = t->id;
        h->rank = tn->rank;
        h->len = len;
    }
    rc = outlog_append(t->log, o, data, len, keep, held_release, h);
    o = NULL;
    if (rc == 1)
        return; /* drained once freed */
    if (rc < 0)
        broker_log(t->ctx->b, LOG_LEVEL_ERR,
                   "tool: %ju: output of rank %u lost: %s", (uintmax_t)t->id,
                   tn->rank, strerror(errno));
    if (h)
        held_release(h);
    return;
nomem:
    json_decref(o);
    broker_log(t->ctx->b, LOG_LEVEL_ERR, "tool: %ju: out of memory",
               (uintmax_t)t->id);
    if (len)
        send_drain(t->ctx, t->id, tn->rank, len);
}

static void tnode_done(struct tnode *tn)
{
    struct tool *t = tn->t;

    broker_rpc_destroy(tn->rpc);
    tn->rpc = NULL;
    if (++t->ndone == t->nn) {
        outlog_end(t->log);
        t->ctx->nfinished++;
        tools_trim(t->ctx, t);
    }
}

static void tnode_fail(struct tnode *tn, int errnum, const char *errstr)
{
    tn->state = TN_FAILED;
    tn->errnum = errnum;
    free(tn->errstr);
    tn->errstr = strdup(errstr && *errstr ? errstr : strerror(errnum));
    log_append(tn,
               json_pack("{s:s s:i s:s}", "type", "failed", "errnum", errnum,
                         "errstr", tn->errstr ? tn->errstr : ""),
               NULL, 0, true);
}

static void on_spawn(broker_rpc_t *rpc, const msg_t *msg, void *arg)
{
    struct tnode *tn = arg;
    struct tool *t = tn->t;
    const char *type = NULL, *stream = NULL, *host = NULL;
    json_int_t pid = 0;
    int status = 0;

    (void)rpc;
    if (msg->errnum) {
        tnode_fail(tn, msg->errnum, msg_errstr(msg));
        tnode_done(tn);
        outlog_pump(t->log);
        return;
    }
    if (json_unpack(msg->body, "{s:s s?s s?s s?I s?i}", "type", &type, "stream",
                    &stream, "host", &host, "pid", &pid, "status",
                    &status) < 0) {
        if (msg->flags & MSG_FLAG_EOS) {
            tnode_fail(tn, EPROTO, "malformed tool.spawn response");
            tnode_done(tn);
            outlog_pump(t->log);
        }
        return;
    }
    if (!strcmp(type, "started")) {
        tn->state = TN_RUNNING;
        tn->pid = pid;
        free(tn->host);
        tn->host = host ? strdup(host) : NULL;
    } else if (!strcmp(type, "output") && stream) {
        log_append(tn,
                   json_pack("{s:s s:s}", "type", "output", "stream", stream),
                   msg->payload, msg->payload_len, false);
    } else if (!strcmp(type, "eof") && stream) {
        log_append(tn, json_pack("{s:s s:s}", "type", "eof", "stream", stream),
                   NULL, 0, true);
    } else if (!strcmp(type, "exit")) {
        tn->state = TN_EXITED;
        tn->status = status;
        log_append(tn, json_pack("{s:s s:i}", "type", "exit", "status", status),
                   NULL, 0, true);
    }
    if (msg->flags & MSG_FLAG_EOS) {
        if (tn->state != TN_EXITED)
            tnode_fail(tn, EPROTO, "tool.spawn ended without an exit");
        tnode_done(tn);
    }
    outlog_pump(t->log);
}

static void launch_handler(broker_req_t *req, void *arg)
{
    struct tool_ctx *ctx = arg;
    json_t *body = req_body(req);
    json_int_t id;
    json_t *cmd, *vars = NULL;
    const char *cwd = NULL, *nodes = NULL;
    int keep = 0;
    char *ranks = NULL;
    uint32_t ntasks;
    idset_t *job_nodes = NULL, *chosen = NULL;
    struct tool *t = NULL;
    eddy_error_t err = {{0}};
    uint32_t r, index;
    size_t i;

    if (broker_req_is_cancel(req) || !is_rank0(req, ctx))
        return;
    if (json_unpack(body, "{s:I s:o s?o s?s s?s s?b}", "id", &id, "cmd", &cmd,
                    "env", &vars, "cwd", &cwd, "nodes", &nodes, "keep",
                    &keep) < 0 ||
        id < 0 || !valid_cmd(cmd) || !valid_env(vars)) {
        broker_respond_error(req, EPROTO,
                             "tool.launch: expected {\"id\", \"cmd\": [strings]"
                             ", \"env\"?: {NAME: string}, \"cwd\"?, "
                             "\"nodes\"?, \"keep\"?}");
        return;
    }
    if (cwd_escapes(cwd)) {
        broker_respond_error(req, EINVAL,
                             "job %lld: cwd '%s' leaves the job tmpdir ('..')",
                             (long long)id, cwd);
        return;
    }
    if (live_launches(ctx) >= TOOL_LIVE_MAX) {
        broker_respond_error(req, EAGAIN,
                             "job %lld: %d tool launches already run "
                             "(the most the instance keeps output for); "
                             "kill or wait for one",
                             (long long)id, TOOL_LIVE_MAX);
        return;
    }
    if (job_manager_job_ranks(broker_service_ctx(ctx->b, "job"), (uint64_t)id,
                              JOB_RANKS_STARTED, &ranks, &ntasks, &err) < 0) {
        broker_respond_error(req, errno, "%s", err.text);
        return;
    }
    if (!(job_nodes = idset_decode(ranks, NULL))) {
        broker_respond_error(req, ENOMEM, "job %lld: out of memory",
                             (long long)id);
        goto done;
    }
    if (nodes) {
        if (!(chosen = idset_decode(nodes, NULL)) || idset_count(chosen) == 0) {
            broker_respond_error(req, EINVAL,
                                 "job %lld: nodes '%s' is not a non-empty "
                                 "idset",
                                 (long long)id, nodes);
            goto done;
        }
        for (r = idset_first(chosen); r != IDSET_INVALID;
             r = idset_next(chosen, r))
            if (!idset_test(job_nodes, r)) {
                broker_respond_error(req, EINVAL,
                                     "job %lld: rank %u is not one of its "
                                     "nodes (%s)",
                                     (long long)id, r, ranks);
                goto done;
            }
    }
    if (!(t = calloc(1, sizeof(*t))) ||
        !(t->n = calloc(idset_count(chosen ? chosen : job_nodes),
                        sizeof(*t->n))) ||
        !(t->log = outlog_create(TOOL_OUTPUT_CAP)) ||
        !(t->nodes = idset_encode(chosen ? chosen : job_nodes))) {
        broker_respond_error(req, ENOMEM, "job %lld: out of memory",
                             (long long)id);
        goto done;
    }
    t->ctx = ctx;
    t->id = ++ctx->next_id;
    t->jobid = (uint64_t)id;
    t->cmd = json_incref(cmd);
    t->keep = keep;
    /* its index among all the job's nodes, whichever it runs on */
    for (r = idset_first(job_nodes), index = 0; r != IDSET_INVALID;
         r = idset_next(job_nodes, r), index++) {
        struct tnode *tn;
        json_t *o;

        if (chosen && !idset_test(chosen, r))
            continue;
        tn = &t->n[t->nn++];
        tn->t = t;
        tn->rank = r;
        o = json_pack("{s:I s:I s:O s:s* s:I s:I s:b}", "tool",
                      (json_int_t)t->id, "id", id, "cmd", cmd, "cwd", cwd,
                      "rank", (json_int_t)index, "size",
                      (json_int_t)idset_count(job_nodes), "keep", keep);
        if (o && vars)
            json_object_set(o, "env", vars);
        if (!(tn->rpc =
                  broker_rpc(ctx->b, "tool.spawn", r, BROKER_RPC_STREAMING, o,
                             NULL, 0, on_spawn, tn))) {
            /* answered below, with the other nodes */
            tn->state = TN_FAILED;
            tn->errnum = errno;
            tn->errstr = strdup(strerror(errno));
        }
    }
    t->prev = ctx->tools_tail;
    if (ctx->tools_tail)
        ctx->tools_tail->next = t;
    else
        ctx->tools = t;
    ctx->tools_tail = t;
    broker_respond(
        req,
        json_pack("{s:I s:s}", "tool", (json_int_t)t->id, "nodes", t->nodes),
        NULL, 0, 0);
    for (i = 0; i < t->nn; i++)
        if (!t->n[i].rpc) {
            int errnum = t->n[i].errnum;
            char *errstr = t->n[i].errstr;
            t->n[i].errstr = NULL;
            tnode_fail(&t->n[i], errnum, errstr);
            free(errstr);
            tnode_done(&t->n[i]);
        }
    t = NULL;
done:
    tool_destroy(t);
    idset_destroy(chosen);
    idset_destroy(job_nodes);
    free(ranks);
}

/* Decode "tool" and find the launch; respond with an error if none. */
static struct tool *req_tool(struct tool_ctx *ctx, broker_req_t *req)
{
    json_int_t id;
    struct tool *t;

    if (!is_rank0(req, ctx))
        return NULL;
    if (json_unpack(req_body(req), "{s:I}", "tool", &id) < 0 || id < 0) {
        broker_respond_error(req, EPROTO, "%s: expected {\"tool\": tool id}",
                             broker_req_msg(req)->topic);
        return NULL;
    }
    if (!(t = tool_lookup(ctx, (uint64_t)id))) {
        broker_respond_error(req, ENOENT, "tool %lld: no such tool launch",
                             (long long)id);
        return NULL;
    }
    return t;
}

static void attach_handler(broker_req_t *req, void *arg)
{
    struct tool_ctx *ctx = arg;
    struct tool *t;
    json_int_t key = 0;

    if (broker_req_is_cancel(req)) {
        for (t = ctx->tools; t; t = t->next)
            if (outlog_cancel(t->log, req))
                break;
        return;
    }
    if (!(t = req_tool(ctx, req)))
        return;
    if (json_unpack(req_body(req), "{s?I}", "key", &key) < 0 ||
        !broker_req_is_streaming(req)) {
        broker_respond_error(req, EPROTO,
                             "tool.attach: expected a streaming request "
                             "{\"tool\", \"key\"?: integer}");
        return;
    }
    if (outlog_attach(t->log, req, (uint64_t)key) < 0)
        broker_respond_error(req, ENOMEM, "tool %ju: out of memory",
                             (uintmax_t)t->id);
}

static void credit_handler(broker_req_t *req, void *arg)
{
    struct tool_ctx *ctx = arg;
    struct tool *t;
    json_int_t key = 0, bytes;

    if (broker_req_is_cancel(req) || !(t = req_tool(ctx, req)))
        return;
    if (json_unpack(req_body(req), "{s?I s:I}", "key", &key, "bytes", &bytes) <
            0 ||
        bytes < 0) {
        broker_respond_error(req, EPROTO,
                             "tool.credit: expected {\"tool\", \"key\"?, "
                             "\"bytes\": integer >= 0}");
        return;
    }
    broker_respond(req, json_object(), NULL, 0, 0);
    outlog_credit(t->log, broker_req_origin(req), (uint64_t)key,
                  (uint64_t)bytes);
}

static void kill_handler(broker_req_t *req, void *arg)
{
    struct tool_ctx *ctx = arg;
    struct tool *t;
    int signum;
    const char *nodes = NULL;
    idset_t *chosen = NULL;
    size_t i;

    if (broker_req_is_cancel(req) || !(t = req_tool(ctx, req)))
        return;
    if (json_unpack(req_body(req), "{s:i s?s}", "signum", &signum, "nodes",
                    &nodes) < 0) {
        broker_respond_error(req, EPROTO,
                             "tool.kill: expected {\"tool\", \"signum\", "
                             "\"nodes\"?}");
        return;
    }
    if (signum <= 0 || signum >= NSIG) {
        broker_respond_error(req, EINVAL, "tool %ju: %d is not a signal",
                             (uintmax_t)t->id, signum);
        return;
    }
    if (nodes && !(chosen = idset_decode(nodes, NULL))) {
        broker_respond_error(req, EINVAL,
                             "tool %ju: nodes '%s' is not an idset",
                             (uintmax_t)t->id, nodes);
        return;
    }
    for (i = 0; i < t->nn; i++) {
        struct tnode *tn = &t->n[i];
        broker_rpc_t *rpc;

        if (!tn->rpc || (chosen && !idset_test(chosen, tn->rank)))
            continue;
        rpc = broker_rpc(
            ctx->b, "tool.signal", tn->rank, BROKER_RPC_NORESPONSE,
            json_pack("{s:I s:i}", "tool", (json_int_t)t->id, "signum", signum),
            NULL, 0, NULL, NULL);
        broker_rpc_destroy(rpc);
    }
    idset_destroy(chosen);
    broker_respond(req, json_object(), NULL, 0, 0);
}

static json_t *tool_json(const struct tool *t)
{
    idset_t *running = idset_create();
    json_t *exits = json_array(), *failed = json_array(), *o = NULL;
    char *run = NULL;

    if (!running || !exits || !failed)
        goto done;
    for (size_t i = 0; i < t->nn; i++) {
        const struct tnode *tn = &t->n[i];
        if (tn->state == TN_EXITED)
            json_array_append_new(
                exits, json_pack("[I i]", (json_int_t)tn->rank, tn->status));
        else if (tn->state == TN_FAILED)
            json_array_append_new(
                failed, json_pack("[I i s]", (json_int_t)tn->rank, tn->errnum,
                                  tn->errstr ? tn->errstr : ""));
        else
            idset_set(running, tn->rank);
    }
    if (!(run = idset_encode(running)))
        goto done;
    o = json_pack("{s:I s:I s:O s:s s:s s:b s:O s:O}", "tool",
                  (json_int_t)t->id, "id", (json_int_t)t->jobid, "cmd", t->cmd,
                  "nodes", t->nodes, "running", run, "keep", t->keep, "exits",
                  exits, "failed", failed);
done:
    free(run);
    idset_destroy(running);
    json_decref(exits);
    json_decref(failed);
    return o;
}

static void list_handler(broker_req_t *req, void *arg)
{
    struct tool_ctx *ctx = arg;
    json_int_t id = 0;
    json_t *tools;

    if (broker_req_is_cancel(req) || !is_rank0(req, ctx))
        return;
    if (json_unpack(req_body(req), "{s?I}", "id", &id) < 0 || id < 0) {
        broker_respond_error(req, EPROTO, "tool.list: expected {\"id\"?}");
        return;
    }
    if (!(tools = json_array()))
        goto nomem;
    for (struct tool *t = ctx->tools; t; t = t->next) {
        if (id && t->jobid != (uint64_t)id)
            continue;
        if (json_array_append_new(tools, tool_json(t)) < 0)
            goto nomem;
    }
    broker_respond(req, json_pack("{s:o}", "tools", tools), NULL, 0, 0);
    return;
nomem:
    json_decref(tools);
    broker_respond_error(req, ENOMEM, "tool.list: out of memory");
}

/* ===== service ============================================================ */

static int tool_init(broker_t *b, void **ctxp)
{
    struct tool_ctx *ctx = calloc(1, sizeof(*ctx));

    if (!ctx)
        return -1;
    ctx->b = b;
    *ctxp = ctx;
    return 0;
}

static void tool_disconnect(void *arg, uint64_t origin)
{
    struct tool_ctx *ctx = arg;

    for (struct tool *t = ctx->tools; t; t = t->next)
        outlog_disconnect(t->log, origin);
    for (struct daemon *d = ctx->daemons; d; d = d->next) {
        if (!d->finished && d->req && broker_req_origin(d->req) == origin) {
            broker_log(ctx->b, LOG_LEVEL_WARNING,
                       "tool: %ju: rank 0 link gone: terminating",
                       (uintmax_t)d->tool);
            daemon_discard(d);
            daemon_terminate(d);
        }
    }
}

static void tool_shutdown(void *arg)
{
    struct tool_ctx *ctx = arg;

    ctx->shutting_down = true;
    for (struct daemon *d = ctx->daemons; d; d = d->next) {
        if (!d->finished) {
            daemon_discard(d);
            daemon_terminate(d);
        }
    }
    if (live_count(ctx) > 0) {
        ctx->holding = true;
        broker_shutdown_hold(ctx->b);
    }
}

static void tool_destroy_ctx(void *arg)
{
    struct tool_ctx *ctx = arg;
    int saved = errno;

    if (!ctx)
        return;
    ctx->destroying = true;
    while (ctx->tools) {
        struct tool *t = ctx->tools;
        tool_unlink(ctx, t);
        tool_destroy(t);
    }
    if (live_count(ctx) > 0)
        broker_log(ctx->b, LOG_LEVEL_WARNING,
                   "tool: %u daemons not reaped at exit: killed",
                   live_count(ctx));
    while (ctx->daemons) {
        struct daemon *d = ctx->daemons;
        ctx->daemons = d->next;
        if (!d->finished)
            daemon_signal(d, SIGKILL);
        d->finished = true;
        d->ctx = NULL;
        d->prev = d->next = NULL;
        broker_req_decref(d->req);
        d->req = NULL;
        if (d->handles)
            daemon_close(d); /* freed by the loop drain */
        else
            free(d);
    }
    while (ctx->dirs) {
        struct jdir *dir = ctx->dirs;
        ctx->dirs = dir->next;
        jdir_remove(ctx, dir);
    }
    free(ctx);
    errno = saved;
}

static const struct service_handler tool_handlers[] = {
    {"tool.launch", launch_handler},
    {"tool.attach", attach_handler},
    {"tool.credit", credit_handler},
    {"tool.kill", kill_handler},
    {"tool.list", list_handler},
    {"tool.spawn", spawn_handler},
    {"tool.drain", drain_handler},
    {"tool.signal", signal_handler},
    {NULL, NULL},
};

const struct service_def tool_service = {
    .name = "tool",
    .handlers = tool_handlers,
    .init = tool_init,
    .disconnect = tool_disconnect,
    .shutdown = tool_shutdown,
    .destroy = tool_destroy_ctx,
};
