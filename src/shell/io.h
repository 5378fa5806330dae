/* io.h - eddy-shell's task standard I/O: output to rank 0, stdin from it.
 *
 * Output: each task's stdout and stderr pipes are read with libuv and sent
 * to rank 0 as job-io.write {"id","rank","stream","eof"} + raw payload, a
 * last one with "eof": true per stream.  The response is the credit: at
 * most 'window' bytes stay unanswered, beyond which every pipe stops being
 * read until answers come back.  A failed write (e.g. no job-io service)
 * loses that output but not the job: it is reported once on stderr.
 *
 * Stdin: bytes from stdin commands are queued to the task's stdin pipe;
 * "eof" closes it.
 *
 * Lifecycle:
 *  1. shell_io_create() on the shell's handle;
 *  2. shell_io_add_task() per task with its pipe fds (taken over);
 *  3. the handle's loop runs; shell_io_stdin() for each stdin command;
 *  4. shell_io_done() tells when all output has reached EOF and every
 *     write has been answered (the callback given to create is called when
 *     that becomes true);
 *  5. shell_io_destroy() closes what is left (running the loop briefly to
 *     finish the closes) and frees.
 */
#ifndef EDDY_SHELL_IO_H
#define EDDY_SHELL_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"

/* Unanswered output bytes per shell, after the protocol (a full window
 * on every shell of a big job still fits in rank 0's memory). */
#define SHELL_IO_WINDOW (2 * 1024 * 1024)

/* Bytes read from a pipe at once, i.e. the largest output message. */
#define SHELL_IO_CHUNK (512 * 1024)

typedef struct shell_io shell_io_t;

typedef void (*shell_io_done_f)(void *arg);

/* A new I/O forwarder for job 'jobid' on handle 'h' (borrowed; must
 * outlive it); 'done' (may be NULL) is called from the loop whenever
 * shell_io_done() becomes true.  NULL with errno EINVAL or ENOMEM. */
shell_io_t *shell_io_create(
    eddy_t *h, uint64_t jobid, size_t window, shell_io_done_f done, void *arg);

/* Forward task 'rank''s output from 'outfd' and 'errfd' and feed its
 * stdin through 'infd' (each -1 if none).  The fds are taken over (closed
 * on failure too).  -1 with errno (ENOMEM, or libuv's). */
int shell_io_add_task(
    shell_io_t *io, uint32_t rank, int infd, int outfd, int errfd);

/* Queue 'len' bytes (copied) for task 'rank''s stdin, then close it if
 * 'eof'.  -1 with errno ENOENT (no such task), EPIPE (stdin closed or
 * none), ENOMEM. */
int shell_io_stdin(
    shell_io_t *io, uint32_t rank, const void *data, size_t len, bool eof);

/* Close task 'rank''s stdin (it exited: nobody will read it). */
void shell_io_stdin_close(shell_io_t *io, uint32_t rank);

/* True once every output stream has sent its EOF and every write has
 * been answered. */
bool shell_io_done(const shell_io_t *io);

/* Output bytes sent and not yet answered (for tests and traces). */
size_t shell_io_unanswered(const shell_io_t *io);

/* Close every pipe, wait for the closes, free.  Accepts NULL; keeps
 * errno. */
void shell_io_destroy(shell_io_t *io);

#endif /* !EDDY_SHELL_IO_H */
