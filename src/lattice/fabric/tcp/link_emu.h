// A link this machine does not have, for the tcp provider: "tcp://HOST:PORT?latency_us=L&gbytes_s=R".
//
// The kernel here has no netem, so the emulator is a relay in userspace, over real sockets. A
// provider given the options listens as usual and also starts a LinkEmulator: a thread with its
// own listening socket, which the provider advertises instead of its own. Every connection a
// peer dials lands on the relay, which dials the provider's real listener and copies the bytes
// both ways: what it reads from one side is queued on that direction's wire (R GB/s, 1e9
// bytes/s, after the bytes before it) and written to the other side L microseconds after it
// left the wire. A connection carries both directions of a pair of endpoints, and only the
// listening side relays it, so each direction of each link is emulated once.
//
// What it is not: the relay adds a loopback hop of its own (a few microseconds here) on top of
// L, and its queue per direction is bounded (kMaxQueued; beyond that it stops reading and TCP's
// flow control holds the sender back). A closed or reset side is passed on (shutdown after the
// queued bytes, or close), so a lost rank looks lost through the relay too. Without the options
// nothing of this runs: the provider's data path is the same code either way.
#pragma once

#include <atomic>
#include <memory>
#include <string_view>
#include <thread>

#include "lattice/core/status.h"
#include "lattice/fabric/tcp/address.h"
#include "lattice/fabric/tcp/socket.h"

namespace lattice::fabric::tcp {

// "latency_us=50" / "gbytes_s=1" into `shape`; false when `kv` is neither; kInvalidArgument for
// a bad value (latency above 1 s, rate outside 1 KB/s .. 10 TB/s, not a number).
Result<bool> parse_link_option(std::string_view kv, LinkShape* shape);

class LinkEmulator {
 public:
  static constexpr size_t kMaxQueued = 4u << 20;  // bytes per direction held by the relay

  // Listens on `bind` (its port is usually 0) and relays every accepted connection to `target`.
  static Result<std::unique_ptr<LinkEmulator>> start(const SockAddr& bind, const SockAddr& target, LinkShape shape);
  ~LinkEmulator();
  LinkEmulator(const LinkEmulator&) = delete;
  LinkEmulator& operator=(const LinkEmulator&) = delete;

  const SockAddr& bound() const { return bound_; }

 private:
  LinkEmulator() = default;
  void run();

  LinkShape shape_;
  SockAddr target_;
  SockAddr bound_;
  int listen_fd_ = -1;
  ListenLoop loop_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lattice::fabric::tcp
