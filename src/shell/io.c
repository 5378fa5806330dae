/* io.c - forward task output to rank 0 with credit, feed task stdin.
 *
 * One read buffer serves every pipe: libuv calls alloc then read for one
 * stream at a time, and eddy_rpc() copies the payload before returning.
 * Pipe handles point at their stream; io->handles counts the ones not yet
 * closed so that destroy can wait for their close callbacks before
 * freeing the memory they live in.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>
#include <jansson.h>

#include "src/shell/io.h"

struct iotask;

struct ostream {
    struct iotask *t;
    uv_pipe_t pipe;
    const char *name; /* "stdout" or "stderr" */
    bool open;        /* pipe handle initialized, not closed */
    bool done;        /* EOF reached and its message sent */
};

struct iotask {
    shell_io_t *io;
    uint32_t rank;
    struct ostream out, err;
    uv_pipe_t in;
    bool in_open;   /* stdin handle initialized, not closing */
    bool in_handle; /* stdin handle initialized, not closed */
};

struct shell_io {
    eddy_t *h;
    uv_loop_t *loop;
    uint64_t id;
    size_t window;
    size_t unanswered; /* output bytes sent, not answered */
    unsigned writes;   /* job-io.write requests not answered */
    unsigned open_out; /* output streams that have not sent EOF */
    unsigned handles;  /* libuv handles not yet closed */
    bool paused;       /* reads stopped: window full */
    bool warned;       /* a lost write was reported */
    shell_io_done_f done_cb;
    void *done_arg;
    struct iotask **tasks;
    size_t ntasks;
    char buf[SHELL_IO_CHUNK];
};

/* One job-io.write in flight. */
struct wctx {
    shell_io_t *io;
    size_t len;
};

/* One stdin write in flight. */
struct inwrite {
    uv_write_t w;
    size_t len;
    char data[];
};

bool shell_io_done(const shell_io_t *io)
{
    return io && io->open_out == 0 && io->writes == 0;
}

size_t shell_io_unanswered(const shell_io_t *io)
{
    return io ? io->unanswered : 0;
}

static void check_done(shell_io_t *io)
{
    if (shell_io_done(io) && io->done_cb)
        io->done_cb(io->done_arg);
}

static void on_close(uv_handle_t *h)
{
    shell_io_t *io = h->data;

    io->handles--;
}

static void close_pipe(shell_io_t *io, uv_pipe_t *p)
{
    p->data = io;
    if (!uv_is_closing((uv_handle_t *)p))
        uv_close((uv_handle_t *)p, on_close);
}

static void reads_start(shell_io_t *io);
static void reads_stop(shell_io_t *io);

static void on_write_answer(eddy_future_t *f, void *arg)
{
    struct wctx *w = arg;
    shell_io_t *io = w->io;

    if (eddy_rpc_get(f, NULL) < 0 && !io->warned) {
        io->warned = true;
        fprintf(stderr, "eddy-shell: job %ju: output to rank 0 lost: %s\n",
                (uintmax_t)io->id, eddy_future_error_string(f));
    }
    io->unanswered -= w->len < io->unanswered ? w->len : io->unanswered;
    io->writes--;
    free(w);
    eddy_future_destroy(f);
    if (io->paused && io->unanswered < io->window)
        reads_start(io);
    check_done(io);
}

/* Send one job-io.write; output that cannot be sent is lost, not fatal. */
static void send_write(struct ostream *s,
                       const void *data,
                       size_t len,
                       bool eof)
{
    shell_io_t *io = s->t->io;
    eddy_future_t *f = NULL;
    struct wctx *w;
    json_t *o;
    char *body;

    o = json_pack("{s:I s:I s:s s:b}", "id", (json_int_t)io->id, "rank",
                  (json_int_t)s->t->rank, "stream", s->name, "eof", eof);
    body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!body || !(w = calloc(1, sizeof(*w))))
        goto error;
    w->io = io;
    w->len = len;
    if (!(f = eddy_rpc(io->h, "job-io.write", 0, 0, body, data, len)) ||
        eddy_future_then(f, -1, on_write_answer, w) < 0) {
        free(w);
        goto error;
    }
    free(body);
    io->writes++;
    io->unanswered += len;
    return;
