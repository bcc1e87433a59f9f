// Sealed tcp sessions (ProviderOptions::secret): handshake at connect, AEAD on every frame.
// Oracles: byte-exact payloads after a round trip; the error codes of fabric.h; a
// man-in-the-middle proxy on a raw socket that flips a bit or replays a frame, whose effect
// must be kAuthFailed with the plaintext never reaching the receive buffer.
#include <atomic>
#include <functional>
#include <mutex>
#include <thread>

#include "lattice/fabric/tcp/address.h"
#include "tcp_testutil.h"

namespace lattice::fabric::tcp::testing {
namespace {

using Secret = std::array<uint8_t, 32>;

Secret secret_of(uint8_t seed) {
  Secret s;
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(seed * 31 + i * 7 + 1);
  return s;
}

std::unique_ptr<Provider> sealed_provider(uint8_t seed) {
  ProviderOptions o;
  o.secret = secret_of(seed);
  auto p = make_provider("tcp://127.0.0.1:0", o);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(*p) : nullptr;
}

TEST(TcpSecure, RoundTripSendsWritesReadsAtomics) {
  auto pa = sealed_provider(1), pb = sealed_provider(1);
  Side a = make_side(*pa, 1), b = make_side(*pb, 0);
  connect_pair(a, b);
  for (size_t n : {size_t{0}, size_t{5}, size_t{192}, size_t{193}, size_t{70000}, size_t{1} << 20}) {
    SCOPED_TRACE(n);
    ping(*pa, a, *pb, b, n);
    ping(*pb, b, *pa, a, n);
  }
  // Truncated message: the receive gets the prefix, status kTruncated.
  {
    auto src = must_alloc(*pa, 5000), dst = must_alloc(*pb, 4096);
    for (size_t i = 0; i < 5000; ++i) src->data()[i] = std::byte(i * 13 + 1);
    ASSERT_TRUE(b.ep->post_recv({dst.get(), 0, 1000}, 1).ok());
    ASSERT_TRUE(a.ep->post_send({src.get(), 0, 5000}, 2).ok());
    EXPECT_TRUE(wait_one(*a.cq).status.ok());
    Completion c = wait_one(*b.cq);
    EXPECT_EQ(c.status.code(), ErrorCode::kTruncated);
    EXPECT_EQ(c.bytes, 1000u);
    EXPECT_EQ(0, std::memcmp(src->data(), dst->data(), 1000));
  }
  // One-sided: write, read back, fetch-add.
  const size_t n = 300000;
  auto local = must_alloc(*pa, n), back = must_alloc(*pa, n), remote = must_alloc(*pb, n);
  for (size_t i = 0; i < n; ++i) local->data()[i] = std::byte(i * 7 + i / 251);
  RemoteSlice rs{remote->key(), 0, n};
  ASSERT_TRUE(a.ep->post_write({local.get(), 0, n}, rs, 10).ok());
  Completion cw = wait_one(*a.cq);
  ASSERT_TRUE(cw.status.ok()) << cw.status.to_string();
  EXPECT_EQ(0, std::memcmp(local->data(), remote->data(), n));
  ASSERT_TRUE(a.ep->post_read({back.get(), 0, n}, rs, 11).ok());
  Completion cr = wait_one(*a.cq);
  ASSERT_TRUE(cr.status.ok()) << cr.status.to_string();
  EXPECT_EQ(0, std::memcmp(local->data(), back->data(), n));
  uint64_t before;
  std::memcpy(&before, remote->data(), 8);
  ASSERT_TRUE(a.ep->post_fetch_add({back.get(), 0, 8}, {remote->key(), 0, 8}, 5, 12).ok());
  ASSERT_TRUE(wait_one(*a.cq).status.ok());
  uint64_t old, after;
  std::memcpy(&old, back->data(), 8);
  std::memcpy(&after, remote->data(), 8);
  EXPECT_EQ(old, before);
  EXPECT_EQ(after, before + 5);
}

TEST(TcpSecure, DifferentSecretIsRefusedAndListenerKeepsServing) {
  auto pa = sealed_provider(1), pb = sealed_provider(2);
  Side a = make_side(*pa, 1), b = make_side(*pb, 0);
  auto dl = [] { return Deadline::after(std::chrono::seconds(3)); };
  auto fut = std::async(std::launch::async, [&] { return b.ep->connect(a.ep->local_address(), dl()); });
  Status sa = a.ep->connect(b.ep->local_address(), dl());
  Status sb = fut.get();
  EXPECT_EQ(sa.code(), ErrorCode::kAuthFailed) << sa.to_string();
  EXPECT_EQ(sb.code(), ErrorCode::kAuthFailed) << sb.to_string();
  EXPECT_NE((sa.ok() ? sb : sa).message().find("secret"), std::string::npos) << sa.to_string() << sb.to_string();
  // Both listeners still serve peers that hold their secret.
  auto pc = sealed_provider(2);
  Side b2 = make_side(*pb, 0), c = make_side(*pc, 1);
  connect_pair(c, b2);
  ping(*pc, c, *pb, b2, 1000);
}

TEST(TcpSecure, PlainAndSealedDoNotMix) {
  auto pa = sealed_provider(1);
  auto pb = must_provider();
  Side a = make_side(*pa, 1), b = make_side(*pb, 0);
  auto dl = [] { return Deadline::after(std::chrono::seconds(2)); };
  auto fut = std::async(std::launch::async, [&] { return b.ep->connect(a.ep->local_address(), dl()); });
  Status sa = a.ep->connect(b.ep->local_address(), dl());
  Status sb = fut.get();
  EXPECT_FALSE(sa.ok());
  EXPECT_FALSE(sb.ok());
}

// A proxy between the dialer and the acceptor's listener. `tamper` sees every chunk going
// dialer -> acceptor with its offset in that stream and may edit or extend it.
class Mitm {
 public:
  using Tamper = std::function<void(uint64_t offset, std::vector<char>& chunk)>;
  Mitm(uint16_t target_port, uint16_t above, Tamper tamper) : target_(target_port), tamper_(std::move(tamper)) {
    for (int i = 0; i < 200; ++i) {
      int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
      socklen_t len = sizeof sa;
      if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 && ::listen(fd, 4) == 0 &&
          ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0 && ntohs(sa.sin_port) > above) {
        listen_fd_ = fd;
        port_ = ntohs(sa.sin_port);
        break;
      }
      ::close(fd);
    }
    thread_ = std::thread([this] { run(); });
  }
  ~Mitm() {
    stop_ = true;
    thread_.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }

