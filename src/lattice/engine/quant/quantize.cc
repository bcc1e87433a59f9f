#include "lattice/engine/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "lattice/engine/quant/blocks.h"
#include "lattice/engine/quant/fp16.h"

namespace lattice::engine {

using namespace detail;

namespace {

int round_int(float v) { return static_cast<int>(std::lrintf(v)); }

void quantize_q8_0(const float* x, BlockQ8_0* y, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQK) {
    float amax = 0;
    for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    // Quantize with the scale as stored (fp16), so the stored integers fit the stored scale.
    y[b].d = fp32_to_fp16(d);
    const float ds = fp16_to_fp32(y[b].d);
    const float id = ds > 0 ? 1.0f / ds : 0.0f;
    for (int i = 0; i < kQK; ++i) y[b].qs[i] = static_cast<int8_t>(std::clamp(round_int(x[i] * id), -127, 127));
  }
}

void quantize_q4_0(const float* x, BlockQ4_0* y, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQK) {
    // The element of largest magnitude maps to -8 exactly, using the asymmetric range fully.
    float vmax = 0;
    for (int i = 0; i < kQK; ++i)
      if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
    y[b].d = fp32_to_fp16(vmax / -8.0f);
    const float ds = fp16_to_fp32(y[b].d);
    const float id = ds != 0 ? 1.0f / ds : 0.0f;
    uint8_t q[kQK];
    for (int i = 0; i < kQK; ++i) q[i] = static_cast<uint8_t>(std::clamp(round_int(x[i] * id) + 8, 0, 15));
    for (int i = 0; i < 16; ++i) y[b].qs[i] = static_cast<uint8_t>(q[i] | (q[i + 16] << 4));
  }
}

// Q5_0: as Q4_0 with 5 bits, the element of largest magnitude mapping to -16.
void quantize_q5_0(const float* x, BlockQ5_0* y, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQK) {
    float vmax = 0;
    for (int i = 0; i < kQK; ++i)
      if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
    y[b].d = fp32_to_fp16(vmax / -16.0f);
    const float ds = fp16_to_fp32(y[b].d);
    const float id = ds != 0 ? 1.0f / ds : 0.0f;
    uint32_t qh = 0;
    for (int i = 0; i < 16; ++i) {
      const int lo = std::clamp(round_int(x[i] * id) + 16, 0, 31), hi = std::clamp(round_int(x[i + 16] * id) + 16, 0, 31);
      y[b].qs[i] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      qh |= uint32_t(lo >> 4) << i | uint32_t(hi >> 4) << (i + 16);
    }
    for (int i = 0; i < 4; ++i) y[b].qh[i] = static_cast<uint8_t>(qh >> (8 * i));
  }
}

// IQ4_NL: the element of largest magnitude maps to the level -127; each element then takes
// its nearest level, and d is refitted by least squares over the chosen levels.
void quantize_iq4_nl(const float* x, BlockIQ4_NL* y, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQK) {
    float vmax = 0;
    for (int i = 0; i < kQK; ++i)
      if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
    const float d0 = vmax / -127.0f, id = d0 != 0 ? 1.0f / d0 : 0.0f;
    uint8_t q[kQK];
    float sxv = 0, svv = 0;
    for (int i = 0; i < kQK; ++i) {
      const float t = x[i] * id;
      int best = 0;
      for (int j = 1; j < 16; ++j)
        if (std::fabs(t - kIq4nlLevels[j]) < std::fabs(t - kIq4nlLevels[best])) best = j;
      q[i] = static_cast<uint8_t>(best);
      sxv += x[i] * kIq4nlLevels[best];
      svv += float(kIq4nlLevels[best]) * kIq4nlLevels[best];
    }
    y[b].d = fp32_to_fp16(d0 != 0 && svv > 0 ? sxv / svv : 0.0f);
    for (int i = 0; i < 16; ++i) y[b].qs[i] = static_cast<uint8_t>(q[i] | (q[i + 16] << 4));
  }
}

