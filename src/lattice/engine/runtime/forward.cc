#include "lattice/engine/runtime/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "lattice/engine/ops/ops.h"
#include "lattice/engine/quant/matmul.h"
#include "lattice/engine/quant/quantize.h"
#include "lattice/engine/runtime/router.h"

namespace lattice::engine {

namespace {
// Candidates of one rank for one item, as (value, id) float pairs: ids below 2^24 are exact.
constexpr float kNoId = -1.0f;
constexpr uint32_t kMaxExpertsUsed = 64;

bool greedy(const Sampler* s) {
  if (!s) return true;
  const SamplerParams& p = s->params();
  return p.temperature <= 0 && p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f;
}

int32_t argmax_lowest(std::span<const float> v, uint32_t id0, float* best_value) {
  float best = -std::numeric_limits<float>::infinity();
  int32_t id = -1;
  for (uint32_t i = 0; i < v.size(); ++i)
    if (v[i] > best) best = v[i], id = static_cast<int32_t>(id0 + i);
  *best_value = best;
  return id;
}
}  // namespace

Forward::~Forward() = default;

Result<std::unique_ptr<Forward>> Forward::create(const Model& model, Group& group, const ForwardOptions& options) {
  const Hparams& hp = model.hparams();
  if (group.size() != model.world() || group.rank() != model.rank())
    return InvalidArgument("forward: the group is rank " + std::to_string(group.rank()) + " of " +
                           std::to_string(group.size()) + ", the shard rank " + std::to_string(model.rank()) + " of " +
                           std::to_string(model.world()));
  ForwardOptions o = options;
  if (o.n_threads == 0) return InvalidArgument("forward: threads must be >= 1");
  if (o.n_batch == 0) return InvalidArgument("forward: batch must be >= 1");
  if (o.max_items == 0) return InvalidArgument("forward: sequences per step must be >= 1");
  if (o.n_ctx == 0) o.n_ctx = std::min<uint32_t>(hp.n_ctx_train, 4096);
  if (o.n_ctx > std::max<uint64_t>(hp.n_ctx_train, 1) * 8 || o.n_ctx > (1u << 20))
    return InvalidArgument("forward: context " + std::to_string(o.n_ctx) + " is far beyond the model's " +
                           std::to_string(hp.n_ctx_train));
  if (hp.n_expert_used > kMaxExpertsUsed)
    return Unavailable("forward: " + std::to_string(hp.n_expert_used) + " experts a token, at most " +
                       std::to_string(kMaxExpertsUsed));
  const bool mla = model.arch().attention == AttentionKind::kMla;
  if (!mla && hp.head_dim_v != hp.head_dim)
    return Unavailable("forward: value head size " + std::to_string(hp.head_dim_v) + " != key head size " +
                       std::to_string(hp.head_dim));
  o.n_batch = static_cast<uint32_t>(std::min<uint64_t>(o.n_batch, uint64_t{o.n_ctx} * o.max_items));
  if (o.a2a_min_rows == ForwardOptions::kEpA2aMinRows) o.a2a_min_rows = ep_prefill_cost(model).min_rows;
  o.max_items = std::min(o.max_items, o.n_batch);

  std::unique_ptr<Forward> f(new Forward());
  f->model_ = &model;
  f->group_ = &group;
  f->opt_ = o;
  f->pool_ = std::make_unique<ThreadPool>(o.n_threads);
  const size_t B = o.n_batch, E = hp.n_embd, HD = hp.head_dim;
  const size_t nkv = model.kv_heads().size();
  const size_t QL = nkv * hp.group() * HD, KL = nkv * HD;
  // The widest FFN a layer has (dense, shared expert, or under expert parallelism an owned
  // expert, which runs whole, wider than this rank's dense FFN slice).
  size_t FL = std::max<size_t>(model.ff().size(), model.expert_parallel() ? hp.n_ff_exp : 0);
  for (const LayerWeights& L : model.layers()) FL = std::max({FL, L.w_gate.n_rows(), L.gate_shexp.n_rows()});
  const size_t AL = mla ? std::max<size_t>(QL, size_t{hp.n_head} * std::max(hp.mla_v_dim, hp.mla_k_dim)) : QL;
  const size_t C = hp.kv_lora_rank;
  f->mla_scratch_stride_ = mla ? B * (hp.nope_dim() + 2 * C + hp.mla_v_dim) : 0;
  struct Want {
    FloatBuffer* buf;
    size_t n;
  } wants[] = {
      {&f->x_, B * E},         {&f->xb_, B * E},        {&f->q_, B * AL},   {&f->k_, B * KL},
      {&f->v_, B * KL},        {&f->att_, B * AL},      {&f->gate_, B * FL}, {&f->up_, B * FL},
      {&f->route_sel_, hp.n_expert + hp.n_expert_groups},
      {&f->mla_qa_, mla ? B * hp.q_lora_rank : 0},      {&f->mla_kv_, mla ? B * (C + hp.rope.n_rot) : 0},
      {&f->mla_scratch_, size_t{o.n_threads} * f->mla_scratch_stride_},
      {&f->scores_, size_t{o.n_threads} * ((o.n_ctx + 15) / 16 * 16)},
      {&f->cos_sin_, B * hp.rope.n_rot},                {&f->inv_freq_, hp.rope.n_rot / 2},
      {&f->router_, hp.moe() ? B * hp.n_expert : 0},    {&f->xe_, hp.moe() ? B * E : 0},
      {&f->ye_, hp.moe() ? B * E : 0},                  {&f->acc_, hp.moe() ? B * E : 0},
  };
  for (const Want& w : wants) {
    *w.buf = alloc_floats(w.n);
    if (!*w.buf) return ResourceExhausted("forward: cannot allocate scratch buffers");
    std::memset(w.buf->get(), 0, w.n * sizeof(float));
    f->scratch_floats_ += w.n;
  }
  if (model.has_head()) f->logits_.assign(size_t{o.max_items} * model.vocab().size(), 0.0f);
  if (mla)
    for (uint32_t t = 0; t < o.n_threads; ++t) f->serial_.push_back(std::make_unique<ThreadPool>(1));
  f->expert_rows_.resize(hp.n_expert);
  f->load_.tokens.assign(size_t{model.n_local_layers()} * hp.n_expert, 0);
  f->load_.rank_rows.assign(model.world(), 0);
  f->order_.resize(hp.n_expert);
  ops::rope_inv_freq(f->inv_freq_.get(), hp.rope, model.rope_freq_factors());
  return f;
}

Result<std::unique_ptr<Sequence>> Forward::new_sequence(uint32_t n_ctx) const {
  if (n_ctx == 0) n_ctx = opt_.n_ctx;
  if (n_ctx > opt_.n_ctx)
    return InvalidArgument("sequence: context " + std::to_string(n_ctx) + " exceeds the forward pass's " +
                           std::to_string(opt_.n_ctx));
  const Hparams& hp = model_->hparams();
  std::unique_ptr<Sequence> s(new Sequence());
  s->owner_ = this;
  if (model_->arch().attention == AttentionKind::kMla) {
    LATTICE_ASSIGN_OR_RETURN(s->cache_, KvCache::create_latent(model_->n_local_layers(), hp.kv_lora_rank + hp.rope.n_rot,
                                                               n_ctx));
    return s;
  }
  LATTICE_ASSIGN_OR_RETURN(s->cache_, KvCache::create(model_->n_local_layers(),
                                                      std::max<uint32_t>(model_->kv_heads().size(), 1), hp.head_dim,
                                                      n_ctx));
  return s;
}

Status Forward::check(std::span<const StepItem> items, uint32_t* total_rows) const {
  if (items.empty()) return InvalidArgument("forward: a step needs at least one sequence");
  if (items.size() > opt_.max_items)
    return InvalidArgument("forward: " + std::to_string(items.size()) + " sequences in a step, at most " +
                           std::to_string(opt_.max_items));
  const uint32_t V = model_->hparams().n_vocab;
  uint64_t rows = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    if (!it.seq || it.seq->owner_ != this) return InvalidArgument("forward: a sequence of another forward pass");
    for (size_t j = 0; j < i; ++j)
      if (items[j].seq == it.seq) return InvalidArgument("forward: a sequence twice in one step");
    const uint32_t n = it.rows();
    if (n == 0) return InvalidArgument("prefill: no tokens");
    if (!it.x_in && model_->layer_begin() != 0)
      return InvalidArgument("forward: a later pipeline stage takes hidden states, not tokens");
    if (n > it.seq->n_free())
      return InvalidArgument("prefill: " + std::to_string(n) + " tokens do not fit the context (" +
                             std::to_string(it.seq->n_past()) + " of " + std::to_string(it.seq->n_ctx()) + " used)");
    for (int32_t t : it.tokens)
      if (t < 0 || static_cast<uint32_t>(t) >= V)
        return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(V) +
                               ")");
    rows += n;
  }
  if (rows > opt_.n_batch)
    return InvalidArgument("forward: " + std::to_string(rows) + " rows in a step, at most " +
                           std::to_string(opt_.n_batch));
  *total_rows = static_cast<uint32_t>(rows);
  return Status::Ok();
}

