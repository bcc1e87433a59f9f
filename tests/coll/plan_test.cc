// Plans checked without a network: every rank's plan runs against the others over in-memory
// FIFOs (coll_testlib simulate), results compared with the scalar reference.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "coll_testlib.h"
#include "lattice/coll/plan/plan.h"

namespace lattice::coll {
namespace {

using test::Case;

bool is_reducing(CollOp op) {
  return op == CollOp::kAllReduce || op == CollOp::kReduceScatter || op == CollOp::kReduce;
}

bool skip(CollOp op, Algorithm a, int world) { return !plan::implements(op, a, world); }

TEST(Plan, EveryOpAlgorithmDtypeAndWorldMatchesTheReference) {
  const CollOp ops[] = {CollOp::kAllReduce, CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kBroadcast,
                        CollOp::kReduce, CollOp::kAllToAll, CollOp::kBarrier};
  int ran = 0;
  for (CollOp op : ops) {
    for (Algorithm a : plan::algorithms_for(op)) {
      for (int world = 1; world <= 8; ++world) {
        if (skip(op, a, world)) continue;
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}}) {
          for (DType t : kAllDTypes) {
            for (ReduceOp rop : kAllReduceOps) {
              if (!is_reducing(op) && rop != ReduceOp::kSum) continue;
              for (bool in_place : {false, true}) {
                Case c{op, world, op == CollOp::kBarrier ? 0 : count, (world - 1) / 2};
                std::string e = test::simulate(c, t, rop, a, in_place);
                ASSERT_EQ(e, "") << to_string(op) << " " << to_string(a) << " world " << world << " count " << count
                                 << " " << to_string(t) << " " << to_string(rop) << (in_place ? " in place" : "");
                ++ran;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(ran, 1000);
}

TEST(Plan, LargeOddCountsAllReduce) {
  for (Algorithm a : plan::algorithms_for(CollOp::kAllReduce))
    for (int world : {3, 4, 8}) {
      Case c{CollOp::kAllReduce, world, (size_t{1} << 20) + 3};
      EXPECT_EQ(test::simulate(c, DType::kF32, ReduceOp::kSum, a, false), "") << to_string(a) << " " << world;
    }
}

TEST(Plan, UnsupportedCombinationsAreRejected) {
  EXPECT_FALSE(plan::build({CollOp::kAllToAll, 0, 4, 8, 0, false}, Algorithm::kRing).ok());
  EXPECT_FALSE(plan::build({CollOp::kAllGather, 0, 3, 8, 0, false}, Algorithm::kRecursive).ok());
  EXPECT_FALSE(plan::build({CollOp::kBroadcast, 0, 3, 8, 5, false}, Algorithm::kTree).ok());
  EXPECT_FALSE(plan::build({CollOp::kAllReduce, 4, 3, 8, 0, false}, Algorithm::kRing).ok());
}

TEST(Plan, RingSendsEachSegmentOnceEachWay) {
  // Ring all-reduce moves 2 (w-1)/w of the buffer per rank: the bandwidth-optimal volume.
  const size_t n = 1000;
  for (int w : {2, 3, 5, 8}) {
    auto p = plan::build({CollOp::kAllReduce, 1, w, n, 0, true}, Algorithm::kRing);
    ASSERT_TRUE(p.ok());
    size_t sent = 0;
    for (const auto& st : p->steps)
      for (const auto& s : st.sends) sent += s.n;
    EXPECT_EQ(sent, 2 * n - 2 * plan::segment(n, w, (1 + 1) % w).size) << w;  // all but own segment, twice
  }
}

TEST(Plan, SegmentsCoverTheBufferExactly) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{4097}})
    for (int parts = 1; parts <= 8; ++parts) {
      size_t next = 0;
      for (int k = 0; k < parts; ++k) {
        auto s = plan::segment(n, parts, k);
        EXPECT_EQ(s.begin, next);
        next += s.size;
      }
      EXPECT_EQ(next, n);
    }
}

TEST(Plan, AutoPicksOneShotForSmallAndTwoShotForLarge) {
  // Two-sided: recursive doubling for small buffers from 4 ranks (fewer messages), one-shot below.
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 8192, 4, false), Algorithm::kRecursive);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 8192, 3, false), Algorithm::kOneShot);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 8, 2, false), Algorithm::kOneShot);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 16 << 20, 4, false), Algorithm::kTwoShot);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 256 << 10, 4, false), Algorithm::kHalving);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 256 << 10, 3, false), Algorithm::kTwoShot);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 1 << 20, 4, false), Algorithm::kTwoShot);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 256 << 10, 2, false), Algorithm::kOneShot);
  // With passive one-sided writes (shm, RDMA): one-shot for small, two-shot beyond.
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 8192, 2, true), Algorithm::kOneShot);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 64 << 10, 4, true), Algorithm::kTwoShot);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllReduce, 16 << 20, 4, true), Algorithm::kTwoShot);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kAllGather, 1024, 4, true), Algorithm::kTwoShot);
  EXPECT_EQ(plan::choose_algorithm(CollOp::kReduceScatter, 1 << 20, 4, true), Algorithm::kTwoShot);
}

TEST(Plan, NewAlgorithmNamesParse) {
  for (Algorithm a : {Algorithm::kTwoShot, Algorithm::kBidir, Algorithm::kHalving}) {
    auto p = parse_algorithm(to_string(a));
    ASSERT_TRUE(p.ok()) << to_string(a);
    EXPECT_EQ(*p, a);
  }
  EXPECT_FALSE(parse_algorithm("nope").ok());
}

