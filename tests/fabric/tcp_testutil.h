// Helpers for the tcp provider tests: connected endpoint pairs and a raw-socket peer that
// speaks (or abuses) the wire format of src/lattice/fabric/tcp/wire.h by hand.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "lattice/core/random.h"
#include "lattice/fabric/fabric.h"
#include "lattice/fabric/tcp/address.h"
#include "lattice/fabric/tcp/wire.h"

namespace lattice::fabric::tcp::testing {

inline std::unique_ptr<Provider> must_provider(std::string_view uri = "tcp://127.0.0.1:0") {
  auto p = make_provider(uri);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? std::move(*p) : nullptr;
}

struct Side {
  std::unique_ptr<CompletionQueue> cq;
  std::unique_ptr<Endpoint> ep;
};

inline Side make_side(Provider& p, int peer_rank, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  Side s;
  auto cq = p.create_cq(1024);
  EXPECT_TRUE(cq.ok());
  s.cq = std::move(*cq);
  EndpointOptions opt;
  opt.peer_rank = peer_rank;
  opt.peer_timeout = timeout;
  auto ep = p.create_endpoint(s.cq.get(), s.cq.get(), opt);
  EXPECT_TRUE(ep.ok()) << ep.status().to_string();
  s.ep = std::move(*ep);
  return s;
}

// Connects a and b (both call connect, as two ranks would).
inline void connect_pair(Side& a, Side& b) {
  auto fut = std::async(std::launch::async,
                        [&] { return b.ep->connect(a.ep->local_address(), Deadline::after(std::chrono::seconds(20))); });
  Status sa = a.ep->connect(b.ep->local_address(), Deadline::after(std::chrono::seconds(20)));
  Status sb = fut.get();
  ASSERT_TRUE(sa.ok()) << sa.to_string();
  ASSERT_TRUE(sb.ok()) << sb.to_string();
}

inline Completion wait_one(CompletionQueue& cq, std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  Completion c;
  auto r = cq.wait(std::span<Completion>(&c, 1), Deadline::after(limit));
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  if (!r.ok()) c.status = r.status();
  return c;
}

inline std::unique_ptr<MemoryRegion> must_alloc(Provider& p, size_t n, uint32_t access = kAllAccess) {
  auto r = p.allocate_memory(n, access);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(*r) : nullptr;
}

// Sends `n` bytes a -> b with a recv pre-posted on b and checks content.
inline void ping(Provider& pa, Side& a, Provider& pb, Side& b, size_t n = 100) {
  auto src = must_alloc(pa, n ? n : 1);
  auto dst = must_alloc(pb, n ? n : 1);
  for (size_t i = 0; i < n; ++i) src->data()[i] = std::byte(i * 7 + 3);
  ASSERT_TRUE(b.ep->post_recv({dst.get(), 0, n}, 77).ok());
  ASSERT_TRUE(a.ep->post_send({src.get(), 0, n}, 78).ok());
  Completion cs = wait_one(*a.cq);
  EXPECT_TRUE(cs.status.ok()) << cs.status.to_string();
  EXPECT_EQ(cs.id, 78u);
  Completion cr = wait_one(*b.cq);
  EXPECT_TRUE(cr.status.ok()) << cr.status.to_string();
  EXPECT_EQ(cr.id, 77u);
  EXPECT_EQ(cr.bytes, n);
  EXPECT_EQ(0, std::memcmp(src->data(), dst->data(), n));
}

// ---- a hand-driven peer on a raw socket ----------------------------------------------------

inline int raw_connect(uint16_t port, const char* ip = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  inet_pton(AF_INET, ip, &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

inline bool raw_write(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Reads exactly n bytes within `limit`; false on EOF, error or timeout.
inline bool raw_read(int fd, void* data, size_t n, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  char* p = static_cast<char*>(data);
  Deadline d = Deadline::after(limit);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, d.remaining_ms_for_poll()) <= 0) return false;
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// Waits for EOF (or reset), discarding input; false on timeout.
inline bool raw_wait_eof(int fd, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  Deadline d = Deadline::after(limit);
  char buf[4096];
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, d.remaining_ms_for_poll()) <= 0) return false;
    ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) return true;
  }
}

// A fake peer that dials `ep`'s provider: builds a peer blob that sorts before the endpoint's
// address (port 1), so the endpoint waits for our connection, and completes the hello.
struct RawPeer {
  int fd = -1;
  Nonce nonce{};
  std::vector<std::byte> blob;
  std::future<Status> connected;

  ~RawPeer() {
    if (fd >= 0) ::close(fd);
  }

  // Starts ep->connect(blob) in the background, dials, exchanges hellos. Returns false on failure.
  bool attach(Endpoint& ep, std::chrono::milliseconds connect_limit = std::chrono::seconds(20)) {
    auto local = EndpointAddress::decode(ep.local_address());
    if (!local.ok()) return false;
    EndpointAddress fake;
    fake.family = 4;
    fake.port = 1;
    fake.ip = local->ip;
    secure_random_bytes(fake.nonce.data(), 16);
    nonce = fake.nonce;
    blob = fake.encode();
    connected = std::async(std::launch::async, [&ep, b = blob, connect_limit] {
      return ep.connect(b, Deadline::after(connect_limit));
    });
    fd = raw_connect(local->port);
    if (fd < 0) return false;
    Hello h = make_hello(nonce.data(), local->nonce.data());
    if (!raw_write(fd, &h, sizeof h)) return false;
    Hello reply{};
    if (!raw_read(fd, &reply, sizeof reply)) return false;
    if (std::memcmp(reply.magic, kHelloMagic, 8) != 0 || reply.version != kWireVersion) return false;
    if (std::memcmp(reply.from, local->nonce.data(), 16) != 0 || std::memcmp(reply.to, nonce.data(), 16) != 0)
      return false;
    Status s = connected.get();
    EXPECT_TRUE(s.ok()) << s.to_string();
    return s.ok();
  }

  bool send_frame(FrameHeader h, const void* payload = nullptr, size_t n = 0) {
    return raw_write(fd, &h, sizeof h) && (n == 0 || raw_write(fd, payload, n));
  }
};

}  // namespace lattice::fabric::tcp::testing