void Forward::attention(uint32_t l, std::span<const StepItem> items) {
  const Hparams& hp = model_->hparams();
  const uint32_t HD = hp.head_dim, G = hp.group();
  const uint32_t nqh = model_->kv_heads().size() * G;
  const size_t QL = size_t{nqh} * HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const size_t stride = (opt_.n_ctx + 15) / 16 * 16;
  // One task per (sequence, query head), each over that sequence's rows (causal).
  pool_->parallel_for(items.size() * nqh, [&](size_t task, size_t thread) {
    const size_t i = task / nqh;
    const uint32_t h = static_cast<uint32_t>(task % nqh);
    const KvCache& cache = items[i].seq->cache_;
    const float* kc = cache.keys_t(l, h / G);
    const float* vc = cache.value(l, h / G, 0);
    float* scores = scores_.get() + thread * stride;
    const uint32_t r0 = item_row0_[i], pos0 = items[i].seq->n_past_;
    for (uint32_t j = 0; j < items[i].rows(); ++j)
      ops::attend_head(att_.get() + (r0 + j) * QL + h * HD, q_.get() + (r0 + j) * QL + h * HD, kc, vc, pos0 + j + 1,
                       HD, scale, scores);
  });
}

void Forward::route(const LayerWeights& L, const float* xn, uint32_t R,
                    const std::function<void(uint32_t row, const uint32_t* ids, const float* w)>& fn) {
  const Hparams& hp = model_->hparams();
  const size_t X = hp.n_expert, K = hp.n_expert_used;
  matmul(L.router, xn, R, router_.get(), *pool_);
  bytes_read_ += L.router.bytes();
  uint32_t ids[kMaxExpertsUsed];
  float w[kMaxExpertsUsed];
  const RouteParams rp{hp.expert_gating, hp.n_expert, hp.n_expert_used, hp.n_expert_groups, hp.n_group_used,
                       hp.expert_weights_norm, hp.expert_weights_scale};
  const bool general = model_->arch().router != RouterKind::kSoftmaxTopK;
  for (uint32_t r = 0; r < R; ++r) {
    if (general)
      route_topk(rp, router_.get() + size_t{r} * X, L.exp_probs_b, ids, w, order_.data(), route_sel_.get(),
                 route_sel_.get() + X);
    else
      route_softmax_topk(router_.get() + size_t{r} * X, X, K, hp.expert_weights_norm, hp.expert_weights_scale, ids, w,
                         order_.data());
    fn(r, ids, w);
  }
}

