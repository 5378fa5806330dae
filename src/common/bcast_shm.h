/* bcast_shm.h - chunk slots in memory shared by two brokers of one host.
 *
 * Between brokers on the same machine a chunk sent over TCP costs a copy
 * into the kernel, the TCP stack and a copy out again; through a shared
 * memfd it costs one memcpy by the sender and nothing by the receiver,
 * which writes, hashes and forwards straight from the mapping.  Used by the
 * bcast service (src/broker/bcast.c, docs/bcast.md) for each parent-child
 * link of a session; the messages still go over the link, only the chunk
 * bytes move to the slot the message names.
 *
 * The memfd has a fixed layout: a header page holding a random cookie,
 * then BCAST_SHM_SLOTS slots of BCAST_CHUNK_MAX bytes.  It is created
 * sparse (only the pages of slots in use take memory) and sealed against
 * shrinking or growing, so that the reader's mapping can never fault
 * beyond the end of the file.
 *
 * Lifecycle:
 *  1. The sender: bcast_shm_create(); bcast_shm_pid(), bcast_shm_fd() and
 *     bcast_shm_cookie() describe it to the receiver (in bcast.open).
 *  2. The receiver: bcast_shm_attach(pid, fd, cookie) opens the sender's
 *     fd through /proc/PID/fd/FD and maps it read-only.  It works only on
 *     the same host, for the same user, and only when the file found there
 *     carries the cookie: a receiver on another machine (or any mix-up)
 *     fails and the link keeps sending payloads over the socket.
 *  3. Once the receiver answered, the sender may bcast_shm_close_fd():
 *     the mappings keep the memory alive.
 *  4. The sender fills a slot (bcast_shm_slot()) while it is free, names
 *     it in a message, and reuses it only once the receiver answered that
 *     message; the receiver reads the slot only until it answers.  The
 *     slot discipline is the caller's (the bcast window): this module
 *     neither locks nor counts.
 *  5. bcast_shm_destroy() on both sides.
 *
 * Invariants: a mapping is always BCAST_SHM_SIZE bytes and the file behind
 * it cannot change size; the receiver's mapping is read-only.
 */
#ifndef EDDY_COMMON_BCAST_SHM_H
#define EDDY_COMMON_BCAST_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eddy/core.h"
#include "bcast_proto.h"

/* As many slots as chunks in flight per hop (BCAST_WINDOW). */
#define BCAST_SHM_SLOTS 4

/* Header page (the cookie), then the slots. */
#define BCAST_SHM_HEADER 4096u
#define BCAST_SHM_SIZE                                                         \
    ((size_t)BCAST_SHM_HEADER + (size_t)BCAST_SHM_SLOTS * BCAST_CHUNK_MAX)

/* 128 random bits, as 32 hex digits (plus NUL) on the wire. */
#define BCAST_SHM_COOKIE_SIZE 16
#define BCAST_SHM_COOKIE_HEX (2 * BCAST_SHM_COOKIE_SIZE + 1)

typedef struct bcast_shm bcast_shm_t;

/* The sender's side: a new sealed memfd, mapped read-write, with a fresh
 * cookie.  NULL with errno and 'err' set: ENOSYS (no memfd or sealing) or
 * the errno of memfd_create, ftruncate, fcntl, mmap, getrandom. */
bcast_shm_t *bcast_shm_create(eddy_error_t *err);

/* The receiver's side: open /proc/'pid'/fd/'fd', check that it is a sealed
 * memfd of BCAST_SHM_SIZE bytes owned by us whose header holds 'cookie'
 * (32 hex digits), and map it read-only.  NULL with errno and 'err' set:
 * EINVAL (bad arguments or cookie text), ESTALE (a file, but not the one
 * meant: wrong type, size, seals, owner or cookie), or the errno of open,
 * fstat, mmap (ENOENT, EACCES, ...: another host, another user). */
bcast_shm_t *bcast_shm_attach(pid_t pid,
                              int fd,
                              const char *cookie,
                              eddy_error_t *err);

/* Unmap, close.  Accepts NULL, leaves errno alone. */
void bcast_shm_destroy(bcast_shm_t *m);

/* The sender's pid and fd to name in the open (-1 once closed or on the
 * receiver's side), and the cookie as 32 hex digits (owned by 'm'). */
pid_t bcast_shm_pid(const bcast_shm_t *m);
int bcast_shm_fd(const bcast_shm_t *m);
const char *bcast_shm_cookie(const bcast_shm_t *m);

/* Close the sender's fd (the mapping stays).  Accepts NULL. */
void bcast_shm_close_fd(bcast_shm_t *m);

/* Slot 'i' (0 .. BCAST_SHM_SLOTS-1): BCAST_CHUNK_MAX bytes, writable on the
 * sender's side only (the receiver must not write through the pointer; its
 * pages are mapped read-only).  NULL for a bad 'i'. */
void *bcast_shm_slot(const bcast_shm_t *m, int i);

#endif /* !EDDY_COMMON_BCAST_SHM_H */
