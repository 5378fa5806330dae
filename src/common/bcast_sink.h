/* bcast_sink.h - the receiving end of a file broadcast: write one file.
 *
 * Pure: file-system calls only, no sockets, no event loop.  On each node
 * the network layer feeds the chunks (src/common/bcast_proto.h) of one file
 * to one sink, then the source's struct bcast_file_info.
 *
 * Lifecycle:
 *  1. bcast_sink_create(tmpdir, destpath, flags, err) resolves the
 *     destination's directory and creates a temp file there, named
 *     ".NAME.eddy-XXXXXX", mode 0600, so that the final rename is atomic.
 *  2. bcast_sink_write() for each chunk, in increasing offset order.
 *  3. bcast_sink_commit() sizes the file, checks the whole-file hash, sets
 *     mode and mtime, and renames it into place.
 *  4. bcast_sink_destroy(); before a successful commit it aborts: the temp
 *     file is removed.
 *
 * Invariants: nothing partial ever appears at the destination path; after
 * a failed commit or an abort no temp file remains.  A relative destpath
 * stays under tmpdir: '..' components are refused and no symbolic link is
 * followed below tmpdir (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or a
 * component walk with O_NOFOLLOW where the kernel lacks openat2).  An
 * absolute destpath is written with the caller's own rights, links
 * followed, like cp.  Memory is one decompression buffer (at most
 * BCAST_CHUNK_MAX) and a zstd context.
 *
 * Chunk fields are trusted no more than the network they came from: every
 * length, offset and the decompressed size are checked.
 */
#ifndef EDDY_COMMON_BCAST_SINK_H
#define EDDY_COMMON_BCAST_SINK_H

#include "eddy/core.h"
#include "bcast_proto.h"

typedef struct bcast_sink bcast_sink_t;

/* Prepare to write 'destpath' (the file's final path).  A relative
 * 'destpath' is resolved under 'tmpdir' (which must then be non-NULL; the
 * tmpdir itself is trusted); an absolute one ignores 'tmpdir'.  'flags' are
 * BCAST_F_* (BCAST_F_COMPRESS is accepted and ignored: each chunk says
 * whether it is compressed).  Strings are copied.
 *
 * Returns NULL with errno and 'err' set (the message names the path):
 *  EINVAL  empty destpath, a '..' component, a relative path without
 *          tmpdir, an unknown flag
 *  ELOOP   a symbolic link on the way below tmpdir
 *  ENOENT  tmpdir or the destination's directory does not exist
 *  ENOTDIR a component of the path is not a directory
 *  EISDIR  destpath is an existing directory or ends with '/'
 *  EEXIST  destpath exists and BCAST_F_OVERWRITE is not set
 *  or the errno of opening the directory or creating the temp file
 *  (EACCES, EROFS, ENAMETOOLONG, ENOSPC, EDQUOT, ...). */
bcast_sink_t *bcast_sink_create(const char *tmpdir,
                                const char *destpath,
                                int flags,
                                eddy_error_t *err);

/* Abort unless committed: close and remove the temp file.  Accepts NULL,
 * leaves errno alone. */
void bcast_sink_destroy(bcast_sink_t *k);

/* Write one chunk ('c->data' is borrowed for the call).  Returns 0, or -1
 * with errno and 'err' set:
 *  EINVAL  chunk before the end of the previous one (out of order or
 *          overlapping), or the sink already committed or failed at commit
 *  EFBIG   chunk past BCAST_SIZE_MAX
 *  EPROTO  rawlen 0 or above BCAST_CHUNK_MAX, a raw chunk whose len is not
 *          rawlen, a compressed chunk that is not zstd data of exactly
 *          rawlen bytes
 *  ENOMEM
 *  or pwrite()'s errno (ENOSPC, EDQUOT, EIO, EFBIG, ...) with the path.
 * A failed call has not advanced the sink: the same chunk (or a correct
 * one) may be written again. */
int bcast_sink_write(bcast_sink_t *k,
                     const struct bcast_chunk *c,
                     eddy_error_t *err);

/* Finish the file described by '*info' (borrowed): truncate or extend it
 * to info->size (a trailing hole stays a hole), compare the hash of
 * everything written (gaps as zeros) with info->hash, set the mode (the
 * source's with BCAST_F_PRESERVE, else 0666 & ~umask like cp) and, with
 * BCAST_F_PRESERVE, the mtime, then rename it to destpath, atomically.
 * Without BCAST_F_OVERWRITE a destination that appeared since create is not
 * replaced.  Data is left to the page cache, not fsync'ed (see the .c).
 *
 * Returns 0, or -1 with errno and 'err' set, and then the temp file is
 * already removed and later calls fail with EINVAL:
 *  EINVAL  'info' NULL (then nothing is removed), already committed
 *  EPROTO  chunks went past info->size, info->size above BCAST_SIZE_MAX,
 *          mtime_nsec out of range
 *  EBADMSG "checksum mismatch": the content is not what the source read
 *  EEXIST  the destination appeared meanwhile (without OVERWRITE)
 *  EISDIR  the destination became a directory
 *  or the errno of ftruncate/fchmod/futimens/rename, with the path. */
int bcast_sink_commit(bcast_sink_t *k,
                      const struct bcast_file_info *info,
                      eddy_error_t *err);

#endif /* !EDDY_COMMON_BCAST_SINK_H */