void Forward::moe_ffn(uint32_t l, const LayerWeights& L, uint32_t R) {
  const Hparams& hp = model_->hparams();
  const size_t E = hp.n_embd, K = hp.n_expert_used;
  float* xb = xb_.get();
  // The router runs on every rank over the whole expert set, so every rank picks the same
  // experts for every token.
  for (auto& rows : expert_rows_) rows.clear();
  route(L, xb, R, [&](uint32_t r, const uint32_t* ids, const float* w) {
    for (size_t k = 0; k < K; ++k) expert_rows_[ids[k]].emplace_back(r, w[k]);
  });
  count_expert_load(l);
  run_experts(L, R);
  std::memcpy(xb, acc_.get(), size_t{R} * E * sizeof(float));
}

void Forward::run_experts(const LayerWeights& L, uint32_t R) {
  const size_t E = model_->hparams().n_embd, X = model_->hparams().n_expert;
  const bool ep = model_->expert_parallel();
  const float* xb = xb_.get();
  float* acc = acc_.get();
  std::memset(acc, 0, size_t{R} * E * sizeof(float));
  // Each chosen expert once, over the rows that chose it: its weights are read once a step.
  // A rank runs the experts it holds (tensor parallel: its columns of each; expert
  // parallel: the ones it runs this step); the caller sums the partial outputs.
  for (size_t e = 0; e < X; ++e) {
    const auto& rows = expert_rows_[e];
    const size_t FL = L.gate_exps[e].n_rows();
    if (rows.empty() || FL == 0 || (ep && runner_[e] != model_->rank())) continue;
    const size_t n = rows.size();
    for (size_t j = 0; j < n; ++j) std::memcpy(xe_.get() + j * E, xb + rows[j].first * E, E * sizeof(float));
    const MatmulOut gate_up[] = {{&L.gate_exps[e], gate_.get()}, {&L.up_exps[e], up_.get()}};
    matmul_multi(gate_up, xe_.get(), n, *pool_);
    ops::swiglu(gate_.get(), gate_.get(), up_.get(), n * FL);
    matmul(L.down_exps[e], gate_.get(), n, ye_.get(), *pool_);
    bytes_read_ += L.gate_exps[e].bytes() + L.up_exps[e].bytes() + L.down_exps[e].bytes();
    for (size_t j = 0; j < n; ++j) ops::axpy(acc + rows[j].first * E, rows[j].second, ye_.get() + j * E, E);
  }
  if (L.gate_shexp.n_rows()) shared_experts(L, R, acc);
}

