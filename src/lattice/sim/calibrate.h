// Measurements of this machine for a calibrated machine file (`lattice sim --calibrate`): memory
// read bandwidth with 1 and with all threads, and the engine's own quantized matmul throughput
// (engine/quant/matmul, the prefill path). The fabric figures and the engine's decode efficiency
// are measured by the tool with `lattice bench fabric` / `bench engine` (tools/lattice/cmd_sim*.cc).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/ops/thread_pool.h"
#include "lattice/engine/quant/matmul.h"

namespace lattice::sim {

// Best of `reps` passes of `threads` threads each streaming its part of a `bytes` buffer, GB/s.
Result<double> measure_read_gbs(int threads, size_t bytes, int reps);
// Q4_0 matmul (rows x cols weight, n_tok activations) on `threads` threads through the engine's
// kernels: best of `reps`, TFLOP/s (2 rows cols n_tok per call).
Result<double> measure_matmul_tflops(int threads, size_t rows, size_t cols, size_t n_tok, int reps);
// The same matmul run by `workers` threads at once, each with its own weight and a pool of one, as
// separate ranks prefill: TFLOP/s each reaches (the mean over the workers, best of `reps` passes).
Result<double> measure_matmul_workers_tflops(int workers, size_t rows, size_t cols, size_t n_tok, int reps);
// Decode's kernel (the engine's one-token Q4_0 matmul over a weight of about `bytes`) run by
// `workers` threads at once, each with its own weight and a pool of one, as separate ranks run it:
// GB/s of weight each reads (the mean over the workers, best of `reps` passes).
Result<double> measure_decode_kernel_gbs(int workers, size_t bytes, int reps);

// Decode's kernel as one rank runs it between two collectives: the engine's one-token Q4_0
// matmul, on the calling thread, over about `bytes` of a random weight (4096 columns) of about
// `total` bytes, each call the next rows (wrapping), so that a call smaller than the caches still
// reads memory, as a layer's weights do.
class DecodeKernel {
 public:
  static Result<std::unique_ptr<DecodeKernel>> make(size_t bytes, size_t total = 0);
  // The same weight packed again: its own memory, as another rank's.
  Result<std::unique_ptr<DecodeKernel>> copy() const;
  void run();  // one matvec
  double weight_bytes() const;  // bytes one call reads

 private:
  DecodeKernel() : pool_(1) {}
  std::shared_ptr<const std::vector<uint8_t>> q_;  // the quantized rows, shared by copies
  size_t rows_ = 0, rows_per_call_ = 0, next_ = 0;
  engine::Weight weight_;
  engine::ThreadPool pool_;
  std::vector<float> x_, y_;
};

// What a provider adds to ranks in lockstep over shm (`sim --calibrate`'s bench coll --work at
// two kernel sizes): at each, `quiet` the busiest core's kernels at their quiet pace (the solo
// kernel times the ranks there), `extra` the provider's step less shm's, `step` shm's. fit()
// splits it into a part every collective pays and a part that grows with the quiet work
// (MeasuredLink::lockstep_call_us and lockstep_scaling): the emulated verbs device's extra is
// mostly the former (docs/SIM.md, session 30), so a ratio taken at the bench's kernels would
// charge the smaller segments of more ranks too little.
class LockstepExtra {
 public:
  void add(double quiet_us, double extra_us, double step_us);
  struct Fit {
    double call_us = 0;  // every collective
    double scaling = 1;  // 1 / (1 + the share of the quiet work), in [0.05, 1]
  };
  // The line through the smallest and largest kernels' points. A negative slope (noise) leaves
  // a constant at the mean extra, a negative intercept a share through the origin at the mean.
  Fit fit() const;
  // shm's step over the provider's, the mean over the sizes (the one figure this was before).
  double ratio() const;

 private:
  struct Point {
    double quiet, extra, step;
  };
  std::vector<Point> at_;
};

}  // namespace lattice::sim
