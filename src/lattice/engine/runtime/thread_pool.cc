#include "lattice/engine/runtime/thread_pool.h"

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

void ThreadPool::work(size_t thread) {
  const size_t n = job_tasks_;
  for (size_t t = next_task_.fetch_add(1, std::memory_order_relaxed); t < n;
       t = next_task_.fetch_add(1, std::memory_order_relaxed))
    job_fn_(job_ctx_, t, thread);
}

void ThreadPool::run(size_t n_tasks, RawFn fn, void* ctx) {
  LATTICE_CHECK(workers_busy_.load(std::memory_order_relaxed) == 0);  // not reentrant
  job_fn_ = fn;
  job_ctx_ = ctx;
  job_tasks_ = n_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  workers_busy_.store(workers_.size(), std::memory_order_relaxed);
  // seq_cst pairs with the worker's sleepers_ increment / generation re-check, so a worker
  // either sees the new generation or is counted as a sleeper that we wake.
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) generation_.notify_all();
  work(0);
  // Workers normally finish within microseconds of us; if they are descheduled (more threads
  // than free cores), yield so they can run instead of burning their time slice.
  for (int i = 0; workers_busy_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 2000) LATTICE_CPU_RELAX();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker_main(size_t thread) {
  // Generation 0 is the one before any job: reading generation_ here instead would miss a job
  // published before this thread got to run (the owner then waits for it forever).
  uint32_t seen = 0;
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
    work(thread);
    workers_busy_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace lattice::engine
