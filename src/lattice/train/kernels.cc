#include "lattice/train/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "lattice/engine/ops/ops.h"
#include "lattice/train/gemm.h"

// As in engine/ops: the loops are compiled for AVX-512, AVX2 and the baseline, chosen at load
// (not under ThreadSanitizer, whose instrumented resolver would run before its runtime is up).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define LATTICE_TRAIN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define LATTICE_TRAIN_CLONES
#endif

namespace lattice::train {
namespace {

constexpr size_t kRowChunk = 16;   // rows per pool task
constexpr size_t kNormChunk = 64;  // rows per partial sum of a norm weight's gradient
constexpr size_t kAttnChunk = 64;  // query rows per causal block (keys up to the block's end)

template <class Fn>
void for_row_chunks(size_t rows, size_t chunk, engine::ThreadPool& pool, Fn&& fn) {
  const size_t n_tasks = (rows + chunk - 1) / chunk;
  pool.parallel_for(n_tasks, [&](size_t t, size_t) { fn(t * chunk, std::min(rows, (t + 1) * chunk)); });
}

LATTICE_TRAIN_CLONES void scale_row(float* out, const float* x, const float* w, float s, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * s * w[i];
}

LATTICE_TRAIN_CLONES void rmsnorm_backward_row(float* dx, float* dw, const float* dy, const float* x, float r,
                                               const float* w, size_t n) {
  float acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; ++j) acc[j] += dy[i + j] * w[i + j] * x[i + j];
  float dot = 0;
  for (size_t j = 0; j < 16; ++j) dot += acc[j];
  for (; i < n; ++i) dot += dy[i] * w[i] * x[i];
  const float c = dot * r * r * r / static_cast<float>(n);
  for (i = 0; i < n; ++i) {
    dx[i] += r * dy[i] * w[i] - c * x[i];
    dw[i] += dy[i] * x[i] * r;
  }
}

LATTICE_TRAIN_CLONES void rope_row(float* x, const float* cs, size_t heads, size_t hd, float sign) {
  for (size_t h = 0; h < heads; ++h) {
    float* p = x + h * hd;
    for (size_t i = 0; i < hd / 2; ++i) {
      const float c = cs[2 * i], s = sign * cs[2 * i + 1];
      const float a = p[2 * i], b = p[2 * i + 1];
      p[2 * i] = a * c - b * s;
      p[2 * i + 1] = a * s + b * c;
    }
  }
}

LATTICE_TRAIN_CLONES void swiglu_backward_block(float* dg, float* du, const float* dout, const float* g,
                                                const float* u, float* e, size_t n) {
  for (size_t i = 0; i < n; ++i) e[i] = -g[i];
  engine::ops::exp_inplace(e, n);
  for (size_t i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + e[i]);
    const float silu = g[i] * s;
    du[i] = dout[i] * silu;
    dg[i] = dout[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
  }
}

LATTICE_TRAIN_CLONES float row_max(const float* x, size_t n) {
  float m = x[0];
  for (size_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

LATTICE_TRAIN_CLONES float sub_exp_sum(float* x, float mx, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] -= mx;
  engine::ops::exp_inplace(x, n);
  float acc[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; ++j) acc[j] += x[i + j];
  float s = 0;
  for (size_t j = 0; j < 16; ++j) s += acc[j];
  for (; i < n; ++i) s += x[i];
  return s;
}

LATTICE_TRAIN_CLONES void scale_inplace(float* x, float s, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

// dS = P * (dP - sum(P * dP)) * scale over j <= i, zero for i < j < end.
LATTICE_TRAIN_CLONES void softmax_backward_row(float* ds, const float* p, size_t i, size_t end, float scale) {
  const float dot = engine::ops::dot(p, ds, i + 1);
  for (size_t j = 0; j <= i; ++j) ds[j] = p[j] * (ds[j] - dot) * scale;
  for (size_t j = i + 1; j < end; ++j) ds[j] = 0.0f;
}

}  // namespace

void embed_rows(float* out, const float* table, const int32_t* ids, size_t rows, size_t dim) {
  for (size_t r = 0; r < rows; ++r) std::memcpy(out + r * dim, table + static_cast<size_t>(ids[r]) * dim, dim * sizeof(float));
}

void embed_backward_rows(float* dtable, const float* d, const int32_t* ids, size_t rows, size_t dim) {
  for (size_t r = 0; r < rows; ++r) engine::ops::add(dtable + static_cast<size_t>(ids[r]) * dim, d + r * dim, dim);
}

void rmsnorm_rows(float* out, float* rs, const float* x, const float* w, size_t rows, size_t dim, float eps,
                  engine::ThreadPool& pool) {
  for_row_chunks(rows, kRowChunk, pool, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      const float ms = engine::ops::dot(xr, xr, dim) / static_cast<float>(dim);
      rs[r] = 1.0f / std::sqrt(ms + eps);
      scale_row(out + r * dim, xr, w, rs[r], dim);
    }
  });
}

