// A persistent pool of worker threads for data-parallel kernels (matmul, attention heads).
//
// Threads are created once, in the constructor, and live until the destructor. parallel_for
// is a barrier-style dispatch: the caller publishes one job, takes part in it as thread 0,
// and returns when every task has run. Tasks are claimed dynamically (an atomic counter), so
// uneven tasks balance themselves. After a job, workers spin for `spin` (waking a sleeping
// vCPU costs ~20 us on the target machines, more than a whole decode matvec chunk) and then
// sleep on a futex until the next job.
//
// Thread safety: parallel_for must be called from one thread at a time (the owner); it is not
// reentrant (a task must not call parallel_for on the same pool). Tasks must not throw.
// With n_threads == 1 no thread is created and parallel_for is a plain loop.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

namespace lattice::engine {

class ThreadPool {
 public:
  struct Options {
    std::chrono::microseconds spin{300};  // how long an idle worker spins before sleeping
  };
  // n_threads counts the calling thread: n_threads - 1 workers are started. 0 is taken as 1.
  explicit ThreadPool(size_t n_threads) : ThreadPool(n_threads, Options{}) {}
  ThreadPool(size_t n_threads, Options options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t n_threads() const { return n_threads_; }

  // Runs fn(task, thread) for every task in [0, n_tasks), thread in [0, n_threads()), the
  // caller being thread 0. Blocks until all tasks have finished; their writes are visible
  // to the caller on return.
  template <class Fn>
  void parallel_for(size_t n_tasks, Fn&& fn) {
    if (n_tasks == 0) return;
    if (n_threads_ == 1 || n_tasks == 1) {
      for (size_t t = 0; t < n_tasks; ++t) fn(t, size_t{0});
      return;
    }
    run(n_tasks, &trampoline<std::remove_reference_t<Fn>>, &fn);
  }

 private:
  using RawFn = void (*)(void* ctx, size_t task, size_t thread);
  template <class Fn>
  static void trampoline(void* ctx, size_t task, size_t thread) {
    (*static_cast<Fn*>(ctx))(task, thread);
  }

  void run(size_t n_tasks, RawFn fn, void* ctx);
  void worker_main(size_t thread);
  // Claims and runs tasks of job `gen` until none is left or another job replaced it.
  void work(uint32_t gen, size_t thread);

  const size_t n_threads_;
  const Options options_;
  std::vector<std::thread> workers_;

  // The current job. Written by the owner before it publishes the job in claim_, read by a
  // thread only after it claimed a task of that job (so the job cannot have ended yet).
  RawFn job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  // (generation << 32) | task count, written before claim_: a thread that sees job g in
  // claim_ reads g's count here, or a newer generation (and then gives up).
  std::atomic<uint64_t> job_tag_{0};

  // (generation << 32) | next task index: a claim is a CAS that fails once a newer job is
  // published, so a worker that wakes late never runs tasks of a job it did not see start.
  // Completion counts finished tasks, not workers: the owner never waits for a worker that
  // is descheduled and took no task.
  alignas(64) std::atomic<uint64_t> claim_{0};
  alignas(64) std::atomic<size_t> done_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};  // futex word for sleeping workers
  alignas(64) std::atomic<uint32_t> sleepers_{0};
  std::atomic<bool> stop_{false};
  bool running_ = false;  // owner-only: catches reentrant use
};

}  // namespace lattice::engine
