/* stdfds.h - make sure stdin, stdout and stderr are open.
 *
 * A program started with fd 0, 1 or 2 closed (by CI, a daemon manager or
 * `cmd <&-`) would get its next socket or file on that number, and then
 * read a socket as stdin, write output into it, or trip libuv's checks.
 * Both eddy and eddy-broker call this first thing in main().
 */
#ifndef EDDY_COMMON_STDFDS_H
#define EDDY_COMMON_STDFDS_H

/* Open /dev/null on any of fds 0-2 that is closed.  -1 with errno if
 * /dev/null cannot be opened. */
int stdfds_sanitize(void);

#endif /* !EDDY_COMMON_STDFDS_H */
