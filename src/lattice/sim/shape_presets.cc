// Built-in model shapes. Dimensions are from each model's published configuration (Hugging
// Face config.json / model card); bytes are computed from them at the quantization named:
//   8-bit (MLX, group 64 with a 16-bit scale and bias): 8.5 bits a weight; GGUF Q8_0 also 8.5.
//   4-bit (MLX group 32 / GGUF Q4_0, 16-bit scale): 4.5 bits.  BF16: 16 bits.
//
// qwen3-235b-a22b-q8   Qwen/Qwen3-235B-A22B config.json: 94 layers, hidden 4096, 64 query / 4 KV
//                      heads of 128, 128 experts (8 used) of width 1536, vocab 151936, no shared
//                      expert, no dense layer. All weights 8-bit (mlx-community/Qwen3-235B-A22B-8bit).
// deepseek-v3.1-q8     deepseek-ai/DeepSeek-V3.1 config.json: 61 layers (first 3 dense, width 18432),
//                      hidden 7168, 128 heads, MLA (q_lora 1536, kv_lora 512, qk nope 128 + rope 64,
//                      v 128), 256 experts (8 used) + 1 shared of width 2048, vocab 129280. 8-bit.
// deepseek-v3.1-q4     the same at MLX 4-bit (4.5 bits a weight, about 378 GB): the quantization
//                      that fits one 512 GB Mac Studio (docs/SIM.md, the published single-node run).
// kimi-k2-thinking-q4  moonshotai/Kimi-K2-Thinking config.json: as DeepSeek V3 but 64 heads, 384
//                      experts, 1 dense layer, vocab 163840. The release is natively INT4 (QAT,
//                      group 32) in the routed experts and BF16 elsewhere (model card: "native INT4",
//                      about 594 GB): experts 4.5 bits, the rest 16.
// llama-1.1b-q4        this repository's bench shape (docs/BENCHMARKS.md, ANCHORS.md): dim 2048,
//                      22 layers, 32/4 heads, FFN 5632, vocab 32000, Q4_0 (embedding Q4_0, output Q6_K
//                      ~6.56 bits in make-model's files; modelled as Q4_0 everywhere but the output).
// qwen3moe-bench-q4    the mixture-of-experts bench shape (ANCHORS.md): dim 2048, 24 layers, 32/4
//                      heads of 128, 32 experts (8 used) of width 512, vocab 32000, Q4_0.
#include <map>

#include "lattice/sim/shape.h"