void Forward::count_expert_load(uint32_t layer) {
  const uint32_t X = model_->hparams().n_expert;
  uint64_t* tokens = load_.tokens.data() + size_t{layer - model_->layer_begin()} * X;
  for (uint32_t e = 0; e < X; ++e) tokens[e] += expert_rows_[e].size();
  if (!model_->expert_parallel()) return;
  // Every rank routes every row the same way, so each knows every rank's share of the work
  // and makes the same choice of runner: its owner, or with replicas (Shard::expert_spare)
  // the least busy holder, the experts with the most rows first (ties: the lowest id; then
  // the owner, then the lowest rank).
  const int W = model_->world();
  rank_rows_now_.assign(W, 0);
  runner_.assign(X, -1);
  order_.resize(X);
  std::iota(order_.begin(), order_.end(), 0u);
  std::stable_sort(order_.begin(), order_.end(),
                   [&](uint32_t a, uint32_t b) { return expert_rows_[a].size() > expert_rows_[b].size(); });
  for (uint32_t e : order_) {
    const size_t n = expert_rows_[e].size();
    if (n == 0) break;
    const int owner = model_->expert_owner(layer, e);
    const uint64_t holders = model_->expert_holders(layer, e);
    int best = owner;
    for (int r = 0; r < W && r < 64; ++r)
      if ((holders >> r & 1) && rank_rows_now_[r] < rank_rows_now_[best]) best = r;
    runner_[e] = best;
    rank_rows_now_[best] += n;
  }
  uint64_t busiest = 0;
  for (size_t r = 0; r < rank_rows_now_.size(); ++r)
    load_.rank_rows[r] += rank_rows_now_[r], busiest = std::max(busiest, rank_rows_now_[r]);
  load_.busiest_rows += busiest;
}

Status Forward::embed(std::span<const StepItem> items) {
  const Model& m = *model_;
  const Hparams& hp = m.hparams();
  const size_t E = hp.n_embd;
  const uint32_t n_rot = hp.rope.n_rot;
  float* x = x_.get();
  // Rows of the step, item after item; the input of each (embeddings or hidden states) and
  // its RoPE angles, which depend only on the position and serve every layer.
  item_row0_.resize(items.size());
  const TensorInfo& emb = m.tok_embd();
  const size_t emb_row = emb.row_bytes();
  for (uint32_t i = 0, r = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    item_row0_[i] = r;
    const uint32_t n = it.rows();
    if (it.x_in) {
      std::memcpy(x + r * E, it.x_in, size_t{n} * E * sizeof(float));
    } else {
      for (uint32_t j = 0; j < n; ++j)
        LATTICE_RETURN_IF_ERROR(dequantize_row(emb.type, emb.data + static_cast<size_t>(it.tokens[j]) * emb_row,
                                               x + (r + j) * E, E));
      bytes_read_ += uint64_t{n} * emb_row;
    }
    for (uint32_t j = 0; j < n; ++j)
      ops::rope_angles(cos_sin_.get() + size_t{r + j} * n_rot, inv_freq_.get(), hp.rope, it.seq->n_past_ + j);
    r += n;
  }
  return Status::Ok();
}

