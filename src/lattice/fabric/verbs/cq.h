// The verbs provider's completion queues (cq.cc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <span>
#include <vector>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric::verbs {

// Something a completion queue's poller can progress on its own thread (an endpoint).
class Progressable {
 public:
  virtual ~Progressable() = default;
  // Non-blocking: one round of progress if the endpoint's lock is free.
  virtual void try_progress() = 0;
  // The queue's poller stops polling (it sleeps until a completion is pushed): the endpoint's
  // own progress thread takes the data path back at once. Non-blocking, as try_progress.
  virtual void poller_leaving() = 0;
};

// Completions are pushed by endpoint progress (their threads, or a poller of this queue);
// poll() and wait()'s spin phase also progress the attached endpoints on the caller's thread,
// the lowest-latency path (no thread handoff on a 2-core machine).
// Lock order: attached_mu_ -> endpoint lock (try-lock only) -> mu_.
class VerbsCompletionQueue final : public CompletionQueue {
 public:
  explicit VerbsCompletionQueue(bool busy_poll) : busy_poll_(busy_poll) {}
  size_t poll(std::span<Completion> out) override;
  Result<size_t> wait(std::span<Completion> out, Deadline deadline) override;
  void push(Completion c);
  void attach(Progressable* ep);
  void detach(Progressable* ep);  // blocks until no poller is inside ep

 private:
  size_t pop(std::span<Completion> out);
  const bool busy_poll_;
  std::mutex attached_mu_;
  std::vector<Progressable*> attached_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Completion> q_;
  std::atomic<size_t> n_{0};
};

}  // namespace lattice::fabric::verbs
