/* eddy/bcast.h - ship a file to every node of a job (docs/bcast.md).
 *
 * The contents of a file descriptor are written to the same path on every
 * node of a job: a relative path is under the job's tmpdir on each node
 * (EDDY_JOB_TMPDIR), an absolute one is used as is.  Chunks stream from
 * the caller to the instance and down the broker tree, pipelined and
 * flow-controlled; each node writes a temp file beside the destination,
 * checks the whole file's checksum and renames it into place, so nothing
 * partial is ever visible at the destination.  The job must be running
 * (or held at its startup barrier).
 *
 * Use:
 *  1. f = eddy_job_bcast(h, id, fd, "bin/tool", 0, EDDY_BCAST_PRESERVE);
 *  2. optionally eddy_future_wait_for(f, 0.2) in a loop, showing
 *     eddy_job_bcast_progress(f, ...);
 *  3. eddy_job_bcast_get(f, &ok, &nfailed) waits for the end: 'ok' lists
 *     the nodes (broker ranks) that have the file, and for each failure
 *     eddy_job_bcast_failure() gives the node, errno and message;
 *  4. eddy_future_destroy(f) (before the end: aborts the transfer, and
 *     every node removes its temp file).
 * The descriptor is read from the handle's loop while the transfer runs
 * (a pipe may block it); it is not closed.
 */
#ifndef EDDY_BCAST_H
#define EDDY_BCAST_H

#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"
#include "eddy/job.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    EDDY_BCAST_PRESERVE = 0x1,  /* keep the source's mode and mtime */
    EDDY_BCAST_OVERWRITE = 0x2, /* replace an existing destination (else
                                   it is an error on that node) */
    EDDY_BCAST_COMPRESS = 0x4,  /* zstd: compressed once here, decompressed
                                   on each node */
};

/* Options beyond eddy_job_bcast()'s; zero or NULL fields take defaults. */
struct eddy_bcast_options {
    const char *nodes; /* idset of the job's nodes (broker ranks) to ship
                          to; NULL: all of them */
    double timeout;    /* seconds of silence after which the instance
                          aborts the transfer (its sender is presumed
                          dead); 0: 30 */
};

/* Start shipping the contents of 'fd' (borrowed, read from its current
 * position for pipes, from offset 0 with holes skipped for regular files)
 * to 'destpath' on the nodes of job 'id'.  'chunksize' 0 picks 1 MiB (at
 * most 16 MiB).  Returns a future (caller destroys) or NULL with errno:
 * EINVAL (NULL handle or path, bad flags or chunk size, ID out of range),
 * EBADF or the errno of reading 'fd' (e.g. EISDIR), ENOTCONN, ENOMEM. */
eddy_future_t *eddy_job_bcast(eddy_t *h,
                              eddy_jobid_t id,
                              int fd,
                              const char *destpath,
                              size_t chunksize,
                              int flags);

/* eddy_job_bcast() with 'opts' (may be NULL). */
eddy_future_t *eddy_job_bcast_opts(eddy_t *h,
                                   eddy_jobid_t id,
                                   int fd,
                                   const char *destpath,
                                   size_t chunksize,
                                   int flags,
                                   const struct eddy_bcast_options *opts);

/* Ship files and directory trees: 'paths' (n of them, at least one) are
 * packed into one archive (regular files, directories, symlinks as links,
 * modes, mtimes; src/common/bcast_tree.h) in an unlinked temp file under
 * $TMPDIR (or /tmp) before this returns, which is then shipped like a
 * file and extracted on each node as the directory 'destpath': a single
 * directory in 'paths' becomes 'destpath' itself (like `cp -r DIR DEST`
 * for a new DEST); otherwise 'destpath' holds each path by its last
 * component.  The directory appears whole or not at all (extracted beside
 * it, then renamed); with EDDY_BCAST_OVERWRITE an existing one is
 * replaced.  Flags and options as for eddy_job_bcast_opts().  NULL with
 * errno as eddy_job_bcast(), plus the packing's: EINVAL (a fifo, socket
 * or device, two paths with the same name; 'err' says which), ENOENT,
 * EACCES..., with 'err' (may be NULL) naming the path. */
eddy_future_t *eddy_job_bcast_paths(eddy_t *h,
                                    eddy_jobid_t id,
                                    const char *const *paths,
                                    size_t n,
                                    const char *destpath,
                                    size_t chunksize,
                                    int flags,
                                    const struct eddy_bcast_options *opts,
                                    eddy_error_t *err);

/* Wait for the end of the transfer.  0 once every node answered: '*ok'
 * (owned by the future) is the idset of nodes that have the file and
 * '*nfailed' how many failed (either may be NULL).  -1 with errno and
 * eddy_future_error_string() if the transfer as a whole failed: ENOENT
 * no such job, EAGAIN its tasks have not started, ESRCH it has ended,
 * EINVAL a destination leaving the tmpdir ('..') or nodes not in the job,
 * the errno of reading the source, ECONNABORTED the instance aborted it,
 * EPROTO a malformed answer, or the errors of eddy_rpc_get(). */
int eddy_job_bcast_get(eddy_future_t *f, const char **ok, size_t *nfailed);

/* Failure 'i' (0 <= i < nfailed) after a successful eddy_job_bcast_get():
 * the node's broker rank, errno and message (owned by the future).  -1
 * with errno EINVAL if there is no such failure. */
int eddy_job_bcast_failure(eddy_future_t *f,
                           size_t i,
                           uint32_t *rank,
                           int *errnum,
                           const char **errstr);

/* Progress so far, without waiting: bytes of the source sent and
 * acknowledged, and its size (-1 while unknown: a pipe before its end).
 * -1 with errno EINVAL if 'f' is not a bcast future. */
int eddy_job_bcast_progress(eddy_future_t *f, uint64_t *sent, int64_t *total);

#ifdef __cplusplus
}
#endif

#endif /* !EDDY_BCAST_H */