// Q4_1 / Q5_1: x ~ d*q + m over the block's range, q in 0..2^bits-1.
template <int kBits, class Block>
void quantize_b32_min(const float* x, Block* y, size_t nb) {
  constexpr int nmax = (1 << kBits) - 1;
  for (size_t b = 0; b < nb; ++b, x += kQK) {
    const auto [lo, hi] = std::minmax_element(x, x + kQK);
    y[b].d = fp32_to_fp16((*hi - *lo) / nmax);
    y[b].m = fp32_to_fp16(*lo);
    const float ds = fp16_to_fp32(y[b].d), ms = fp16_to_fp32(y[b].m);
    const float id = ds > 0 ? 1.0f / ds : 0.0f;
    uint32_t qh = 0;
    for (int i = 0; i < 16; ++i) {
      const int a = std::clamp(round_int((x[i] - ms) * id), 0, nmax), c = std::clamp(round_int((x[i + 16] - ms) * id), 0, nmax);
      y[b].qs[i] = static_cast<uint8_t>((a & 15) | ((c & 15) << 4));
      qh |= uint32_t(a >> 4) << i | uint32_t(c >> 4) << (i + 16);
    }
    if constexpr (kBits == 5)
      for (int i = 0; i < 4; ++i) y[b].qh[i] = static_cast<uint8_t>(qh >> (8 * i));
  }
}

// Dequantizes the 32-element types: x = d * (u - offset) + m, u the 4- or 5-bit value.
template <int kBits, bool kMin, class Block>
void dequantize_b32(const Block* y, float* x, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQK) {
    const float d = fp16_to_fp32(y[b].d);
    float m = 0;
    if constexpr (kMin) m = fp16_to_fp32(y[b].m);
    uint32_t qh = 0;
    if constexpr (kBits == 5) qh = q5_high_bits(y[b].qh);
    constexpr int off = kMin ? 0 : (1 << (kBits - 1));
    for (int i = 0; i < 16; ++i) {
      const int lo = (y[b].qs[i] & 15) | ((qh >> i) & 1) << 4, hi = (y[b].qs[i] >> 4) | ((qh >> (i + 16)) & 1) << 4;
      x[i] = d * (lo - off) + m;
      x[i + 16] = d * (hi - off) + m;
    }
  }
}

// Asymmetric sub-block quantization shared by Q4_K (nmax 15) and Q5_K (nmax 31): x ~ s*q - m
// with q in [0, nmax], m >= 0. Returns per-sub-block (s, m) search results; the search tries a
// few scales around (max-min)/nmax and keeps the one with the least squared error.
void fit_scale_min(const float* x, int n, int nmax, float* scale, float* min_out) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  lo = std::min(lo, 0.0f);
  if (hi <= lo) {
    *scale = 0;
    *min_out = -lo;
    return;
  }
  float best_s = (hi - lo) / nmax, best_m = -lo, best_err = INFINITY;
  for (int step = -4; step <= 4; ++step) {
    const float s = (hi - lo) / (nmax + 0.25f * step);
    if (s <= 0) continue;
    // For fixed q, the best (s, m) solve a 2x2 least squares; here keep m = -lo, refit s.
    float err = 0, sqq = 0, sxq = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(round_int((x[i] - lo) / s), 0, nmax);
      sqq += static_cast<float>(q) * q;
      sxq += (x[i] - lo) * q;
    }
    const float s2 = sqq > 0 ? sxq / sqq : s;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(round_int((x[i] - lo) / s2), 0, nmax);
      const float e = s2 * q + lo - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_s = s2;
    }
  }
  *scale = best_s;
  *min_out = best_m;
}

