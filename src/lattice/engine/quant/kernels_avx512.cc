// AVX-512 (F/BW/VL/DQ + VNNI) kernels. The hot ones are the packed Q4_0 / Q8_0 tiles: one
// 512-bit lane per weight row (16 rows per group), so a 64-byte load feeds vpdpbusd for all
// 16 rows against one broadcast dword of activations, with no horizontal sums and one fp16
// scale vector per block. Weights are unsigned (nibbles, or q+128), activations signed; the
// offset is removed by starting each block's integer accumulator at -offset * sum(x block).
// Q4_K..Q6_K row dot products reuse the AVX2 kernels (AVX-512 machines run them as well);
// Q2_K and Q3_K have 512-bit ones.
#include <immintrin.h>

// GCC 12 warns spuriously inside its own _mm512_reduce_* helpers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cmath>
#include <cstring>

#include "lattice/engine/quant/blocks.h"
#include "lattice/engine/quant/fp16.h"
#include "lattice/engine/quant/kernels.h"

namespace lattice::engine::detail {
namespace {

void quant_q8(const float* x, size_t k, int8_t* q, float* d, int32_t* s) {
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (size_t b = 0; b < k / kQK; ++b, x += kQK, q += kQK) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_and_ps(v0, absmask), _mm512_and_ps(v1, absmask)));
    d[b] = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(q1));
    s[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

void quant_q8k(const float* x, size_t k, int8_t* q, float* d, int16_t* bsum) {
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (size_t b = 0; b < k / kQKK; ++b, x += kQKK, q += kQKK) {
    __m512 am = _mm512_setzero_ps();
    for (int j = 0; j < 16; ++j) am = _mm512_max_ps(am, _mm512_and_ps(_mm512_loadu_ps(x + 16 * j), absmask));
    const float amax = _mm512_reduce_max_ps(am);
    d[b] = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    for (int j = 0; j < 16; ++j) {
      const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * j), id));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * j), _mm512_cvtepi32_epi8(qi));
      bsum[16 * b + j] = static_cast<int16_t>(_mm512_reduce_add_epi32(qi));
    }
  }
}

template <class Load>
float dot_float(const float* x, size_t k, Load load) {
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  size_t i = 0;
  for (; i + 64 <= k; i += 64)
    for (int u = 0; u < 4; ++u) acc[u] = _mm512_fmadd_ps(load(i + 16 * u, 0xffff), _mm512_loadu_ps(x + i + 16 * u), acc[u]);
  for (; i < k; i += 16) {
    const __mmask16 m = k - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (k - i)) - 1);
    acc[0] = _mm512_fmadd_ps(load(i, m), _mm512_maskz_loadu_ps(m, x + i), acc[0]);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

float dot_f32(const void* row, const Act& a, size_t tok) {
  const float* w = static_cast<const float*>(row);
  return dot_float(a.f32 + tok * a.k, a.k, [w](size_t i, __mmask16 m) { return _mm512_maskz_loadu_ps(m, w + i); });
}
float dot_f16(const void* row, const Act& a, size_t tok) {
  const uint16_t* w = static_cast<const uint16_t*>(row);
  return dot_float(a.f32 + tok * a.k, a.k,
                   [w](size_t i, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, w + i)); });
}
float dot_bf16(const void* row, const Act& a, size_t tok) {
  const uint16_t* w = static_cast<const uint16_t*>(row);
  return dot_float(a.f32 + tok * a.k, a.k, [w](size_t i, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, w + i)), 16));
  });
}

