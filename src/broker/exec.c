/* exec.c - the broker's "exec" service: run a command on this broker's
 * node as the instance owner and stream its output back.
 *
 * Protocol (docs/exec-protocol.md):
 *   exec.run   streaming; responses "started", "output"* (raw payload),
 *              then "exit" with MSG_FLAG_EOS
 *   exec.write bytes for a process's stdin (raw payload), optional eof
 *   exec.kill  signal a process's group
 *   exec.credit the client consumed output (flow control, opt-in with
 *              "window" in exec.run)
 *
 * Each process is a struct proc holding up to four libuv handles (the
 * process and its stdin/stdout/stderr pipes).  A proc is "live" (found by
 * id, receives signals) until its exit response is sent; it is freed only
 * once every one of its handles has been closed, so close callbacks never
 * touch freed memory.  The service context may be destroyed before those
 * callbacks run (the broker drains the loop after destroy), so procs hold
 * no pointer to it once it is gone.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>

#include "src/broker/procenv.h"
#include "src/broker/service.h"
#include "src/common/log.h"

/* One output response carries at most this many bytes, so that a chatty
 * process cannot build huge messages (and libuv suggests 64 KiB reads). */
#define EXEC_CHUNK_MAX (64 * 1024)

/* Stdin bytes queued towards one process beyond which exec.write answers
 * only once the data has drained: the client waits for answers before
 * sending more, so this bounds what a slow reader makes us hold. */
#define EXEC_STDIN_QUEUE_MAX (1024 * 1024)

/* Smallest output window a client may ask for: below this, the message
 * overhead dwarfs the data. */
#define EXEC_WINDOW_MIN 4096

struct exec_ctx;

/* A write to a process's stdin whose answer may be deferred. */
struct wreq {
    uv_write_t w;
    struct proc *p;
    broker_req_t *req; /* answered on completion, or NULL if answered */
    struct wreq *prev, *next;
    size_t len;
    char data[];
};

struct proc {
    struct exec_ctx *ctx; /* NULL once the service is destroyed */
    struct proc *prev, *next;
    uint64_t id;
    uint64_t origin;
    broker_req_t *req; /* the exec.run request, until the exit response */
    uv_process_t process;
    uv_pipe_t in, out, err;
    int handles; /* handles initialized and not yet closed */
    bool has_stdin;
    bool in_closing; /* eof requested or stdin pipe closed */
    bool out_eof, err_eof;
    bool exited;
    bool finished;  /* exit response sent: no longer live */
    bool paused;    /* output reads stopped: window full */
    size_t window;  /* output bytes unacknowledged before we pause */
    size_t unacked; /* output bytes sent, not yet credited */
    int64_t exit_status;
    int term_signal;
    uv_shutdown_t shutdown;
    struct wreq *wreqs; /* writes in flight */
};

struct exec_ctx {
    broker_t *b;
    uint64_t next_id;
    bool shutting_down;
    bool holding;       /* broker_shutdown_hold() until every proc finished */
    struct proc *procs; /* every proc not yet freed */
    /* libuv reads one stream at a time: alloc_cb then read_cb, and the
     * payload is copied by broker_respond(), so one buffer serves all. */
    char readbuf[EXEC_CHUNK_MAX];
};

/* --- proc lifetime ------------------------------------------------------ */

static void proc_free(struct proc *p)
{
    if (p->ctx) {
        if (p->prev)
            p->prev->next = p->next;
        else
            p->ctx->procs = p->next;
        if (p->next)
            p->next->prev = p->prev;
    }
    broker_req_decref(p->req);
    free(p);
}

static void handle_closed(uv_handle_t *h)
{
    struct proc *p = h->data;
    if (--p->handles == 0)
        proc_free(p);
}

static void close_handle(struct proc *p, uv_handle_t *h)
{
    if (h->data == p && !uv_is_closing(h))
        uv_close(h, handle_closed);
}

/* Close every handle the proc still has; it frees itself afterwards. */
static void proc_close(struct proc *p)
{
    close_handle(p, (uv_handle_t *)&p->process);
    close_handle(p, (uv_handle_t *)&p->in);
    close_handle(p, (uv_handle_t *)&p->out);
    close_handle(p, (uv_handle_t *)&p->err);
}

