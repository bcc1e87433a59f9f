#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "lattice/engine/ops/thread_pool.h"

namespace lattice::engine {
namespace {

TEST(ThreadPool, EveryTaskRunsExactlyOnceOnAValidThread) {
  for (size_t threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.n_threads(), threads);
    for (size_t n : {0, 1, 2, 3, 17, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<bool> bad_thread{false};
      pool.parallel_for(n, [&](size_t task, size_t thread) {
        hits[task].fetch_add(1);
        if (thread >= threads) bad_thread = true;
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " n " << n << " task " << i;
      EXPECT_FALSE(bad_thread.load());
    }
  }
}

TEST(ThreadPool, ManyBackToBackJobsSeeEachOthersWrites) {
  // Each job reads what the previous job wrote: checks the barrier's memory ordering.
  for (int spin_us : {0, 300}) {
    ThreadPool pool(3, ThreadPool::Options{std::chrono::microseconds(spin_us)});
    std::vector<long> v(64, 0);
    for (int job = 0; job < 2000; ++job) {
      pool.parallel_for(v.size(), [&](size_t i, size_t) { v[i] = v[i] + static_cast<long>(i) + 1; });
    }
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 2000L * (static_cast<long>(i) + 1)) << "spin " << spin_us;
  }
}

TEST(ThreadPool, UsesTheWorkers) {
  ThreadPool pool(2);
  std::atomic<int> on_worker{0};
  // Tasks slow enough that the caller cannot take all of them before the worker wakes.
  for (int round = 0; round < 50 && on_worker.load() == 0; ++round) {
    pool.parallel_for(64, [&](size_t, size_t thread) {
      volatile double s = 0;
      for (int i = 0; i < 20000; ++i) s = s + i;
      if (thread == 1) on_worker.fetch_add(1);
    });
  }
  EXPECT_GT(on_worker.load(), 0);
}

}  // namespace
}  // namespace lattice::engine
