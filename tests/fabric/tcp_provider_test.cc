// tcp provider: behaviour specific to tcp (URIs, addresses, the staging / direct / unexpected
// receive paths, backpressure, checked one-sided access). The provider-independent contract is
// in conformance_test.cc.
#include <atomic>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "../require.h"

#include "lattice/fabric/tcp/endpoint.h"
#include "tcp_testutil.h"

namespace lattice::fabric::tcp::testing {
namespace {

TEST(TcpUri, RejectsBadUris) {
  for (const char* uri : {"tcp://", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "tcp://nohost.example:1",
                          "tcp://[::1:0", "tcp://127.0.0.1:0?bogus=1", "tcp://127.0.0.1:x"}) {
    auto p = make_provider(uri);
    ASSERT_FALSE(p.ok()) << uri;
    EXPECT_EQ(p.status().code(), ErrorCode::kInvalidArgument) << uri << ": " << p.status().to_string();
  }
  auto p = make_provider("tcp://127.0.0.1:0?busy_poll=1");
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ((*p)->name(), "tcp");
  EXPECT_TRUE((*p)->caps().rma_write && (*p)->caps().rma_read && (*p)->caps().atomics);
}

TEST(TcpAddress, BlobRoundTripAndRejects) {
  EndpointAddress a;
  a.family = 6;
  a.port = 4242;
  for (int i = 0; i < 16; ++i) a.ip[i] = uint8_t(i), a.nonce[i] = uint8_t(200 + i);
  auto blob = a.encode();
  ASSERT_EQ(blob.size(), kBlobBytes);
  auto b = EndpointAddress::decode(blob);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(*b == a);
  blob[0] = std::byte{9};
  EXPECT_EQ(EndpointAddress::decode(blob).status().code(), ErrorCode::kInvalidArgument);
  blob = a.encode();
  blob.pop_back();
  EXPECT_EQ(EndpointAddress::decode(blob).status().code(), ErrorCode::kInvalidArgument);
  blob = a.encode();
  blob[1] = std::byte{5};
  EXPECT_EQ(EndpointAddress::decode(blob).status().code(), ErrorCode::kInvalidArgument);
}

TEST(TcpEndpoint, ConnectToItselfAndGarbageBlobAreRejected) {
  auto p = must_provider();
  Side a = make_side(*p, 1);
  EXPECT_EQ(a.ep->connect(a.ep->local_address(), Deadline::after(std::chrono::seconds(1))).code(),
            ErrorCode::kInvalidArgument);
  std::vector<std::byte> junk(7, std::byte{1});
  EXPECT_EQ(a.ep->connect(junk, Deadline::after(std::chrono::seconds(1))).code(), ErrorCode::kInvalidArgument);
  auto m = must_alloc(*p, 64);
  EXPECT_EQ(a.ep->post_send({m.get(), 0, 8}, 1).code(), ErrorCode::kInvalidArgument);  // not connected
}

TEST(TcpEndpoint, ConnectTimesOutWhenPeerNeverConnects) {
  auto p = must_provider();
  Side a = make_side(*p, 1);
  Side b = make_side(*p, 2);
  // Only the accepting side (the larger address) calls connect: it must give up at the deadline.
  auto aa = EndpointAddress::decode(a.ep->local_address());
  auto ba = EndpointAddress::decode(b.ep->local_address());
  ASSERT_TRUE(aa.ok() && ba.ok());
  Endpoint& acceptor = *ba < *aa ? *a.ep : *b.ep;
  Endpoint& other = *ba < *aa ? *b.ep : *a.ep;
  auto t0 = Clock::now();
  Status s = acceptor.connect(other.local_address(), Deadline::after(std::chrono::milliseconds(300)));
  EXPECT_EQ(s.code(), ErrorCode::kTimeout) << s.to_string();
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(290));
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
}

// Sizes around the inline limit, the staging buffer and the direct-read threshold, with the
// receive posted before (direct path) and after (unexpected buffering or stall) the send.
TEST(TcpEndpoint, SendRecvAllPathsAndSizes) {
  auto p = must_provider();
  Side a = make_side(*p, 1), b = make_side(*p, 0);
  connect_pair(a, b);
  const size_t sizes[] = {0, 1, 191, 192, 193, 8191, 65536, 65537, (1u << 20) + 7, (3u << 20) + 1};
  for (bool pre_post : {true, false}) {
    for (size_t n : sizes) {
      SCOPED_TRACE("n=" + std::to_string(n) + " pre_post=" + std::to_string(pre_post));
      auto src = must_alloc(*p, n + 1), dst = must_alloc(*p, n + 1);
      for (size_t i = 0; i < n; ++i) src->data()[i] = std::byte((i * 131 + n) & 0xff);
      if (pre_post) {
        ASSERT_TRUE(b.ep->post_recv({dst.get(), 0, n}, 500).ok());
      }
      ASSERT_TRUE(a.ep->post_send({src.get(), 0, n}, 600).ok());
      if (!pre_post) {
        // Let the message arrive (and be buffered or stall the socket) before posting.
        for (int i = 0; i < 20; ++i) {
          Completion tmp[4];
          b.cq->poll(tmp);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        ASSERT_TRUE(b.ep->post_recv({dst.get(), 0, n}, 500).ok());
      }
      bool got_send = false, got_recv = false;
      while (!got_send || !got_recv) {
        Completion c = wait_one(*a.cq);  // a and b have separate CQs; poll both
        if (c.id == 600) got_send = true;
        ASSERT_TRUE(c.status.ok()) << c.status.to_string();
        Completion cr;
        if (!got_recv) {
          cr = wait_one(*b.cq);
          ASSERT_TRUE(cr.status.ok()) << cr.status.to_string();
          ASSERT_EQ(cr.op, Opcode::kRecv);
          EXPECT_EQ(cr.bytes, n);
          got_recv = true;
        }
      }
      EXPECT_EQ(0, std::memcmp(src->data(), dst->data(), n));
    }
  }
}

// Completed sends stop counting against kMaxOutstanding: an endpoint takes any number of
// sends in its life (it used to refuse every post after 65536, stalling long runs).
TEST(TcpEndpoint, CompletedSendsNoLongerCountAsOutstanding) {
  auto p = must_provider();
  Side a = make_side(*p, 1), b = make_side(*p, 0);
  connect_pair(a, b);
  auto src = must_alloc(*p, 64), dst = must_alloc(*p, 64 * 256);
  const size_t total = 2 * kMaxOutstanding + 10, batch = 256;
  Completion comps[64];
  for (size_t done = 0; done < total;) {
    const size_t n = std::min(batch, total - done);
    for (size_t i = 0; i < n; ++i) ASSERT_TRUE(b.ep->post_recv({dst.get(), i * 64, 64}, 1).ok());
    for (size_t i = 0; i < n; ++i) {
      Status s = a.ep->post_send({src.get(), 0, 8}, 2);
      ASSERT_TRUE(s.ok()) << "send " << done + i << ": " << s.to_string();
    }
    size_t sends = 0, recvs = 0;
    const Deadline deadline = Deadline::after(std::chrono::seconds(20));
    while (sends < n || recvs < n) {
      for (size_t k = a.cq->poll(comps), i = 0; i < k; ++i, ++sends) ASSERT_TRUE(comps[i].status.ok());
      for (size_t k = b.cq->poll(comps), i = 0; i < k; ++i, ++recvs) ASSERT_TRUE(comps[i].status.ok());
      ASSERT_FALSE(deadline.expired()) << "batch from " << done << ": " << sends << " sends, " << recvs << " receives";
    }
    done += n;
  }
}

TEST(TcpEndpoint, ManyUnexpectedMessagesKeepOrderAndBackpressure) {
  auto p = must_provider();
  Side a = make_side(*p, 1), b = make_side(*p, 0);
  connect_pair(a, b);
  // 300 x 40 KiB = 12 MiB, far beyond the unexpected-message budget: the receiver must stop
  // reading and resume as receives are posted, delivering every message in order.
  constexpr size_t kN = 300, kLen = 40 * 1024;
  auto src = must_alloc(*p, kN * kLen), dst = must_alloc(*p, kN * kLen);
  for (size_t i = 0; i < kN * kLen; ++i) src->data()[i] = std::byte((i / kLen * 37 + i) & 0xff);
  for (size_t i = 0; i < kN; ++i) ASSERT_TRUE(a.ep->post_send({src.get(), i * kLen, kLen}, i).ok());
  size_t sends_done = 0;
  Completion cs[64];
  for (int i = 0; i < 50; ++i) sends_done += a.cq->poll(cs), b.cq->poll(cs);
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_TRUE(b.ep->post_recv({dst.get(), i * kLen, kLen}, 1000 + i).ok());
    sends_done += a.cq->poll(cs);
    Completion c = wait_one(*b.cq);
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    ASSERT_EQ(c.id, 1000 + i);
    ASSERT_EQ(c.bytes, kLen);
  }
  while (sends_done < kN) {
    auto r = a.cq->wait(cs, Deadline::after(std::chrono::seconds(20)));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    for (size_t i = 0; i < *r; ++i) ASSERT_TRUE(cs[i].status.ok());
    sends_done += *r;
  }
  EXPECT_EQ(0, std::memcmp(src->data(), dst->data(), kN * kLen));
}

double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

TEST(TcpEndpoint, IdleWaitOnStalledEndpointCpuBudget) {
  auto p = must_provider();
  Side a = make_side(*p, 1), b = make_side(*p, 0);
  connect_pair(a, b);
  // 4 MiB with no receive posted: b stops reading (paused) with input pending, and a has
  // output pending. Neither b's sleeping waiter nor the background thread may spin on that.
  auto src = must_alloc(*p, 4 << 20), dst = must_alloc(*p, 4 << 20);
  ASSERT_TRUE(a.ep->post_send({src.get(), 0, src->size()}, 1).ok());
  Completion c;
  (void)b.cq->poll(std::span<Completion>(&c, 1));  // reads the header and pauses
  double cpu0 = process_cpu_ms();
  auto t0 = Clock::now();
  auto r = b.cq->wait(std::span<Completion>(&c, 1), Deadline::after(std::chrono::milliseconds(600)));
  double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  double cpu = process_cpu_ms() - cpu0;
  EXPECT_EQ(r.status().code(), ErrorCode::kTimeout);
  // Sleeping costs ~1 ms of CPU here; spinning costs a core (>= 100 ms even on a loaded box).
  EXPECT_LT(cpu, wall / 10) << "a waiter or the background thread spins on a paused endpoint";
  // And the message still arrives once a receive is posted.
  ASSERT_TRUE(b.ep->post_recv({dst.get(), 0, dst->size()}, 2).ok());
  Completion got = wait_one(*b.cq);
  ASSERT_TRUE(got.status.ok()) << got.status.to_string();
  EXPECT_EQ(got.bytes, src->size());
  EXPECT_TRUE(wait_one(*a.cq).status.ok());
}

TEST(TcpEndpoint, TruncatedMessageCompletesWithTruncatedAndNoOverrun) {
  auto p = must_provider();
  Side a = make_side(*p, 1), b = make_side(*p, 0);
  connect_pair(a, b);
  for (size_t n : {size_t{100}, size_t{200000}}) {
    auto src = must_alloc(*p, n), dst = must_alloc(*p, n);
    std::memset(src->data(), 0x5a, n);
    std::memset(dst->data(), 0x11, n);
    ASSERT_TRUE(b.ep->post_recv({dst.get(), 0, n / 2}, 1).ok());
    ASSERT_TRUE(a.ep->post_send({src.get(), 0, n}, 2).ok());
    Completion c = wait_one(*b.cq);
    EXPECT_EQ(c.status.code(), ErrorCode::kTruncated) << c.status.to_string();
    EXPECT_EQ(c.bytes, n / 2);
    EXPECT_EQ(dst->data()[n / 2 - 1], std::byte{0x5a});
    EXPECT_EQ(dst->data()[n / 2], std::byte{0x11});  // nothing written past the posted buffer
    EXPECT_TRUE(wait_one(*a.cq).status.ok());
    ping(*p, a, *p, b);  // the stream is still in sync
  }
}

TEST(TcpEndpoint, OneSidedOpsServedByBackgroundThreadWhenTargetIsIdle) {
  auto pa = must_provider(), pb = must_provider();
  Side a = make_side(*pa, 1), b = make_side(*pb, 0);
  connect_pair(a, b);
  constexpr size_t kLen = 1 << 20;
  auto target = must_alloc(*pb, kLen);
  auto local = must_alloc(*pa, kLen);
  for (size_t i = 0; i < kLen; ++i) local->data()[i] = std::byte(i % 251);
  uint64_t init = 40;  // the atomics' word, delivered by the write (the test never touches target memory)
  std::memcpy(local->data() + 4096, &init, 8);
  // Nobody polls b's CQ during this test: b's background thread must serve everything.
  ASSERT_TRUE(a.ep->post_write({local.get(), 0, kLen}, {target->key(), 0, kLen}, 1).ok());
  Completion c = wait_one(*a.cq);
  ASSERT_TRUE(c.status.ok()) << c.status.to_string();
  EXPECT_EQ(c.op, Opcode::kWrite);
  EXPECT_EQ(0, std::memcmp(local->data(), target->data(), kLen));

  auto back = must_alloc(*pa, kLen);
  ASSERT_TRUE(a.ep->post_read({back.get(), 8, 1000}, {target->key(), 16, 1000}, 2).ok());
  c = wait_one(*a.cq);
  ASSERT_TRUE(c.status.ok()) << c.status.to_string();
  EXPECT_EQ(c.op, Opcode::kRead);
  EXPECT_EQ(0, std::memcmp(back->data() + 8, local->data() + 16, 1000));

  ASSERT_TRUE(a.ep->post_fetch_add({back.get(), 0, 8}, {target->key(), 4096, 8}, 2, 3).ok());
  c = wait_one(*a.cq);
  ASSERT_TRUE(c.status.ok());
  uint64_t old;
  std::memcpy(&old, back->data(), 8);
  EXPECT_EQ(old, 40u);
  ASSERT_TRUE(a.ep->post_compare_swap({back.get(), 0, 8}, {target->key(), 4096, 8}, 42, 7, 4).ok());
  c = wait_one(*a.cq);
  ASSERT_TRUE(c.status.ok());
  std::memcpy(&old, back->data(), 8);
  EXPECT_EQ(old, 42u);
  ASSERT_TRUE(a.ep->post_read({back.get(), 0, 8}, {target->key(), 4096, 8}, 5).ok());
  ASSERT_TRUE(wait_one(*a.cq).status.ok());
  uint64_t now;
  std::memcpy(&now, back->data(), 8);
  EXPECT_EQ(now, 7u);
}

TEST(TcpEndpoint, AtomicsFromManyEndpointsAreAtomic) {
  auto target_p = must_provider();
  auto word = must_alloc(*target_p, 64);
  constexpr int kPeers = 3, kAdds = 300;
  std::vector<std::unique_ptr<Provider>> ps;
  std::vector<Side> clients, servers;
  for (int i = 0; i < kPeers; ++i) {
    ps.push_back(must_provider());
    clients.push_back(make_side(*ps.back(), 0));
    servers.push_back(make_side(*target_p, i + 1));
    connect_pair(clients.back(), servers.back());
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kPeers; ++i) {
    threads.emplace_back([&, i] {
      auto res = must_alloc(*ps[i], 8);
      for (int k = 0; k < kAdds; ++k) {
        if (!clients[i].ep->post_fetch_add({res.get(), 0, 8}, {word->key(), 8, 8}, 1, k).ok()) ++failures;
        Completion c = wait_one(*clients[i].cq);
        if (!c.status.ok()) ++failures;
      }
    });
  }
  // The target also polls its servers' CQs now and then, so both progress paths run.
  for (int k = 0; k < 200; ++k) {
    Completion cs[8];
    for (auto& s : servers) s.cq->poll(cs);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  // Atomic load: the target's progress threads updated the word with atomic_ref.
  uint64_t v = std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(word->data() + 8)).load();
  EXPECT_EQ(v, uint64_t(kPeers) * kAdds);
}

TEST(TcpEndpoint, WriteWithImmConsumesReceiveInOrder) {
  auto p = must_provider();
  Side a = make_side(*p, 1), b = make_side(*p, 0);
  connect_pair(a, b);
  auto target = must_alloc(*p, 4096), src = must_alloc(*p, 4096), rbuf = must_alloc(*p, 64);
  std::memset(src->data(), 0x33, 4096);
  // The imm arrives before any receive is posted: it is held and delivered to the first one.
  ASSERT_TRUE(a.ep->post_write_with_imm({src.get(), 0, 4096}, {target->key(), 0, 4096}, 0xabcd, 9).ok());
  Completion c = wait_one(*a.cq);
  ASSERT_TRUE(c.status.ok()) << c.status.to_string();
  EXPECT_EQ(c.op, Opcode::kWriteImm);
  ASSERT_TRUE(a.ep->post_send({src.get(), 0, 10}, 10).ok());
  ASSERT_TRUE(wait_one(*a.cq).status.ok());
  ASSERT_TRUE(b.ep->post_recv({rbuf.get(), 0, 64}, 11).ok());
  ASSERT_TRUE(b.ep->post_recv({rbuf.get(), 0, 64}, 12).ok());
  c = wait_one(*b.cq);
  ASSERT_TRUE(c.status.ok());
  EXPECT_EQ(c.op, Opcode::kRecvImm);
  EXPECT_EQ(c.id, 11u);
  EXPECT_EQ(c.imm, 0xabcdu);
  EXPECT_EQ(c.bytes, 0u);
  EXPECT_EQ(target->data()[4095], std::byte{0x33});
  c = wait_one(*b.cq);
  ASSERT_TRUE(c.status.ok());
  EXPECT_EQ(c.op, Opcode::kRecv);
  EXPECT_EQ(c.id, 12u);
  EXPECT_EQ(c.bytes, 10u);
}

TEST(TcpEndpoint, RemoteAccessViolationsFailOnlyThatEndpoint) {
  struct Case {
    const char* name;
    uint64_t key_xor;
    uint64_t offset;
    uint64_t len;
    uint32_t access;
    int op;  // 0 write, 1 read, 2 atomic
  };
  const Case cases[] = {
      {"unknown key", 0x5555, 0, 8, kAllAccess, 0},
      {"out of bounds write", 0, 4090, 8, kAllAccess, 0},
      {"out of bounds read", 0, 4097, 1, kAllAccess, 1},
      {"write without right", 0, 0, 8, kRemoteRead, 0},
      {"read without right", 0, 0, 8, kRemoteWrite, 1},
      {"atomic without right", 0, 0, 8, kRemoteWrite | kRemoteRead, 2},
      {"atomic out of bounds", 0, 4096, 8, kAllAccess, 2},
  };
  auto p = must_provider();
  Side good_a = make_side(*p, 5), good_b = make_side(*p, 6);
  connect_pair(good_a, good_b);
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    Side a = make_side(*p, 3), b = make_side(*p, 4);
    connect_pair(a, b);
    auto target = must_alloc(*p, 4096, tc.access);
    auto local = must_alloc(*p, 4096);
    auto rbuf = must_alloc(*p, 64);
    ASSERT_TRUE(b.ep->post_recv({rbuf.get(), 0, 64}, 99).ok());  // must complete with the error
    RemoteSlice rs{target->key() ^ tc.key_xor, tc.offset, tc.len};
    Status s = tc.op == 0   ? a.ep->post_write({local.get(), 0, tc.len}, rs, 1)
               : tc.op == 1 ? a.ep->post_read({local.get(), 0, tc.len}, rs, 1)
                            : a.ep->post_fetch_add({local.get(), 0, 8}, rs, 1, 1);
    ASSERT_TRUE(s.ok()) << s.to_string();
    Completion c = wait_one(*a.cq);
    EXPECT_EQ(c.status.code(), ErrorCode::kAccessDenied) << c.status.to_string();
    Completion cb = wait_one(*b.cq);
    EXPECT_EQ(cb.id, 99u);
    EXPECT_EQ(cb.status.code(), ErrorCode::kAccessDenied) << cb.status.to_string();
    EXPECT_EQ(cb.status.peer(), 4);  // the target names the offending peer (b's peer_rank)
    EXPECT_NE(cb.status.message().find("peer 4"), std::string::npos) << cb.status.message();
    // Sticky on both sides.
    EXPECT_EQ(b.ep->status().code(), ErrorCode::kAccessDenied);
    EXPECT_FALSE(a.ep->status().ok());
    EXPECT_FALSE(a.ep->post_send({local.get(), 0, 8}, 5).ok());
    EXPECT_EQ(target->data()[4095], std::byte{0});  // nothing landed
    ping(*p, good_a, *p, good_b);
  }
}

