#include "lattice/engine/runtime/ops.h"

#include <cmath>
#include <cstring>

// The hot loops keep independent partial sums in a small array so the compiler can put them
// in vector registers without reassociating a single sum (we do not build with fast-math);
// target_clones compiles them for AVX-512, AVX2 and the baseline, picked at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LATTICE_OPS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LATTICE_OPS_CLONES
#endif

namespace lattice::engine::ops {

namespace {
constexpr size_t kLanes = 16;

LATTICE_OPS_CLONES float sum_squares(const float* x, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] += x[i + j] * x[i + j];
  float s = 0;
  for (size_t j = 0; j < kLanes; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}
}  // namespace

LATTICE_OPS_CLONES float dot(const float* a, const float* b, size_t n) {
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (size_t j = 0; j < kLanes; ++j) s += acc[j];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

LATTICE_OPS_CLONES void axpy(float* y, float a, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

LATTICE_OPS_CLONES void add(float* y, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void rmsnorm(float* out, const float* x, const float* w, size_t n, float eps) {
  const float mean = sum_squares(x, n) / static_cast<float>(n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w) {
    for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = x[i] * scale;
  }
}

void softmax(float* x, size_t n) {
  float mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu(float* out, const float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void rope_inv_freq(float* inv_freq, const RopeParams& p, const float* freq_factors) {
  const uint32_t half = p.n_rot / 2;
  for (uint32_t i = 0; i < half; ++i) {
    double f = std::pow(static_cast<double>(p.freq_base), -2.0 * i / static_cast<double>(p.n_rot));
    if (freq_factors) f /= freq_factors[i];
    inv_freq[i] = static_cast<float>(f);
  }
}

void rope_angles(float* cos_sin, const float* inv_freq, const RopeParams& p, int64_t pos) {
  const uint32_t half = p.n_rot / 2;
  const double scaled_pos = static_cast<double>(pos) * p.pos_scale;
  for (uint32_t i = 0; i < half; ++i) {
    const double a = scaled_pos * inv_freq[i];
    cos_sin[2 * i] = static_cast<float>(std::cos(a));
    cos_sin[2 * i + 1] = static_cast<float>(std::sin(a));
  }
}

void rope_apply(float* v, uint32_t n_heads, uint32_t head_dim, const float* cos_sin, const RopeParams& p) {
  const uint32_t half = p.n_rot / 2;
  for (uint32_t h = 0; h < n_heads; ++h) {
    float* x = v + static_cast<size_t>(h) * head_dim;
    if (p.layout == RopeLayout::kNormal) {
      for (uint32_t i = 0; i < half; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * s;
        x[2 * i + 1] = x0 * s + x1 * c;
      }
    } else {
      for (uint32_t i = 0; i < half; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x0 * s + x1 * c;
      }
    }
  }
}

void attend_head(float* out, const float* q, const float* k, const float* v, size_t n_kv,
                 size_t head_dim, size_t stride, float scale, float* scores) {
  for (size_t j = 0; j < n_kv; ++j) scores[j] = dot(q, k + j * stride, head_dim) * scale;
  softmax(scores, n_kv);
  std::memset(out, 0, head_dim * sizeof(float));
  for (size_t j = 0; j < n_kv; ++j) axpy(out, scores[j], v + j * stride, head_dim);
}

}  // namespace lattice::engine::ops
