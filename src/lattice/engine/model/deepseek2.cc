// deepseek2: DeepSeek-V2/V3/V3.1 and Kimi K2 (llama.cpp's "deepseek2" files).
//
// Attention is multi-head latent attention: a token's hidden state is compressed to a latent
// of kv_lora_rank values (attn_kv_a_mqa, then attn_kv_a_norm) plus one shared RoPE key of
// rope.dimension_count values; queries come from attn_q_a / attn_q_a_norm / attn_q_b (or a
// plain attn_q when q_lora_rank is 0), nope + rope values per head. The cache holds only the
// latent and the rope key; queries are absorbed through attn_k_b into latent space and the
// attention output is expanded per head through attn_v_b (older files: the fused attn_kv_b,
// split at load). RoPE on adjacent pairs, YaRN as the rope.scaling keys say, with the
// softmax scale mscale^2 / sqrt(nope + rope) llama.cpp uses.
//
// FFN: the first leading_dense_block_count layers are dense SwiGLU; the others route each
// token to expert_used_count of expert_count experts (softmax or sigmoid gating, an optional
// exp_probs_b bias used only to choose, grouped top-k, renormalised and scaled) plus
// expert_shared_count shared experts.
#include <cmath>
#include <string>

#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/model/arch.h"
#include "lattice/engine/model/hparams.h"