TEST(TcpEndpoint, DeregisteredRegionIsDenied) {
  auto p = must_provider();
  Side a = make_side(*p, 1), b = make_side(*p, 0);
  connect_pair(a, b);
  auto target = must_alloc(*p, 128);
  uint64_t key = target->key();
  target.reset();
  auto local = must_alloc(*p, 128);
  ASSERT_TRUE(a.ep->post_write({local.get(), 0, 8}, {key, 0, 8}, 1).ok());
  EXPECT_EQ(wait_one(*a.cq).status.code(), ErrorCode::kAccessDenied);
}

TEST(TcpEndpoint, ClosedPeerIsLostPromptlyAndWaitDoesNotHang) {
  auto p = must_provider();
  Side a = make_side(*p, 1, std::chrono::seconds(60)), b = make_side(*p, 2);
  connect_pair(a, b);
  auto buf = must_alloc(*p, 64);
  ASSERT_TRUE(a.ep->post_recv({buf.get(), 0, 64}, 1).ok());
  auto t0 = Clock::now();
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    b.ep.reset();
  });
  Completion c = wait_one(*a.cq);
  killer.join();
  EXPECT_EQ(c.status.code(), ErrorCode::kPeerLost) << c.status.to_string();
  EXPECT_EQ(c.status.peer(), 1);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));  // far below the 60 s peer_timeout
  EXPECT_EQ(a.ep->post_recv({buf.get(), 0, 64}, 2).code(), ErrorCode::kPeerLost);
}

