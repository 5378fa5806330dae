/* topology.c - the k-ary tree over broker ranks (pure arithmetic).
 *
 * Ranks are numbered level by level, so a parent is always smaller than its
 * children and the descendants of r at each level form one contiguous run.
 * Products are computed in 64 bits: rank * fanout can exceed 32 bits, and a
 * child that would not fit in a uint32_t does not exist.  A fanout of 0 is
 * meaningless; functions answer TOPO_NONE / 0 / false for it.  A fanout of
 * 1 (a chain) is handled without walking the chain, which could be billions
 * of steps long.
 */
#include "topology.h"

uint32_t topo_parent(uint32_t rank, uint32_t fanout)
{
    if (rank == 0 || rank == TOPO_NONE || fanout == 0)
        return TOPO_NONE;
    return (rank - 1) / fanout;
}

uint32_t topo_child(uint32_t rank, uint32_t fanout, uint32_t i)
{
    uint64_t c;

    if (fanout == 0 || i >= fanout || rank == TOPO_NONE)
        return TOPO_NONE;
    c = (uint64_t)rank * fanout + 1 + i;
    return c >= TOPO_NONE ? TOPO_NONE : (uint32_t)c;
}

uint32_t topo_nchildren(uint32_t rank, uint32_t size, uint32_t fanout)
{
    uint64_t first;

    if (fanout == 0 || rank >= size)
        return 0;
    first = (uint64_t)rank * fanout + 1;
    if (first >= size)
        return 0;
    return size - first < fanout ? (uint32_t)(size - first) : fanout;
}

bool topo_in_subtree(uint32_t rank, uint32_t target, uint32_t fanout)
{
    uint64_t first = rank, last = rank;

    if (fanout == 0 || rank == TOPO_NONE || target == TOPO_NONE)
        return false;
    if (fanout == 1)
        return target >= rank;
    /* Walk down level by level: [first, last] are r's descendants at one
     * level.  Each step multiplies by fanout >= 2, so this is O(log). */
    while (first <= target) {
        if (target <= last)
            return true;
        first = first * fanout + 1;
        last = last * fanout + fanout;
    }
    return false;
}

uint32_t topo_depth(uint32_t rank, uint32_t fanout)
{
    uint32_t depth = 0;

    if (fanout == 0)
        return 0;
    if (fanout == 1)
        return rank;
    while (rank != 0) {
        rank = (rank - 1) / fanout;
        depth++;
    }
    return depth;
}

uint32_t topo_next_hop(uint32_t rank,
                       uint32_t target,
                       uint32_t size,
                       uint32_t fanout)
{
    if (fanout == 0 || rank >= size || target >= size)
        return TOPO_NONE;
    if (target == rank)
        return rank;
    if (!topo_in_subtree(rank, target, fanout))
        return topo_parent(rank, fanout);
    if (fanout == 1)
        return rank + 1;
    /* Climb from target to the child of rank above it: O(log) steps. */
    while (topo_parent(target, fanout) != rank)
        target = topo_parent(target, fanout);
    return target;
}

uint32_t topo_deepest(uint32_t size, uint32_t fanout)
{
    /* Level-by-level numbering: the last rank is on the deepest level and
     * the largest there. */
    if (size == 0 || fanout == 0)
        return TOPO_NONE;
    return size - 1;
}
