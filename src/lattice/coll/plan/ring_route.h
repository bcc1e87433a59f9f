// Collectives on a partial mesh: when the cables join only some pairs (a ring of Thunderbolt
// cables, a chain), every collective runs along a route through all ranks that uses linked
// pairs only: a cycle when there is one, else a path (a ring that lost a host is a chain). The
// plans are built for positions on the route, then relabelled to real ranks.
//
//   on a cycle:
//     all_reduce, all_gather, reduce_scatter   the ring algorithm (reduce-scatter + all-gather)
//     broadcast, reduce                         a chain from (to) the root along the ring, the
//                                               buffer cut into segments that pipeline hop by hop
//     barrier                                   world - 1 hops around the ring
//   on a path (positions 0 .. w-1):
//     all_reduce       reduce along the path into position 0, then broadcast back (pipelined)
//     all_gather       every block travels to position 0, then the blocks travel back out
//     reduce_scatter   reduce into position 0, then every block travels out to its owner
//     broadcast        from the root towards both ends
//     reduce           into position 0, then relayed to the root
//     barrier          a token to position 0 and back
//   all_to_all: kUnavailable here; coll.cc runs it on a partial mesh as an all_gather of every
//   rank's whole input, each rank keeping the blocks addressed to it
//
// Results are bit-identical on every rank and across runs (the order is fixed by the route),
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

// A route through every rank: a cycle (find_ring) when there is one, else a path; empty order
// when neither exists.
struct Route {
  std::vector<int> order;  // order[i]: the rank at position i
  bool cycle = false;      // order.back() is linked to order.front()
};
Route find_route(int world, const std::function<bool(int, int)>& linked);

// The plan for `shape` (real ranks) along `route`.
Result<Plan> build_on_route(const Shape& shape, const Route& route);
// The same on a cycle (kept for callers that hold just the order).
inline Result<Plan> build_on_ring(const Shape& shape, const std::vector<int>& order) {
  return build_on_route(shape, Route{order, true});
}

}  // namespace lattice::coll::plan
