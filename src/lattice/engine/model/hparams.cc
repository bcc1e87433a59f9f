#include "lattice/engine/model/hparams.h"

#include <cmath>
#include <string>
#include <vector>

namespace lattice::engine {

namespace {
std::string key(const ArchInfo& a, std::string_view suffix) {
  std::string k(a.name);
  k += '.';
  k += suffix;
  return k;
}
Status bad(const std::string& k, const std::string& why) { return Corrupt("model key '" + k + "': " + why); }

// A scalar, or a per-layer array (n_layer entries) whose non-zero entries agree (layers that
// do not use the value, such as leading dense blocks, may hold 0).
Result<uint32_t> read_u32_or_per_layer(const Metadata& md, const std::string& k, uint32_t n_layer, uint32_t fallback) {
  const Value* v = md.find(k);
  if (!v || !v->is_array()) return md.get_u32_or(k, fallback);
  std::vector<int64_t> vals;
  if (auto a = md.get_array<uint32_t>(k); a.ok()) {
    vals.assign((*a)->begin(), (*a)->end());
  } else if (auto b = md.get_array<int32_t>(k); b.ok()) {
    vals.assign((*b)->begin(), (*b)->end());
  } else {
    return bad(k, "expected a number or an array of 32-bit integers");
  }
  if (vals.size() != n_layer)
    return bad(k, "an array of " + std::to_string(vals.size()) + " entries for " + std::to_string(n_layer) + " layers");
  int64_t value = 0;
  for (int64_t x : vals) {
    if (x < 0 || x > int64_t{1} << 24) return bad(k, "entry " + std::to_string(x) + " is out of range");
    if (x == 0) continue;
    if (value != 0 && x != value)
      return Unavailable("model key '" + k + "': layers of different widths (" + std::to_string(value) + ", " +
                         std::to_string(x) + ") are not supported");
    value = x;
  }
  return static_cast<uint32_t>(value);
}
}  // namespace

void derive_yarn(Hparams& h, bool log_mul_is_mscale) {
  // llama.cpp (llama_context): ext_factor 1 for YaRN; the attention factor from the log
  // multiplier, then divided by YaRN's own magnitude term, which ggml's rope multiplies back.
  const bool yarn = h.rope_scaling == "yarn";
  float attn = 1.0f;
  const float factor = 1.0f / h.rope.pos_scale;
  const auto get_mscale = [](float scale, float mscale) {
    return scale <= 1.0f ? 1.0f : 0.1f * mscale * std::log(scale) + 1.0f;
  };
  h.rope.ext_factor = yarn ? 1.0f : 0.0f;
  if (yarn) {
    if (h.yarn_log_mul != 0.0f) {
      float mscale = 1.0f;
      const float mscale_all_dims = h.yarn_log_mul;
      if (log_mul_is_mscale && mscale_all_dims != 1.0f) mscale = mscale_all_dims;
      attn = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dims);
    } else {
      attn = get_mscale(factor, 1.0f);
    }
    attn *= 1.0f / (1.0f + 0.1f * std::log(factor));
    ops::rope_yarn_corr_dims(h.rope.n_rot, h.yarn_orig_ctx, h.rope.freq_base, 32.0f, 1.0f, &h.rope.corr_low,
                             &h.rope.corr_high);
  }
  attn *= h.rope_attn_factor;
  h.yarn_attn_factor = attn;
  // ggml's rope: cos and sin times attn_factor, and times 1 + 0.1 ln(1/freq_scale) under YaRN.
  h.rope.mscale = yarn ? attn * (1.0f + 0.1f * std::log(1.0f / h.rope.pos_scale)) : attn;
}

