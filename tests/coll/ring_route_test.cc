// Collectives on a partial mesh: ranks linked only along a ring of cables (not in rank order),
// every op against the scalar reference, results bit-identical on every rank, all_to_all and
// non-ring algorithms refused with clear errors, and the route search itself.
#include <gtest/gtest.h>

#include <thread>

#include "coll_testlib.h"
#include "lattice/cluster/group.h"
#include "lattice/coll/coll.h"
#include "lattice/coll/plan/ring_route.h"

namespace lattice::coll {
namespace {

// A full-mesh group seen through a topology that cables only the neighbours along `cycle`
// (closed: the last is cabled to the first; else a chain).
class CabledView final : public cluster::Group {
 public:
  CabledView(cluster::Group& inner, std::vector<int> cycle, bool closed = true)
      : inner_(inner), cycle_(std::move(cycle)), closed_(closed) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  uint64_t epoch() const override { return inner_.epoch(); }
  std::span<const cluster::Link> links(int peer) const override {
    return pair_linked(rank(), peer) ? inner_.links(peer) : std::span<const cluster::Link>{};
  }
  std::span<fabric::Provider* const> providers() const override { return inner_.providers(); }
  bool pair_linked(int a, int b) const override {
    const int w = static_cast<int>(cycle_.size());
    for (int i = 0; i < (closed_ ? w : w - 1); ++i) {
      const int x = cycle_[size_t(i)], y = cycle_[size_t((i + 1) % w)];
      if ((x == a && y == b) || (x == b && y == a)) return a != b;
    }
    return false;
  }

