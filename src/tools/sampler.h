/* sampler.h - take the call stacks of a node's tasks, for eddy-stackd.
 *
 * Two samplers share this interface:
 *  - sampler_unwind(): libunwind over ptrace, inside this process.  Every
 *    thread of every task is seized (PTRACE_SEIZE, so no signal is sent)
 *    and interrupted at once; each task is unwound as soon as all of its
 *    threads have stopped, and detached at once.  Fast (no process to
 *    start, symbols cached across tasks) but it knows only the ELF symbol
 *    tables and the unwind tables (.eh_frame), not the debug info.
 *  - sampler_gdb(): ONE gdb in batch mode attaches to each task in turn
 *    ("attach", "thread apply all bt", "detach"), and its output is cut per
 *    task on markers and read with btparse.h.  Slower (gdb starts, reads
 *    debug info), but it follows stacks libunwind cannot (it knows more
 *    unwinding heuristics and inlined frames).
 *
 * Use:
 *  1. Fill an array of struct sample with the rank and pid of each task,
 *     the other fields zero (sample_init()).
 *  2. Call a sampler with the options.  For each task it sets either
 *     'tree' (one call path per thread, all under the task's rank; caller
 *     destroys it) with errnum 0, or errnum and 'err' saying why the task
 *     was not sampled, one phrase without the rank or pid, e.g.
 *       ESRCH      "no such process"
 *       EPERM      "cannot attach: Operation not permitted"
 *       ETIMEDOUT  "timed out: 1 of 2 threads did not stop"
 *       EIO        "cannot unwind: ..." / "gdb: ..."
 *       EINTR      "interrupted"
 *     A sampled task may also be 'partial': the stack of one of its
 *     threads could not be followed to its outermost frame (or a thread
 *     could not be unwound at all); 'warn' says which and why.
 *  3. sample_release() each sample.
 *
 * What is left behind: every task is detached before the sampler returns
 * (or, for a thread that never stopped before the deadline, when this
 * process exits: the kernel detaches it then).  A task that was running
 * is running again, and a task that was stopped (SIGSTOP, ^Z) stays
 * stopped; a signal that arrived while a thread was held is delivered to
 * it after.  The job is only paused, for the time its stacks take to read.
 *
 * Samplers never print and never exit; they return -1 only for invalid
 * arguments (EINVAL).
 */
#ifndef EDDY_TOOLS_SAMPLER_H
#define EDDY_TOOLS_SAMPLER_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "eddy/core.h"
#include "src/common/stacktree.h"

struct sample {
    uint32_t rank;     /* in: the task's rank, labels its paths */
    pid_t pid;         /* in: the task's process */
    int errnum;        /* out: 0 if sampled, else why not */
    eddy_error_t err;  /* out: why not, when errnum != 0 */
    stacktree_t *tree; /* out: the task's paths when errnum == 0 */
    unsigned threads;  /* out: threads sampled */
    bool partial;      /* out: some thread's stack is incomplete */
    eddy_error_t warn; /* out: which and why, when partial */
};

struct sampler_opts {
    /* CLOCK_MONOTONIC time by which every task has been sampled or given
     * up on (ETIMEDOUT). */
    struct timespec deadline;
    /* Set (by a signal handler) to make the sampler give up on the tasks
     * not yet sampled (EINTR).  May be NULL. */
    volatile sig_atomic_t *cancel;
    /* sampler_gdb(): the gdb to run, looked up in PATH; NULL: "gdb". */
    const char *gdb;
};

/* Zero 's' and set its rank and pid. */
void sample_init(struct sample *s, uint32_t rank, pid_t pid);

/* Free what a sampler left in 's' and zero its outputs (rank and pid
 * stay), so it can be sampled again.  Keeps errno. */
void sample_release(struct sample *s);

/* Sample the 'n' tasks of 's' (see above).  0, or -1 with errno EINVAL
 * (s NULL with n > 0, or opts NULL). */
int sampler_unwind(struct sample *s, size_t n, const struct sampler_opts *opts);
int sampler_gdb(struct sample *s, size_t n, const struct sampler_opts *opts);

/* Internal helpers the samplers share (sampler.c). */

/* Milliseconds left until opts->deadline, 0 if past. */
long sampler_ms_left(const struct sampler_opts *opts);

/* The one-letter state of process 'pid' from /proc/PID/stat ('R', 'S',
 * 'T', ...), or 0 if it cannot be read. */
char sampler_proc_state(pid_t pid);

/* Copy 'name' into 'buf' (size STACKTREE_NAME_MAX + 1) as stacktree.h
 * wants it: bytes outside printable ASCII become '?', an empty name
 * becomes "??", and a name cut to fit ends with "...". */
void sampler_clean_name(char *buf, const char *name, bool cut);

#endif /* !EDDY_TOOLS_SAMPLER_H */
