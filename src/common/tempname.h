/* tempname.h - names for temp entries kept beside their destination.
 *
 * bcast writes a file (bcast_sink) or a directory tree (bcast_tree) under
 * a temp name in the destination's own directory, then renames it into
 * place: the temp entry stays confined to that directory, on the same
 * file system, so the rename is atomic and a crash leaves only a hidden
 * ".NAME.eddy-XXXXXX" beside NAME that is easy to recognise and remove.
 *
 * Use:
 *  1. name = tempname_create(dest_name).
 *  2. Create it exclusively (O_CREAT | O_EXCL, mkdirat, or check that
 *     nothing has the name); on EEXIST free it and go back to 1, at most
 *     TEMPNAME_TRIES times.
 *  3. Rename it into place (or unlink it), then free the name.
 *
 * The suffix comes from getrandom() (falling back to the clock, pid and a
 * counter when that would block): it spreads names so that retries are
 * rare, but uniqueness comes only from the exclusive create in step 2.
 */
#ifndef EDDY_COMMON_TEMPNAME_H
#define EDDY_COMMON_TEMPNAME_H

/* How many fresh names to try before giving up on EEXIST: with 62^6
 * suffixes, running out means something is wrong, not bad luck. */
#define TEMPNAME_TRIES 100

/* A fresh name ".NAME.eddy-XXXXXX" (X from [A-Za-z0-9]) for a temp entry
 * beside 'name', a single path component.  NAME is cut to its first
 * bytes when needed so that the result fits in NAME_MAX.  Caller frees.
 * NULL with errno ENOMEM. */
char *tempname_create(const char *name);

#endif /* !EDDY_COMMON_TEMPNAME_H */
