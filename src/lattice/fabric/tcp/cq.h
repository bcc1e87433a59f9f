// Completion queue of the tcp provider.
//
// Completions are pushed by whichever thread progresses an endpoint (a poller of this or another
// CQ, a poster, or the provider's background thread) and popped by the one thread that polls
// this CQ. poll() and wait() also drive progress of every endpoint attached to this CQ on the
// caller's thread: the lowest-latency path, no thread handoff.
//
// wait(): polls, spinning up to kSpin (busy_poll: until the deadline), then sleeps in poll(2)
// on the attached sockets plus an eventfd that pushers signal while a waiter sleeps.
//
// Lock order: conns_mu_ -> Conn::mu_ (try-lock only) -> mu_.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric::tcp {

class Conn;

class TcpCompletionQueue final : public CompletionQueue {
 public:
  static Result<std::unique_ptr<TcpCompletionQueue>> create(size_t depth, bool busy_poll);
  ~TcpCompletionQueue() override;

  size_t poll(std::span<Completion> out) override;
  Result<size_t> wait(std::span<Completion> out, Deadline deadline) override;

  // Any thread.
  void push(Completion c);
  void attach(std::shared_ptr<Conn> conn);
  void detach(const Conn* conn);

 private:
  TcpCompletionQueue(int event_fd, bool busy_poll) : event_fd_(event_fd), busy_poll_(busy_poll) {}
  size_t pop(std::span<Completion> out);
  void progress_attached();
  void sleep_once(Deadline deadline);

  const int event_fd_;
  const bool busy_poll_;
  std::mutex mu_;
  std::deque<Completion> q_;
  std::atomic<size_t> n_ready_{0};
  std::atomic<bool> sleeping_{false};
  std::mutex conns_mu_;
  std::vector<std::shared_ptr<Conn>> conns_;
};

}  // namespace lattice::fabric::tcp