TEST(TcpEndpoint, DestroyCancelsOutstanding) {
  auto p = must_provider();
  Side a = make_side(*p, 1), b = make_side(*p, 2);
  connect_pair(a, b);
  auto buf = must_alloc(*p, 64);
  ASSERT_TRUE(a.ep->post_recv({buf.get(), 0, 64}, 7).ok());
  a.ep.reset();
  Completion c = wait_one(*a.cq);
  EXPECT_EQ(c.id, 7u);
  EXPECT_EQ(c.status.code(), ErrorCode::kCancelled);
}

TEST(TcpEndpoint, Ipv6Loopback) {
  auto pr = make_provider("tcp://[::1]:0");
  if (!pr.ok()) LATTICE_SKIP_OR_FAIL("ipv6", "no IPv6 loopback here: " << pr.status().to_string());
  auto& p = *pr;
  Side a = make_side(*p, 1), b = make_side(*p, 0);
  connect_pair(a, b);
  ping(*p, a, *p, b, 5000);
}

TEST(TcpEndpoint, BusyPollProviderWorks) {
  auto p = must_provider("tcp://127.0.0.1:0?busy_poll=1");
  Side a = make_side(*p, 1), b = make_side(*p, 0);
  connect_pair(a, b);
  for (int i = 0; i < 50; ++i) ping(*p, a, *p, b, 8);
}

}  // namespace
}  // namespace lattice::fabric::tcp::testing
