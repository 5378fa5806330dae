/* eddy exec - run a command on broker ranks, like a parallel ssh that
 * needs no ssh.
 *
 * One streaming exec.run RPC per rank, all in flight at once and driven by
 * continuations on the handle's libuv loop, so hundreds of ranks cost no
 * more wall time than one.  Our stdin is broadcast to every process with
 * exec.write; the next chunk is read only once every rank has answered the
 * previous one, so memory stays bounded whatever the slowest reader.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>

#include "cmd.h"
#include "lineout.h"
#include "src/common/idset.h"

static const char *const usage_text =
    "Usage: eddy exec [-r IDSET|all] [-l] [-d DIR] [-n] COMMAND [ARGS...]\n"
    "\n"
    "Run COMMAND on broker ranks of the instance in $EDDY_URI, all in\n"
    "parallel, as the instance owner, with the broker's environment plus\n"
    "EDDY_URI and EDDY_BROKER_RANK.  Output is copied to our stdout and\n"
    "stderr as it arrives; our stdin is sent to every process.  The exit\n"
    "status is the largest of the processes' statuses (128+N for a\n"
    "process killed by signal N; 127 if COMMAND was not found, 126 if it\n"
    "could not be executed, 1 if a rank could not be reached).  SIGINT\n"
    "and SIGTERM are forwarded to every process; a second Ctrl-C within\n"
    "one second kills them all.\n"
    "\n"
    "  -r, --rank=IDSET    ranks to run on, e.g. 0-3,8 or all (default all)\n"
    "  -l, --label         prefix each output line with 'RANK: '\n"
    "  -d, --dir=DIR       working directory (default: the current one)\n"
    "  -n, --no-stdin      do not read stdin; processes get /dev/null\n"
    "  -h, --help          show this help\n";

/* Bytes of stdin sent per exec.write (at most one chunk in flight). */
#define STDIN_CHUNK (64 * 1024)

/* Output flow control: each process may have 'window' bytes of output
 * unacknowledged (exec.credit), so all ranks together keep at most about
 * twice OUTPUT_BUDGET queued towards us, well under what a broker holds
 * for a client before dropping it. */
#define OUTPUT_BUDGET (16u << 20)
#define WINDOW_MIN 4096
#define WINDOW_MAX (1u << 20)

struct rank {
    struct execcmd *ec;
    uint32_t rank;
    eddy_future_t *f; /* the exec.run stream, until it ends */
    uint64_t id;      /* the broker's process id, once started */
    bool started;
    bool resolved; /* started, or failed to */
    bool done;
    bool stdin_open; /* still accepting exec.write */
    int status;
    size_t consumed;      /* output written out, not yet credited */
    struct lineout lb[2]; /* partial stdout, stderr lines (-l) */
};

struct execcmd {
    eddy_t *h;
    uv_loop_t *loop;
    struct rank *ranks;
    size_t nranks;
    size_t nresolved;
    size_t ndone;
    bool label;
    bool use_stdin;
    size_t window;  /* per-process output window (exec.run) */
    bool finishing; /* cleaning up: continuations do nothing */
    bool aborted;   /* gave up waiting after repeated signals */
    int abort_status;

    /* stdin: a uv_poll on fd 0, or plain reads from an idle callback for
     * files and /dev/null, which epoll refuses */
    bool stdin_started;
    bool stdin_eof;
    bool use_poll;
    uv_poll_t poll;
    uv_idle_t idle;
    bool poll_init, idle_init;
    int stdin_flags;  /* fd 0's flags, restored (uv_poll sets O_NONBLOCK) */
    int pending_acks; /* exec.write answers still to come */

    /* signals */
    uv_signal_t sigint, sigterm;
    double last_sigint;
    int pending_signal; /* forwarded to ranks that start later */
    bool cancelled;
};

/* Set when our stdout or stderr could not be written (full disk, I/O
 * error): the output is incomplete, so the exit status says so. */
static bool output_failed;

static void output_error(int fd)
{
    if (errno == ENOMEM)
        cmd_die("exec", "out of memory");
    if (!output_failed)
        cmd_warn("exec", "cannot write %s: %s",
                 fd == STDOUT_FILENO ? "standard output" : "standard error",
                 strerror(errno));
    output_failed = true;
}

static void output(struct rank *r, int idx, const char *data, size_t len)
{
    int fd = idx == 0 ? STDOUT_FILENO : STDERR_FILENO;
    char prefix[16];

    if (!r->ec->label) {
        if (lineout_write_all(fd, data, len) < 0)
            output_error(fd);
        return;
    }
    snprintf(prefix, sizeof(prefix), "%u: ", r->rank);
    if (lineout_label(&r->lb[idx], fd, prefix, data, len) < 0)
        output_error(fd);
}

