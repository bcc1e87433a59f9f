// Hyper-parameters of a decoder model, read from GGUF metadata ({arch}.* keys).
#pragma once

#include <cstdint>
#include <string>

#include "lattice/core/status.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/model/arch.h"
#include "lattice/engine/ops/ops.h"

namespace lattice::engine {

struct Hparams {
  uint32_t n_vocab = 0;      // from the token embedding's shape
  uint32_t n_ctx_train = 0;  // {arch}.context_length
  uint32_t n_embd = 0;       // {arch}.embedding_length
  uint32_t n_layer = 0;      // {arch}.block_count
  uint32_t n_ff = 0;         // {arch}.feed_forward_length
  uint32_t n_head = 0;       // {arch}.attention.head_count
  uint32_t n_head_kv = 0;    // {arch}.attention.head_count_kv (default n_head)
  uint32_t head_dim = 0;     // {arch}.attention.key_length (default n_embd / n_head)
  uint32_t head_dim_v = 0;   // {arch}.attention.value_length (default head_dim)
  float rms_eps = 1e-5f;     // {arch}.attention.layer_norm_rms_epsilon
  ops::RopeParams rope;      // layout from the arch; n_rot, freq_base, linear scaling from the file
  std::string rope_scaling;  // "none" or "linear"
  // Mixture of experts (0 experts: a dense FFN in every layer).
  uint32_t n_expert = 0;          // {arch}.expert_count
  uint32_t n_expert_used = 0;     // {arch}.expert_used_count
  uint32_t n_ff_exp = 0;          // {arch}.expert_feed_forward_length (default feed_forward_length)
  bool expert_weights_norm = true;   // {arch}.expert_weights_norm: renormalize the chosen k
  float expert_weights_scale = 1.0f; // {arch}.expert_weights_scale (0 in the file means 1)
  ExpertGating expert_gating = ExpertGating::kSoftmax;  // {arch}.expert_gating_func
  uint32_t n_expert_shared = 0;   // {arch}.expert_shared_count: shared experts, n_ff_exp wide each
  uint32_t n_expert_groups = 0;   // {arch}.expert_group_count (0 or 1: no groups)
  uint32_t n_group_used = 0;      // {arch}.expert_group_used_count
  uint32_t n_layer_dense_lead = 0;  // {arch}.leading_dense_block_count: layers with a dense FFN
  // Multi-head latent attention (AttentionKind::kMla; 0 otherwise).
  uint32_t q_lora_rank = 0;   // {arch}.attention.q_lora_rank (0: a plain attn_q)
  uint32_t kv_lora_rank = 0;  // {arch}.attention.kv_lora_rank: the cached latent
  uint32_t mla_k_dim = 0;     // per-head query/key size: nope + rope (key_length_mla)
  uint32_t mla_v_dim = 0;     // per-head value size (value_length_mla)
  bool mla_split_kv_b = true; // attn_k_b + attn_v_b (the _mla keys present); false: attn_kv_b
  // YaRN (rope_scaling "yarn"): the keys as read; rope holds the derived angles' parameters.
  uint32_t yarn_orig_ctx = 0;     // {arch}.rope.scaling.original_context_length
  float yarn_log_mul = 0.0f;      // {arch}.rope.scaling.yarn_log_multiplier (after arch quirks)
  float rope_attn_factor = 1.0f;  // {arch}.rope.scaling.attn_factor
  float yarn_attn_factor = 1.0f;  // llama.cpp's context attn_factor (rope.mscale before YaRN's own term)
  float attn_scale = 0.0f;        // softmax scale of q.k (0: 1/sqrt(head_dim))

  uint32_t q_dim() const { return n_head * head_dim; }
  uint32_t kv_dim() const { return n_head_kv * head_dim; }
  uint32_t v_dim() const { return n_head_kv * head_dim_v; }
  uint32_t attn_out_dim() const { return n_head * head_dim_v; }
  uint32_t group() const { return n_head / n_head_kv; }  // query heads per KV head
  bool moe() const { return n_expert > 0; }
  uint32_t ffn_width() const { return moe() ? n_ff_exp : n_ff; }  // the FFN columns a layout splits
  bool moe_layer(uint32_t layer) const { return moe() && layer >= n_layer_dense_lead; }
  uint32_t nope_dim() const { return mla_k_dim - rope.n_rot; }
};

// Fills rope.mscale, yarn_attn_factor and the YaRN correction range from the scaling keys
// already read, as llama.cpp's context does; `log_mul_is_mscale`: the deepseek2 special case
// (mscale = mscale_all_dims = yarn_log_mul when it is not 1).
void derive_yarn(Hparams& h, bool log_mul_is_mscale);

// Reads and checks the hyper-parameters. Errors name the key and the reason (kNotFound for a
// required key that is missing, kCorrupt for a value out of range or inconsistent,
// kUnavailable for a RoPE scaling type we do not implement). n_vocab is left 0: the loader
// takes it from the embedding tensor.
Result<Hparams> read_hparams(const Metadata& md, const ArchInfo& arch);

}  // namespace lattice::engine
