// The collectives over the verbs provider on both emulated devices (verbs-emu): every op and
// algorithm, ranks as threads, checked against the scalar reference. (coll_test.cc keeps its
// provider URIs per test, so the verbs runs live here.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "coll_testlib.h"
#include "lattice/cluster/group.h"
#include "lattice/coll/coll.h"

namespace lattice::coll {
namespace {

using test::Case;

void every_op(const std::string& uri, int world) {
  auto g = cluster::make_local_groups(world, uri, Deadline::after(std::chrono::seconds(60)));
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& grp : *g) {
    auto c = Communicator::create(*grp, CommOptions{4096, 4});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    comms.push_back(std::move(*c));
  }
  const CollOp ops[] = {CollOp::kAllReduce, CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kBroadcast,
                        CollOp::kReduce, CollOp::kAllToAll, CollOp::kBarrier};
  for (CollOp op : ops)
    for (Algorithm a : plan::algorithms_for(op)) {
      if (!plan::implements(op, a, world)) continue;
      for (size_t count : {size_t{0}, size_t{7}, size_t{4097}, size_t{70001}}) {
        Case c{op, world, op == CollOp::kBarrier ? 0 : count, world - 1};
        CollOptions o;
        o.algo = a;
        o.chunk_bytes = 4096;
        o.timeout = std::chrono::seconds(60);
        auto in = std::vector<std::vector<std::byte>>(size_t(world)), out = in;
        auto st = std::vector<Status>(size_t(world));
        std::vector<std::thread> th;
        for (int r = 0; r < world; ++r)
          th.emplace_back([&, r] {
            in[size_t(r)] = test::make_buffer(DType::kF32, test::in_elems(c));
            out[size_t(r)] = test::make_buffer(DType::kF32, test::out_elems(c));
            test::fill_case_input(c, DType::kF32, ReduceOp::kSum, r, in[size_t(r)].data());
            st[size_t(r)] = test::run_op(*comms[size_t(r)], c, DType::kF32, ReduceOp::kSum, in[size_t(r)].data(),
                                    out[size_t(r)].data(), o);
          });
        for (auto& t : th) t.join();
        for (int r = 0; r < world; ++r) {
          ASSERT_TRUE(st[size_t(r)].ok()) << st[size_t(r)].to_string() << " " << to_string(op) << " "
                                          << to_string(a) << " rank " << r;
          ASSERT_EQ(test::check_output(c, DType::kF32, ReduceOp::kSum, r, out[size_t(r)].data()), "")
              << to_string(op) << " " << to_string(a) << " count " << count;
        }
      }
    }
}

TEST(CollVerbsEmu, EveryOpOverAppleTb5Profile) { every_op("verbs-emu://apple-tb5", 3); }
TEST(CollVerbsEmu, EveryOpOverLinuxRcProfile) { every_op("verbs-emu://linux-rc", 3); }
// Sealed (as a cluster runs it by default): RC one-sided operations are refused, so every
// algorithm must get through on the two-sided path the caps point it to.
TEST(CollVerbsEmu, EveryOpOverSealedLinuxRcProfile) {
  ::setenv("LATTICE_SECRET", "5ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2e75ec2", 0);
  every_op("verbs-emu://linux-rc?secure=1", 3);
}

}  // namespace
}  // namespace lattice::coll
