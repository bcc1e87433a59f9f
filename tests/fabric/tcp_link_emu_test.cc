// The tcp link emulator (src/lattice/fabric/tcp/link_emu.h) on its own, over real loopback
// sockets: a client dials the relay, the relay dials a plain listener here. What must hold on any
// machine, loaded or not (load only makes bytes later): they arrive intact and in order, never
// before the latency less the relay's measured hop, never faster than the rate, a close is passed
// on; and a provider with the options still carries messages (through the relay it advertises).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "lattice/fabric/tcp/link_emu.h"
#include "lattice/fabric/tcp/socket.h"
#include "tcp_testutil.h"

namespace lattice::fabric::tcp {
namespace {

using std::chrono::nanoseconds;

SockAddr loopback_any_port() {
  SockAddr a;
  auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
  in->sin_family = AF_INET;
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  in->sin_port = 0;
  a.len = sizeof(sockaddr_in);
  return a;
}

// A client socket through the relay and the server end the relay dialed.
struct Through {
  std::unique_ptr<LinkEmulator> emu;
  int client = -1, server = -1, listener = -1;
  ~Through() {
    for (int fd : {client, server, listener})
      if (fd >= 0) ::close(fd);
  }
};

void open_through(LinkShape shape, Through* t) {
  auto l = listen_socket(loopback_any_port(), false, "test listener");
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  t->listener = l->fd;
  auto emu = LinkEmulator::start(loopback_any_port(), l->bound, shape);
  ASSERT_TRUE(emu.ok()) << emu.status().to_string();
  t->emu = std::move(*emu);
  t->client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(t->client, t->emu->bound().get(), t->emu->bound().len), 0) << std::strerror(errno);
  tune_socket(t->client);
  pollfd p{t->listener, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 10'000), 1) << "the relay did not dial the target";
  t->server = ::accept4(t->listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(t->server, 0) << std::strerror(errno);
  tune_socket(t->server);
}

// Reads exactly n bytes (blocking, each read within 20 s); false on EOF or error.
bool read_n(int fd, std::byte* out, size_t n) {
  for (size_t got = 0; got < n;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20'000) != 1) return false;
    ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const std::byte* data, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = ::send(fd, data + off, n - off, MSG_NOSIGNAL);
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

TEST(TcpLinkEmu, MeasuresItsOwnHop) {
  Through t;
  ASSERT_NO_FATAL_FAILURE(open_through({.latency_us = 100, .gbytes_s = 0}, &t));
  // A loopback send() runs for some nanoseconds before the peer's socket has the bytes; a probe
  // that failed would leave 0 (and the link would then add the hop on top of the setting).
  EXPECT_GT(t.emu->hop().count(), 0);
  EXPECT_LT(t.emu->hop(), std::chrono::milliseconds(100)) << "the probe measured something else";
}

// The relays' CPU time (link_emulators_cpu_ns, what `bench coll` reports a call): it grows while a
// relay carries messages, and what a relay used stays counted once it is gone.
TEST(TcpLinkEmu, CountsItsRelaysCpuTimeAndKeepsItOnceStopped) {
  const int64_t before = link_emulators_cpu_ns();
  EXPECT_GE(before, 0);
  int64_t during = 0;
  {
    Through t;
    ASSERT_NO_FATAL_FAILURE(open_through({.latency_us = 50, .gbytes_s = 1}, &t));
    std::vector<std::byte> msg(8192, std::byte{7}), got(msg.size());
    for (int i = 0; i < 200; ++i) {
      ASSERT_TRUE(write_all(t.client, msg.data(), msg.size()));
      ASSERT_TRUE(read_n(t.server, got.data(), got.size()));
      ASSERT_TRUE(write_all(t.server, msg.data(), msg.size()));
      ASSERT_TRUE(read_n(t.client, got.data(), got.size()));
    }
    during = link_emulators_cpu_ns();
    // 400 messages woke the relay at least 400 times: far above a microsecond each.
    EXPECT_GT(during - before, 400 * 1000) << "the relay's CPU clock did not move";
  }
  EXPECT_GE(link_emulators_cpu_ns(), during);
}

// Both directions: every byte is held at least the latency less the relay's hop, and arrives in
// order. 20 ms: far above the hop and any timer error, so "not before" is all this asserts.
TEST(TcpLinkEmu, NeverDeliversBeforeTheLatency) {
  constexpr double kLatencyUs = 20'000;
  Through t;
  ASSERT_NO_FATAL_FAILURE(open_through({.latency_us = kLatencyUs, .gbytes_s = 0}, &t));
  const auto least = nanoseconds(static_cast<int64_t>(kLatencyUs * 1e3)) - t.emu->hop();
  for (int i = 0; i < 5; ++i) {
    for (auto [from, to] : {std::pair{t.client, t.server}, std::pair{t.server, t.client}}) {
      std::vector<std::byte> msg(100 + i), got(msg.size());
      for (size_t k = 0; k < msg.size(); ++k) msg[k] = std::byte(k * 13 + i + (from == t.client ? 0 : 1));
      const auto t0 = Clock::now();
      ASSERT_TRUE(write_all(from, msg.data(), msg.size()));
      ASSERT_TRUE(read_n(to, got.data(), got.size()));
      const auto took = Clock::now() - t0;
      EXPECT_GE(took, least) << "round " << i << (from == t.client ? " client->server" : " server->client");
      EXPECT_EQ(got, msg);
    }
  }
}

// 4 MiB at 0.5 GB/s: the last byte cannot be out before 4 MiB / 0.5 GB/s (8.4 ms) after the
// first was read, less the one read (64 KiB) that may be timed from its first byte.
TEST(TcpLinkEmu, NeverFasterThanTheRateAndPassesTheClose) {
  constexpr size_t kBytes = 4u << 20;
  constexpr double kRate = 0.5;  // GB/s
  Through t;
  ASSERT_NO_FATAL_FAILURE(open_through({.latency_us = 0, .gbytes_s = kRate}, &t));
  std::vector<std::byte> data(kBytes), got(kBytes);
  for (size_t k = 0; k < kBytes; ++k) data[k] = std::byte((k * 2654435761u) >> 13);
  const auto t0 = Clock::now();
  std::thread writer([&] {
    EXPECT_TRUE(write_all(t.client, data.data(), data.size()));
    ::shutdown(t.client, SHUT_WR);
  });
  const bool ok = read_n(t.server, got.data(), got.size());
  const auto took = Clock::now() - t0;
  writer.join();
  ASSERT_TRUE(ok);
  EXPECT_TRUE(got == data) << "the bytes changed on their way";
  EXPECT_GE(took, nanoseconds(static_cast<int64_t>(static_cast<double>(kBytes - 64 * 1024) / kRate)));
  // The client's shutdown reaches the server as EOF once the queue has drained.
  std::byte b;
  pollfd p{t.server, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 20'000), 1);
  EXPECT_EQ(::recv(t.server, &b, 1, 0), 0);
}

// A provider given the options advertises the relay, and messages cross it both ways intact.
TEST(TcpLinkEmu, ProviderMessagesCrossTheRelay) {
  using namespace testing;
  auto pa = must_provider("tcp://127.0.0.1:0");
  auto pb = must_provider("tcp://127.0.0.1:0?latency_us=200&gbytes_s=1");
  ASSERT_TRUE(pa && pb);
  Side a = make_side(*pa, 1), b = make_side(*pb, 0);
  ASSERT_NO_FATAL_FAILURE(connect_pair(a, b));
  for (int i = 0; i < 3; ++i) {
    ping(*pa, a, *pb, b, 1000);
    ping(*pb, b, *pa, a, 1000);
  }
}

}  // namespace
}  // namespace lattice::fabric::tcp