// Float weights, several rows x several tokens: each weight vector (converted once) feeds
// NT FMAs, each activation vector NR; 16 accumulators, reduced once per tile.
template <int NR, int NT, class Load>
void ftile_t(const uint8_t* rows, size_t stride, const Act& a, size_t t0, float* out, Load load) {
  const size_t k = a.k;
  __m512 acc[NR][NT];
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  const float* x[NT];
  for (int t = 0; t < NT; ++t) x[t] = a.f32 + (t0 + t) * k;
  for (size_t i = 0; i < k; i += 16) {
    const __mmask16 m = k - i >= 16 ? 0xffff : static_cast<__mmask16>((1u << (k - i)) - 1);
    __m512 xv[NT];
    for (int t = 0; t < NT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x[t] + i);
    for (int r = 0; r < NR; ++r) {
      const __m512 wv = load(rows + r * stride, i, m);
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int t = 0; t < NT; ++t) out[t * 4 + r] = _mm512_reduce_add_ps(acc[r][t]);
}

template <class Load>
void ftile(const uint8_t* rows, size_t stride, size_t nr, const Act& a, size_t t0, size_t nt, float* out, Load load) {
  if (nr == 4 && nt == 4) return ftile_t<4, 4>(rows, stride, a, t0, out, load);
  // Edges: one row at a time against up to 4 tokens.
  for (size_t r = 0; r < nr; ++r) {
    float tmp[16];
    switch (nt) {
      case 4: ftile_t<1, 4>(rows + r * stride, stride, a, t0, tmp, load); break;
      case 3: ftile_t<1, 3>(rows + r * stride, stride, a, t0, tmp, load); break;
      case 2: ftile_t<1, 2>(rows + r * stride, stride, a, t0, tmp, load); break;
      default: ftile_t<1, 1>(rows + r * stride, stride, a, t0, tmp, load); break;
    }
    for (size_t t = 0; t < nt; ++t) out[t * 4 + r] = tmp[t * 4];
  }
}

void ftile_f32(const uint8_t* rows, size_t stride, size_t nr, const Act& a, size_t t0, size_t nt, float* out) {
  ftile(rows, stride, nr, a, t0, nt, out, [](const uint8_t* row, size_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
  });
}
void ftile_f16(const uint8_t* rows, size_t stride, size_t nr, const Act& a, size_t t0, size_t nt, float* out) {
  ftile(rows, stride, nr, a, t0, nt, out, [](const uint8_t* row, size_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + i));
  });
}
void ftile_bf16(const uint8_t* rows, size_t stride, size_t nr, const Act& a, size_t t0, size_t nt, float* out) {
  ftile(rows, stride, nr, a, t0, nt, out, [](const uint8_t* row, size_t i, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  });
}

// Raw (GGUF layout) Q4_0 / Q8_0 rows with 256-bit VNNI, one block per step.
float dot_q4_0(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ4_0*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  const int32_t* s = a.s + tok * nb;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i nib = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1), m4);
    const __m256i init = _mm256_setr_epi32(-8 * s[b], 0, 0, 0, 0, 0, 0, 0);
    const __m256i dot = _mm256_dpbusd_epi32(init, nib, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQK)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(_cvtsh_ss(w[b].d) * d[b]), acc);
  }
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

float dot_q8_0(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ8_0*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  const int32_t* s = a.s + tok * nb;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const __m256i wu = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs)), flip);  // q+128
    const __m256i init = _mm256_setr_epi32(-128 * s[b], 0, 0, 0, 0, 0, 0, 0);
    const __m256i dot = _mm256_dpbusd_epi32(init, wu, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQK)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(_cvtsh_ss(w[b].d) * d[b]), acc);
  }
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

// Packed tile for NT tokens. With few tokens the low and high nibble products go to two
// integer accumulators to halve the vpdpbusd dependency chain.
// Q2_K / Q3_K rows. Plane j (bits 2j..2j+1) of the 64 qs bytes holds, in its low 256 bits,
// sub-blocks 2j and 2j+1 and, in its high 256 bits, 8+2j and 9+2j (elements 128h + 32j + l).
// vpmaddubsw gives 8 int16 pair sums per sub-block; vpermw spreads the 16 scales to match.
struct PlaneScaleIndex {
  alignas(64) int16_t idx[4][32];
  constexpr PlaneScaleIndex() : idx{} {
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 32; ++i) idx[j][i] = static_cast<int16_t>(8 * (i / 16) + 2 * j + (i / 8) % 2);
  }
};
constexpr PlaneScaleIndex kPlaneIdx;

inline __m512i plane_acts(const int8_t* q, int j) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * j));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 128 + 32 * j));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

