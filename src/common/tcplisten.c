/* tcplisten.c - a listening TCP socket on a port the kernel picks. */
#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcplisten.h"

int tcplisten_any_port(struct in_addr addr, int *port)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr = addr};
    socklen_t len = sizeof(sin);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
        listen(fd, SOMAXCONN) < 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    *port = ntohs(sin.sin_port);
    return fd;
}
