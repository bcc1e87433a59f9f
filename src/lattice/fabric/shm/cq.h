// The shm provider's completion queues (cq.cc): progress runs in poll/wait on the caller's
// thread; wait() spins, then sleeps on the provider's futex doorbell.
#pragma once

#include <atomic>
#include <deque>
#include <span>
#include <thread>
#include <vector>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric::shm {

// A test-and-test-and-set lock: an uncontended lock/unlock pair is one atomic exchange and one
// store, half of a pthread mutex's cost on the latency path; a waiter yields after a short spin.
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      for (int n = 0; flag_.load(std::memory_order_relaxed); ++n) {
        if (n < 100) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
          n = 0;
        }
      }
    }
  }
  bool try_lock() { return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire); }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

class ShmProvider;
class ShmEndpoint;

class ShmCq final : public CompletionQueue {
 public:
  ShmCq(ShmProvider* provider, size_t depth) : provider_(provider), depth_(depth) {}
  ~ShmCq() override;
  size_t poll(std::span<Completion> out) override;
  Result<size_t> wait(std::span<Completion> out, Deadline deadline) override;

  // Called by endpoints (under their lock).
  void push(const Completion& c);
  void attach(ShmEndpoint* ep);
  void detach(ShmEndpoint* ep);

 private:
  size_t progress_and_pop(std::span<Completion> out, bool blocking_locks);
  size_t pop(std::span<Completion> out);

  ShmProvider* provider_;
  size_t depth_;
  SpinLock mu_;
  std::deque<Completion> q_;
  std::atomic<size_t> n_ready_{0};
  std::atomic<int> sleeping_{0};
  uint32_t empty_polls_ = 0;  // consecutive empty poll() calls (one poller at a time)
  SpinLock attach_mu_;
  std::vector<ShmEndpoint*> endpoints_;
};

}  // namespace lattice::fabric::shm