/* Processes whose exit response has not been sent yet. */
static unsigned live_count(const struct exec_ctx *ctx)
{
    unsigned n = 0;

    for (const struct proc *p = ctx->procs; p; p = p->next)
        if (!p->finished)
            n++;
    return n;
}

/* During shutdown the broker waits for the exit responses of the
 * processes we killed: let it go once the last one is out. */
static void shutdown_release_check(struct exec_ctx *ctx)
{
    if (ctx->holding && live_count(ctx) == 0) {
        ctx->holding = false;
        broker_log(ctx->b, LOG_LEVEL_DEBUG,
                   "exec: every process reaped after shutdown");
        broker_shutdown_release(ctx->b);
    }
}

static struct proc *proc_lookup(struct exec_ctx *ctx, uint64_t id)
{
    for (struct proc *p = ctx->procs; p; p = p->next)
        if (p->id == id && !p->finished)
            return p;
    return NULL;
}

/* Signal the process group (the child is its leader: UV_PROCESS_DETACHED
 * made it a session leader), so that its descendants get it too. */
static int proc_signal(struct proc *p, int signum)
{
    if (p->finished)
        return 0;
    if (kill(-p->process.pid, signum) < 0) {
        /* The whole group is gone: nothing left to signal. */
        if (errno == ESRCH && p->exited)
            return 0;
        return -1;
    }
    return 0;
}

/* Send the exit response once the process has exited and both output
 * pipes reached EOF (so no output can follow the exit response). */
static void proc_check_done(struct proc *p)
{
    json_t *o;

    if (p->finished || !p->exited || !p->out_eof || !p->err_eof)
        return;
    p->finished = true;
    if (p->term_signal)
        o = json_pack("{s:s s:i s:n s:i}", "type", "exit", "status",
                      128 + p->term_signal, "exitcode", "signal",
                      p->term_signal);
    else
        o = json_pack("{s:s s:I s:I s:n}", "type", "exit", "status",
                      (json_int_t)p->exit_status, "exitcode",
                      (json_int_t)p->exit_status, "signal");
    if (!o || broker_respond(p->req, o, NULL, 0, MSG_FLAG_EOS) < 0)
        broker_log(p->ctx->b, LOG_LEVEL_ERR, "exec: id %ju: cannot send exit",
                   (uintmax_t)p->id);
    broker_req_decref(p->req);
    p->req = NULL;
    /* stdin may still have a write or shutdown pending: closing cancels
     * them (the process is gone, nobody would read the data). */
    proc_close(p);
    shutdown_release_check(p->ctx);
}

/* --- process callbacks -------------------------------------------------- */

static void on_proc_exit(uv_process_t *h, int64_t exit_status, int term_signal)
{
    struct proc *p = h->data;

    p->exited = true;
    p->exit_status = exit_status;
    p->term_signal = term_signal;
    if (p->ctx)
        proc_check_done(p);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct proc *p = h->data;

    if (!p->ctx) {
        *buf = uv_buf_init(NULL, 0);
        return;
    }
    /* with a window, a chunk overshoots it by less than one window */
    *buf = uv_buf_init(p->ctx->readbuf,
                       p->window && p->window < sizeof(p->ctx->readbuf)
                           ? (unsigned int)p->window
                           : sizeof(p->ctx->readbuf));
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct proc *p = s->data;
    bool is_out = s == (uv_stream_t *)&p->out;

    if (nread == 0 || !p->ctx)
        return;
    if (nread > 0) {
        json_t *o = json_pack("{s:s s:s}", "type", "output", "stream",
                              is_out ? "stdout" : "stderr");
        /* A vanished client makes this a no-op; other failures cannot be
         * told to anyone but the log. */
        if (!o || broker_respond(p->req, o, buf->base, (size_t)nread, 0) < 0)
            broker_log(p->ctx->b, LOG_LEVEL_WARNING,
                       "exec: id %ju: cannot send output: %s", (uintmax_t)p->id,
                       strerror(errno));
        p->unacked += (size_t)nread;
        if (p->window && p->unacked >= p->window && !p->paused) {
            p->paused = true;
            uv_read_stop((uv_stream_t *)&p->out);
            uv_read_stop((uv_stream_t *)&p->err);
        }
        return;
    }
    /* EOF, or a read error, which ends the stream just the same. */
    uv_read_stop(s);
    if (is_out)
        p->out_eof = true;
    else
        p->err_eof = true;
    proc_check_done(p);
}

