/* wire.h - blocking eddy frame I/O for the fake brokers of unit tests.
 *
 * The unit tests of libeddy and of its job API each run a small fake
 * broker in a thread that reads and answers frames on a plain blocking
 * socket; these are the few functions they share.
 */
#ifndef EDDY_TESTS_UNIT_SUPPORT_WIRE_H
#define EDDY_TESTS_UNIT_SUPPORT_WIRE_H

#include <stddef.h>

#include "src/common/msg.h"

/* Read or write exactly 'len' bytes (EINTR retried).  0, or -1 at EOF or
 * on error. */
int wire_read_all(int fd, void *buf, size_t len);
int wire_write_all(int fd, const void *buf, size_t len);

/* One frame from the peer (caller decrefs), or NULL at EOF, on error, for
 * a frame over 1 MiB, or for one that does not decode. */
msg_t *wire_read_msg(int fd);

/* Encode and send 'msg', then drop the caller's reference (also on
 * failure; NULL is a failure).  0 or -1. */
int wire_send_msg(int fd, msg_t *msg);

/* The listening socket of a fake broker: a new directory from the mkdtemp
 * template 'dir' (filled in), a unix socket 'dir'/local-0 in it listening,
 * its path in 'path' and "local://PATH" in 'uri' (each buffer at least
 * 128 bytes).  Returns the socket, or -1 with errno. */
int wire_listen(char *dir,
                size_t dirlen,
                char *path,
                size_t pathlen,
                char *uri,
                size_t urilen);

#endif /* !EDDY_TESTS_UNIT_SUPPORT_WIRE_H */
