// Completion queues of the shm provider. Progress runs here, on the polling thread: no
// handoff thread on the data path. wait() spins for kSpin, then sleeps on the provider's
// futex doorbell, which peers ring only while `sleepers` is non-zero.
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <thread>

#include "lattice/fabric/shm/endpoint.h"

namespace lattice::fabric::shm {

namespace {

constexpr auto kSpin = std::chrono::microseconds(50);
constexpr uint32_t kEmptyPollsBeforeYield = 256;
constexpr auto kMaxSleep = std::chrono::milliseconds(100);

void futex_wait(uint32_t* word, uint32_t expected, Clock::duration timeout) {
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  syscall(SYS_futex, word, FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

void wake_doorbell(DoorbellPage* db) {
  std::atomic_ref<uint32_t>(db->doorbell).fetch_add(1, std::memory_order_seq_cst);
  syscall(SYS_futex, &db->doorbell, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void ShmProvider::ring_own_doorbell() { wake_doorbell(doorbell()); }

ShmCq::~ShmCq() = default;

void ShmCq::attach(ShmEndpoint* ep) {
  std::lock_guard lock(attach_mu_);
  endpoints_.push_back(ep);
}

void ShmCq::detach(ShmEndpoint* ep) {
  std::lock_guard lock(attach_mu_);
  endpoints_.erase(std::remove(endpoints_.begin(), endpoints_.end(), ep), endpoints_.end());
}

void ShmCq::push(const Completion& c) {
  bool wake;
  {
    std::lock_guard lock(mu_);
    q_.push_back(c);
    n_ready_.store(q_.size(), std::memory_order_release);
    // Read under the lock: a waiter raises sleeping_ before it takes this lock for its last
    // check, so either it sees this completion or this push sees it sleeping. No fence needed.
    wake = sleeping_.load(std::memory_order_relaxed) != 0;
  }
  // A waiter of this queue may sleep (a post on another thread completed at once, or the
  // watchdog failed an endpoint): wake it.
  if (wake) provider_->ring_own_doorbell();
}

size_t ShmCq::pop(std::span<Completion> out) {
  if (out.empty() || n_ready_.load(std::memory_order_acquire) == 0) return 0;
  std::lock_guard lock(mu_);
  size_t n = std::min(out.size(), q_.size());
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::move(q_.front());
    q_.pop_front();
  }
  n_ready_.store(q_.size(), std::memory_order_release);
  return n;
}

size_t ShmCq::progress_and_pop(std::span<Completion> out, bool blocking_locks) {
  {
    std::lock_guard lock(attach_mu_);
    for (ShmEndpoint* ep : endpoints_) ep->progress(!blocking_locks);
  }
  return pop(out);
}

size_t ShmCq::poll(std::span<Completion> out) {
  size_t n = progress_and_pop(out, false);
  // A caller spinning on poll() with nothing arriving for a while (~3-10 us) gives its CPU
  // away once: on an oversubscribed host the peer it waits for may need exactly this core.
  // A busy stream or a ping-pong never gets here.
  if (n > 0) {
    empty_polls_ = 0;
  } else if (++empty_polls_ >= kEmptyPollsBeforeYield) {
    empty_polls_ = 0;
    std::this_thread::yield();
  }
  return n;
}

Result<size_t> ShmCq::wait(std::span<Completion> out, Deadline deadline) {
  if (out.empty()) return InvalidArgument("shm: CompletionQueue::wait with an empty output span");
  const auto spin_until = Clock::now() + kSpin;
  const bool busy = provider_->busy_poll();
  for (;;) {
    if (size_t n = poll(out); n > 0) return n;
    auto now = Clock::now();
    if (now >= deadline.when()) break;
    if (busy || now < spin_until) {
      cpu_relax();
      continue;
    }
    // Sleep: announce it (peers and local pushers ring only then), recheck, then futex-wait.
    DoorbellPage* db = provider_->doorbell();
    std::atomic_ref<uint32_t> sleepers(db->sleepers);
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    sleeping_.fetch_add(1, std::memory_order_seq_cst);
    uint32_t bell = std::atomic_ref<uint32_t>(db->doorbell).load(std::memory_order_seq_cst);
    size_t n = progress_and_pop(out, true);
    if (n == 0) {
      auto left = deadline.when() - Clock::now();
      if (left > Clock::duration::zero())
        futex_wait(&db->doorbell, bell, std::min<Clock::duration>(left, kMaxSleep));
    }
    sleeping_.fetch_sub(1, std::memory_order_seq_cst);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (n > 0) return n;
  }
  return Timeout("shm: no completion before the deadline");
}

}  // namespace lattice::fabric::shm
