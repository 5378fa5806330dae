/* relpath.h - checks on paths that must stay under a directory (a job's
 * tmpdir: bcast destinations, tool daemons' working directories).
 *
 * A textual check only, made before anything touches the file system, so
 * that a request that tries to leave the directory is refused with a
 * clear message; whoever then opens the path still resolves it beneath
 * the directory without following symlinks (bcast_sink.h), since a
 * symlink on the way can leave it too.
 */
#ifndef EDDY_COMMON_RELPATH_H
#define EDDY_COMMON_RELPATH_H

#include <stdbool.h>

/* True if 'path' has a ".." component ("..", "../x", "a/../b", "a/..").
 * False for NULL. */
bool relpath_has_dotdot(const char *path);

#endif /* !EDDY_COMMON_RELPATH_H */
