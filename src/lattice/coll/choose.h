// The one algorithm choice of a collective call: from what the communicator can do (landing
// zones, topology), the call's size and the caller's request, which algorithm runs and by which
// path. coll.cc makes it once per call, before anything moves, and runs what it says; nothing
// downstream chooses again. Plain data in, plain data out: tested as a table, no network.
#pragma once

#include <cstddef>
#include <string_view>

#include "lattice/coll/plan/plan.h"
#include "lattice/core/status.h"

namespace lattice::coll {

class Communicator;

// Everything the choice depends on.
struct CallFacts {
  CollOp op = CollOp::kAllReduce;
  size_t count = 0;       // elements: the all_reduce buffer, else one rank's block (coll.h)
  size_t elem_bytes = 1;  // dtype size
  int world = 1;
  Algorithm requested = Algorithm::kAuto;
  bool full_mesh = true;  // every pair linked (else collectives follow the route: rings only)
  // One-sided one-shot all_reduce: the largest buffer its landing zones take (0: no such path,
  // e.g. a link without passive one-sided writes, or CommOptions::rma_zone_bytes = 0).
  size_t oneshot_zone_bytes = 0;
  bool twoshot_zone = false;  // the one-sided two-shot can run (Communicator::twoshot_ready)
  size_t slice_bytes = 0;     // two-sided all_reduce slices (CommOptions::slice_bytes; 0: never)
  // reduce_scatter: out lies apart from in, or is exactly this rank's block of it (the one-sided
  // path writes out while it still reads in).
  bool buffers_apart = true;
};

enum class Path : uint8_t {
  kPlan,          // a plan (plan::build for `algo`) run by the executor
  kSlicedPlan,    // all_reduce: consecutive plans over slices of `slice_count` elements (the last may be shorter)
  kOneShotZone,   // one-sided one-shot all_reduce through landing zones
  kTwoShotZone,   // one-sided two-shot (all_reduce, or its reduce_scatter / all_gather half)
  kGatherAround,  // all_to_all on a partial mesh: an all_gather along the route, then keep my blocks
};
std::string_view to_string(Path p);

struct Choice {
  Algorithm algo = Algorithm::kOneShot;  // never kAuto
  Path path = Path::kPlan;
  size_t slice_count = 0;                // kSlicedPlan only
  friend bool operator==(const Choice&, const Choice&) = default;
};

// kInvalidArgument when the request cannot run on this topology (an algorithm other than the
// ring for all_to_all on a partial mesh). Other invalid requests (recursive doubling on three
// ranks) are refused by plan::build, with the plan's own message.
Result<Choice> choose(const CallFacts& facts);

// The facts of a call on `comm` (buffers apart unless told otherwise).
CallFacts facts_of(const Communicator& comm, CollOp op, size_t count, size_t elem_bytes, Algorithm requested);

}  // namespace lattice::coll
