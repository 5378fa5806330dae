/* wire.c - see wire.h */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "wire.h"

/* Frames in these tests are small; a bigger length means a broken peer. */
#define WIRE_FRAME_MAX (1u << 20)

int wire_read_all(int fd, void *buf, size_t len)
{
    char *p = buf;

    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int wire_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

msg_t *wire_read_msg(int fd)
{
    uint8_t hdr[MSG_HEADER_SIZE];
    size_t total;
    uint8_t *buf;
    msg_t *msg = NULL;

    if (wire_read_all(fd, hdr, sizeof(hdr)) < 0)
        return NULL;
    total = MSG_HEADER_SIZE + ((size_t)hdr[16] << 8 | hdr[17]) +
            be32(hdr + 20) + be32(hdr + 24);
    if (total > WIRE_FRAME_MAX || !(buf = malloc(total)))
        return NULL;
    memcpy(buf, hdr, sizeof(hdr));
    if (wire_read_all(fd, buf + MSG_HEADER_SIZE, total - MSG_HEADER_SIZE) == 0)
        (void)msg_decode(buf, total, &msg, NULL);
    free(buf);
    return msg;
}

int wire_send_msg(int fd, msg_t *msg)
{
    void *buf;
    size_t len;
    int rc = -1;

    if (msg && msg_encode(msg, &buf, &len) == 0) {
        rc = wire_write_all(fd, buf, len);
        free(buf);
    }
    msg_decref(msg);
    return rc;
}

int wire_listen(char *dir,
                size_t dirlen,
                char *path,
                size_t pathlen,
                char *uri,
                size_t urilen)
{
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    int fd, e;

    (void)dirlen;
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, pathlen, "%s/local-0", dir);
    snprintf(uri, urilen, "local://%s", path);
    snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", path);
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
        listen(fd, 4) < 0) {
        e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}