/* Read the output pipes that have not reached EOF yet. */
static void proc_read_start(struct proc *p)
{
    p->paused = false;
    if (!p->out_eof)
        uv_read_start((uv_stream_t *)&p->out, on_alloc, on_read);
    if (!p->err_eof)
        uv_read_start((uv_stream_t *)&p->err, on_alloc, on_read);
}

/* Kill the process group and drain its output without waiting for credit,
 * so that the stream ends even if the client has stopped listening. */
static int proc_kill_drain(struct proc *p)
{
    p->window = 0;
    if (p->paused && !p->finished)
        proc_read_start(p);
    return proc_signal(p, SIGKILL);
}

/* --- stdin -------------------------------------------------------------- */

static void on_stdin_shutdown(uv_shutdown_t *sr, int status)
{
    struct proc *p = sr->data;
    close_handle(p, (uv_handle_t *)&p->in);
}

static void on_stdin_write(uv_write_t *w, int status)
{
    struct wreq *wr = w->data;
    struct proc *p = wr->p;

    if (wr->prev)
        wr->prev->next = wr->next;
    else
        p->wreqs = wr->next;
    if (wr->next)
        wr->next->prev = wr->prev;
    if (wr->req && p->ctx) {
        if (status < 0)
            broker_respond_error(
                wr->req, -status, "rank %u: process %ju stdin: %s",
                broker_rank(p->ctx->b), (uintmax_t)p->id, strerror(-status));
        else
            broker_respond(wr->req, json_object(), NULL, 0, 0);
    }
    broker_req_decref(wr->req);
    free(wr);
}

/* --- handlers ----------------------------------------------------------- */

/* The request body, or NULL for {} (json_object_foreach() visits
 * nothing in NULL). */
static json_t *req_body(broker_req_t *req)
{
    return broker_req_msg(req)->body;
}

/* The broker's environment, EDDY_URI and EDDY_BROKER_RANK, then the
 * client's overrides (already validated: string or null values). */
static char **env_build(broker_t *b, const json_t *overrides)
{
    char **env = procenv_create(b, overrides ? json_object_size(overrides) : 0);

    if (env && overrides && procenv_apply(env, overrides) < 0) {
        procenv_destroy(env);
        return NULL;
    }
    return env;
}

static bool valid_cmd(const json_t *cmd)
{
    size_t i;
    json_t *v;

    if (!json_is_array(cmd) || json_array_size(cmd) == 0)
        return false;
    json_array_foreach(cmd, i, v)
    {
        if (!json_is_string(v))
            return false;
        /* exec(2) cannot carry embedded NULs */
        if (strlen(json_string_value(v)) != json_string_length(v))
            return false;
    }
    return true;
}

static bool valid_env(const json_t *env)
{
    const char *key;
    json_t *v;

    if (!json_is_object(env))
        return false;
    json_object_foreach((json_t *)env, key, v)
    {
        if (key[0] == '\0' || strchr(key, '='))
            return false;
        if (json_is_string(v) &&
            strlen(json_string_value(v)) == json_string_length(v))
            continue;
        if (!json_is_null(v))
            return false;
    }
    return true;
}

static void exec_cancel(broker_req_t *req, struct exec_ctx *ctx)
{
    for (struct proc *p = ctx->procs; p; p = p->next) {
        if (!p->finished && p->req && broker_req_same(p->req, req)) {
            if (proc_kill_drain(p) < 0)
                broker_log(ctx->b, LOG_LEVEL_WARNING, "exec: id %ju: kill: %s",
                           (uintmax_t)p->id, strerror(errno));
        }
    }
    /* a cancel gets no response: the stream ends with "exit" */
}