// Q4_K and Q5_K: 8 sub-blocks of 32, 6-bit scales and mins under fp16 super-scales.
template <int kBits, class Block>
void quantize_k4like(const float* x, Block* y, size_t nb) {
  constexpr int nmax = (1 << kBits) - 1;
  for (size_t b = 0; b < nb; ++b, x += kQKK) {
    float sc[8], mn[8];
    for (int j = 0; j < 8; ++j) fit_scale_min(x + 32 * j, 32, nmax, &sc[j], &mn[j]);
    const float max_sc = *std::max_element(sc, sc + 8), max_mn = *std::max_element(mn, mn + 8);
    Block& blk = y[b];
    std::memset(&blk, 0, sizeof(blk));
    blk.d = fp32_to_fp16(max_sc / 63.0f);
    blk.dmin = fp32_to_fp16(max_mn / 63.0f);
    const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
    uint8_t qsc[8], qmn[8];
    for (int j = 0; j < 8; ++j) {
      qsc[j] = static_cast<uint8_t>(d > 0 ? std::clamp(round_int(sc[j] / d), 0, 63) : 0);
      // Round the min up so that x + m stays >= 0 for the sub-block's smallest element.
      qmn[j] = static_cast<uint8_t>(dmin > 0 ? std::clamp(static_cast<int>(std::ceil(mn[j] / dmin - 1e-4f)), 0, 63) : 0);
    }
    k4_pack_scales(qsc, qmn, blk.scales);
    uint8_t q[kQKK];
    for (int j = 0; j < 8; ++j) {
      const float ds = d * qsc[j], dm = dmin * qmn[j];
      const float id = ds > 0 ? 1.0f / ds : 0.0f;
      for (int i = 0; i < 32; ++i) q[32 * j + i] = static_cast<uint8_t>(std::clamp(round_int((x[32 * j + i] + dm) * id), 0, nmax));
    }
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t a = q[64 * c + l], bq = q[64 * c + 32 + l];
        blk.qs[32 * c + l] = static_cast<uint8_t>((a & 15) | ((bq & 15) << 4));
        if constexpr (kBits == 5) {
          if (a & 16) blk.qh[l] |= static_cast<uint8_t>(1u << (2 * c));
          if (bq & 16) blk.qh[l] |= static_cast<uint8_t>(2u << (2 * c));
        }
      }
    }
  }
}

template <int kBits, class Block>
void dequantize_k4like(const Block* y, float* x, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQKK) {
    const Block& blk = y[b];
    const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      k4_scale_min(blk.scales, 2 * c, &sc0, &m0);
      k4_scale_min(blk.scales, 2 * c + 1, &sc1, &m1);
      for (int l = 0; l < 32; ++l) {
        int a = blk.qs[32 * c + l] & 15, bq = blk.qs[32 * c + l] >> 4;
        if constexpr (kBits == 5) {
          if (blk.qh[l] & (1u << (2 * c))) a += 16;
          if (blk.qh[l] & (2u << (2 * c))) bq += 16;
        }
        x[64 * c + l] = d * sc0 * a - dmin * m0;
        x[64 * c + 32 + l] = d * sc1 * bq - dmin * m1;
      }
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* y, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQKK) {
    float sc[16];
    for (int j = 0; j < 16; ++j) {
      float vmax = 0;
      for (int i = 0; i < 16; ++i)
        if (std::fabs(x[16 * j + i]) > std::fabs(vmax)) vmax = x[16 * j + i];
      sc[j] = vmax / -32.0f;  // largest magnitude maps to -32, the asymmetric end of the range
    }
    float amax = 0;
    for (float s : sc) amax = std::max(amax, std::fabs(s));
    BlockQ6_K& blk = y[b];
    std::memset(&blk, 0, sizeof(blk));
    blk.d = fp32_to_fp16(amax / 127.0f);
    const float d = fp16_to_fp32(blk.d);
    uint8_t q[kQKK];
    for (int j = 0; j < 16; ++j) {
      blk.scales[j] = static_cast<int8_t>(d > 0 ? std::clamp(round_int(sc[j] / d), -127, 127) : 0);
      const float ds = d * blk.scales[j];
      const float id = ds != 0 ? 1.0f / ds : 0.0f;
      for (int i = 0; i < 16; ++i) q[16 * j + i] = static_cast<uint8_t>(std::clamp(round_int(x[16 * j + i] * id), -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q0 = q[128 * h + l], q1 = q[128 * h + 32 + l], q2 = q[128 * h + 64 + l], q3 = q[128 * h + 96 + l];
        blk.ql[64 * h + l] = static_cast<uint8_t>((q0 & 15) | ((q2 & 15) << 4));
        blk.ql[64 * h + 32 + l] = static_cast<uint8_t>((q1 & 15) | ((q3 & 15) << 4));
        blk.qh[32 * h + l] = static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
      }
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* y, float* x, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQKK) {
    const BlockQ6_K& blk = y[b];
    const float d = fp16_to_fp32(blk.d);
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo0 = blk.ql[64 * h + l], lo1 = blk.ql[64 * h + 32 + l], hi = blk.qh[32 * h + l];
        const int q0 = ((lo0 & 15) | ((hi & 3) << 4)) - 32;
        const int q1 = ((lo1 & 15) | (((hi >> 2) & 3) << 4)) - 32;
        const int q2 = ((lo0 >> 4) | (((hi >> 4) & 3) << 4)) - 32;
        const int q3 = ((lo1 >> 4) | (((hi >> 6) & 3) << 4)) - 32;
        const int8_t* sc = blk.scales + 8 * h + l / 16;
        x[128 * h + l] = d * sc[0] * q0;
        x[128 * h + 32 + l] = d * sc[2] * q1;
        x[128 * h + 64 + l] = d * sc[4] * q2;
        x[128 * h + 96 + l] = d * sc[6] * q3;
      }
    }
  }
}

