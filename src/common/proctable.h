/* proctable.h - a job's process table (MPIR) and its compact codec.
 *
 * One entry per task rank: rank, pid, hostname, executable, broker rank
 * (the node) and appnum (the MPMD task group).  The table of a job is
 * gathered as a reduction over the broker tree: each broker encodes the
 * fragment of its node, each parent merges its children's fragments into
 * its own table and passes one buffer up, and rank 0 hands the whole table
 * to the client.  Pure module: no I/O.
 *
 * Lifecycle:
 *  1. proctable_create(), or proctable_decode() of an encoded buffer.
 *  2. proctable_add() entries in any order, proctable_merge_encoded() the
 *     fragments of children; each call is all or nothing.
 *  3. Read: proctable_count(), proctable_get() in rank order (the table
 *     sorts itself the first time it is read after a change),
 *     proctable_is_complete().
 *  4. proctable_encode() into a buffer the caller frees.
 *  5. proctable_destroy().
 *
 * Invariants: ranks are unique; 0 < pid <= INT32_MAX; appnum >= 0;
 * hostnames and executables are 1 to PROCTABLE_STR_MAX bytes without NUL,
 * each distinct string stored once (interned, found by hash); at most
 * PROCTABLE_TASKS_MAX entries.
 *
 * Encoding, version 1.  Multi-byte numbers are varints, little-endian in
 * the LEB128 way:
 *  - "varint": an unsigned number of at most 32 bits, 7 bits per byte,
 *    low bits first, the high bit set on every byte but the last; 1 to 5
 *    bytes, always in the shortest form.
 *  - "zigzag": a varint holding a 32-bit two's complement difference d
 *    as (d << 1) ^ (d >> 31) (arithmetic shift), so that small
 *    differences of either sign take one byte.
 *
 *   size      field
 *   4         magic "EDPT" (0x45 0x44 0x50 0x54)
 *   1         version, PROCTABLE_VERSION
 *   varint    nstrings, the string table:
 *   nstrings times:
 *     varint    length, 1..PROCTABLE_STR_MAX
 *     length    bytes of the string, no NUL, no terminator
 *   varint    nruns
 *   nruns times, in increasing rank order:
 *     varint    gap: first rank of the run minus (last rank of the
 *               previous run + 1); for the first run, its first rank
 *     varint    count of tasks in the run, >= 1; their ranks are first
 *               rank .. first rank + count - 1 <= UINT32_MAX
 *     zigzag    broker rank minus that of the previous run (0 before the
 *               first run), modulo 2^32
 *     varint    hostname: index in the string table
 *     varint    executable: index in the string table
 *     varint    appnum, <= INT32_MAX
 *     count times, one per task in rank order:
 *       zigzag    pid minus the previous task's pid (0 before the very
 *                 first task, across runs); each pid in 1..INT32_MAX
 *
 * A run is a maximal sequence of consecutive ranks sharing broker rank,
 * hostname, executable and appnum.  The encoding is canonical: a table
 * has exactly one, so equal tables give equal bytes, and the decoder
 * rejects any other with EPROTO:
 *  - runs are maximal: a run with gap 0 differs from the previous run in
 *    broker rank, hostname, executable or appnum;
 *  - strings are distinct, each is used, and they are listed in order of
 *    first use (hostname then executable of each run in turn), so an
 *    index is at most one past the highest index used before it;
 *  - varints are in shortest form; nothing follows the last run.
 * Runs cannot overlap or go backwards: the gap is unsigned.
 *
 * Cost: a run takes 6 bytes or more plus at least one byte per task.  A
 * node's tasks with one executable and consecutive pids cost about one
 * byte each; a table where every rank starts a new run (MPMD interleaved
 * by rank) about 7 bytes per task; plus each distinct string once, with
 * a 1 or 2 byte length.
 *
 * Hostile input: the decoder checks every count against the bytes left
 * before allocating (a string takes at least 2 bytes, a run 7, a task 1),
 * so memory stays linear in the input length; the string table is also
 * bounded by use: every string must be referenced, so there are at most
 * two per run, hence per task.
 */
#ifndef EDDY_COMMON_PROCTABLE_H
#define EDDY_COMMON_PROCTABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"

#define PROCTABLE_MAGIC "EDPT"
#define PROCTABLE_VERSION 1

/* Paths are bounded by PATH_MAX (4096) on Linux; hostnames far below. */
#define PROCTABLE_STR_MAX 4096

/* 16M tasks is far beyond any machine, and bounds memory at a few GiB. */
#define PROCTABLE_TASKS_MAX (1u << 24)

typedef struct proctable proctable_t;

struct proctable_entry {
    uint32_t rank;          /* task rank in the job */
    uint32_t broker_rank;   /* broker (node) that runs it */
    int32_t appnum;         /* task group, >= 0 */
    int32_t pid;            /* > 0 */
    const char *hostname;   /* borrowed from the table */
    const char *executable; /* borrowed from the table */
};

/* An empty table.  NULL with errno ENOMEM. */
proctable_t *proctable_create(void);

/* Free the table and its strings.  Accepts NULL, leaves errno alone. */
void proctable_destroy(proctable_t *pt);

/* Add one entry (any order).  The strings are copied (interned: one copy
 * per distinct string).  -1 with errno:
 *   EINVAL  pt or e NULL, pid <= 0, appnum < 0, hostname or executable
 *           NULL, empty or longer than PROCTABLE_STR_MAX bytes
 *   EEXIST  the rank is already in the table
 *   E2BIG   the table already holds PROCTABLE_TASKS_MAX entries
 *   ENOMEM
 * On failure the table is unchanged. */
int proctable_add(proctable_t *pt, const struct proctable_entry *e);

/* Decode 'buf' (as produced by proctable_encode()) and add all its
 * entries to 'pt': the merge of a child's fragment.  All or nothing: on
 * failure pt is unchanged.  -1 with errno and a message in 'err' (may be
 * NULL):
 *   EINVAL  pt NULL, or buf NULL with len > 0
 *   EPROTO  malformed input; the message says what, at which byte offset
 *   EEXIST  a rank of the buffer is already in pt (the message names it)
 *   E2BIG   the result would exceed PROCTABLE_TASKS_MAX entries
 *   ENOMEM */
int proctable_merge_encoded(proctable_t *pt,
                            const void *buf,
                            size_t len,
                            eddy_error_t *err);

/* Create a table from 'buf': proctable_create() + merge.  The caller
 * destroys it.  NULL with errno and 'err' as proctable_merge_encoded(). */
proctable_t *proctable_decode(const void *buf, size_t len, eddy_error_t *err);

/* Number of entries; 0 for NULL. */
size_t proctable_count(const proctable_t *pt);

/* Fill 'e' with the entry at 'index' in rank order (index 0 is the lowest
 * rank).  The strings are borrowed from the table and stay valid until the
 * next add, merge or destroy.  -1 with errno EINVAL if pt or e is NULL or
 * index >= proctable_count(); 'e' is then untouched. */
int proctable_get(proctable_t *pt, size_t index, struct proctable_entry *e);

/* True if the ranks are exactly 0..n-1, each once (n == 0: the table is
 * empty).  False for NULL. */
bool proctable_is_complete(proctable_t *pt, uint32_t n);

/* Encode the table (see above) into a malloc'd buffer: *buf and *len are
 * set, the caller frees *buf.  An empty table encodes too.  -1 with errno
 * EINVAL (NULL argument) or ENOMEM; outputs untouched on failure. */
int proctable_encode(proctable_t *pt, void **buf, size_t *len);

#endif /* !EDDY_COMMON_PROCTABLE_H */
