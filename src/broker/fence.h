/* fence.h - the pure logic of one kvs fence at one broker (no I/O).
 *
 * A fence is a collective over the brokers of a job (docs/kvs-fence.md):
 * each broker waits for its own shell's contribution if it is in the job,
 * and for one combined contribution from each child whose subtree holds a
 * rank of the job; it concatenates them and passes one buffer up.
 *
 * Contributions are raw payloads: a sequence of records "KEY\0VALUE\0"
 * (keys non-empty, neither holds a NUL).  Brokers only check that shape
 * and concatenate; they never look at keys, so a key put twice is found
 * where the map is used (the shells), and every participant sees the
 * same bytes.
 *
 * Lifecycle:
 *  1. fence_create() from this broker's rank, the tree shape and the job's
 *     broker ranks: it works out which contributions to wait for
 *     (fence_expects_local(), fence_expects_child()).
 *  2. fence_add() once per contribution, in any order, into its slot
 *     (FENCE_SLOT_LOCAL, or fence_child_slot() of the sending child).
 *  3. Once fence_complete(), fence_data() is the concatenation.
 *  4. fence_destroy().
 *
 * Invariants: the buffer is a whole number of well-formed records and
 * fence_size() stays at most FENCE_KVS_MAX.  A failed fence_add() changes
 * nothing.
 */
#ifndef EDDY_BROKER_FENCE_H
#define EDDY_BROKER_FENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"
#include "src/common/idset.h"

/* The merged records travel down as one raw payload: at most
 * MSG_PAYLOAD_MAX (16 MiB, src/common/msg.h). */
#define FENCE_KVS_MAX (16u << 20)

/* The slot of this broker's own shell; child i of this broker is slot
 * 1 + i. */
#define FENCE_SLOT_LOCAL 0

typedef struct fence fence_t;

/* The fence as seen by 'rank' in a tree of 'size' brokers with 'fanout',
 * for the job on broker ranks 'ranks' (borrowed).  Costs O(|ranks| *
 * depth).  NULL with errno and 'err' set: EINVAL for a bad shape, an
 * empty 'ranks', a rank >= size, or a 'rank' that has nothing to wait for
 * (neither in 'ranks' nor above one of them) unless it is rank 0, the
 * root of every fence; ENOMEM. */
fence_t *fence_create(uint32_t rank,
                      uint32_t size,
                      uint32_t fanout,
                      const idset_t *ranks,
                      eddy_error_t *err);

/* Accepts NULL, leaves errno alone. */
void fence_destroy(fence_t *f);

/* True if this broker is in the job and waits for its shell. */
bool fence_expects_local(const fence_t *f);

/* True if 'child' is a child of this broker whose subtree holds a rank of
 * the job. */
bool fence_expects_child(const fence_t *f, uint32_t child);

/* The slot of contributions from 'child', or -1 (errno EINVAL) if it is
 * not a child of this broker. */
int fence_child_slot(const fence_t *f, uint32_t child);

/* Number of slots (1 + number of children of this broker): slot indexes
 * are below it. */
uint32_t fence_nslots(const fence_t *f);

/* The child rank of slot 'slot' >= 1, TOPO_NONE for the local slot or out
 * of range. */
uint32_t fence_slot_rank(const fence_t *f, int slot);

/* True if a contribution is expected in 'slot' (and false for slots out
 * of range). */
bool fence_slot_expected(const fence_t *f, int slot);

/* True once a contribution was added in 'slot'. */
bool fence_slot_filled(const fence_t *f, int slot);

/* Number of contributions expected in all, and received so far. */
uint32_t fence_nexpected(const fence_t *f);
uint32_t fence_nreceived(const fence_t *f);

/* Check that 'data'/'len' is a sequence of records "KEY\0VALUE\0" with
 * non-empty keys (empty when len is 0; data may be NULL then).  Returns
 * the number of records, or -1 with errno EPROTO and 'err' set.  Pure; a
 * memchr() scan, no copy. */
long fence_check_records(const void *data, size_t len, eddy_error_t *err);

/* Append the records 'data'/'len' (copied) as the contribution of
 * 'slot'.  -1 with errno and 'err' set, and nothing added: EINVAL if the
 * slot is not expected or already filled; EPROTO if the records are
 * malformed (fence_check_records()); EFBIG if the buffer would pass
 * FENCE_KVS_MAX; ENOMEM. */
int fence_add(
    fence_t *f, int slot, const void *data, size_t len, eddy_error_t *err);

/* True once every expected contribution has been added. */
bool fence_complete(const fence_t *f);

/* The concatenated records so far (borrowed, valid until the next
 * fence_add() or fence_destroy(); NULL when empty). */
const void *fence_data(const fence_t *f);

/* Number of records, and bytes, of the concatenation. */
size_t fence_nkeys(const fence_t *f);
size_t fence_size(const fence_t *f);

#endif /* !EDDY_BROKER_FENCE_H */
