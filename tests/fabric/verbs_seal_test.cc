// Sealed verbs sessions over the emulated device (seal.h): each attack the emulator can play
// (tamper with a frame and fix its checksum, replay one, reorder two, drop one) ends either in
// every message delivered exactly once and intact, or in kAuthFailed; a peer with another
// secret, or none, is refused; RC one-sided operations are refused when sealed, as documented.
// The plain/sealed conformance runs are in conformance_test.cc (provider_uris()).
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <thread>

#include "fabric_testlib.h"
#include "lattice/fabric/verbs/endpoint.h"

namespace lattice::fabric::testing {
namespace {

namespace v = lattice::fabric::verbs;

constexpr int kMessages = 200;  // frame 961 (8 frames a message) is a's 121st message: data, sealed

// Everything b received: each id once, every payload intact.
void expect_all_once_and_intact(const FaultRun& r) {
  ASSERT_EQ(r.recv_status.size(), size_t{kMessages});
  for (auto& s : r.recv_status) EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(r.data_ok) << "wrong data delivered";
  // Nothing more arrives (a frame delivered twice would complete a receive twice or not at all).
  Completion extra[4];
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(r.pair.b->recv_cq->poll(extra), 0u);
  EXPECT_TRUE(v::endpoint_stats(r.pair.a->ep.get()).sealed);
  EXPECT_TRUE(v::endpoint_stats(r.pair.b->ep.get()).sealed);
}

// Runs `uri` (a tamper= fault) until the tampered frame was a fresh chunk rather than a
// go-back-N resend of one already delivered (dropped unread as a duplicate, which is right but
// tests nothing; it happens when the loaded machine delays an ack past the RTO), then checks
// that the receiver failed with kAuthFailed and delivered nothing wrong before.
void expect_auth_failed(const std::string& uri, size_t len) {
  FaultRun r;
  for (int attempt = 0; attempt < 4; ++attempt) {
    r = run_faulty(uri, kMessages, len);
    EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).tampered, 1u);
    EXPECT_TRUE(r.data_ok) << "tampered data was delivered";
    if (!r.pair.b->ep->status().ok() || v::endpoint_stats(r.pair.b->ep.get()).duplicates == 0) break;
  }
  bool failed = false;
  for (auto& s : r.recv_status)
    if (!s.ok()) {
      EXPECT_EQ(s.code(), ErrorCode::kAuthFailed) << s.to_string();
      failed = true;
    }
  EXPECT_TRUE(failed) << "every message completed: the tampered frame went unnoticed";
  EXPECT_LT(r.recv_status.size(), size_t{kMessages} + 1);
  EXPECT_EQ(r.pair.b->ep->status().code(), ErrorCode::kAuthFailed) << r.pair.b->ep->status().to_string();
}

TEST(VerbsSealFault, TamperedHeaderFailsTheReceiverWithAuthFailed) {
  expect_auth_failed("verbs-emu://apple-tb5?secure=1&tamper=961", 1000);
}

TEST(VerbsSealFault, TamperedPayloadFailsTheReceiverWithAuthFailed) {
  // 30 KB messages: frame 8k+2 is inside the ciphertext.
  expect_auth_failed("verbs-emu://linux-rc?secure=1&tamper=962", 30000);
}

TEST(VerbsSealFault, PlainSessionsDoNotNoticeATamperedFrame) {
  // The oracle for the two tests above: crc32c alone cannot tell a fixed-up frame from a good one.
  FaultRun r;
  for (int attempt = 0; attempt < 4; ++attempt) {
    r = run_faulty("verbs-emu://linux-rc?tamper=962", kMessages, 30000);
    if (!r.data_ok || v::endpoint_stats(r.pair.b->ep.get()).duplicates == 0) break;  // see expect_auth_failed
  }
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).tampered, 1u);
  ASSERT_EQ(r.recv_status.size(), size_t{kMessages});
  EXPECT_FALSE(r.data_ok) << "the plain path should have delivered the flipped byte";
}

TEST(VerbsSealFault, ReplayedFrameIsRejectedAndEveryMessageArrivesOnce) {
  auto r = run_faulty("verbs-emu://apple-tb5?secure=1&replay=961", kMessages);
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).replayed, 1u);
  expect_all_once_and_intact(r);
  EXPECT_GE(v::endpoint_stats(r.pair.b->ep.get()).stale, 1u);
}

TEST(VerbsSealFault, DuplicatedFrameIsRejectedAsAReplay) {
  auto r = run_faulty("verbs-emu://apple-tb5?secure=1&dup=961", kMessages);
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).duplicated, 1u);
  expect_all_once_and_intact(r);
  EXPECT_GE(v::endpoint_stats(r.pair.b->ep.get()).stale, 1u);
}

TEST(VerbsSealFault, ReorderedFrameIsRejectedThenResentByGoBackN) {
  auto r = run_faulty("verbs-emu://apple-tb5?secure=1&reorder=961", kMessages);
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).reordered, 1u);
  expect_all_once_and_intact(r);
  EXPECT_GE(v::endpoint_stats(r.pair.b->ep.get()).stale, 1u);
  EXPECT_GT(v::endpoint_stats(r.pair.a->ep.get()).retransmits, 0u);
}

TEST(VerbsSealFault, DroppedFrameIsResentByGoBackN) {
  auto r = run_faulty("verbs-emu://apple-tb5?secure=1&drop=961", kMessages);
  EXPECT_EQ(v::emulator_stats(r.pair.a->provider.get()).dropped, 1u);
  expect_all_once_and_intact(r);
  EXPECT_GT(v::endpoint_stats(r.pair.a->ep.get()).retransmits, 0u);
}

