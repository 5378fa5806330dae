/* btparse.h - read gdb's backtrace text into call paths.
 *
 * `eddy stack` samples each task with
 *   gdb -batch -p PID -ex 'set pagination off' -ex 'thread apply all bt'
 * (or a plain `bt`) and needs, for each thread, the function names from
 * the outermost frame (main, or the thread's start routine) to the
 * innermost, ready for stacktree_add().  This module turns that text into
 * those lists.  Pure: no I/O, no process control.
 *
 * Use:
 *  1. Collect gdb's output (stdout and stderr mixed is fine).
 *  2. btparse() it: the callback is called once per thread that has at
 *     least one frame, in the order the threads appear in the text.
 *  3. The frames handed to the callback are borrowed: copy what you keep.
 *
 * What counts, line by line (leading blanks ignored, "\n" or "\r\n"):
 *  - "Thread N (...):" starts a thread; N is gdb's thread number and an
 *    "(LWP 1234)" or "(process 1234)" inside gives its LWP.
 *  - "#N  [0xADDR in ]NAME (ARGS)[ at FILE:LINE| from LIB]" is a frame,
 *    innermost first.  Without thread headers (plain `bt`), "#0" after
 *    some frames starts a new thread.
 *  - Every other line is ignored: gdb's banners, warnings, the current
 *    frame it prints on attach (no '#'), "Backtrace stopped: ...",
 *    source lines, "(More stack frames follow...)".
 *
 * A frame's name is NAME as gdb shows it, argument list stripped:
 *  - C++ names keep their templates, spaces and parameter types, and
 *    "operator()" and lambdas ("{lambda(int)#1}") are not taken for the
 *    argument list: "std::vector<int, std::allocator<int> >::push_back(int
 *    const&)" stays whole.  The argument list is the first " (" outside
 *    any (), <>, [] or {} of the name.
 *  - gdb's pseudo-frames keep their brackets: "<signal handler called>".
 *  - An unknown function "?? ()" is named "??", or "?? (libfoo.so.1)"
 *    when gdb says which library it is in, so that unknown frames of
 *    different libraries do not merge.
 *  - Inlined frames (no address) are frames like the others.
 *  - Bytes outside printable ASCII become '?', so names are safe to print
 *    and valid UTF-8 (JSON); a name longer than BTPARSE_NAME_MAX bytes is
 *    cut to BTPARSE_NAME_MAX bytes, the last three being "...".
 *
 * The input is another program's output: any bytes are accepted (garbage
 * yields no frames, never a crash), and memory stays bounded by the limits
 * below whatever the input length.
 */
#ifndef EDDY_COMMON_BTPARSE_H
#define EDDY_COMMON_BTPARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "eddy/core.h"

/* Deeper stacks are runaway recursion; the outermost frames are the ones
 * that merge across tasks, so those are kept. */
#define BTPARSE_FRAMES_MAX 1024

/* Demangled C++ template names run to hundreds of bytes; past this they
 * are noise in a merged tree. */
#define BTPARSE_NAME_MAX 1024

/* Far more threads than any MPI task runs. */
#define BTPARSE_THREADS_MAX 4096

struct btparse_thread {
    unsigned long num; /* gdb's thread number; 0 without thread headers */
    unsigned long lwp; /* from the header, 0 if it gives none */
    /* Function names, frames[0] the outermost, frames[nframes - 1] the
     * innermost; nframes >= 1.  Borrowed: valid during the callback only. */
    const char *const *frames;
    size_t nframes;
    /* The thread had more than BTPARSE_FRAMES_MAX frames: the innermost
     * ones were dropped. */
    bool truncated;
};

/* Called once per thread.  Return 0 to go on, -1 with errno set to make
 * btparse() stop and fail with that errno. */
typedef int (*btparse_f)(const struct btparse_thread *th, void *arg);

/* Parse 'len' bytes of gdb output at 'text' (need not be NUL-terminated;
 * NUL bytes are just garbage) and call 'cb' for every thread with frames.
 * Returns the number of threads passed to 'cb' (0 if the text holds no
 * frame), or -1 with errno and a message in 'err' (may be NULL):
 *   EINVAL  cb NULL, or text NULL with len > 0
 *   E2BIG   more than BTPARSE_THREADS_MAX threads with frames; the first
 *           BTPARSE_THREADS_MAX were passed to 'cb'
 *   ENOMEM
 *   other   the errno 'cb' failed with (threads before it were passed)
 * Calls already made to 'cb' stand when btparse() fails. */
int btparse(
    const char *text, size_t len, btparse_f cb, void *arg, eddy_error_t *err);

#endif /* !EDDY_COMMON_BTPARSE_H */
