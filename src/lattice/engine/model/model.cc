#include "lattice/engine/gguf/presets.h"
#include "lattice/engine/model/model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>

#include "lattice/engine/quant/quantize.h"

namespace lattice::engine {

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

std::vector<int> place_experts(uint32_t n_expert, int world, std::span<const double> weights,
                               std::span<const double> load) {
  std::vector<int> owner(n_expert, 0);
  if (world <= 1 || n_expert == 0) return owner;
  const std::vector<Range> counts = split_units(n_expert, world, weights);
  std::vector<double> share(world), held(world, 0.0);
  std::vector<uint32_t> room(world);
  for (int r = 0; r < world; ++r) room[r] = counts[r].size(), share[r] = std::max<double>(counts[r].size(), 1e-9);
  std::vector<uint32_t> order(n_expert);
  std::iota(order.begin(), order.end(), 0u);
  const auto load_of = [&](uint32_t e) { return load.size() == n_expert ? std::max(load[e], 0.0) : 1.0; };
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return load_of(a) > load_of(b); });
  for (uint32_t e : order) {
    int best = -1;
    for (int r = 0; r < world; ++r)
      if (room[r] > 0 && (best < 0 || held[r] / share[r] < held[best] / share[best])) best = r;
    owner[e] = best;
    held[best] += load_of(e), --room[best];
  }
  return owner;
}

namespace {
// `width` FFN columns over the ranks in multiples of a granule (the down matrix's block, at
// least 32 when that divides): one node takes them all.
Result<std::vector<Range>> split_columns(uint32_t width, uint32_t block, int world, std::span<const double> weights,
                                         const char* what, uint32_t* granule) {
  uint32_t g = std::max<uint32_t>(block, 1);
  if (width % std::max<uint32_t>(g, 32) == 0) g = std::max<uint32_t>(g, 32);
  if (world == 1) return std::vector<Range>{{0, width}};
  if (width % g != 0)
    return Unavailable(std::string("tensor parallel: ") + what + " width " + std::to_string(width) +
                       " is not a multiple of the block size " + std::to_string(g));
  if (granule) *granule = g;
  std::vector<Range> out = split_units(width / g, world, weights);
  for (Range& r : out) r = {r.begin * g, r.end * g};
  return out;
}
}  // namespace

Result<ShardLayout> make_shard_layout(const Hparams& hp, uint32_t ff_block_elems, uint32_t wo_block_elems, int world,
                                      std::span<const double> weights) {
  if (world < 1) return InvalidArgument("tensor parallel: world size must be >= 1");
  ShardLayout L;
  const uint32_t wo_blk = std::max<uint32_t>(wo_block_elems, 1);
  if (hp.kv_lora_rank > 0) {
    // MLA: query heads, in groups whose value columns fill whole attn_output blocks.
    const uint32_t g = wo_blk / std::gcd(wo_blk, std::max<uint32_t>(hp.mla_v_dim, 1));
    if (world > 1 && hp.n_head % g != 0)
      return Unavailable("tensor parallel: attention output blocks of " + std::to_string(wo_blk) + " hold " +
                         std::to_string(g) + " heads of " + std::to_string(hp.mla_v_dim) +
                         " value columns, which do not divide the " + std::to_string(hp.n_head) + " heads");
    L.head_granularity = world > 1 ? g : 1;
    L.heads = split_units(hp.n_head / L.head_granularity, world, weights);
    for (Range& r : L.heads) r = {r.begin * L.head_granularity, r.end * L.head_granularity};
    L.kv_heads = L.heads;
  } else {
    // A rank's wo columns start at kv0 * group * head_dim: they must start on a block.
    const uint64_t cols_per_kv = static_cast<uint64_t>(hp.group()) * hp.head_dim_v;
    if (world > 1 && cols_per_kv % wo_blk != 0)
      return Unavailable("tensor parallel: attention output blocks of " + std::to_string(wo_blk) +
                         " do not align with KV-head groups of " + std::to_string(cols_per_kv) + " columns");
    L.kv_heads = split_units(hp.n_head_kv, world, weights);
    L.head_granularity = hp.group();
    for (const Range& r : L.kv_heads) L.heads.push_back({r.begin * hp.group(), r.end * hp.group()});
  }
  LATTICE_ASSIGN_OR_RETURN(L.ff, split_columns(hp.ffn_width(), ff_block_elems, world, weights, "FFN", &L.ff_granularity));
  if (hp.moe() && hp.n_layer_dense_lead > 0) {
    LATTICE_ASSIGN_OR_RETURN(L.ff_dense, split_columns(hp.n_ff, ff_block_elems, world, weights, "dense FFN", nullptr));
  } else {
    L.ff_dense = hp.moe() ? std::vector<Range>(world) : L.ff;
  }
  if (hp.moe() && hp.n_expert_shared > 0) {
    LATTICE_ASSIGN_OR_RETURN(L.ff_shared, split_columns(hp.n_ff_exp * hp.n_expert_shared, ff_block_elems, world,
                                                        weights, "shared-expert", nullptr));
  } else {
    L.ff_shared.assign(world, Range{});
  }
  L.vocab = split_units(hp.n_vocab, world, weights);
  return L;
}

