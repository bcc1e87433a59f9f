// AVX-512 (BW/VL + VNNI) row dot products for the 32-element types with a fifth bit, a min
// or a level table: Q4_1, Q5_0, Q5_1, IQ4_NL (what llama-quantize falls back to for rows
// that are not a multiple of 256: IQ4_NL for Q2_K/Q3_K in 2024-25 builds, Q5_0 / Q5_1 for
// Q4_K / Q5_K; and its own Q4_1 / Q5_x mixes). One block per step with 256-bit vpdpbusd: the
// unsigned values (nibble, plus 16 where the block's qh bit is set, by a byte-masked add)
// against the signed activations; Q5_0's offset of 16 starts the integer accumulator at
// -16 * sum(x block), the min of Q4_1 / Q5_1 is added per block as m * dx * sum(x block).
#include <immintrin.h>

#include "lattice/engine/quant/blocks.h"
#include "lattice/engine/quant/kernels.h"

namespace lattice::engine::detail {
namespace {

inline float hsum(__m256 v) {
  __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  r = _mm_add_ps(r, _mm_movehl_ps(r, r));
  return _mm_cvtss_f32(_mm_add_ss(r, _mm_movehdup_ps(r)));
}

template <int kBits, bool kMin, class Block>
float dot_b32(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const Block*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  const int32_t* s = a.s + tok * nb;
  const __m256i m4 = _mm256_set1_epi8(0x0f), sixteen = _mm256_set1_epi8(16);
  __m256 acc = _mm256_setzero_ps();
  __m128 macc = _mm_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const Block& blk = w[b];
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
    __m256i u = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1), m4);
    if constexpr (kBits == 5) u = _mm256_mask_add_epi8(u, static_cast<__mmask32>(q5_high_bits(blk.qh)), u, sixteen);
    const __m256i init = kMin ? _mm256_setzero_si256() : _mm256_setr_epi32(-16 * s[b], 0, 0, 0, 0, 0, 0, 0);
    const __m256i dot = _mm256_dpbusd_epi32(init, u, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQK)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(_cvtsh_ss(blk.d) * d[b]), acc);
    if constexpr (kMin)
      macc = _mm_fmadd_ss(_mm_set_ss(_cvtsh_ss(blk.m) * d[b]), _mm_cvtsi32_ss(_mm_setzero_ps(), s[b]), macc);
  }
  return hsum(acc) + _mm_cvtss_f32(macc);
}

// IQ4_NL: the levels plus 128 (unsigned, 1..241) through vpshufb, so vpdpbusd applies; the
// integer accumulator starts at -128 * sum(x block) to take the 128 back out.
struct Iq4nlBiased {
  alignas(16) uint8_t v[16];
  constexpr Iq4nlBiased() : v{} {
    for (int i = 0; i < 16; ++i) v[i] = static_cast<uint8_t>(kIq4nlLevels[i] + 128);
  }
};
constexpr Iq4nlBiased kIq4nlBiased;

float dot_iq4_nl(const void* row, const Act& a, size_t tok) {
  const auto* w = static_cast<const BlockIQ4_NL*>(row);
  const size_t nb = a.k / kQK;
  const int8_t* q = a.q + tok * a.k;
  const float* d = a.d + tok * nb;
  const int32_t* s = a.s + tok * nb;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i levels = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlBiased.v)));
  __m256 acc = _mm256_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i nib = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1), m4);
    const __m256i u = _mm256_shuffle_epi8(levels, nib);
    const __m256i init = _mm256_setr_epi32(-128 * s[b], 0, 0, 0, 0, 0, 0, 0);
    const __m256i dot = _mm256_dpbusd_epi32(init, u, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + b * kQK)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(_cvtsh_ss(w[b].d) * d[b]), acc);
  }
  return hsum(acc);
}

}  // namespace

void add_b32_avx512(KernelTable& k) {
  k.dot_q4_1 = dot_b32<4, true, BlockQ4_1>;
  k.dot_q5_0 = dot_b32<5, false, BlockQ5_0>;
  k.dot_q5_1 = dot_b32<5, true, BlockQ5_1>;
  k.dot_iq4_nl = dot_iq4_nl;
}

}  // namespace lattice::engine::detail
