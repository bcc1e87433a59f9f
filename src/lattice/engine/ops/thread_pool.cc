#include "lattice/engine/ops/thread_pool.h"

#include "lattice/core/check.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LATTICE_CPU_RELAX() _mm_pause()
#else
#define LATTICE_CPU_RELAX() std::this_thread::yield()
#endif

namespace lattice::engine {

ThreadPool::ThreadPool(size_t n_threads, Options options)
    : n_threads_(n_threads == 0 ? 1 : n_threads), options_(options) {
  workers_.reserve(n_threads_ - 1);
  for (size_t i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::work(uint32_t gen, size_t thread) {
  uint64_t cur = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(cur >> 32) != gen) return;  // a newer job: ours has ended
    const uint64_t tag = job_tag_.load(std::memory_order_acquire);
    if (static_cast<uint32_t>(tag >> 32) != gen) return;  // the next job is being set up
    const uint32_t idx = static_cast<uint32_t>(cur);
    if (idx >= static_cast<uint32_t>(tag)) return;
    if (!claim_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel, std::memory_order_acquire)) continue;
    job_fn_(job_ctx_, idx, thread);
    done_.fetch_add(1, std::memory_order_release);
    cur = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run(size_t n_tasks, RawFn fn, void* ctx) {
  LATTICE_CHECK(!running_);  // not reentrant
  LATTICE_CHECK(n_tasks < (size_t{1} << 32));
  running_ = true;
  job_fn_ = fn;
  job_ctx_ = ctx;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  job_tag_.store((static_cast<uint64_t>(gen) << 32) | n_tasks, std::memory_order_release);
  claim_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
  // seq_cst pairs with the worker's sleepers_ increment / generation re-check, so a worker
  // either sees the new generation or is counted as a sleeper that we wake.
  generation_.store(gen, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) generation_.notify_all();
  work(gen, 0);
  // Tasks claimed by workers finish within microseconds unless their thread was preempted
  // (more threads than free cores); then yield so it can run.
  for (int i = 0; done_.load(std::memory_order_acquire) != n_tasks; ++i) {
    if (i < 2000) LATTICE_CPU_RELAX();
    else std::this_thread::yield();
  }
  running_ = false;
}

void ThreadPool::worker_main(size_t thread) {
  uint32_t seen = 0;  // generation 0 is "no job yet"
  for (;;) {
    // Spin a little for the next job, then sleep.
    const auto spin_until = std::chrono::steady_clock::now() + options_.spin;
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen; ++i) {
      // Pure spinning first; later yield between polls, which costs little on an idle core
      // and lets the owner run when cores are oversubscribed.
      if (i < 4096) LATTICE_CPU_RELAX();
      else std::this_thread::yield();
      if ((i & 63) == 63 && std::chrono::steady_clock::now() > spin_until) break;
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      g = generation_.load(std::memory_order_seq_cst);
      if (g == seen) generation_.wait(seen, std::memory_order_seq_cst);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    work(g, thread);
  }
}

}  // namespace lattice::engine
