// AVX2 + FMA + F16C kernels (no VNNI: u8 x s8 products go through vpmaddubsw, whose int16
// pair sums must not saturate; every use below states its bound).
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "lattice/engine/quant/blocks.h"
#include "lattice/engine/quant/fp16.h"
#include "lattice/engine/quant/kernels.h"

namespace lattice::engine::detail {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
const __m256 kAbsMask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));

// 8 floats -> 8 int8 (round to nearest even, like nearbyint in the scalar code), returned in
// the low 8 bytes; values are within [-127, 127].
inline __m128i cvt8(__m256 v) {
  __m256i i = _mm256_cvtps_epi32(v);
  __m128i lo = _mm256_castsi256_si128(i), hi = _mm256_extracti128_si256(i, 1);
  __m128i w = _mm_packs_epi32(lo, hi);
  return _mm_packs_epi16(w, w);
}

void quant_q8(const float* x, size_t k, int8_t* q, float* d, int32_t* s) {
  for (size_t b = 0; b < k / kQK; ++b, x += kQK, q += kQK) {
    __m256 v[4];
    __m256 am = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      am = _mm256_max_ps(am, _mm256_and_ps(v[i], kAbsMask));
    }
    const float amax = hmax(am);
    d[b] = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    __m256i sum = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      const __m256 sv = _mm256_mul_ps(v[i], id);
      sum = _mm256_add_epi32(sum, _mm256_cvtps_epi32(sv));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + 8 * i), cvt8(sv));
    }
    s[b] = hsum(sum);
  }
}

void quant_q8k(const float* x, size_t k, int8_t* q, float* d, int16_t* bsum) {
  for (size_t b = 0; b < k / kQKK; ++b, x += kQKK, q += kQKK) {
    __m256 am = _mm256_setzero_ps();
    for (int i = 0; i < 32; ++i) am = _mm256_max_ps(am, _mm256_and_ps(_mm256_loadu_ps(x + 8 * i), kAbsMask));
    const float amax = hmax(am);
    d[b] = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    for (int j = 0; j < 16; ++j) {
      const __m256 s0 = _mm256_mul_ps(_mm256_loadu_ps(x + 16 * j), id);
      const __m256 s1 = _mm256_mul_ps(_mm256_loadu_ps(x + 16 * j + 8), id);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + 16 * j), cvt8(s0));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + 16 * j + 8), cvt8(s1));
      bsum[16 * b + j] = static_cast<int16_t>(hsum(_mm256_add_epi32(_mm256_cvtps_epi32(s0), _mm256_cvtps_epi32(s1))));
    }
  }
}

// Float-weight dots: 4 independent accumulators, scalar tail.
template <class Load>
float dot_float(const float* x, size_t k, Load load) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  size_t i = 0;
  for (; i + 32 <= k; i += 32)
    for (int u = 0; u < 4; ++u) acc[u] = _mm256_fmadd_ps(load(i + 8 * u), _mm256_loadu_ps(x + i + 8 * u), acc[u]);
  for (; i + 8 <= k; i += 8) acc[0] = _mm256_fmadd_ps(load(i), _mm256_loadu_ps(x + i), acc[0]);
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < k; ++i) sum += _mm_cvtss_f32(_mm256_castps256_ps128(load(i))) * x[i];  // tail: lane 0 only
  return sum;
}

float dot_f32(const void* row, const Act& a, size_t tok) {
  const float* w = static_cast<const float*>(row);
  const size_t k = a.k;
  const float* x = a.f32 + tok * k;
  float tail = 0;
  const size_t kv = k & ~size_t{7};
  for (size_t i = kv; i < k; ++i) tail += w[i] * x[i];
  return dot_float(x, kv, [w](size_t i) { return _mm256_loadu_ps(w + i); }) + tail;
}
float dot_f16(const void* row, const Act& a, size_t tok) {
  const uint16_t* w = static_cast<const uint16_t*>(row);
  const size_t k = a.k;
  const float* x = a.f32 + tok * k;
  float tail = 0;
  const size_t kv = k & ~size_t{7};
  for (size_t i = kv; i < k; ++i) tail += fp16_to_fp32(w[i]) * x[i];
  return dot_float(x, kv, [w](size_t i) {
           return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
         }) + tail;
}
float dot_bf16(const void* row, const Act& a, size_t tok) {
  const uint16_t* w = static_cast<const uint16_t*>(row);
  const size_t k = a.k;
  const float* x = a.f32 + tok * k;
  float tail = 0;
  const size_t kv = k & ~size_t{7};
  for (size_t i = kv; i < k; ++i) tail += bf16_to_fp32(w[i]) * x[i];
  return dot_float(x, kv, [w](size_t i) {
           const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
           return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
         }) + tail;
}

