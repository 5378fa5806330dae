/* bcast_src.h - the sending end of a file broadcast: cut a file into chunks.
 *
 * Pure: reads one file descriptor, does no other I/O, has no event loop.
 * The network layer sends each chunk as the payload of one message and the
 * final struct bcast_file_info (src/common/bcast_proto.h) after the last.
 *
 * Lifecycle:
 *  1. bcast_src_create(fd, chunksize, flags, err) looks at the fd: a
 *     regular file (size, mode and mtime known now, holes skipped) or a
 *     stream such as a pipe (size known at the end, no holes).
 *  2. bcast_src_next() until it returns 0: each call returns one chunk,
 *     compressed with zstd if BCAST_F_COMPRESS and it helped.
 *  3. bcast_src_finish() gives size, mode, mtime and the whole-file hash.
 *  4. bcast_src_destroy().
 *
 * Invariants: chunks come in increasing offset order, never overlap, never
 * cover a hole of a regular file, and carry at most 'chunksize' payload
 * bytes.  Memory is one chunk buffer plus, with compression, one
 * compression buffer and a zstd context, whatever the file size.
 */
#ifndef EDDY_COMMON_BCAST_SRC_H
#define EDDY_COMMON_BCAST_SRC_H

#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"
#include "bcast_proto.h"

typedef struct bcast_src bcast_src_t;

/* Start reading 'fd', which stays the caller's (borrowed; keep it open
 * until destroy).  'chunksize' 0 means BCAST_CHUNK_DEFAULT.  'flags' are
 * BCAST_F_* (only BCAST_F_COMPRESS changes what the source does; the
 * others are for the sink).
 *
 * A regular file is read from offset 0 to its size at this call with
 * pread(); its file offset is left unspecified (finding holes moves it).
 * Anything else (pipe, socket, character device) is read with read() from
 * where it stands until EOF.  Mode and mtime are those fstat() reports now
 * (for a pipe: the pipe's own, usually 0600 and the last write time).
 *
 * Returns NULL with errno and 'err' set: EINVAL (chunksize above
 * BCAST_CHUNK_MAX, unknown flag), EBADF (not open for reading), EISDIR,
 * EFBIG (above BCAST_SIZE_MAX), ENOMEM, or fstat()'s errno. */
bcast_src_t *bcast_src_create(int fd,
                              size_t chunksize,
                              int flags,
                              eddy_error_t *err);

/* Accepts NULL, leaves errno alone.  Does not close the fd. */
void bcast_src_destroy(bcast_src_t *s);

/* Read the next chunk into '*c': returns 1 with '*c' filled ('c->data'
 * points into the source and stays valid until the next call or destroy),
 * 0 at the end (and again on later calls), -1 with errno and 'err' set:
 * EIO if a regular file shrank while being read, EFBIG if a stream passes
 * BCAST_SIZE_MAX, EAGAIN if a non-blocking fd has nothing yet (call again
 * later; data already read is never lost), or read()'s errno.  A failed
 * call leaves '*c' untouched and loses nothing: calling again retries. */
int bcast_src_next(bcast_src_t *s, struct bcast_chunk *c, eddy_error_t *err);

/* Size of the file if known now (a regular file), else -1.  For progress
 * reports. */
int64_t bcast_src_size(const bcast_src_t *s);

/* After bcast_src_next() returned 0: fill '*info'.  May be called again.
 * Returns -1 with errno EINVAL if the end was not reached yet ('*info'
 * untouched). */
int bcast_src_finish(bcast_src_t *s, struct bcast_file_info *info);

#endif /* !EDDY_COMMON_BCAST_SRC_H */