// Q2_K: 16 sub-blocks of 16, x ~ s*q - m with q in 0..3; s and m as 4-bit multiples of the
// super-block's fp16 d and dmin.
void quantize_q2_k(const float* x, BlockQ2_K* y, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQKK) {
    float sc[16], mn[16];
    for (int j = 0; j < 16; ++j) fit_scale_min(x + 16 * j, 16, 3, &sc[j], &mn[j]);
    BlockQ2_K& blk = y[b];
    std::memset(&blk, 0, sizeof(blk));
    blk.d = fp32_to_fp16(*std::max_element(sc, sc + 16) / 15.0f);
    blk.dmin = fp32_to_fp16(*std::max_element(mn, mn + 16) / 15.0f);
    const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
    for (int j = 0; j < 16; ++j) {
      const int qs = d > 0 ? std::clamp(round_int(sc[j] / d), 0, 15) : 0;
      const int qm = dmin > 0 ? std::clamp(static_cast<int>(std::ceil(mn[j] / dmin - 1e-4f)), 0, 15) : 0;
      blk.scales[j] = static_cast<uint8_t>(qs | (qm << 4));
      const float ds = d * qs, dm = dmin * qm, id = ds > 0 ? 1.0f / ds : 0.0f;
      for (int i = 0; i < 16; ++i) {
        const int e = 16 * j + i, q = std::clamp(round_int((x[e] + dm) * id), 0, 3);
        blk.qs[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(q << (2 * ((e % 128) / 32)));
      }
    }
  }
}

void dequantize_q2_k(const BlockQ2_K* y, float* x, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQKK) {
    const BlockQ2_K& blk = y[b];
    const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
    for (int e = 0; e < kQKK; ++e) {
      const int q = (blk.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
      const uint8_t sm = blk.scales[e / 16];
      x[e] = d * (sm & 15) * q - dmin * (sm >> 4);
    }
  }
}

