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
// So that the link adds L and not L plus the relay's own costs, the clock of a chunk starts when
// the kernel queued its bytes on the relay's socket (SO_TIMESTAMPNS: the relay's wake-up does
// not count), a chunk is released early by the part of a loopback send() before the receiver
// has the bytes (measured at start: the relay's own hop, `hop()`), and a message's release (a
// chunk that found the wire idle) less than the timer's recent lateness away is waited for by
// polling, not by a timer (a timed sleep of 40 us here returns 20-70 us late). The chunks of a
// stream are released by timed sleeps: their due times, not their promptness, set its rate.
// Below the hop and the relay's wake-up (10-40 us on this VM) the relay cannot go: latency_us=
// 0.001 adds that much, and a wake-up longer than L adds its excess.
//
// What it is not: its queue per direction is bounded (kMaxQueued; beyond that it stops reading
// and TCP's flow control holds the sender back). A closed or reset side is passed on (shutdown
// after the queued bytes, or close), so a lost rank looks lost through the relay too. Without
// the options nothing of this runs: the provider's data path is the same code either way.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <thread>

#include <time.h>

#include "lattice/core/status.h"
#include "lattice/fabric/tcp/address.h"
#include "lattice/fabric/tcp/socket.h"

namespace lattice::fabric::tcp {

// "latency_us=50" / "gbytes_s=1" into `shape`; false when `kv` is neither; kInvalidArgument for
// a bad value (latency above 1 s, rate outside 1 KB/s .. 10 TB/s, not a number).
Result<bool> parse_link_option(std::string_view kv, LinkShape* shape);

// CPU time (user and system) the relay threads of this process's link emulators used while they
// ran, those still running and those stopped alike, in nanoseconds. A real cable costs its hosts
// no CPU; the relay does, and where ranks hold every core it is taken from them: `bench coll`
// reports it per call, and `sim --calibrate` keeps it for the simulator (docs/SIM.md).
int64_t link_emulators_cpu_ns();

class LinkEmulator {
 public:
  static constexpr size_t kMaxQueued = 4u << 20;  // bytes per direction held by the relay

  // Listens on `bind` (its port is usually 0) and relays every accepted connection to `target`.
  static Result<std::unique_ptr<LinkEmulator>> start(const SockAddr& bind, const SockAddr& target, LinkShape shape);
  ~LinkEmulator();
  LinkEmulator(const LinkEmulator&) = delete;
  LinkEmulator& operator=(const LinkEmulator&) = delete;

  const SockAddr& bound() const { return bound_; }
  // What a loopback send() takes before the receiving socket has the bytes (measured at start):
  // each chunk is released this much before its due time.
  std::chrono::nanoseconds hop() const { return std::chrono::nanoseconds(hop_ns_); }

 private:
  LinkEmulator() = default;
  void run();

  LinkShape shape_;
  SockAddr target_;
  SockAddr bound_;
  int listen_fd_ = -1;
  ListenLoop loop_;
  int64_t hop_ns_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  clockid_t cpu_clock_{};  // the relay thread's CPU clock, for link_emulators_cpu_ns()
  bool has_cpu_clock_ = false;
  friend int64_t link_emulators_cpu_ns();
};

}  // namespace lattice::fabric::tcp