void rmsnorm_backward_rows(float* dx, float* dw, const float* dy, const float* x, const float* rs, const float* w,
                           size_t rows, size_t dim, engine::ThreadPool& pool) {
  const size_t n_chunks = (rows + kNormChunk - 1) / kNormChunk;
  std::vector<float> partial(n_chunks * dim, 0.0f);
  for_row_chunks(rows, kNormChunk, pool, [&](size_t r0, size_t r1) {
    float* pw = partial.data() + (r0 / kNormChunk) * dim;
    for (size_t r = r0; r < r1; ++r) rmsnorm_backward_row(dx + r * dim, pw, dy + r * dim, x + r * dim, rs[r], w, dim);
  });
  for (size_t c = 0; c < n_chunks; ++c) engine::ops::add(dw, partial.data() + c * dim, dim);
}

void rope_rows(float* x, const float* table, size_t rows, size_t seq, size_t heads, size_t head_dim, bool inverse,
               engine::ThreadPool& pool) {
  const size_t width = heads * head_dim;
  for_row_chunks(rows, kRowChunk, pool, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r)
      rope_row(x + r * width, table + (r % seq) * head_dim, heads, head_dim, inverse ? -1.0f : 1.0f);
  });
}

void swiglu_rows(float* out, const float* g, const float* u, size_t n, engine::ThreadPool& pool) {
  constexpr size_t kBlock = 4096;
  for_row_chunks(n, kBlock, pool, [&](size_t a, size_t b) { engine::ops::swiglu(out + a, g + a, u + a, b - a); });
}

void swiglu_backward_rows(float* dg, float* du, const float* dout, const float* g, const float* u, size_t n,
                          engine::ThreadPool& pool) {
  constexpr size_t kBlock = 4096;
  for_row_chunks(n, kBlock, pool, [&](size_t a, size_t b) {
    float e[kBlock];
    swiglu_backward_block(dg + a, du + a, dout + a, g + a, u + a, e, b - a);
  });
}

double cross_entropy_rows(float* logits, const int32_t* targets, size_t rows, size_t vocab, bool keep_softmax,
                          engine::ThreadPool& pool) {
  std::vector<double> losses(rows);
  for_row_chunks(rows, 4, pool, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      float* z = logits + r * vocab;
      const float mx = row_max(z, vocab);
      const float zt = z[targets[r]] - mx;
      const float sum = sub_exp_sum(z, mx, vocab);
      losses[r] = std::log(static_cast<double>(sum)) - zt;
      if (keep_softmax) scale_inplace(z, 1.0f / sum, vocab);
    }
  });
  double total = 0;
  for (double l : losses) total += l;
  return total;
}

void cross_entropy_grad_rows(float* probs, const int32_t* targets, size_t rows, size_t vocab, float scale,
                             engine::ThreadPool& pool) {
  for_row_chunks(rows, 4, pool, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      float* p = probs + r * vocab;
      p[targets[r]] -= 1.0f;
      scale_inplace(p, scale, vocab);
    }
  });
}