// Signed x signed int8 dot of 32 bytes, as 8 int32 partial sums. |w|,|x| <= 128/127: each
// int16 pair sum is at most 2*128*127 = 32512 < 32767.
inline __m256i dot_s8(__m256i w, __m256i x) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
// Unsigned (<= 63) x signed: pair sums <= 2*63*127 = 16002.
inline __m256i dot_u8(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

float dot_q8_0(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ8_0*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQK));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_s8(wv, xv)), _mm256_set1_ps(h2f(w[b].d) * d[b]), acc);
  }
  return hsum(acc);
}

float dot_q4_0(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ4_0*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  const int32_t* s = a.s + tok * nb;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  float corr = 0;
  for (size_t b = 0; b < nb; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);  // 0..15
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQK));
    const float ds = h2f(w[b].d) * d[b];
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8(nib, xv)), _mm256_set1_ps(ds), acc);
    corr += ds * static_cast<float>(8 * s[b]);  // the stored nibbles are q + 8
  }
  return hsum(acc) - corr;
}

// Q5_0 / Q5_1: the 32 fifth bits (bit e = element e) as 16 or 0 in byte e.
inline __m256i q5_fifth_bits(uint32_t qh) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), spread), bit);
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(16));
}

// Q4_1 / Q5_0 / Q5_1 rows: unsigned values u (<= 31: pair sums <= 2*31*127), the offset of
// Q5_0 (16) and the min of Q4_1 / Q5_1 applied per block from the activation sums.
template <int kBits, bool kMin, class Block>
float dot_b32(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const Block*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  const int32_t* s = a.s + tok * nb;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  float corr = 0;
  for (size_t b = 0; b < nb; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    __m256i u = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
    if constexpr (kBits == 5) u = _mm256_or_si256(u, q5_fifth_bits(q5_high_bits(w[b].qh)));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQK));
    const float ds = h2f(w[b].d) * d[b];
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8(u, xv)), _mm256_set1_ps(ds), acc);
    if constexpr (kMin) corr -= h2f(w[b].m) * d[b] * static_cast<float>(s[b]);
    else corr += ds * static_cast<float>(16 * s[b]);
  }
  return hsum(acc) - corr;
}

// IQ4_NL rows: the nibbles index the 16 levels through vpshufb; signed x signed products.
float dot_iq4_nl(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockIQ4_NL*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlLevels)));
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), m4);
    const __m256i v = _mm256_shuffle_epi8(levels, nib);  // |v| <= 127: dot_s8's bound holds
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQK));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_s8(v, xv)), _mm256_set1_ps(h2f(w[b].d) * d[b]), acc);
  }
  return hsum(acc);
}

template <int kBits, class Block>
float dot_k4like(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const Block*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  const int16_t* bs = a.bsum + tok * (a.k / 16);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (size_t b = 0; b < nb; ++b, q += kQKK, bs += 16) {
    const Block& blk = w[b];
    int sc[8], mn[8];
    int32_t msum = 0;
    for (int j = 0; j < 8; ++j) {
      k4_scale_min(blk.scales, j, &sc[j], &mn[j]);
      msum += mn[j] * (bs[2 * j] + bs[2 * j + 1]);
    }
    __m256i hb;
    if constexpr (kBits == 5) hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh));
    __m256i iacc = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (kBits == 5) {
        const __m256i b0 = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
        const __m256i b1 = _mm256_set1_epi8(static_cast<char>(2 << (2 * c)));
        const __m256i sixteen = _mm256_set1_epi8(16);
        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b0), b0), sixteen));
        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b1), b1), sixteen));
      }
      // Values <= 31: pair sums <= 2*31*127; times the 6-bit scale in vpmaddwd (int32).
      const __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * c)));
      const __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * c + 32)));
      iacc = _mm256_add_epi32(iacc, _mm256_madd_epi16(plo, _mm256_set1_epi16(static_cast<short>(sc[2 * c]))));
      iacc = _mm256_add_epi32(iacc, _mm256_madd_epi16(phi, _mm256_set1_epi16(static_cast<short>(sc[2 * c + 1]))));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), _mm256_set1_ps(dx[b] * h2f(blk.d)), acc);
    mins += dx[b] * h2f(blk.dmin) * static_cast<float>(msum);
  }
  return hsum(acc) - mins;
}

