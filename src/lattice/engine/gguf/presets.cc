// Shape-only presets (see presets.h).
//
// Shapes, from each model's config.json on Hugging Face (the figures the simulator's presets
// use; not re-fetched for this file):
//   DeepSeek-V3.1 (deepseek-ai/DeepSeek-V3.1, same architecture as DeepSeek-V3, arXiv
//   2412.19437): 61 layers of which the first 3 dense (first_k_dense_replace), hidden 7168,
//   dense FFN 18432, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64,
//   qk_nope_head_dim 128, v_head_dim 128, 256 routed experts (moe_intermediate_size 2048) in
//   8 groups of which 4 are used (n_group, topk_group), 8 experts per token, 1 shared expert,
//   routed_scaling_factor 2.5, sigmoid scoring with a correction bias, norm_topk_prob, vocab
//   129280, YaRN factor 40 over 4096 (163840 positions), mscale_all_dim 1. Without the MTP
//   layer: 671 B parameters, as the model card counts the main model.
//   Kimi K2 Thinking (moonshotai/Kimi-K2-Thinking, DeepseekV3ForCausalLM): the same, with 64
//   heads, 384 experts, 1 group, 1 dense layer, routed_scaling_factor 2.827, vocab 163840,
//   YaRN factor 64 over 4096 (262144 positions): about 1.03 T parameters, 32 B active.
//   Qwen3-235B-A22B (Qwen/Qwen3-235B-A22B): 94 layers, hidden 4096, 64 query and 4 KV heads
//   of 128 (q/k RMSNorm), 128 experts (moe_intermediate_size 1536), 8 per token, normalized,
//   no shared expert, intermediate_size 12288, rope theta 1e6, rms eps 1e-6, 40960 positions,
//   vocab 151936: 235 B parameters.
//
// Types:
//   *-q8: every matrix Q8_0, norms / router / expert bias F32 (convert_hf_to_gguf.py
//   --outtype q8_0).
//   kimi-k2-thinking-q4: the release ships its routed experts as INT4 (quantization-aware
//   training, weight-only, groups of 32) and everything else in BF16. Here the routed experts
//   are Q4_K (4.5 bits a weight, the closest llama.cpp type), the matrices the release keeps
//   in BF16 (attention, shared expert, dense FFN, embedding) Q8_0, the output Q6_K (llama.cpp's
//   Q4_K_M rule), norms / router / bias F32. This is a choice, not a copy of one published GGUF.
#include "lattice/engine/gguf/presets.h"

#include <algorithm>
#include <variant>

