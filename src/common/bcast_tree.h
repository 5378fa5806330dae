/* bcast_tree.h - directory trees for bcast: pack paths into one archive
 * stream, extract such a stream atomically as a directory.
 *
 * Pure: file-system calls and libarchive only, no sockets, no event loop.
 * `eddy bcast ID SRC... DEST` with a directory or several sources works in
 * three steps:
 *  1. the sender packs the sources with bcast_tree_pack() into an anonymous
 *     temp file;
 *  2. that file is broadcast like any single file (bcast_src, bcast_sink),
 *     verified by its checksum on every node;
 *  3. on each node, bcast_tree_extract() unpacks the verified file into a
 *     temp directory beside DEST and renames it to DEST.
 *
 * The archive is a stream of POSIX pax, uncompressed (bcast compresses
 * chunks itself).  Names are stored as raw bytes (hdrcharset=BINARY),
 * whatever the locales of the two ends, so a name that is not UTF-8
 * arrives byte for byte; the price is a pax header before every entry
 * (1 KiB, a few bytes once zstd has seen it: +7% raw, +0.8% compressed
 * for /usr/include).  Since every entry has one, it also carries the
 * mtime to the nanosecond (libarchive's "restricted" pax, which writes
 * pax headers only where ustar falls short, would be no smaller and would
 * cut mtimes to the second).  Entries:
 *  - regular files, packed densely (a hole is stored as zeros, which
 *    bcast's zstd makes cheap on the wire, and arrives as zeros; hard
 *    links are stored as separate copies),
 *  - directories,
 *  - symbolic links, as links: their target is stored as it is, never
 *    followed and never checked (a link may point anywhere, e.g. to an
 *    absolute path outside the tree; it is the receiving program that
 *    decides whether to follow it),
 *  - with each: the permission bits (07777) and the mtime.
 * Owners, ACLs, extended attributes and file flags are not stored: files
 * arrive owned by whoever extracts them.
 *
 * Entry names (what DEST holds after the extraction):
 *  - one source that is a directory: its contents, named relative to it,
 *    plus an entry "." that carries the directory's own mode and mtime.
 *    DEST becomes a copy of SRC, like `cp -r SRC DEST` when DEST does not
 *    exist;
 *  - otherwise (several sources, or one that is not a directory): each
 *    source under its last path component ("a/b/" -> "b", "." and ".."
 *    by the name they resolve to), so DEST becomes a directory holding
 *    them, with the umask's default mode.
 * Symbolic links given as sources are followed (like `cp -rH`, and like
 * single-file bcast, which opens its source): the user named the link to
 * ship what it points to, e.g. /opt/tool/current -> /opt/tool/2.3.  The
 * entry keeps the link's own name.  Links found below a source are never
 * followed.
 *
 * Extraction refuses entries that would land outside the temp directory:
 * an absolute name, a '..' component, or a path through a symbolic link
 * (e.g. an entry "l" -> "/etc" followed by "l/passwd").  Names are
 * checked here first (every directory on the way is opened without
 * following links), then libarchive checks again with
 * ARCHIVE_EXTRACT_SECURE_SYMLINKS and ARCHIVE_EXTRACT_SECURE_NODOTDOT.
 * Hard links, devices, fifos and sockets in an archive are refused (the
 * packer never makes them).
 *
 * Process-wide effects: packing has none (its walk works relative to
 * directory descriptors), so it is safe in a multithreaded tool.
 * Extraction uses libarchive's disk writer, which reads the umask by
 * setting it and putting it back (umask(umask(0))) once per entry, and
 * for a path longer than PATH_MAX briefly changes the working directory
 * (and changes it back): call bcast_tree_extract() from a process where
 * no other thread creates files or uses relative paths meanwhile (the
 * broker and the shell are single-threaded).
 */
#ifndef EDDY_COMMON_BCAST_TREE_H
#define EDDY_COMMON_BCAST_TREE_H

#include <stdbool.h>
#include <stddef.h>

#include "eddy/core.h"

