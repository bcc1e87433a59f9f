#include "lattice/engine/runtime/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "lattice/engine/quant/matmul.h"
#include "lattice/engine/quant/quantize.h"
#include "lattice/engine/runtime/ops.h"
#include "lattice/engine/runtime/float_buffer.h"

namespace lattice::engine {


struct Session::Impl {
  FloatBuffer x, xb, q, k, v, att, gate, up, scores, cos_sin, inv_freq;
  size_t n_floats = 0;
};

Session::~Session() = default;

size_t Session::scratch_bytes() const { return impl_ ? impl_->n_floats * sizeof(float) : 0; }

Result<std::unique_ptr<Session>> Session::create(const Model& model, const SessionOptions& options) {
  const Hparams& hp = model.hparams();
  SessionOptions o = options;
  if (o.n_threads == 0) return InvalidArgument("session: threads must be >= 1");
  if (o.n_batch == 0) return InvalidArgument("session: batch must be >= 1");
  if (o.n_ctx == 0) o.n_ctx = std::min<uint32_t>(hp.n_ctx_train, 4096);
  if (o.n_ctx > std::max<uint64_t>(hp.n_ctx_train, 1) * 8 || o.n_ctx > (1u << 20))
    return InvalidArgument("session: context " + std::to_string(o.n_ctx) + " is far beyond the model's " +
                           std::to_string(hp.n_ctx_train));
  if (hp.head_dim_v != hp.head_dim)
    return Unavailable("session: value head size " + std::to_string(hp.head_dim_v) + " != key head size " +
                       std::to_string(hp.head_dim));
  o.n_batch = std::min(o.n_batch, o.n_ctx);

  std::unique_ptr<Session> s(new Session());
  s->model_ = &model;
  s->opt_ = o;
  s->pool_ = std::make_unique<ThreadPool>(o.n_threads);
  LATTICE_ASSIGN_OR_RETURN(s->cache_, KvCache::create(hp.n_layer, hp.n_head_kv, hp.head_dim, o.n_ctx));
  s->last_logits_.assign(hp.n_vocab, 0.0f);

  auto impl = std::make_unique<Impl>();
  const size_t B = o.n_batch, E = hp.n_embd;
  struct Want {
    FloatBuffer* buf;
    size_t n;
  };
  const Want wants[] = {
      {&impl->x, B * E},
      {&impl->xb, B * std::max<size_t>(E, hp.attn_out_dim())},
      {&impl->q, B * hp.q_dim()},
      {&impl->k, B * hp.kv_dim()},
      {&impl->v, B * hp.v_dim()},
      {&impl->att, B * hp.attn_out_dim()},
      {&impl->gate, B * hp.n_ff},
      {&impl->up, B * hp.n_ff},
      {&impl->scores, size_t{o.n_threads} * ((o.n_ctx + 15) / 16 * 16)},
      {&impl->cos_sin, B * hp.rope.n_rot},
      {&impl->inv_freq, hp.rope.n_rot / 2},
  };
  for (const Want& w : wants) {
    *w.buf = alloc_floats(w.n);
    if (!*w.buf) return ResourceExhausted("session: cannot allocate scratch buffers");
    impl->n_floats += w.n;
  }
  ops::rope_inv_freq(impl->inv_freq.get(), hp.rope, model.rope_freq_factors());
  s->impl_ = std::move(impl);
  return s;
}

Status Session::prefill(std::span<const int32_t> tokens, std::vector<float>* all_logits) {
  if (tokens.empty()) return InvalidArgument("prefill: no tokens");
  const Hparams& hp = model_->hparams();
  if (tokens.size() > cache_.n_ctx() - n_past_)
    return InvalidArgument("prefill: " + std::to_string(tokens.size()) + " tokens do not fit the context (" +
                           std::to_string(n_past_) + " of " + std::to_string(cache_.n_ctx()) + " used)");
  for (int32_t t : tokens)
    if (t < 0 || static_cast<uint32_t>(t) >= hp.n_vocab)
      return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary (" +
                             std::to_string(hp.n_vocab) + ")");
  if (all_logits) all_logits->resize(tokens.size() * hp.n_vocab);
  for (size_t done = 0; done < tokens.size();) {
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(opt_.n_batch, tokens.size() - done));
    LATTICE_RETURN_IF_ERROR(forward(tokens.data() + done, n, all_logits ? all_logits->data() + done * hp.n_vocab : nullptr));
    done += n;
  }
  return Status::Ok();
}

Status Session::decode(int32_t token) { return prefill(std::span<const int32_t>(&token, 1)); }

