// The fabric conformance suite: written once, run for every provider in provider_uris().
// Ranks are threads of this process; one thread drives both ends through a Pump.
// What a completion must say is fabric.h's contract; the oracle for data is an independent
// byte pattern, for ordering the ids and payloads we chose.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "fabric_testlib.h"

namespace lattice::fabric::testing {
namespace {

constexpr size_t kSizes[] = {0, 1, 4095, 4096, 4097, (size_t{1} << 20) + 3};

class FabricConformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto probe = make_provider(GetParam());
    if (!probe.ok() && probe.status().code() == ErrorCode::kUnavailable)
      GTEST_SKIP() << GetParam() << " unavailable: " << probe.status().to_string();
    ASSERT_TRUE(probe.ok()) << probe.status().to_string();
    probe = Status(ErrorCode::kNotFound, "released");  // free it before the pair exists
    auto pair = make_pair(GetParam(), options());
    ASSERT_TRUE(pair.ok()) << pair.status().to_string();
    pair_ = std::move(*pair);
    a_ = pair_.a.get();
    b_ = pair_.b.get();
    pump_ = std::make_unique<Pump>(std::vector<CompletionQueue*>{a_->send_cq.get(), a_->recv_cq.get(),
                                                                 b_->send_cq.get(), b_->recv_cq.get()});
  }
  virtual EndpointOptions options() const { return {}; }

  std::unique_ptr<MemoryRegion> alloc(Side* s, size_t n, uint32_t access = kAllAccess) {
    auto r = s->provider->allocate_memory(n, access);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(*r) : nullptr;
  }
  Completion next(CompletionQueue* cq) {
    auto c = pump_->next(cq, generous());
    EXPECT_TRUE(c.ok()) << c.status().to_string();
    return c.ok() ? *c : Completion{~0ull, Opcode::kSend, Timeout("no completion"), 0, 0};
  }
  // A message from a to b: after it arrives, b sees everything a wrote before sending it.
  void fence_a_to_b() {
    auto rb = alloc(b_, 8);
    auto ra = alloc(a_, 8);
    ASSERT_TRUE(b_->ep->post_recv({rb.get(), 0, 8}, 9001).ok());
    ASSERT_TRUE(a_->ep->post_send({ra.get(), 0, 1}, 9002).ok());
    Completion s = next(a_->send_cq.get());
    EXPECT_TRUE(s.status.ok()) << s.status.to_string();
    Completion r = next(b_->recv_cq.get());
    EXPECT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.id, 9001u);
  }
  // A post that fails at once, or succeeds and completes with an error: either is allowed.
  Status outcome(Status posted, CompletionQueue* cq, WorkId id) {
    if (!posted.ok()) return posted;
    Completion c = next(cq);
    EXPECT_EQ(c.id, id);
    return c.status;
  }

  Pair pair_;
  Side* a_ = nullptr;
  Side* b_ = nullptr;
  std::unique_ptr<Pump> pump_;
};

TEST_P(FabricConformance, CapsAreSane) {
  const ProviderCaps& caps = a_->provider->caps();
  EXPECT_FALSE(a_->provider->name().empty());
  EXPECT_GE(caps.max_msg, kSizes[5]);
  EXPECT_TRUE(a_->ep->status().ok());
  EXPECT_EQ(a_->ep->peer_rank(), 1);
  EXPECT_EQ(b_->ep->peer_rank(), 0);
}

TEST_P(FabricConformance, MapRemoteIsThereExactlyWhenCapsSaySo) {
  auto target = b_->provider->allocate_memory(4096, kAllAccess);
  ASSERT_TRUE(target.ok());
  auto m = a_->ep->map_remote({(*target)->key(), 64, 1024}, kRemoteRead | kRemoteWrite);
  if (!a_->provider->caps().map_remote) {
    EXPECT_EQ(m.status().code(), ErrorCode::kUnavailable) << m.status().to_string();
    return;
  }
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::vector<std::byte> bytes = pattern(1024, 3);
  std::memcpy((*m)->data(), bytes.data(), bytes.size());
  EXPECT_EQ(std::memcmp((*target)->data() + 64, bytes.data(), bytes.size()), 0);
}