static void flush_lines(struct rank *r)
{
    char prefix[16];

    snprintf(prefix, sizeof(prefix), "%u: ", r->rank);
    for (int i = 0; i < 2; i++) {
        int fd = i == 0 ? STDOUT_FILENO : STDERR_FILENO;
        if (lineout_flush(&r->lb[i], fd, prefix) < 0)
            output_error(fd);
    }
}

/* "eddy exec: rank R: why", without repeating the rank when the broker's
 * message already names it. */
static void rank_warn(const struct rank *r, int errnum, const char *text)
{
    char prefix[32];
    size_t n;

    if (!text || !*text)
        text = eddy_strerror(errnum);
    /* "rank 2: ..." or "rank 2 is lost", but not "rank 20..." */
    n = (size_t)snprintf(prefix, sizeof(prefix), "rank %u", r->rank);
    if (!strncmp(text, prefix, n) && (text[n] == ':' || text[n] == ' '))
        cmd_warn("exec", "%s", text);
    else
        cmd_warn("exec", "%s: %s", prefix, text);
}

/* --- stdin -------------------------------------------------------------- */

static void stdin_resume(struct execcmd *ec);

static void stdin_stop(struct execcmd *ec)
{
    if (ec->poll_init)
        uv_poll_stop(&ec->poll);
    if (ec->idle_init)
        uv_idle_stop(&ec->idle);
}

static void on_write_ack(eddy_future_t *f, void *arg)
{
    struct rank *r = arg;
    struct execcmd *ec = r->ec;
    const char *json;

    if (!ec->finishing && eddy_rpc_get(f, &json) < 0) {
        /* the process exited or closed its stdin: normal, stop feeding
         * it; anything else is worth a word */
        if (errno != ESRCH && errno != EPIPE && errno != ECANCELED && !r->done)
            rank_warn(r, errno, eddy_future_error_string(f));
        r->stdin_open = false;
    }
    eddy_future_destroy(f);
    if (ec->finishing)
        return;
    if (--ec->pending_acks == 0 && !ec->stdin_eof)
        stdin_resume(ec);
}

/* Send one chunk (or the EOF mark, if len is 0) to every process still
 * reading; reading resumes once they have all answered. */
static void stdin_broadcast(struct execcmd *ec, const char *data, size_t len)
{
    bool eof = len == 0;
    char json[64];

    for (size_t i = 0; i < ec->nranks; i++) {
        struct rank *r = &ec->ranks[i];
        eddy_future_t *f;

        if (!r->stdin_open || r->done)
            continue;
        snprintf(json, sizeof(json), "{\"id\":%ju%s}", (uintmax_t)r->id,
                 eof ? ",\"eof\":true" : "");
        if (!(f = eddy_rpc(ec->h, "exec.write", r->rank, 0, json, data, len)) ||
            eddy_future_then(f, -1, on_write_ack, r) < 0) {
            rank_warn(r, errno, "cannot send stdin");
            eddy_future_destroy(f);
            r->stdin_open = false;
            continue;
        }
        ec->pending_acks++;
        if (eof)
            r->stdin_open = false;
    }
    if (eof)
        ec->stdin_eof = true;
}

static void stdin_read(struct execcmd *ec)
{
    static char buf[STDIN_CHUNK];
    ssize_t n;

    stdin_stop(ec);
    n = read(STDIN_FILENO, buf, sizeof(buf));
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        stdin_resume(ec);
        return;
    }
    if (n < 0) {
        if (errno != EBADF) /* closed stdin reads as empty */
            cmd_warn("exec", "stdin: %s", strerror(errno));
        n = 0;
    }
    stdin_broadcast(ec, buf, (size_t)n);
    /* nobody left to read it: keep quiet until the end */
    if (ec->pending_acks == 0 && !ec->stdin_eof)
        stdin_resume(ec);
}

static void on_stdin_poll(uv_poll_t *p, int status, int events)
{
    stdin_read(p->data);
}

static void on_stdin_idle(uv_idle_t *i)
{
    stdin_read(i->data);
}

static void stdin_resume(struct execcmd *ec)
{
    bool anyone = false;

    for (size_t i = 0; i < ec->nranks; i++)
        if (ec->ranks[i].stdin_open && !ec->ranks[i].done)
            anyone = true;
    if (!anyone || ec->finishing)
        return;
    if (ec->use_poll)
        uv_poll_start(&ec->poll, UV_READABLE, on_stdin_poll);
    else
        uv_idle_start(&ec->idle, on_stdin_idle);
}

