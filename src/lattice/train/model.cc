#include "lattice/train/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "lattice/core/check.h"
#include "lattice/train/gemm.h"
#include "lattice/train/kernels.h"

namespace lattice::train {

Status LlamaConfig::validate() const {
  if (vocab < 2) return InvalidArgument("vocab must be at least 2");
  if (dim == 0 || layers == 0 || heads == 0 || ffn == 0) return InvalidArgument("dim, layers, heads and ffn must be > 0");
  if (dim % heads != 0) return InvalidArgument("dim " + std::to_string(dim) + " is not a multiple of heads " + std::to_string(heads));
  if (head_dim() % 2 != 0) return InvalidArgument("head dim (dim / heads) must be even for RoPE");
  if (heads % n_kv_heads() != 0) return InvalidArgument("heads must be a multiple of kv_heads");
  if (!(rms_eps > 0) || !(rope_theta > 0)) return InvalidArgument("rms_eps and rope_theta must be > 0");
  return Status::Ok();
}

std::vector<ParamTensor> param_table(const LlamaConfig& c) {
  std::vector<ParamTensor> t;
  size_t off = 0;
  auto add = [&](std::string name, size_t rows, size_t cols) {
    t.push_back({std::move(name), off, rows, cols});
    off += rows * cols;
  };
  add("token_embd.weight", c.vocab, c.dim);
  add("output_norm.weight", 1, c.dim);
  add("output.weight", c.vocab, c.dim);
  for (uint32_t l = 0; l < c.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", 1, c.dim);
    add(b + "attn_q.weight", c.dim, c.dim);
    add(b + "attn_k.weight", c.kv_dim(), c.dim);
    add(b + "attn_v.weight", c.kv_dim(), c.dim);
    add(b + "attn_output.weight", c.dim, c.dim);
    add(b + "ffn_norm.weight", 1, c.dim);
    add(b + "ffn_gate.weight", c.ffn, c.dim);
    add(b + "ffn_up.weight", c.ffn, c.dim);
    add(b + "ffn_down.weight", c.dim, c.ffn);
  }
  return t;
}

size_t param_count(const LlamaConfig& c) {
  const auto t = param_table(c);
  return t.back().offset + t.back().size();
}

namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double uniform01(uint64_t& s) { return (static_cast<double>(splitmix(s) >> 11) + 0.5) * 0x1.0p-53; }

constexpr size_t kLayerTensors = 9;
constexpr size_t kFirstLayer = 3;
enum : size_t { kAttnNorm, kWq, kWk, kWv, kWo, kFfnNorm, kWg, kWu, kWd };

}  // namespace

