// The row-wise pieces of the training forward and backward passes (everything but the
// matrix products, which are gemm.h). Rows are tokens; sizes are element counts. Work is
// split over the pool in fixed chunks of rows, and reductions over rows (norm weight
// gradients) are summed chunk by chunk in chunk order, so results do not depend on the
// thread count.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lattice/engine/ops/thread_pool.h"

namespace lattice::train {

// out[r] = table[ids[r]] (rows of `dim`).
void embed_rows(float* out, const float* table, const int32_t* ids, size_t rows, size_t dim);
// dtable[ids[r]] += d[r], in row order.
void embed_backward_rows(float* dtable, const float* d, const int32_t* ids, size_t rows, size_t dim);

// out = x * rs * w per row, rs[r] = 1 / sqrt(mean(x[r]^2) + eps) (kept for backward).
void rmsnorm_rows(float* out, float* rs, const float* x, const float* w, size_t rows, size_t dim, float eps,
                  engine::ThreadPool& pool);
// dx += d(out)/dx^T dy; dw += sum over rows of dy * x * rs.
void rmsnorm_backward_rows(float* dx, float* dw, const float* dy, const float* x, const float* rs, const float* w,
                           size_t rows, size_t dim, engine::ThreadPool& pool);

// Rotates each head's adjacent pairs (2i, 2i+1) by the angle of the row's position
// (row % seq); `table` holds cos, sin per [position][pair]. inverse: by minus the angle
// (the backward pass: the rotation is orthogonal).
void rope_rows(float* x, const float* table, size_t rows, size_t seq, size_t heads, size_t head_dim, bool inverse,
               engine::ThreadPool& pool);

// out = silu(g) * u, and its backward: dg, du from d(out).
void swiglu_rows(float* out, const float* g, const float* u, size_t n, engine::ThreadPool& pool);
void swiglu_backward_rows(float* dg, float* du, const float* dout, const float* g, const float* u, size_t n,
                          engine::ThreadPool& pool);

// Sum over rows of logsumexp(logits[r]) - logits[r][targets[r]]. With keep_softmax the logits
// are replaced by their softmax (for cross_entropy_grad_rows).
double cross_entropy_rows(float* logits, const int32_t* targets, size_t rows, size_t vocab, bool keep_softmax,
                          engine::ThreadPool& pool);
// softmax -> (softmax - onehot(target)) * scale, in place.
void cross_entropy_grad_rows(float* probs, const int32_t* targets, size_t rows, size_t vocab, float scale,
                             engine::ThreadPool& pool);

struct AttnShape {
  size_t batch, seq, heads, kv_heads, head_dim;
};
// Causal attention of every query head over its KV head (head h uses h / (heads / kv_heads)).
// q, out: [batch * seq][heads * head_dim]; k, v: [batch * seq][kv_heads * head_dim]; probs:
// [batch][heads][seq][seq] softmax weights (kept for backward; zero above the diagonal).
void attention_forward(float* out, float* probs, const float* q, const float* k, const float* v, const AttnShape& s,
                       engine::ThreadPool& pool);
// dq, dk, dv (overwritten) from dout and what the forward pass kept.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                        const float* k, const float* v, const AttnShape& s, engine::ThreadPool& pool);

}  // namespace lattice::train
