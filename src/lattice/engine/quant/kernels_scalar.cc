// Scalar reference kernels: the oracle the SIMD kernels are tested against, and the fallback
// on CPUs without AVX2. Plain loops in the order the format describes, nothing clever.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "lattice/engine/quant/blocks.h"
#include "lattice/engine/quant/fp16.h"
#include "lattice/engine/quant/kernels.h"

namespace lattice::engine::detail {
namespace {

void quant_q8(const float* x, size_t k, int8_t* q, float* d, int32_t* s) {
  for (size_t b = 0; b < k / kQK; ++b, x += kQK, q += kQK) {
    float amax = 0;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float db = amax / 127.0f;
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < kQK; ++i) {
      q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
      sum += q[i];
    }
    d[b] = db;
    s[b] = sum;
  }
}

void quant_q8k(const float* x, size_t k, int8_t* q, float* d, int16_t* bsum) {
  for (size_t b = 0; b < k / kQKK; ++b, x += kQKK, q += kQKK) {
    float amax = 0;
    for (int i = 0; i < kQKK; ++i) amax = std::max(amax, std::fabs(x[i]));
    d[b] = amax / 127.0f;
    const float id = amax > 0 ? 127.0f / amax : 0.0f;
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) {
        q[16 * j + i] = static_cast<int8_t>(std::nearbyint(x[16 * j + i] * id));
        sum += q[16 * j + i];
      }
      bsum[16 * b + j] = static_cast<int16_t>(sum);
    }
  }
}

float dot_f32(const void* row, const Act& a, size_t tok) {
  const float* w = static_cast<const float*>(row);
  const float* x = a.f32 + tok * a.k;
  double sum = 0;
  for (size_t i = 0; i < a.k; ++i) sum += double(w[i]) * x[i];
  return static_cast<float>(sum);
}
float dot_f16(const void* row, const Act& a, size_t tok) {
  const uint16_t* w = static_cast<const uint16_t*>(row);
  const float* x = a.f32 + tok * a.k;
  double sum = 0;
  for (size_t i = 0; i < a.k; ++i) sum += double(fp16_to_fp32(w[i])) * x[i];
  return static_cast<float>(sum);
}
float dot_bf16(const void* row, const Act& a, size_t tok) {
  const uint16_t* w = static_cast<const uint16_t*>(row);
  const float* x = a.f32 + tok * a.k;
  double sum = 0;
  for (size_t i = 0; i < a.k; ++i) sum += double(bf16_to_fp32(w[i])) * x[i];
  return static_cast<float>(sum);
}

float dot_q8_0(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ8_0*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  float sum = 0;
  for (size_t b = 0; b < nb; ++b) {
    int32_t acc = 0;
    for (int i = 0; i < kQK; ++i) acc += int32_t(w[b].qs[i]) * q[b * kQK + i];
    sum += fp16_to_fp32(w[b].d) * d[b] * static_cast<float>(acc);
  }
  return sum;
}

float dot_q4_0(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ4_0*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  float sum = 0;
  for (size_t b = 0; b < nb; ++b) {
    int32_t acc = 0;
    for (int i = 0; i < 16; ++i) {
      acc += ((w[b].qs[i] & 15) - 8) * q[b * kQK + i];
      acc += ((w[b].qs[i] >> 4) - 8) * q[b * kQK + 16 + i];
    }
    sum += fp16_to_fp32(w[b].d) * d[b] * static_cast<float>(acc);
  }
  return sum;
}

// Q4_1 / Q5_0 / Q5_1 rows: sum_b dw*dx*(sum u*q - off*s) + m*dx*s, s the block's sum of q.
template <int kBits, bool kMin, class Block>
float dot_b32(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const Block*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  const int32_t* s = a.s + tok * nb;
  constexpr int off = kMin ? 0 : (1 << (kBits - 1));
  float sum = 0;
  for (size_t b = 0; b < nb; ++b) {
    uint32_t qh = 0;
    if constexpr (kBits == 5) qh = q5_high_bits(w[b].qh);
    int32_t acc = 0;
    for (int i = 0; i < 16; ++i) {
      acc += ((w[b].qs[i] & 15) | ((qh >> i) & 1) << 4) * q[b * kQK + i];
      acc += ((w[b].qs[i] >> 4) | ((qh >> (i + 16)) & 1) << 4) * q[b * kQK + 16 + i];
    }
    sum += fp16_to_fp32(w[b].d) * d[b] * static_cast<float>(acc - off * s[b]);
    if constexpr (kMin) sum += fp16_to_fp32(w[b].m) * d[b] * static_cast<float>(s[b]);
  }
  return sum;
}

