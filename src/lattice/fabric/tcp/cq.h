// Completion queue of the tcp provider.
//
// Completions are pushed by whichever thread progresses an endpoint (a poller of this or another
// CQ, a poster, or the provider's background thread) and popped by the one thread that polls
// this CQ. poll() and wait() also drive progress of every endpoint attached to this CQ on the
// caller's thread: the lowest-latency path, no thread handoff.
//
// wait(): polls, spinning up to `spin` (busy_poll: until the deadline), then sleeps in poll(2)
// on the attached sockets plus an eventfd that pushers signal while a waiter sleeps. The spin is
// kSpin, plus the round trip an emulated link adds (link_emu.h): a reply due after 2 x 50 us
// then finds the waiter polling, as a reply over plain loopback does, instead of asleep (waking
// a sleeper costs 20-60 us on this VM).
//
// Lock order: conns_mu_ -> Conn::mu_ (try-lock only) -> mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric::tcp {

class Conn;

class TcpCompletionQueue final : public CompletionQueue {
 public:
  // Longer than a loopback round trip (~10 us) so a ping-pong never sleeps, short enough that an
  // idle waiter costs nothing.
  static constexpr auto kSpin = std::chrono::microseconds(50);

  static Result<std::unique_ptr<TcpCompletionQueue>> create(size_t depth, bool busy_poll,
                                                            Clock::duration spin = kSpin);
  ~TcpCompletionQueue() override;

  size_t poll(std::span<Completion> out) override;
  Result<size_t> wait(std::span<Completion> out, Deadline deadline) override;

  // Any thread.
  void push(Completion c);
  void attach(std::shared_ptr<Conn> conn);
  void detach(const Conn* conn);

 private:
  TcpCompletionQueue(int event_fd, bool busy_poll, Clock::duration spin)
      : event_fd_(event_fd), busy_poll_(busy_poll), spin_(spin) {}
  size_t pop(std::span<Completion> out);
  void progress_attached();
  void sleep_once(Deadline deadline);

  const int event_fd_;
  const bool busy_poll_;
  const Clock::duration spin_;
  std::mutex mu_;
  std::deque<Completion> q_;
  std::atomic<size_t> n_ready_{0};
  std::atomic<bool> sleeping_{false};
  std::mutex conns_mu_;
  std::vector<std::shared_ptr<Conn>> conns_;
};

}  // namespace lattice::fabric::tcp