float dot_q6_k(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ6_K*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  const int16_t* bs = a.bsum + tok * (a.k / 16);
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b, q += kQKK, bs += 16) {
    const BlockQ6_K& blk = w[b];
    int32_t off = 0;  // the stored values are q + 32
    for (int j = 0; j < 16; ++j) off += blk.scales[j] * bs[j];
    __m256i iacc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.ql + 64 * h + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qh + 32 * h));
      for (int kq = 0; kq < 4; ++kq) {
        const __m256i lsrc = (kq & 1) ? l1 : l0;
        const __m256i low = kq < 2 ? _mm256_and_si256(lsrc, m4) : _mm256_and_si256(_mm256_srli_epi16(lsrc, 4), m4);
        const __m256i top = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * kq), m2);
        const __m256i v = _mm256_or_si256(low, _mm256_slli_epi16(top, 4));  // 0..63
        const int e0 = 128 * h + 32 * kq;
        const __m256i p = _mm256_maddubs_epi16(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + e0)));
        const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(blk.scales[e0 / 16 + 1]), _mm_set1_epi16(blk.scales[e0 / 16]));
        iacc = _mm256_add_epi32(iacc, _mm256_madd_epi16(p, scv));
      }
    }
    iacc = _mm256_sub_epi32(iacc, _mm256_setr_epi32(32 * off, 0, 0, 0, 0, 0, 0, 0));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), _mm256_set1_ps(dx[b] * h2f(blk.d)), acc);
  }
  return hsum(acc);
}

// Q2_K / Q3_K: plane j (bits 2j..2j+1) of the 32 qs bytes of half h holds elements
// 128h + 32j + 0..31, i.e. sub-blocks 8h + 2j (low 16 bytes) and 8h + 2j + 1 (high 16).
inline __m256i pair_scales(int s0, int s1) { return _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(s1)), _mm_set1_epi16(static_cast<short>(s0))); }

float dot_q2_k(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ2_K*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  const int16_t* bs = a.bsum + tok * (a.k / 16);
  const __m256i m2 = _mm256_set1_epi8(3);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (size_t b = 0; b < nb; ++b, q += kQKK, bs += 16) {
    const BlockQ2_K& blk = w[b];
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales)));
    const __m256i mv = _mm256_madd_epi16(_mm256_srli_epi16(sm, 4), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bs)));
    mins += dx[b] * h2f(blk.dmin) * static_cast<float>(hsum(mv));
    __m256i iacc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * h));
      for (int j = 0; j < 4; ++j) {
        const __m256i v = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m2);  // 0..3
        const __m256i p = _mm256_maddubs_epi16(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 128 * h + 32 * j)));
        const int s0 = 8 * h + 2 * j;
        iacc = _mm256_add_epi32(iacc, _mm256_madd_epi16(p, pair_scales(blk.scales[s0] & 15, blk.scales[s0 + 1] & 15)));
      }
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), _mm256_set1_ps(dx[b] * h2f(blk.d)), acc);
  }
  return hsum(acc) - mins;
}

float dot_q3_k(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockQ3_K*>(row);
  const size_t nb = a.k / kQKK;
  const int8_t* q = a.q + tok * a.k;
  const float* dx = a.d + tok * nb;
  const int16_t* bs = a.bsum + tok * (a.k / 16);
  const __m256i m2 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b, q += kQKK, bs += 16) {
    const BlockQ3_K& blk = w[b];
    int sc[16];
    int32_t off = 0;  // the stored values are u = q + 4
    for (int s = 0; s < 16; ++s) {
      sc[s] = q3_scale(blk.scales, s) - 32;
      off += sc[s] * bs[s];
    }
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.hmask));
    __m256i iacc = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * h));
      for (int j = 0; j < 4; ++j) {
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m2);
        const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), m1);
        const __m256i u = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 2));  // 0..7: pair sums <= 2*7*127
        const __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 128 * h + 32 * j)));
        const int s0 = 8 * h + 2 * j;
        iacc = _mm256_add_epi32(iacc, _mm256_madd_epi16(p, pair_scales(sc[s0], sc[s0 + 1])));
      }
    }
    iacc = _mm256_sub_epi32(iacc, _mm256_setr_epi32(4 * off, 0, 0, 0, 0, 0, 0, 0));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc), _mm256_set1_ps(dx[b] * h2f(blk.d)), acc);
  }
  return hsum(acc);
}