static void exec_run(broker_req_t *req, void *arg)
{
    struct exec_ctx *ctx = arg;
    uint32_t rank = broker_rank(ctx->b);
    json_t *body = req_body(req);
    json_t *cmd = NULL, *cwd = NULL, *env = NULL, *jstdin = NULL, *o;
    json_t *window = NULL;
    const char *key, *errmsg = NULL, *prog = "";
    json_t *val;
    uv_process_options_t opts = {0};
    uv_stdio_container_t stdio[3];
    char **argv = NULL, **envp = NULL;
    struct proc *p = NULL;
    size_t i;
    int errnum = EINVAL, rc;

    if (broker_req_is_cancel(req)) {
        exec_cancel(req, ctx);
        return;
    }

    /* decode */
    json_object_foreach(body, key, val)
    {
        if (!strcmp(key, "cmd"))
            cmd = val;
        else if (!strcmp(key, "cwd"))
            cwd = val;
        else if (!strcmp(key, "env"))
            env = val;
        else if (!strcmp(key, "stdin"))
            jstdin = val;
        else if (!strcmp(key, "window"))
            window = val;
        else {
            broker_respond_error(req, EINVAL, "exec.run: unknown key '%s'",
                                 key);
            return;
        }
    }

    /* validate */
    if (!broker_req_is_streaming(req)) {
        errnum = EPROTO;
        errmsg = "exec.run: must be a streaming request";
        goto error;
    }
    if (!cmd || !valid_cmd(cmd)) {
        errmsg = "exec.run: 'cmd' must be a non-empty array of strings";
        goto error;
    }
    if (cwd && (!json_is_string(cwd) || json_string_length(cwd) == 0)) {
        errmsg = "exec.run: 'cwd' must be a non-empty string";
        goto error;
    }
    if (env && !valid_env(env)) {
        errmsg = "exec.run: 'env' must be an object mapping names"
                 " to strings or null";
        goto error;
    }
    if (jstdin && !json_is_boolean(jstdin)) {
        errmsg = "exec.run: 'stdin' must be a boolean";
        goto error;
    }
    if (window && (!json_is_integer(window) ||
                   json_integer_value(window) < EXEC_WINDOW_MIN)) {
        errmsg = "exec.run: 'window' must be an integer of at least 4096";
        goto error;
    }
    if (ctx->shutting_down) {
        errnum = ECANCELED;
        errmsg = "exec.run: broker is shutting down";
        goto error;
    }

    /* act */
    prog = json_string_value(json_array_get(cmd, 0));
    errnum = ENOMEM;
    if (!(argv = calloc(json_array_size(cmd) + 1, sizeof(*argv))))
        goto error;
    json_array_foreach(cmd, i, val) argv[i] = (char *)json_string_value(val);
    if (!(envp = env_build(ctx->b, env)))
        goto error;
    if (!(p = calloc(1, sizeof(*p))))
        goto error;
    p->ctx = ctx;
    p->origin = broker_req_origin(req);
    p->has_stdin = json_is_true(jstdin);
    if (window)
        p->window = (size_t)json_integer_value(window);
    p->req = broker_req_incref(req);
    p->id = ++ctx->next_id;
    if ((p->next = ctx->procs))
        p->next->prev = p;
    ctx->procs = p;

    /* All handles are initialized first, so that a failed spawn closes
     * them by the same path as a finished process. */
    uv_pipe_init(broker_loop(ctx->b), &p->out, 0);
    uv_pipe_init(broker_loop(ctx->b), &p->err, 0);
    p->out.data = p->err.data = p;
    p->handles = 2;
    if (p->has_stdin) {
        uv_pipe_init(broker_loop(ctx->b), &p->in, 0);
        p->in.data = p;
        p->handles++;
        stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
        stdio[0].data.stream = (uv_stream_t *)&p->in;
    } else {
        stdio[0].flags = UV_IGNORE; /* /dev/null */
        p->in_closing = true;
    }
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&p->out;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&p->err;
    opts.exit_cb = on_proc_exit;
    opts.file = argv[0];
    opts.args = argv;
    opts.env = envp;
    opts.cwd = cwd ? json_string_value(cwd) : NULL;
    opts.flags = UV_PROCESS_DETACHED; /* own session and process group */
    opts.stdio_count = 3;
    opts.stdio = stdio;
    p->process.data = p;
    p->handles++; /* uv_spawn initializes the handle even when it fails */
    if ((rc = uv_spawn(broker_loop(ctx->b), &p->process, &opts)) < 0) {
        p->finished = true;
        proc_close(p);
        p = NULL;
        broker_respond_error(req, -rc, "rank %u: cannot run '%s': %s", rank,
                             prog, strerror(-rc));
        goto out;
    }
    proc_read_start(p);

    /* respond */
    if (!(o = json_pack("{s:s s:i s:I}", "type", "started", "pid",
                        p->process.pid, "id", (json_int_t)p->id)) ||
        broker_respond(req, o, NULL, 0, 0) < 0) {
        broker_log(ctx->b, LOG_LEVEL_ERR, "exec: id %ju: cannot respond: %s",
                   (uintmax_t)p->id, strerror(errno));
        /* the client will never learn the id: do not leave it running */
        proc_signal(p, SIGKILL);
    }
    broker_log(ctx->b, LOG_LEVEL_DEBUG, "exec: id %ju: started '%s' pid %d",
               (uintmax_t)p->id, prog, p->process.pid);
out:
    free(argv);
    procenv_destroy(envp);
    return;
error:
    broker_respond_error(req, errnum, "%s", errmsg ? errmsg : strerror(errnum));
    free(argv);
    procenv_destroy(envp);
}