error:
    if (!io->warned) {
        io->warned = true;
        fprintf(stderr, "eddy-shell: job %ju: output to rank 0 lost: %s\n",
                (uintmax_t)io->id, strerror(errno));
    }
    eddy_future_destroy(f);
    free(body);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct ostream *s = h->data;

    *buf = uv_buf_init(s->t->io->buf, sizeof(s->t->io->buf));
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct ostream *s = st->data;
    shell_io_t *io = s->t->io;

    if (nread == 0)
        return;
    if (nread > 0) {
        send_write(s, buf->base, (size_t)nread, false);
        if (io->unanswered >= io->window && !io->paused)
            reads_stop(io);
        return;
    }
    /* EOF, or a read error, which ends the stream just the same */
    send_write(s, NULL, 0, true);
    s->done = true;
    s->open = false;
    io->open_out--;
    close_pipe(io, &s->pipe);
    check_done(io);
}

static void reads_stop(shell_io_t *io)
{
    io->paused = true;
    for (size_t i = 0; i < io->ntasks; i++) {
        struct iotask *t = io->tasks[i];
        if (t->out.open)
            uv_read_stop((uv_stream_t *)&t->out.pipe);
        if (t->err.open)
            uv_read_stop((uv_stream_t *)&t->err.pipe);
    }
}

static void reads_start(shell_io_t *io)
{
    io->paused = false;
    for (size_t i = 0; i < io->ntasks; i++) {
        struct iotask *t = io->tasks[i];
        if (t->out.open)
            uv_read_start((uv_stream_t *)&t->out.pipe, on_alloc, on_read);
        if (t->err.open)
            uv_read_start((uv_stream_t *)&t->err.pipe, on_alloc, on_read);
    }
}

shell_io_t *shell_io_create(
    eddy_t *h, uint64_t jobid, size_t window, shell_io_done_f done, void *arg)
{
    shell_io_t *io;

    if (!h || window == 0) {
        errno = EINVAL;
        return NULL;
    }
    if (!(io = calloc(1, sizeof(*io))))
        return NULL;
    io->h = h;
    io->loop = eddy_get_loop(h);
    io->id = jobid;
    io->window = window;
    io->done_cb = done;
    io->done_arg = arg;
    return io;
}

/* Open 'fd' as an output stream of 't' (fd -1: none). */
static int ostream_open(struct iotask *t,
                        struct ostream *s,
                        const char *name,
                        int fd)
{
    shell_io_t *io = t->io;
    int rc;

    s->t = t;
    s->name = name;
    s->done = true;
    if (fd < 0)
        return 0;
    uv_pipe_init(io->loop, &s->pipe, 0);
    s->pipe.data = s;
    io->handles++;
    if ((rc = uv_pipe_open(&s->pipe, fd)) < 0) {
        close(fd);
        close_pipe(io, &s->pipe);
        errno = -rc;
        return -1;
    }
    s->open = true;
    s->done = false;
    io->open_out++;
    if (!io->paused)
        uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
    return 0;
}