TEST_P(FabricConformance, SendRecvAllSizesBothWays) {
  for (size_t size : kSizes) {
    for (int dir = 0; dir < 2; ++dir) {
      Side* from = dir == 0 ? a_ : b_;
      Side* to = dir == 0 ? b_ : a_;
      SCOPED_TRACE("size " + std::to_string(size) + (dir == 0 ? " a->b" : " b->a"));
      auto src = alloc(from, size + 7);
      auto dst = alloc(to, size + 16);
      fill_pattern(src->data(), size + 7, static_cast<uint32_t>(size + dir));
      std::memset(dst->data(), 0, size + 16);
      ASSERT_TRUE(to->ep->post_recv({dst.get(), 5, size}, 100 + size).ok());
      ASSERT_TRUE(from->ep->post_send({src.get(), 7, size}, 200 + size).ok());
      Completion s = next(from->send_cq.get());
      Completion r = next(to->recv_cq.get());
      ASSERT_TRUE(s.status.ok()) << s.status.to_string();
      ASSERT_TRUE(r.status.ok()) << r.status.to_string();
      EXPECT_EQ(s.id, 200 + size);
      EXPECT_EQ(s.op, Opcode::kSend);
      EXPECT_EQ(r.id, 100 + size);
      EXPECT_EQ(r.op, Opcode::kRecv);
      EXPECT_EQ(r.bytes, size);
      EXPECT_EQ(std::memcmp(dst->data() + 5, src->data() + 7, size), 0);
      // Guard bytes around the receive buffer are untouched.
      for (size_t i = 0; i < 5; ++i) EXPECT_EQ(dst->data()[i], std::byte{0});
      for (size_t i = 5 + size; i < size + 16; ++i) ASSERT_EQ(dst->data()[i], std::byte{0}) << i;
    }
  }
}

TEST_P(FabricConformance, SendFromRegisteredUserMemory) {
  // Caller-owned memory on both ends (the single-copy path of large messages reads it in place).
  for (size_t size : {size_t{100}, (size_t{1} << 20) + 3}) {
    SCOPED_TRACE("size " + std::to_string(size));
    std::vector<std::byte> src = pattern(size, 77), dst(size + 8, std::byte{0});
    auto rs = a_->provider->register_memory(src.data(), src.size(), kAllAccess);
    auto rd = b_->provider->register_memory(dst.data(), dst.size(), kAllAccess);
    ASSERT_TRUE(rs.ok() && rd.ok());
    ASSERT_TRUE(b_->ep->post_recv({rd->get(), 0, size}, 1).ok());
    ASSERT_TRUE(a_->ep->post_send({rs->get(), 0, size}, 2).ok());
    EXPECT_TRUE(next(a_->send_cq.get()).status.ok());
    Completion r = next(b_->recv_cq.get());
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.bytes, size);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), size), 0);
    EXPECT_EQ(dst[size], std::byte{0});
  }
}

TEST_P(FabricConformance, WriteAllSizes) {
  if (!a_->provider->caps().rma_write) GTEST_SKIP() << "no rma_write";
  for (size_t size : kSizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    auto src = alloc(a_, size + 1);
    auto dst = alloc(b_, size + 16);
    fill_pattern(src->data(), size + 1, static_cast<uint32_t>(size) + 11);
    std::memset(dst->data(), 0, size + 16);
    ASSERT_TRUE(a_->ep->post_write({src.get(), 1, size}, {dst->key(), 3, size}, 42).ok());
    Completion c = next(a_->send_cq.get());
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    EXPECT_EQ(c.id, 42u);
    EXPECT_EQ(c.op, Opcode::kWrite);
    fence_a_to_b();
    EXPECT_EQ(std::memcmp(dst->data() + 3, src->data() + 1, size), 0);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(dst->data()[i], std::byte{0});
    for (size_t i = 3 + size; i < size + 16; ++i) ASSERT_EQ(dst->data()[i], std::byte{0}) << i;
  }
}

