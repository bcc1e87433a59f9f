// Multi-head latent attention (deepseek2) and shared experts: parts of the forward pass
// (forward.h) that only MLA / shared-expert models use.
//
// The cache holds, per layer and position, the normed latent (kv_lora_rank values) and the
// roped key (rope dims), shared by every head. A head's query is absorbed into latent space
// (q_nope through k_b), scored against every cached row (latent part + rope part), and the
// softmax-weighted sum of the latents is expanded through v_b: llama.cpp's absorbed form,
// which it also uses for prefill of these files. Heads run in parallel, each with a
// single-thread pool for its own small matrix products.
//
// Tensor parallel: a rank runs its heads (Model::heads()) over the whole latent cache, which
// it fills itself (the latent projection is on every rank); its wo columns give a partial
// sum of the output, which the caller's all-reduce adds up with the other ranks'.
#include <algorithm>
#include <cstring>

#include "lattice/engine/ops/ops.h"
#include "lattice/engine/quant/matmul.h"
#include "lattice/engine/runtime/forward.h"

namespace lattice::engine {

void Forward::mla_attention(uint32_t l, std::span<const StepItem> items, uint32_t R) {
  const Model& m = *model_;
  const Hparams& hp = m.hparams();
  const LayerWeights& L = m.layers()[l];
  ThreadPool& pool = *pool_;
  const size_t E = hp.n_embd, H = m.heads().size(), KD = hp.mla_k_dim, VD = hp.mla_v_dim, C = hp.kv_lora_rank;
  const size_t NR = hp.rope.n_rot, N = hp.nope_dim(), W = C + NR, QA = hp.q_lora_rank;
  float* xb = xb_.get();
  float* q = q_.get();
  float* kv = mla_kv_.get();
  if (H == 0) {  // no heads on this rank: nothing to add to the sum (nor to cache)
    std::memset(xb, 0, size_t{R} * E * sizeof(float));
    return;
  }

  // Projections: q (through the q lora when present) and the latent + rope key.
  if (L.wq_a.n_rows()) {
    const MatmulOut outs[] = {{&L.wq_a, mla_qa_.get()}, {&L.wkv_a, kv}};
    matmul_multi(outs, xb, R, pool);
    for (uint32_t r = 0; r < R; ++r) ops::rmsnorm(mla_qa_.get() + r * QA, mla_qa_.get() + r * QA, L.q_a_norm, QA, hp.rms_eps);
    matmul(L.wq_b, mla_qa_.get(), R, q, pool);
    bytes_read_ += L.wq_a.bytes() + L.wq_b.bytes() + L.wkv_a.bytes();
  } else {
    const MatmulOut outs[] = {{&L.wq, q}, {&L.wkv_a, kv}};
    matmul_multi(outs, xb, R, pool);
    bytes_read_ += L.wq.bytes() + L.wkv_a.bytes();
  }
  // Norm the latent, rotate the rope parts, append the rows to their caches.
  for (uint32_t i = 0; i < items.size(); ++i) {
    KvCache& cache = items[i].seq->cache_;
    const uint32_t pos0 = items[i].seq->n_past_;
    for (uint32_t j = 0; j < items[i].rows(); ++j) {
      const uint32_t r = item_row0_[i] + j;
      float* row = kv + r * W;
      const float* cs = cos_sin_.get() + size_t{r} * NR;
      ops::rmsnorm(row, row, L.kv_a_norm, C, hp.rms_eps);
      ops::rope_apply(row + C, 1, NR, cs, hp.rope);
      for (size_t h = 0; h < H; ++h) ops::rope_apply(q + r * H * KD + h * KD + N, 1, NR, cs, hp.rope);
      std::memcpy(cache.latent(l, pos0 + j), row, W * sizeof(float));
    }
  }
  for (const Weight& w : L.k_b) bytes_read_ += w.bytes();
  for (const Weight& w : L.v_b) bytes_read_ += w.bytes();

  const size_t stride = (opt_.n_ctx + 15) / 16 * 16;
  const float scale = hp.attn_scale;
  float* att = att_.get();
  pool.parallel_for(H, [&](size_t h, size_t thread) {
    ThreadPool& serial = *serial_[thread];
    float* qn = mla_scratch_.get() + thread * mla_scratch_stride_;  // [R x N]
    float* qabs = qn + size_t{R} * N;                                // [R x C]
    float* olat = qabs + size_t{R} * C;                              // [R x C]
    float* out = olat + size_t{R} * C;                               // [R x VD]
    float* scores = scores_.get() + thread * stride;
    for (uint32_t r = 0; r < R; ++r) std::memcpy(qn + r * N, q + r * H * KD + h * KD, N * sizeof(float));
    matmul(L.k_b[h], qn, R, qabs, serial);
    for (uint32_t i = 0; i < items.size(); ++i) {
      const KvCache& cache = items[i].seq->cache_;
      const uint32_t pos0 = items[i].seq->n_past_;
      for (uint32_t j = 0; j < items[i].rows(); ++j) {
        const uint32_t r = item_row0_[i] + j, n_kv = pos0 + j + 1;
        const float* qa = qabs + size_t{r} * C;
        const float* qr = q + r * H * KD + h * KD + N;
        for (uint32_t p = 0; p < n_kv; ++p) {
          const float* kr = cache.latent(l, p);
          scores[p] = (ops::dot(qa, kr, C) + ops::dot(qr, kr + C, NR)) * scale;
        }
        ops::softmax(scores, n_kv);
        float* o = olat + size_t{r} * C;
        std::memset(o, 0, C * sizeof(float));
        for (uint32_t p = 0; p < n_kv; ++p) ops::axpy(o, scores[p], cache.latent(l, p), C);
      }
    }
    matmul(L.v_b[h], olat, R, out, serial);
    for (uint32_t r = 0; r < R; ++r) std::memcpy(att + r * H * VD + h * VD, out + r * VD, VD * sizeof(float));
  });
  matmul(L.wo, att, R, xb, pool);
  bytes_read_ += L.wo.bytes();
}

void Forward::shared_experts(const LayerWeights& L, uint32_t R, float* acc) {
  const size_t E = model_->hparams().n_embd, FS = L.gate_shexp.n_rows();
  const MatmulOut gate_up[] = {{&L.gate_shexp, gate_.get()}, {&L.up_shexp, up_.get()}};
  matmul_multi(gate_up, xb_.get(), R, *pool_);
  ops::swiglu(gate_.get(), gate_.get(), up_.get(), size_t{R} * FS);
  matmul(L.down_shexp, gate_.get(), R, ye_.get(), *pool_);
  bytes_read_ += L.gate_shexp.bytes() + L.up_shexp.bytes() + L.down_shexp.bytes();
  for (uint32_t r = 0; r < R; ++r) ops::add(acc + r * E, ye_.get() + r * E, E);
}

}  // namespace lattice::engine
