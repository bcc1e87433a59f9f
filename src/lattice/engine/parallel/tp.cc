#include "lattice/engine/parallel/tp.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "lattice/coll/coll.h"
#include "lattice/engine/quant/quantize.h"
#include "lattice/engine/runtime/ops.h"
#include "lattice/engine/runtime/float_buffer.h"

namespace lattice::engine::parallel {

std::vector<Range> split_units(uint32_t n_units, int world, std::span<const double> weights) {
  std::vector<Range> out(std::max(world, 0));
  if (world <= 0) return out;
  std::vector<double> w(world, 1.0);
  if (weights.size() == static_cast<size_t>(world))
    for (int i = 0; i < world; ++i) w[i] = std::max(weights[i], 0.0);
  double total = std::accumulate(w.begin(), w.end(), 0.0);
  if (total <= 0) std::fill(w.begin(), w.end(), 1.0), total = world;
  std::vector<uint32_t> n(world);
  std::vector<std::pair<double, int>> rem(world);
  uint32_t given = 0;
  for (int i = 0; i < world; ++i) {
    const double exact = n_units * w[i] / total;
    n[i] = static_cast<uint32_t>(std::floor(exact));
    given += n[i];
    rem[i] = {exact - n[i], i};
  }
  std::stable_sort(rem.begin(), rem.end(), [](auto a, auto b) { return a.first > b.first; });
  for (int k = 0; given < n_units; k = (k + 1) % world, ++given) ++n[rem[k].second];
  uint32_t at = 0;
  for (int i = 0; i < world; ++i) {
    out[i] = {at, at + n[i]};
    at += n[i];
  }
  return out;
}

Result<TpLayout> make_tp_layout(const Hparams& hp, uint32_t ff_block_elems, uint32_t wo_block_elems, int world,
                                std::span<const double> weights) {
  if (world < 1) return InvalidArgument("tensor parallel: world size must be >= 1");
  TpLayout L;
  // A rank's wo columns start at kv0 * group * head_dim: they must start on a block.
  const uint64_t cols_per_kv = static_cast<uint64_t>(hp.group()) * hp.head_dim_v;
  if (world > 1 && cols_per_kv % wo_block_elems != 0)
    return Unavailable("tensor parallel: attention output blocks of " + std::to_string(wo_block_elems) +
                       " do not align with KV-head groups of " + std::to_string(cols_per_kv) + " columns");
  L.kv_heads = split_units(hp.n_head_kv, world, weights);
  uint32_t g = std::max<uint32_t>(ff_block_elems, 1);
  if (hp.n_ff % std::max<uint32_t>(g, 32) == 0) g = std::max<uint32_t>(g, 32);
  if (hp.n_ff % g != 0)
    return Unavailable("tensor parallel: FFN width " + std::to_string(hp.n_ff) + " is not a multiple of the block size " +
                       std::to_string(g));
  L.ff_granularity = g;
  L.ff = split_units(hp.n_ff / g, world, weights);
  for (Range& r : L.ff) r = {r.begin * g, r.end * g};
  L.vocab = split_units(hp.n_vocab, world, weights);
  return L;
}

// ---- TpModel ----

Result<std::unique_ptr<TpModel>> TpModel::load(const std::string& path, int rank, int world,
                                               const TpLoadOptions& options) {
  auto file = GgufFile::open(path, options.open);
  if (!file.ok()) return file.status();
  auto m = bind(std::move(file).value(), rank, world, options);
  if (!m.ok()) return m.status().with_context(path);
  return m;
}

Result<std::unique_ptr<TpModel>> TpModel::bind(std::unique_ptr<GgufFile> file, int rank, int world,
                                               const TpLoadOptions& options) {
  if (world < 1 || rank < 0 || rank >= world)
    return InvalidArgument("tensor parallel: rank " + std::to_string(rank) + " of " + std::to_string(world));
  std::unique_ptr<TpModel> m(new TpModel());
  m->file_ = std::move(file);
  m->rank_ = rank;
  m->world_ = world;
  LATTICE_RETURN_IF_ERROR(m->bind_all(options));
  return m;
}

Result<const TensorInfo*> TpModel::matrix_info(const std::string& name, uint64_t n_in, uint64_t n_out) {
  const TensorInfo* t = file_->find_tensor(name);
  if (!t) return NotFound("tensor '" + name + "' is missing");
  if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
    return Corrupt("tensor '" + name + "' has shape " + t->shape_string() + ", expected [" + std::to_string(n_in) +
                   ", " + std::to_string(n_out) + "]");
  if (!is_supported_weight_type(t->type))
    return Unavailable("tensor '" + name + "': weight type " +
                       std::string(type_traits(static_cast<uint32_t>(t->type))->name) + " is not supported");
  return t;
}

Result<Weight> TpModel::rows(const TensorInfo& t, Range r, bool pack) {
  if (r.size() == 0) return Weight{};
  const size_t rb = t.row_bytes();
  const WeightView v{t.type, t.data + static_cast<size_t>(r.begin) * rb, r.size(), static_cast<size_t>(t.ne[0]), rb};
  auto w = pack ? Weight::pack(v) : Weight::view(v);
  if (!w.ok()) return w.status().with_context("tensor '" + t.name + "' rows");
  return w;
}

Result<Weight> TpModel::cols(const TensorInfo& t, Range c, bool pack) {
  if (c.size() == 0) return Weight{};
  const auto traits = type_traits(static_cast<uint32_t>(t.type));
  if (c.begin % traits->block_elems != 0 || c.size() % traits->block_elems != 0)
    return Unavailable("tensor '" + t.name + "': columns [" + std::to_string(c.begin) + ", " + std::to_string(c.end) +
                       ") do not fall on " + std::string(traits->name) + " blocks");
  const size_t rb = t.row_bytes();
  const size_t off = c.begin / traits->block_elems * traits->block_bytes;
  const WeightView v{t.type, t.data + off, static_cast<size_t>(t.ne[1]), c.size(), rb};
  auto w = pack ? Weight::pack(v) : Weight::view(v);
  if (!w.ok()) return w.status().with_context("tensor '" + t.name + "' columns");
  return w;
}

Result<const float*> TpModel::vec(const std::string& name, uint64_t n, bool required) {
  const TensorInfo* t = file_->find_tensor(name);
  if (!t) {
    if (required) return NotFound("tensor '" + name + "' is missing");
    return static_cast<const float*>(nullptr);
  }
  if (t->n_elems != n || t->ne[0] != n)
    return Corrupt("tensor '" + name + "' has shape " + t->shape_string() + ", expected [" + std::to_string(n) + "]");
  if (t->type == TensorType::kF32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0)
    return reinterpret_cast<const float*>(t->data);
  if (!is_supported_weight_type(t->type)) return Unavailable("tensor '" + name + "': type is not supported");
  auto buf = std::make_unique<float[]>(n);
  LATTICE_RETURN_IF_ERROR(dequantize_row(t->type, t->data, buf.get(), n));
  owned_.push_back(std::move(buf));
  return static_cast<const float*>(owned_.back().get());
}

Status TpModel::bind_all(const TpLoadOptions& options) {
  const Metadata& md = file_->metadata();
  auto arch_name = md.get_string("general.architecture");
  if (!arch_name.ok()) return arch_name.status();
  arch_ = find_arch(*arch_name);
  if (!arch_)
    return Unavailable("architecture '" + *arch_name + "' is not supported (supported: " + supported_arch_names() +
                       ")");
  LATTICE_ASSIGN_OR_RETURN(hp_, read_hparams(md, *arch_));
  if (hp_.head_dim_v != hp_.head_dim) return Unavailable("tensor parallel: value head size != key head size");
  const TensorInfo* emb = file_->find_tensor("token_embd.weight");
  if (!emb) return NotFound("tensor 'token_embd.weight' is missing");
  if (emb->n_dims != 2 || emb->ne[0] != hp_.n_embd || emb->ne[1] == 0 || emb->ne[1] > (1u << 24))
    return Corrupt("tensor 'token_embd.weight' has shape " + emb->shape_string());
  if (!is_supported_weight_type(emb->type)) return Unavailable("tensor 'token_embd.weight': type is not supported");
  hp_.n_vocab = static_cast<uint32_t>(emb->ne[1]);
  tok_embd_ = emb;
  const uint32_t E = hp_.n_embd;

  // Block sizes decide where FFN and attention-output columns may be cut.
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* down0, matrix_info("blk.0.ffn_down.weight", hp_.n_ff, E));
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* wo0, matrix_info("blk.0.attn_output.weight", hp_.attn_out_dim(), E));
  uint32_t ff_blk = 1, wo_blk = 1;
  for (uint32_t i = 0; i < hp_.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    for (auto [name, dst] : {std::pair{"ffn_down.weight", &ff_blk}, std::pair{"attn_output.weight", &wo_blk}}) {
      const TensorInfo* t = file_->find_tensor(p + name);
      if (t) *dst = std::max<uint32_t>(*dst, type_traits(static_cast<uint32_t>(t->type))->block_elems);
    }
  }
  (void)down0;
  (void)wo0;
  LATTICE_ASSIGN_OR_RETURN(layout_, make_tp_layout(hp_, ff_blk, wo_blk, world_, options.weights));
  layer_begin_ = options.layer_begin;
  layer_end_ = options.layer_end ? options.layer_end : hp_.n_layer;
  if (layer_begin_ >= layer_end_ || layer_end_ > hp_.n_layer)
    return InvalidArgument("layers [" + std::to_string(layer_begin_) + ", " + std::to_string(layer_end_) +
                           ") are not a range of the model's " + std::to_string(hp_.n_layer));

  const bool pack = options.pack;
  const Range kv = kv_heads(), f = ff(), voc = vocab();
  const uint32_t HD = hp_.head_dim, G = hp_.group();
  const Range q_rows{kv.begin * G * HD, kv.end * G * HD};
  const Range kv_rows{kv.begin * HD, kv.end * HD};

  if (has_head()) {
    LATTICE_ASSIGN_OR_RETURN(output_norm_, vec("output_norm.weight", E, true));
    const bool tied = file_->find_tensor("output.weight") == nullptr;
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* out_t,
                             matrix_info(tied ? "token_embd.weight" : "output.weight", E, hp_.n_vocab));
    // A tied output is read in place (the embedding lookups use the same bytes).
    LATTICE_ASSIGN_OR_RETURN(output_, rows(*out_t, voc, pack && !tied));
  }
  LATTICE_ASSIGN_OR_RETURN(rope_freqs_, vec("rope_freqs.weight", hp_.rope.n_rot / 2, false));

  layers_.resize(layer_end_ - layer_begin_);
  for (uint32_t i = layer_begin_; i < layer_end_; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    Layer& L = layers_[i - layer_begin_];
    LATTICE_ASSIGN_OR_RETURN(L.attn_norm, vec(p + "attn_norm.weight", E, true));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tq, matrix_info(p + "attn_q.weight", E, hp_.q_dim()));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tk, matrix_info(p + "attn_k.weight", E, hp_.kv_dim()));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tv, matrix_info(p + "attn_v.weight", E, hp_.v_dim()));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* to, matrix_info(p + "attn_output.weight", hp_.attn_out_dim(), E));
    LATTICE_ASSIGN_OR_RETURN(L.wq, rows(*tq, q_rows, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wk, rows(*tk, kv_rows, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wv, rows(*tv, kv_rows, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wo, cols(*to, q_rows, pack));
    const bool need_bias = arch_->qkv_bias_required;
    LATTICE_ASSIGN_OR_RETURN(L.bq, vec(p + "attn_q.bias", hp_.q_dim(), need_bias));
    LATTICE_ASSIGN_OR_RETURN(L.bk, vec(p + "attn_k.bias", hp_.kv_dim(), need_bias));
    LATTICE_ASSIGN_OR_RETURN(L.bv, vec(p + "attn_v.bias", hp_.v_dim(), need_bias));
    if (L.bq) L.bq += q_rows.begin;
    if (L.bk) L.bk += kv_rows.begin;
    if (L.bv) L.bv += kv_rows.begin;
    if (arch_->qk_norm) {
      LATTICE_ASSIGN_OR_RETURN(L.q_norm, vec(p + "attn_q_norm.weight", HD, true));
      LATTICE_ASSIGN_OR_RETURN(L.k_norm, vec(p + "attn_k_norm.weight", HD, true));
    }
    LATTICE_ASSIGN_OR_RETURN(L.ffn_norm, vec(p + "ffn_norm.weight", E, true));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tg, matrix_info(p + "ffn_gate.weight", E, hp_.n_ff));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tu, matrix_info(p + "ffn_up.weight", E, hp_.n_ff));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* td, matrix_info(p + "ffn_down.weight", hp_.n_ff, E));
    LATTICE_ASSIGN_OR_RETURN(L.w_gate, rows(*tg, f, pack));
    LATTICE_ASSIGN_OR_RETURN(L.w_up, rows(*tu, f, pack));
    LATTICE_ASSIGN_OR_RETURN(L.w_down, cols(*td, f, pack));
  }
  return Status::Ok();
}