void Forward::attention_block(uint32_t l, std::span<const StepItem> items, uint32_t R) {
  const Model& m = *model_;
  const Hparams& hp = m.hparams();
  const LayerWeights& L = m.layers()[l];
  ThreadPool& pool = *pool_;
  const size_t E = hp.n_embd, HD = hp.head_dim;
  const uint32_t nkv = m.kv_heads().size(), G = hp.group(), nqh = nkv * G;
  const size_t QL = size_t{nqh} * HD, KL = size_t{nkv} * HD;
  const uint32_t n_rot = hp.rope.n_rot;
  float* xb = xb_.get();
  if (m.arch().attention == AttentionKind::kMla) {
    mla_attention(l, items, R);
  } else if (nkv > 0) {
    const MatmulOut qkv[] = {{&L.wq, q_.get()}, {&L.wk, k_.get()}, {&L.wv, v_.get()}};
    matmul_multi(qkv, xb, R, pool);
    bytes_read_ += L.wq.bytes() + L.wk.bytes() + L.wv.bytes();
    for (uint32_t i = 0; i < items.size(); ++i) {
      KvCache& cache = items[i].seq->cache_;
      const uint32_t pos0 = items[i].seq->n_past_;
      for (uint32_t j = 0; j < items[i].rows(); ++j) {
        const uint32_t r = item_row0_[i] + j;
        float* q = q_.get() + r * QL;
        float* k = k_.get() + r * KL;
        float* v = v_.get() + r * KL;
        if (L.bq) ops::add(q, L.bq, QL);
        if (L.bk) ops::add(k, L.bk, KL);
        if (L.bv) ops::add(v, L.bv, KL);
        if (L.q_norm) {
          for (uint32_t h = 0; h < nqh; ++h) ops::rmsnorm(q + h * HD, q + h * HD, L.q_norm, HD, hp.rms_eps);
          for (uint32_t h = 0; h < nkv; ++h) ops::rmsnorm(k + h * HD, k + h * HD, L.k_norm, HD, hp.rms_eps);
        }
        const float* cs = cos_sin_.get() + size_t{r} * n_rot;
        ops::rope_apply(q, nqh, HD, cs, hp.rope);
        ops::rope_apply(k, nkv, HD, cs, hp.rope);
        for (uint32_t h = 0; h < nkv; ++h) {
          cache.store_key(l, h, pos0 + j, k + h * HD);
          std::memcpy(cache.value(l, h, pos0 + j), v + h * HD, HD * sizeof(float));
        }
      }
    }
    attention(l, items);
    matmul(L.wo, att_.get(), R, xb, pool);
    bytes_read_ += L.wo.bytes();
  } else {
    std::memset(xb, 0, size_t{R} * E * sizeof(float));  // no heads here: nothing to add
  }
}

void Forward::dense_ffn(const LayerWeights& L, uint32_t R) {
  const size_t E = model_->hparams().n_embd;
  float* xb = xb_.get();
  if (L.w_gate.n_rows() > 0) {
    const MatmulOut gate_up[] = {{&L.w_gate, gate_.get()}, {&L.w_up, up_.get()}};
    matmul_multi(gate_up, xb, R, *pool_);
    ops::swiglu(gate_.get(), gate_.get(), up_.get(), size_t{R} * L.w_gate.n_rows());
    matmul(L.w_down, gate_.get(), R, xb, *pool_);
    bytes_read_ += L.w_gate.bytes() + L.w_up.bytes() + L.w_down.bytes();
  } else {
    std::memset(xb, 0, size_t{R} * E * sizeof(float));
  }
}

