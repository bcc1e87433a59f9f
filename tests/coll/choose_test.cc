// The one algorithm choice of a collective call (coll/choose.h), as a table: what the
// communicator can do (landing zones, topology), the call's size and request -> algorithm and path.
#include "lattice/coll/choose.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lattice::coll {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// The communicators the table runs on, as their facts.
CallFacts shm(int world) {  // passive one-sided writes: both landing-zone paths
  CallFacts f;
  f.world = world;
  f.oneshot_zone_bytes = 64 * KiB;
  f.twoshot_zone = true;
  f.slice_bytes = 1 * MiB;
  return f;
}
CallFacts tcp(int world) {  // two-sided only
  CallFacts f;
  f.world = world;
  f.slice_bytes = 1 * MiB;
  return f;
}
CallFacts partial(CallFacts f) {
  f.full_mesh = false;
  return f;
}

struct Row {
  const char* what;
  CallFacts base;
  CollOp op;
  size_t bytes;  // of f32 elements
  Algorithm requested;
  Algorithm algo;
  Path path;
  size_t slice_bytes = 0;  // kSlicedPlan: bytes per slice
  bool apart = true;
};

TEST(Choose, Table) {
  using A = Algorithm;
  using P = Path;
  const std::vector<Row> rows = {
      // all_reduce with landing zones (shm): one-shot up to 8 KiB, two-shot beyond, both one-sided.
      {"shm 8 B", shm(4), CollOp::kAllReduce, 8, A::kAuto, A::kOneShot, P::kOneShotZone},
      {"shm 8 KiB", shm(2), CollOp::kAllReduce, 8 * KiB, A::kAuto, A::kOneShot, P::kOneShotZone},
      {"shm 16 KiB", shm(4), CollOp::kAllReduce, 16 * KiB, A::kAuto, A::kTwoShot, P::kTwoShotZone},
      {"shm 64 MiB, never sliced", shm(4), CollOp::kAllReduce, 64 * MiB, A::kAuto, A::kTwoShot, P::kTwoShotZone},
      {"shm one-shot asked beyond the zone", shm(4), CollOp::kAllReduce, 128 * KiB, A::kOneShot, A::kOneShot, P::kPlan},
      {"shm ring asked", shm(4), CollOp::kAllReduce, 16 * KiB, A::kRing, A::kRing, P::kPlan},
      {"shm ring asked, sliced", shm(4), CollOp::kAllReduce, 4 * MiB, A::kRing, A::kRing, P::kSlicedPlan, 1 * MiB},
      // all_reduce two-sided (tcp): size and world pick the plan; above 1 MiB slices.
      {"tcp 2 ranks 8 B", tcp(2), CollOp::kAllReduce, 8, A::kAuto, A::kOneShot, P::kPlan},
      {"tcp 2 ranks 256 KiB", tcp(2), CollOp::kAllReduce, 256 * KiB, A::kAuto, A::kOneShot, P::kPlan},
      {"tcp 2 ranks 512 KiB", tcp(2), CollOp::kAllReduce, 512 * KiB, A::kAuto, A::kTwoShot, P::kPlan},
      {"tcp 4 ranks 8 KiB", tcp(4), CollOp::kAllReduce, 8 * KiB, A::kAuto, A::kRecursive, P::kPlan},
      {"tcp 3 ranks 8 KiB", tcp(3), CollOp::kAllReduce, 8 * KiB, A::kAuto, A::kOneShot, P::kPlan},
      {"tcp 4 ranks 256 KiB", tcp(4), CollOp::kAllReduce, 256 * KiB, A::kAuto, A::kHalving, P::kPlan},
      {"tcp 3 ranks 256 KiB", tcp(3), CollOp::kAllReduce, 256 * KiB, A::kAuto, A::kTwoShot, P::kPlan},
      {"tcp 4 ranks 1 MiB", tcp(4), CollOp::kAllReduce, 1 * MiB, A::kAuto, A::kTwoShot, P::kPlan},
      {"tcp 4 ranks 4 MiB", tcp(4), CollOp::kAllReduce, 4 * MiB, A::kAuto, A::kTwoShot, P::kSlicedPlan, 1 * MiB},
      // 1 MiB + 4 B: two near-equal slices, both with the slices' algorithm (chosen once).
      {"tcp 4 ranks 1 MiB + 4 B", tcp(4), CollOp::kAllReduce, 1 * MiB + 4, A::kAuto, A::kTwoShot, P::kSlicedPlan,
       512 * KiB + 4},
      {"tcp 4 ranks 3 MiB", tcp(4), CollOp::kAllReduce, 3 * MiB, A::kAuto, A::kTwoShot, P::kSlicedPlan, 1 * MiB},
      {"tcp 2 ranks 1.5 MiB", tcp(2), CollOp::kAllReduce, 1536 * KiB, A::kAuto, A::kTwoShot, P::kSlicedPlan, 768 * KiB},
      {"tcp partial mesh", partial(tcp(4)), CollOp::kAllReduce, 8, A::kAuto, A::kRing, P::kPlan},
      {"shm partial mesh, small", partial(shm(4)), CollOp::kAllReduce, 8, A::kAuto, A::kRing, P::kPlan},
      // all_gather / reduce_scatter: the one-sided two-shot halves on landing zones, full mesh only.
      {"shm all_gather", shm(4), CollOp::kAllGather, 1 * KiB, A::kAuto, A::kTwoShot, P::kTwoShotZone},
      {"shm all_gather partial mesh", partial(shm(4)), CollOp::kAllGather, 1 * KiB, A::kAuto, A::kRing, P::kPlan},
      {"shm all_gather two-shot asked on a partial mesh", partial(shm(4)), CollOp::kAllGather, 1 * KiB, A::kTwoShot,
       A::kTwoShot, P::kPlan},
      {"tcp all_gather small", tcp(4), CollOp::kAllGather, 1 * KiB, A::kAuto, A::kOneShot, P::kPlan},
      {"tcp all_gather large", tcp(4), CollOp::kAllGather, 1 * MiB, A::kAuto, A::kRing, P::kPlan},
      {"shm reduce_scatter", shm(4), CollOp::kReduceScatter, 1 * MiB, A::kAuto, A::kTwoShot, P::kTwoShotZone},
      {"shm reduce_scatter, out overlapping in", shm(4), CollOp::kReduceScatter, 1 * MiB, A::kAuto, A::kTwoShot,
       P::kPlan, 0, /*apart=*/false},
      // The rest: plans only.
      {"broadcast small", tcp(4), CollOp::kBroadcast, 4 * KiB, A::kAuto, A::kOneShot, P::kPlan},
      {"broadcast large", shm(4), CollOp::kBroadcast, 1 * MiB, A::kAuto, A::kTree, P::kPlan},
      {"reduce 3 ranks", tcp(3), CollOp::kReduce, 1 * MiB, A::kAuto, A::kOneShot, P::kPlan},
      {"barrier", shm(4), CollOp::kBarrier, 0, A::kAuto, A::kRecursive, P::kPlan},
      {"all_to_all", shm(4), CollOp::kAllToAll, 1 * KiB, A::kAuto, A::kOneShot, P::kPlan},
      {"all_to_all partial mesh", partial(tcp(4)), CollOp::kAllToAll, 1 * KiB, A::kAuto, A::kRing, P::kGatherAround},
      {"all_to_all partial mesh, ring asked", partial(tcp(4)), CollOp::kAllToAll, 1 * KiB, A::kRing, A::kRing,
       P::kGatherAround},
      {"all_to_all one rank", partial(tcp(1)), CollOp::kAllToAll, 1 * KiB, A::kAuto, A::kRing, P::kPlan},
  };
  for (const Row& r : rows) {
    CallFacts f = r.base;
    f.op = r.op;
    f.elem_bytes = 4;
    f.count = r.bytes / 4;
    f.requested = r.requested;
    f.buffers_apart = r.apart;
    Result<Choice> c = choose(f);
    ASSERT_TRUE(c.ok()) << r.what << ": " << c.status().to_string();
    EXPECT_EQ(to_string(c->algo), to_string(r.algo)) << r.what;
    EXPECT_EQ(to_string(c->path), to_string(r.path)) << r.what;
    EXPECT_EQ(c->slice_count * 4, r.slice_bytes) << r.what;
  }
}

