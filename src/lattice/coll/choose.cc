#include "lattice/coll/choose.h"

#include <string>

#include "lattice/coll/comm.h"

namespace lattice::coll {

std::string_view to_string(Path p) {
  switch (p) {
    case Path::kPlan: return "plan";
    case Path::kSlicedPlan: return "sliced-plan";
    case Path::kOneShotZone: return "oneshot-zone";
    case Path::kTwoShotZone: return "twoshot-zone";
    case Path::kGatherAround: return "gather-around";
  }
  return "?";
}

namespace {

// kAuto resolved for `count` elements; a partial mesh only runs rings (along its route).
Algorithm algorithm_for(const CallFacts& f, size_t count) {
  if (f.requested != Algorithm::kAuto) return f.requested;
  if (!f.full_mesh) return Algorithm::kRing;
  // The landing-zone paths count only where this communicator has them enabled.
  return plan::choose_algorithm(f.op, count * f.elem_bytes, f.world, f.twoshot_zone);
}

}  // namespace

Result<Choice> choose(const CallFacts& f) {
  const Algorithm algo = algorithm_for(f, f.count);
  switch (f.op) {
    case CollOp::kAllReduce: {
      // One-sided paths where every link writes passively; the plans (two-sided) elsewhere.
      if (algo == Algorithm::kOneShot && f.oneshot_zone_bytes > 0 && f.count * f.elem_bytes <= f.oneshot_zone_bytes)
        return Choice{algo, Path::kOneShotZone};
      if (algo == Algorithm::kTwoShot && f.twoshot_zone) return Choice{algo, Path::kTwoShotZone};
      const size_t slice = f.elem_bytes ? f.slice_bytes / f.elem_bytes : 0;
      if (slice == 0 || f.count <= slice) return Choice{algo, Path::kPlan};
      // Near-equal slices (equal ones share one cached plan), all with the algorithm chosen for
      // a slice: a whole 4 MiB buffer's steps keep more bytes in flight than the caches hold.
      const size_t parts = (f.count + slice - 1) / slice, per = (f.count + parts - 1) / parts;
      return Choice{algorithm_for(f, per), Path::kSlicedPlan, per};
    }
    case CollOp::kAllGather:
    case CollOp::kReduceScatter: {
      const bool apart = f.op == CollOp::kAllGather || f.buffers_apart;
      if (apart && f.full_mesh && f.twoshot_zone && algo == Algorithm::kTwoShot) return Choice{algo, Path::kTwoShotZone};
      return Choice{algo, Path::kPlan};
    }
    case CollOp::kAllToAll:
      if (!f.full_mesh && f.world > 1) {
        // Every rank's whole input goes around the route, each keeps the blocks addressed to it:
        // w times the traffic of a direct exchange, which MoE-sized token batches afford.
        if (f.requested != Algorithm::kAuto && f.requested != Algorithm::kRing)
          return InvalidArgument("coll: algorithm " + std::string(to_string(f.requested)) +
                                 " needs a full mesh; this topology only allows ring");
        return Choice{Algorithm::kRing, Path::kGatherAround};
      }
      return Choice{algo, Path::kPlan};
    case CollOp::kBroadcast:
    case CollOp::kReduce:
    case CollOp::kBarrier: return Choice{algo, Path::kPlan};
  }
  return Choice{algo, Path::kPlan};
}

CallFacts facts_of(const Communicator& comm, CollOp op, size_t count, size_t elem_bytes, Algorithm requested) {
  CallFacts f;
  f.op = op;
  f.count = count;
  f.elem_bytes = elem_bytes;
  f.world = comm.world_size();
  f.requested = requested;
  f.full_mesh = comm.full_mesh();
  f.oneshot_zone_bytes = comm.rma_ready() ? comm.rma_zone_bytes() : 0;
  f.twoshot_zone = comm.twoshot_ready();
  f.slice_bytes = comm.options().slice_bytes;
  return f;
}

}  // namespace lattice::coll