// Packed tiles: the 16 rows of a group as two halves of 8 lanes (see kernels.h for layout).
template <bool kQ4, int NT>
void tile_t(const uint8_t* group, size_t nb, const Act& a, size_t t0, float* out) {
  const size_t bb = kQ4 ? 256 : 512;
  const uint16_t* sc = reinterpret_cast<const uint16_t*>(group + nb * bb);
  const int32_t* xq[NT];
  const float* xd[NT];
  const int32_t* xs[NT];
  for (int t = 0; t < NT; ++t) {
    xq[t] = reinterpret_cast<const int32_t*>(a.q + (t0 + t) * a.k);
    xd[t] = a.d + (t0 + t) * nb;
    xs[t] = a.s + (t0 + t) * nb;
  }
  __m256 facc[NT][2];
  for (int t = 0; t < NT; ++t) facc[t][0] = facc[t][1] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* p = group + b * bb;
    for (int half = 0; half < 2; ++half) {
      __m256i iacc[NT];
      for (int t = 0; t < NT; ++t) iacc[t] = _mm256_setzero_si256();
      if constexpr (kQ4) {
        for (int i = 0; i < 4; ++i) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * 64 + half * 32));
          const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          for (int t = 0; t < NT; ++t) {
            // Nibbles <= 15: pair sums <= 2*15*127.
            const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_set1_epi32(xq[t][b * 8 + i]));
            const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_set1_epi32(xq[t][b * 8 + 4 + i]));
            iacc[t] = _mm256_add_epi32(iacc[t], _mm256_madd_epi16(_mm256_add_epi16(pl, ph), ones));
          }
        }
        for (int t = 0; t < NT; ++t) iacc[t] = _mm256_sub_epi32(iacc[t], _mm256_set1_epi32(8 * xs[t][b]));
      } else {
        for (int i = 0; i < 8; ++i) {
          const __m256i w = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i * 64 + half * 32)), flip);
          const __m256i aw = _mm256_sign_epi8(w, w);
          for (int t = 0; t < NT; ++t)
            iacc[t] = _mm256_add_epi32(iacc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(xq[t][b * 8 + i]), w)), ones));
        }
      }
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + b * 16 + half * 8)));
      for (int t = 0; t < NT; ++t)
        facc[t][half] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(iacc[t]), _mm256_set1_ps(xd[t][b])), dw, facc[t][half]);
    }
  }
  for (int t = 0; t < NT; ++t) {
    _mm256_storeu_ps(out + t * 16, facc[t][0]);
    _mm256_storeu_ps(out + t * 16 + 8, facc[t][1]);
  }
}

template <bool kQ4>
void tile(const uint8_t* group, size_t nb, const Act& a, size_t t0, size_t nt, float* out) {
  while (nt >= 4) {
    tile_t<kQ4, 4>(group, nb, a, t0, out);
    t0 += 4, nt -= 4, out += 4 * 16;
  }
  switch (nt) {
    case 3: tile_t<kQ4, 3>(group, nb, a, t0, out); break;
    case 2: tile_t<kQ4, 2>(group, nb, a, t0, out); break;
    case 1: tile_t<kQ4, 1>(group, nb, a, t0, out); break;
    default: break;
  }
}

}  // namespace

const KernelTable& avx2_kernels() {
  static const KernelTable t = [] {
    KernelTable k{
        "avx2",   quant_q8,  quant_q8k, dot_f32, dot_f16, dot_bf16, dot_q8_0, dot_q4_0, dot_k4like<4, BlockQ4_K>,
        dot_k4like<5, BlockQ5_K>, dot_q6_k, tile<true>, tile<false>,
        // No AVX2 versions: packed K-quants (made only when AVX-512 is there) run the reference.
        scalar_kernels().tile_q4_k, scalar_kernels().tile_q5_k, scalar_kernels().tile_q6_k,
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
