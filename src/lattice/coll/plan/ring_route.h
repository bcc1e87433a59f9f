// Collectives on a partial mesh: when the cables join only some pairs (a ring of Thunderbolt
// cables, a chain), every collective runs around a cycle through all ranks that uses linked
// pairs only. The plans are built for positions on that cycle, then relabelled to real ranks,
// so the algorithms stay the plain ones of plan.h.
//
//   all_reduce, all_gather, reduce_scatter   the ring algorithm (reduce-scatter + all-gather)
//   broadcast, reduce                         a chain from (to) the root along the ring, the
//                                             buffer cut into segments that pipeline hop by hop
//   barrier                                   world - 1 hops around the ring
//   all_to_all                                kUnavailable (needs a full mesh for now)
//
// Results are bit-identical on every rank and across runs (the order is fixed by the cycle),
// though not the same bits as the full-mesh algorithms produce.
#pragma once

#include <functional>
#include <vector>

#include "lattice/coll/plan/plan.h"
#include "lattice/core/status.h"

namespace lattice::coll::plan {

// A cycle through all `world` ranks over pairs for which `linked` holds, starting at rank 0:
// the identity order when it is one, else the first found by a bounded search. Empty when
// there is none (or the search gave up). world <= 2: the identity.
std::vector<int> find_ring(int world, const std::function<bool(int, int)>& linked);

// The plan for `shape` (real ranks) on the ring `order` (order[i] is the rank at position i).
Result<Plan> build_on_ring(const Shape& shape, const std::vector<int>& order);

}  // namespace lattice::coll::plan
