// Half-precision (IEEE binary16) and bfloat16 conversions, scalar and portable.
//
// fp32_to_fp16 rounds to nearest even, keeps NaN a NaN, and overflows to infinity;
// fp32_to_bf16 rounds to nearest even (NaN kept quiet). The vector kernels use F16C /
// AVX-512 instructions that round the same way, so scalar and SIMD paths agree bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace lattice::engine {

inline float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return bits_to_f32(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_to_f32(sign);
  // Subnormal half: value = mant * 2^-24, exact in float.
  float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -v : v;
}

inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = f32_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u);  // inf / NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504: infinity
  if (ax < 0x38800000u) {
    // Result is subnormal (or zero): scale to units of 2^-24 and round to nearest even.
    if (ax < 0x33000000u) return sign;  // below half the smallest subnormal
    const uint32_t e = ax >> 23;
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 113 < e+... : value = m * 2^(e-150); want units of 2^-24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  // Normal: rebias exponent, round mantissa 23 -> 10 bits to nearest even.
  uint32_t r = ax - 0x38000000u;  // exponent bias 127 -> 15
  const uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // a carry into the exponent is right
  return sign | static_cast<uint16_t>(r);
}

inline float bf16_to_fp32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace lattice::engine