float dot_q2_k(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ2_K*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  const int16_t* bs = a.bsum + tok * (a.k / 16);
  const __m512i m2 = _mm512_set1_epi8(3);
  const __m256i m4 = _mm256_set1_epi16(15);
  __m512 acc = _mm512_setzero_ps();
  float mins = 0;
  for (size_t b = 0; b < nb; ++b, q += kQKK, bs += 16) {
    const BlockQ2_K& blk = w[b];
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    const __m256i mv = _mm256_madd_epi16(_mm256_srli_epi16(sm, 4), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bs)));
    mins += dx[b] * fp16_to_fp32(blk.dmin) * static_cast<float>(_mm512_reduce_add_epi32(_mm512_zextsi256_si512(mv)));
    const __m512i sc = _mm512_castsi256_si512(_mm256_and_si256(sm, m4));
    const __m512i qv = _mm512_loadu_si512(blk.qs);
    __m512i iacc = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m512i v = _mm512_and_si512(_mm512_srli_epi16(qv, 2 * j), m2);  // 0..3
      const __m512i p = _mm512_maddubs_epi16(v, plane_acts(q, j));
      const __m512i scv = _mm512_permutexvar_epi16(_mm512_load_si512(kPlaneIdx.idx[j]), sc);
      iacc = _mm512_dpwssd_epi32(iacc, p, scv);
    }
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_set1_ps(dx[b] * fp16_to_fp32(blk.d)), acc);
  }
  return _mm512_reduce_add_ps(acc) - mins;
}

float dot_q3_k(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ3_K*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  const int16_t* bs = a.bsum + tok * (a.k / 16);
  const __m512i m2 = _mm512_set1_epi8(3), m1 = _mm512_set1_epi8(1);
  __m512 acc = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b, q += kQKK, bs += 16) {
    const BlockQ3_K& blk = w[b];
    alignas(32) int16_t sc16[16];
    for (int s = 0; s < 16; ++s) sc16[s] = static_cast<int16_t>(q3_scale(blk.scales, s) - 32);
    const __m256i sc256 = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc16));
    // The stored values are u = q + 4: remove 4 * sum(scale * block sum).
    const __m256i offv = _mm256_madd_epi16(sc256, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bs)));
    const int32_t off = _mm512_reduce_add_epi32(_mm512_zextsi256_si512(offv));
    const __m512i sc = _mm512_castsi256_si512(sc256);
    const __m512i qv = _mm512_loadu_si512(blk.qs);
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.hmask)));
    __m512i iacc = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(qv, 2 * j), m2);
      // Third bit: bit j of hmask for the low half, bit 4 + j for the high half.
      const __m512i hb = _mm512_and_si512(_mm512_srlv_epi64(hm, _mm512_set_epi64(4 + j, 4 + j, 4 + j, 4 + j, j, j, j, j)), m1);
      const __m512i u = _mm512_or_si512(lo, _mm512_slli_epi16(hb, 2));  // 0..7: pair sums <= 2*7*127
      const __m512i p = _mm512_maddubs_epi16(u, plane_acts(q, j));
      const __m512i scv = _mm512_permutexvar_epi16(_mm512_load_si512(kPlaneIdx.idx[j]), sc);
      iacc = _mm512_dpwssd_epi32(iacc, p, scv);
    }
    iacc = _mm512_sub_epi32(iacc, _mm512_castsi128_si512(_mm_cvtsi32_si128(4 * off)));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_set1_ps(dx[b] * fp16_to_fp32(blk.d)), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