/* Begin reading stdin once every rank has started (or failed to), so that
 * every process sees all of it. */
static void stdin_start(struct execcmd *ec)
{
    if (!ec->use_stdin || ec->stdin_started || ec->nresolved < ec->nranks)
        return;
    ec->stdin_started = true;
    ec->stdin_flags = fcntl(STDIN_FILENO, F_GETFL);
    if (uv_poll_init(ec->loop, &ec->poll, STDIN_FILENO) == 0) {
        ec->poll_init = ec->use_poll = true;
        ec->poll.data = ec;
        uv_unref((uv_handle_t *)&ec->poll);
    } else {
        uv_idle_init(ec->loop, &ec->idle);
        ec->idle_init = true;
        ec->idle.data = ec;
        uv_unref((uv_handle_t *)&ec->idle);
    }
    stdin_resume(ec);
}

/* --- signals ------------------------------------------------------------ */

static void on_kill_ack(eddy_future_t *f, void *arg)
{
    struct rank *r = arg;
    const char *json;

    if (!r->ec->finishing && eddy_rpc_get(f, &json) < 0 && errno != ESRCH &&
        !r->done)
        rank_warn(r, errno, eddy_future_error_string(f));
    eddy_future_destroy(f);
}

static void send_kill(struct rank *r, int signum)
{
    eddy_future_t *f;
    char json[64];

    snprintf(json, sizeof(json), "{\"id\":%ju,\"signum\":%d}", (uintmax_t)r->id,
             signum);
    if (!(f = eddy_rpc(r->ec->h, "exec.kill", r->rank, 0, json, NULL, 0)) ||
        eddy_future_then(f, -1, on_kill_ack, r) < 0) {
        rank_warn(r, errno, "cannot send signal");
        eddy_future_destroy(f);
    }
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct execcmd *ec = s->data;
    double now = cmd_now();

    if (ec->cancelled) {
        /* still here after killing everything: stop waiting */
        cmd_warn("exec", "giving up on unfinished ranks");
        ec->aborted = true;
        ec->abort_status = 128 + signum;
        uv_stop(ec->loop);
        return;
    }
    if (signum == SIGINT && ec->last_sigint > 0 &&
        now - ec->last_sigint < 1.0) {
        cmd_warn("exec", "killing all processes");
        ec->cancelled = true;
        for (size_t i = 0; i < ec->nranks; i++)
            if (ec->ranks[i].f)
                (void)eddy_rpc_cancel(ec->ranks[i].f);
        return;
    }
    if (signum == SIGINT)
        ec->last_sigint = now;
    ec->pending_signal = signum;
    for (size_t i = 0; i < ec->nranks; i++)
        if (ec->ranks[i].started && !ec->ranks[i].done)
            send_kill(&ec->ranks[i], signum);
}

/* --- the exec.run streams ----------------------------------------------- */

/* Tell the broker we have written out what it sent, so that it reads more
 * of the process's output.  Fire and forget: a lost credit only matters
 * if the rank is gone, and then its stream fails anyway. */
static void credit(struct rank *r, size_t len)
{
    eddy_future_t *f;
    char json[64];

    r->consumed += len;
    if (r->consumed < r->ec->window / 2)
        return;
    snprintf(json, sizeof(json), "{\"id\":%ju,\"bytes\":%zu}", (uintmax_t)r->id,
             r->consumed);
    f = eddy_rpc(r->ec->h, "exec.credit", r->rank, EDDY_RPC_NORESPONSE, json,
                 NULL, 0);
    eddy_future_destroy(f);
    r->consumed = 0;
}

static void rank_resolved(struct rank *r)
{
    if (!r->resolved) {
        r->resolved = true;
        r->ec->nresolved++;
        stdin_start(r->ec);
    }
}

static void rank_done(struct rank *r, int status)
{
    struct execcmd *ec = r->ec;

    flush_lines(r);
    r->status = status;
    r->done = true;
    r->stdin_open = false;
    eddy_future_destroy(r->f);
    r->f = NULL;
    rank_resolved(r);
    if (++ec->ndone == ec->nranks)
        uv_stop(ec->loop);
}

static void rank_failed(struct rank *r, int errnum, const char *text)
{
    int status = 1;

    if (r->ec->cancelled && errnum == ECANCELED) {
        rank_done(r, 128 + SIGKILL);
        return;
    }
    rank_warn(r, errnum, text);
    /* like a shell: not found, not executable */
    if (!r->started && errnum == ENOENT)
        status = 127;
    else if (!r->started && errnum == EACCES)
        status = 126;
    rank_done(r, status);
}