// Halving and two-shot move the bandwidth-optimal 2 (w-1)/w of the buffer per rank (power-of-
// two worlds for halving); bidir sends each half round the ring once each way.
TEST(Plan, HalvingTwoShotAndBidirSendTheOptimalVolume) {
  const size_t n = 4096;
  for (int w : {2, 4, 8})
    for (Algorithm a : {Algorithm::kHalving, Algorithm::kTwoShot, Algorithm::kBidir})
      for (int r = 0; r < w; ++r) {
        auto p = plan::build({CollOp::kAllReduce, r, w, n, 0, true}, a);
        ASSERT_TRUE(p.ok());
        size_t sent = 0;
        for (const auto& st : p->steps)
          for (const auto& s : st.sends) sent += s.n;
        EXPECT_EQ(sent, 2 * n * size_t(w - 1) / size_t(w)) << to_string(a) << " world " << w << " rank " << r;
      }
  // Halving takes 2 log2(w) steps; the ring 2 (w - 1).
  auto h = plan::build({CollOp::kAllReduce, 0, 8, n, 0, true}, Algorithm::kHalving);
  auto ring = plan::build({CollOp::kAllReduce, 0, 8, n, 0, true}, Algorithm::kRing);
  EXPECT_EQ(h->steps.size(), 6u);
  EXPECT_EQ(ring->steps.size(), 14u);
}

// The ring plans let each step start before the previous one ends (the executor pipelines
// them chunk by chunk); the first exchange follows a local copy, so it cannot.
TEST(Plan, RingStepsMayOverlapTheirPredecessor) {
  for (Algorithm a : {Algorithm::kRing, Algorithm::kBidir}) {
    auto p = plan::build({CollOp::kAllReduce, 1, 4, 1000, 0, false}, a);
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(p->steps.size(), 7u);
    EXPECT_FALSE(p->steps[0].after.empty());  // the copy in -> out
    for (size_t i = 1; i < p->steps.size(); ++i) EXPECT_TRUE(p->steps[i].overlap_prev) << to_string(a) << " " << i;
  }
  auto one = plan::build({CollOp::kAllReduce, 1, 4, 1000, 0, false}, Algorithm::kOneShot);
  for (const auto& st : one->steps) EXPECT_FALSE(st.overlap_prev);
}

// Bidir: in every step a rank sends to both neighbours (w > 2), half the data each way.
TEST(Plan, BidirUsesBothNeighboursEveryStep) {
  auto p = plan::build({CollOp::kAllReduce, 1, 4, 1000, 0, true}, Algorithm::kBidir);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->steps.size(), 6u);
  for (const auto& st : p->steps) {
    ASSERT_EQ(st.sends.size(), 2u);
    EXPECT_EQ(st.sends[0].peer, 2);
    EXPECT_EQ(st.sends[1].peer, 0);
  }
}

TEST(Reduce, HalfConversionsRoundTripAndRoundToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);          // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);          // tie -> even (up)
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                    // overflow -> inf
  EXPECT_EQ(f32_to_f16(5.9604645e-8f), 0x0001);               // smallest subnormal
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);
}

TEST(Reduce, OrderedReduceGivesTheBitsOfBinaryPasses) {
  for (DType t : kAllDTypes)
    for (ReduceOp op : kAllReduceOps)
      for (size_t n : {size_t{1}, size_t{4097}, size_t{20000}}) {
        std::vector<std::vector<std::byte>> src;
        for (int q = 0; q < 5; ++q) {
          src.push_back(test::make_buffer(t, n));
          test::fill_input(t, op, q, src.back().data(), n);
        }
        auto want = test::make_buffer(t, n), got = test::make_buffer(t, n);
        reduce(t, op, want.data(), src[0].data(), src[1].data(), n);
        for (int q = 2; q < 5; ++q) reduce(t, op, want.data(), want.data(), src[size_t(q)].data(), n);
        std::vector<const void*> ptrs;
        for (auto& b : src) ptrs.push_back(b.data());
        reduce_ordered(t, op, got.data(), ptrs.data(), ptrs.size(), n);
        ASSERT_EQ(got, want) << to_string(t) << " " << to_string(op) << " " << n;
        reduce_ordered(t, op, src[0].data(), ptrs.data(), ptrs.size(), n);  // dst aliasing srcs[0]
        ASSERT_EQ(src[0], want) << to_string(t) << " " << to_string(op) << " " << n << " in place";
      }
}

TEST(Reduce, KernelsMatchScalarMath) {
  for (DType t : kAllDTypes)
    for (ReduceOp op : kAllReduceOps) {
      const size_t n = 1031;
      auto a = test::make_buffer(t, n), b = test::make_buffer(t, n), d = test::make_buffer(t, n);
      test::fill_input(t, op, 1, a.data(), n);
      test::fill_input(t, op, 2, b.data(), n);
      reduce(t, op, d.data(), a.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(test::load(t, d.data(), i), test::combine(op, test::value(op, 1, i), test::value(op, 2, i)))
            << to_string(t) << " " << to_string(op) << " " << i;
    }
  int32_t x = INT32_MAX, y = 1, z = 0;
  reduce(DType::kI32, ReduceOp::kSum, &z, &x, &y, 1);
  EXPECT_EQ(z, INT32_MIN);  // wraps, no UB
}

}  // namespace
}  // namespace lattice::coll
