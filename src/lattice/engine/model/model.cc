#include "lattice/engine/model/model.h"

#include <map>
#include <string>

#include "lattice/engine/quant/quantize.h"

namespace lattice::engine {

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const LoadOptions& options) {
  auto file = GgufFile::open(path, options.open);
  if (!file.ok()) return file.status();
  auto m = bind(std::move(file).value(), options);
  if (!m.ok()) return m.status().with_context(path);
  return m;
}

Result<std::unique_ptr<Model>> Model::bind(std::unique_ptr<GgufFile> file, const LoadOptions& options) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  LATTICE_RETURN_IF_ERROR(m->bind_all(options));
  return m;
}

Result<Weight> Model::matrix(const std::string& name, uint64_t n_in, uint64_t n_out, bool required, bool pack) {
  const TensorInfo* t = file_->find_tensor(name);
  if (!t) {
    if (required) return NotFound("tensor '" + name + "' is missing");
    return Weight{};
  }
  if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
    return Corrupt("tensor '" + name + "' has shape " + t->shape_string() + ", expected [" + std::to_string(n_in) +
                   ", " + std::to_string(n_out) + "]");
  if (!is_supported_weight_type(t->type))
    return Unavailable("tensor '" + name + "': weight type " +
                       std::string(type_traits(static_cast<uint32_t>(t->type))->name) + " is not supported");
  const WeightView view{t->type, t->data, static_cast<size_t>(n_out), static_cast<size_t>(n_in), 0};
  auto w = pack ? Weight::pack(view) : Weight::view(view);
  if (!w.ok()) return w.status().with_context("tensor '" + name + "'");
  // A packed copy replaces the mapped bytes: drop them from this process's resident set.
  if (w->packed()) (void)file_->advise(*t, Access::kDontNeed);
  return std::move(w).value();
}

Result<const float*> Model::vec(const std::string& name, uint64_t n, bool required) {
  const TensorInfo* t = file_->find_tensor(name);
  if (!t) {
    if (required) return NotFound("tensor '" + name + "' is missing");
    return static_cast<const float*>(nullptr);
  }
  if (t->n_elems != n || t->ne[0] != n)
    return Corrupt("tensor '" + name + "' has shape " + t->shape_string() + ", expected [" + std::to_string(n) + "]");
  if (t->type == TensorType::kF32 && reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0)
    return reinterpret_cast<const float*>(t->data);
  if (!is_supported_weight_type(t->type))
    return Unavailable("tensor '" + name + "': type is not supported");
  auto buf = std::make_unique<float[]>(n);
  LATTICE_RETURN_IF_ERROR(dequantize_row(t->type, t->data, buf.get(), n));
  owned_.push_back(std::move(buf));
  return static_cast<const float*>(owned_.back().get());
}