TEST_P(FabricConformance, WriteWithImmAllSizes) {
  if (!a_->provider->caps().rma_write) GTEST_SKIP() << "no rma_write";
  auto note = alloc(b_, 16);
  for (size_t size : kSizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    auto src = alloc(a_, size);
    auto dst = alloc(b_, size + 8);
    fill_pattern(src->data(), size, static_cast<uint32_t>(size) + 5);
    std::memset(dst->data(), 0, size + 8);
    const uint32_t imm = 0xC0DE0000u + static_cast<uint32_t>(size & 0xffff);
    ASSERT_TRUE(b_->ep->post_recv({note.get(), 0, 16}, 7).ok());
    ASSERT_TRUE(a_->ep->post_write_with_imm({src.get(), 0, size}, {dst->key(), 8, size}, imm, 8).ok());
    Completion s = next(a_->send_cq.get());
    ASSERT_TRUE(s.status.ok()) << s.status.to_string();
    EXPECT_EQ(s.op, Opcode::kWriteImm);
    EXPECT_EQ(s.id, 8u);
    Completion r = next(b_->recv_cq.get());
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.op, Opcode::kRecvImm);
    EXPECT_EQ(r.id, 7u);
    EXPECT_EQ(r.imm, imm);
    // The data is in place when the immediate arrives.
    EXPECT_EQ(std::memcmp(dst->data() + 8, src->data(), size), 0);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(dst->data()[i], std::byte{0});
  }
}

TEST_P(FabricConformance, ReadAllSizes) {
  if (!a_->provider->caps().rma_read) GTEST_SKIP() << "no rma_read";
  for (size_t size : kSizes) {
    SCOPED_TRACE("size " + std::to_string(size));
    auto src = alloc(b_, size + 9);
    auto dst = alloc(a_, size + 4);
    fill_pattern(src->data(), size + 9, static_cast<uint32_t>(size) + 3);
    std::memset(dst->data(), 0, size + 4);
    ASSERT_TRUE(a_->ep->post_read({dst.get(), 2, size}, {src->key(), 9, size}, 5).ok());
    Completion c = next(a_->send_cq.get());
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    EXPECT_EQ(c.op, Opcode::kRead);
    EXPECT_EQ(c.id, 5u);
    EXPECT_EQ(std::memcmp(dst->data() + 2, src->data() + 9, size), 0);
    EXPECT_EQ(dst->data()[0], std::byte{0});
    EXPECT_EQ(dst->data()[1], std::byte{0});
    for (size_t i = 2 + size; i < size + 4; ++i) EXPECT_EQ(dst->data()[i], std::byte{0});
  }
}

TEST_P(FabricConformance, ReadAndWriteRegisteredUserMemory) {
  if (!a_->provider->caps().rma_read || !a_->provider->caps().rma_write) GTEST_SKIP() << "no rma";
  const size_t size = 70000;
  std::vector<std::byte> remote = pattern(size, 5);
  auto rr = b_->provider->register_memory(remote.data(), remote.size(), kAllAccess);
  ASSERT_TRUE(rr.ok()) << rr.status().to_string();
  auto local = alloc(a_, size);
  ASSERT_TRUE(a_->ep->post_read({local.get(), 0, size}, {(*rr)->key(), 0, size}, 1).ok());
  Completion c = next(a_->send_cq.get());
  ASSERT_TRUE(c.status.ok()) << c.status.to_string();
  EXPECT_EQ(std::memcmp(local->data(), remote.data(), size), 0);
  fill_pattern(local->data(), size, 6);
  ASSERT_TRUE(a_->ep->post_write({local.get(), 0, size}, {(*rr)->key(), 0, size}, 2).ok());
  c = next(a_->send_cq.get());
  ASSERT_TRUE(c.status.ok()) << c.status.to_string();
  fence_a_to_b();
  EXPECT_EQ(std::memcmp(local->data(), remote.data(), size), 0);
}