void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v, const AttnShape& s,
                       engine::ThreadPool& pool) {
  const size_t S = s.seq, hd = s.head_dim, D = s.heads * hd, KD = s.kv_heads * hd, group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool.parallel_for(s.batch * s.heads, [&](size_t task, size_t) {
    const size_t b = task / s.heads, h = task % s.heads, kvh = h / group;
    const float* Q = q + b * S * D + h * hd;
    const float* K = k + b * S * KD + kvh * hd;
    const float* V = v + b * S * KD + kvh * hd;
    float* P = probs + task * S * S;
    float* O = out + b * S * D + h * hd;
    for (size_t i0 = 0; i0 < S; i0 += kAttnChunk) {
      const size_t i1 = std::min(S, i0 + kAttnChunk);
      gemm({false, true, i1 - i0, i1, hd, Q + i0 * D, D, K, KD, P + i0 * S, S, false}, nullptr);
      for (size_t i = i0; i < i1; ++i) {
        float* row = P + i * S;
        scale_inplace(row, scale, i + 1);
        engine::ops::softmax(row, i + 1);
        std::fill(row + i + 1, row + i1, 0.0f);
      }
      gemm({false, false, i1 - i0, hd, i1, P + i0 * S, S, V, KD, O + i0 * D, D, false}, nullptr);
    }
  });
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                        const float* k, const float* v, const AttnShape& s, engine::ThreadPool& pool) {
  const size_t S = s.seq, hd = s.head_dim, D = s.heads * hd, KD = s.kv_heads * hd, group = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool.parallel_for(s.batch * s.kv_heads, [&](size_t task, size_t) {
    static thread_local std::vector<float> ds_buf;  // kept: a fresh one a call would fault its pages in again
    if (ds_buf.size() < S * S) ds_buf.assign(S * S, 0.0f);
    float* dS = ds_buf.data();
    const size_t b = task / s.kv_heads, kvh = task % s.kv_heads;
    const float* K = k + b * S * KD + kvh * hd;
    const float* V = v + b * S * KD + kvh * hd;
    float* dK = dk + b * S * KD + kvh * hd;
    float* dV = dv + b * S * KD + kvh * hd;
    for (size_t i = 0; i < S; ++i) {
      std::fill_n(dK + i * KD, hd, 0.0f);
      std::fill_n(dV + i * KD, hd, 0.0f);
    }
    for (size_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const float* P = probs + (b * s.heads + h) * S * S;
      const float* Q = q + b * S * D + h * hd;
      const float* dO = dout + b * S * D + h * hd;
      float* dQ = dq + b * S * D + h * hd;
      for (size_t i0 = 0; i0 < S; i0 += kAttnChunk) {
        const size_t i1 = std::min(S, i0 + kAttnChunk);
        gemm({false, true, i1 - i0, i1, hd, dO + i0 * D, D, V, KD, dS + i0 * S, S, false}, nullptr);
        for (size_t i = i0; i < i1; ++i) softmax_backward_row(dS + i * S, P + i * S, i, i1, scale);
        gemm({false, false, i1 - i0, hd, i1, dS + i0 * S, S, K, KD, dQ + i0 * D, D, false}, nullptr);
      }
      // Key block [j0, j1) is seen by query rows j0.. only; those rows were written up to
      // at least j1 (same block size), the rest of each row below is zero.
      for (size_t j0 = 0; j0 < S; j0 += kAttnChunk) {
        const size_t j1 = std::min(S, j0 + kAttnChunk);
        gemm({true, false, j1 - j0, hd, S - j0, P + j0 * S + j0, S, dO + j0 * D, D, dV + j0 * KD, KD, true}, nullptr);
        gemm({true, false, j1 - j0, hd, S - j0, dS + j0 * S + j0, S, Q + j0 * D, D, dK + j0 * KD, KD, true}, nullptr);
      }
    }
  });
}

}  // namespace lattice::train