/* Decode the "id" of exec.write/exec.kill and find its live process.
 * Responds with the error itself and returns NULL on failure. */
static struct proc *lookup_req(struct exec_ctx *ctx,
                               broker_req_t *req,
                               const char *topic,
                               json_t *idval)
{
    struct proc *p;
    json_int_t id;

    if (!json_is_integer(idval) || (id = json_integer_value(idval)) < 0) {
        broker_respond_error(req, EINVAL,
                             "%s: 'id' must be a non-negative integer", topic);
        return NULL;
    }
    if (!(p = proc_lookup(ctx, (uint64_t)id))) {
        broker_respond_error(req, ESRCH, "rank %u: no process with id %jd",
                             broker_rank(ctx->b), (intmax_t)id);
        return NULL;
    }
    return p;
}

static void exec_write(broker_req_t *req, void *arg)
{
    struct exec_ctx *ctx = arg;
    const msg_t *msg = broker_req_msg(req);
    json_t *idval = NULL, *eofval = NULL, *val;
    const char *key, *errmsg = NULL;
    struct proc *p;
    struct wreq *wr = NULL;
    int errnum = EINVAL, rc;
    bool eof = false;
    uv_buf_t buf;

    if (broker_req_is_cancel(req))
        return;

    /* decode */
    json_object_foreach(req_body(req), key, val)
    {
        if (!strcmp(key, "id"))
            idval = val;
        else if (!strcmp(key, "eof"))
            eofval = val;
        else {
            broker_respond_error(req, EINVAL, "exec.write: unknown key '%s'",
                                 key);
            return;
        }
    }

    /* validate */
    if (eofval && !json_is_boolean(eofval)) {
        errmsg = "exec.write: 'eof' must be a boolean";
        goto error;
    }
    eof = json_is_true(eofval);
    if (!(p = lookup_req(ctx, req, "exec.write", idval)))
        return;
    if (p->origin != broker_req_origin(req)) {
        errnum = EPERM;
        errmsg = "exec.write: only the client that started a process"
                 " may write to its stdin";
        goto error;
    }
    if (!p->has_stdin) {
        errmsg = "exec.write: process was started without stdin";
        goto error;
    }
    if (p->in_closing) {
        errnum = EPIPE;
        errmsg = "exec.write: stdin is already closed";
        goto error;
    }

    /* act */
    if (msg->payload_len > 0) {
        errnum = ENOMEM;
        if (!(wr = malloc(sizeof(*wr) + msg->payload_len)))
            goto error;
        memset(wr, 0, sizeof(*wr));
        wr->p = p;
        wr->len = msg->payload_len;
        memcpy(wr->data, msg->payload, msg->payload_len);
        wr->w.data = wr;
        buf = uv_buf_init(wr->data, (unsigned int)wr->len);
        if ((rc = uv_write(&wr->w, (uv_stream_t *)&p->in, &buf, 1,
                           on_stdin_write)) < 0) {
            free(wr);
            errnum = -rc;
            broker_respond_error(req, errnum, "rank %u: process %ju stdin: %s",
                                 broker_rank(ctx->b), (uintmax_t)p->id,
                                 strerror(errnum));
            return;
        }
        if ((wr->next = p->wreqs))
            wr->next->prev = wr;
        p->wreqs = wr;
    }
    if (eof) {
        p->in_closing = true;
        p->shutdown.data = p;
        /* shutdown completes after the queued writes */
        if (uv_shutdown(&p->shutdown, (uv_stream_t *)&p->in,
                        on_stdin_shutdown) < 0)
            close_handle(p, (uv_handle_t *)&p->in);
    }

    /* respond: at once unless too much is queued; then on completion */
    if (wr && p->in.write_queue_size > EXEC_STDIN_QUEUE_MAX) {
        wr->req = broker_req_incref(req);
        return;
    }
    if (broker_respond(req, json_object(), NULL, 0, 0) < 0)
        broker_log(ctx->b, LOG_LEVEL_WARNING, "exec.write: respond: %s",
                   strerror(errno));
    return;
error:
    broker_respond_error(req, errnum, "%s", errmsg);
}