// Q3_K: 16 sub-blocks of 16, symmetric: x ~ s*q with q in -4..3 (the value of largest
// magnitude maps to -4), s a signed 6-bit multiple of the fp16 d.
void quantize_q3_k(const float* x, BlockQ3_K* y, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQKK) {
    float sc[16], amax = 0;
    for (int j = 0; j < 16; ++j) {
      float vmax = 0;
      for (int i = 0; i < 16; ++i)
        if (std::fabs(x[16 * j + i]) > std::fabs(vmax)) vmax = x[16 * j + i];
      sc[j] = vmax / -4.0f;
      amax = std::max(amax, std::fabs(sc[j]));
    }
    BlockQ3_K& blk = y[b];
    std::memset(&blk, 0, sizeof(blk));
    blk.d = fp32_to_fp16(amax / 31.0f);
    const float d = fp16_to_fp32(blk.d);
    uint8_t packed[16];
    for (int j = 0; j < 16; ++j) {
      const int qs = d > 0 ? std::clamp(round_int(sc[j] / d), -32, 31) : 0;
      packed[j] = static_cast<uint8_t>(qs + 32);
      const float ds = d * qs, id = ds != 0 ? 1.0f / ds : 0.0f;
      for (int i = 0; i < 16; ++i) {
        const int e = 16 * j + i, u = std::clamp(round_int(x[e] * id), -4, 3) + 4;
        const int h = e / 128, jj = (e % 128) / 32, l = e % 32;
        blk.qs[32 * h + l] |= static_cast<uint8_t>((u & 3) << (2 * jj));
        if (u & 4) blk.hmask[l] |= static_cast<uint8_t>(1u << (4 * h + jj));
      }
    }
    q3_pack_scales(packed, blk.scales);
  }
}

void dequantize_q3_k(const BlockQ3_K* y, float* x, size_t nb) {
  for (size_t b = 0; b < nb; ++b, x += kQKK) {
    const BlockQ3_K& blk = y[b];
    const float d = fp16_to_fp32(blk.d);
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, jj = (e % 128) / 32, l = e % 32;
      const int u = ((blk.qs[32 * h + l] >> (2 * jj)) & 3) | (((blk.hmask[l] >> (4 * h + jj)) & 1) << 2);
      x[e] = d * (q3_scale(blk.scales, e / 16) - 32) * (u - 4);
    }
  }
}

Status check_shape(TensorType type, size_t n, const char* what) {
  if (!is_supported_weight_type(type))
    return InvalidArgument(std::string(what) + ": unsupported tensor type " + std::to_string(static_cast<uint32_t>(type)));
  auto t = type_traits(static_cast<uint32_t>(type));
  if (n % t->block_elems != 0)
    return InvalidArgument(std::string(what) + ": " + std::to_string(n) + " elements is not a whole number of " +
                           std::string(t->name) + " blocks");
  return Status::Ok();
}

}  // namespace

bool is_supported_weight_type(TensorType type) {
  switch (type) {
    case TensorType::kF32:
    case TensorType::kF16:
    case TensorType::kBF16:
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kIQ4_NL:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K:
      return true;
    default:
      return false;
  }
}

Status quantize_row(TensorType type, const float* src, void* dst, size_t n) {
  LATTICE_RETURN_IF_ERROR(check_shape(type, n, "quantize_row"));
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      break;
    case TensorType::kF16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) o[i] = fp32_to_fp16(src[i]);
      break;
    }
    case TensorType::kBF16: {
      auto* o = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) o[i] = fp32_to_bf16(src[i]);
      break;
    }
    case TensorType::kQ8_0: quantize_q8_0(src, static_cast<BlockQ8_0*>(dst), n / kQK); break;
    case TensorType::kQ4_0: quantize_q4_0(src, static_cast<BlockQ4_0*>(dst), n / kQK); break;
    case TensorType::kQ4_1: quantize_b32_min<4>(src, static_cast<BlockQ4_1*>(dst), n / kQK); break;
    case TensorType::kQ5_0: quantize_q5_0(src, static_cast<BlockQ5_0*>(dst), n / kQK); break;
    case TensorType::kQ5_1: quantize_b32_min<5>(src, static_cast<BlockQ5_1*>(dst), n / kQK); break;
    case TensorType::kIQ4_NL: quantize_iq4_nl(src, static_cast<BlockIQ4_NL*>(dst), n / kQK); break;
    case TensorType::kQ4_K: quantize_k4like<4>(src, static_cast<BlockQ4_K*>(dst), n / kQKK); break;
    case TensorType::kQ5_K: quantize_k4like<5>(src, static_cast<BlockQ5_K*>(dst), n / kQKK); break;
    case TensorType::kQ6_K: quantize_q6_k(src, static_cast<BlockQ6_K*>(dst), n / kQKK); break;
    case TensorType::kQ2_K: quantize_q2_k(src, static_cast<BlockQ2_K*>(dst), n / kQKK); break;
    case TensorType::kQ3_K: quantize_q3_k(src, static_cast<BlockQ3_K*>(dst), n / kQKK); break;
    default: return Internal("quantize_row: unreachable");
  }
  return Status::Ok();
}