uint64_t TpModel::shard_bytes() const {
  uint64_t n = output_.n_rows() ? output_.bytes() : 0;
  for (const Layer& L : layers_)
    for (const Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      if (w->n_rows()) n += w->bytes();
  return n;
}

// ---- TpSession ----


struct TpSession::Impl {
  FloatBuffer x, xb, q, k, v, att, gate, up, scores, cos_sin, inv_freq;
  std::vector<float> gather_in, gather_out, full;
};

TpSession::~TpSession() = default;

Result<std::unique_ptr<TpSession>> TpSession::create(const TpModel& model, coll::Communicator* comm,
                                                     const TpSessionOptions& options) {
  const Hparams& hp = model.hparams();
  if (comm == nullptr && model.world() != 1) return InvalidArgument("tensor parallel: no communicator");
  if (comm && (comm->world_size() != model.world() || comm->rank() != model.rank()))
    return InvalidArgument("tensor parallel: the communicator is rank " + std::to_string(comm->rank()) + " of " +
                           std::to_string(comm->world_size()) + ", the shard rank " + std::to_string(model.rank()) +
                           " of " + std::to_string(model.world()));
  TpSessionOptions o = options;
  if (o.n_threads == 0 || o.n_batch == 0) return InvalidArgument("tensor parallel: threads and batch must be >= 1");
  if (o.n_ctx == 0) o.n_ctx = std::min<uint32_t>(hp.n_ctx_train, 4096);
  o.n_batch = std::min(o.n_batch, o.n_ctx);
  std::unique_ptr<TpSession> s(new TpSession());
  s->model_ = &model;
  s->comm_ = comm;
  s->opt_ = o;
  s->pool_ = std::make_unique<ThreadPool>(o.n_threads);
  const uint32_t nkv = model.kv_heads().size();
  LATTICE_ASSIGN_OR_RETURN(s->cache_, KvCache::create(model.layer_end() - model.layer_begin(),
                                                      std::max<uint32_t>(nkv, 1), hp.head_dim, o.n_ctx));
  if (model.has_head()) s->logits_.assign(model.vocab().size(), 0.0f);
  auto I = std::make_unique<Impl>();
  const size_t B = o.n_batch, E = hp.n_embd, HD = hp.head_dim;
  const size_t QL = static_cast<size_t>(nkv) * hp.group() * HD, KL = static_cast<size_t>(nkv) * HD;
  const size_t FL = model.ff().size();
  struct Want {
    FloatBuffer* buf;
    size_t n;
  } wants[] = {
      {&I->x, B * E}, {&I->xb, B * E}, {&I->q, B * QL}, {&I->k, B * KL}, {&I->v, B * KL}, {&I->att, B * QL},
      {&I->gate, B * FL}, {&I->up, B * FL}, {&I->scores, size_t{o.n_threads} * ((o.n_ctx + 15) / 16 * 16)},
      {&I->cos_sin, B * hp.rope.n_rot}, {&I->inv_freq, hp.rope.n_rot / 2},
  };
  for (const Want& w : wants) {
    *w.buf = alloc_floats(w.n);
    if (!*w.buf) return ResourceExhausted("tensor parallel: cannot allocate scratch buffers");
  }
  ops::rope_inv_freq(I->inv_freq.get(), hp.rope, model.rope_freq_factors());
  s->impl_ = std::move(I);
  return s;
}

Status TpSession::all_reduce_sum(float* buf, size_t count) {
  if (comm_ == nullptr) return Status::Ok();  // one rank: nothing to sum
  const auto t0 = std::chrono::steady_clock::now();
  coll::CollOptions co;
  co.timeout = opt_.coll_timeout;
  Status st = coll::all_reduce(*comm_, buf, buf, count, coll::DType::kF32, coll::ReduceOp::kSum, co);
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.calls++;
  stats_.bytes += count * sizeof(float);
  return st;
}

Status TpSession::all_gather_f32(const float* in, float* out, size_t count) {
  if (comm_ == nullptr) {
    std::memcpy(out, in, count * sizeof(float));
    return Status::Ok();
  }
  const auto t0 = std::chrono::steady_clock::now();
  coll::CollOptions co;
  co.timeout = opt_.coll_timeout;
  Status st = coll::all_gather(*comm_, in, out, count, coll::DType::kF32, co);
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.calls++;
  stats_.bytes += count * sizeof(float);
  return st;
}

Status TpSession::prefill(std::span<const int32_t> tokens) {
  if (tokens.empty()) return InvalidArgument("prefill: no tokens");
  const Hparams& hp = model_->hparams();
  if (tokens.size() > cache_.n_ctx() - n_past_)
    return InvalidArgument("prefill: " + std::to_string(tokens.size()) + " tokens do not fit the context (" +
                           std::to_string(n_past_) + " of " + std::to_string(cache_.n_ctx()) + " used)");
  for (int32_t t : tokens)
    if (t < 0 || static_cast<uint32_t>(t) >= hp.n_vocab)
      return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary (" +
                             std::to_string(hp.n_vocab) + ")");
  for (size_t done = 0; done < tokens.size();) {
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(opt_.n_batch, tokens.size() - done));
    LATTICE_RETURN_IF_ERROR(forward(tokens.data() + done, n));
    done += n;
  }
  return Status::Ok();
}

