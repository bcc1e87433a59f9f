// AVX-512 attention for one query head (see ops.h attend_head); compiled with AVX-512 flags
// (the engine's CMake does that for *_avx512.cc), called only when the CPU has them.
#include <immintrin.h>

#include <cstddef>

#include "lattice/engine/ops/ops.h"

namespace lattice::engine::ops::detail {

namespace {
template <int NV>  // head_dim / 16
void weighted_sum(float* out, const float* w, const float* v, size_t n) {
  __m512 o[NV];
  for (int i = 0; i < NV; ++i) o[i] = _mm512_setzero_ps();
  for (size_t p = 0; p < n; ++p) {
    const __m512 wp = _mm512_set1_ps(w[p]);
    const float* vp = v + p * NV * 16;
    for (int i = 0; i < NV; ++i) o[i] = _mm512_fmadd_ps(wp, _mm512_loadu_ps(vp + 16 * i), o[i]);
  }
  for (int i = 0; i < NV; ++i) _mm512_storeu_ps(out + 16 * i, o[i]);
}
}  // namespace

// head_dim must be a multiple of 16 and at most 256.
void attend_head_avx512(float* out, const float* q, const float* keys_t, const float* v, size_t n_kv, size_t head_dim,
                        float scale, float* scores) {
  const size_t n_blocks = (n_kv + 15) / 16;
  const __m512 vscale = _mm512_set1_ps(scale);
  for (size_t b = 0; b < n_blocks; ++b) {
    const float* tile = keys_t + b * 16 * head_dim;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (size_t d = 0; d < head_dim; d += 4) {
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(q[d]), _mm512_loadu_ps(tile + d * 16), a0);
      a1 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 1]), _mm512_loadu_ps(tile + (d + 1) * 16), a1);
      a2 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 2]), _mm512_loadu_ps(tile + (d + 2) * 16), a2);
      a3 = _mm512_fmadd_ps(_mm512_set1_ps(q[d + 3]), _mm512_loadu_ps(tile + (d + 3) * 16), a3);
    }
    const __m512 s = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
    _mm512_storeu_ps(scores + b * 16, _mm512_mul_ps(s, vscale));
  }
  softmax(scores, n_kv);
  switch (head_dim / 16) {
    case 1: weighted_sum<1>(out, scores, v, n_kv); break;
    case 2: weighted_sum<2>(out, scores, v, n_kv); break;
    case 4: weighted_sum<4>(out, scores, v, n_kv); break;
    case 6: weighted_sum<6>(out, scores, v, n_kv); break;
    case 8: weighted_sum<8>(out, scores, v, n_kv); break;
    case 16: weighted_sum<16>(out, scores, v, n_kv); break;
    default: {
      for (size_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
      for (size_t p = 0; p < n_kv; ++p)
        for (size_t d = 0; d < head_dim; ++d) out[d] += scores[p] * v[p * head_dim + d];
    }
  }
}

}  // namespace lattice::engine::ops::detail
