/* rmtree.h - remove a directory tree without ever leaving it (pure: no
 * logging, no global state).
 *
 * Made for job tmpdirs, which the job's own tasks filled: a task may
 * leave a symlink to / (or to the user's home) in it, a directory of mode
 * 0500 or 0000, or a chain of directories deeper than PATH_MAX.  So:
 *  - symlinks are unlinked, never followed: every directory is opened
 *    with openat(O_DIRECTORY | O_NOFOLLOW) relative to its parent's fd,
 *    and entries are removed with unlinkat() on that fd, so no path
 *    string is ever resolved below the top;
 *  - the walk is iterative (an explicit stack on the heap), so a deep
 *    tree costs memory, not C stack; at most RMTREE_OPEN_MAX directories
 *    are open at once (deeper levels are reopened through ".." and
 *    checked to be the same directory by device and inode), so a deep
 *    tree cannot exhaust the fd table;
 *  - a directory the owner may not read or write (e.g. mode 0500) is
 *    given mode 0700 before it is emptied (for root, modes don't matter);
 *  - a directory on another file system (a mount point) is not entered:
 *    the removal stops with EXDEV rather than empty a mounted file system.
 *
 * The tree must not be changed while it is being removed (the caller made
 * sure its writers are gone).  A directory that fills up again while
 * being emptied is scanned again, a bounded number of times.
 */
#ifndef EDDY_COMMON_RMTREE_H
#define EDDY_COMMON_RMTREE_H

#include "eddy/core.h"

/* Directories kept open during a removal: deeper levels are reopened. */
#define RMTREE_OPEN_MAX 16

/* Rescans of a directory that was not empty after its entries were
 * removed (something still writes into it) before giving up. */
#define RMTREE_RESCAN_MAX 8

/* Remove the directory 'name' (relative to the directory fd 'dirfd', or
 * AT_FDCWD, or an absolute path) and everything in it.  'name' itself
 * must be a directory: a symlink, even to a directory, is refused and
 * left alone.  0 on success.  -1 with errno and 'err' naming the path
 * (below 'name') and the call that failed:
 *   EINVAL   NULL or empty 'name';
 *   ENOENT   'name' does not exist;
 *   ENOTDIR, ELOOP  'name' is not a directory (or is a symlink);
 *   EXDEV    a directory below is a mount point (left in place);
 *   ENOTEMPTY  a directory kept filling up (RMTREE_RESCAN_MAX);
 *   ENOMEM, or the errno of openat(), unlinkat(), readdir(), fchmod().
 * On failure whatever was removed before the error stays removed; the
 * walk stops at the first error. */
int rmtree_at(int dirfd, const char *name, eddy_error_t *err);

/* rmtree_at(AT_FDCWD, path, err). */
int rmtree(const char *path, eddy_error_t *err);

#endif /* !EDDY_COMMON_RMTREE_H */