Result<std::unique_ptr<Model>> Model::load(const std::string& path, const LoadOptions& options) {
  auto file = GgufFile::open(path, options.open);
  if (!file.ok()) return file.status();
  auto m = bind(std::move(file).value(), options);
  if (!m.ok()) return m.status().with_context(path);
  return m;
}

Result<std::unique_ptr<Model>> Model::bind(std::unique_ptr<GgufFile> file, const LoadOptions& options) {
  // A shape-only file's data is a hole: there is nothing to bind.
  LATTICE_RETURN_IF_ERROR(check_has_weights(*file));
  const Shard& s = options.shard;
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world)
    return InvalidArgument("shard: rank " + std::to_string(s.rank) + " of " + std::to_string(s.world));
  if (!s.weights.empty() && s.weights.size() != static_cast<size_t>(s.world))
    return InvalidArgument("shard: " + std::to_string(s.weights.size()) + " shares for " + std::to_string(s.world) +
                           " ranks");
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  m->shard_ = s;
  LATTICE_RETURN_IF_ERROR(m->bind_all(options));
  return m;
}

Result<const TensorInfo*> Model::matrix_info(const std::string& name, uint64_t n_in, uint64_t n_out) {
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

Result<Weight> Model::rows(const TensorInfo& t, Range r, bool pack) {
  if (r.size() == 0) return Weight{};
  const size_t rb = t.row_bytes();
  const WeightView v{t.type, t.data + static_cast<size_t>(r.begin) * rb, r.size(), static_cast<size_t>(t.ne[0]), rb};
  auto w = pack ? Weight::pack(v) : Weight::view(v);
  if (!w.ok()) return w.status().with_context("tensor '" + t.name + "'" + (r.size() == t.ne[1] ? "" : " rows"));
  // A packed copy replaces the mapped bytes: drop them from this process's resident set.
  if (w->packed()) (void)file_->advise(t, Access::kDontNeed);
  return w;
}

Result<Weight> Model::cols(const TensorInfo& t, Range c, bool pack) {
  if (c.size() == 0) return Weight{};
  const auto traits = type_traits(static_cast<uint32_t>(t.type));
  if (c.begin % traits->block_elems != 0 || c.size() % traits->block_elems != 0)
    return Unavailable("tensor '" + t.name + "': columns [" + std::to_string(c.begin) + ", " + std::to_string(c.end) +
                       ") do not fall on " + std::string(traits->name) + " blocks");
  if (c.begin == 0 && c.size() == t.ne[0]) return rows(t, {0, static_cast<uint32_t>(t.ne[1])}, pack);
  const size_t rb = t.row_bytes();
  const size_t off = c.begin / traits->block_elems * traits->block_bytes;
  const WeightView v{t.type, t.data + off, static_cast<size_t>(t.ne[1]), c.size(), rb};
  auto w = pack ? Weight::pack(v) : Weight::view(v);
  if (!w.ok()) return w.status().with_context("tensor '" + t.name + "' columns");
  return w;
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
  if (!is_supported_weight_type(t->type)) return Unavailable("tensor '" + name + "': type is not supported");
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
  LATTICE_ASSIGN_OR_RETURN(hp_, read_hparams(md, *arch_));
  const TensorNames& nm = arch_->names;
  const auto global = [](std::string_view base) { return std::string(base) + ".weight"; };
  // Every block has several tensors: a block count the tensor table cannot hold is corrupt
  // (checked before anything is sized by it).
  if (hp_.n_layer > file_->tensors().size())
    return Corrupt("model key '" + std::string(arch_->name) + ".block_count': " + std::to_string(hp_.n_layer) +
                   " blocks, but the file has only " + std::to_string(file_->tensors().size()) + " tensors");

  const TensorInfo* emb = file_->find_tensor(global(nm.tok_embd));
  if (!emb) return NotFound("tensor '" + global(nm.tok_embd) + "' is missing");
  if (emb->n_dims != 2 || emb->ne[0] != hp_.n_embd || emb->ne[1] == 0 || emb->ne[1] > (1u << 24))
    return Corrupt("tensor '" + global(nm.tok_embd) + "' has shape " + emb->shape_string() + ", expected [" +
                   std::to_string(hp_.n_embd) + ", n_vocab]");
  if (!is_supported_weight_type(emb->type))
    return Unavailable("tensor '" + global(nm.tok_embd) + "': weight type is not supported");
  hp_.n_vocab = static_cast<uint32_t>(emb->ne[1]);
  tok_embd_ = emb;
  const uint32_t E = hp_.n_embd;
  const auto blk = [&](uint32_t i, std::string_view base, const char* suffix = "weight") {
    return "blk." + std::to_string(i) + "." + std::string(base) + "." + suffix;
  };

  // Block sizes decide where FFN and attention-output columns may be cut (one granule for
  // every FFN down matrix: dense, experts, shared experts).
  uint32_t ff_blk = 1, wo_blk = 1;
  for (uint32_t i = 0; i < hp_.n_layer; ++i)
    for (auto [base, dst] : {std::pair{nm.down, &ff_blk}, std::pair{nm.down_exps, &ff_blk},
                             std::pair{nm.down_shexp, &ff_blk}, std::pair{nm.wo, &wo_blk}})
      if (const TensorInfo* t = base.empty() ? nullptr : file_->find_tensor(blk(i, base)))
        *dst = std::max<uint32_t>(*dst, type_traits(static_cast<uint32_t>(t->type))->block_elems);
  LATTICE_ASSIGN_OR_RETURN(layout_, make_shard_layout(hp_, ff_blk, wo_blk, shard_.world, shard_.weights));
  layer_begin_ = shard_.layer_begin;
  layer_end_ = shard_.layer_end ? shard_.layer_end : hp_.n_layer;
  if (layer_begin_ >= layer_end_ || layer_end_ > hp_.n_layer)
    return InvalidArgument("layers [" + std::to_string(layer_begin_) + ", " + std::to_string(layer_end_) +
                           ") are not a range of the model's " + std::to_string(hp_.n_layer));
  if (shard_.expert_parallel && !hp_.moe() && !shard_.expert_owner.empty())
    return InvalidArgument("shard: expert owners given for a model without experts");
  if (expert_parallel()) LATTICE_RETURN_IF_ERROR(set_expert_owners());

  const bool pack = options.pack;
  const Range kv = kv_heads(), voc = vocab();
  const uint32_t HD = hp_.head_dim, HDV = hp_.head_dim_v, G = hp_.group();
  const Range q_rows{kv.begin * G * HD, kv.end * G * HD};
  const Range k_rows{kv.begin * HD, kv.end * HD};
  const Range v_rows{kv.begin * HDV, kv.end * HDV};
  const Range o_cols{kv.begin * G * HDV, kv.end * G * HDV};

  if (has_head()) {
    LATTICE_ASSIGN_OR_RETURN(output_norm_, vec(global(nm.output_norm), E, true));
    tied_ = file_->find_tensor(global(nm.output)) == nullptr;
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* out_t,
                             matrix_info(global(tied_ ? nm.tok_embd : nm.output), E, hp_.n_vocab));
    // A tied output is read in place: packing it would drop pages the lookups use.
    LATTICE_ASSIGN_OR_RETURN(output_, rows(*out_t, voc, pack && !tied_));
  }
  LATTICE_ASSIGN_OR_RETURN(rope_freqs_, vec(global(nm.rope_freqs), hp_.rope.n_rot / 2, false));

  const bool mla = arch_->attention == AttentionKind::kMla;
  layers_.resize(layer_end_ - layer_begin_);
  for (uint32_t i = layer_begin_; i < layer_end_; ++i) {
    LayerWeights& L = layers_[i - layer_begin_];
    LATTICE_ASSIGN_OR_RETURN(L.attn_norm, vec(blk(i, nm.attn_norm), E, true));
    if (mla) {
      LATTICE_RETURN_IF_ERROR(bind_mla(L, i, pack));
    } else {
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tq, matrix_info(blk(i, nm.wq), E, hp_.q_dim()));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tk, matrix_info(blk(i, nm.wk), E, hp_.kv_dim()));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tv, matrix_info(blk(i, nm.wv), E, hp_.v_dim()));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* to, matrix_info(blk(i, nm.wo), hp_.attn_out_dim(), E));
    LATTICE_ASSIGN_OR_RETURN(L.wq, rows(*tq, q_rows, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wk, rows(*tk, k_rows, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wv, rows(*tv, v_rows, pack));
    LATTICE_ASSIGN_OR_RETURN(L.wo, cols(*to, o_cols, pack));
    if (arch_->qkv_bias != Presence::kAbsent) {
      const bool need = arch_->qkv_bias == Presence::kRequired;
      LATTICE_ASSIGN_OR_RETURN(L.bq, vec(blk(i, nm.wq, "bias"), hp_.q_dim(), need));
      LATTICE_ASSIGN_OR_RETURN(L.bk, vec(blk(i, nm.wk, "bias"), hp_.kv_dim(), need));
      LATTICE_ASSIGN_OR_RETURN(L.bv, vec(blk(i, nm.wv, "bias"), hp_.v_dim(), need));
      if (L.bq) L.bq += q_rows.begin;
      if (L.bk) L.bk += k_rows.begin;
      if (L.bv) L.bv += v_rows.begin;
    }
    if (arch_->qk_norm) {
      LATTICE_ASSIGN_OR_RETURN(L.q_norm, vec(blk(i, nm.q_norm), HD, true));
      LATTICE_ASSIGN_OR_RETURN(L.k_norm, vec(blk(i, nm.k_norm), HD, true));
    }
    }
    LATTICE_ASSIGN_OR_RETURN(L.ffn_norm, vec(blk(i, nm.ffn_norm), E, true));
    if (hp_.moe_layer(i)) {
      LATTICE_RETURN_IF_ERROR(bind_experts(L, i, pack));
      if (hp_.n_expert_shared > 0) LATTICE_RETURN_IF_ERROR(bind_shared_experts(L, i, pack));
      continue;
    }
    // A leading dense block of a mixture-of-experts model is n_ff wide, split on its own.
    const Range fd = layout_.ff_dense[shard_.rank];
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tg, matrix_info(blk(i, nm.gate), E, hp_.n_ff));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* tu, matrix_info(blk(i, nm.up), E, hp_.n_ff));
    LATTICE_ASSIGN_OR_RETURN(const TensorInfo* td, matrix_info(blk(i, nm.down), hp_.n_ff, E));
    LATTICE_ASSIGN_OR_RETURN(L.w_gate, rows(*tg, fd, pack));
    LATTICE_ASSIGN_OR_RETURN(L.w_up, rows(*tu, fd, pack));
    LATTICE_ASSIGN_OR_RETURN(L.w_down, cols(*td, fd, pack));
  }
  return Status::Ok();
}

