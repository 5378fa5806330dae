/* topology.h - the k-ary tree over broker ranks (pure arithmetic).
 *
 * Rank 0 is the root; the children of rank r are r*k+1 .. r*k+k (those
 * below size).  A message for rank t at rank r goes: to r itself if t == r,
 * down to the child whose subtree holds t, else up to the parent.
 */
#ifndef EDDY_COMMON_TOPOLOGY_H
#define EDDY_COMMON_TOPOLOGY_H

#include <stdbool.h>
#include <stdint.h>

#define TOPO_NONE UINT32_MAX

/* Parent of 'rank', TOPO_NONE for rank 0. */
uint32_t topo_parent(uint32_t rank, uint32_t fanout);

/* Number of children of 'rank' in a tree of 'size'; the i-th child is
 * topo_child(rank, fanout, i). */
uint32_t topo_nchildren(uint32_t rank, uint32_t size, uint32_t fanout);
uint32_t topo_child(uint32_t rank, uint32_t fanout, uint32_t i);

/* Next hop from 'rank' toward 'target': 'rank' itself, a child, or the
 * parent.  TOPO_NONE if target >= size. */
uint32_t topo_next_hop(uint32_t rank,
                       uint32_t target,
                       uint32_t size,
                       uint32_t fanout);

/* True if 'target' is in the subtree rooted at 'rank' (including rank). */
bool topo_in_subtree(uint32_t rank, uint32_t target, uint32_t fanout);

/* Depth of 'rank' (root = 0). */
uint32_t topo_depth(uint32_t rank, uint32_t fanout);

/* The deepest (largest depth, then largest) rank of a tree of 'size'. */
uint32_t topo_deepest(uint32_t size, uint32_t fanout);

#endif /* !EDDY_COMMON_TOPOLOGY_H */