TEST_P(FabricConformance, AtomicsFetchAddAndCompareSwap) {
  if (!a_->provider->caps().atomics) GTEST_SKIP() << "no atomics";
  auto word = alloc(b_, 64);
  std::memset(word->data(), 0, 64);
  uint64_t init = 1000;
  std::memcpy(word->data() + 16, &init, 8);
  auto result = alloc(a_, 8);
  uint64_t expect = 1000;
  for (int i = 1; i <= 5; ++i) {
    ASSERT_TRUE(a_->ep->post_fetch_add({result.get(), 0, 8}, {word->key(), 16, 8}, i, 10 + i).ok());
    Completion c = next(a_->send_cq.get());
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    EXPECT_EQ(c.op, Opcode::kFetchAdd);
    uint64_t old;
    std::memcpy(&old, result->data(), 8);
    EXPECT_EQ(old, expect);
    expect += i;
  }
  // A failing compare-swap returns the current value and changes nothing.
  ASSERT_TRUE(a_->ep->post_compare_swap({result.get(), 0, 8}, {word->key(), 16, 8}, 1, 777, 20).ok());
  Completion c = next(a_->send_cq.get());
  ASSERT_TRUE(c.status.ok());
  EXPECT_EQ(c.op, Opcode::kCompareSwap);
  uint64_t old;
  std::memcpy(&old, result->data(), 8);
  EXPECT_EQ(old, expect);
  // A succeeding one swaps.
  ASSERT_TRUE(a_->ep->post_compare_swap({result.get(), 0, 8}, {word->key(), 16, 8}, expect, 777, 21).ok());
  ASSERT_TRUE(next(a_->send_cq.get()).status.ok());
  std::memcpy(&old, result->data(), 8);
  EXPECT_EQ(old, expect);
  fence_a_to_b();
  uint64_t now;
  std::memcpy(&now, word->data() + 16, 8);
  EXPECT_EQ(now, 777u);
  std::memcpy(&now, word->data() + 8, 8);
  EXPECT_EQ(now, 0u);  // the neighbour word is untouched
}