void init_params(const LlamaConfig& c, uint64_t seed, std::span<float> params) {
  const auto table = param_table(c);
  LATTICE_CHECK(params.size() == table.back().offset + table.back().size());
  for (size_t ti = 0; ti < table.size(); ++ti) {
    const ParamTensor& t = table[ti];
    float* p = params.data() + t.offset;
    if (!t.is_matrix()) {
      std::fill_n(p, t.size(), 1.0f);
      continue;
    }
    double std = 1.0 / std::sqrt(static_cast<double>(t.cols));
    const bool residual_out = t.name.ends_with("attn_output.weight") || t.name.ends_with("ffn_down.weight");
    if (residual_out) std /= std::sqrt(2.0 * c.layers);
    if (ti == 0) std = 1.0;  // the embedding: RMSNorm follows it, so its scale is the residual's
    uint64_t s = seed * 0x100000001b3ull + ti * 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < t.size(); i += 2) {
      const double u1 = uniform01(s), u2 = uniform01(s);
      const double r = std::sqrt(-2.0 * std::log(u1)) * std;
      p[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
      if (i + 1 < t.size()) p[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
    }
  }
}

Model::Model(LlamaConfig config) : config_(config), tensors_(param_table(config)) {
  LATTICE_CHECK(config_.validate().ok());
  n_params_ = tensors_.back().offset + tensors_.back().size();
}

void Model::ensure(size_t batch, size_t seq) {
  const LlamaConfig& c = config_;
  const size_t hd = c.head_dim();
  if (seq != seq_) {
    rope_.assign(seq * hd, 0.0f);
    for (size_t s = 0; s < seq; ++s)
      for (size_t i = 0; i < hd / 2; ++i) {
        const double inv = std::pow(static_cast<double>(c.rope_theta), -2.0 * static_cast<double>(i) / hd);
        const double a = static_cast<double>(s) * inv;
        rope_[s * hd + 2 * i] = static_cast<float>(std::cos(a));
        rope_[s * hd + 2 * i + 1] = static_cast<float>(std::sin(a));
      }
  }
  if (batch * seq <= batch_ * seq_ && seq == seq_) {
    batch_ = std::max(batch_, batch);
    return;
  }
  batch_ = batch;
  seq_ = seq;
  const size_t n = batch * seq, L = c.layers, D = c.dim, KD = c.kv_dim(), F = c.ffn, V = c.vocab;
  Buffers& b = buf_;
  b.x.assign(L * n * D, 0.0f);
  b.hn1.assign(L * n * D, 0.0f);
  b.rs1.assign(L * n, 0.0f);
  b.q.assign(L * n * D, 0.0f);
  b.k.assign(L * n * KD, 0.0f);
  b.v.assign(L * n * KD, 0.0f);
  b.probs.assign(L * batch * c.heads * seq * seq, 0.0f);
  b.att.assign(L * n * D, 0.0f);
  b.x2.assign(L * n * D, 0.0f);
  b.hn2.assign(L * n * D, 0.0f);
  b.rs2.assign(L * n, 0.0f);
  b.g.assign(L * n * F, 0.0f);
  b.u.assign(L * n * F, 0.0f);
  b.act.assign(L * n * F, 0.0f);
  b.xf.assign(n * D, 0.0f);
  b.hnf.assign(n * D, 0.0f);
  b.rsf.assign(n, 0.0f);
  b.logits.assign(n * V, 0.0f);
  b.dx.assign(n * D, 0.0f);
  b.dx2.assign(n * D, 0.0f);
  b.dh.assign(n * D, 0.0f);
  b.datt.assign(n * D, 0.0f);
  b.dq.assign(n * D, 0.0f);
  b.dk.assign(n * KD, 0.0f);
  b.dv.assign(n * KD, 0.0f);
  b.dg.assign(n * F, 0.0f);
  b.du.assign(n * F, 0.0f);
  b.dact.assign(n * F, 0.0f);
}

namespace {

// Y[n x out] (+)= X[n x in] W[out x in]^T
void linear(float* y, const float* x, const float* w, size_t n, size_t in, size_t out, bool acc,
            engine::ThreadPool& pool) {
  gemm({false, true, n, out, in, x, in, w, in, y, out, acc}, &pool);
}
// dX[n x in] (+)= dY[n x out] W[out x in]
void linear_dx(float* dx, const float* dy, const float* w, size_t n, size_t in, size_t out, bool acc,
               engine::ThreadPool& pool) {
  gemm({false, false, n, in, out, dy, out, w, in, dx, in, acc}, &pool);
}
// dW[out x in] += dY[n x out]^T X[n x in]
void linear_dw(float* dw, const float* dy, const float* x, size_t n, size_t in, size_t out, engine::ThreadPool& pool) {
  gemm({true, false, out, in, n, dy, out, x, in, dw, in, true}, &pool);
}

}  // namespace

double Model::forward(std::span<const float> P, std::span<const int32_t> inputs, std::span<const int32_t> targets,
                      size_t batch, size_t seq, bool keep, engine::ThreadPool& pool) {
  const LlamaConfig& c = config_;
  LATTICE_CHECK(P.size() == n_params_ && inputs.size() == batch * seq && targets.size() == batch * seq);
  ensure(batch, seq);
  const size_t n = batch * seq, D = c.dim, KD = c.kv_dim(), F = c.ffn, V = c.vocab, H = c.heads;
  const size_t hd = c.head_dim();
  Buffers& b = buf_;
  const float* w = P.data();
  auto T = [&](size_t i) { return w + tensors_[i].offset; };
  embed_rows(b.x.data(), T(0), inputs.data(), n, D);
  for (size_t l = 0; l < c.layers; ++l) {
    const size_t base = kFirstLayer + l * kLayerTensors;
    float* x = b.x.data() + l * n * D;
    float* hn1 = b.hn1.data() + l * n * D;
    float* q = b.q.data() + l * n * D;
    float* k = b.k.data() + l * n * KD;
    float* v = b.v.data() + l * n * KD;
    float* probs = b.probs.data() + l * batch * H * seq * seq;
    float* att = b.att.data() + l * n * D;
    float* x2 = b.x2.data() + l * n * D;
    float* hn2 = b.hn2.data() + l * n * D;
    float* g = b.g.data() + l * n * F;
    float* u = b.u.data() + l * n * F;
    float* act = b.act.data() + l * n * F;
    rmsnorm_rows(hn1, b.rs1.data() + l * n, x, T(base + kAttnNorm), n, D, c.rms_eps, pool);
    linear(q, hn1, T(base + kWq), n, D, D, false, pool);
    linear(k, hn1, T(base + kWk), n, D, KD, false, pool);
    linear(v, hn1, T(base + kWv), n, D, KD, false, pool);
    rope_rows(q, rope_.data(), n, seq, H, hd, false, pool);
    rope_rows(k, rope_.data(), n, seq, c.n_kv_heads(), hd, false, pool);
    attention_forward(att, probs, q, k, v, {batch, seq, H, c.n_kv_heads(), hd}, pool);
    std::memcpy(x2, x, n * D * sizeof(float));
    linear(x2, att, T(base + kWo), n, D, D, true, pool);
    rmsnorm_rows(hn2, b.rs2.data() + l * n, x2, T(base + kFfnNorm), n, D, c.rms_eps, pool);
    linear(g, hn2, T(base + kWg), n, D, F, false, pool);
    linear(u, hn2, T(base + kWu), n, D, F, false, pool);
    swiglu_rows(act, g, u, n * F, pool);
    float* x_next = l + 1 < c.layers ? b.x.data() + (l + 1) * n * D : b.xf.data();
    std::memcpy(x_next, x2, n * D * sizeof(float));
    linear(x_next, act, T(base + kWd), n, F, D, true, pool);
  }
  rmsnorm_rows(b.hnf.data(), b.rsf.data(), b.xf.data(), T(1), n, D, c.rms_eps, pool);
  linear(b.logits.data(), b.hnf.data(), T(2), n, D, V, false, pool);
  return cross_entropy_rows(b.logits.data(), targets.data(), n, V, keep, pool);
}

double Model::loss(std::span<const float> params, std::span<const int32_t> inputs, std::span<const int32_t> targets,
                   size_t batch, size_t seq, engine::ThreadPool& pool) {
  return forward(params, inputs, targets, batch, seq, false, pool);
}

double Model::forward_backward(std::span<const float> params, std::span<float> grads, std::span<const int32_t> inputs,
                               std::span<const int32_t> targets, size_t batch, size_t seq, float grad_scale,
                               engine::ThreadPool& pool) {
  return forward_backward(params, grads, inputs, targets, batch, seq, grad_scale, pool, GradHooks{});
}

double Model::forward_backward(std::span<const float> params, std::span<float> grads, std::span<const int32_t> inputs,
                               std::span<const int32_t> targets, size_t batch, size_t seq, float grad_scale,
                               engine::ThreadPool& pool, const GradHooks& hooks) {
  LATTICE_CHECK(grads.size() == n_params_);
  const double sum = forward(params, inputs, targets, batch, seq, true, pool);
  if (hooks.forward_done) hooks.forward_done(sum);
  backward(params, grads, inputs, targets, batch, seq, grad_scale, pool, hooks);
  return sum;
}

std::vector<std::pair<size_t, size_t>> Model::grad_units() const {
  std::vector<std::pair<size_t, size_t>> u;
  auto end_of = [&](size_t t) { return t < tensors_.size() ? tensors_[t].offset : n_params_; };
  u.emplace_back(tensors_[1].offset, end_of(kFirstLayer));
  for (size_t l = config_.layers; l-- > 0;)
    u.emplace_back(tensors_[kFirstLayer + l * kLayerTensors].offset, end_of(kFirstLayer + (l + 1) * kLayerTensors));
  u.emplace_back(0, end_of(1));
  return u;
}

void Model::backward(std::span<const float> P, std::span<float> G, std::span<const int32_t> inputs,
                     std::span<const int32_t> targets, size_t batch, size_t seq, float grad_scale,
                     engine::ThreadPool& pool, const GradHooks& hooks) {
  const LlamaConfig& c = config_;
  const size_t n = batch * seq, D = c.dim, KD = c.kv_dim(), F = c.ffn, V = c.vocab, H = c.heads;
  const size_t hd = c.head_dim();
  Buffers& b = buf_;
  auto T = [&](size_t i) { return P.data() + tensors_[i].offset; };
  auto dT = [&](size_t i) { return G.data() + tensors_[i].offset; };
  // logits now hold softmax; make them d(loss)/d(logits) * grad_scale.
  cross_entropy_grad_rows(b.logits.data(), targets.data(), n, V, grad_scale, pool);
  linear_dw(dT(2), b.logits.data(), b.hnf.data(), n, D, V, pool);
  linear_dx(b.dh.data(), b.logits.data(), T(2), n, D, V, false, pool);
  std::fill(b.dx.begin(), b.dx.begin() + n * D, 0.0f);
  rmsnorm_backward_rows(b.dx.data(), dT(1), b.dh.data(), b.xf.data(), b.rsf.data(), T(1), n, D, pool);
  size_t unit = 0;  // grad_units()' order
  auto done = [&] {
    if (hooks.unit_done) hooks.unit_done(unit);
    ++unit;
  };
  done();
  for (size_t l = c.layers; l-- > 0;) {
    const size_t base = kFirstLayer + l * kLayerTensors;
    const float* x = b.x.data() + l * n * D;
    const float* hn1 = b.hn1.data() + l * n * D;
    const float* q = b.q.data() + l * n * D;
    const float* k = b.k.data() + l * n * KD;
    const float* v = b.v.data() + l * n * KD;
    const float* probs = b.probs.data() + l * batch * H * seq * seq;
    const float* att = b.att.data() + l * n * D;
    const float* x2 = b.x2.data() + l * n * D;
    const float* hn2 = b.hn2.data() + l * n * D;
    const float* g = b.g.data() + l * n * F;
    const float* u = b.u.data() + l * n * F;
    const float* act = b.act.data() + l * n * F;
    // x_next = x2 + act Wd^T
    linear_dw(dT(base + kWd), b.dx.data(), act, n, F, D, pool);
    linear_dx(b.dact.data(), b.dx.data(), T(base + kWd), n, F, D, false, pool);
    swiglu_backward_rows(b.dg.data(), b.du.data(), b.dact.data(), g, u, n * F, pool);
    linear_dw(dT(base + kWg), b.dg.data(), hn2, n, D, F, pool);
    linear_dw(dT(base + kWu), b.du.data(), hn2, n, D, F, pool);
    linear_dx(b.dh.data(), b.dg.data(), T(base + kWg), n, D, F, false, pool);
    linear_dx(b.dh.data(), b.du.data(), T(base + kWu), n, D, F, true, pool);
    std::memcpy(b.dx2.data(), b.dx.data(), n * D * sizeof(float));
    rmsnorm_backward_rows(b.dx2.data(), dT(base + kFfnNorm), b.dh.data(), x2, b.rs2.data() + l * n,
                          T(base + kFfnNorm), n, D, pool);
    // x2 = x + att Wo^T
    linear_dw(dT(base + kWo), b.dx2.data(), att, n, D, D, pool);
    linear_dx(b.datt.data(), b.dx2.data(), T(base + kWo), n, D, D, false, pool);
    attention_backward(b.dq.data(), b.dk.data(), b.dv.data(), b.datt.data(), probs, q, k, v,
                       {batch, seq, H, c.n_kv_heads(), hd}, pool);
    rope_rows(b.dq.data(), rope_.data(), n, seq, H, hd, true, pool);
    rope_rows(b.dk.data(), rope_.data(), n, seq, c.n_kv_heads(), hd, true, pool);
    linear_dw(dT(base + kWq), b.dq.data(), hn1, n, D, D, pool);
    linear_dw(dT(base + kWk), b.dk.data(), hn1, n, D, KD, pool);
    linear_dw(dT(base + kWv), b.dv.data(), hn1, n, D, KD, pool);
    linear_dx(b.dh.data(), b.dq.data(), T(base + kWq), n, D, D, false, pool);
    linear_dx(b.dh.data(), b.dk.data(), T(base + kWk), n, D, KD, true, pool);
    linear_dx(b.dh.data(), b.dv.data(), T(base + kWv), n, D, KD, true, pool);
    std::memcpy(b.dx.data(), b.dx2.data(), n * D * sizeof(float));
    rmsnorm_backward_rows(b.dx.data(), dT(base + kAttnNorm), b.dh.data(), x, b.rs1.data() + l * n,
                          T(base + kAttnNorm), n, D, pool);
    done();
  }
  embed_backward_rows(dT(0), b.dx.data(), inputs.data(), n, D);
  done();
}

}  // namespace lattice::train