namespace lattice::engine {

namespace {

// What both architectures' presets have: a mixture of experts in every (non-dense) block.
struct MoeBase {
  std::string name;
  uint32_t layers, dim, ffn, heads, experts, used, expert_ffn, vocab, ctx;
};

struct MlaShape {
  MoeBase b;
  uint32_t dense_layers, q_lora, kv_lora, rope, nope, v;
  uint32_t groups, groups_used, shared;
  float scale, yarn_factor;
  bool q4;  // Kimi's mix (above); else every matrix Q8_0
};

struct MoeShape {
  MoeBase b;
  uint32_t kv_heads, head_dim;
};

// The keys of general.* and {arch}.* that both converters write alike.
void set_base_keys(Metadata& md, const std::string& arch, const MoeBase& b, uint32_t kv_heads, float rope_base,
                   uint32_t key_length, uint32_t value_length) {
  const std::string a = arch + ".";
  md.set("general.architecture", arch);
  md.set("general.name", b.name);
  md.set(a + "block_count", b.layers);
  md.set(a + "context_length", b.ctx);
  md.set(a + "embedding_length", b.dim);
  md.set(a + "feed_forward_length", b.ffn);
  md.set(a + "attention.head_count", b.heads);
  md.set(a + "attention.head_count_kv", kv_heads);
  md.set(a + "rope.freq_base", rope_base);
  md.set(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  md.set(a + "expert_used_count", b.used);
  md.set(a + "attention.key_length", key_length);
  md.set(a + "attention.value_length", value_length);
  md.set(a + "expert_count", b.experts);
  md.set(a + "expert_feed_forward_length", b.expert_ffn);
  md.set(a + "vocab_size", b.vocab);
}

struct Tensors {
  GgufWriter& w;
  Status add(const std::string& name, TensorType t, std::vector<uint64_t> ne) { return w.add_tensor(name, t, std::move(ne)); }
  // The merged 3-D experts of block prefix `p` and their router, in the converter's order.
  Status experts(const std::string& p, TensorType t, const MoeBase& b) {
    LATTICE_RETURN_IF_ERROR(add(p + "ffn_down_exps.weight", t, {b.expert_ffn, b.dim, b.experts}));
    LATTICE_RETURN_IF_ERROR(add(p + "ffn_gate_exps.weight", t, {b.dim, b.expert_ffn, b.experts}));
    return add(p + "ffn_up_exps.weight", t, {b.dim, b.expert_ffn, b.experts});
  }
};

Status add_mla(GgufWriter& w, const MlaShape& s) {
  const MoeBase& b = s.b;
  Metadata& md = w.metadata();
  const std::string a = "deepseek2.";
  // MLA as MQA (the converter's note): one KV head, the latent as key and value.
  set_base_keys(md, "deepseek2", b, 1, 10000.0f, s.kv_lora + s.rope, s.kv_lora);
  md.set(a + "expert_group_count", s.groups);
  md.set(a + "expert_group_used_count", s.groups_used);
  md.set(a + "expert_gating_func", uint32_t{2});  // sigmoid
  md.set(a + "leading_dense_block_count", s.dense_layers);
  md.set(a + "attention.q_lora_rank", s.q_lora);
  md.set(a + "attention.kv_lora_rank", s.kv_lora);
  md.set(a + "attention.key_length_mla", s.nope + s.rope);
  md.set(a + "attention.value_length_mla", s.v);
  md.set(a + "expert_shared_count", s.shared);
  md.set(a + "expert_weights_scale", s.scale);
  md.set(a + "expert_weights_norm", true);
  md.set(a + "rope.dimension_count", s.rope);
  md.set(a + "rope.scaling.type", "yarn");
  md.set(a + "rope.scaling.factor", s.yarn_factor);
  md.set(a + "rope.scaling.original_context_length", uint32_t{4096});
  md.set(a + "rope.scaling.yarn_log_multiplier", 0.1f);  // 0.1 * mscale_all_dim, as the converter writes it
  md.set("general.file_type", uint32_t{s.q4 ? 15u : 7u});  // MOSTLY_Q4_K_M / MOSTLY_Q8_0

  const TensorType dense = TensorType::kQ8_0;
  const TensorType expert = s.q4 ? TensorType::kQ4_K : TensorType::kQ8_0;
  const TensorType out = s.q4 ? TensorType::kQ6_K : TensorType::kQ8_0;
  const TensorType f32 = TensorType::kF32;
  Tensors t{w};
  // Hugging Face order (sorted), mapped: lm_head, embed_tokens, layers, norm.
  LATTICE_RETURN_IF_ERROR(t.add("output.weight", out, {b.dim, b.vocab}));
  LATTICE_RETURN_IF_ERROR(t.add("token_embd.weight", dense, {b.dim, b.vocab}));
  for (uint32_t l = 0; l < b.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_norm.weight", f32, {b.dim}));
    if (l < s.dense_layers) {
      LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_down.weight", dense, {b.ffn, b.dim}));
      LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_gate.weight", dense, {b.dim, b.ffn}));
      LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_up.weight", dense, {b.dim, b.ffn}));
    } else {
      LATTICE_RETURN_IF_ERROR(t.experts(p, expert, b));
      LATTICE_RETURN_IF_ERROR(t.add(p + "exp_probs_b.bias", f32, {b.experts}));
      LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_gate_inp.weight", f32, {b.dim, b.experts}));
      const uint64_t sh = uint64_t{s.shared} * b.expert_ffn;
      LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_down_shexp.weight", dense, {sh, b.dim}));
      LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_gate_shexp.weight", dense, {b.dim, sh}));
      LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_up_shexp.weight", dense, {b.dim, sh}));
    }
    LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_norm.weight", f32, {b.dim}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_kv_a_norm.weight", f32, {s.kv_lora}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_kv_a_mqa.weight", dense, {b.dim, s.kv_lora + s.rope}));
    // kv_b_proj split as the converter does: k_b transposed per head, v_b as is.
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_k_b.weight", dense, {s.nope, s.kv_lora, b.heads}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_v_b.weight", dense, {s.kv_lora, s.v, b.heads}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_output.weight", dense, {uint64_t{b.heads} * s.v, b.dim}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_q_a_norm.weight", f32, {s.q_lora}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_q_a.weight", dense, {b.dim, s.q_lora}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_q_b.weight", dense, {s.q_lora, uint64_t{b.heads} * (s.nope + s.rope)}));
  }
  return t.add("output_norm.weight", f32, {b.dim});
}

Status add_qwen3moe(GgufWriter& w, const MoeShape& s) {
  const MoeBase& b = s.b;
  set_base_keys(w.metadata(), "qwen3moe", b, s.kv_heads, 1e6f, s.head_dim, s.head_dim);
  w.metadata().set("general.file_type", uint32_t{7});  // MOSTLY_Q8_0
  const TensorType q8 = TensorType::kQ8_0, f32 = TensorType::kF32;
  Tensors t{w};
  const uint64_t qd = uint64_t{b.heads} * s.head_dim, kd = uint64_t{s.kv_heads} * s.head_dim;
  LATTICE_RETURN_IF_ERROR(t.add("output.weight", q8, {b.dim, b.vocab}));
  LATTICE_RETURN_IF_ERROR(t.add("token_embd.weight", q8, {b.dim, b.vocab}));
  for (uint32_t l = 0; l < b.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_norm.weight", f32, {b.dim}));
    LATTICE_RETURN_IF_ERROR(t.experts(p, q8, b));
    LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_gate_inp.weight", f32, {b.dim, b.experts}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "ffn_norm.weight", f32, {b.dim}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_k_norm.weight", f32, {s.head_dim}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_k.weight", q8, {b.dim, kd}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_output.weight", q8, {qd, b.dim}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_q_norm.weight", f32, {s.head_dim}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_q.weight", q8, {b.dim, qd}));
    LATTICE_RETURN_IF_ERROR(t.add(p + "attn_v.weight", q8, {b.dim, kd}));
  }
  return t.add("output_norm.weight", f32, {b.dim});
}

