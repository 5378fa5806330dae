/* tasklist.h - the "RANK:PID,RANK:PID,..." list a tool daemon is given.
 *
 * A tool launch (eddy/tool.h) tells each daemon which tasks of the job
 * run on its node in EDDY_TOOL_TASKS, e.g. "0:1234,1:1235".  eddy-stackd
 * reads it (or its --tasks option) with this module.  The string comes
 * from the environment, so it is outside input: it is checked strictly
 * and every error names the culprit.  Pure: no I/O.
 *
 * Lifecycle:
 *  1. tasklist_decode() a string.
 *  2. tasklist_count() and tasklist_tasks() read the tasks, in the order
 *     the string gives them.
 *  3. tasklist_encode() gives the canonical string back (caller frees).
 *  4. tasklist_destroy().
 *
 * Syntax: elements separated by ',', each RANK ':' PID, both decimal
 * digits only (no sign, no blanks; leading zeros are accepted and dropped
 * by tasklist_encode()).  "" is the empty list (a node without tasks).
 * Invariants of a decoded list:
 *  - rank < TASKLIST_RANK_MAX, 0 < pid < TASKLIST_PID_MAX;
 *  - no rank and no pid appears twice (one task per rank, one process
 *    per task);
 *  - at most TASKLIST_TASKS_MAX tasks.
 */
#ifndef EDDY_COMMON_TASKLIST_H
#define EDDY_COMMON_TASKLIST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "eddy/core.h"

/* The bound of idset.h and stacktree.h, so every rank prints in an idset
 * and can label a stack tree. */
#define TASKLIST_RANK_MAX (1u << 20)

/* Linux's PID_MAX_LIMIT on 64-bit machines: no pid reaches it. */
#define TASKLIST_PID_MAX (1 << 22)

/* Far more tasks than one node runs; bounds the memory a hostile
 * environment variable can make us take. */
#define TASKLIST_TASKS_MAX 65536

struct tasklist_task {
    uint32_t rank;
    pid_t pid;
};

typedef struct tasklist tasklist_t;

/* Parse 's'.  The caller destroys the list.  NULL with errno and a
 * message in 'err' (may be NULL) naming the bad element:
 *   EINVAL  s NULL, an element not RANK:PID, a rank or pid not a number,
 *           a pid of 0, a rank or pid given twice
 *   ERANGE  a rank >= TASKLIST_RANK_MAX or pid >= TASKLIST_PID_MAX
 *   E2BIG   more than TASKLIST_TASKS_MAX tasks
 *   ENOMEM */
tasklist_t *tasklist_decode(const char *s, eddy_error_t *err);

/* Free the list.  Accepts NULL, leaves errno alone. */
void tasklist_destroy(tasklist_t *tl);

/* The number of tasks (0 for NULL). */
size_t tasklist_count(const tasklist_t *tl);

/* The tasks, tasklist_count() of them, in the order of the string.
 * Borrowed: valid until tasklist_destroy().  NULL for an empty list. */
const struct tasklist_task *tasklist_tasks(const tasklist_t *tl);

/* The canonical string ("0:1234,1:1235"), caller frees.  NULL with errno
 * EINVAL (tl NULL) or ENOMEM. */
char *tasklist_encode(const tasklist_t *tl);

#endif /* !EDDY_COMMON_TASKLIST_H */