/* Pack 'paths' (n >= 1 of them) into an archive written to 'fd' (borrowed,
 * not closed: a regular file or a pipe), recursively, naming the entries
 * as described at the top of this file.  Memory stays bounded whatever
 * the file sizes: data is copied in blocks; the walk holds one open
 * directory per level, and refuses a tree more than 128 levels deep.  A file
 * that changes while it is packed gives a well-formed archive with the size
 * found when its entry was started (cut, or padded with zeros); the checksum of
 * the whole archive is what the nodes verify.
 *
 * Every source is looked at before anything is written (existence, type,
 * names), so those errors leave 'fd' untouched.  An error found during
 * the walk (an unreadable file, a fifo deep in a tree) leaves a partial
 * archive in 'fd', which the caller discards.
 *
 * Returns 0, or -1 with errno and 'err' set (the message names the path):
 *  EINVAL  fd < 0, paths NULL, n 0, an empty or NULL path; a fifo,
 *          socket or device (at the top or anywhere below); two sources
 *          with the same name (e.g. a/x and b/x); a source that has no
 *          name ("/" among several)
 *  ENOENT, ENOTDIR  a source does not exist (or is a dangling link)
 *  ELOOP   a loop of symbolic links at a source; a tree too deep
 *  EACCES  a file or directory that cannot be read
 *  ENOMEM
 *  or the errno of writing to 'fd' (EPIPE, ENOSPC, EIO, ...) or of
 *  reading a file (EIO, ...). */
int bcast_tree_pack(int fd,
                    const char *const *paths,
                    size_t n,
                    eddy_error_t *err);

/* Extract the archive in the file 'archive' (a path: the broadcast,
 * verified file) as the directory 'dest', atomically:
 *  1. a temp directory ".NAME.eddy-XXXXXX" is made beside 'dest' (same
 *     parent, NAME being dest's last component, cut to fit), mode 0700
 *     while it fills;
 *  2. every entry is extracted into it (data streamed in blocks, never a
 *     whole file in memory);
 *  3. modes and mtimes are applied (directories last, so that a directory
 *     of mode 0500 can be filled first);
 *  4. it is renamed to 'dest': renameat2(RENAME_NOREPLACE) unless
 *     'overwrite'; with 'overwrite' and an existing 'dest' (of any type:
 *     a symlink there is replaced, not followed), RENAME_EXCHANGE, then
 *     the old tree, now under the temp name, is removed without following
 *     any link in it (src/common/rmtree.h).
 * On a file system that lacks those renameat2 flags: without 'overwrite',
 * a check then rename(2) (a directory that appears in between, if empty,
 * is replaced); with 'overwrite', the old 'dest' is moved aside to a temp
 * name, the new tree renamed in (the old one moved back if that fails),
 * then the old one removed: 'dest' is briefly absent.
 *
 * 'preserve': modes (07777) and mtimes as in the archive (a symlink's to
 * the microsecond: libarchive sets it with lutimes()),
 * for 'dest' itself too when the archive has a "." entry; libarchive keeps
 * a set-user-ID (set-group-ID) bit only if the archive's owner (group) of
 * the file is the extracting user (one of its groups).
 * Without it: the umask's defaults (files 0666 & ~umask, directories
 * 0777 & ~umask, 'dest' itself too), except that a file that had any
 * execute bit gets 0777 & ~umask: a shipped tool must stay runnable.
 * mtimes are then the time of the extraction.
 *
 * 'dest' is used as given: its parent directory is resolved with the
 * caller's rights, links followed; confining it (e.g. under a job tmpdir)
 * is the caller's job.  Its last component must be a plain name.
 *
 * Never leaves anything partial: on any failure the temp directory is
 * removed and 'dest' is untouched, with one exception: with 'overwrite',
 * if the old tree cannot be removed after the exchange, 'dest' already is
 * the new tree, and the error (-1) says where the rest of the old one is.
 *
 * Returns 0, or -1 with errno and 'err' set (the message names the path
 * or the entry):
 *  EINVAL  NULL or empty argument; 'dest' ending in "." or ".." or "/";
 *          'archive' not a regular file;
 *          an entry that escapes (absolute name, '..' component, a path
 *          through a symbolic link), an unsupported entry (hard link,
 *          device, fifo, socket), a "." entry that is not a directory
 *  EEXIST  'dest' exists and 'overwrite' is false (also if it appears
 *          during the extraction)
 *  EPROTO  'archive' is not a tar/pax archive, is truncated (including one
 *          cut between two entries: the end-of-archive marker, two zero
 *          blocks, must be there), or has a malformed header
 *  ENOMEM
 *  or the errno of the failing system call, with the path (ENOENT: the
 *  archive or dest's parent does not exist; EACCES, ENOSPC, EDQUOT, EROFS,
 *  ENAMETOOLONG, ...). */
int bcast_tree_extract(const char *archive,
                       const char *dest,
                       bool overwrite,
                       bool preserve,
                       eddy_error_t *err);

#endif /* !EDDY_COMMON_BCAST_TREE_H */