template <bool kQ4, int NT>
void tile_t(const uint8_t* group, size_t nb, const Act& a, size_t t0, float* out) {
  constexpr size_t bb = kQ4 ? 256 : 512;
  constexpr bool kSplit = NT <= 2;
  const uint16_t* sc = reinterpret_cast<const uint16_t*>(group + nb * bb);
  const int32_t* xq[NT];
  const float* xd[NT];
  const int32_t* xs[NT];
  for (int t = 0; t < NT; ++t) {
    xq[t] = reinterpret_cast<const int32_t*>(a.q + (t0 + t) * a.k);
    xd[t] = a.d + (t0 + t) * nb;
    xs[t] = (kQ4 ? a.off4 : a.off8) + (t0 + t) * nb;
  }
  __m512 facc[NT];
  for (int t = 0; t < NT; ++t) facc[t] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f), m4hi = _mm512_set1_epi8(static_cast<char>(0xf0));
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* p = group + b * bb;
    // Software prefetch of every line of the block ~4 KB ahead, and of its scales: the
    // hardware streamers alone left cold (DRAM) decode well below streaming-read speed.
    constexpr size_t kAhead = 4096;
    for (size_t l = 0; l < bb; l += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + kAhead + l, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(sc + b * 16) + kAhead / (bb / 32), _MM_HINT_T0);
    __m512i acc[NT], acc2[NT];
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm512_set1_epi32(xs[t][b]);
      if constexpr (kSplit) acc2[t] = _mm512_setzero_si512();
    }
    const int32_t* xb[NT];
    for (int t = 0; t < NT; ++t) xb[t] = xq[t] + b * 8;
    if constexpr (kQ4) {
      for (int i = 0; i < 4; ++i) {
        const __m512i v = _mm512_loadu_si512(p + i * 64);
        const __m512i lo = _mm512_and_si512(v, m4);
        if constexpr (kSplit) {
          // High nibbles left in place (16 * value): one op instead of shift + and; the
          // accumulator is a multiple of 16 and is shifted back exactly below.
          const __m512i hi16 = _mm512_and_si512(v, m4hi);
          for (int t = 0; t < NT; ++t) {
            acc[t] = _mm512_dpbusd_epi32(acc[t], lo, _mm512_set1_epi32(xb[t][i]));
            acc2[t] = _mm512_dpbusd_epi32(acc2[t], hi16, _mm512_set1_epi32(xb[t][4 + i]));
          }
        } else {
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          for (int t = 0; t < NT; ++t) {
            acc[t] = _mm512_dpbusd_epi32(acc[t], lo, _mm512_set1_epi32(xb[t][i]));
            acc[t] = _mm512_dpbusd_epi32(acc[t], hi, _mm512_set1_epi32(xb[t][4 + i]));
          }
        }
      }
    } else {
      for (int i = 0; i < 8; ++i) {
        const __m512i v = _mm512_loadu_si512(p + i * 64);
        for (int t = 0; t < NT; ++t) {
          if (kSplit && (i & 1)) acc2[t] = _mm512_dpbusd_epi32(acc2[t], v, _mm512_set1_epi32(xb[t][i]));
          else acc[t] = _mm512_dpbusd_epi32(acc[t], v, _mm512_set1_epi32(xb[t][i]));
        }
      }
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + b * 16)));
    for (int t = 0; t < NT; ++t) {
      __m512i iv = acc[t];
      if constexpr (kSplit) iv = _mm512_add_epi32(iv, kQ4 ? _mm512_srai_epi32(acc2[t], 4) : acc2[t]);
      facc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(iv), _mm512_set1_ps(xd[t][b])), dw, facc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + t * 16, facc[t]);
}

template <bool kQ4>
void tile(const uint8_t* group, size_t nb, const Act& a, size_t t0, size_t nt, float* out) {
  switch (nt) {
    case 8: tile_t<kQ4, 8>(group, nb, a, t0, out); break;
    case 7: tile_t<kQ4, 7>(group, nb, a, t0, out); break;
    case 6: tile_t<kQ4, 6>(group, nb, a, t0, out); break;
    case 5: tile_t<kQ4, 5>(group, nb, a, t0, out); break;
    case 4: tile_t<kQ4, 4>(group, nb, a, t0, out); break;
    case 3: tile_t<kQ4, 3>(group, nb, a, t0, out); break;
    case 2: tile_t<kQ4, 2>(group, nb, a, t0, out); break;
    case 1: tile_t<kQ4, 1>(group, nb, a, t0, out); break;
    default: break;
  }
}

