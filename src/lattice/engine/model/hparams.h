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

  uint32_t q_dim() const { return n_head * head_dim; }
  uint32_t kv_dim() const { return n_head_kv * head_dim; }
  uint32_t v_dim() const { return n_head_kv * head_dim_v; }
  uint32_t attn_out_dim() const { return n_head * head_dim_v; }
  uint32_t group() const { return n_head / n_head_kv; }  // query heads per KV head
  bool moe() const { return n_expert > 0; }
  uint32_t ffn_width() const { return moe() ? n_ff_exp : n_ff; }  // the FFN columns a layout splits
};

// Reads and checks the hyper-parameters. Errors name the key and the reason (kNotFound for a
// required key that is missing, kCorrupt for a value out of range or inconsistent,
// kUnavailable for a RoPE scaling type we do not implement). n_vocab is left 0: the loader
// takes it from the embedding tensor.
Result<Hparams> read_hparams(const Metadata& md, const ArchInfo& arch);

}  // namespace lattice::engine
