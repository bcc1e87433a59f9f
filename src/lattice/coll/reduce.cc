// Reduce kernels: plain loops over restrict-free spans that GCC vectorizes at -O3 (the
// hot case, f32 sum, becomes packed adds). Integer ops go through unsigned arithmetic so
// overflow wraps instead of being undefined.
#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "lattice/coll/dtype.h"

namespace lattice::coll {

std::string_view to_string(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
  }
  return "?";
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProd: return "prod";
  }
  return "?";
}

Result<DType> parse_dtype(std::string_view s) {
  for (DType t : kAllDTypes)
    if (to_string(t) == s) return t;
  return InvalidArgument("unknown dtype '" + std::string(s) + "' (f32, f16, bf16, f64, i32, i64)");
}

Result<ReduceOp> parse_reduce_op(std::string_view s) {
  for (ReduceOp op : kAllReduceOps)
    if (to_string(op) == s) return op;
  return InvalidArgument("unknown reduce op '" + std::string(s) + "' (sum, max, min, prod)");
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        man <<= 1;
        ++e;
      } while ((man & 0x400u) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13 | (man ? 0x400000u : 0);
  } else {
    bits = sign | (exp + 112) << 23 | man << 13;
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs >= 0x38800000u) {                                  // normal half
    uint32_t mant_rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return uint16_t(sign | ((mant_rounded - 0x38000000u) >> 13));
  }
  // Subnormal half (or zero): value = abs_float; half units of 2^-24.
  float af = std::bit_cast<float>(abs);
  // Adding 0.5f shifts the value so the low mantissa bits hold the 2^-24 units, rounded
  // to nearest even by the FPU.
  float shifted = af + 0.5f;
  return uint16_t(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
}

float bf16_to_f32(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }

uint16_t f32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}

namespace {

template <class T, class F>
void loop(void* dst, const void* a, const void* b, size_t n, F f) {
  // memcpy-free typed access: buffers come from user memory with natural alignment.
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = f(x[i], y[i]);
}

template <class T>
void typed(ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum: return loop<T>(dst, a, b, n, [](T p, T q) { return T(p + q); });
    case ReduceOp::kProd: return loop<T>(dst, a, b, n, [](T p, T q) { return T(p * q); });
    // max/min: written as selects so NaN handling is fixed (a NaN in b is ignored, in a kept),
    // identical on every rank because the operand order is fixed by the plan.
    case ReduceOp::kMax: return loop<T>(dst, a, b, n, [](T p, T q) { return q > p ? q : p; });
    case ReduceOp::kMin: return loop<T>(dst, a, b, n, [](T p, T q) { return q < p ? q : p; });
  }
}

template <class T, class U>
void wrapping(ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum: return loop<T>(dst, a, b, n, [](T p, T q) { return T(U(p) + U(q)); });
    case ReduceOp::kProd: return loop<T>(dst, a, b, n, [](T p, T q) { return T(U(p) * U(q)); });
    default: return typed<T>(op, dst, a, b, n);
  }
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void half(ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  // Blocks of 256: widen to f32, combine with the f32 kernel, narrow.
  float fa[256], fb[256];
  for (size_t i = 0; i < n; i += 256) {
    size_t m = std::min<size_t>(256, n - i);
    for (size_t k = 0; k < m; ++k) {
      fa[k] = Widen(x[i + k]);
      fb[k] = Widen(y[i + k]);
    }
    typed<float>(op, fa, fa, fb, m);
    for (size_t k = 0; k < m; ++k) d[i + k] = Narrow(fa[k]);
  }
}

}  // namespace

void reduce(DType t, ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  switch (t) {
    case DType::kF32: return typed<float>(op, dst, a, b, n);
    case DType::kF64: return typed<double>(op, dst, a, b, n);
    case DType::kI32: return wrapping<int32_t, uint32_t>(op, dst, a, b, n);
    case DType::kI64: return wrapping<int64_t, uint64_t>(op, dst, a, b, n);
    case DType::kF16: return half<f16_to_f32, f32_to_f16>(op, dst, a, b, n);
    case DType::kBF16: return half<bf16_to_f32, f32_to_bf16>(op, dst, a, b, n);
  }
}

void reduce_ordered(DType t, ReduceOp op, void* dst, const void* const* srcs, size_t k, size_t n) {
  if (k == 0 || n == 0) return;
  const size_t es = dtype_size(t);
  if (k == 1) {
    if (dst != srcs[0]) std::memmove(dst, srcs[0], n * es);
    return;
  }
  const size_t block = std::max<size_t>(1, 8192 / es);  // dst block stays in L1 across the k-1 passes
  auto* d = static_cast<std::byte*>(dst);
  for (size_t i = 0; i < n; i += block) {
    const size_t m = std::min(block, n - i), off = i * es;
    reduce(t, op, d + off, static_cast<const std::byte*>(srcs[0]) + off, static_cast<const std::byte*>(srcs[1]) + off, m);
    for (size_t q = 2; q < k; ++q) reduce(t, op, d + off, d + off, static_cast<const std::byte*>(srcs[q]) + off, m);
  }
}

}  // namespace lattice::coll