TEST_P(FabricConformance, ManyOutstandingSendsArriveInOrder) {
  constexpr int kN = 1000;
  constexpr size_t kSlot = 40960;
  auto dst = alloc(b_, kN * kSlot);
  auto src = alloc(a_, kN * kSlot);
  auto size_of = [](int i) -> size_t { return i % 50 == 49 ? 40000 : 1 + i % 64 * 97; };
  for (int i = 0; i < kN; ++i) {
    fill_pattern(src->data() + i * kSlot, size_of(i), 5000 + i);
    std::memset(dst->data() + i * kSlot, 0, 8);
  }
  for (int i = 0; i < kN; ++i) {
    Status s;
    while ((s = b_->ep->post_recv({dst.get(), i * kSlot, kSlot}, i)).code() == ErrorCode::kResourceExhausted)
      pump_->poll_all();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  for (int i = 0; i < kN; ++i) {
    Status s;
    Deadline d = generous();
    while ((s = a_->ep->post_send({src.get(), i * kSlot, size_of(i)}, 100000 + i)).code() ==
               ErrorCode::kResourceExhausted &&
           !d.expired())
      pump_->poll_all();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  for (int i = 0; i < kN; ++i) {
    Completion r = next(b_->recv_cq.get());
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    ASSERT_EQ(r.id, static_cast<WorkId>(i)) << "receives complete in posting order";
    ASSERT_EQ(r.bytes, size_of(i));
    ASSERT_EQ(std::memcmp(dst->data() + i * kSlot, src->data() + i * kSlot, size_of(i)), 0) << "message " << i;
  }
  for (int i = 0; i < kN; ++i) {
    Completion s = next(a_->send_cq.get());
    ASSERT_TRUE(s.status.ok()) << s.status.to_string();
    ASSERT_EQ(s.id, static_cast<WorkId>(100000 + i)) << "sends complete in posting order";
  }
}

TEST_P(FabricConformance, WriteThenSendIsOrdered) {
  if (!a_->provider->caps().rma_write) GTEST_SKIP() << "no rma_write";
  // Many writes to one word, each followed by a send; the receiver must see each write's value.
  auto word = alloc(b_, 8);
  auto src = alloc(a_, 8 * 64);
  auto msg = alloc(a_, 8);
  auto sink = alloc(b_, 8 * 64);
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(b_->ep->post_recv({sink.get(), size_t(i) * 8, 8}, i).ok());
  for (uint64_t i = 0; i < 64; ++i) {
    std::memcpy(src->data() + i * 8, &i, 8);
    ASSERT_TRUE(a_->ep->post_write({src.get(), i * 8, 8}, {word->key(), 0, 8}, 2 * i).ok());
    ASSERT_TRUE(a_->ep->post_send({src.get(), i * 8, 8}, 2 * i + 1).ok());
    Completion r = next(b_->recv_cq.get());
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    uint64_t v;
    std::memcpy(&v, word->data(), 8);
    EXPECT_GE(v, i) << "a write posted before a send is visible when the send arrives";
  }
  // fabric.h does not order completions of different kinds (a write may complete after a
  // later send), so only check that each operation completes exactly once.
  std::vector<int> seen(128, 0);
  for (int i = 0; i < 128; ++i) {
    Completion c = next(a_->send_cq.get());
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    ASSERT_LT(c.id, 128u);
    ++seen[c.id];
  }
  for (int i = 0; i < 128; ++i) EXPECT_EQ(seen[i], 1) << "operation " << i;
}

TEST_P(FabricConformance, TruncationReportsAndDoesNotOverflow) {
  for (size_t size : {size_t{1000}, (size_t{1} << 20) + 3}) {
    SCOPED_TRACE("size " + std::to_string(size));
    auto src = alloc(a_, size);
    fill_pattern(src->data(), size, 9);
    auto dst = alloc(b_, 100 + 64);
    std::memset(dst->data(), 0, 164);
    ASSERT_TRUE(b_->ep->post_recv({dst.get(), 0, 100}, 1).ok());
    ASSERT_TRUE(a_->ep->post_send({src.get(), 0, size}, 2).ok());
    Completion r = next(b_->recv_cq.get());
    EXPECT_EQ(r.status.code(), ErrorCode::kTruncated) << r.status.to_string();
    EXPECT_LE(r.bytes, 100u);
    for (size_t i = 100; i < 164; ++i) ASSERT_EQ(dst->data()[i], std::byte{0}) << "overflow at " << i;
    Completion s = next(a_->send_cq.get());
    EXPECT_TRUE(s.status.ok() || s.status.code() == ErrorCode::kTruncated) << s.status.to_string();
    // The endpoint goes on: the next message is delivered whole.
    ASSERT_TRUE(b_->ep->post_recv({dst.get(), 0, 100}, 3).ok());
    ASSERT_TRUE(a_->ep->post_send({src.get(), 0, 50}, 4).ok());
    r = next(b_->recv_cq.get());
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_EQ(r.bytes, 50u);
    EXPECT_EQ(std::memcmp(dst->data(), src->data(), 50), 0);
    EXPECT_TRUE(next(a_->send_cq.get()).status.ok());
  }
}

TEST_P(FabricConformance, BadKeyIsDenied) {
  if (!a_->provider->caps().rma_write) GTEST_SKIP() << "no rma_write";
  auto target = alloc(b_, 64);
  std::memset(target->data(), 0, 64);
  auto src = alloc(a_, 8);
  fill_pattern(src->data(), 8, 1);
  Status st = outcome(a_->ep->post_write({src.get(), 0, 8}, {target->key() ^ 0x5a5a, 0, 8}, 1), a_->send_cq.get(), 1);
  EXPECT_EQ(st.code(), ErrorCode::kAccessDenied) << st.to_string();
  for (int i = 0; i < 64; ++i) ASSERT_EQ(target->data()[i], std::byte{0});
  EXPECT_FALSE(a_->ep->status().ok()) << "errors are sticky";
}

TEST_P(FabricConformance, OutOfBoundsIsDenied) {
  if (!a_->provider->caps().rma_write) GTEST_SKIP() << "no rma_write";
  auto target = alloc(b_, 64);
  std::memset(target->data(), 0, 64);
  auto src = alloc(a_, 16);
  Status st = outcome(a_->ep->post_write({src.get(), 0, 16}, {target->key(), 56, 16}, 1), a_->send_cq.get(), 1);
  EXPECT_EQ(st.code(), ErrorCode::kAccessDenied) << st.to_string();
  for (int i = 0; i < 64; ++i) ASSERT_EQ(target->data()[i], std::byte{0});
}

TEST_P(FabricConformance, OffsetOverflowIsDenied) {
  if (!a_->provider->caps().rma_read) GTEST_SKIP() << "no rma_read";
  auto target = alloc(b_, 64);
  auto dst = alloc(a_, 16);
  Status st = outcome(a_->ep->post_read({dst.get(), 0, 16}, {target->key(), ~uint64_t{0} - 7, 16}, 1),
                      a_->send_cq.get(), 1);
  EXPECT_EQ(st.code(), ErrorCode::kAccessDenied) << st.to_string();
}

TEST_P(FabricConformance, MissingWriteRightIsDenied) {
  if (!a_->provider->caps().rma_write) GTEST_SKIP() << "no rma_write";
  auto target = alloc(b_, 64, kLocalRead | kLocalWrite | kRemoteRead);
  std::memset(target->data(), 0, 64);
  auto src = alloc(a_, 8);
  fill_pattern(src->data(), 8, 2);
  Status st = outcome(a_->ep->post_write({src.get(), 0, 8}, {target->key(), 0, 8}, 1), a_->send_cq.get(), 1);
  EXPECT_EQ(st.code(), ErrorCode::kAccessDenied) << st.to_string();
  for (int i = 0; i < 64; ++i) ASSERT_EQ(target->data()[i], std::byte{0});
}

TEST_P(FabricConformance, MissingReadRightIsDenied) {
  if (!a_->provider->caps().rma_read) GTEST_SKIP() << "no rma_read";
  auto target = alloc(b_, 64, kLocalRead | kLocalWrite | kRemoteWrite);
  fill_pattern(target->data(), 64, 3);
  auto dst = alloc(a_, 8);
  std::memset(dst->data(), 0, 8);
  Status st = outcome(a_->ep->post_read({dst.get(), 0, 8}, {target->key(), 0, 8}, 1), a_->send_cq.get(), 1);
  EXPECT_EQ(st.code(), ErrorCode::kAccessDenied) << st.to_string();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(dst->data()[i], std::byte{0}) << "nothing was read";
}

TEST_P(FabricConformance, MissingAtomicRightIsDenied) {
  if (!a_->provider->caps().atomics) GTEST_SKIP() << "no atomics";
  auto target = alloc(b_, 64, kLocalRead | kLocalWrite | kRemoteRead | kRemoteWrite);
  std::memset(target->data(), 0, 64);
  auto res = alloc(a_, 8);
  Status st = outcome(a_->ep->post_fetch_add({res.get(), 0, 8}, {target->key(), 0, 8}, 5, 1), a_->send_cq.get(), 1);
  EXPECT_EQ(st.code(), ErrorCode::kAccessDenied) << st.to_string();
  for (int i = 0; i < 64; ++i) ASSERT_EQ(target->data()[i], std::byte{0});
}

TEST_P(FabricConformance, ErrorsAreStickyAndFlushPendingWork) {
  if (!a_->provider->caps().rma_write) GTEST_SKIP() << "no rma_write";
  auto buf = alloc(a_, 64);
  // Receives posted before the failure complete with the sticky error.
  for (WorkId id = 1; id <= 3; ++id) ASSERT_TRUE(a_->ep->post_recv({buf.get(), 0, 64}, id).ok());
  Status st = outcome(a_->ep->post_write({buf.get(), 0, 8}, {0x1234, 0, 8}, 50), a_->send_cq.get(), 50);
  ASSERT_EQ(st.code(), ErrorCode::kAccessDenied) << st.to_string();
  Status sticky = a_->ep->status();
  ASSERT_FALSE(sticky.ok());
  for (WorkId id = 1; id <= 3; ++id) {
    Completion c = next(a_->recv_cq.get());
    EXPECT_EQ(c.id, id);
    EXPECT_FALSE(c.status.ok());
  }
  // Every later post returns the same error, with no completion.
  EXPECT_EQ(a_->ep->post_send({buf.get(), 0, 8}, 60).code(), sticky.code());
  EXPECT_EQ(a_->ep->post_recv({buf.get(), 0, 8}, 61).code(), sticky.code());
  EXPECT_EQ(a_->ep->post_write({buf.get(), 0, 8}, {0x1234, 0, 8}, 62).code(), sticky.code());
  EXPECT_EQ(a_->ep->post_read({buf.get(), 0, 8}, {0x1234, 0, 8}, 63).code(), sticky.code());
  EXPECT_EQ(a_->ep->status().code(), sticky.code());
  // And the process is healthy: a fresh pair works.
  auto fresh = make_pair(GetParam());
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
}

TEST_P(FabricConformance, IdleWaitTimesOut) {
  Completion out[4];
  auto start = Clock::now();
  auto r = a_->recv_cq->wait(out, Deadline::after(std::chrono::milliseconds(60)));
  auto took = Clock::now() - start;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTimeout);
  EXPECT_GE(took, std::chrono::milliseconds(55)) << "wait returned before its deadline";
  // An expired deadline polls once.
  r = a_->recv_cq->wait(out, Deadline::now());
  EXPECT_EQ(r.status().code(), ErrorCode::kTimeout);
}

TEST_P(FabricConformance, SleepingWaitWakesOnArrival) {
  // b's waiter sleeps (well past any spin phase) and must wake for a's message.
  auto dst = alloc(b_, 64);
  auto src = alloc(a_, 64);
  fill_pattern(src->data(), 64, 4);
  ASSERT_TRUE(b_->ep->post_recv({dst.get(), 0, 64}, 1).ok());
  Result<size_t> got = Timeout("not run");
  Completion out[1];
  std::thread waiter([&] { got = b_->recv_cq->wait(out, generous()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  ASSERT_TRUE(a_->ep->post_send({src.get(), 0, 64}, 2).ok());
  // Keep a's side progressing while b waits (some providers progress on the polling thread).
  Completion s[1];
  auto sent = a_->send_cq->wait(s, generous());
  waiter.join();
  ASSERT_TRUE(sent.ok()) << sent.status().to_string();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, 1u);
  EXPECT_TRUE(out[0].status.ok());
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), 64), 0);
}