Result<Hparams> read_hparams(const Metadata& md, const ArchInfo& arch) {
  Hparams h;
  auto req_u32 = [&](std::string_view suffix, uint32_t& out) -> Status {
    auto v = md.get_u32(key(arch, suffix));
    if (!v.ok()) return v.status();
    if (*v == 0) return bad(key(arch, suffix), "must be > 0");
    out = *v;
    return Status::Ok();
  };
  LATTICE_RETURN_IF_ERROR(req_u32("embedding_length", h.n_embd));
  LATTICE_RETURN_IF_ERROR(req_u32("block_count", h.n_layer));
  LATTICE_RETURN_IF_ERROR(req_u32("feed_forward_length", h.n_ff));
  LATTICE_RETURN_IF_ERROR(req_u32("attention.head_count", h.n_head));
  LATTICE_ASSIGN_OR_RETURN(h.n_ctx_train, md.get_u32_or(key(arch, "context_length"), 4096));
  LATTICE_ASSIGN_OR_RETURN(h.n_head_kv, md.get_u32_or(key(arch, "attention.head_count_kv"), h.n_head));
  if (h.n_head_kv == 0 || h.n_head % h.n_head_kv != 0)
    return bad(key(arch, "attention.head_count_kv"), std::to_string(h.n_head_kv) +
                                                         " does not divide the head count " +
                                                         std::to_string(h.n_head));
  uint32_t default_hd = h.n_embd / h.n_head;
  if (arch.head_dim_from_key_length) {
    LATTICE_ASSIGN_OR_RETURN(h.head_dim, md.get_u32_or(key(arch, "attention.key_length"), default_hd));
  } else {
    h.head_dim = default_hd;
  }
  LATTICE_ASSIGN_OR_RETURN(h.head_dim_v, md.get_u32_or(key(arch, "attention.value_length"), h.head_dim));
  if (h.head_dim == 0 || h.head_dim % 2 != 0 || h.head_dim > 1024)
    return bad(key(arch, "attention.key_length"), "head size " + std::to_string(h.head_dim) +
                                                      " must be even and in 2..1024");
  if (h.head_dim_v == 0 || h.head_dim_v > 1024)
    return bad(key(arch, "attention.value_length"), "value head size " + std::to_string(h.head_dim_v) +
                                                        " must be in 1..1024");
  if (!arch.head_dim_from_key_length && h.n_embd % h.n_head != 0)
    return bad(key(arch, "attention.head_count"), "does not divide embedding_length");

  LATTICE_ASSIGN_OR_RETURN(h.rms_eps, md.get_f32_or(key(arch, "attention.layer_norm_rms_epsilon"), 1e-5f));
  if (!(h.rms_eps > 0.0f) || !(h.rms_eps < 1.0f))
    return bad(key(arch, "attention.layer_norm_rms_epsilon"), "must be in (0, 1)");

  // Experts.
  if (arch.experts != Presence::kAbsent) {
    LATTICE_ASSIGN_OR_RETURN(h.n_expert, md.get_u32_or(key(arch, "expert_count"), 0));
    if (arch.experts == Presence::kRequired && h.n_expert == 0)
      return bad(key(arch, "expert_count"), "must be > 0 for " + std::string(arch.name));
  }
  if (h.n_expert > 0) {
    if (h.n_expert > 4096) return bad(key(arch, "expert_count"), std::to_string(h.n_expert) + " is more than 4096");
    LATTICE_RETURN_IF_ERROR(req_u32("expert_used_count", h.n_expert_used));
    if (h.n_expert_used > h.n_expert)
      return bad(key(arch, "expert_used_count"), std::to_string(h.n_expert_used) + " is more than the " +
                                                     std::to_string(h.n_expert) + " experts");
    LATTICE_ASSIGN_OR_RETURN(h.n_ff_exp, read_u32_or_per_layer(md, key(arch, "expert_feed_forward_length"), h.n_layer, h.n_ff));
    if (h.n_ff_exp == 0) return bad(key(arch, "expert_feed_forward_length"), "must be > 0");
    LATTICE_ASSIGN_OR_RETURN(h.expert_weights_norm, md.get_bool_or(key(arch, "expert_weights_norm"), arch.expert_weights_norm));
    LATTICE_ASSIGN_OR_RETURN(h.expert_weights_scale, md.get_f32_or(key(arch, "expert_weights_scale"), 0.0f));
    if (h.expert_weights_scale == 0.0f) h.expert_weights_scale = 1.0f;
    if (!(h.expert_weights_scale > 0.0f) || !std::isfinite(h.expert_weights_scale))
      return bad(key(arch, "expert_weights_scale"), "must be a finite number > 0");
  }

  h.rope.layout = arch.rope_layout;
  LATTICE_ASSIGN_OR_RETURN(h.rope.n_rot, md.get_u32_or(key(arch, "rope.dimension_count"), h.head_dim));
  if (h.rope.n_rot == 0 || h.rope.n_rot % 2 != 0 || h.rope.n_rot > h.head_dim)
    return bad(key(arch, "rope.dimension_count"), std::to_string(h.rope.n_rot) +
                                                      " must be even and at most the head size " +
                                                      std::to_string(h.head_dim));
  LATTICE_ASSIGN_OR_RETURN(h.rope.freq_base, md.get_f32_or(key(arch, "rope.freq_base"), arch.default_rope_freq_base));
  if (!(h.rope.freq_base > 1.0f) || !std::isfinite(h.rope.freq_base))
    return bad(key(arch, "rope.freq_base"), "must be a finite number > 1");

  LATTICE_ASSIGN_OR_RETURN(h.rope_scaling, md.get_string_or(key(arch, "rope.scaling.type"), "none"));
  float factor = 1.0f;
  if (md.contains(key(arch, "rope.scaling.factor"))) {
    LATTICE_ASSIGN_OR_RETURN(factor, md.get_f32(key(arch, "rope.scaling.factor")));
  } else if (md.contains(key(arch, "rope.scale_linear"))) {  // older converters
    LATTICE_ASSIGN_OR_RETURN(factor, md.get_f32(key(arch, "rope.scale_linear")));
    if (h.rope_scaling == "none") h.rope_scaling = "linear";
  }
  if (h.rope_scaling == "none" || h.rope_scaling.empty()) {
    h.rope_scaling = "none";
  } else if (h.rope_scaling == "linear") {
    if (!(factor > 0.0f) || !std::isfinite(factor)) return bad(key(arch, "rope.scaling.factor"), "must be > 0");
    h.rope.pos_scale = 1.0f / factor;
  } else if (h.rope_scaling == "yarn") {
    if (!(factor > 0.0f) || !std::isfinite(factor)) return bad(key(arch, "rope.scaling.factor"), "must be > 0");
    h.rope.pos_scale = 1.0f / factor;
    LATTICE_ASSIGN_OR_RETURN(h.yarn_orig_ctx, md.get_u32_or(key(arch, "rope.scaling.original_context_length"), h.n_ctx_train));
    if (h.yarn_orig_ctx == 0) return bad(key(arch, "rope.scaling.original_context_length"), "must be > 0");
    LATTICE_ASSIGN_OR_RETURN(h.yarn_log_mul, md.get_f32_or(key(arch, "rope.scaling.yarn_log_multiplier"), 0.0f));
    if (!std::isfinite(h.yarn_log_mul) || h.yarn_log_mul < 0)
      return bad(key(arch, "rope.scaling.yarn_log_multiplier"), "must be a finite number >= 0");
  } else {
    return Unavailable("model key '" + key(arch, "rope.scaling.type") + "': RoPE scaling '" + h.rope_scaling +
                       "' is not supported (supported: none, linear, yarn, and llama3-style rope_freqs)");
  }
  LATTICE_ASSIGN_OR_RETURN(h.rope_attn_factor, md.get_f32_or(key(arch, "rope.scaling.attn_factor"), 1.0f));
  if (!(h.rope_attn_factor > 0.0f) || !std::isfinite(h.rope_attn_factor))
    return bad(key(arch, "rope.scaling.attn_factor"), "must be a finite number > 0");
  if (arch.read_hparams) LATTICE_RETURN_IF_ERROR(arch.read_hparams(md, h));
  derive_yarn(h, arch.yarn_log_mul_is_mscale);
  if (arch.attention == AttentionKind::kMla) {
    // llama.cpp's deepseek2 graph: undo the context's division, then mscale^2 / sqrt(k_dim).
    const float l = std::log(1.0f / h.rope.pos_scale);
    const float attn_org = h.yarn_attn_factor * (1.0f + 0.1f * l);
    const float mscale = attn_org * (1.0f + 0.1f * h.yarn_log_mul * l);
    h.attn_scale = mscale * mscale / std::sqrt(static_cast<float>(h.mla_k_dim));
  }
  return h;
}

}  // namespace lattice::engine