// Packed Q4_K (layout in kernels.h): per sub-block the integer dots come from vpdpbusd as for
// Q4_0, are scaled by d*sc (one vector per sub-block, shared by the tokens) in float, and the
// mins term sum_j m_j * sum(x of sub-block j) is 4 vpdpwssd per super-block.
// K-quant super-blocks are walked in 8 sub-block steps; step j prefetches the j-th eighth of
// the super-block bytes 4 KB ahead, so every line (scales and high bits included) is asked for.
inline void prefetch_slice(const uint8_t* sb, size_t sb_bytes, int j) {
  const char* pf = reinterpret_cast<const char*>(sb) + 4096;
  for (size_t l = (sb_bytes * j / 8) & ~size_t{63}; l < sb_bytes * (j + 1) / 8; l += 64) _mm_prefetch(pf + l, _MM_HINT_T0);
}

// Q5_K: the fifth bit of element 4i+m (bit 2i of its byte) or 16+4i+m (bit 2i+1) moved to
// bit 4 of the byte (epi16 shifts: masking with 0x10 keeps each byte's own bit).
template <int kBit>
inline __m512i bit_to_4(__m512i h) {
  const __m512i m10 = _mm512_set1_epi8(0x10);
  if constexpr (kBit < 4) return _mm512_and_si512(_mm512_slli_epi16(h, 4 - kBit), m10);
  else if constexpr (kBit == 4) return _mm512_and_si512(h, m10);
  else return _mm512_and_si512(_mm512_srli_epi16(h, kBit - 4), m10);
}

template <int kBits, int NT>
void tile_k4_t(const uint8_t* group, size_t nsb, const Act& a, size_t t0, float* out) {
  using L = K4Layout<kBits>;
  constexpr bool kSplit = NT <= 2;
  const int32_t* xq[NT];
  const float* xd[NT];
  const int16_t* xb[NT];
  for (int t = 0; t < NT; ++t) {
    xq[t] = reinterpret_cast<const int32_t*>(a.q + (t0 + t) * a.k);
    xd[t] = a.d + (t0 + t) * nsb;
    xb[t] = a.bsum + (t0 + t) * (a.k / 16);
  }
  __m512 facc[NT];
  for (int t = 0; t < NT; ++t) facc[t] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f), m4hi = _mm512_set1_epi8(static_cast<char>(0xf0));
  for (size_t s = 0; s < nsb; ++s) {
    const uint8_t* sb = group + s * L::kBytes;
    const __m512 dvec = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + L::kD)));
    const __m512 mvec = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + L::kDmin)));
    __m512 fs[NT];
    for (int t = 0; t < NT; ++t) fs[t] = _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* p = sb + j * 256;
      prefetch_slice(sb, L::kBytes, j);
      const __m512 dsc = _mm512_mul_ps(
          _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + L::kScales + j * 16)))), dvec);
      __m512i dot[NT], dot2[NT];
      for (int t = 0; t < NT; ++t) dot[t] = dot2[t] = _mm512_setzero_si512();
      const size_t xoff = s * 64 + j * 8;
      if constexpr (kBits == 5) {
        const __m512i hb = _mm512_loadu_si512(sb + L::kHighBits + j * 64);
        const __m512i x4[4] = {bit_to_4<0>(hb), bit_to_4<2>(hb), bit_to_4<4>(hb), bit_to_4<6>(hb)};
        const __m512i y4[4] = {bit_to_4<1>(hb), bit_to_4<3>(hb), bit_to_4<5>(hb), bit_to_4<7>(hb)};
        constexpr int kAndOr = 0xEA;  // vpternlogd: (A & B) | C
        for (int i = 0; i < 4; ++i) {
          const __m512i v = _mm512_loadu_si512(p + i * 64);
          const __m512i lo = _mm512_ternarylogic_epi32(v, m4, x4[i], kAndOr);
          const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), m4, y4[i], kAndOr);
          for (int t = 0; t < NT; ++t) {
            dot[t] = _mm512_dpbusd_epi32(dot[t], lo, _mm512_set1_epi32(xq[t][xoff + i]));
            dot2[t] = _mm512_dpbusd_epi32(dot2[t], hi, _mm512_set1_epi32(xq[t][xoff + 4 + i]));
          }
        }
        for (int t = 0; t < NT; ++t) fs[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(dot[t], dot2[t])), dsc, fs[t]);
        continue;
      }
      for (int i = 0; i < 4; ++i) {
        const __m512i v = _mm512_loadu_si512(p + i * 64);
        const __m512i lo = _mm512_and_si512(v, m4);
        if constexpr (kSplit) {
          const __m512i hi16 = _mm512_and_si512(v, m4hi);
          for (int t = 0; t < NT; ++t) {
            dot[t] = _mm512_dpbusd_epi32(dot[t], lo, _mm512_set1_epi32(xq[t][xoff + i]));
            dot2[t] = _mm512_dpbusd_epi32(dot2[t], hi16, _mm512_set1_epi32(xq[t][xoff + 4 + i]));
          }
        } else {
          const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          for (int t = 0; t < NT; ++t) {
            dot[t] = _mm512_dpbusd_epi32(dot[t], lo, _mm512_set1_epi32(xq[t][xoff + i]));
            dot[t] = _mm512_dpbusd_epi32(dot[t], hi, _mm512_set1_epi32(xq[t][xoff + 4 + i]));
          }
        }
      }
      for (int t = 0; t < NT; ++t) {
        __m512i iv = dot[t];
        if constexpr (kSplit) iv = _mm512_add_epi32(iv, _mm512_srai_epi32(dot2[t], 4));
        fs[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iv), dsc, fs[t]);
      }
    }
    __m512i mins[4];
    for (int pr = 0; pr < 4; ++pr)
      mins[pr] = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + L::kMins + pr * 32)));
    for (int t = 0; t < NT; ++t) {
      const int16_t* b = xb[t] + s * 16;
      __m512i imin = _mm512_setzero_si512();
      for (int pr = 0; pr < 4; ++pr) {
        const uint32_t s0 = static_cast<uint16_t>(b[4 * pr] + b[4 * pr + 1]);
        const uint32_t s1 = static_cast<uint16_t>(b[4 * pr + 2] + b[4 * pr + 3]);
        imin = _mm512_dpwssd_epi32(imin, mins[pr], _mm512_set1_epi32(static_cast<int>(s0 | (s1 << 16))));
      }
      facc[t] = _mm512_fmadd_ps(_mm512_set1_ps(xd[t][s]), _mm512_fnmadd_ps(_mm512_cvtepi32_ps(imin), mvec, fs[t]), facc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + t * 16, facc[t]);
}

