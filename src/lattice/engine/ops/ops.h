// Elementwise and attention operations of the transformer forward pass, on f32 activations.
//
// All functions are pure (no allocation, no global state) and thread-compatible: distinct
// output buffers may be written from distinct threads. Sizes are element counts. The
// matrix products live in quant/ (matmul over quantized weights); these are the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace lattice::engine::ops {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]. `out` may alias `x`. `w` may be null (no scale).
void rmsnorm(float* out, const float* x, const float* w, size_t n, float eps);

// y[i] += x[i]
void add(float* y, const float* x, size_t n);

// In place, numerically stable (max subtracted). n >= 1.
void softmax(float* x, size_t n);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). `out` may alias either input.
void swiglu(float* out, const float* gate, const float* up, size_t n);

// Dot product of two f32 vectors (vectorized; summation order differs from a plain loop).
float dot(const float* a, const float* b, size_t n);
// y[i] += a * x[i]
void axpy(float* y, float a, const float* x, size_t n);

// How query/key components are paired by rotary embeddings.
enum class RopeLayout : uint8_t {
  kNormal,  // adjacent pairs (2i, 2i+1): llama
  kNeox,    // halves (i, i + n_rot/2): GPT-NeoX, qwen2, qwen3
};

// Rotary embedding parameters, fixed for a model. The angle of pair i at position p is
// p * pos_scale * inv_freq[i]; inv_freq[i] = freq_base^(-2i/n_rot) / freq_factor[i]
// (freq factors: llama3-style rope_freqs tensor, 1 when absent); pos_scale = 1/factor for
// linear scaling.
//
// YaRN (ext_factor > 0, as ggml's rope computes it): pair i mixes the interpolated angle
// (p * pos_scale * inv_freq[i]) with the extrapolated one (p * inv_freq[i]) by a ramp that is
// 1 below pair corr_low and 0 above corr_high, times ext_factor. cos and sin are multiplied
// by `mscale` (1 unless YaRN or a rope attention factor: the caller folds ggml's
// attn_factor * (1 + 0.1 ln(1/pos_scale)) into it).
struct RopeParams {
  RopeLayout layout = RopeLayout::kNormal;
  uint32_t n_rot = 0;        // rotated dimensions per head (<= head_dim, even)
  float freq_base = 10000.0f;
  float pos_scale = 1.0f;
  float ext_factor = 0.0f;   // YaRN extrapolation mix (0: none)
  float corr_low = 0.0f, corr_high = 0.0f;  // YaRN correction range, in pairs
  float mscale = 1.0f;       // magnitude of cos/sin
};

// ggml's YaRN correction range for n_rot rotated dims, the original context and beta_fast /
// beta_slow: {max(0, floor(d(beta_fast))), min(n_rot - 1, ceil(d(beta_slow)))} with
// d(b) = n_rot * ln(n_ctx_orig / (b * 2 pi)) / (2 ln freq_base).
void rope_yarn_corr_dims(uint32_t n_rot, uint32_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                         float* low, float* high);

// Fills cos_sin[2*i], cos_sin[2*i+1] with cos and sin of the angle of pair i at `pos`
// (n_rot/2 pairs). inv_freq has n_rot/2 entries.
void rope_angles(float* cos_sin, const float* inv_freq, const RopeParams& p, int64_t pos);
// Rotates n_heads heads of head_dim values each (contiguous) by precomputed angles.
void rope_apply(float* v, uint32_t n_heads, uint32_t head_dim, const float* cos_sin, const RopeParams& p);
// inv_freq[i] for i < n_rot/2; freq_factors may be null.
void rope_inv_freq(float* inv_freq, const RopeParams& p, const float* freq_factors);

// exp(x) to about 2 ulp for x in [-87, 88] (clamped outside), in a form the compiler
// vectorizes; softmax and SwiGLU use it over whole rows.
void exp_inplace(float* x, size_t n);

// Attention of one query head over the first n_kv cached positions of one KV head.
//   q: head_dim values; keys_t: the keys in blocks of 16 positions, component d of position
//   p at keys_t[(p / 16) * 16 * head_dim + d * 16 + p % 16] (slots up to n_kv rounded up to
//   16 readable and finite); v: n_kv rows of head_dim values; scores: scratch of n_kv
//   rounded up to 16 floats; out: head_dim values (overwritten).
void attend_head(float* out, const float* q, const float* keys_t, const float* v, size_t n_kv, size_t head_dim,
                 float scale, float* scores);

}  // namespace lattice::engine::ops
