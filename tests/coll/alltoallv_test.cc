// all_to_allv over shm and tcp with ranks as threads: uneven counts per pair (zeros
// included), scattered offsets, many chunks; every rank checks every element it received
// against what its sender wrote. Bad arguments are clear errors, and a count that the two ends
// of a pair disagree on fails the call instead of hanging.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "coll_testlib.h"
#include "lattice/cluster/group.h"
#include "lattice/coll/coll.h"

namespace lattice::coll {
namespace {

struct Ranks {
  std::vector<std::unique_ptr<cluster::Group>> groups;
  std::vector<std::unique_ptr<Communicator>> comms;
};

Ranks make_ranks(int world, const std::string& uri) {
  Ranks r;
  auto g = cluster::make_local_groups(world, uri, Deadline::after(std::chrono::seconds(60)));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return r;
  r.groups = std::move(*g);
  r.comms.resize(size_t(world));
  std::vector<std::thread> th;
  CommOptions co;
  co.chunk_bytes = 4096;
  for (int q = 0; q < world; ++q)
    th.emplace_back([&, q] {
      auto c = Communicator::create(*r.groups[size_t(q)], co);
      EXPECT_TRUE(c.ok()) << c.status().to_string();
      if (c.ok()) r.comms[size_t(q)] = std::move(*c);
    });
  for (auto& t : th) t.join();
  return r;
}

// Elements rank `from` sends rank `to` in round `round`: uneven, sometimes none.
size_t count_of(int from, int to, int round) {
  const size_t c = size_t((from * 7 + to * 13 + round * 5) % 11);
  return c == 3 ? 0 : c * c * 97 + size_t(round);
}

uint32_t value_of(int from, int to, size_t i) { return uint32_t(from) << 28 | uint32_t(to) << 24 | uint32_t(i & 0xffffff); }

// One rank's call: its input blocks in reverse rank order with gaps (offsets need not be
// sorted), its output blocks in rank order with gaps; checks what arrived.
Status one_rank(Communicator& comm, int round, size_t chunk) {
  const int w = comm.world_size(), r = comm.rank();
  const size_t W = size_t(w);
  std::vector<size_t> sc(W), so(W), rc(W), ro(W);
  size_t in_n = 0, out_n = 0;
  for (int q = w - 1; q >= 0; --q) so[size_t(q)] = in_n + 3, sc[size_t(q)] = count_of(r, q, round), in_n += sc[size_t(q)] + 3;
  for (int q = 0; q < w; ++q) ro[size_t(q)] = out_n + 5, rc[size_t(q)] = count_of(q, r, round), out_n += rc[size_t(q)] + 5;
  std::vector<uint32_t> in(in_n, 0xdeadbeef), out(out_n, 0xfeedface);
  for (int q = 0; q < w; ++q)
    for (size_t i = 0; i < sc[size_t(q)]; ++i) in[so[size_t(q)] + i] = value_of(r, q, i);
  CollOptions o;
  o.chunk_bytes = chunk;
  o.timeout = std::chrono::seconds(30);
  LATTICE_RETURN_IF_ERROR(all_to_allv(comm, in.data(), sc, so, out.data(), rc, ro, DType::kI32, o));
  for (int q = 0; q < w; ++q) {
    for (size_t i = 0; i < rc[size_t(q)]; ++i)
      if (out[ro[size_t(q)] + i] != value_of(q, r, i))
        return Internal("rank " + std::to_string(r) + ": element " + std::to_string(i) + " from rank " +
                        std::to_string(q) + " is wrong");
    for (size_t i = ro[size_t(q)] - 5; i < ro[size_t(q)]; ++i)
      if (out[i] != 0xfeedface) return Internal("rank " + std::to_string(r) + ": a gap of out was written");
  }
  return Status::Ok();
}

void every_rank(Ranks& rk, const std::function<Status(Communicator&)>& fn, std::vector<Status>* st) {
  st->assign(rk.comms.size(), Status::Ok());
  std::vector<std::thread> th;
  for (size_t q = 0; q < rk.comms.size(); ++q) th.emplace_back([&, q] { (*st)[q] = fn(*rk.comms[q]); });
  for (auto& t : th) t.join();
}

void uneven_exchanges(const std::string& uri, std::initializer_list<int> worlds) {
  for (int world : worlds) {
    Ranks rk = make_ranks(world, uri);
    ASSERT_EQ(rk.comms.size(), size_t(world));
    for (int round = 0; round < 4; ++round)
      for (size_t chunk : {size_t{0}, size_t{256}}) {
        std::vector<Status> st;
        every_rank(rk, [&](Communicator& c) { return one_rank(c, round, chunk); }, &st);
        for (size_t q = 0; q < st.size(); ++q)
          ASSERT_TRUE(st[q].ok()) << uri << " world " << world << " round " << round << " rank " << q << ": "
                                  << st[q].to_string();
      }
  }
}

TEST(AllToAllV, UnevenCountsOverShm) { uneven_exchanges("shm", {1, 2, 3, 4}); }
TEST(AllToAllV, UnevenCountsOverTcp) { uneven_exchanges("tcp://127.0.0.1:0", {2, 3}); }

TEST(AllToAllV, BadArgumentsAreClearErrors) {
  Ranks rk = make_ranks(2, "shm");
  ASSERT_EQ(rk.comms.size(), 2u);
  Communicator& c = *rk.comms[0];
  std::vector<size_t> one{4}, two{4, 4}, zero{0, 0};
  float buf[8] = {};
  Status s = all_to_allv(c, buf, one, one, buf, two, zero, DType::kF32);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("1 send counts for 2 ranks"), std::string::npos) << s.to_string();
  std::vector<size_t> to_self{3, 0}, from_self{2, 0};
  s = all_to_allv(c, buf, to_self, zero, buf, from_self, zero, DType::kF32);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sends itself 3"), std::string::npos) << s.to_string();
  s = all_to_allv(c, nullptr, two, zero, buf, two, zero, DType::kF32);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
}

TEST(AllToAllVFault, CountsTheEndsDisagreeOnFailTheCall) {
  Ranks rk = make_ranks(2, "tcp://127.0.0.1:0");
  ASSERT_EQ(rk.comms.size(), 2u);
  std::vector<Status> st;
  every_rank(rk, [](Communicator& c) {
    // Rank 0 sends rank 1 five elements; rank 1 expects six.
    const bool r0 = c.rank() == 0;
    std::vector<size_t> sc{0, 0}, rc{0, 0}, off{0, 0};
    (r0 ? sc[1] : sc[0]) = r0 ? 5 : 0;
    (r0 ? rc[1] : rc[0]) = r0 ? 0 : 6;
    std::vector<float> in(8, 1.0f), out(8, 0.0f);
    CollOptions o;
    o.timeout = std::chrono::seconds(5);
    Status s = all_to_allv(c, in.data(), sc, off, out.data(), rc, off, DType::kF32, o);
    if (!s.ok()) std::fprintf(stderr, "rank %d: %s\n", c.rank(), s.to_string().c_str());
    return s;
  }, &st);
  EXPECT_FALSE(st[1].ok());
  EXPECT_NE(st[1].to_string().find("all_to_allv"), std::string::npos) << st[1].to_string();
}

}  // namespace
}  // namespace lattice::coll