TEST(Choose, SlicesCoverTheBufferAndNoneExceedsTheSliceBytes) {
  for (size_t count : {size_t{262145}, size_t{1} << 20, size_t{3} << 20, size_t{5000001}}) {
    CallFacts f = tcp(4);
    f.elem_bytes = 4;
    f.count = count;
    Result<Choice> c = choose(f);
    ASSERT_TRUE(c.ok());
    ASSERT_EQ(c->path, Path::kSlicedPlan) << count;
    EXPECT_LE(c->slice_count * f.elem_bytes, f.slice_bytes) << count;
    const size_t parts = (count + c->slice_count - 1) / c->slice_count;
    EXPECT_EQ(parts, (count * f.elem_bytes + f.slice_bytes - 1) / f.slice_bytes) << count;  // as few as fit
  }
  CallFacts off = tcp(4);
  off.slice_bytes = 0;  // never slice
  off.elem_bytes = 4;
  off.count = 64 << 20;
  EXPECT_EQ(choose(off)->path, Path::kPlan);
}

TEST(Choose, AllToAllOnAPartialMeshRefusesAnythingButTheRing) {
  CallFacts f = partial(tcp(4));
  f.op = CollOp::kAllToAll;
  f.count = 16;
  f.elem_bytes = 4;
  f.requested = Algorithm::kOneShot;
  Result<Choice> c = choose(f);
  EXPECT_EQ(c.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("full mesh"), std::string::npos) << c.status().message();
}

TEST(Choose, NeverAuto) {
  for (CollOp op : {CollOp::kAllReduce, CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kBroadcast,
                    CollOp::kReduce, CollOp::kAllToAll, CollOp::kBarrier})
    for (int world : {1, 2, 3, 4, 8})
      for (size_t bytes : {size_t{0}, size_t{4}, size_t{64} << 10, size_t{16} << 20})
        for (bool zones : {false, true}) {
          CallFacts f = zones ? shm(world) : tcp(world);
          f.op = op;
          f.elem_bytes = 4;
          f.count = bytes / 4;
          Result<Choice> c = choose(f);
          ASSERT_TRUE(c.ok());
          EXPECT_NE(c->algo, Algorithm::kAuto);
        }
}

}  // namespace
}  // namespace lattice::coll