int shell_io_add_task(
    shell_io_t *io, uint32_t rank, int infd, int outfd, int errfd)
{
    struct iotask *t = NULL, **tasks;
    int rc;

    if (!io) {
        errno = EINVAL;
        goto error;
    }
    if (!(tasks = realloc(io->tasks, (io->ntasks + 1) * sizeof(*tasks))))
        goto error;
    io->tasks = tasks;
    if (!(t = calloc(1, sizeof(*t))))
        goto error;
    t->io = io;
    t->rank = rank;
    io->tasks[io->ntasks++] = t;
    if (infd >= 0) {
        uv_pipe_init(io->loop, &t->in, 0);
        t->in.data = io;
        io->handles++;
        t->in_handle = true;
        if ((rc = uv_pipe_open(&t->in, infd)) < 0) {
            close(infd);
            infd = -1;
            close_pipe(io, &t->in);
            errno = -rc;
            goto error;
        }
        t->in_open = true;
        infd = -1;
    }
    if (ostream_open(t, &t->out, "stdout", outfd) < 0) {
        outfd = -1;
        goto error;
    }
    outfd = -1;
    if (ostream_open(t, &t->err, "stderr", errfd) < 0) {
        errfd = -1;
        goto error;
    }
    return 0;
error:
    if (infd >= 0)
        close(infd);
    if (outfd >= 0)
        close(outfd);
    if (errfd >= 0)
        close(errfd);
    return -1;
}

static struct iotask *task_lookup(shell_io_t *io, uint32_t rank)
{
    for (size_t i = 0; io && i < io->ntasks; i++)
        if (io->tasks[i]->rank == rank)
            return io->tasks[i];
    return NULL;
}

static void on_stdin_write(uv_write_t *w, int status)
{
    free(w->data);
}

static void on_stdin_shutdown(uv_shutdown_t *sr, int status)
{
    struct iotask *t = sr->data;

    close_pipe(t->io, &t->in);
    free(sr);
}

int shell_io_stdin(
    shell_io_t *io, uint32_t rank, const void *data, size_t len, bool eof)
{
    struct iotask *t = task_lookup(io, rank);
    struct inwrite *wr;
    uv_shutdown_t *sr;
    uv_buf_t buf;
    int rc;

    if (!t) {
        errno = ENOENT;
        return -1;
    }
    if (!t->in_open) {
        errno = EPIPE;
        return -1;
    }
    if (len > 0) {
        if (!(wr = malloc(sizeof(*wr) + len)))
            return -1;
        memcpy(wr->data, data, len);
        wr->len = len;
        wr->w.data = wr;
        buf = uv_buf_init(wr->data, (unsigned int)len);
        if ((rc = uv_write(&wr->w, (uv_stream_t *)&t->in, &buf, 1,
                           on_stdin_write)) < 0) {
            free(wr);
            errno = -rc;
            return -1;
        }
    }
    if (eof) {
        t->in_open = false;
        if (!(sr = calloc(1, sizeof(*sr)))) {
            close_pipe(io, &t->in);
            return 0;
        }
        sr->data = t;
        if (uv_shutdown(sr, (uv_stream_t *)&t->in, on_stdin_shutdown) < 0) {
            free(sr);
            close_pipe(io, &t->in);
        }
    }
    return 0;
}

void shell_io_stdin_close(shell_io_t *io, uint32_t rank)
{
    struct iotask *t = task_lookup(io, rank);

    if (t && t->in_handle) {
        t->in_open = false;
        close_pipe(io, &t->in);
    }
}

void shell_io_destroy(shell_io_t *io)
{
    int saved_errno = errno;

    if (!io)
        return;
    for (size_t i = 0; i < io->ntasks; i++) {
        struct iotask *t = io->tasks[i];
        if (t->out.open)
            close_pipe(io, &t->out.pipe);
        if (t->err.open)
            close_pipe(io, &t->err.pipe);
        if (t->in_handle)
            close_pipe(io, &t->in);
    }
    /* Close callbacks run on the next iterations; answers to writes in
     * flight reference 'io', so they are awaited too (they come, or fail
     * with ENOTCONN if the broker is gone). */
    while (io->handles > 0 || io->writes > 0)
        uv_run(io->loop, io->writes > 0 ? UV_RUN_ONCE : UV_RUN_NOWAIT);
    for (size_t i = 0; i < io->ntasks; i++)
        free(io->tasks[i]);
    free(io->tasks);
    free(io);
    errno = saved_errno;
}
