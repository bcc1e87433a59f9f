#include "lattice/engine/model/hparams.h"

#include <cmath>
#include <string>

namespace lattice::engine {

namespace {
std::string key(const ArchInfo& a, std::string_view suffix) {
  std::string k(a.name);
  k += '.';
  k += suffix;
  return k;
}
Status bad(const std::string& k, const std::string& why) { return Corrupt("model key '" + k + "': " + why); }
}  // namespace

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
    LATTICE_ASSIGN_OR_RETURN(h.n_ff_exp, md.get_u32_or(key(arch, "expert_feed_forward_length"), h.n_ff));
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
  } else {
    return Unavailable("model key '" + key(arch, "rope.scaling.type") + "': RoPE scaling '" + h.rope_scaling +
                       "' is not supported (supported: none, linear, and llama3-style rope_freqs)");
  }
  return h;
}

}  // namespace lattice::engine