Status dequantize_row(TensorType type, const void* src, float* dst, size_t n) {
  LATTICE_RETURN_IF_ERROR(check_shape(type, n, "dequantize_row"));
  switch (type) {
    case TensorType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      break;
    case TensorType::kF16: {
      auto* p = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(p[i]);
      break;
    }
    case TensorType::kBF16: {
      auto* p = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(p[i]);
      break;
    }
    case TensorType::kQ8_0: {
      auto* y = static_cast<const BlockQ8_0*>(src);
      for (size_t b = 0; b < n / kQK; ++b) {
        const float d = fp16_to_fp32(y[b].d);
        for (int i = 0; i < kQK; ++i) dst[b * kQK + i] = d * y[b].qs[i];
      }
      break;
    }
    case TensorType::kQ4_0: {
      auto* y = static_cast<const BlockQ4_0*>(src);
      for (size_t b = 0; b < n / kQK; ++b) {
        const float d = fp16_to_fp32(y[b].d);
        for (int i = 0; i < 16; ++i) {
          dst[b * kQK + i] = d * ((y[b].qs[i] & 15) - 8);
          dst[b * kQK + 16 + i] = d * ((y[b].qs[i] >> 4) - 8);
        }
      }
      break;
    }
    case TensorType::kQ4_1: dequantize_b32<4, true>(static_cast<const BlockQ4_1*>(src), dst, n / kQK); break;
    case TensorType::kQ5_0: dequantize_b32<5, false>(static_cast<const BlockQ5_0*>(src), dst, n / kQK); break;
    case TensorType::kQ5_1: dequantize_b32<5, true>(static_cast<const BlockQ5_1*>(src), dst, n / kQK); break;
    case TensorType::kIQ4_NL: {
      auto* y = static_cast<const BlockIQ4_NL*>(src);
      for (size_t b = 0; b < n / kQK; ++b) {
        const float d = fp16_to_fp32(y[b].d);
        for (int i = 0; i < 16; ++i) {
          dst[b * kQK + i] = d * kIq4nlLevels[y[b].qs[i] & 15];
          dst[b * kQK + 16 + i] = d * kIq4nlLevels[y[b].qs[i] >> 4];
        }
      }
      break;
    }
    case TensorType::kQ4_K: dequantize_k4like<4>(static_cast<const BlockQ4_K*>(src), dst, n / kQKK); break;
    case TensorType::kQ5_K: dequantize_k4like<5>(static_cast<const BlockQ5_K*>(src), dst, n / kQKK); break;
    case TensorType::kQ6_K: dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / kQKK); break;
    case TensorType::kQ2_K: dequantize_q2_k(static_cast<const BlockQ2_K*>(src), dst, n / kQKK); break;
    case TensorType::kQ3_K: dequantize_q3_k(static_cast<const BlockQ3_K*>(src), dst, n / kQKK); break;
    default: return Internal("dequantize_row: unreachable");
  }
  return Status::Ok();
}

}  // namespace lattice::engine
