/* tcplisten.h - a listening TCP socket on a port the kernel picks.
 *
 * Brokers learn each other's ports at startup (`eddy start --test-size`
 * passes them on the command line, the PMI bootstrap through the PMI
 * key-value space), so the port is never configured: bind to port 0 and
 * read back what the kernel gave.
 */
#ifndef EDDY_COMMON_TCPLISTEN_H
#define EDDY_COMMON_TCPLISTEN_H

#include <netinet/in.h>

/* A close-on-exec IPv4 socket bound to 'addr' on a free port and
 * listening; the port in '*port'.  The caller closes it.  -1 with errno
 * (socket(), bind(), listen()'s). */
int tcplisten_any_port(struct in_addr addr, int *port);

/* The IPv4 address other hosts reach this one at: the first address
 * 'hostname' resolves to that is not loopback (Debian maps the host name
 * to 127.0.1.1 in /etc/hosts), else the first address of an interface
 * that is up and not loopback, else 127.0.0.1 (a machine alone). */
struct in_addr tcplisten_host_address(const char *hostname);

#endif /* !EDDY_COMMON_TCPLISTEN_H */