float dot_iq4_nl(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockIQ4_NL*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  float sum = 0;
  for (size_t b = 0; b < nb; ++b) {
    int32_t acc = 0;
    for (int i = 0; i < 16; ++i)
      acc += kIq4nlLevels[w[b].qs[i] & 15] * q[b * kQK + i] + kIq4nlLevels[w[b].qs[i] >> 4] * q[b * kQK + 16 + i];
    sum += fp16_to_fp32(w[b].d) * d[b] * static_cast<float>(acc);
  }
  return sum;
}

template <int kBits, class Block>
float dot_k4like(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const Block*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  const int16_t* bs = a.bsum + tok * (a.k / 16);
  float sum = 0;
  for (size_t b = 0; b < nb; ++b, q += kQKK, bs += 16) {
    const Block& blk = w[b];
    int32_t acc_scaled = 0, acc_min = 0;
    for (int c = 0; c < 4; ++c) {
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * c + half;
        int sc, m;
        k4_scale_min(blk.scales, j, &sc, &m);
        int32_t acc = 0;
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = blk.qs[32 * c + l];
          int v = half ? (byte >> 4) : (byte & 15);
          if constexpr (kBits == 5) {
            if (blk.qh[l] & (1u << j)) v += 16;
          }
          acc += v * q[32 * j + l];
        }
        acc_scaled += sc * acc;
        acc_min += m * (bs[2 * j] + bs[2 * j + 1]);
      }
    }
    sum += dx[b] * (fp16_to_fp32(blk.d) * acc_scaled - fp16_to_fp32(blk.dmin) * acc_min);
  }
  return sum;
}

float dot_q6_k(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ6_K*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  float sum = 0;
  for (size_t b = 0; b < nb; ++b, q += kQKK) {
    const BlockQ6_K& blk = w[b];
    int32_t acc = 0;
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, r = e % 128, kq = r / 32, l = r % 32;
      const uint8_t lo = blk.ql[64 * h + 32 * (kq & 1) + l];
      const int v = ((kq < 2 ? (lo & 15) : (lo >> 4)) | (((blk.qh[32 * h + l] >> (2 * kq)) & 3) << 4)) - 32;
      acc += blk.scales[e / 16] * v * q[e];
    }
    sum += dx[b] * fp16_to_fp32(blk.d) * static_cast<float>(acc);
  }
  return sum;
}

float dot_q2_k(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ2_K*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  const int16_t* bs = a.bsum + tok * (a.k / 16);
  float sum = 0;
  for (size_t b = 0; b < nb; ++b, q += kQKK, bs += 16) {
    const BlockQ2_K& blk = w[b];
    int32_t acc = 0, acc_min = 0;
    for (int e = 0; e < kQKK; ++e)
      acc += (blk.scales[e / 16] & 15) * ((blk.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3) * q[e];
    for (int s = 0; s < 16; ++s) acc_min += (blk.scales[s] >> 4) * bs[s];
    sum += dx[b] * (fp16_to_fp32(blk.d) * static_cast<float>(acc) - fp16_to_fp32(blk.dmin) * static_cast<float>(acc_min));
  }
  return sum;
}

float dot_q3_k(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ3_K*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  float sum = 0;
  for (size_t b = 0; b < nb; ++b, q += kQKK) {
    const BlockQ3_K& blk = w[b];
    int32_t acc = 0;
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, j = (e % 128) / 32, l = e % 32;
      const int u = ((blk.qs[32 * h + l] >> (2 * j)) & 3) | (((blk.hmask[l] >> (4 * h + j)) & 1) << 2);
      acc += (q3_scale(blk.scales, e / 16) - 32) * (u - 4) * q[e];
    }
    sum += dx[b] * fp16_to_fp32(blk.d) * static_cast<float>(acc);
  }
  return sum;
}

template <bool kQ4>
void tile_packed(const uint8_t* group, size_t nb, const Act& a, size_t t0, size_t nt, float* out) {
  const size_t bb = kQ4 ? 256 : 512;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(group + nb * bb);
  for (size_t i = 0; i < nt; ++i) {
    const size_t t = t0 + i;
    const int8_t* q = a.q + t * a.k;
    const float* d = a.d + t * nb;
    for (size_t r = 0; r < kPackRows; ++r) {
      float sum = 0;
      for (size_t b = 0; b < nb; ++b) {
        const uint8_t* blk = group + b * bb;
        int32_t acc = 0;
        if constexpr (kQ4) {
          for (int j = 0; j < 16; ++j) {
            const uint8_t byte = blk[(j / 4) * 64 + r * 4 + j % 4];
            acc += ((byte & 15) - 8) * q[b * kQK + j] + ((byte >> 4) - 8) * q[b * kQK + 16 + j];
          }
        } else {
          for (int j = 0; j < 32; ++j) acc += (int(blk[(j / 4) * 64 + r * 4 + j % 4]) - 128) * q[b * kQK + j];
        }
        sum += fp16_to_fp32(scales[b * kPackRows + r]) * d[b] * static_cast<float>(acc);
      }
      out[i * kPackRows + r] = sum;
    }
  }
}