static void exec_kill(broker_req_t *req, void *arg)
{
    struct exec_ctx *ctx = arg;
    json_t *idval = NULL, *sigval = NULL, *val;
    const char *key, *errmsg = NULL;
    struct proc *p;
    int errnum = EINVAL;
    json_int_t signum;

    if (broker_req_is_cancel(req))
        return;

    /* decode */
    json_object_foreach(req_body(req), key, val)
    {
        if (!strcmp(key, "id"))
            idval = val;
        else if (!strcmp(key, "signum"))
            sigval = val;
        else {
            broker_respond_error(req, EINVAL, "exec.kill: unknown key '%s'",
                                 key);
            return;
        }
    }

    /* validate */
    if (!json_is_integer(sigval) || (signum = json_integer_value(sigval)) < 0 ||
        signum >= NSIG) {
        errmsg = "exec.kill: 'signum' must be a signal number";
        goto error;
    }
    if (!(p = lookup_req(ctx, req, "exec.kill", idval)))
        return;

    /* act */
    if (proc_signal(p, (int)signum) < 0) {
        errnum = errno;
        broker_respond_error(req, errnum, "rank %u: kill process %ju: %s",
                             broker_rank(ctx->b), (uintmax_t)p->id,
                             strerror(errnum));
        return;
    }

    /* respond */
    if (broker_respond(req, json_object(), NULL, 0, 0) < 0)
        broker_log(ctx->b, LOG_LEVEL_WARNING, "exec.kill: respond: %s",
                   strerror(errno));
    return;
error:
    broker_respond_error(req, errnum, "%s", errmsg);
}

/* The client consumed 'bytes' of output: reading may resume.  Usually sent
 * with MSG_FLAG_NORESPONSE, so errors are answered but rarely seen. */
static void exec_credit(broker_req_t *req, void *arg)
{
    struct exec_ctx *ctx = arg;
    json_t *idval = NULL, *bytesval = NULL, *val;
    const char *key, *errmsg = NULL;
    struct proc *p;
    int errnum = EINVAL;
    json_int_t bytes;

    if (broker_req_is_cancel(req))
        return;

    /* decode */
    json_object_foreach(req_body(req), key, val)
    {
        if (!strcmp(key, "id"))
            idval = val;
        else if (!strcmp(key, "bytes"))
            bytesval = val;
        else {
            broker_respond_error(req, EINVAL, "exec.credit: unknown key '%s'",
                                 key);
            return;
        }
    }

    /* validate */
    if (!json_is_integer(bytesval) ||
        (bytes = json_integer_value(bytesval)) < 0) {
        errmsg = "exec.credit: 'bytes' must be a non-negative integer";
        goto error;
    }
    if (!(p = lookup_req(ctx, req, "exec.credit", idval)))
        return;
    if (p->origin != broker_req_origin(req)) {
        errnum = EPERM;
        errmsg = "exec.credit: only the client that started a process"
                 " may credit its output";
        goto error;
    }

    /* act */
    p->unacked -= (size_t)bytes < p->unacked ? (size_t)bytes : p->unacked;
    if (p->paused && p->unacked < p->window)
        proc_read_start(p);

    /* respond */
    if (broker_respond(req, json_object(), NULL, 0, 0) < 0)
        broker_log(ctx->b, LOG_LEVEL_WARNING, "exec.credit: respond: %s",
                   strerror(errno));
    return;
error:
    broker_respond_error(req, errnum, "%s", errmsg);
}

