// The discrete-event core: message timing, collectives following coll/plan's schedules, and the
// split of a rank's time into its parts.
#include <gtest/gtest.h>

#include <cmath>

#include "lattice/coll/plan/plan.h"
#include "lattice/coll/plan/ring_route.h"
#include "lattice/fabric/verbs/wire.h"
#include "lattice/sim/des.h"

namespace lattice::sim {
namespace {

LinkModel link(double lat_us, double gbs, double per_msg = 0) {
  LinkModel m;
  m.medium = "test";
  m.latency_us = lat_us;
  m.gbytes_s = gbs;
  m.per_message_us = per_msg;
  return m;
}

std::vector<Cable> full_mesh(int n, const LinkModel& m) {
  std::vector<Cable> c;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) c.push_back({i, j, m, -1, -1});
  return c;
}

std::vector<coll::plan::Plan> plans(int W, coll::CollOp op, size_t count, coll::Algorithm algo) {
  std::vector<coll::plan::Plan> v;
  for (int r = 0; r < W; ++r) {
    coll::plan::Shape s;
    s.op = op;
    s.rank = r;
    s.world = W;
    s.count = count;
    auto p = coll::plan::build(s, algo);
    EXPECT_TRUE(p.ok()) << p.status().to_string();
    v.push_back(*p);
  }
  return v;
}

TEST(Des, OneMessage) {
  Des d(2, full_mesh(2, link(5, 1, 2)));  // 1 GB/s = 1000 bytes per us
  ASSERT_TRUE(d.send(0, 1, 10000).ok());
  EXPECT_DOUBLE_EQ(d.clock(0), 2);            // posting
  EXPECT_DOUBLE_EQ(d.clock(1), 2 + 10 + 5);   // + serialisation + latency
  EXPECT_DOUBLE_EQ(d.breakdown(1).latency_us, 5);
  EXPECT_DOUBLE_EQ(d.breakdown(1).bandwidth_us, 10);
  EXPECT_DOUBLE_EQ(d.breakdown(1).sync_us, 2);
  EXPECT_DOUBLE_EQ(d.cable_stats()[0].bytes_ab, 10000);
}

TEST(Des, MessagesQueueOnACable) {
  Des d(2, full_mesh(2, link(1, 1)));
  ASSERT_TRUE(d.send(0, 1, 1000).ok());
  ASSERT_TRUE(d.send(0, 1, 1000).ok());  // waits for the first to leave the wire
  EXPECT_DOUBLE_EQ(d.clock(1), 2 + 1);
}

TEST(Des, TwoCablesShareOneController) {
  // Rank 0 sends to 1 and 2 over cables on one controller: the second waits for the first.
  auto m = link(0, 1);
  Des shared(3, {{0, 1, m, 0, 0}, {0, 2, m, 0, 0}});
  ASSERT_TRUE(shared.send(0, 1, 1000).ok());
  ASSERT_TRUE(shared.send(0, 2, 1000).ok());
  EXPECT_DOUBLE_EQ(shared.clock(2), 2);
  Des apart(3, {{0, 1, m, 0, 0}, {0, 2, m, 1, 0}});
  ASSERT_TRUE(apart.send(0, 1, 1000).ok());
  ASSERT_TRUE(apart.send(0, 2, 1000).ok());
  EXPECT_DOUBLE_EQ(apart.clock(2), 1);
}

TEST(Des, OneShotAllReduceIsOneRound) {
  const int W = 4;
  Des d(W, full_mesh(W, link(10, 1)));
  ASSERT_TRUE(d.run(plans(W, coll::CollOp::kAllReduce, 250, coll::Algorithm::kOneShot), 4, 3, 0).ok());
  // sync 3 us, then every rank sends 1000 bytes to each peer on its own cable: 1 us + 10 us.
  for (int r = 0; r < W; ++r) EXPECT_NEAR(d.clock(r), 3 + 1 + 10, 1e-9) << r;
  EXPECT_NEAR(d.breakdown(0).latency_us, 10, 1e-9);
  EXPECT_NEAR(d.breakdown(0).sync_us, 3, 1e-9);
}

TEST(Des, RingAllReduceTakesTwoWorldMinusOneSteps) {
  const int W = 4;
  Des d(W, full_mesh(W, link(10, 1)));
  ASSERT_TRUE(d.run(plans(W, coll::CollOp::kAllReduce, 4000, coll::Algorithm::kRing), 4, 0, 0).ok());
  // 2 (W - 1) = 6 steps of a quarter of the buffer (4000 bytes: 4 us) plus 10 us latency each.
  EXPECT_NEAR(d.now(), 6 * (4 + 10), 1e-6);
}

TEST(Des, ScheduleOverAMissingCableIsAnError) {
  const int W = 4;
  std::vector<Cable> ring;
  for (int i = 0; i < W; ++i) ring.push_back({i, (i + 1) % W, link(1, 1), -1, -1});
  Des d(W, ring);
  EXPECT_FALSE(d.full_mesh());
  auto st = d.run(plans(W, coll::CollOp::kAllReduce, 64, coll::Algorithm::kOneShot), 4, 0, 0);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no cable"), std::string::npos) << st.to_string();
  // The route plans (what coll.cc runs on a ring of cables) use neighbours only.
  auto route = coll::plan::find_route(W, [&](int i, int j) { return d.linked(i, j); });
  std::vector<coll::plan::Plan> v;
  for (int r = 0; r < W; ++r) {
    coll::plan::Shape s;
    s.rank = r;
    s.world = W;
    s.count = 64;
    v.push_back(*coll::plan::build_on_route(s, route));
  }
  EXPECT_TRUE(d.run(v, 4, 0, 0).ok());
}

TEST(Des, BarrierChargesTheWaitToSync) {
  Des d(2, full_mesh(2, link(1, 1)));
  d.work(0, 100, true);
  d.work(1, 40, false);
  d.barrier();
  EXPECT_DOUBLE_EQ(d.breakdown(1).sync_us, 60);
  EXPECT_DOUBLE_EQ(d.breakdown(0).weights_us, 100);
  EXPECT_DOUBLE_EQ(d.breakdown(1).compute_us, 40);
  EXPECT_DOUBLE_EQ(d.breakdown(1).total(), 100);
}

TEST(Des, StagedMessagesAreWholeSlots) {
  const LinkModel m = with_verbs_staging(link(50, 1));
  const double slot = double(fabric::verbs::kSlotBytes);
  EXPECT_DOUBLE_EQ(m.wire_bytes(8), slot);
  EXPECT_DOUBLE_EQ(m.wire_bytes(0), slot);
  EXPECT_DOUBLE_EQ(m.wire_bytes(double(fabric::verbs::kChunkPayload)), slot);
  EXPECT_DOUBLE_EQ(m.wire_bytes(double(fabric::verbs::kChunkPayload) + 1), 2 * slot);
  EXPECT_DOUBLE_EQ(m.message_us(8), 50 + slot / 1e3);
  EXPECT_DOUBLE_EQ(link(50, 1).wire_bytes(8), 8);
}

TEST(Des, StagedPingPongCarriesTheAckInTheReply) {
  // A ping-pong of 8 B over a staged link of 50 us, 1 GB/s: each way the wire carries the reply,
  // a whole slot whose header acks the message just received, so a trip takes the latency and
  // one slot's serialisation (docs/SIM.md compares this with `bench fabric` over the emulated
  // device).
  Des d(2, full_mesh(2, with_verbs_staging(link(50, 1))));
  const double slot_us = double(fabric::verbs::kSlotBytes) / 1e3;
  double before = 0;
  for (int i = 0; i < 20; ++i) {
    if (i == 10) before = d.clock(0);
    ASSERT_TRUE(d.send(0, 1, 8).ok());
    ASSERT_TRUE(d.send(1, 0, 8).ok());
  }
  const double one_way = (d.clock(0) - before) / 20;
  EXPECT_NEAR(one_way, 50 + slot_us, 1e-6);
  // The sender's send completes once its one slot is staged, at once: the ack is not waited for.
  Des e(2, full_mesh(2, with_verbs_staging(link(50, 1))));
  ASSERT_TRUE(e.send(0, 1, 8).ok());
  EXPECT_NEAR(e.clock(1), slot_us + 50, 1e-9);
  EXPECT_NEAR(e.clock(0), 0, 1e-9);
}

TEST(Des, StagedAllReduceStepEndsWithThePeersSlot) {
  // Two ranks, one round: each sends 8 KB (one slot), whose ack rides on a later slot going back;
  // the step ends when the peer's slot is in: the sends completed when they were staged.
  const double slot_us = double(fabric::verbs::kSlotBytes) / 1e3;
  Des d(2, full_mesh(2, with_verbs_staging(link(50, 1))));
  ASSERT_TRUE(d.run(plans(2, coll::CollOp::kAllReduce, 2048, coll::Algorithm::kOneShot), 4, 0, 0).ok());
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(d.clock(r), slot_us + 50, 1e-9) << r;
  Des plain(2, full_mesh(2, link(50, 1)));
  ASSERT_TRUE(plain.run(plans(2, coll::CollOp::kAllReduce, 2048, coll::Algorithm::kOneShot), 4, 0, 0).ok());
  EXPECT_NEAR(plain.clock(0), 8192 / 1e3 + 50, 1e-9);
  // A message of many slots is acked every kAckEveryChunks slots (its end by a later slot going
  // back); within the window it completes when posted.
  Des big(2, full_mesh(2, with_verbs_staging(link(1, 1))));
  const double n = 20;
  ASSERT_TRUE(big.send(0, 1, n * double(fabric::verbs::kChunkPayload)).ok());
  const double acks = std::floor(n / fabric::verbs::kAckEveryChunks);
  EXPECT_NEAR(big.cable_stats()[0].busy_us, (n + acks) * slot_us, 1e-9);
  EXPECT_NEAR(big.clock(0), 0, 1e-9);
  // Beyond the window (kDataSlots unacked slots) its last slot waits for the ack that frees a
  // slot: 40 slots, the window 32, so the ack after the 8th, back a slot and 1 us later.
  ASSERT_EQ(fabric::verbs::kDataSlots, 32u);
  ASSERT_EQ(fabric::verbs::kAckEveryChunks, 8u);
  Des over(2, full_mesh(2, with_verbs_staging(link(1, 1))));
  ASSERT_TRUE(over.send(0, 1, 40 * double(fabric::verbs::kChunkPayload)).ok());
  EXPECT_NEAR(over.clock(0), 8 * slot_us + 1 + slot_us + 1, 1e-9);
}

}  // namespace
}  // namespace lattice::sim