template <int kBits>
void tile_k4(const uint8_t* group, size_t nsb, const Act& a, size_t t0, size_t nt, float* out) {
  using L = K4Layout<kBits>;
  for (size_t i = 0; i < nt; ++i) {
    const size_t t = t0 + i;
    const int8_t* q = a.q + t * a.k;
    const float* dx = a.d + t * nsb;
    const int16_t* bs = a.bsum + t * (a.k / 16);
    for (size_t r = 0; r < kPackRows; ++r) {
      float sum = 0;
      for (size_t s = 0; s < nsb; ++s) {
        const uint8_t* sb = group + s * L::kBytes;
        uint16_t dh, mh;
        std::memcpy(&dh, sb + L::kD + 2 * r, 2);
        std::memcpy(&mh, sb + L::kDmin + 2 * r, 2);
        int32_t isum = 0, imin = 0;
        for (int j = 0; j < 8; ++j) {
          const int sc = sb[L::kScales + j * 16 + r], m = sb[L::kMins + (j / 2) * 32 + 2 * r + j % 2];
          const int8_t* xq = q + s * kQKK + 32 * j;
          int32_t dot = 0;
          for (int e = 0; e < 16; ++e) {
            const uint8_t byte = sb[j * 256 + (e / 4) * 64 + r * 4 + e % 4];
            int lo = byte & 15, hi = byte >> 4;
            if constexpr (kBits == 5) {
              const uint8_t hb = sb[L::kHighBits + j * 64 + r * 4 + e % 4];
              lo |= ((hb >> (2 * (e / 4))) & 1) << 4;
              hi |= ((hb >> (2 * (e / 4) + 1)) & 1) << 4;
            }
            dot += lo * xq[e] + hi * xq[16 + e];
          }
          isum += sc * dot;
          imin += m * (bs[s * 16 + 2 * j] + bs[s * 16 + 2 * j + 1]);
        }
        sum += dx[s] * (fp16_to_fp32(dh) * isum - fp16_to_fp32(mh) * imin);
      }
      out[i * kPackRows + r] = sum;
    }
  }
}

void tile_q6_k(const uint8_t* group, size_t nsb, const Act& a, size_t t0, size_t nt, float* out) {
  for (size_t i = 0; i < nt; ++i) {
    const size_t t = t0 + i;
    const int8_t* q = a.q + t * a.k;
    const float* dx = a.d + t * nsb;
    for (size_t r = 0; r < kPackRows; ++r) {
      float sum = 0;
      for (size_t s = 0; s < nsb; ++s) {
        const uint8_t* sb = group + s * kQ6KPackedBytes;
        uint16_t dh;
        std::memcpy(&dh, sb + 3328 + 2 * r, 2);
        int32_t isum = 0;
        for (int j = 0; j < 8; ++j) {
          const int8_t* xq = q + s * kQKK + 32 * j;
          for (int e = 0; e < 16; ++e) {
            const int i4 = e / 4, m = e % 4, p = i4 % 2, shift = i4 < 2 ? 0 : 4;
            const uint8_t nib = sb[j * 256 + i4 * 64 + r * 4 + m];
            const uint8_t hb = sb[2048 + j * 128 + p * 64 + r * 4 + m] >> shift;
            const int v_lo = ((nib & 15) | ((hb & 3) << 4)) - 32;
            const int v_hi = ((nib >> 4) | (((hb >> 2) & 3) << 4)) - 32;
            const int sc_lo = static_cast<int8_t>(sb[3072 + (2 * j) * 16 + r]);
            const int sc_hi = static_cast<int8_t>(sb[3072 + (2 * j + 1) * 16 + r]);
            isum += sc_lo * v_lo * xq[e] + sc_hi * v_hi * xq[16 + e];
          }
        }
        sum += dx[s] * fp16_to_fp32(dh) * static_cast<float>(isum);
      }
      out[i * kPackRows + r] = sum;
    }
  }
}

}  // namespace

const KernelTable& scalar_kernels() {
  static const KernelTable t = [] {
    KernelTable k{
        "scalar",        quant_q8,   quant_q8k, dot_f32, dot_f16, dot_bf16, dot_q8_0, dot_q4_0,
        dot_k4like<4, BlockQ4_K>, dot_k4like<5, BlockQ5_K>, dot_q6_k, tile_packed<true>, tile_packed<false>, tile_k4<4>, tile_k4<5>, tile_q6_k,
    };
    k.dot_q2_k = dot_q2_k;
    k.dot_q3_k = dot_q3_k;
    k.dot_q4_1 = dot_b32<4, true, BlockQ4_1>;
    k.dot_q5_0 = dot_b32<5, false, BlockQ5_0>;
    k.dot_q5_1 = dot_b32<5, true, BlockQ5_1>;
    k.dot_iq4_nl = dot_iq4_nl;
    return k;
  }();
  return t;
}

}  // namespace lattice::engine::detail
