// The shape of a model as the simulator needs it: how many bytes each kind of weight takes,
// which of them one decoded token reads, how big the activations and the KV cache are. From a
// GGUF's metadata and tensor table (nothing is loaded, any architecture), or from built-in
// presets of the models people cluster (shape_presets.cc, sources cited there).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/gguf/gguf.h"

namespace lattice::sim {

struct ModelShape {
  std::string name;    // preset name or file name
  std::string arch;    // GGUF architecture ("llama", "qwen3moe", "deepseek2")
  std::string source;  // where the figures come from
  uint32_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_vocab = 0;
  uint32_t n_ff = 0;              // dense FFN width
  uint32_t n_dense_layers = 0;    // mixture of experts: leading layers with a dense FFN
  uint32_t n_expert = 0, n_expert_used = 0, n_expert_shared = 0, n_ff_exp = 0;
  uint32_t kv_lora_rank = 0, rope_dim = 0;  // MLA (deepseek2): the KV cache holds these per token
  uint32_t v_head_dim = 0;        // a head's value width (0: head_dim); MLA's expanded cache uses it
  // Bytes of each kind of weight over the whole model.
  double attn_bytes = 0;      // attention matrices (and norms), all layers
  // Of attn_bytes, MLA's latent projections (attn_q_a, attn_kv_a_mqa and their norms): tensor
  // parallel keeps them whole on every node (plan's node_weight_share; exo's sharding leaves
  // q_a_proj and kv_a_proj_with_mqa unsharded too).
  double attn_latent_bytes = 0;
  double dense_ffn_bytes = 0; // dense FFN matrices, all dense layers
  double expert_bytes = 0;    // routed experts, all layers, all experts
  double shared_bytes = 0;    // shared experts, all layers
  double router_bytes = 0;    // expert routers
  double embd_bytes = 0, output_bytes = 0;
  bool tied_output = false;   // the output matrix is the embedding (counted once in the total)

  bool moe() const { return n_expert > 0; }
  uint32_t n_moe_layers() const { return moe() ? n_layer - n_dense_layers : 0; }
  double total_bytes() const {
    return attn_bytes + dense_ffn_bytes + expert_bytes + shared_bytes + router_bytes + embd_bytes +
           (tied_output ? 0 : output_bytes);
  }
  // Weight bytes one decode step of `batch` sequences reads (each chosen expert once; the
  // experts of a batch are assumed uniformly routed).
  double bytes_per_step(uint32_t batch = 1) const;
  // Fraction of the routed experts one step of `batch` sequences touches.
  double expert_fraction(uint32_t batch = 1) const;
  // Parameters one token multiplies (for the FLOP count of prefill), from the bytes and
  // `bits_per_weight`.
  double active_params() const;
  double bits_per_weight = 16;  // average over the matrices (for FLOP counts only)
  // KV cache elements per token per layer (all heads): 2 x kv heads x head_dim, or MLA's
  // kv_lora_rank + rope_dim; `mla_expanded`: an engine that caches MLA's keys and values per head
  // after decompressing them (mlx-lm's deepseek_v3), n_head x (head_dim + v_head_dim).
  double kv_elems_per_token_layer(bool mla_expanded = false) const;
  // Whether tensor parallel splits that cache by heads (not MLA's one shared latent).
  bool kv_split(bool mla_expanded = false) const { return !kv_lora_rank || mla_expanded; }
  // The elements of one token's hidden state (what tensor parallel all-reduces).
  double hidden_elems() const { return n_embd; }
};

// Built-in shapes, by name; kNotFound lists the names.
Result<ModelShape> shape_preset(const std::string& name);
std::vector<std::string> shape_preset_names();
// The shape of an opened GGUF (any architecture with the usual {arch}.* keys; tensors are
// classified by name: attn_*, ffn_*_exps, ffn_*_shexp, ffn_gate_inp, ffn_*).
Result<ModelShape> shape_from_gguf(const engine::GgufFile& file, const std::string& name);

}  // namespace lattice::sim
