// Element types and reduction operators of the collectives, and the reduce kernels.
//
// Kernels compute dst[i] = op(a[i], b[i]) elementwise (dst may alias a or b exactly, never
// partially). f16 and bf16 are widened to f32, combined, and rounded back to nearest-even,
// so a given (a, b) pair always gives the same bits; callers fix the ORDER in which
// contributions are combined, so every rank gets identical results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lattice/core/status.h"

namespace lattice::coll {

enum class DType : uint8_t { kF32, kF16, kBF16, kF64, kI32, kI64 };
enum class ReduceOp : uint8_t { kSum, kMax, kMin, kProd };

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI32, DType::kI64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF64:
    case DType::kI64: return 8;
  }
  return 1;
}

std::string_view to_string(DType t);
std::string_view to_string(ReduceOp op);
Result<DType> parse_dtype(std::string_view s);
Result<ReduceOp> parse_reduce_op(std::string_view s);

// dst = op(a, b) over n elements. Integer overflow wraps (two's complement), never UB.
void reduce(DType t, ReduceOp op, void* dst, const void* a, const void* b, size_t n);

// dst = srcs[0] op srcs[1] op ... op srcs[k-1] over n elements, combined left to right: the
// same bits as k-1 calls of reduce(), but in cache-sized blocks, so each source is read once
// and dst written once (the binary passes read and write dst k-1 times). dst may alias
// srcs[0] exactly, no other source.
void reduce_ordered(DType t, ReduceOp op, void* dst, const void* const* srcs, size_t k, size_t n);

// IEEE binary16 / bfloat16 conversions (round to nearest even; NaN stays NaN).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

}  // namespace lattice::coll
