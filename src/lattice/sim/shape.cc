#include "lattice/sim/shape.h"

#include <cmath>

namespace lattice::sim {

double ModelShape::expert_fraction(uint32_t batch) const {
  if (!moe() || n_expert == 0) return 0;
  const double p = double(n_expert_used) / n_expert;
  return 1.0 - std::pow(1.0 - p, std::max<uint32_t>(batch, 1));
}

double ModelShape::bytes_per_step(uint32_t batch) const {
  return attn_bytes + dense_ffn_bytes + shared_bytes + router_bytes + output_bytes + expert_bytes * expert_fraction(batch);
}

double ModelShape::active_params() const { return bytes_per_step(1) * 8.0 / bits_per_weight; }

double ModelShape::kv_elems_per_token_layer(bool mla_expanded) const {
  if (kv_lora_rank && mla_expanded) return double(n_head) * (head_dim + (v_head_dim ? v_head_dim : head_dim));
  if (kv_lora_rank) return double(kv_lora_rank) + rope_dim;
  return 2.0 * n_head_kv * head_dim;
}

namespace {

Result<uint32_t> key_u32(const engine::Metadata& md, const std::string& arch, const char* key, uint32_t fallback,
                         bool required) {
  const std::string k = arch + "." + key;
  if (!md.contains(k)) {
    if (required) return NotFound("GGUF key '" + k + "' is missing");
    return fallback;
  }
  return md.get_u32(k);
}

bool starts(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool has(const std::string& s, const char* p) { return s.find(p) != std::string::npos; }

}  // namespace

Result<ModelShape> shape_from_gguf(const engine::GgufFile& file, const std::string& name) {
  const engine::Metadata& md = file.metadata();
  LATTICE_ASSIGN_OR_RETURN(std::string arch, md.get_string("general.architecture"));
  ModelShape s;
  s.name = name;
  s.arch = arch;
  s.source = "GGUF " + name;
  LATTICE_ASSIGN_OR_RETURN(s.n_layer, key_u32(md, arch, "block_count", 0, true));
  LATTICE_ASSIGN_OR_RETURN(s.n_embd, key_u32(md, arch, "embedding_length", 0, true));
  LATTICE_ASSIGN_OR_RETURN(s.n_head, key_u32(md, arch, "attention.head_count", 0, true));
  LATTICE_ASSIGN_OR_RETURN(s.n_head_kv, key_u32(md, arch, "attention.head_count_kv", s.n_head, false));
  if (s.n_layer == 0 || s.n_embd == 0 || s.n_head == 0 || s.n_head_kv == 0 || s.n_head % s.n_head_kv)
    return Corrupt(name + ": block_count, embedding_length and head counts must be positive, heads a multiple of KV heads");
  LATTICE_ASSIGN_OR_RETURN(s.head_dim, key_u32(md, arch, "attention.key_length", s.n_embd / s.n_head, false));
  // MLA files written for the absorbed form carry the per-head widths under *_mla.
  LATTICE_ASSIGN_OR_RETURN(s.v_head_dim, key_u32(md, arch, "attention.value_length", s.head_dim, false));
  LATTICE_ASSIGN_OR_RETURN(uint32_t k_mla, key_u32(md, arch, "attention.key_length_mla", 0, false));
  LATTICE_ASSIGN_OR_RETURN(uint32_t v_mla, key_u32(md, arch, "attention.value_length_mla", 0, false));
  LATTICE_ASSIGN_OR_RETURN(s.n_ff, key_u32(md, arch, "feed_forward_length", 0, false));
  LATTICE_ASSIGN_OR_RETURN(s.n_expert, key_u32(md, arch, "expert_count", 0, false));
  LATTICE_ASSIGN_OR_RETURN(s.n_expert_used, key_u32(md, arch, "expert_used_count", 0, false));
  LATTICE_ASSIGN_OR_RETURN(s.n_expert_shared, key_u32(md, arch, "expert_shared_count", 0, false));
  LATTICE_ASSIGN_OR_RETURN(s.n_ff_exp, key_u32(md, arch, "expert_feed_forward_length", s.n_ff, false));
  LATTICE_ASSIGN_OR_RETURN(s.n_dense_layers, key_u32(md, arch, "leading_dense_block_count", 0, false));
  LATTICE_ASSIGN_OR_RETURN(s.kv_lora_rank, key_u32(md, arch, "attention.kv_lora_rank", 0, false));
  LATTICE_ASSIGN_OR_RETURN(s.rope_dim, key_u32(md, arch, "rope.dimension_count", 0, false));
  if (s.n_expert && (s.n_expert_used == 0 || s.n_expert_used > s.n_expert))
    return Corrupt(name + ": expert_used_count must be in 1..expert_count");
  if (s.n_dense_layers > s.n_layer) return Corrupt(name + ": leading_dense_block_count exceeds block_count");
  if (!s.kv_lora_rank) s.rope_dim = 0;
  if (s.kv_lora_rank && k_mla) s.head_dim = k_mla;
  if (s.kv_lora_rank && v_mla) s.v_head_dim = v_mla;
  // MLA: the cache holds one shared latent a token; tensor parallel splits the query heads (each
  // decompresses its own keys and values), whatever head_count_kv the converter wrote (1 or n_head).
  if (s.kv_lora_rank) s.n_head_kv = s.n_head;
  double bits = 0, params = 0;
  for (const engine::TensorInfo& t : file.tensors()) {
    const std::string& n = t.name;
    const double b = static_cast<double>(t.n_bytes);
    if (n == "token_embd.weight") {
      s.embd_bytes += b;
      s.n_vocab = static_cast<uint32_t>(t.ne[1]);
      continue;  // a decode step reads one row of it
    }
    if (starts(n, "output")) s.output_bytes += b;
    else if (has(n, "_exps")) s.expert_bytes += b;
    else if (has(n, "_shexp")) s.shared_bytes += b;
    else if (has(n, "ffn_gate_inp") || has(n, "exp_probs")) s.router_bytes += b;
    else if (has(n, ".ffn_")) s.dense_ffn_bytes += b;
    else {
      s.attn_bytes += b;  // attention matrices and every norm
      if (has(n, ".attn_q_a") || has(n, ".attn_kv_a_")) s.attn_latent_bytes += b;  // incl. their norms
    }
    if (t.n_dims >= 2) {
      bits += b * 8;
      params += static_cast<double>(t.n_elems);
    }
  }
  if (s.n_vocab == 0) return NotFound(name + ": tensor 'token_embd.weight' is missing");
  if (s.output_bytes == 0) {  // tied embeddings: the output reads them
    s.output_bytes = s.embd_bytes;
    s.tied_output = true;
  }
  if (s.moe() && s.expert_bytes == 0) return Corrupt(name + ": expert_count is set but no ffn_*_exps tensor exists");
  s.bits_per_weight = params > 0 ? bits / params : 16;
  return s;
}

}  // namespace lattice::sim
