// Measurements of this machine for a calibrated machine file (`lattice sim --calibrate`): memory
// read bandwidth with 1 and with all threads, and the engine's own quantized matmul throughput
// (engine/quant/matmul, the prefill path). The fabric figures and the engine's decode efficiency
// are measured by the tool with `lattice bench fabric` / `bench engine` (tools/lattice/cmd_sim*.cc).
#pragma once

#include <chrono>
#include <initializer_list>
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
// The work each tensor-parallel rank does on the whole hidden state of a layer, not a slice of
// it (engine/runtime/forward.cc): before attention and before the FFN, RMSNorm, the 8-bit
// quantization of the normed rows the matmuls read, and the residual add, on one thread over
// `rows` rows of `n_embd`; each pass a different layer's buffers, together beyond the L2 cache,
// as the weights streamed between them leave it. Best of `reps`, nanoseconds an element of the
// hidden state a layer.
Result<double> measure_replicated_ns(size_t n_embd, size_t rows, int reps);
// What every tensor-parallel rank of a mixture of experts does whole on each MoE layer, whatever
// its slice of the experts (engine/runtime/forward.cc, route and run_experts), on one thread over
// `rows` rows of `n_embd`: the router's F32 matmul over all `n_expert` experts, and for each of
// the `k_used` experts a row chose, the row gathered, its 8-bit quantization for the expert's
// matmuls and the expert's output added back at its weight. Each pass a different layer's
// buffers, beyond the L2 cache together. Best of `reps`.
struct MoeReplicated {
  double router_ns = 0;  // nanoseconds a multiply-add of the router (rows x n_embd x n_expert)
  double row_ns = 0;     // nanoseconds an element of a chosen expert's input (rows x k_used x n_embd)
};
Result<MoeReplicated> measure_moe_replicated(size_t n_embd, size_t n_expert, size_t k_used, size_t rows, int reps);
// Prefill's matmul (rows x cols Q4_0 weight, n_tok activations, one thread) on one of `parts`
// tensor-parallel slices, as the engine splits a layer: the mean of a slice of the rows (the
// Q, K, V, gate and up projections) and of the columns (the output and down projections).
// What the slice keeps of the whole's rate: (whole's time / parts) / the slice's, each the best
// of 3 x `reps` calls, the whole's and the slices' in turn.
Result<double> measure_slice_efficiency(int parts, size_t rows, size_t cols, size_t n_tok, int reps);
// Decode's kernel (the engine's one-token Q4_0 matmul over a weight of about `bytes`) run by
// `workers` threads at once, each with its own weight and a pool of one, as separate ranks run it:
// GB/s of weight each reads (the mean over the workers, best of `reps` passes).
Result<double> measure_decode_kernel_gbs(int workers, size_t bytes, int reps);

// The starts of one measurement disagree when their largest reading is more than `spread` times
// their smallest (readings of 0 or less, differences, are not compared): the host read in two
// regimes, as when ranks beyond the cores fell into a placement that cost 1.9 ms a back-to-back
// call in two of three starts where the others read 8-10 us (docs/SIM.md, session 39). The
// calibration then takes more starts, up to a limit, and keeps the median of all.
bool starts_disagree(const std::vector<double>& readings, double spread = 3.0);
// Whether a measurement runs its start number `i` (from 0): its first `n`, and while any of
// `watched` disagrees, up to `more` after them.
bool another_start(int i, int n, int more, std::initializer_list<const std::vector<double>*> watched);
// The median of some readings (the upper middle of an even count); 0 for none.
double median_of(std::vector<double> v);

// Decode's kernel as one rank runs it between two collectives: the engine's one-token Q4_0
// matmul, on the calling thread, over about `bytes` of a random weight (4096 columns) of about
// `total` bytes, each call the next rows (wrapping), so that a call smaller than the caches still
// reads memory, as a layer's weights do.
class DecodeKernel {
 public:
  // n_tok > 1: the same rows against that many tokens at once, as prefill's matmuls run.
  static Result<std::unique_ptr<DecodeKernel>> make(size_t bytes, size_t total = 0, size_t n_tok = 1);
  // The same weight packed again: its own memory, as another rank's.
  Result<std::unique_ptr<DecodeKernel>> copy() const;
  void run();  // one call: the matvec, or the matmul of n_tok tokens
  double weight_bytes() const;  // bytes one call reads

 private:
  DecodeKernel() : pool_(1) {}
  std::shared_ptr<const std::vector<uint8_t>> q_;  // the quantized rows, shared by copies
  size_t rows_ = 0, rows_per_call_ = 0, next_ = 0, n_tok_ = 1;
  engine::Weight weight_;
  engine::ThreadPool pool_;
  std::vector<float> x_, y_;
};

}  // namespace lattice::sim
