// Measurements of this machine for a calibrated machine file (`lattice sim --calibrate`): memory
// read bandwidth with 1 and with all threads, and the engine's own quantized matmul throughput
// (engine/quant/matmul, the prefill path). The fabric figures and the engine's decode efficiency
// are measured by the tool with `lattice bench fabric` / `bench engine` (tools/lattice/cmd_sim*.cc).
#pragma once

#include <chrono>

#include "lattice/core/status.h"

namespace lattice::sim {

// Best of `reps` passes of `threads` threads each streaming its part of a `bytes` buffer, GB/s.
Result<double> measure_read_gbs(int threads, size_t bytes, int reps);
// Q4_0 matmul (rows x cols weight, n_tok activations) on `threads` threads through the engine's
// kernels: best of `reps`, TFLOP/s (2 rows cols n_tok per call).
Result<double> measure_matmul_tflops(int threads, size_t rows, size_t cols, size_t n_tok, int reps);
// Decode's kernel (the engine's one-token Q4_0 matmul over a weight of about `bytes`) run by
// `workers` threads at once, each with its own weight and a pool of one, as separate ranks run it:
// GB/s of weight each reads (the mean over the workers, best of `reps` passes).
Result<double> measure_decode_kernel_gbs(int workers, size_t bytes, int reps);

}  // namespace lattice::sim