template <int kBits>
void tile_k4(const uint8_t* group, size_t nsb, const Act& a, size_t t0, size_t nt, float* out) {
  while (nt >= 4) {
    tile_k4_t<kBits, 4>(group, nsb, a, t0, out);
    t0 += 4, nt -= 4, out += 4 * 16;
  }
  switch (nt) {
    case 3: tile_k4_t<kBits, 3>(group, nsb, a, t0, out); break;
    case 2: tile_k4_t<kBits, 2>(group, nsb, a, t0, out); break;
    case 1: tile_k4_t<kBits, 1>(group, nsb, a, t0, out); break;
    default: break;
  }
}

// Packed Q6_K (layout in kernels.h): 6-bit values rebuilt from a nibble vector and a 2-bit
// vector (shift, mask, one vpternlogd each), products per 16 elements into their own
// accumulator started at -32 * sum(x) (the offset), scaled in float by d*sc.
template <int NT>
void tile_q6_k_t(const uint8_t* group, size_t nsb, const Act& a, size_t t0, float* out) {
  const int32_t* xq[NT];
  const float* xd[NT];
  const int16_t* xb[NT];
  for (int t = 0; t < NT; ++t) {
    xq[t] = reinterpret_cast<const int32_t*>(a.q + (t0 + t) * a.k);
    xd[t] = a.d + (t0 + t) * nsb;
    xb[t] = a.bsum + (t0 + t) * (a.k / 16);
  }
  __m512 facc[NT];
  for (int t = 0; t < NT; ++t) facc[t] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  constexpr int kAndOr = 0xEA;  // vpternlogd: (A & B) | C
  for (size_t s = 0; s < nsb; ++s) {
    const uint8_t* sb = group + s * kQ6KPackedBytes;
    const __m512 dvec = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 3328)));
    __m512 fs[NT];
    for (int t = 0; t < NT; ++t) fs[t] = _mm512_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      const uint8_t* p = sb + j * 256;
      const uint8_t* ph = sb + 2048 + j * 128;
      prefetch_slice(sb, kQ6KPackedBytes, j);
      const __m512 sc_lo = _mm512_mul_ps(
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 3072 + (2 * j) * 16)))), dvec);
      const __m512 sc_hi = _mm512_mul_ps(
          _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + 3072 + (2 * j + 1) * 16)))), dvec);
      const __m512i h0 = _mm512_loadu_si512(ph), h1 = _mm512_loadu_si512(ph + 64);
      __m512i alo[NT], ahi[NT];
      for (int t = 0; t < NT; ++t) {
        const int16_t* b = xb[t] + s * 16 + 2 * j;
        alo[t] = _mm512_set1_epi32(-32 * b[0]);
        ahi[t] = _mm512_set1_epi32(-32 * b[1]);
      }
      const size_t xoff = s * 64 + j * 8;
      for (int i = 0; i < 4; ++i) {
        const __m512i v = _mm512_loadu_si512(p + i * 64);
        const __m512i h = (i & 1) ? h1 : h0;
        __m512i top_lo, top_hi;  // the 2-bit fields moved to bits 4-5
        if (i < 2) {
          top_lo = _mm512_and_si512(_mm512_slli_epi16(h, 4), m30);
          top_hi = _mm512_and_si512(_mm512_slli_epi16(h, 2), m30);
        } else {
          top_lo = _mm512_and_si512(h, m30);
          top_hi = _mm512_and_si512(_mm512_srli_epi16(h, 2), m30);
        }
        const __m512i lo = _mm512_ternarylogic_epi32(v, m4, top_lo, kAndOr);
        const __m512i hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), m4, top_hi, kAndOr);
        for (int t = 0; t < NT; ++t) {
          alo[t] = _mm512_dpbusd_epi32(alo[t], lo, _mm512_set1_epi32(xq[t][xoff + i]));
          ahi[t] = _mm512_dpbusd_epi32(ahi[t], hi, _mm512_set1_epi32(xq[t][xoff + 4 + i]));
        }
      }
      for (int t = 0; t < NT; ++t) {
        fs[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(alo[t]), sc_lo, fs[t]);
        fs[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ahi[t]), sc_hi, fs[t]);
      }
    }
    for (int t = 0; t < NT; ++t) facc[t] = _mm512_fmadd_ps(fs[t], _mm512_set1_ps(xd[t][s]), facc[t]);
  }
  for (int t = 0; t < NT; ++t) _mm512_storeu_ps(out + t * 16, facc[t]);
}