Status Model::bind_all(const LoadOptions& options) {
  const Metadata& md = file_->metadata();
  auto arch_name = md.get_string("general.architecture");
  if (!arch_name.ok()) return arch_name.status();
  arch_ = find_arch(*arch_name);
  if (!arch_)
    return Unavailable("architecture '" + *arch_name + "' is not supported (supported: " + supported_arch_names() +
                       ")");
  auto hp = read_hparams(md, *arch_);
  if (!hp.ok()) return hp.status();
  hp_ = std::move(hp).value();

  const TensorInfo* emb = file_->find_tensor("token_embd.weight");
  if (!emb) return NotFound("tensor 'token_embd.weight' is missing");
  if (emb->n_dims != 2 || emb->ne[0] != hp_.n_embd || emb->ne[1] == 0 || emb->ne[1] > (1u << 24))
    return Corrupt("tensor 'token_embd.weight' has shape " + emb->shape_string() + ", expected [" +
                   std::to_string(hp_.n_embd) + ", n_vocab]");
  hp_.n_vocab = static_cast<uint32_t>(emb->ne[1]);
  const uint32_t E = hp_.n_embd, V = hp_.n_vocab;
  if (!is_supported_weight_type(emb->type))
    return Unavailable("tensor 'token_embd.weight': weight type is not supported");
  tok_embd_ = emb;
  const bool pack = options.pack;
  LATTICE_ASSIGN_OR_RETURN(output_norm_, vec("output_norm.weight", E, true));
  tied_ = file_->find_tensor("output.weight") == nullptr;
  // A tied output reads the embedding in place: packing it would drop pages the lookups use.
  LATTICE_ASSIGN_OR_RETURN(output_, matrix(tied_ ? "token_embd.weight" : "output.weight", E, V, true, pack && !tied_));
  LATTICE_ASSIGN_OR_RETURN(rope_freqs_, vec("rope_freqs.weight", hp_.rope.n_rot / 2, false));

  layers_.resize(hp_.n_layer);
  for (uint32_t i = 0; i < hp_.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights& L = layers_[i];
    LATTICE_ASSIGN_OR_RETURN(L.attn_norm, vec(p + "attn_norm.weight", E, true));
    LATTICE_ASSIGN_OR_RETURN(L.wq, matrix(p + "attn_q.weight", E, hp_.q_dim(), true, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wk, matrix(p + "attn_k.weight", E, hp_.kv_dim(), true, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wv, matrix(p + "attn_v.weight", E, hp_.v_dim(), true, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wo, matrix(p + "attn_output.weight", hp_.attn_out_dim(), E, true, pack));
    const bool need_bias = arch_->qkv_bias_required;
    LATTICE_ASSIGN_OR_RETURN(L.bq, vec(p + "attn_q.bias", hp_.q_dim(), need_bias));
    LATTICE_ASSIGN_OR_RETURN(L.bk, vec(p + "attn_k.bias", hp_.kv_dim(), need_bias));
    LATTICE_ASSIGN_OR_RETURN(L.bv, vec(p + "attn_v.bias", hp_.v_dim(), need_bias));
    if (arch_->qk_norm) {
      LATTICE_ASSIGN_OR_RETURN(L.q_norm, vec(p + "attn_q_norm.weight", hp_.head_dim, true));
      LATTICE_ASSIGN_OR_RETURN(L.k_norm, vec(p + "attn_k_norm.weight", hp_.head_dim, true));
    }
    LATTICE_ASSIGN_OR_RETURN(L.ffn_norm, vec(p + "ffn_norm.weight", E, true));
    LATTICE_ASSIGN_OR_RETURN(L.w_gate, matrix(p + "ffn_gate.weight", E, hp_.n_ff, true, pack));
    LATTICE_ASSIGN_OR_RETURN(L.w_up, matrix(p + "ffn_up.weight", E, hp_.n_ff, true, pack));
    LATTICE_ASSIGN_OR_RETURN(L.w_down, matrix(p + "ffn_down.weight", hp_.n_ff, E, true, pack));
  }
  return Status::Ok();
}

uint64_t Model::n_params() const {
  uint64_t n = 0;
  for (const auto& t : file_->tensors()) n += t.n_elems;
  return n;
}

uint64_t Model::weight_bytes() const { return file_->total_tensor_bytes(); }

std::string Model::type_name() const {
  std::map<TensorType, uint64_t> by_type;
  for (const auto& t : file_->tensors())
    if (t.n_dims == 2) by_type[t.type] += t.n_bytes;
  TensorType best = TensorType::kF32;
  uint64_t best_bytes = 0;
  for (auto [ty, b] : by_type)
    if (b > best_bytes) best = ty, best_bytes = b;
  std::string name(type_traits(static_cast<uint32_t>(best))->name);
  if (by_type.size() > 1) name += " mix";
  return name;
}

void Model::prefault(const std::function<void(uint64_t, uint64_t)>& progress) const {
  // Only tensors still served from the mapping (packed ones were copied at load).
  std::vector<const TensorInfo*> in_place;
  uint64_t total = 0;
  auto add = [&](const Weight& w) {
    if (w.packed() || !w.raw().data) return;
    for (const auto& t : file_->tensors())
      if (static_cast<const void*>(t.data) == w.raw().data) {
        in_place.push_back(&t);
        total += t.n_bytes;
        return;
      }
  };
  for (const LayerWeights& L : layers_)
    for (const Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) add(*w);
  add(output_);
  uint64_t done = 0, last_report = 0;
  constexpr uint64_t kPage = 4096;
  volatile uint8_t sink = 0;
  for (const TensorInfo* t : in_place) {
    (void)file_->advise(*t, Access::kWillNeed);
    const auto* p = reinterpret_cast<const volatile uint8_t*>(t->data);
    uint8_t acc = 0;
    for (uint64_t off = 0; off < t->n_bytes; off += kPage) acc ^= p[off];
    sink = sink ^ acc;
    done += t->n_bytes;
    if (progress && done - last_report >= (64u << 20)) {
      progress(done, total);
      last_report = done;
    }
  }
  if (progress) progress(done, total);
}

}  // namespace lattice::engine