TEST_P(FabricConformance, PeerClosingItsEndpointFailsPendingWork) {
  auto buf = alloc(a_, 64);
  ASSERT_TRUE(a_->ep->post_recv({buf.get(), 0, 64}, 1).ok());
  b_->ep.reset();
  Completion out[1];
  auto r = a_->recv_cq->wait(out, generous());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(out[0].id, 1u);
  EXPECT_EQ(out[0].status.code(), ErrorCode::kPeerLost) << out[0].status.to_string();
  EXPECT_EQ(a_->ep->post_send({buf.get(), 0, 8}, 2).code(), ErrorCode::kPeerLost);
}

TEST_P(FabricConformance, GarbageAddressIsRejected) {
  auto side = make_side(GetParam());
  ASSERT_TRUE(side.ok());
  std::vector<std::byte> junk = pattern(64, 1234);
  Status s = (*side)->ep->connect(junk, Deadline::after(std::chrono::seconds(2)));
  EXPECT_FALSE(s.ok());
  std::vector<std::byte> empty;
  auto side2 = make_side(GetParam());
  ASSERT_TRUE(side2.ok());
  EXPECT_FALSE((*side2)->ep->connect(empty, Deadline::after(std::chrono::seconds(2))).ok());
}

TEST_P(FabricConformance, RanksAsThreadsPingPong) {
  // Each rank on its own thread, blocking in wait(): sizes cycle through the eager and the
  // large-message paths; every reply must carry the request's bytes back.
  constexpr int kRounds = 300;
  constexpr size_t kMax = 70000;
  auto size_of = [](int i) -> size_t { return i % 3 == 2 ? 40000 + i : 1 + (i * 131) % 5000; };
  auto run = [&](Side* s, bool initiator, std::string* error) {
    auto sbuf = s->provider->allocate_memory(kMax, kAllAccess);
    auto rbuf = s->provider->allocate_memory(kMax, kAllAccess);
    if (!sbuf.ok() || !rbuf.ok()) {
      *error = "allocate";
      return;
    }
    auto wait1 = [&](CompletionQueue* cq, Completion* c) {
      auto r = cq->wait({c, 1}, generous());
      if (!r.ok()) return r.status();
      return c->status;
    };
    Completion c;
    for (int i = 0; i < kRounds; ++i) {
      size_t n = size_of(i);
      Status st = s->ep->post_recv({rbuf->get(), 0, kMax}, i);
      if (st.ok() && initiator) {
        fill_pattern((*sbuf)->data(), n, i);
        st = s->ep->post_send({sbuf->get(), 0, n}, i);
        if (st.ok()) st = wait1(s->send_cq.get(), &c);
      }
      if (st.ok()) st = wait1(s->recv_cq.get(), &c);
      if (st.ok() && c.bytes != n) st = Internal("got " + std::to_string(c.bytes) + " bytes, expected " + std::to_string(n));
      if (st.ok() && initiator) {
        if (std::memcmp((*rbuf)->data(), (*sbuf)->data(), n) != 0) st = Internal("echo differs");
      } else if (st.ok()) {
        std::memcpy((*sbuf)->data(), (*rbuf)->data(), n);
        st = s->ep->post_send({sbuf->get(), 0, n}, i);
        if (st.ok()) st = wait1(s->send_cq.get(), &c);
      }
      if (!st.ok()) {
        *error = "round " + std::to_string(i) + ": " + st.to_string();
        return;
      }
    }
  };
  std::string err_a, err_b;
  std::thread tb([&] { run(b_, false, &err_b); });
  run(a_, true, &err_a);
  tb.join();
  EXPECT_EQ(err_a, "");
  EXPECT_EQ(err_b, "");
}