static void on_run_response(eddy_future_t *f, void *arg)
{
    struct rank *r = arg;
    const char *text, *type = NULL, *stream = NULL;
    json_t *o = NULL;
    json_int_t id = 0, status = 0;
    const void *data;
    size_t len;

    if (r->ec->finishing)
        return;
    if (eddy_rpc_get(f, &text) < 0) {
        int errnum = errno;
        rank_failed(r, errnum,
                    errnum == ENODATA ? "stream ended without an exit status"
                                      : eddy_future_error_string(f));
        return;
    }
    if (!(o = json_loads(text, 0, NULL)) ||
        json_unpack(o, "{s:s s?I s?s s?I}", "type", &type, "id", &id, "stream",
                    &stream, "status", &status) < 0)
        goto bad;
    if (!strcmp(type, "started")) {
        r->id = (uint64_t)id;
        r->started = true;
        r->stdin_open = r->ec->use_stdin;
        if (r->ec->pending_signal)
            send_kill(r, r->ec->pending_signal);
        rank_resolved(r);
    } else if (!strcmp(type, "output") && stream) {
        if (eddy_rpc_get_raw(f, &data, &len) < 0)
            goto bad;
        output(r, strcmp(stream, "stderr") ? 0 : 1, data, len);
        credit(r, len);
    } else if (!strcmp(type, "exit")) {
        json_decref(o);
        rank_done(r, (int)status);
        return;
    } else
        goto bad;
    json_decref(o);
    eddy_future_reset(f);
    return;
bad:
    json_decref(o);
    rank_failed(r, EPROTO, "unexpected exec.run response");
}

/* --- setup -------------------------------------------------------------- */

/* The ranks named by -r: "all", or an idset checked against the size. */
static idset_t *parse_ranks(const char *arg, uint32_t size)
{
    eddy_error_t err;
    idset_t *ids;
    uint32_t id;

    if (!arg || !strcmp(arg, "all")) {
        if (!(ids = idset_create()))
            cmd_die("exec", "out of memory");
        for (id = 0; id < size; id++)
            if (idset_set(ids, id) < 0)
                cmd_die("exec", "rank %u: %s", id, strerror(errno));
        return ids;
    }
    if (!(ids = idset_decode(arg, &err)))
        cmd_die("exec", "%s", err.text);
    if (idset_count(ids) == 0)
        cmd_die("exec", "no ranks in '%s'", arg);
    for (id = idset_first(ids); id != IDSET_INVALID; id = idset_next(ids, id))
        if (id >= size)
            cmd_die("exec", "rank %u does not exist (instance size %u)", id,
                    size);
    return ids;
}

/* The exec.run body, as JSON text (caller frees). */
static char *make_body(
    int argc, char **argv, const char *dir, bool use_stdin, size_t window)
{
    json_t *cmd = json_array(), *body;
    char cwd[4096], *path = NULL, *s;

    for (int i = 0; i < argc; i++)
        json_array_append_new(cmd, json_string(argv[i]));
    if (!(body = json_pack("{s:o s:b s:I}", "cmd", cmd, "stdin", use_stdin,
                           "window", (json_int_t)window)))
        cmd_die("exec", "arguments must be valid UTF-8");
    /* Relative to where we are, as the user expects; without a cwd the
     * process starts where its broker runs. */
    if (!dir || dir[0] != '/') {
        if (getcwd(cwd, sizeof(cwd))) {
            if (dir && asprintf(&path, "%s/%s", cwd, dir) < 0)
                cmd_die("exec", "out of memory");
            dir = path ? path : cwd;
        } else if (dir) {
            cmd_die("exec", "cannot resolve '%s': %s", dir, strerror(errno));
        }
    }
    if (dir && json_object_set_new(body, "cwd", json_string(dir)) < 0)
        cmd_die("exec", "directory must be valid UTF-8");
    if (!(s = json_dumps(body, JSON_COMPACT)))
        cmd_die("exec", "out of memory");
    json_decref(body);
    free(path);
    return s;
}

static void start_ranks(struct execcmd *ec,
                        const idset_t *ids,
                        const char *body)
{
    size_t i = 0;

    ec->nranks = idset_count(ids);
    if (!(ec->ranks = calloc(ec->nranks, sizeof(*ec->ranks))))
        cmd_die("exec", "out of memory");
    for (uint32_t id = idset_first(ids); id != IDSET_INVALID;
         id = idset_next(ids, id), i++) {
        struct rank *r = &ec->ranks[i];
        r->ec = ec;
        r->rank = id;
        if (!(r->f = eddy_rpc(ec->h, "exec.run", id, EDDY_RPC_STREAMING, body,
                              NULL, 0)) ||
            eddy_future_then(r->f, -1, on_run_response, r) < 0)
            rank_failed(r, errno, NULL);
    }
}