Status Session::forward(const int32_t* tokens, uint32_t n, float* all_logits) {
  const Model& m = *model_;
  const Hparams& hp = m.hparams();
  Impl& I = *impl_;
  ThreadPool& pool = *pool_;
  const size_t E = hp.n_embd, F = hp.n_ff, HD = hp.head_dim;
  const size_t QD = hp.q_dim(), KD = hp.kv_dim(), VD = hp.v_dim(), AD = hp.attn_out_dim();
  const uint32_t n_rot = hp.rope.n_rot;
  const uint32_t pos0 = n_past_;

  // Embeddings (any weight type: a row dequantized).
  const TensorInfo& emb = m.tok_embd();
  const size_t emb_row = emb.row_bytes();
  for (uint32_t t = 0; t < n; ++t)
    LATTICE_RETURN_IF_ERROR(
        dequantize_row(emb.type, emb.data + static_cast<size_t>(tokens[t]) * emb_row, I.x.get() + t * E, E));
  // RoPE angles depend only on the position: computed once for all layers.
  for (uint32_t t = 0; t < n; ++t)
    ops::rope_angles(I.cos_sin.get() + t * n_rot, I.inv_freq.get(), hp.rope, pos0 + t);

  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    const LayerWeights& L = m.layers()[l];
    for (uint32_t t = 0; t < n; ++t) ops::rmsnorm(I.xb.get() + t * E, I.x.get() + t * E, L.attn_norm, E, hp.rms_eps);
    const MatmulOut qkv[] = {{&L.wq, I.q.get()}, {&L.wk, I.k.get()}, {&L.wv, I.v.get()}};
    matmul_multi(qkv, I.xb.get(), n, pool);
    for (uint32_t t = 0; t < n; ++t) {
      float* q = I.q.get() + t * QD;
      float* k = I.k.get() + t * KD;
      float* v = I.v.get() + t * VD;
      if (L.bq) ops::add(q, L.bq, QD);
      if (L.bk) ops::add(k, L.bk, KD);
      if (L.bv) ops::add(v, L.bv, VD);
      if (L.q_norm) {
        for (uint32_t h = 0; h < hp.n_head; ++h) ops::rmsnorm(q + h * HD, q + h * HD, L.q_norm, HD, hp.rms_eps);
        for (uint32_t h = 0; h < hp.n_head_kv; ++h) ops::rmsnorm(k + h * HD, k + h * HD, L.k_norm, HD, hp.rms_eps);
      }
      const float* cs = I.cos_sin.get() + t * n_rot;
      ops::rope_apply(q, hp.n_head, HD, cs, hp.rope);
      ops::rope_apply(k, hp.n_head_kv, HD, cs, hp.rope);
      for (uint32_t h = 0; h < hp.n_head_kv; ++h) {
        cache_.store_key(l, h, pos0 + t, k + h * HD);
        std::memcpy(cache_.value(l, h, pos0 + t), v + h * HD, HD * sizeof(float));
      }
    }
    // Attention: one task per query head, each over all n tokens (causal).
    const uint32_t group = hp.group();
    pool.parallel_for(hp.n_head, [&](size_t h, size_t thread) {
      const uint32_t kvh = static_cast<uint32_t>(h) / group;
      const float* kc = cache_.keys_t(l, kvh);
      const float* vc = cache_.value(l, kvh, 0);
      float* scores = I.scores.get() + thread * cache_.ctx_stride();
      for (uint32_t t = 0; t < n; ++t)
        ops::attend_head(I.att.get() + t * AD + h * HD, I.q.get() + t * QD + h * HD, kc, vc, pos0 + t + 1, HD,
                         scale, scores);
    });
    matmul(L.wo, I.att.get(), n, I.xb.get(), pool);
    for (uint32_t t = 0; t < n; ++t) ops::add(I.x.get() + t * E, I.xb.get() + t * E, E);

    for (uint32_t t = 0; t < n; ++t) ops::rmsnorm(I.xb.get() + t * E, I.x.get() + t * E, L.ffn_norm, E, hp.rms_eps);
    const MatmulOut gate_up[] = {{&L.w_gate, I.gate.get()}, {&L.w_up, I.up.get()}};
    matmul_multi(gate_up, I.xb.get(), n, pool);
    ops::swiglu(I.gate.get(), I.gate.get(), I.up.get(), static_cast<size_t>(n) * F);
    matmul(L.w_down, I.gate.get(), n, I.xb.get(), pool);
    for (uint32_t t = 0; t < n; ++t) ops::add(I.x.get() + t * E, I.xb.get() + t * E, E);
    if (observer_) observer_(l, std::span<const float>(I.x.get(), static_cast<size_t>(n) * E));
  }

  // Output: the last token's logits always; every token's when asked.
  const uint32_t first = all_logits ? 0 : n - 1;
  for (uint32_t t = first; t < n; ++t)
    ops::rmsnorm(I.xb.get() + (t - first) * E, I.x.get() + t * E, m.output_norm(), E, hp.rms_eps);
  if (all_logits) {
    matmul(m.output(), I.xb.get(), n, all_logits, pool);
    std::memcpy(last_logits_.data(), all_logits + static_cast<size_t>(n - 1) * hp.n_vocab, hp.n_vocab * sizeof(float));
  } else {
    matmul(m.output(), I.xb.get(), 1, last_logits_.data(), pool);
  }
  n_past_ += n;
  return Status::Ok();
}

}  // namespace lattice::engine
