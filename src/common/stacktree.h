/* stacktree.h - call paths of many tasks merged into one tree of rank sets.
 *
 * `eddy stack` samples the stack of every thread of every task of a job
 * and shows them merged, the way STAT does: one call tree whose nodes are
 * labelled with the task ranks whose stacks pass through them,
 *   main > solve > MPI_Allreduce  [0-3,5-7]
 *   main > solve > compute  [4]
 * Each tool daemon builds the tree of its node's tasks, encodes it, and
 * the trees are merged up the broker tree to the front end.  Pure module:
 * no I/O.
 *
 * Lifecycle:
 *  1. stacktree_create(), or stacktree_decode() of an encoded tree.
 *  2. stacktree_add() one call path per thread of each task (a task with
 *     several threads adds several paths under one rank), and
 *     stacktree_merge() the trees of other nodes.  Each call is all or
 *     nothing: on failure the tree is unchanged.
 *  3. stacktree_encode() to send it on, or print it with stacktree_text(),
 *     stacktree_json() or stacktree_dot().
 *  4. stacktree_destroy().
 *
 * Model and invariants:
 *  - The tree has an unnamed root; every other node has a name (a frame:
 *    a function name as btparse.h gives them) and its children have
 *    distinct names, kept sorted (bytewise), so output is deterministic.
 *  - A node has two rank sets: "ends", the tasks with a path ending at
 *    that node, and "ranks", the tasks with a path through or ending at
 *    it.  ranks = ends + the union of the children's ranks; every node but
 *    the root has at least one rank; the root has no ends.
 *  - Merging is the union of paths, each with the union of its rank
 *    sets: it is associative and commutative, so the result does not
 *    depend on the shape of the broker tree or the order of arrival.
 *  - Names are 1 to STACKTREE_NAME_MAX bytes of valid UTF-8 without
 *    control characters (so every output form is well formed); paths are
 *    1 to STACKTREE_DEPTH_MAX frames; ranks are below STACKTREE_RANK_MAX;
 *    a tree has at most STACKTREE_NODES_MAX nodes besides the root.
 *
 * Rank sets are kept as sorted lists of ranges (memory follows the number
 * of ranges, not the highest rank), and printed in RFC 22 idset form,
 * exactly as idset_encode() prints them: "0-3,8".
 *
 * Encoding, version 1.  A "varint" is an unsigned number of at most 32
 * bits, 7 bits per byte, low bits first, the high bit set on every byte
 * but the last, always in its shortest form (1 to 5 bytes).
 *
 *   size      field
 *   4         magic "EDST" (0x45 0x44 0x53 0x54)
 *   1         version, STACKTREE_VERSION
 *   varint    number of children of the root, then each child as a node
 *
 *   node:
 *   varint    name length, 1..STACKTREE_NAME_MAX
 *   length    the name's bytes, no NUL
 *   varint    nruns, the number of ranges of the node's ends
 *   nruns times, in increasing order:
 *     varint    gap: for the first range its first rank; for the others,
 *               first rank - (last rank of the previous range + 2)
 *     varint    last rank - first rank of the range
 *   varint    number of children, then each child as a node
 *
 * Only the ends travel: a node's ranks are its ends plus its children's
 * ranks, rebuilt by the decoder.  The encoding is canonical: one tree has
 * exactly one, so equal trees give equal bytes, and the decoder rejects
 * any other with EPROTO:
 *  - siblings are in strictly increasing bytewise order of name (so they
 *    are distinct);
 *  - ranges neither overlap nor touch (the gap form makes that
 *    automatic), and every rank is below STACKTREE_RANK_MAX;
 *  - a node without children has at least one end;
 *  - varints are in shortest form and nothing follows the tree.
 * The decoder also enforces every limit above (name bytes, depth, node
 * count).
 *
 * Cost: a node takes its name plus 3 bytes or more, and each range of
 * ends 2 to 10 bytes.  Ranks of inner nodes are not sent at all, and a
 * leaf shared by all 16384 tasks of a job costs a single range.
 *
 * Hostile input: counts are checked against the bytes left before
 * allocating (a range takes at least 2 bytes, a node 4), so memory stays
 * linear in the input length, and recursion is bounded by
 * STACKTREE_DEPTH_MAX.
 */
