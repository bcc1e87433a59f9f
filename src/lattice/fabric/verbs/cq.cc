#include <thread>

#include "lattice/fabric/verbs/cq.h"

namespace lattice::fabric::verbs {

void VerbsCompletionQueue::push(Completion c) {
  {
    std::lock_guard lock(mu_);
    q_.push_back(std::move(c));
    n_.store(q_.size(), std::memory_order_release);
  }
  cv_.notify_one();
}

void VerbsCompletionQueue::attach(Progressable* ep) {
  std::lock_guard lock(attached_mu_);
  attached_.push_back(ep);
}

void VerbsCompletionQueue::detach(Progressable* ep) {
  std::lock_guard lock(attached_mu_);
  std::erase(attached_, ep);
}

size_t VerbsCompletionQueue::poll(std::span<Completion> out) {
  if (size_t got = pop(out)) return got;
  {
    std::lock_guard lock(attached_mu_);
    for (Progressable* ep : attached_) ep->try_progress();
  }
  return pop(out);
}

size_t VerbsCompletionQueue::pop(std::span<Completion> out) {
  if (n_.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard lock(mu_);
  size_t got = 0;
  while (got < out.size() && !q_.empty()) {
    out[got++] = std::move(q_.front());
    q_.pop_front();
  }
  n_.store(q_.size(), std::memory_order_release);
  return got;
}

Result<size_t> VerbsCompletionQueue::wait(std::span<Completion> out, Deadline deadline) {
  // Completions come from endpoint progress threads: spin briefly (waking an idle vCPU costs
  // ~20 us here), then sleep on the condition variable.
  auto spin_until = Clock::now() + std::chrono::microseconds(busy_poll_ ? 1000000000 : 50);
  while (true) {
    if (size_t got = poll(out)) return got;
    if (deadline.expired()) return Timeout("verbs: no completion before the deadline");
    if (Clock::now() >= spin_until) break;
    std::this_thread::yield();
  }
  {
    std::lock_guard lock(attached_mu_);
    for (Progressable* ep : attached_) ep->poller_leaving();
  }
  std::unique_lock lock(mu_);
  while (q_.empty()) {
    if (deadline.is_never()) {
      cv_.wait(lock);
    } else if (cv_.wait_until(lock, deadline.when()) == std::cv_status::timeout && q_.empty()) {
      return Timeout("verbs: no completion before the deadline");
    }
  }
  size_t got = 0;
  while (got < out.size() && !q_.empty()) {
    out[got++] = std::move(q_.front());
    q_.pop_front();
  }
  n_.store(q_.size(), std::memory_order_release);
  return got;
}

}  // namespace lattice::fabric::verbs
