#include "lattice/engine/ops/ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

// The hot loops keep independent partial sums in a small array so the compiler can put them
// in vector registers without reassociating a single sum (we do not build with fast-math);
// target_clones compiles them for AVX-512, AVX2 and the baseline, picked at load time.
// Not under ThreadSanitizer: the clones' resolver is instrumented and runs while the dynamic
// linker relocates the binary, before TSan's runtime is up, and the binary crashes at load.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
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

namespace {
// Cody-Waite range reduction to r in [-ln2/2, ln2/2], a degree-6 polynomial, and the
// exponent put back with integer arithmetic: all plain arithmetic, so loops of it vectorize.
inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kMagic) - kMagic;
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(e);
}
}  // namespace

LATTICE_OPS_CLONES void exp_inplace(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = exp_approx(x[i]);
}

LATTICE_OPS_CLONES void softmax(float* x, size_t n) {
  float mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float acc[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t j = 0; j < kLanes; ++j) {
      x[i + j] = exp_approx(x[i + j] - mx);
      acc[j] += x[i + j];
    }
  float sum = 0;
  for (size_t j = 0; j < kLanes; ++j) sum += acc[j];
  for (; i < n; ++i) {
    x[i] = exp_approx(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (size_t k = 0; k < n; ++k) x[k] *= inv;
}

LATTICE_OPS_CLONES void swiglu(float* out, const float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + exp_approx(-g)) * up[i];
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

void rope_yarn_corr_dims(uint32_t n_rot, uint32_t n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                         float* low, float* high) {
  const auto dim = [&](float b) {
    return static_cast<float>(n_rot) * std::log(static_cast<float>(n_ctx_orig) / (b * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(freq_base));
  };
  *low = std::max(0.0f, std::floor(dim(beta_fast)));
  *high = std::min(static_cast<float>(n_rot) - 1.0f, std::ceil(dim(beta_slow)));
}

void rope_angles(float* cos_sin, const float* inv_freq, const RopeParams& p, int64_t pos) {
  const uint32_t half = p.n_rot / 2;
  if (p.ext_factor != 0.0f || p.mscale != 1.0f) {
    for (uint32_t i = 0; i < half; ++i) {
      const float extrap = static_cast<float>(pos) * inv_freq[i];
      const float interp = p.pos_scale * extrap;
      float theta = interp;
      if (p.ext_factor != 0.0f) {
        const float y = (static_cast<float>(i) - p.corr_low) / std::max(0.001f, p.corr_high - p.corr_low);
        const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
        theta = interp * (1.0f - mix) + extrap * mix;
      }
      cos_sin[2 * i] = std::cos(theta) * p.mscale;
      cos_sin[2 * i + 1] = std::sin(theta) * p.mscale;
    }
    return;
  }
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

namespace detail {
void attend_head_avx512(float* out, const float* q, const float* keys_t, const float* v, size_t n_kv,
                        size_t head_dim, float scale, float* scores);
}

namespace {
bool have_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = __builtin_cpu_supports("avx512f") != 0;
  return yes;
#else
  return false;
#endif
}

void attend_head_generic(float* out, const float* q, const float* keys_t, const float* v, size_t n_kv,
                         size_t head_dim, float scale, float* scores) {
  const size_t n_blocks = (n_kv + kLanes - 1) / kLanes;
  for (size_t b = 0; b < n_blocks; ++b) {
    const float* tile = keys_t + b * kLanes * head_dim;
    float acc[kLanes] = {};
    for (size_t d = 0; d < head_dim; ++d) {
      const float qd = q[d];
      for (size_t j = 0; j < kLanes; ++j) acc[j] += qd * tile[d * kLanes + j];
    }
    for (size_t j = 0; j < kLanes; ++j) scores[b * kLanes + j] = acc[j] * scale;
  }
  softmax(scores, n_kv);
  for (size_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (size_t p = 0; p < n_kv; ++p) axpy(out, scores[p], v + p * head_dim, head_dim);
}
}  // namespace

void attend_head(float* out, const float* q, const float* keys_t, const float* v, size_t n_kv, size_t head_dim,
                 float scale, float* scores) {
  if (head_dim % 16 == 0 && head_dim <= 256 && have_avx512())
    detail::attend_head_avx512(out, q, keys_t, v, n_kv, head_dim, scale, scores);
  else
    attend_head_generic(out, q, keys_t, v, n_kv, head_dim, scale, scores);
}

}  // namespace lattice::engine::ops