Status TpSession::decode(int32_t token) { return prefill(std::span<const int32_t>(&token, 1)); }

Status TpSession::forward_stage(const int32_t* tokens, const float* x_in, uint32_t n, float* x_out) {
  if (n == 0 || n > opt_.n_batch) return InvalidArgument("forward: 1.." + std::to_string(opt_.n_batch) + " tokens a step");
  if (n > cache_.n_ctx() - n_past_) return InvalidArgument("forward: the context is full");
  const TpModel& m = *model_;
  const Hparams& hp = m.hparams();
  Impl& I = *impl_;
  ThreadPool& pool = *pool_;
  const uint32_t nkv = m.kv_heads().size(), G = hp.group();
  const uint32_t nqh = nkv * G;
  const size_t E = hp.n_embd, HD = hp.head_dim, QL = static_cast<size_t>(nqh) * HD, KL = static_cast<size_t>(nkv) * HD;
  const size_t FL = m.ff().size();
  const uint32_t n_rot = hp.rope.n_rot;
  const uint32_t pos0 = n_past_;

  if (tokens) {
    const TensorInfo& emb = m.tok_embd();
    const size_t emb_row = emb.row_bytes();
    for (uint32_t t = 0; t < n; ++t) {
      if (tokens[t] < 0 || static_cast<uint32_t>(tokens[t]) >= hp.n_vocab)
        return InvalidArgument("token id " + std::to_string(tokens[t]) + " is outside the vocabulary");
      LATTICE_RETURN_IF_ERROR(
          dequantize_row(emb.type, emb.data + static_cast<size_t>(tokens[t]) * emb_row, I.x.get() + t * E, E));
    }
  } else {
    std::memcpy(I.x.get(), x_in, static_cast<size_t>(n) * E * sizeof(float));
  }
  for (uint32_t t = 0; t < n; ++t) ops::rope_angles(I.cos_sin.get() + t * n_rot, I.inv_freq.get(), hp.rope, pos0 + t);

  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  for (uint32_t l = 0; l < m.layers().size(); ++l) {  // l: index in this stage's cache and layers
    const TpModel::Layer& L = m.layers()[l];
    for (uint32_t t = 0; t < n; ++t) ops::rmsnorm(I.xb.get() + t * E, I.x.get() + t * E, L.attn_norm, E, hp.rms_eps);
    if (nkv > 0) {
      const MatmulOut qkv[] = {{&L.wq, I.q.get()}, {&L.wk, I.k.get()}, {&L.wv, I.v.get()}};
      matmul_multi(qkv, I.xb.get(), n, pool);
      for (uint32_t t = 0; t < n; ++t) {
        float* q = I.q.get() + t * QL;
        float* k = I.k.get() + t * KL;
        float* v = I.v.get() + t * KL;
        if (L.bq) ops::add(q, L.bq, QL);
        if (L.bk) ops::add(k, L.bk, KL);
        if (L.bv) ops::add(v, L.bv, KL);
        if (L.q_norm) {
          for (uint32_t h = 0; h < nqh; ++h) ops::rmsnorm(q + h * HD, q + h * HD, L.q_norm, HD, hp.rms_eps);
          for (uint32_t h = 0; h < nkv; ++h) ops::rmsnorm(k + h * HD, k + h * HD, L.k_norm, HD, hp.rms_eps);
        }
        const float* cs = I.cos_sin.get() + t * n_rot;
        ops::rope_apply(q, nqh, HD, cs, hp.rope);
        ops::rope_apply(k, nkv, HD, cs, hp.rope);
        for (uint32_t h = 0; h < nkv; ++h) {
          cache_.store_key(l, h, pos0 + t, k + h * HD);
          std::memcpy(cache_.value(l, h, pos0 + t), v + h * HD, HD * sizeof(float));
        }
      }
      pool.parallel_for(nqh, [&](size_t h, size_t thread) {
        const uint32_t kvh = static_cast<uint32_t>(h) / G;
        const float* kc = cache_.keys_t(l, kvh);
        const float* vc = cache_.value(l, kvh, 0);
        float* scores = I.scores.get() + thread * cache_.ctx_stride();
        for (uint32_t t = 0; t < n; ++t)
          ops::attend_head(I.att.get() + t * QL + h * HD, I.q.get() + t * QL + h * HD, kc, vc, pos0 + t + 1, HD, scale,
                           scores);
      });
      matmul(L.wo, I.att.get(), n, I.xb.get(), pool);
    } else {
      std::memset(I.xb.get(), 0, static_cast<size_t>(n) * E * sizeof(float));
    }
    LATTICE_RETURN_IF_ERROR(all_reduce_sum(I.xb.get(), static_cast<size_t>(n) * E));
    for (uint32_t t = 0; t < n; ++t) ops::add(I.x.get() + t * E, I.xb.get() + t * E, E);

    for (uint32_t t = 0; t < n; ++t) ops::rmsnorm(I.xb.get() + t * E, I.x.get() + t * E, L.ffn_norm, E, hp.rms_eps);
    if (FL > 0) {
      const MatmulOut gate_up[] = {{&L.w_gate, I.gate.get()}, {&L.w_up, I.up.get()}};
      matmul_multi(gate_up, I.xb.get(), n, pool);
      ops::swiglu(I.gate.get(), I.gate.get(), I.up.get(), static_cast<size_t>(n) * FL);
      matmul(L.w_down, I.gate.get(), n, I.xb.get(), pool);
    } else {
      std::memset(I.xb.get(), 0, static_cast<size_t>(n) * E * sizeof(float));
    }
    LATTICE_RETURN_IF_ERROR(all_reduce_sum(I.xb.get(), static_cast<size_t>(n) * E));
    for (uint32_t t = 0; t < n; ++t) ops::add(I.x.get() + t * E, I.xb.get() + t * E, E);
  }
  if (m.has_head()) {
    ops::rmsnorm(I.xb.get(), I.x.get() + static_cast<size_t>(n - 1) * E, m.output_norm(), E, hp.rms_eps);
    if (!logits_.empty()) matmul(m.output(), I.xb.get(), 1, logits_.data(), pool);
  } else if (x_out) {
    std::memcpy(x_out, I.x.get(), static_cast<size_t>(n) * E * sizeof(float));
  }
  n_past_ += n;
  return Status::Ok();
}