TEST_P(FabricConformance, StreamingWithSleepingWaiters) {
  // The sender queues far more than any ring holds; the receiver drains in small batches and
  // both block in wait(), so progress depends on each side waking the other.
  constexpr int kN = 600;
  constexpr size_t kSize = 3000;
  auto src = alloc(a_, kN * kSize);
  auto dst = alloc(b_, kN * kSize);
  for (int i = 0; i < kN; ++i) fill_pattern(src->data() + i * kSize, kSize, 700 + i);
  std::string err_b;
  std::thread receiver([&] {
    Completion c[4];
    for (int i = 0; i < kN; i += 4) {
      for (int j = i; j < i + 4; ++j) {
        Status st = b_->ep->post_recv({dst.get(), j * kSize, kSize}, j);
        if (!st.ok()) {
          err_b = st.to_string();
          return;
        }
      }
      for (int got = 0; got < 4;) {
        auto r = b_->recv_cq->wait({c, 4}, generous());
        if (!r.ok()) {
          err_b = r.status().to_string();
          return;
        }
        for (size_t k = 0; k < *r; ++k) {
          if (!c[k].status.ok() || c[k].id != static_cast<WorkId>(i + got)) {
            err_b = "bad completion " + std::to_string(c[k].id) + " " + c[k].status.to_string();
            return;
          }
          ++got;
        }
      }
    }
  });
  int posted = 0, done = 0;
  Completion c[16];
  while (done < kN) {
    while (posted < kN) {
      Status st = a_->ep->post_send({src.get(), posted * kSize, kSize}, posted);
      if (st.code() == ErrorCode::kResourceExhausted) break;
      ASSERT_TRUE(st.ok()) << st.to_string();
      ++posted;
    }
    auto r = a_->send_cq->wait(c, generous());
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (size_t k = 0; k < *r; ++k) ASSERT_TRUE(c[k].status.ok()) << c[k].status.to_string();
    done += static_cast<int>(*r);
  }
  receiver.join();
  ASSERT_EQ(err_b, "");
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), kN * kSize), 0);
}

TEST_P(FabricConformance, DestroyingAnEndpointCancelsItsWork) {
  // fabric.h: outstanding work of a destroyed endpoint completes with kCancelled on its CQs.
  auto buf = alloc(a_, 64);
  for (WorkId id = 1; id <= 3; ++id) ASSERT_TRUE(a_->ep->post_recv({buf.get(), 0, 64}, id).ok());
  a_->ep.reset();
  Completion out[8];
  size_t got = 0;
  Deadline d = generous();
  while (got < 3 && !d.expired()) got += a_->recv_cq->poll({out + got, 8 - got});
  ASSERT_EQ(got, 3u);
  for (size_t i = 0; i < got; ++i) {
    EXPECT_EQ(out[i].id, i + 1);
    EXPECT_EQ(out[i].status.code(), ErrorCode::kCancelled) << out[i].status.to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricConformance, ::testing::ValuesIn(provider_uris()), uri_test_name);

}  // namespace
}  // namespace lattice::fabric::testing