namespace lattice::engine {

namespace {

std::string key(std::string_view suffix) { return "deepseek2." + std::string(suffix); }
Status bad(std::string_view suffix, const std::string& why) {
  return Corrupt("model key '" + key(suffix) + "': " + why);
}

Status read_deepseek2(const Metadata& md, Hparams& h) {
  LATTICE_ASSIGN_OR_RETURN(h.n_layer_dense_lead, md.get_u32_or(key("leading_dense_block_count"), 0));
  if (h.n_layer_dense_lead > h.n_layer)
    return bad("leading_dense_block_count", std::to_string(h.n_layer_dense_lead) + " is more than the " +
                                                std::to_string(h.n_layer) + " blocks");
  if (h.n_expert == 0 && h.n_layer_dense_lead < h.n_layer)
    return NotFound("model key '" + key("expert_count") + "' is missing (" +
                    std::to_string(h.n_layer - h.n_layer_dense_lead) + " layers are mixtures of experts)");
  LATTICE_ASSIGN_OR_RETURN(h.n_expert_shared, md.get_u32_or(key("expert_shared_count"), 0));
  if (h.n_expert_shared > 64) return bad("expert_shared_count", std::to_string(h.n_expert_shared) + " is more than 64");
  LATTICE_ASSIGN_OR_RETURN(h.n_expert_groups, md.get_u32_or(key("expert_group_count"), 0));
  LATTICE_ASSIGN_OR_RETURN(h.n_group_used, md.get_u32_or(key("expert_group_used_count"), 0));
  if (h.n_expert_groups > 1) {
    if (h.n_expert % h.n_expert_groups != 0 || h.n_expert_groups >= h.n_expert)
      return bad("expert_group_count", std::to_string(h.n_expert_groups) + " groups do not divide the " +
                                           std::to_string(h.n_expert) + " experts");
    if (h.n_group_used == 0 || h.n_group_used >= h.n_expert_groups)
      return bad("expert_group_used_count", std::to_string(h.n_group_used) + " must be in 1.." +
                                                std::to_string(h.n_expert_groups - 1));
    if (uint64_t{h.n_group_used} * (h.n_expert / h.n_expert_groups) < h.n_expert_used)
      return bad("expert_group_used_count", std::to_string(h.n_group_used) + " groups hold fewer than the " +
                                                std::to_string(h.n_expert_used) + " experts a token uses");
  }
  LATTICE_ASSIGN_OR_RETURN(uint32_t gating, md.get_u32_or(key("expert_gating_func"), 0));
  if (gating == 0 || gating == 1) {
    h.expert_gating = ExpertGating::kSoftmax;  // absent: DeepSeek-V2 files, softmax
  } else if (gating == 2) {
    h.expert_gating = ExpertGating::kSigmoid;
  } else {
    return Unavailable("model key '" + key("expert_gating_func") + "': gating function " + std::to_string(gating) +
                       " is not supported (1 softmax, 2 sigmoid)");
  }

  LATTICE_ASSIGN_OR_RETURN(h.q_lora_rank, md.get_u32_or(key("attention.q_lora_rank"), 0));
  auto kv = md.get_u32(key("attention.kv_lora_rank"));
  if (!kv.ok()) return kv.status();
  h.kv_lora_rank = *kv;
  if (h.kv_lora_rank == 0 || h.kv_lora_rank > 8192) return bad("attention.kv_lora_rank", "must be in 1..8192");
  if (h.q_lora_rank > 65536) return bad("attention.q_lora_rank", "must be at most 65536");
  const uint32_t rope = h.rope.n_rot;
  const bool has_k_mla = md.contains(key("attention.key_length_mla"));
  const bool has_v_mla = md.contains(key("attention.value_length_mla"));
  if (has_k_mla != has_v_mla)
    return NotFound("model key '" + key(has_k_mla ? "attention.value_length_mla" : "attention.key_length_mla") +
                    "' is missing (the other _mla length is present)");
  h.mla_split_kv_b = has_k_mla;
  if (h.mla_split_kv_b) {
    // Written for the absorbed form: the "heads" of the file are the latent plus the rope key.
    LATTICE_ASSIGN_OR_RETURN(h.mla_k_dim, md.get_u32(key("attention.key_length_mla")));
    LATTICE_ASSIGN_OR_RETURN(h.mla_v_dim, md.get_u32(key("attention.value_length_mla")));
    if (h.head_dim != h.kv_lora_rank + rope)
      return bad("attention.key_length", std::to_string(h.head_dim) + " is not kv_lora_rank + rope dims (" +
                                             std::to_string(h.kv_lora_rank + rope) + ")");
    if (h.head_dim_v != h.kv_lora_rank)
      return bad("attention.value_length", std::to_string(h.head_dim_v) + " is not kv_lora_rank (" +
                                               std::to_string(h.kv_lora_rank) + ")");
  } else {
    h.mla_k_dim = h.head_dim;
    h.mla_v_dim = h.head_dim_v;
  }
  if (h.mla_k_dim <= rope || h.mla_k_dim > 4096)
    return bad(h.mla_split_kv_b ? "attention.key_length_mla" : "attention.key_length",
               std::to_string(h.mla_k_dim) + " must exceed the rope dims " + std::to_string(rope) + " (and be <= 4096)");
  if (h.mla_v_dim == 0 || h.mla_v_dim > 4096)
    return bad(h.mla_split_kv_b ? "attention.value_length_mla" : "attention.value_length", "must be in 1..4096");

  // [llama.cpp TAG_DEEPSEEK2_YARN_LOG_MUL_FIX] the converter writes 0.1 * mscale_all_dim.
  if (md.contains(key("rope.scaling.yarn_log_multiplier"))) h.yarn_log_mul /= 0.1f;
  return Status::Ok();
}

}  // namespace

const ArchInfo kDeepseek2Arch{
    .name = "deepseek2",
    .notes = "DeepSeek-V2/V3, Kimi K2 (MLA, sigmoid router, shared experts)",
    .default_rope_freq_base = 10000.0f,
    .head_dim_from_key_length = true,
    .yarn_log_mul_is_mscale = true,
    .attention = AttentionKind::kMla,
    .ffn = FfnKind::kSwiGlu,
    .rope_layout = ops::RopeLayout::kNormal,
    .qkv_bias = Presence::kAbsent,
    .qk_norm = false,
    .experts = Presence::kOptional,
    .router = RouterKind::kGeneral,
    .expert_weights_norm = false,
    .names = {},
    .read_hparams = &read_deepseek2,
};

}  // namespace lattice::engine