namespace lattice::sim {
namespace {

struct Dims {
  const char* arch;
  uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_vocab, n_ff;
  uint32_t n_dense, n_expert, n_used, n_shared, n_ff_exp;
  // MLA (0: GQA)
  uint32_t q_lora, kv_lora, qk_nope, qk_rope, v_dim;
  double bits_expert, bits_other, bits_output;
  const char* source;
};

ModelShape from_dims(const std::string& name, const Dims& d) {
  ModelShape s;
  s.name = name;
  s.arch = d.arch;
  s.source = d.source;
  s.n_layer = d.n_layer;
  s.n_embd = d.n_embd;
  s.n_head = d.n_head;
  s.n_head_kv = d.n_head_kv;
  s.head_dim = d.head_dim;
  s.n_vocab = d.n_vocab;
  s.n_ff = d.n_ff;
  s.n_dense_layers = d.n_dense;
  s.n_expert = d.n_expert;
  s.n_expert_used = d.n_used;
  s.n_expert_shared = d.n_shared;
  s.n_ff_exp = d.n_ff_exp;
  s.kv_lora_rank = d.kv_lora;
  s.rope_dim = d.kv_lora ? d.qk_rope : 0;
  s.v_head_dim = d.kv_lora ? d.v_dim : d.head_dim;
  const double E = d.n_embd, B = d.bits_other / 8, BE = d.bits_expert / 8;
  double attn;  // parameters per layer
  if (d.kv_lora) {
    const double hq = double(d.qk_nope) + d.qk_rope;
    attn = E * d.q_lora + double(d.q_lora) * d.n_head * hq + E * (double(d.kv_lora) + d.qk_rope) +
           double(d.kv_lora) * d.n_head * (double(d.qk_nope) + d.v_dim) + double(d.n_head) * d.v_dim * E;
  } else {
    attn = 2 * E * d.n_head * d.head_dim + 2 * E * d.n_head_kv * d.head_dim;
  }
  s.attn_bytes = d.n_layer * (attn * B + 2 * E * 4);  // + two f32 norms a layer
  if (d.kv_lora)  // the latent projections and their two norms
    s.attn_latent_bytes = d.n_layer * ((E * d.q_lora + E * (double(d.kv_lora) + d.qk_rope)) * B +
                                       (double(d.q_lora) + d.kv_lora) * 4);
  const uint32_t n_moe = d.n_expert ? d.n_layer - d.n_dense : 0;
  const uint32_t n_dense = d.n_expert ? d.n_dense : d.n_layer;
  s.dense_ffn_bytes = n_dense * 3.0 * E * d.n_ff * B;
  s.expert_bytes = n_moe * double(d.n_expert) * 3.0 * E * d.n_ff_exp * BE;
  s.shared_bytes = n_moe * double(d.n_shared) * 3.0 * E * d.n_ff_exp * B;
  s.router_bytes = n_moe * double(d.n_expert) * E * 4;  // routers are kept in f32 / bf16: 4 is the upper
  s.embd_bytes = double(d.n_vocab) * E * B;
  s.output_bytes = double(d.n_vocab) * E * d.bits_output / 8;
  const double params = s.total_bytes() - d.n_layer * 2 * E * 4;
  s.bits_per_weight = 8.0 * params /
                      (d.n_layer * attn + n_dense * 3.0 * E * d.n_ff + n_moe * (d.n_expert + d.n_shared) * 3.0 * E * d.n_ff_exp +
                       n_moe * double(d.n_expert) * E + 2.0 * d.n_vocab * E);
  return s;
}

const std::map<std::string, Dims>& table() {
  static const std::map<std::string, Dims> t = {
      {"qwen3-235b-a22b-q8",
       {"qwen3moe", 94, 4096, 64, 4, 128, 151936, 12288, 0, 128, 8, 0, 1536, 0, 0, 0, 0, 0, 8.5, 8.5, 8.5,
        "Qwen/Qwen3-235B-A22B config.json; 8-bit as mlx-community/Qwen3-235B-A22B-8bit"}},
      {"deepseek-v3.1-q8",
       {"deepseek2", 61, 7168, 128, 128, 192, 129280, 18432, 3, 256, 8, 1, 2048, 1536, 512, 128, 64, 128, 8.5, 8.5,
        8.5, "deepseek-ai/DeepSeek-V3.1 config.json; 8-bit"}},
      {"deepseek-v3.1-q4",
       {"deepseek2", 61, 7168, 128, 128, 192, 129280, 18432, 3, 256, 8, 1, 2048, 1536, 512, 128, 64, 128, 4.5, 4.5,
        4.5, "deepseek-ai/DeepSeek-V3.1 config.json; 4-bit"}},
      {"kimi-k2-thinking-q4",
       {"deepseek2", 61, 7168, 64, 64, 192, 163840, 18432, 1, 384, 8, 1, 2048, 1536, 512, 128, 64, 128, 4.5, 16, 16,
        "moonshotai/Kimi-K2-Thinking config.json and model card (native INT4 experts, BF16 elsewhere)"}},
      {"llama-1.1b-q4",
       {"llama", 22, 2048, 32, 4, 64, 32000, 5632, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4.5, 4.5, 6.5625,
        "lattice bench shape (ANCHORS.md: dim 2048, 22 layers, 32/4 heads, vocab 32000, Q4_0)"}},
      {"qwen3moe-bench-q4",
       {"qwen3moe", 24, 2048, 32, 4, 128, 32000, 6144, 0, 32, 8, 0, 512, 0, 0, 0, 0, 0, 4.5, 4.5, 6.5625,
        "lattice bench MoE shape (ANCHORS.md: dim 2048, 24 layers, 32 experts, 8 used, width 512, Q4_0)"}},
  };
  return t;
}

}  // namespace

std::vector<std::string> shape_preset_names() {
  std::vector<std::string> v;
  for (const auto& [k, d] : table()) v.push_back(k);
  return v;
}

Result<ModelShape> shape_preset(const std::string& name) {
  auto it = table().find(name);
  if (it == table().end()) {
    std::string all;
    for (const auto& n : shape_preset_names()) all += (all.empty() ? "" : ", ") + n;
    return NotFound("no model preset '" + name + "' (presets: " + all + ")");
  }
  return from_dims(name, it->second);
}

}  // namespace lattice::sim