#ifndef EDDY_COMMON_STACKTREE_H
#define EDDY_COMMON_STACKTREE_H

#include <stddef.h>
#include <stdint.h>

#include "eddy/core.h"

#define STACKTREE_MAGIC "EDST"
#define STACKTREE_VERSION 1

/* The same bounds as btparse.h puts on what it reads from gdb. */
#define STACKTREE_NAME_MAX 1024
#define STACKTREE_DEPTH_MAX 1024

/* The bound of idset.h, so every rank set prints as a valid idset. */
#define STACKTREE_RANK_MAX (1u << 20)

/* 16k tasks with 30-frame paths all different make half a million nodes;
 * four times that is still a few hundred MiB at most. */
#define STACKTREE_NODES_MAX (1u << 21)

typedef struct stacktree stacktree_t;

/* An empty tree.  NULL with errno ENOMEM. */
stacktree_t *stacktree_create(void);

/* Free the tree.  Accepts NULL, leaves errno alone. */
void stacktree_destroy(stacktree_t *t);

/* Add one call path sampled from task 'rank': frames[0] is the outermost
 * function, frames[n - 1] the innermost.  The names are copied.  Adding a
 * path that the rank already has changes nothing.  -1 with errno:
 *   EINVAL  t or frames NULL, n == 0 or > STACKTREE_DEPTH_MAX, a frame
 *           NULL, empty, longer than STACKTREE_NAME_MAX bytes, not valid
 *           UTF-8 or holding a control character
 *   ERANGE  rank >= STACKTREE_RANK_MAX
 *   E2BIG   the tree would exceed STACKTREE_NODES_MAX nodes
 *   ENOMEM
 * On failure the tree is unchanged. */
int stacktree_add(stacktree_t *t,
                  const char *const *frames,
                  size_t n,
                  uint32_t rank);

/* Merge 'src' into 't': t gets every path of src, with the union of the
 * rank sets.  src is left alone (it may be t).  -1 with errno EINVAL (a
 * NULL argument), E2BIG (more than STACKTREE_NODES_MAX nodes) or ENOMEM;
 * on failure t is unchanged. */
int stacktree_merge(stacktree_t *t, const stacktree_t *src);

/* Encode the tree (see above) into a malloc'd buffer: *buf and *len are
 * set, the caller frees *buf.  An empty tree encodes too.  -1 with errno
 * EINVAL (NULL argument) or ENOMEM; outputs untouched on failure. */
int stacktree_encode(const stacktree_t *t, void **buf, size_t *len);

/* Decode a buffer made by stacktree_encode(); the caller destroys the
 * tree.  NULL with errno and a message in 'err' (may be NULL):
 *   EINVAL  buf NULL with len > 0
 *   EPROTO  malformed or non-canonical input; the message says what, at
 *           which byte offset
 *   ENOMEM */
stacktree_t *stacktree_decode(const void *buf, size_t len, eddy_error_t *err);

/* The ranks of all tasks in the tree, as an idset string ("" if empty);
 * the caller frees it.  NULL with errno EINVAL or ENOMEM. */
char *stacktree_ranks(const stacktree_t *t);

/* One line per distinct full path (a node where some task's path ends),
 * in path order (a path before its extensions, siblings by name):
 *   "main > solve > MPI_Allreduce  [0-3,5-7]\n"
 * The empty tree gives "".  Each line repeats its whole path, so the text
 * can be up to depth times longer than the tree's encoding.  The caller
 * frees the string.  NULL with errno EINVAL or ENOMEM. */
char *stacktree_text(const stacktree_t *t);

/* The tree as JSON (compact, one line, no newline):
 *   {"ranks":"0-7","children":[{"name":"main","ranks":"0-7",
 *    "children":[...]}, ...]}
 * The root has no "name".  A node where paths end also has "ends" (the
 * idset of those tasks); "children" is always there, [] for a leaf.
 * The caller frees the string.  NULL with errno EINVAL or ENOMEM. */
char *stacktree_json(const stacktree_t *t);

/* The tree as a Graphviz digraph: one node per tree node (the root is not
 * drawn), labelled "name\n[ranks]", and an edge parent -> child.  The
 * caller frees the string.  NULL with errno EINVAL or ENOMEM. */
char *stacktree_dot(const stacktree_t *t);

#endif /* !EDDY_COMMON_STACKTREE_H */