Status Forward::step(std::span<const StepItem> items) {
  uint32_t R = 0;
  LATTICE_RETURN_IF_ERROR(check(items, &R));
  if (ep_prefill_path(items, R) == EpPrefill::kAllToAll) return step_a2a(items, R);
  if (model_->expert_parallel() && group_->size() > 1) ++paths_.reduce_steps, paths_.reduce_rows += R;
  const Model& m = *model_;
  const Hparams& hp = m.hparams();
  const size_t E = hp.n_embd;
  float* x = x_.get();
  float* xb = xb_.get();
  LATTICE_RETURN_IF_ERROR(embed(items));

  for (uint32_t l = 0; l < m.n_local_layers(); ++l) {  // l: index in this shard's layers and caches
    const LayerWeights& L = m.layers()[l];
    for (uint32_t r = 0; r < R; ++r) ops::rmsnorm(xb + r * E, x + r * E, L.attn_norm, E, hp.rms_eps);
    attention_block(l, items, R);
    LATTICE_RETURN_IF_ERROR(group_->all_reduce_sum(xb, size_t{R} * E));
    for (uint32_t r = 0; r < R; ++r) ops::add(x + r * E, xb + r * E, E);

    for (uint32_t r = 0; r < R; ++r) ops::rmsnorm(xb + r * E, x + r * E, L.ffn_norm, E, hp.rms_eps);
    if (L.moe())
      moe_ffn(m.layer_begin() + l, L, R);
    else
      dense_ffn(L, R);
    LATTICE_RETURN_IF_ERROR(group_->all_reduce_sum(xb, size_t{R} * E));
    for (uint32_t r = 0; r < R; ++r) ops::add(x + r * E, xb + r * E, E);
    if (observer_) observer_(m.layer_begin() + l, std::span<const float>(x, size_t{R} * E));
  }
  head(items);
  return Status::Ok();
}

void Forward::head(std::span<const StepItem> items) {
  const Model& m = *model_;
  const Hparams& hp = m.hparams();
  const size_t E = hp.n_embd;
  ThreadPool& pool = *pool_;
  float* x = x_.get();
  float* xb = xb_.get();
  n_logit_items_ = 0;
  if (m.has_head()) {
    const size_t V = m.vocab().size();
    const bool any_all = std::any_of(items.begin(), items.end(), [](const StepItem& it) { return it.all_logits; });
    if (!any_all) {
      // The last row of every item, through the output matrix together.
      for (uint32_t i = 0; i < items.size(); ++i) {
        const uint32_t r = item_row0_[i] + items[i].rows() - 1;
        ops::rmsnorm(xb + i * E, x + r * E, m.output_norm(), E, hp.rms_eps);
      }
      if (V > 0) matmul(m.output(), xb, items.size(), logits_.data(), pool), bytes_read_ += m.output().bytes();
    } else {
      for (uint32_t i = 0; i < items.size(); ++i) {
        const StepItem& it = items[i];
        const uint32_t n = it.rows(), first = it.all_logits ? 0 : n - 1;
        for (uint32_t j = first; j < n; ++j)
          ops::rmsnorm(xb + (j - first) * E, x + (item_row0_[i] + j) * E, m.output_norm(), E, hp.rms_eps);
        if (V == 0) continue;
        bytes_read_ += m.output().bytes();
        if (it.all_logits) {
          matmul(m.output(), xb, n, it.all_logits, pool);
          std::memcpy(logits_.data() + i * V, it.all_logits + size_t{n - 1} * V, V * sizeof(float));
        } else {
          matmul(m.output(), xb, 1, logits_.data() + i * V, pool);
        }
      }
    }
    n_logit_items_ = items.size();
  } else {
    for (uint32_t i = 0; i < items.size(); ++i)
      if (items[i].x_out)
        std::memcpy(items[i].x_out, x + size_t{item_row0_[i]} * E, size_t{items[i].rows()} * E * sizeof(float));
  }
  for (const StepItem& it : items) it.seq->n_past_ += it.rows();
}

std::span<const float> Forward::logits(size_t item) const {
  if (item >= n_logit_items_) return {};
  const size_t V = model_->vocab().size();
  return {logits_.data() + item * V, V};
}

