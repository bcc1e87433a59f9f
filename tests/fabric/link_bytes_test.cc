// Endpoint::link_bytes() on every provider: a send counts its bytes as sent on the sender and
// received on the receiver; a write as sent and a read as received on the side that posts it;
// an atomic 8 bytes each way; a write-with-imm's notice nothing more; failed operations
// nothing. shm: loads and stores through a mapping count once the caller says so.
#include <gtest/gtest.h>

#include <cstring>

#include "fabric_testlib.h"

namespace lattice::fabric::testing {
namespace {

class FabricLinkBytes : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto probe = make_provider(GetParam());
    if (!probe.ok() && probe.status().code() == ErrorCode::kUnavailable)
      GTEST_SKIP() << GetParam() << " unavailable: " << probe.status().to_string();
    ASSERT_TRUE(probe.ok()) << probe.status().to_string();
    probe = Status(ErrorCode::kNotFound, "released");
    auto pair = make_pair(GetParam());
    ASSERT_TRUE(pair.ok()) << pair.status().to_string();
    pair_ = std::move(*pair);
    a_ = pair_.a.get();
    b_ = pair_.b.get();
    pump_ = std::make_unique<Pump>(std::vector<CompletionQueue*>{a_->send_cq.get(), a_->recv_cq.get(),
                                                                 b_->send_cq.get(), b_->recv_cq.get()});
  }
  std::unique_ptr<MemoryRegion> alloc(Side* s, size_t n) {
    auto r = s->provider->allocate_memory(n, kAllAccess);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::move(*r) : nullptr;
  }
  void ok(CompletionQueue* cq) {
    auto c = pump_->next(cq, generous());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_TRUE(c->status.ok()) << c->status.to_string();
  }
  // (a sent, a received, b sent, b received) since `from`.
  void expect_moved(const LinkBytes& a0, const LinkBytes& b0, uint64_t as, uint64_t ar, uint64_t bs, uint64_t br) {
    const LinkBytes a = a_->ep->link_bytes(), b = b_->ep->link_bytes();
    EXPECT_EQ(a.sent - a0.sent, as);
    EXPECT_EQ(a.received - a0.received, ar);
    EXPECT_EQ(b.sent - b0.sent, bs);
    EXPECT_EQ(b.received - b0.received, br);
  }
  Pair pair_;
  Side *a_ = nullptr, *b_ = nullptr;
  std::unique_ptr<Pump> pump_;
};

TEST_P(FabricLinkBytes, EachOperationCountsItsBytes) {
  const LinkBytes a0 = a_->ep->link_bytes(), b0 = b_->ep->link_bytes();
  EXPECT_EQ(a0.sent + a0.received + b0.sent + b0.received, 0u);  // nothing before any post
  constexpr size_t kBig = (size_t{1} << 20) + 5;                  // past every eager limit
  auto src = alloc(a_, kBig);
  auto dst = alloc(b_, kBig);
  ASSERT_TRUE(src && dst);
  std::memset(src->data(), 1, kBig);
  // Sends a -> b: 0, 100 and kBig bytes.
  uint64_t sent = 0;
  for (size_t n : {size_t{0}, size_t{100}, kBig}) {
    ASSERT_TRUE(b_->ep->post_recv({dst.get(), 0, kBig}, 1).ok());
    ASSERT_TRUE(a_->ep->post_send({src.get(), 0, n}, 2).ok());
    ok(a_->send_cq.get());
    ok(b_->recv_cq.get());
    sent += n;
    expect_moved(a0, b0, sent, 0, 0, sent);
  }
  // One-sided, posted by a (where the provider has them): a write, a read, a fetch-add.
  const ProviderCaps& caps = a_->provider->caps();
  uint64_t as = sent, ar = 0, bs = 0;
  if (caps.rma_write) {
    ASSERT_TRUE(a_->ep->post_write({src.get(), 0, 3000}, {dst->key(), 64, 3000}, 3).ok());
    ok(a_->send_cq.get());
    as += 3000;
    expect_moved(a0, b0, as, ar, bs, sent);
  }
  if (caps.rma_read) {
    ASSERT_TRUE(a_->ep->post_read({src.get(), 0, 2000}, {dst->key(), 0, 2000}, 4).ok());
    ok(a_->send_cq.get());
    ar += 2000;
    expect_moved(a0, b0, as, ar, bs, sent);
  }
  if (caps.atomics) {
    ASSERT_TRUE(a_->ep->post_fetch_add({src.get(), 0, 8}, {dst->key(), 8, 8}, 1, 5).ok());
    ok(a_->send_cq.get());
    as += 8, ar += 8;
    expect_moved(a0, b0, as, ar, bs, sent);
  }
  // A write with imm b -> a: its 500 bytes once, on b; a's notice adds nothing.
  if (caps.rma_write) {
    auto back = alloc(a_, 512);
    ASSERT_TRUE(a_->ep->post_recv({back.get(), 0, 8}, 6).ok());
    ASSERT_TRUE(b_->ep->post_write_with_imm({dst.get(), 0, 500}, {back->key(), 0, 500}, 7, 8).ok());
    ok(b_->send_cq.get());
    ok(a_->recv_cq.get());
    bs += 500;
    expect_moved(a0, b0, as, ar, bs, sent);
  }
  if (!caps.rma_write) return;
  // A failed operation (a bad key) moves nothing.
  const LinkBytes a1 = a_->ep->link_bytes(), b1 = b_->ep->link_bytes();
  Status posted = a_->ep->post_write({src.get(), 0, 64}, {dst->key() ^ 0x5a5a5a5a, 0, 64}, 9);
  if (posted.ok()) (void)pump_->next(a_->send_cq.get(), generous());
  expect_moved(a1, b1, 0, 0, 0, 0);
}

TEST_P(FabricLinkBytes, LoadsAndStoresThroughAMappingCountWhenTold) {
  if (!a_->provider->caps().map_remote) GTEST_SKIP() << "no map_remote";
  auto peer = alloc(b_, 4096);
  auto m = a_->ep->map_remote({peer->key(), 0, 4096}, kRemoteRead | kRemoteWrite);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const LinkBytes a0 = a_->ep->link_bytes(), b0 = b_->ep->link_bytes();
  std::memset((*m)->data(), 3, 1000);
  (*m)->count_stored(1000);
  (*m)->count_loaded(24);
  expect_moved(a0, b0, 1000, 24, 0, 0);
}

INSTANTIATE_TEST_SUITE_P(Providers, FabricLinkBytes, ::testing::ValuesIn(provider_uris()), uri_test_name);

}  // namespace
}  // namespace lattice::fabric::testing
