// Float <-> block conversion for every weight type the engine supports (F32, F16, BF16, Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K), in the exact GGUF/ggml block layouts. Scalar code: used by
// make-model, tests and slow paths; the matmul kernels never call it per token.
//
// Thread safety: pure functions, safe to call concurrently. No allocation.
#pragma once

#include <cstddef>

#include "lattice/core/status.h"
#include "lattice/engine/quant/types.h"

namespace lattice::engine {

// Quantizes `n` floats from `src` into `dst`, which must hold row_bytes(type, n) bytes.
// Fails (kInvalidArgument) if n is not a whole number of blocks or the type is unsupported.
// Non-finite inputs are not rejected; they produce unspecified (but in-bounds) blocks.
Status quantize_row(TensorType type, const float* src, void* dst, size_t n);

// Expands `n` elements stored in `src` (row_bytes(type, n) bytes) into floats.
Status dequantize_row(TensorType type, const void* src, float* dst, size_t n);

// True for the types quantize_row / dequantize_row / matmul accept.
bool is_supported_weight_type(TensorType type);

}  // namespace lattice::engine