// Every preset, once: its name and its shape (the figures in the comment at the top).
struct Preset {
  const char* name;
  std::variant<MlaShape, MoeShape> shape;
};
const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"kimi-k2-thinking-q4",
       MlaShape{{"Kimi-K2-Thinking (shape only)", 61, 7168, 18432, 64, 384, 8, 2048, 163840, 262144},
                1, 1536, 512, 64, 128, 128, 1, 1, 1, 2.827f, 64.0f, true}},
      {"deepseek-v3.1-q8",
       MlaShape{{"DeepSeek-V3.1 (shape only)", 61, 7168, 18432, 128, 256, 8, 2048, 129280, 163840},
                3, 1536, 512, 64, 128, 128, 8, 4, 1, 2.5f, 40.0f, false}},
      {"qwen3-235b-a22b-q8", MoeShape{{"Qwen3-235B-A22B (shape only)", 94, 4096, 12288, 64, 128, 8, 1536, 151936, 40960}, 4, 128}},
  };
  return kPresets;
}

}  // namespace

std::vector<std::string> shape_only_presets() {
  std::vector<std::string> names;
  for (const Preset& p : presets()) names.push_back(p.name);
  return names;
}

Result<GgufWriter> shape_only_writer(const std::string& preset) {
  const auto& all = presets();
  const auto it = std::find_if(all.begin(), all.end(), [&](const Preset& p) { return preset == p.name; });
  if (it == all.end()) {
    std::string names;
    for (const auto& n : shape_only_presets()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgument("--preset '" + preset + "': expected one of " + names);
  }
  GgufWriter w;
  if (const auto* mla = std::get_if<MlaShape>(&it->shape)) LATTICE_RETURN_IF_ERROR(add_mla(w, *mla));
  else LATTICE_RETURN_IF_ERROR(add_qwen3moe(w, std::get<MoeShape>(it->shape)));
  w.metadata().set(kShapeOnlyKey, true);
  w.metadata().set("general.quantization_version", uint32_t{2});
  return w;
}

Result<MadeModel> write_shape_only(const std::string& preset, const std::string& path) {
  LATTICE_ASSIGN_OR_RETURN(GgufWriter w, shape_only_writer(preset));
  WriteOptions o;
  o.sparse_data = true;
  LATTICE_ASSIGN_OR_RETURN(std::vector<std::string> paths, w.write(path, {}, o));
  MadeModel m;
  m.paths = std::move(paths);
  for (const auto& t : w.tensors()) {
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    m.n_params += n;
    m.n_bytes += t.n_bytes;
  }
  return m;
}

Status check_has_weights(const GgufFile& file) {
  const Value* v = file.metadata().find(kShapeOnlyKey);
  const bool* b = v ? v->get_if<bool>() : nullptr;
  if (b && *b)
    return InvalidArgument("a shape-only GGUF (make-model --shape-only): it has the tensor table of '" +
                           file.metadata().get_string_or("general.name", "?").value_or("?") +
                           "' but no weights, so it can be planned (lattice plan) but not run");
  return Status::Ok();
}

}  // namespace lattice::engine