Status TpSession::gather_logits(std::vector<float>* out) {
  const TpModel& m = *model_;
  const auto& voc = m.layout().vocab;
  uint32_t width = 0;
  for (const Range& r : voc) width = std::max(width, r.size());
  const int W = m.world();
  Impl& I = *impl_;
  I.gather_in.assign(width, 0.0f);
  std::copy(logits_.begin(), logits_.end(), I.gather_in.begin());
  I.gather_out.assign(static_cast<size_t>(width) * W, 0.0f);
  LATTICE_RETURN_IF_ERROR(all_gather_f32(I.gather_in.data(), I.gather_out.data(), width));
  out->resize(m.hparams().n_vocab);
  for (int r = 0; r < W; ++r)
    std::copy_n(I.gather_out.data() + static_cast<size_t>(r) * width, voc[r].size(), out->data() + voc[r].begin);
  return Status::Ok();
}

Result<int32_t> TpSession::argmax() {
  const Range voc = model_->vocab();
  // (value, id) as two floats: ids below 2^24 are exact in a float.
  float mine[2] = {-std::numeric_limits<float>::infinity(), -1.0f};
  for (uint32_t i = 0; i < logits_.size(); ++i)
    if (logits_[i] > mine[0]) mine[0] = logits_[i], mine[1] = static_cast<float>(voc.begin + i);
  const int W = model_->world();
  std::vector<float> all(2 * W);
  LATTICE_RETURN_IF_ERROR(all_gather_f32(mine, all.data(), 2));
  float best = -std::numeric_limits<float>::infinity();
  int32_t id = -1;
  for (int r = 0; r < W; ++r) {
    const float v = all[2 * r];
    const int32_t t = static_cast<int32_t>(all[2 * r + 1]);
    if (t < 0) continue;
    if (v > best || (v == best && t < id)) best = v, id = t;
  }
  if (id < 0) return Internal("tensor parallel: no rank produced a candidate (NaN logits?)");
  return id;
}