/* --- service lifecycle -------------------------------------------------- */

static int exec_init(broker_t *b, void **ctxp)
{
    struct exec_ctx *ctx = calloc(1, sizeof(*ctx));

    if (!ctx)
        return -1;
    ctx->b = b;
    /* Writing to the stdin of a process that exited raises SIGPIPE; the
     * error must come back as EPIPE instead of killing the broker.
     * (libuv resets signal dispositions in the children it spawns.) */
    signal(SIGPIPE, SIG_IGN);
    *ctxp = ctx;
    return 0;
}

static void exec_disconnect(void *arg, uint64_t origin)
{
    struct exec_ctx *ctx = arg;

    for (struct proc *p = ctx->procs; p; p = p->next) {
        if (p->origin == origin && !p->finished && proc_kill_drain(p) < 0)
            broker_log(ctx->b, LOG_LEVEL_WARNING, "exec: id %ju: kill: %s",
                       (uintmax_t)p->id, strerror(errno));
    }
}

/* Kill every process, and hold the broker's exit until each one has been
 * reaped and its exit response sent (the client, or the broker that
 * forwarded the request, wants the status rather than a lost link). */
static void exec_shutdown(void *arg)
{
    struct exec_ctx *ctx = arg;
    unsigned n;

    if (ctx->shutting_down)
        return;
    ctx->shutting_down = true;
    for (struct proc *p = ctx->procs; p; p = p->next) {
        if (!p->finished && proc_kill_drain(p) < 0)
            broker_log(ctx->b, LOG_LEVEL_WARNING, "exec: id %ju: kill: %s",
                       (uintmax_t)p->id, strerror(errno));
    }
    if ((n = live_count(ctx)) > 0) {
        broker_log(ctx->b, LOG_LEVEL_DEBUG,
                   "exec: shutdown: waiting for %u killed processes", n);
        ctx->holding = true;
        broker_shutdown_hold(ctx->b);
    }
}

static void exec_destroy(void *arg)
{
    struct exec_ctx *ctx = arg;
    struct proc *p, *next;
    int saved_errno = errno;

    if (!ctx)
        return;
    if (live_count(ctx) > 0)
        broker_log(ctx->b, LOG_LEVEL_WARNING,
                   "exec: %u processes not reaped at exit: killed, their "
                   "clients get no exit status",
                   live_count(ctx));
    /* Kill what is left (destroy may come without shutdown), drop every
     * request reference now (the broker frees its state after this), and
     * close the handles: the procs free themselves when the broker drains
     * the loop. */
    for (p = ctx->procs; p; p = next) {
        next = p->next;
        (void)proc_signal(p, SIGKILL);
        p->finished = true;
        p->ctx = NULL;
        p->prev = p->next = NULL;
        broker_req_decref(p->req);
        p->req = NULL;
        for (struct wreq *wr = p->wreqs; wr; wr = wr->next) {
            broker_req_decref(wr->req);
            wr->req = NULL;
        }
        proc_close(p);
    }
    free(ctx);
    errno = saved_errno;
}

static const struct service_handler exec_handlers[] = {
    {"exec.run", exec_run},
    {"exec.write", exec_write},
    {"exec.kill", exec_kill},
    {"exec.credit", exec_credit},
    {NULL, NULL},
};

const struct service_def exec_service = {
    .name = "exec",
    .handlers = exec_handlers,
    .init = exec_init,
    .disconnect = exec_disconnect,
    .shutdown = exec_shutdown,
    .destroy = exec_destroy,
};
