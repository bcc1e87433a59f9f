// The fabric's per-endpoint byte counters (Endpoint::link_bytes) under collectives, ranks as
// threads over tcp and shm (shm: through mapped peers' memory too, which the communicator
// counts for the endpoint): an all-reduce of B bytes on two ranks moves at least B/2 each way
// (each rank needs the other's half) and at most 2B plus flags and credits.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "lattice/cluster/group.h"
#include "lattice/coll/coll.h"

namespace lattice::coll {
namespace {

// One direction of the link from rank `from` to rank `to`: the larger of the sender's sent and
// the receiver's received (one-sided operations are counted by one side only).
uint64_t moved(const std::vector<std::unique_ptr<cluster::Group>>& g, int from, int to) {
  uint64_t sent = 0, received = 0;
  for (const cluster::Link& l : g[size_t(from)]->links(to)) sent += l.endpoint->link_bytes().sent;
  for (const cluster::Link& l : g[size_t(to)]->links(from)) received += l.endpoint->link_bytes().received;
  return std::max(sent, received);
}

class CollLinkBytes : public ::testing::TestWithParam<std::string> {};

TEST_P(CollLinkBytes, AnAllReduceMovesItsBytesOverTheLinks) {
  auto groups = cluster::make_local_groups(2, GetParam(), Deadline::after(std::chrono::seconds(60)));
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  std::vector<std::unique_ptr<Communicator>> comms(2);
  {
    std::vector<std::thread> th;
    for (int r = 0; r < 2; ++r)
      th.emplace_back([&, r] {
        auto c = Communicator::create(*(*groups)[size_t(r)], {});
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        comms[size_t(r)] = std::move(*c);
      });
    for (auto& t : th) t.join();
  }
  ASSERT_TRUE(comms[0] && comms[1]);
  for (size_t count : {size_t{256}, size_t{1} << 18}) {  // one-shot and two-shot/ring sizes
    SCOPED_TRACE(std::to_string(count) + " floats");
    const uint64_t bytes = count * sizeof(float);
    const uint64_t before01 = moved(*groups, 0, 1), before10 = moved(*groups, 1, 0);
    std::vector<std::vector<float>> bufs(2, std::vector<float>(count, 1.0f));
    std::vector<Status> st(2);
    std::vector<std::thread> th;
    for (int r = 0; r < 2; ++r)
      th.emplace_back([&, r] {
        st[size_t(r)] = all_reduce(*comms[size_t(r)], bufs[size_t(r)].data(), bufs[size_t(r)].data(), count, DType::kF32,
                                   ReduceOp::kSum);
      });
    for (auto& t : th) t.join();
    ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0].to_string() << " / " << st[1].to_string();
    EXPECT_EQ(bufs[0][count - 1], 2.0f);
    for (const auto& [d, before] : {std::pair{moved(*groups, 0, 1), before01}, std::pair{moved(*groups, 1, 0), before10}}) {
      EXPECT_GE(d - before, bytes / 2);
      EXPECT_LE(d - before, 2 * bytes + 64 * 1024);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, CollLinkBytes, ::testing::Values("tcp://127.0.0.1:0", "shm"));

}  // namespace
}  // namespace lattice::coll