Status Model::set_expert_owners() {
  const uint32_t X = hp_.n_expert, NL = hp_.n_layer;
  const std::vector<int>& given = shard_.expert_owner;
  if (!given.empty() && given.size() != X && given.size() != size_t{X} * NL)
    return InvalidArgument("shard: " + std::to_string(given.size()) + " expert owners, want " + std::to_string(X) +
                           " (one per expert) or " + std::to_string(size_t{X} * NL) + " (per layer and expert)");
  const std::vector<int> one = given.empty() ? place_experts(X, shard_.world, shard_.weights) : std::vector<int>{};
  const std::vector<int>& src = given.empty() ? one : given;
  expert_owner_.resize(size_t{X} * NL);
  for (uint32_t l = 0; l < NL; ++l)
    for (uint32_t e = 0; e < X; ++e) {
      const int o = src[src.size() == X ? e : size_t{l} * X + e];
      if (o < 0 || o >= shard_.world)
        return InvalidArgument("shard: expert " + std::to_string(e) + " of layer " + std::to_string(l) +
                               " is owned by rank " + std::to_string(o) + ", not one of " + std::to_string(shard_.world));
      expert_owner_[size_t{l} * X + e] = o;
    }
  const int W = shard_.world;
  const double spare = shard_.expert_spare;
  if (!(spare >= 0 && spare <= 1)) return InvalidArgument("shard: expert spare share must be in [0, 1]");
  if (spare > 0 && W > 64) return InvalidArgument("shard: expert replicas need at most 64 ranks");
  expert_holders_.assign(size_t{X} * NL, 0);
  for (uint32_t l = 0; l < NL; ++l) {
    const int* own = expert_owner_.data() + size_t{l} * X;
    uint64_t* hold = expert_holders_.data() + size_t{l} * X;
    for (uint32_t e = 0; e < X; ++e) hold[e] = W <= 64 ? uint64_t{1} << own[e] : 0;
    if (spare == 0) continue;
    // Rank r replicates the experts of rank r+1, then r+2, ..., in id order.
    for (int r = 0; r < W; ++r) {
      const uint32_t others = static_cast<uint32_t>(std::count_if(own, own + X, [r](int o) { return o != r; }));
      uint32_t want = static_cast<uint32_t>(std::lround(spare * others));
      for (int d = 1; d < W && want > 0; ++d)
        for (uint32_t e = 0; e < X && want > 0; ++e)
          if (own[e] == (r + d) % W) hold[e] |= uint64_t{1} << r, --want;
    }
  }
  return Status::Ok();
}

