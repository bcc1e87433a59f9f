// Generated models: a valid GGUF of a chosen architecture and shape with random weights of
// sensible scale and a working tokenizer, loadable by llama.cpp. Tests and benchmarks use it
// because model hubs are out of reach.
//
// Weights: normal-like with std 1/sqrt(fan_in) for projections, 1/sqrt(dim) for the token
// embedding, norms near 1, small biases; deterministic in --seed (and independent of the
// thread count: every row has its own generator). Norms and biases are always F32; for
// quantized types the output projection (or the tied embedding) is Q6_K and mixed types
// follow llama.cpp's Q4_K_M/Q5_K_M rules unless `pure`.
//
// Thread safety: make_model is reentrant. It blocks until the file is written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/gguf/gguf.h"

namespace lattice::engine {

struct MakeModelOptions {
  std::string arch = "llama";  // llama | qwen2 | qwen3 | qwen3moe | deepseek2 (llama with experts: Mixtral)
  uint32_t dim = 256;          // embedding length
  uint32_t layers = 2;
  uint32_t heads = 4;
  uint32_t kv_heads = 0;       // 0: same as heads
  uint32_t head_dim = 0;       // 0: dim / heads
  uint32_t ffn = 0;            // 0: a multiple of 32 near 8/3 * dim
  uint32_t vocab = 512;
  // Mixture of experts: experts per layer (0: a dense FFN; qwen3moe needs some), how many a
  // token uses, and each expert's FFN width (0: --ffn). Written as llama.cpp's converters do:
  // ffn_gate_inp [dim, experts] (F32), ffn_{gate,up}_exps [dim, expert_ffn, experts],
  // ffn_down_exps [expert_ffn, dim, experts], and the {arch}.expert_* keys.
  uint32_t experts = 0;
  uint32_t experts_used = 0;
  uint32_t expert_ffn = 0;
  // deepseek2 (multi-head latent attention; needs --experts unless every layer is dense):
  // q_lora 0 writes a plain attn_q; kv_lora the cached latent; rope / nope / v the per-head
  // sizes (v 0: nope); expert groups (0: none) and the groups a token may use; shared experts
  // of expert_ffn each; the first dense_layers blocks have a dense FFN of --ffn. fused_kv_b
  // writes the older attn_kv_b instead of attn_k_b + attn_v_b; fused_gate_up writes
  // ffn_gate_up_exps instead of ffn_gate_exps + ffn_up_exps. With --rope-scale, YaRN keys
  // (original context = ctx / scale, yarn_log_multiplier = 0.1 * yarn_mscale_all_dim, as the
  // converter writes it).
  uint32_t q_lora = 0, kv_lora = 64, rope_dim = 16, nope_dim = 32, v_dim = 0;
  uint32_t expert_groups = 0, groups_used = 0, shared_experts = 1, dense_layers = 1;
  bool fused_kv_b = false, fused_gate_up = false;
  float expert_weights_scale = 2.5f;
  float yarn_mscale_all_dim = 0.707f;
  uint32_t context_length = 2048;
  std::string type = "f16";    // f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m
  bool pure = false;           // every weight matrix in `type` (no Q6_K output, no mixing)
  uint64_t seed = 1;
  bool tied = false;           // no output.weight: the output reuses token_embd
  std::string tokenizer;       // "" (llama: "llama"; qwen: "gpt2"), "llama" or "gpt2"
  float rope_theta = 0;        // 0: 10000 for llama, 1e6 for qwen
  float rms_eps = 0;           // 0: 1e-5 for llama, 1e-6 for qwen
  float rope_scale = 0;        // > 0: linear RoPE scaling by this factor (rope.scaling.* keys)
  std::string name;            // general.name; "" = "lattice-random-<arch>"
  uint32_t version = 3;        // GGUF version (2 or 3)
  uint32_t max_tensors_per_file = 0;  // > 0: write a split set
  uint64_t max_bytes_per_file = 0;    // > 0: write a split set, files of at most this much tensor data
  unsigned threads = 0;        // 0: hardware concurrency
};

struct MadeModel {
  std::vector<std::string> paths;  // one, or the files of the split set
  uint64_t n_params = 0;
  uint64_t n_bytes = 0;            // tensor data
};

// Checks the options (kInvalidArgument naming the flag) and writes the model.
Result<MadeModel> make_model(const MakeModelOptions& options, const std::string& path);

// The writer with metadata and tensor table filled in, and the fill function that makes the
// weights (for callers that want the bytes in memory, e.g. tests).
struct ModelPlan {
  GgufWriter writer;
  GgufWriter::FillFn fill;
  uint64_t n_params = 0;
};
Result<ModelPlan> plan_model(const MakeModelOptions& options);

}  // namespace lattice::engine