void tile_q6_k(const uint8_t* group, size_t nsb, const Act& a, size_t t0, size_t nt, float* out) {
  while (nt >= 4) {
    tile_q6_k_t<4>(group, nsb, a, t0, out);
    t0 += 4, nt -= 4, out += 4 * 16;
  }
  switch (nt) {
    case 3: tile_q6_k_t<3>(group, nsb, a, t0, out); break;
    case 2: tile_q6_k_t<2>(group, nsb, a, t0, out); break;
    case 1: tile_q6_k_t<1>(group, nsb, a, t0, out); break;
    default: break;
  }
}

}  // namespace

const KernelTable& avx512_kernels() {
  static const KernelTable t = [] {
    KernelTable k = avx2_kernels();
    k.name = "avx512";
    k.quant_q8 = quant_q8;
    k.quant_q8k = quant_q8k;
    k.dot_f32 = dot_f32;
    k.dot_f16 = dot_f16;
    k.dot_bf16 = dot_bf16;
    k.dot_q4_0 = dot_q4_0;
    k.dot_q8_0 = dot_q8_0;
    k.tile_q4_0 = tile<true>;
    k.tile_q8_0 = tile<false>;
    k.ftile_f32 = ftile_f32;
    k.ftile_f16 = ftile_f16;
    k.ftile_bf16 = ftile_bf16;
    k.tile_q4_k = tile_k4<4>;
    k.tile_q5_k = tile_k4<5>;
    k.tile_q6_k = tile_q6_k;
    k.dot_q2_k = dot_q2_k;
    k.dot_q3_k = dot_q3_k;
    add_b32_avx512(k);
    return k;
  }();
  return t;
}

}  // namespace lattice::engine::detail
