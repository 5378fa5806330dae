/* local.c - the client socket RUNDIR/local-R (and, at rank 0, the TCP
 * listener for remote clients: tcp_client.c).
 *
 * Two locks keep strangers out: the rundir is 0700 and the socket 0600,
 * and on every accept the kernel tells us who is calling (SO_PEERCRED).
 * Only the instance owner (the uid the broker runs as) and root get in;
 * anybody else gets an EPERM greeting that says why, then the door.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "src/common/errprintf.h"
#include "broker.h"
#include "tcp_client.h"

struct local {
    broker_t *b;
    uv_pipe_t *listener;
    bool bound;             /* the socket file is ours to unlink */
    struct tcp_client *tcp; /* rank 0 with --client-listen, or NULL */
};

static void send_greeting(struct conn *c, int errnum, json_t *body)
{
    msg_t *msg;

    if (!(msg = msg_create(MSG_RESPONSE, "broker.hello", body, NULL, 0)))
        return;
    msg->matchtag = 0;
    msg->rank = c->b->rank;
    msg->errnum = (uint32_t)errnum;
    conn_send(c, msg);
    msg_decref(msg);
}

static void accept_cb(uv_stream_t *server, int status)
{
    struct local *l = server->data;
    broker_t *b = l->b;
    uv_pipe_t *pipe;
    struct ucred cred;
    socklen_t len = sizeof(cred);
    uv_os_fd_t fd;
    char name[96];
    struct conn *c;
    int rc;

    if (status < 0) {
        broker_log(b, LOG_LEVEL_WARNING, "local accept: %s",
                   uv_strerror(status));
        return;
    }
    if (!(pipe = malloc(sizeof(*pipe))) ||
        uv_pipe_init(&b->loop, pipe, 0) < 0) {
        broker_log(b, LOG_LEVEL_WARNING, "local accept: out of memory");
        free(pipe);
        return;
    }
    if ((rc = uv_accept(server, (uv_stream_t *)pipe)) < 0 ||
        (rc = uv_fileno((uv_handle_t *)pipe, &fd)) < 0) {
        broker_log(b, LOG_LEVEL_WARNING, "local accept: %s", uv_strerror(rc));
        uv_close((uv_handle_t *)pipe, (uv_close_cb)free);
        return;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        broker_log(b, LOG_LEVEL_WARNING,
                   "local accept: cannot identify the client "
                   "(SO_PEERCRED): %s",
                   strerror(errno));
        uv_close((uv_handle_t *)pipe, (uv_close_cb)free);
        return;
    }
    snprintf(name, sizeof(name), "uid %u pid %d", (unsigned)cred.uid,
             (int)cred.pid);
    if (!(c = conn_create(b, CONN_CLIENT, (uv_stream_t *)pipe, name))) {
        broker_log(b, LOG_LEVEL_WARNING, "local accept: client %s: %s", name,
                   strerror(errno));
        return;
    }
    c->uid = (uint32_t)cred.uid;
    c->pid = (uint32_t)cred.pid;
    if (cred.uid != b->uid && cred.uid != 0) {
        char text[160];
        broker_log(b, LOG_LEVEL_WARNING,
                   "refused client uid %u pid %d: "
                   "not the instance owner (uid %u)",
                   (unsigned)cred.uid, (int)cred.pid, (unsigned)b->uid);
        snprintf(text, sizeof(text),
                 "connection refused: uid %u is not "
                 "the instance owner (uid %u)",
                 (unsigned)cred.uid, (unsigned)b->uid);
        send_greeting(c, EPERM, json_pack("{s:s}", "errstr", text));
        conn_linger(c);
        return;
    }
    broker_log(b, LOG_LEVEL_DEBUG, "client %s connected", name);
    send_greeting(c, 0,
                  json_pack("{s:I s:I s:s s:I}", "rank", (json_int_t)b->rank,
                            "size", (json_int_t)b->size, "version",
                            EDDY_VERSION_STRING, "uid", (json_int_t)cred.uid));
}

/* 1 if a process accepts connections on 'path' (another broker of the
 * same rank is alive), 0 if not (stale or absent). */
static int socket_is_live(const char *path)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int fd, rc;

    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return 0;
    memcpy(sun.sun_path, path, strlen(path) + 1);
    rc = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
    close(fd);
    return rc == 0;
}

int local_start(broker_t *b, eddy_error_t *err)
{
    struct local *l;
    struct sockaddr_un sun;
    mode_t old;
    int rc;

    if (strlen(b->local_path) >= sizeof(sun.sun_path)) {
        errno = ENAMETOOLONG;
        return errprintf(err, "socket path %s is longer than %zu bytes",
                         b->local_path, sizeof(sun.sun_path) - 1);
    }
    if (!(l = calloc(1, sizeof(*l))) ||
        !(l->listener = malloc(sizeof(uv_pipe_t)))) {
        free(l);
        return errprintf(err, "out of memory");
    }
    l->b = b;
    b->local = l;
    uv_pipe_init(&b->loop, l->listener, 0);
    l->listener->data = l;
    if (socket_is_live(b->local_path)) {
        errno = EADDRINUSE;
        return errprintf(err, "%s is in use: rank %u is already running",
                         b->local_path, b->rank);
    }
    /* A socket left by a broker that died: the rundir is ours alone. */
    if (unlink(b->local_path) < 0 && errno != ENOENT)
        return errprintf(err, "cannot remove stale %s: %s", b->local_path,
                         strerror(errno));
    /* Bind with the final mode: no window where others could connect. */
    old = umask(0177);
    rc = uv_pipe_bind(l->listener, b->local_path);
    umask(old);
    if (rc < 0) {
        errno = -rc;
        return errprintf(err, "cannot bind %s: %s", b->local_path,
                         uv_strerror(rc));
    }
    l->bound = true;
    if (chmod(b->local_path, 0600) < 0)
        return errprintf(err, "chmod %s: %s", b->local_path, strerror(errno));
    if ((rc = uv_listen((uv_stream_t *)l->listener, 128, accept_cb)) < 0) {
        errno = -rc;
        return errprintf(err, "cannot listen on %s: %s", b->local_path,
                         uv_strerror(rc));
    }
    /* Remote clients reach rank 0 only: it is where the instance is
     * driven from, and one token file names one address. */
    if (b->opts.client_listen) {
        if (b->rank != 0) {
            errno = EINVAL;
            return errprintf(err, "--client-listen is for rank 0 only");
        }
        if (!(l->tcp = tcp_client_start(b, b->opts.client_listen, err)))
            return -1;
    }
    return 0;
}

void local_stop(broker_t *b)
{
    struct local *l = b->local;

    if (!l)
        return;
    if (l->listener) {
        uv_close((uv_handle_t *)l->listener, (uv_close_cb)free);
        l->listener = NULL;
    }
    if (l->bound) {
        unlink(b->local_path);
        l->bound = false;
    }
    tcp_client_stop(l->tcp);
}

void local_destroy(broker_t *b)
{
    local_stop(b);
    if (b->local)
        tcp_client_destroy(b->local->tcp);
    free(b->local);
    b->local = NULL;
}