static void signals_init(struct execcmd *ec)
{
    uv_signal_init(ec->loop, &ec->sigint);
    uv_signal_init(ec->loop, &ec->sigterm);
    ec->sigint.data = ec->sigterm.data = ec;
    uv_signal_start(&ec->sigint, on_signal, SIGINT);
    uv_signal_start(&ec->sigterm, on_signal, SIGTERM);
    /* only the instance connection keeps the loop alive */
    uv_unref((uv_handle_t *)&ec->sigint);
    uv_unref((uv_handle_t *)&ec->sigterm);
}

/* Stop everything we added to the handle's loop and free the ranks. */
static void finish(struct execcmd *ec)
{
    ec->finishing = true;
    uv_close((uv_handle_t *)&ec->sigint, NULL);
    uv_close((uv_handle_t *)&ec->sigterm, NULL);
    if (ec->poll_init)
        uv_close((uv_handle_t *)&ec->poll, NULL);
    if (ec->idle_init)
        uv_close((uv_handle_t *)&ec->idle, NULL);
    for (size_t i = 0; i < ec->nranks; i++) {
        eddy_future_destroy(ec->ranks[i].f);
        ec->ranks[i].f = NULL;
    }
    uv_run(ec->loop, UV_RUN_NOWAIT);
    if (ec->stdin_started && ec->stdin_flags >= 0)
        (void)fcntl(STDIN_FILENO, F_SETFL, ec->stdin_flags);
    eddy_close(ec->h);
    for (size_t i = 0; i < ec->nranks; i++)
        flush_lines(&ec->ranks[i]);
    free(ec->ranks);
}

static int exec_run(int argc, char **argv)
{
    static const struct option opts[] = {
        {"rank", required_argument, NULL, 'r'},
        {"label", no_argument, NULL, 'l'},
        {"dir", required_argument, NULL, 'd'},
        {"no-stdin", no_argument, NULL, 'n'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct execcmd ec = {.use_stdin = true};
    const char *ranks = NULL, *dir = NULL;
    idset_t *ids;
    char *body;
    int c, status = 0;

    while ((c = getopt_long(argc, argv, "+r:ld:nh", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            ranks = optarg;
            break;
        case 'l':
            ec.label = true;
            break;
        case 'd':
            dir = optarg;
            break;
        case 'n':
            ec.use_stdin = false;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        default:
            fputs(usage_text, stderr);
            return 1;
        }
    }
    if (optind >= argc)
        cmd_die("exec", "no command given (see 'eddy exec -h')");

    /* 1. check the ranks against the instance and build the request */
    if (ranks && strcmp(ranks, "all") != 0)
        idset_destroy(parse_ranks(ranks, IDSET_ID_MAX)); /* syntax first */
    ec.h = cmd_open("exec");
    ec.loop = eddy_get_loop(ec.h);
    ids = parse_ranks(ranks, eddy_get_size(ec.h));
    ec.window = OUTPUT_BUDGET / idset_count(ids);
    if (ec.window < WINDOW_MIN)
        ec.window = WINDOW_MIN;
    if (ec.window > WINDOW_MAX)
        ec.window = WINDOW_MAX;
    body =
        make_body(argc - optind, argv + optind, dir, ec.use_stdin, ec.window);

    /* 2. start every rank, then run the loop until every stream ends */
    signals_init(&ec);
    start_ranks(&ec, ids, body);
    while (ec.ndone < ec.nranks && !ec.aborted) {
        if (uv_run(ec.loop, UV_RUN_DEFAULT) == 0 && ec.ndone < ec.nranks &&
            !ec.aborted) {
            /* nothing left that could answer */
            for (size_t i = 0; i < ec.nranks; i++)
                if (!ec.ranks[i].done)
                    rank_failed(&ec.ranks[i], ENOTCONN,
                                "lost the connection to the instance");
        }
    }

    /* 3. the exit status is the worst of the ranks' */
    for (size_t i = 0; i < ec.nranks; i++)
        if (ec.ranks[i].done && ec.ranks[i].status > status)
            status = ec.ranks[i].status;
    if (ec.aborted && ec.abort_status > status)
        status = ec.abort_status;
    if (output_failed && status == 0)
        status = 1;
    finish(&ec);
    idset_destroy(ids);
    free(body);
    return status;
}

const struct cmd cmd_exec = {
    .name = "exec",
    .summary = "run a command on broker ranks",
    .usage = usage_text,
    .run = exec_run,
};
