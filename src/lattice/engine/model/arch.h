// The one table of model architectures the engine runs. Each architecture lives in its own
// file (llama.cc, qwen2.cc, qwen3.cc) as one ArchInfo: its hooks into the common decoder
// (which attention and FFN variant, which norms, how RoPE pairs components, the tensor names)
// and how its hyper-parameters are read. The loader (model.cc) and the forward pass
// (runtime/forward.cc) read these fields; nothing else in the engine names an architecture.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "lattice/core/status.h"
#include "lattice/engine/ops/ops.h"

namespace lattice::engine {

// Attention variants the forward pass implements.
enum class AttentionKind : uint8_t {
  kGqa,  // multi-head / grouped-query attention: per-head K and V in the cache
  kMla,  // multi-head latent attention (deepseek2): the cache holds the compressed latent
};
// FFN variants.
enum class FfnKind : uint8_t {
  kSwiGlu,  // down(silu(gate x) * up x)
};
// How a mixture-of-experts layer weighs its experts.
enum class RouterKind : uint8_t {
  kSoftmaxTopK,  // softmax over all experts, the top k chosen (lowest id on ties), optionally renormalized
  kGeneral,      // route_topk: softmax or sigmoid (expert_gating_func), selection bias, grouped top-k
};
// How router logits become expert probabilities ({arch}.expert_gating_func).
enum class ExpertGating : uint8_t {
  kSoftmax = 1,  // softmax over all experts
  kSigmoid = 2,  // sigmoid of each logit (DeepSeek-V3, Kimi K2)
};
// Whether a tensor family is in the file.
enum class Presence : uint8_t { kAbsent, kOptional, kRequired };

// GGUF tensor names of one block ("blk.N." + name + ".weight") and of the model.
struct TensorNames {
  std::string_view attn_norm = "attn_norm", wq = "attn_q", wk = "attn_k", wv = "attn_v", wo = "attn_output";
  std::string_view q_norm = "attn_q_norm", k_norm = "attn_k_norm";
  std::string_view ffn_norm = "ffn_norm", gate = "ffn_gate", up = "ffn_up", down = "ffn_down";
  std::string_view tok_embd = "token_embd", output_norm = "output_norm", output = "output";
  std::string_view rope_freqs = "rope_freqs";
  std::string_view gate_inp = "ffn_gate_inp", gate_exps = "ffn_gate_exps", up_exps = "ffn_up_exps",
                   down_exps = "ffn_down_exps";
  std::string_view gate_up_exps = "ffn_gate_up_exps", exp_probs_b = "exp_probs_b";
  std::string_view gate_shexp = "ffn_gate_shexp", up_shexp = "ffn_up_shexp", down_shexp = "ffn_down_shexp";
  // Multi-head latent attention.
  std::string_view wq_a = "attn_q_a", q_a_norm = "attn_q_a_norm", wq_b = "attn_q_b";
  std::string_view wkv_a = "attn_kv_a_mqa", kv_a_norm = "attn_kv_a_norm";
  std::string_view wk_b = "attn_k_b", wv_b = "attn_v_b", wkv_b = "attn_kv_b";
};

struct Hparams;
class Metadata;

struct ArchInfo {
  std::string_view name;   // general.architecture, and the prefix of its keys
  std::string_view notes;  // one line for `--help` and error messages
  // Hyper-parameters.
  float default_rope_freq_base = 10000.0f;  // when {arch}.rope.freq_base is absent
  bool head_dim_from_key_length = true;     // head size read from {arch}.attention.key_length
  // YaRN: llama.cpp's deepseek2 special case, mscale = yarn_log_multiplier when it is not 1.
  bool yarn_log_mul_is_mscale = false;
  // Hooks of the forward pass.
  AttentionKind attention = AttentionKind::kGqa;
  FfnKind ffn = FfnKind::kSwiGlu;
  ops::RopeLayout rope_layout = ops::RopeLayout::kNormal;  // how RoPE pairs components
  Presence qkv_bias = Presence::kOptional;  // attn_{q,k,v}.bias
  bool qk_norm = false;                     // per-head RMSNorm of q and k before RoPE
  // Mixture of experts: whether layers route tokens to experts ({arch}.expert_count > 0,
  // ffn_*_exps tensors; kOptional: dense files of the architecture have none), and how.
  Presence experts = Presence::kAbsent;
  RouterKind router = RouterKind::kSoftmaxTopK;
  bool expert_weights_norm = true;  // default of {arch}.expert_weights_norm
  TensorNames names;
  // Keys beyond the common ones (null: none), read after them into the same Hparams. Errors
  // name the key.
  Status (*read_hparams)(const Metadata& md, Hparams& h) = nullptr;
};

extern const ArchInfo kLlamaArch;
extern const ArchInfo kQwen2Arch;
extern const ArchInfo kQwen3Arch;
extern const ArchInfo kQwen3MoeArch;
extern const ArchInfo kDeepseek2Arch;

// All supported architectures, in the order they are listed to users.
std::span<const ArchInfo* const> supported_archs();
// nullptr if `name` is not supported.
const ArchInfo* find_arch(std::string_view name);
// "llama, qwen2, qwen3"
std::string supported_arch_names();

}  // namespace lattice::engine