Result<std::vector<int32_t>> Forward::choose(std::span<Sampler* const> samplers) {
  if (samplers.size() != n_logit_items_ || n_logit_items_ == 0)
    return InvalidArgument("forward: choose() wants one sampler slot per item of the last step (" +
                           std::to_string(n_logit_items_) + ")");
  const size_t B = samplers.size();
  std::vector<int32_t> out(B, -1);
  const Range voc = model_->vocab();
  if (group_->size() == 1) {
    for (size_t i = 0; i < B; ++i) {
      if (samplers[i]) {
        LATTICE_ASSIGN_OR_RETURN(out[i], samplers[i]->sample(logits(i)));
      } else {
        float best;
        out[i] = argmax_lowest(logits(i), voc.begin, &best);
        if (out[i] < 0) return Internal("forward: no candidate token (NaN logits?)");
      }
    }
    return out;
  }
  // Every rank's best candidates for every item, in one all_gather.
  size_t K = 1;
  for (Sampler* s : samplers)
    if (!greedy(s)) K = std::max<size_t>(K, s->params().top_k > 0 ? std::min(s->params().top_k, 256) : 64);
  const int W = group_->size();
  gather_in_.assign(B * K * 2, 0.0f);
  for (size_t i = 0; i < B; ++i) {
    float* mine = gather_in_.data() + i * K * 2;
    for (size_t c = 0; c < K; ++c) mine[2 * c] = -std::numeric_limits<float>::infinity(), mine[2 * c + 1] = kNoId;
    const std::span<const float> lg = logits(i);
    if (greedy(samplers[i]) || K == 1) {
      float best;
      const int32_t id = argmax_lowest(lg, voc.begin, &best);
      if (id >= 0) mine[0] = best, mine[1] = static_cast<float>(id);
      continue;
    }
    std::vector<uint32_t> idx(lg.size());
    std::iota(idx.begin(), idx.end(), 0u);
    const size_t k = std::min(K, idx.size());
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](uint32_t a, uint32_t b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
    for (size_t c = 0; c < k; ++c) mine[2 * c] = lg[idx[c]], mine[2 * c + 1] = static_cast<float>(voc.begin + idx[c]);
  }
  gather_out_.assign(size_t(W) * B * K * 2, 0.0f);
  LATTICE_RETURN_IF_ERROR(group_->all_gather(gather_in_.data(), gather_out_.data(), B * K * 2));
  for (size_t i = 0; i < B; ++i) {
    auto cand = [&](int r, size_t c, float* v) {
      const float* p = gather_out_.data() + (size_t(r) * B + i) * K * 2 + 2 * c;
      *v = p[0];
      return static_cast<int32_t>(p[1]);
    };
    if (greedy(samplers[i])) {
      float best = -std::numeric_limits<float>::infinity();
      int32_t id = -1;
      for (int r = 0; r < W; ++r) {
        float v;
        const int32_t t = cand(r, 0, &v);
        if (t < 0) continue;
        if (id < 0 || v > best || (v == best && t < id)) best = v, id = t;
      }
      if (id < 0) return Internal("tensor parallel: no rank produced a candidate (NaN logits?)");
      out[i] = id;
      continue;
    }
    full_.assign(model_->hparams().n_vocab, -std::numeric_limits<float>::infinity());
    for (int r = 0; r < W; ++r)
      for (size_t c = 0; c < K; ++c) {
        float v;
        const int32_t t = cand(r, c, &v);
        if (t >= 0 && static_cast<uint32_t>(t) < full_.size()) full_[t] = v;
      }
    LATTICE_ASSIGN_OR_RETURN(out[i], samplers[i]->sample(full_));
  }
  return out;
}

Result<int32_t> Forward::argmax(size_t item) {
  std::vector<Sampler*> s(n_logit_items_, nullptr);
  if (item >= s.size()) return InvalidArgument("forward: no logits for item " + std::to_string(item));
  LATTICE_ASSIGN_OR_RETURN(auto t, choose(s));
  return t[item];
}

Result<int32_t> Forward::sample(Sampler& sampler, size_t item) {
  std::vector<Sampler*> s(n_logit_items_, nullptr);
  if (item >= s.size()) return InvalidArgument("forward: no logits for item " + std::to_string(item));
  s[item] = &sampler;
  LATTICE_ASSIGN_OR_RETURN(auto t, choose(s));
  return t[item];
}

Status Forward::gather_logits(size_t item, std::vector<float>* out) {
  if (item >= n_logit_items_) return InvalidArgument("forward: no logits for item " + std::to_string(item));
  const auto& voc = model_->layout().vocab;
  uint32_t width = 0;
  for (const Range& r : voc) width = std::max(width, r.size());
  const int W = group_->size();
  const std::span<const float> mine = logits(item);
  gather_in_.assign(width, 0.0f);
  std::copy(mine.begin(), mine.end(), gather_in_.begin());
  gather_out_.assign(size_t{width} * W, 0.0f);
  LATTICE_RETURN_IF_ERROR(group_->all_gather(gather_in_.data(), gather_out_.data(), width));
  out->resize(model_->hparams().n_vocab);
  for (int r = 0; r < W; ++r)
    std::copy_n(gather_out_.data() + size_t(r) * width, voc[r].size(), out->data() + voc[r].begin);
  return Status::Ok();
}

}  // namespace lattice::engine
