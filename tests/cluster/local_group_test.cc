#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "lattice/cluster/group.h"

namespace lattice::cluster {
namespace {

class LocalGroupTest : public ::testing::TestWithParam<std::string> {};

// Every rank sends its rank number to every peer; each checks what it got from each.
TEST_P(LocalGroupTest, FullMeshExchange) {
  constexpr int kWorld = 3;
  auto groups = make_local_groups(kWorld, GetParam(), Deadline::after(std::chrono::seconds(20)));
  if (!groups.ok() && groups.status().code() == ErrorCode::kUnavailable) GTEST_SKIP() << groups.status().to_string();
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      Group& g = *(*groups)[r];
      auto* prov = g.providers()[0];
      auto mr = prov->allocate_memory(8 * 2 * kWorld, fabric::kAllAccess);
      if (!mr.ok()) { errors[r] = mr.status().to_string(); return; }
      auto* base = (*mr)->data();
      for (int p = 0; p < kWorld; ++p) {
        if (p == r) continue;
        const auto& link = g.links(p)[0];
        if (auto s = link.endpoint->post_recv({mr->get(), size_t(8 * p), 8}, 100 + p); !s.ok()) { errors[r] = s.to_string(); return; }
        uint64_t v = 1000 * r + p;
        std::memcpy(base + 8 * (kWorld + p), &v, 8);
        if (auto s = link.endpoint->post_send({mr->get(), size_t(8 * (kWorld + p)), 8}, p); !s.ok()) { errors[r] = s.to_string(); return; }
      }
      int want = 2 * (kWorld - 1);
      fabric::Completion c[8];
      auto deadline = Deadline::after(std::chrono::seconds(20));
      const auto& l0 = g.links(r == 0 ? 1 : 0)[0];
      while (want > 0) {
        for (auto* cq : {l0.send_cq, l0.recv_cq}) {
          size_t n = cq->poll(c);
          for (size_t i = 0; i < n; ++i) {
            if (!c[i].status.ok()) { errors[r] = c[i].status.to_string(); return; }
            --want;
          }
        }
        if (deadline.expired()) { errors[r] = "timeout"; return; }
      }
      for (int p = 0; p < kWorld; ++p) {
        if (p == r) continue;
        uint64_t got;
        std::memcpy(&got, base + 8 * p, 8);
        if (got != uint64_t(1000 * p + r)) errors[r] = "wrong value from " + std::to_string(p);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  EXPECT_EQ((*groups)[1]->endpoint(1), nullptr);
  EXPECT_NE((*groups)[1]->endpoint(2), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Providers, LocalGroupTest, ::testing::Values("shm", "tcp://127.0.0.1:0"),
                         [](const auto& info) { return info.param == "shm" ? std::string("shm") : std::string("tcp"); });

TEST(SingleGroup, HasNoPeers) {
  auto g = make_single_group();
  EXPECT_EQ(g->world_size(), 1);
  EXPECT_EQ(g->rank(), 0);
  EXPECT_TRUE(g->links(0).empty());
  EXPECT_EQ(g->endpoint(1), nullptr);
}

}  // namespace
}  // namespace lattice::cluster