 private:
  void run() {
    pollfd lp{listen_fd_, POLLIN, 0};
    while (!stop_ && ::poll(&lp, 1, 50) <= 0) {
    }
    if (stop_) return;
    int in = ::accept(listen_fd_, nullptr, nullptr);
    int out = raw_connect(target_);
    uint64_t offset = 0;
    std::vector<char> buf(1 << 16);
    while (!stop_) {
      pollfd p[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      if (p[0].revents) {
        ssize_t r = ::recv(in, buf.data(), buf.size(), 0);
        if (r <= 0) break;
        std::vector<char> chunk(buf.begin(), buf.begin() + r);
        tamper_(offset, chunk);
        offset += static_cast<uint64_t>(r);
        if (!raw_write(out, chunk.data(), chunk.size())) break;
      }
      if (p[1].revents) {
        ssize_t r = ::recv(out, buf.data(), buf.size(), 0);
        if (r <= 0) break;
        if (!raw_write(in, buf.data(), static_cast<size_t>(r))) break;
      }
    }
    ::close(in);
    ::close(out);
  }
  uint16_t target_;
  Tamper tamper_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Where the first frame starts in the dialer -> acceptor stream: Hello, M1, M3.
constexpr uint64_t kFirstFrame = sizeof(Hello) + 104 + 40;
constexpr uint64_t kFrameHead = sizeof(FrameHeader) + kSealTagBytes;

// Connects a (the dialer, through the proxy) to b; a must compare smaller than b and the proxy.
void connect_via(Side& a, Side& b, const Mitm& mitm) {
  auto blob_b = EndpointAddress::decode(b.ep->local_address());
  ASSERT_TRUE(blob_b.ok());
  EndpointAddress via = *blob_b;
  via.port = mitm.port();
  auto la = EndpointAddress::decode(a.ep->local_address());
  ASSERT_TRUE(*la < via && *la < *blob_b) << "test set-up: a must be the dialer";
  auto fut = std::async(std::launch::async, [&] { return b.ep->connect(a.ep->local_address(), Deadline::after(std::chrono::seconds(20))); });
  Status sa = a.ep->connect(via.encode(), Deadline::after(std::chrono::seconds(20)));
  Status sb = fut.get();
  ASSERT_TRUE(sa.ok()) << sa.to_string();
  ASSERT_TRUE(sb.ok()) << sb.to_string();
}

// Two sealed providers ordered so the first one's endpoints dial.
std::pair<std::unique_ptr<Provider>, std::unique_ptr<Provider>> ordered_providers() {
  auto p1 = sealed_provider(7), p2 = sealed_provider(7);
  Side s1 = make_side(*p1, 1), s2 = make_side(*p2, 0);
  auto a1 = EndpointAddress::decode(s1.ep->local_address());
  auto a2 = EndpointAddress::decode(s2.ep->local_address());
  s1.ep.reset();
  s2.ep.reset();
  if (a1->port < a2->port) return {std::move(p1), std::move(p2)};
  return {std::move(p2), std::move(p1)};
}

void expect_auth_failure(Provider& pa, Side& a, Provider& pb, Side& b, int sends_ok) {
  constexpr size_t n = 1000;
  auto src = must_alloc(pa, n);
  for (size_t i = 0; i < n; ++i) src->data()[i] = std::byte(i * 5 + 42);
  std::vector<std::unique_ptr<MemoryRegion>> dsts;
  for (int i = 0; i < 2; ++i) {
    dsts.push_back(must_alloc(pb, n));
    std::memset(dsts.back()->data(), 0xEE, n);
    ASSERT_TRUE(b.ep->post_recv({dsts.back().get(), 0, n}, 100 + i).ok());
  }
  ASSERT_TRUE(a.ep->post_send({src.get(), 0, n}, 1).ok());
  EXPECT_TRUE(wait_one(*a.cq).status.ok());
  for (int i = 0; i < 2; ++i) {
    Completion c = wait_one(*b.cq);
    EXPECT_EQ(c.id, static_cast<WorkId>(100 + i));
    if (i < sends_ok) {
      EXPECT_TRUE(c.status.ok()) << c.status.to_string();
      EXPECT_EQ(0, std::memcmp(src->data(), dsts[i]->data(), n));
    } else {
      EXPECT_EQ(c.status.code(), ErrorCode::kAuthFailed) << c.status.to_string();
      EXPECT_NE(0, std::memcmp(src->data(), dsts[i]->data(), 16)) << "plaintext reached the receive buffer";
      EXPECT_EQ(b.ep->status().code(), ErrorCode::kAuthFailed);
    }
  }
}

TEST(TcpSecure, FlippedBitFailsEndpointWithoutDelivering) {
  auto [pa, pb] = ordered_providers();
  Side a = make_side(*pa, 1), b = make_side(*pb, 0);
  auto lb = EndpointAddress::decode(b.ep->local_address());
  auto la = EndpointAddress::decode(a.ep->local_address());
  const uint64_t target = kFirstFrame + kFrameHead + 10;  // payload byte 10 of the first frame
  Mitm mitm(lb->port, la->port, [&](uint64_t off, std::vector<char>& chunk) {
    if (target >= off && target < off + chunk.size()) chunk[target - off] ^= 0x04;
  });
  connect_via(a, b, mitm);
  expect_auth_failure(*pa, a, *pb, b, /*sends_ok=*/0);
}

TEST(TcpSecure, ReplayedFrameIsRejected) {
  auto [pa, pb] = ordered_providers();
  Side a = make_side(*pa, 1), b = make_side(*pb, 0);
  auto lb = EndpointAddress::decode(b.ep->local_address());
  auto la = EndpointAddress::decode(a.ep->local_address());
  const uint64_t frame_len = kFrameHead + 1000 + kSealTagBytes;
  std::vector<char> seen;
  bool replayed = false;
  Mitm mitm(lb->port, la->port, [&](uint64_t off, std::vector<char>& chunk) {
    // Collect the stream up to the end of the first frame, then send that frame again.
    for (size_t i = 0; i < chunk.size(); ++i)
      if (off + i < kFirstFrame + frame_len) seen.push_back(chunk[i]);
    if (!replayed && seen.size() == kFirstFrame + frame_len) {
      replayed = true;
      chunk.insert(chunk.begin() + static_cast<long>(kFirstFrame + frame_len - off), seen.begin() + kFirstFrame,
                   seen.end());
    }
  });
  connect_via(a, b, mitm);
  expect_auth_failure(*pa, a, *pb, b, /*sends_ok=*/1);
}

TEST(TcpSecure, PayloadIsNotPlaintextOnTheWire) {
  auto [pa, pb] = ordered_providers();
  Side a = make_side(*pa, 1), b = make_side(*pb, 0);
  auto lb = EndpointAddress::decode(b.ep->local_address());
  auto la = EndpointAddress::decode(a.ep->local_address());
  std::mutex mu;
  std::string wire;
  Mitm mitm(lb->port, la->port, [&](uint64_t, std::vector<char>& chunk) {
    std::lock_guard lock(mu);
    wire.append(chunk.begin(), chunk.end());
  });
  connect_via(a, b, mitm);
  ping(*pa, a, *pb, b, 4096);  // ping's pattern: byte i = i * 7 + 3
  std::string needle;
  for (size_t i = 0; i < 32; ++i) needle += static_cast<char>(i * 7 + 3);
  std::lock_guard lock(mu);
  EXPECT_GE(wire.size(), kFirstFrame + kFrameHead + 4096 + kSealTagBytes);
  EXPECT_EQ(wire.find(needle), std::string::npos) << "plaintext on the wire";
}

}  // namespace
}  // namespace lattice::fabric::tcp::testing