 private:
  cluster::Group& inner_;
  std::vector<int> cycle_;
  bool closed_;
};

struct Cabled {
  std::vector<std::unique_ptr<cluster::Group>> full;
  std::vector<std::unique_ptr<CabledView>> views;
  std::vector<std::unique_ptr<Communicator>> comms;
};

Cabled make_cabled(const std::string& uri, const std::vector<int>& cycle, bool closed = true) {
  Cabled c;
  const int world = static_cast<int>(cycle.size());
  // Liveness is not under test here: a generous peer timeout keeps a starved thread on a
  // loaded machine from being declared lost.
  fabric::EndpointOptions eo;
  eo.peer_timeout = std::chrono::seconds(20);
  auto g = cluster::make_local_groups(world, uri, Deadline::after(std::chrono::seconds(60)), eo);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return c;
  c.full = std::move(*g);
  CommOptions co;
  co.chunk_bytes = 4096;
  for (auto& grp : c.full) {
    c.views.push_back(std::make_unique<CabledView>(*grp, cycle, closed));
    auto comm = Communicator::create(*c.views.back(), co);
    EXPECT_TRUE(comm.ok()) << comm.status().to_string();
    if (!comm.ok()) return {};
    c.comms.push_back(std::move(*comm));
  }
  return c;
}

TEST(RingRoute, FindsTheIdentityACableRingOrNothing) {
  auto mesh = [](int, int) { return true; };
  EXPECT_EQ(plan::find_ring(4, mesh), (std::vector<int>{0, 1, 2, 3}));
  // Cables 0-2, 2-1, 1-3, 3-0.
  auto cabled = [](int a, int b) {
    static const std::vector<std::pair<int, int>> c{{0, 2}, {2, 1}, {1, 3}, {3, 0}};
    for (auto [x, y] : c)
      if ((x == a && y == b) || (x == b && y == a)) return true;
    return false;
  };
  EXPECT_EQ(plan::find_ring(4, cabled), (std::vector<int>{0, 2, 1, 3}));
  // A chain 0-1-2 has no cycle; two ranks need their one cable.
  auto chain = [](int a, int b) { return a + 1 == b || b + 1 == a; };
  EXPECT_TRUE(plan::find_ring(3, chain).empty());
  EXPECT_TRUE(plan::find_ring(2, [](int, int) { return false; }).empty());
  EXPECT_EQ(plan::find_ring(1, mesh), (std::vector<int>{0}));
}

TEST(RingRoute, PlansOnlyTalkToRingNeighbours) {
  const std::vector<int> order{0, 3, 1, 4, 2};
  const int w = 5;
  auto neighbours = [&](int a, int b) {
    for (int i = 0; i < w; ++i) {
      const int x = order[size_t(i)], y = order[size_t((i + 1) % w)];
      if ((x == a && y == b) || (x == b && y == a)) return true;
    }
    return false;
  };
  for (CollOp op : {CollOp::kAllReduce, CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kBroadcast,
                    CollOp::kReduce, CollOp::kBarrier})
    for (int r = 0; r < w; ++r) {
      auto p = plan::build_on_ring({op, r, w, 100000, 3, false}, order);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      for (const auto& st : p->steps)
        for (const auto* list : {&st.sends, &st.recvs})
          for (const auto& t : *list) EXPECT_TRUE(neighbours(r, t.peer)) << to_string(op) << " " << r << "->" << t.peer;
    }
  auto a2a = plan::build_on_ring({CollOp::kAllToAll, 0, w, 10, 0, false}, order);
  EXPECT_EQ(a2a.status().code(), ErrorCode::kUnavailable);
}

// Every op, dtype and reduce op on cable rings whose order is not the rank order, over shm
// and tcp, with sizes that make the chains pipeline and the ring split unevenly.
void cabled_matrix(const std::string& uri, const std::vector<int>& cycle, std::initializer_list<size_t> counts,
                   bool all_dtypes, bool closed = true) {
  const int world = static_cast<int>(cycle.size());
  Cabled cb = make_cabled(uri, cycle, closed);
  ASSERT_EQ(cb.comms.size(), size_t(world));
  EXPECT_FALSE(cb.comms[0]->full_mesh());
  const plan::Route want = plan::find_route(world, [&](int a, int b) { return cb.views[0]->pair_linked(a, b); });
  EXPECT_EQ(cb.comms[0]->route().order, want.order);
  EXPECT_EQ(cb.comms[0]->route().cycle, closed);
  std::vector<Communicator*> comms;
  for (auto& cm : cb.comms) comms.push_back(cm.get());
  for (CollOp op : {CollOp::kAllReduce, CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kBroadcast, CollOp::kReduce,
                    CollOp::kBarrier})
    for (size_t count : counts)
      for (DType t : kAllDTypes) {
        if (!all_dtypes && t != DType::kF32) continue;
        for (ReduceOp rop : kAllReduceOps) {
          const bool reducing = op == CollOp::kAllReduce || op == CollOp::kReduceScatter || op == CollOp::kReduce;
          if (!reducing && rop != ReduceOp::kSum) continue;
          // The root in the middle of the route: a path broadcasts both ways.
          test::Case c{op, world, op == CollOp::kBarrier ? 0 : count, cycle[size_t(world / 2)]};
          CollOptions o;
          o.chunk_bytes = 512;
          o.timeout = std::chrono::seconds(60);
          ASSERT_EQ(test::run_and_check(comms, c, t, rop, o), "")
              << to_string(op) << " count " << count << " " << to_string(t) << " " << to_string(rop);
        }
      }
}

TEST(RingRoute, EveryOpOnACableRingOverShm) { cabled_matrix("shm", {0, 2, 1, 3}, {0, 1, 7, 4097, 40000}, true); }

TEST(RingRoute, EveryOpOnAFiveHostRingOverTcp) {
  cabled_matrix("tcp://127.0.0.1:0", {0, 3, 1, 4, 2}, {7, 40000}, false);
}

// A ring that lost a host is a chain (2-0-1: the cable 1-2 went with the lost host).
TEST(RingRoute, EveryOpOnAChainOverShm) { cabled_matrix("shm", {2, 0, 1}, {0, 1, 7, 4097, 40000}, true, false); }

TEST(RingRoute, EveryOpOnAFiveHostChainOverTcp) {
  cabled_matrix("tcp://127.0.0.1:0", {3, 0, 4, 1, 2}, {7, 40000}, false, false);
}

TEST(RingRoute, EveryOpOnAFiveHostChainOverShm) { cabled_matrix("shm", {3, 0, 4, 1, 2}, {7, 40000}, false, false); }

TEST(RingRoute, FindsAPathWhenThereIsNoCycle) {
  auto chain = [](int a, int b) { return (a == 2 && b == 0) || (a == 0 && b == 2) || (a == 0 && b == 1) || (a == 1 && b == 0); };
  plan::Route r = plan::find_route(3, chain);  // 2-0-1
  EXPECT_FALSE(r.cycle);
  ASSERT_EQ(r.order.size(), 3u);
  for (size_t i = 0; i + 1 < r.order.size(); ++i) EXPECT_TRUE(chain(r.order[i], r.order[i + 1]));
  EXPECT_TRUE(plan::find_route(4, [](int a, int b) { return (a == 0) != (b == 0); }).order.empty());  // a star
  EXPECT_TRUE(plan::find_route(4, [](int, int) { return true; }).cycle);
  // Path plans only talk to path neighbours.
  for (CollOp op : {CollOp::kAllReduce, CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kBroadcast,
                    CollOp::kReduce, CollOp::kBarrier})
    for (int rank = 0; rank < 3; ++rank) {
      auto p = plan::build_on_route({op, rank, 3, 50000, 0, false}, r);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      for (const auto& st : p->steps)
        for (const auto* list : {&st.sends, &st.recvs})
          for (const auto& t : *list) EXPECT_TRUE(chain(rank, t.peer)) << to_string(op) << " " << rank << "->" << t.peer;
    }
}

TEST(RingRoute, AllToAllGoesAroundTheRouteAndMeshAlgorithmsAreRefused) {
  for (bool closed : {true, false}) {
    Cabled cb = make_cabled("shm", {0, 2, 1, 3}, closed);
    ASSERT_EQ(cb.comms.size(), 4u);
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(5000)}) {
      test::Case c{CollOp::kAllToAll, 4, count, 0};
      auto in = std::vector<std::vector<std::byte>>(4), out = in;
      auto st = test::on_all(4, [&](int r) {
        in[size_t(r)] = test::make_buffer(DType::kI32, test::in_elems(c));
        out[size_t(r)] = test::make_buffer(DType::kI32, test::out_elems(c));
        test::fill_case_input(c, DType::kI32, ReduceOp::kSum, r, in[size_t(r)].data());
        return test::run_op(*cb.comms[size_t(r)], c, DType::kI32, ReduceOp::kSum, in[size_t(r)].data(),
                            out[size_t(r)].data(), CollOptions{});
      });
      for (int r = 0; r < 4; ++r) {
        ASSERT_TRUE(st[size_t(r)].ok()) << st[size_t(r)].to_string();
        EXPECT_EQ(test::check_output(c, DType::kI32, ReduceOp::kSum, r, out[size_t(r)].data()), "")
            << "count " << count << " rank " << r << (closed ? " ring" : " chain");
      }
    }
    // Refused before any message moves, so one rank can ask alone.
    std::vector<float> in(16, 1.0f), out(16, 0.0f);
    CollOptions o;
    o.algo = Algorithm::kOneShot;
    Status one = all_reduce(*cb.comms[0], in.data(), out.data(), 16, DType::kF32, ReduceOp::kSum, o);
    EXPECT_EQ(one.code(), ErrorCode::kInvalidArgument) << one.to_string();
    EXPECT_NE(one.message().find("only allows ring"), std::string::npos) << one.to_string();
  }
}

}  // namespace
}  // namespace lattice::coll