TEST(VerbsSealFault, LineNoiseIsResentNotTreatedAsAnAttack) {
  // corrupt= flips a byte without fixing the checksum: dropped and resent, as on plain links.
  auto r = run_faulty("verbs-emu://apple-tb5?secure=1&corrupt=961", kMessages);
  expect_all_once_and_intact(r);
  EXPECT_GT(v::endpoint_stats(r.pair.b->ep.get()).bad_crc, 0u);
}

ProviderOptions with_secret(uint8_t fill) {
  ProviderOptions po;
  po.secret.emplace();
  po.secret->fill(fill);
  return po;
}

// Connects a side with `pa` to one with `pb`; returns both connect statuses.
std::pair<Status, Status> connect_with(const std::string& uri, const ProviderOptions& pa, const ProviderOptions& pb) {
  EndpointOptions eo;
  eo.peer_rank = 1;
  auto a = make_side(uri, eo, pa);
  eo.peer_rank = 0;
  auto b = make_side(uri, eo, pb);
  EXPECT_TRUE(a.ok() && b.ok());
  if (!a.ok() || !b.ok()) return {Internal("no side"), Internal("no side")};
  auto addr_a = (*a)->ep->local_address();
  auto addr_b = (*b)->ep->local_address();
  Deadline d = Deadline::after(std::chrono::seconds(10));
  Status sa;
  std::thread t([&] { sa = (*a)->ep->connect(addr_b, d); });
  Status sb = (*b)->ep->connect(addr_a, d);
  t.join();
  return {sa, sb};
}

TEST(VerbsSeal, WrongSecretIsRefusedOnBothSides) {
  for (const char* uri : {"verbs-emu://apple-tb5", "verbs-emu://linux-rc"}) {
    auto t0 = std::chrono::steady_clock::now();
    auto [sa, sb] = connect_with(uri, with_secret(1), with_secret(2));
    EXPECT_EQ(sa.code(), ErrorCode::kAuthFailed) << uri << ": " << sa.to_string();
    EXPECT_EQ(sb.code(), ErrorCode::kAuthFailed) << uri << ": " << sb.to_string();
    EXPECT_NE(sa.message().find("cluster secret"), std::string::npos) << sa.to_string();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "refused at once, not by timeout";
  }
  auto [sa, sb] = connect_with("verbs-emu://apple-tb5", with_secret(7), with_secret(7));
  EXPECT_TRUE(sa.ok() && sb.ok()) << sa.to_string() << " / " << sb.to_string();
}

TEST(VerbsSeal, PlainAndSealedPeersRefuseEachOther) {
  auto [sa, sb] = connect_with("verbs-emu://apple-tb5", with_secret(1), ProviderOptions{});
  EXPECT_EQ(sa.code(), ErrorCode::kInvalidArgument) << sa.to_string();
  EXPECT_EQ(sb.code(), ErrorCode::kInvalidArgument) << sb.to_string();
  EXPECT_NE(sa.message().find("plaintext"), std::string::npos) << sa.to_string();
}

TEST(VerbsSeal, OneSidedOperationsAreRefusedOnASealedLinkAndSaySo) {
  auto plain = make_provider("verbs-emu://linux-rc");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_TRUE((*plain)->caps().rma_write && (*plain)->caps().rma_read && (*plain)->caps().atomics);
  plain = Status(ErrorCode::kNotFound, "released");
  auto p = make_pair("verbs-emu://linux-rc?secure=1");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  Side* a = p->a.get();
  const ProviderCaps& caps = a->provider->caps();
  EXPECT_FALSE(caps.rma_write || caps.rma_read || caps.atomics) << "sealed: collectives must take two-sided paths";
  auto local = a->provider->allocate_memory(4096, kAllAccess);
  ASSERT_TRUE(local.ok());
  RemoteSlice remote{0x1234, 0, 4096};
  for (Status st : {a->ep->post_write({local->get(), 0, 4096}, remote, 1), a->ep->post_read({local->get(), 0, 4096}, remote, 2),
                    a->ep->post_write_with_imm({local->get(), 0, 4096}, remote, 7, 3),
                    a->ep->post_fetch_add({local->get(), 0, 8}, {0x1234, 0, 8}, 1, 4)}) {
    EXPECT_EQ(st.code(), ErrorCode::kUnavailable) << st.to_string();
    EXPECT_NE(st.message().find("refused on a sealed link"), std::string::npos) << st.to_string();
  }
  // The link itself still works, sealed.
  auto dst = p->b->provider->allocate_memory(4096, kAllAccess);
  fill_pattern((*local)->data(), 4096, 5);
  ASSERT_TRUE(p->b->ep->post_recv({dst->get(), 0, 4096}, 10).ok());
  ASSERT_TRUE(a->ep->post_send({local->get(), 0, 4096}, 11).ok());
  Pump pump({a->send_cq.get(), p->b->recv_cq.get()});
  auto c = pump.next(p->b->recv_cq.get(), generous());
  ASSERT_TRUE(c.ok() && c->status.ok()) << (c.ok() ? c->status.to_string() : c.status().to_string());
  EXPECT_EQ(std::memcmp((*dst)->data(), (*local)->data(), 4096), 0);
}

TEST(VerbsSeal, SecureUriNeedsASecretAndRejectsUnknownOptions) {
  auto p = make_provider("verbs-emu://apple-tb5?secure=1&bogus=1");
  EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument) << p.status().to_string();
  auto real = make_provider("verbs://x?sekure=1");
  EXPECT_FALSE(real.ok());
}

}  // namespace
}  // namespace lattice::fabric::testing