uint32_t Model::n_owned_experts() const {
  if (!hp_.moe()) return 0;
  uint32_t n = 0;
  for (uint32_t l = layer_begin_; l < layer_end_; ++l)
    for (uint32_t e = 0; e < hp_.n_expert; ++e) n += !expert_parallel() || (expert_holders(l, e) >> shard_.rank & 1);
  return n;
}

TensorInfo Model::expert_slice(const TensorInfo& t, uint32_t e) const {
  TensorInfo s = t;
  const uint64_t bytes = t.row_bytes() * t.ne[1];
  s.name = t.name + "[" + std::to_string(e) + "]";
  s.n_dims = 2;
  s.ne[2] = 1;
  s.n_elems = t.ne[0] * t.ne[1];
  s.n_bytes = bytes;
  s.data = t.data + bytes * e;
  return s;
}

Status Model::bind_experts(LayerWeights& L, uint32_t i, bool pack) {
  const TensorNames& nm = arch_->names;
  const uint32_t E = hp_.n_embd, X = hp_.n_expert, FX = hp_.n_ff_exp;
  const auto name = [&](std::string_view base) { return "blk." + std::to_string(i) + "." + std::string(base) + ".weight"; };
  const auto experts3 = [&](std::string_view base, uint64_t n_in, uint64_t n_out) -> Result<const TensorInfo*> {
    const std::string n = name(base);
    const TensorInfo* t = file_->find_tensor(n);
    if (!t) return NotFound("tensor '" + n + "' is missing (a mixture-of-experts layer)");
    if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != X)
      return Corrupt("tensor '" + n + "' has shape " + t->shape_string() + ", expected [" + std::to_string(n_in) + ", " +
                     std::to_string(n_out) + ", " + std::to_string(X) + "]");
    if (!is_supported_weight_type(t->type))
      return Unavailable("tensor '" + n + "': weight type " +
                         std::string(type_traits(static_cast<uint32_t>(t->type))->name) + " is not supported");
    return t;
  };
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* router, matrix_info(name(nm.gate_inp), E, X));
  LATTICE_ASSIGN_OR_RETURN(L.router, rows(*router, {0, X}, false));
  LATTICE_ASSIGN_OR_RETURN(L.exp_probs_b, vec("blk." + std::to_string(i) + "." + std::string(nm.exp_probs_b) + ".bias", X, false));
  // ffn_gate_up_exps [n_embd, 2 * n_ff_exp, n_expert] (gate rows, then up rows) or the pair.
  const TensorInfo* tgu = file_->find_tensor(name(nm.gate_up_exps));
  const TensorInfo *tg = nullptr, *tu = nullptr;
  if (tgu) {
    LATTICE_ASSIGN_OR_RETURN(tgu, experts3(nm.gate_up_exps, E, 2 * uint64_t{FX}));
  } else {
    LATTICE_ASSIGN_OR_RETURN(tg, experts3(nm.gate_exps, E, FX));
    LATTICE_ASSIGN_OR_RETURN(tu, experts3(nm.up_exps, E, FX));
  }
  LATTICE_ASSIGN_OR_RETURN(const TensorInfo* td, experts3(nm.down_exps, FX, E));
  // Tensor parallel: every expert's columns [f0, f1); expert parallel: the owned experts whole.
  const bool ep = expert_parallel();
  const Range f = ep ? Range{0, FX} : ff();
  L.gate_exps.resize(X), L.up_exps.resize(X), L.down_exps.resize(X);
  for (uint32_t e = 0; e < X; ++e) {
    if (ep && !(expert_holders(i, e) >> shard_.rank & 1)) continue;  // another rank's: unbound, untouched
    const TensorInfo g = expert_slice(tgu ? *tgu : *tg, e);
    const TensorInfo u = tgu ? g : expert_slice(*tu, e);
    const TensorInfo d = expert_slice(*td, e);
    const uint32_t u0 = tgu ? FX : 0;
    // Each expert is a 2-D tensor of its own; a packed copy drops its mapped pages (a shared
    // boundary page is read back from the file if still needed).
    LATTICE_ASSIGN_OR_RETURN(L.gate_exps[e], rows(g, f, pack));
    LATTICE_ASSIGN_OR_RETURN(L.up_exps[e], rows(u, {u0 + f.begin, u0 + f.end}, pack));
    LATTICE_ASSIGN_OR_RETURN(L.down_exps[e], cols(d, f, pack));
  }
  return Status::Ok();
}

uint64_t Model::n_params() const {
  uint64_t n = 0;
  for (const auto& t : file_->tensors()) n += t.n_elems;
  return n;
}

uint64_t Model::weight_bytes() const { return file_->total_tensor_bytes(); }

uint64_t Model::shard_bytes() const {
  uint64_t n = output_.n_rows() ? output_.bytes() : 0;
  for (const LayerWeights& L : layers_)
    for (const Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.router, &L.wq_a, &L.wq_b,
                            &L.wkv_a, &L.gate_shexp, &L.up_shexp, &L.down_shexp})
      if (w->n_rows()) n += w->bytes();
  for (const LayerWeights& L : layers_)
    for (const auto* list : {&L.gate_exps, &L.up_exps, &L.down_exps, &L.k_b, &L.v_b})
      for (const Weight& w : *list)
        if (w.n_rows()) n += w.bytes();
  return n;
}

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
