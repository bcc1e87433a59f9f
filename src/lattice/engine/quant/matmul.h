// Matrix products over quantized weights: y = W x for a batch of tokens.
//
// Conventions (as in GGUF/ggml): a weight matrix has n_rows output features and n_cols
// input features; each row is contiguous, n_cols a whole number of blocks. Activations x are
// n_tok x n_cols floats, row-major; outputs y are n_tok x (rows computed) floats, row-major
// with a caller-chosen stride. n_tok == 1 is the decode (matrix-vector) path, n_tok > 1 the
// prefill (matrix-matrix) path, which reuses each unpacked weight block for up to 8 tokens.
//
// Activations are quantized once per call (to 8-bit blocks of 32 for Q4_0/Q8_0 weights, to
// 8-bit blocks of 256 with per-16 sums for K-quants; F32/F16/BF16 use the floats as they
// are), so results differ from an exact float product by the weight and activation
// quantization error only.
//
// Weights are wrapped in a Weight once at load time. Weight::pack copies Q4_0/Q8_0 matrices
// (and, when the CPU has AVX-512, Q4_K/Q5_K/Q6_K; never Q2_K/Q3_K) into an interleaved layout of 16 rows per
// group, about the same number of bytes, that the kernels stream at DRAM speed (2 MB pages
// for large matrices); other types (and Weight::view) use the GGUF bytes in place, which must
// then outlive the Weight. Packing costs ~0.2 s per GB (Q4_0) to ~3 s per GB (Q6_K) at load.
//
// Numerics: for quantized weights each block's integer dot product is exact, so results do not
// depend on the thread count, and a prefill of n tokens equals n single-token calls bit for bit.
//
// Thread safety: a Weight is immutable and may be shared; the matmul calls are reentrant
// except that one ThreadPool runs one call at a time. Calls block until y is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "lattice/core/status.h"
#include "lattice/engine/quant/types.h"
#include "lattice/engine/ops/thread_pool.h"

namespace lattice::engine {

// A weight matrix in GGUF layout, not owned.
struct WeightView {
  TensorType type = TensorType::kF32;
  const void* data = nullptr;
  size_t n_rows = 0, n_cols = 0;
  size_t row_stride_bytes = 0;  // 0 means packed rows: row_bytes(type, n_cols)
};

class Weight {
 public:
  Weight() = default;
  // Uses the bytes in place. Fails on an unsupported type, n_cols not a whole number of
  // blocks, a null pointer or a stride shorter than a row.
  static Result<Weight> view(const WeightView& w);
  // Repacks Q4_0 / Q8_0 (and K-quants with AVX-512) into the interleaved layout (owned,
  // 64-byte aligned); other types are viewed in place as by view(). Fails on the same
  // inputs as view(), or kResourceExhausted if the copy cannot be allocated.
  static Result<Weight> pack(const WeightView& w);

  TensorType type() const { return raw_.type; }
  size_t n_rows() const { return raw_.n_rows; }
  size_t n_cols() const { return raw_.n_cols; }
  bool packed() const { return packed_ != nullptr; }
  const WeightView& raw() const { return raw_; }  // data is null for a packed Weight
  size_t bytes() const;                           // bytes a full matvec streams

  // Internal to the kernels.
  const uint8_t* packed_data() const { return packed_.get(); }
  size_t group_stride() const { return group_stride_; }

 private:
  WeightView raw_;
  std::shared_ptr<uint8_t[]> packed_;
  size_t group_stride_ = 0;
};

// y[t * n_rows + r] = sum_c W[r][c] * x[t * n_cols + c], for r < n_rows, t < n_tok.
// x must hold n_tok * n_cols floats, y n_tok * n_rows; they must not overlap.
void matmul(const Weight& w, const float* x, size_t n_tok, float* y, ThreadPool& pool);

// One output of a (possibly fused) matmul: rows [r0, r1) of *w (r1 == 0 means n_rows) into
// y[t * y_stride + (r - r0)]; y_stride == 0 means r1 - r0.
struct MatmulOut {
  const Weight* w = nullptr;
  float* y = nullptr;
  size_t r0 = 0, r1 = 0;
  size_t y_stride = 0;
};

// Several matrices sharing the same input (q/k/v, gate/up) and n_cols: the activations are
// quantized once per activation kind and a single pool dispatch covers every output. Also
// the row-range variant (tensor-parallel slices): pass one MatmulOut with r0/r1 set.
void matmul_multi(std::span<const MatmulOut> outs, const float* x, size_t n_tok, ThreadPool& pool);

// What matmul does to x before its kernels for a weight of w's type (the activations' 8-bit
// blocks, into the calling thread's scratch), alone: for measuring it (`sim --calibrate`).
void quantize_activations(const Weight& w, const float* x, size_t n_tok, ThreadPool& pool);

// ---- Instruction set selection (run time) ----
enum class Isa : uint8_t { kScalar, kAvx2, kAvx512 };
std::string_view isa_name(Isa isa);
bool isa_supported(Isa isa);  // by this CPU
// The ISA in use: the best supported one, or LATTICE_ISA=scalar|avx2|avx512 if set (capped
// to what the CPU supports).
Isa active_isa();
// For tests and benchmarks: switch kernels process-wide. Fails if the CPU lacks the ISA.
// Not safe while a matmul runs.
Status set_active_isa(Isa isa);

}  // namespace lattice::engine