Result<int32_t> TpSession::sample(Sampler& sampler) {
  const SamplerParams& p = sampler.params();
  if (p.temperature <= 0 && p.repeat_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f)
    return argmax();
  const Range voc = model_->vocab();
  const size_t K = static_cast<size_t>(p.top_k > 0 ? std::min(p.top_k, 256) : 64);
  // Local top-K as (value, id) pairs, padded with (-inf, -1).
  std::vector<uint32_t> idx(logits_.size());
  std::iota(idx.begin(), idx.end(), 0u);
  const size_t k = std::min(K, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](uint32_t a, uint32_t b) {
    return logits_[a] > logits_[b] || (logits_[a] == logits_[b] && a < b);
  });
  std::vector<float> mine(2 * K, -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < K; ++i) mine[2 * i + 1] = -1.0f;
  for (size_t i = 0; i < k; ++i) mine[2 * i] = logits_[idx[i]], mine[2 * i + 1] = static_cast<float>(voc.begin + idx[i]);
  const int W = model_->world();
  std::vector<float> all(2 * K * W);
  LATTICE_RETURN_IF_ERROR(all_gather_f32(mine.data(), all.data(), 2 * K));
  Impl& I = *impl_;
  I.full.assign(model_->hparams().n_vocab, -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < K * W; ++i) {
    const int32_t t = static_cast<int32_t>(all[2 * i + 1]);
    if (t >= 0) I.full[t] = all[2 * i];
  }
  return sampler.sample(I.full);
}

}  // namespace lattice::engine::parallel
