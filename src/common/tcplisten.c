/* tcplisten.c - a listening TCP socket on a port the kernel picks. */
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <stdbool.h>
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

static bool is_loopback(struct in_addr a)
{
    return (ntohl(a.s_addr) >> 24) == 127;
}

struct in_addr tcplisten_host_address(const char *hostname)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL, *ai;
    struct ifaddrs *ifs = NULL, *i;
    struct in_addr addr = {.s_addr = htonl(INADDR_LOOPBACK)};

    if (hostname && getaddrinfo(hostname, NULL, &hints, &res) == 0) {
        for (ai = res; ai; ai = ai->ai_next) {
            struct in_addr a = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
            if (!is_loopback(a)) {
                freeaddrinfo(res);
                return a;
            }
        }
        freeaddrinfo(res);
    }
    if (getifaddrs(&ifs) == 0) {
        for (i = ifs; i; i = i->ifa_next) {
            struct in_addr a;

            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET ||
                !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
                continue;
            a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
            if (!is_loopback(a)) {
                addr = a;
                break;
            }
        }
        freeifaddrs(ifs);
    }
    return addr;
}
