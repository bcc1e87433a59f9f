// Generated models (see make_model.h).
#include "lattice/engine/gguf/make_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>

#include "lattice/engine/gguf/vocab_gen.h"
#include "lattice/engine/quant/quantize.h"

namespace lattice::engine {

namespace {

struct TypeChoice {
  TensorType base = TensorType::kF16;
  bool quantized = false;
  bool mix = false;  // Q4_K_M / Q5_K_M: attn_v and ffn_down of some layers in Q6_K
  uint32_t file_type = 1;  // general.file_type (llama_ftype numbering)
};

Result<TypeChoice> parse_model_type(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  struct Row {
    const char* name;
    TypeChoice c;
  };
  static const Row kRows[] = {
      {"f32", {TensorType::kF32, false, false, 0}},     {"f16", {TensorType::kF16, false, false, 1}},
      {"bf16", {TensorType::kBF16, false, false, 32}},  {"q8_0", {TensorType::kQ8_0, true, false, 7}},
      {"q4_0", {TensorType::kQ4_0, true, false, 2}},    {"q4_k", {TensorType::kQ4_K, true, false, 14}},
      {"q4_k_s", {TensorType::kQ4_K, true, false, 14}}, {"q4_k_m", {TensorType::kQ4_K, true, true, 15}},
      {"q5_k", {TensorType::kQ5_K, true, false, 16}},   {"q5_k_s", {TensorType::kQ5_K, true, false, 16}},
      {"q5_k_m", {TensorType::kQ5_K, true, true, 17}},  {"q6_k", {TensorType::kQ6_K, true, false, 18}},
  };
  for (const Row& r : kRows)
    if (s == r.name) return r.c;
  return InvalidArgument("--type '" + std::string(name) +
                         "': expected one of f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m");
}

// llama.cpp's choice of layers that get more bits in the mixed K-quant types.
bool use_more_bits(uint32_t layer, uint32_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

enum class Role { kEmbedding, kOutput, kNorm, kBias, kAttnQ, kAttnK, kAttnV, kAttnOut, kFfnGate, kFfnUp, kFfnDown };

struct Gen {
  Role role;
  float mean;
  float std;
};

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One row of values: a sum of four 16-bit uniforms (Irwin-Hall), scaled to unit variance;
// close enough to normal for weights, and one 64-bit draw per element.
void generate_row(uint64_t state, float mean, float std, float* out, size_t n) {
  const float scale = std * std::sqrt(3.0f) / 65536.0f;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t u = splitmix(state);
    const float s = static_cast<float>((u & 0xffff) + ((u >> 16) & 0xffff) + ((u >> 32) & 0xffff) + (u >> 48));
    out[i] = mean + (s - 2.0f * 65536.0f) * scale;
  }
}

struct Shape {
  std::string arch;
  uint32_t dim, layers, heads, kv_heads, head_dim, ffn, vocab;
  uint32_t experts, experts_used, expert_ffn;
};

Status check_options(const MakeModelOptions& o, Shape& s) {
  if (o.arch != "llama" && o.arch != "qwen2" && o.arch != "qwen3" && o.arch != "qwen3moe" && o.arch != "deepseek2")
    return InvalidArgument("--arch '" + o.arch + "': expected llama, qwen2, qwen3, qwen3moe or deepseek2");
  if (o.arch == "qwen3moe" && o.experts == 0) return InvalidArgument("--experts: qwen3moe needs experts");
  if (o.experts > 0 && o.arch != "llama" && o.arch != "qwen3moe" && o.arch != "deepseek2")
    return InvalidArgument("--experts: only llama (Mixtral), qwen3moe and deepseek2 have experts");
  if (o.arch == "deepseek2") {
    if (o.dense_layers > o.layers) return InvalidArgument("--dense-layers must be at most --layers");
    if (o.experts == 0 && o.dense_layers < o.layers)
      return InvalidArgument("--experts: deepseek2 needs experts unless --dense-layers is --layers");
    if (o.kv_lora == 0 || o.kv_lora > 8192) return InvalidArgument("--kv-lora must be 1 to 8192");
    if (o.rope_dim == 0 || o.rope_dim % 2 != 0 || o.rope_dim > 1024) return InvalidArgument("--rope-dim must be even, 2 to 1024");
    if (o.nope_dim == 0 || o.nope_dim > 1024) return InvalidArgument("--nope-dim must be 1 to 1024");
    if (o.v_dim > 1024) return InvalidArgument("--v-dim must be at most 1024");
    if (o.expert_groups > 1 && (o.experts % o.expert_groups != 0 || o.groups_used == 0 ||
                                o.groups_used >= o.expert_groups ||
                                o.groups_used * (o.experts / o.expert_groups) < o.experts_used))
      return InvalidArgument("--expert-groups must divide --experts, and --groups-used (1 to groups - 1) hold "
                             "at least --experts-used experts");
  }
  if (o.experts > 4096) return InvalidArgument("--experts must be at most 4096");
  if (o.experts > 0 && (o.experts_used == 0 || o.experts_used > o.experts))
    return InvalidArgument("--experts-used must be 1 to --experts");
  if (o.dim == 0 || o.dim > (1u << 16)) return InvalidArgument("--dim must be 1 to 65536");
  if (o.layers == 0 || o.layers > 1024) return InvalidArgument("--layers must be 1 to 1024");
  if (o.heads == 0 || o.heads > o.dim) return InvalidArgument("--heads must be 1 to --dim");
  const uint32_t kv = o.kv_heads ? o.kv_heads : o.heads;
  if (o.heads % kv != 0) return InvalidArgument("--kv-heads must divide --heads");
  if (o.head_dim == 0 && o.dim % o.heads != 0)
    return InvalidArgument("--dim must be a multiple of --heads (or give --head-dim)");
  const uint32_t hd = o.head_dim ? o.head_dim : o.dim / o.heads;
  if (hd % 2 != 0) return InvalidArgument("head dimension " + std::to_string(hd) + " must be even (RoPE)");
  if (o.arch == "llama" && o.head_dim && o.head_dim * o.heads != o.dim)
    return InvalidArgument("--head-dim: llama needs heads * head_dim == dim");
  uint32_t ffn = o.ffn;
  if (ffn == 0) {
    const uint32_t m = o.dim >= 256 ? 256 : 32;
    ffn = (8 * o.dim / 3 + m - 1) / m * m;
  }
  if (ffn > (1u << 20)) return InvalidArgument("--ffn must be at most 1048576");
  if (o.vocab > (1u << 22)) return InvalidArgument("--vocab must be at most 4194304");
  if (o.context_length == 0) return InvalidArgument("--ctx must be positive");
  if (o.version != 2 && o.version != 3) return InvalidArgument("--gguf-version must be 2 or 3");
  if (o.rope_scale < 0 || !std::isfinite(o.rope_scale)) return InvalidArgument("--rope-scale must be positive");
  const uint32_t eff = o.experts ? (o.expert_ffn ? o.expert_ffn : ffn) : 0;
  if (eff > (1u << 20)) return InvalidArgument("--expert-ffn must be at most 1048576");
  // A llama (Mixtral) file has one width, feed_forward_length, and every layer's FFN is its
  // experts: no key says another width, so a reader would take the experts for ffn wide.
  if (o.arch == "llama" && o.experts) {
    if (o.ffn && o.expert_ffn && o.ffn != o.expert_ffn)
      return InvalidArgument("--expert-ffn: a llama (Mixtral) mixture of experts has one FFN width; give --ffn or "
                             "--expert-ffn, or the same value to both");
    ffn = eff;
  }
  s = {o.arch, o.dim, o.layers, o.heads, kv, hd, ffn, o.vocab, o.experts, o.experts_used, eff};
  return Status::Ok();
}

}  // namespace

Result<ModelPlan> plan_model(const MakeModelOptions& o) {
  Shape s;
  LATTICE_RETURN_IF_ERROR(check_options(o, s));
  LATTICE_ASSIGN_OR_RETURN(TypeChoice tc, parse_model_type(o.type));
  const bool qwen = s.arch != "llama";
  const bool ds = s.arch == "deepseek2";
  std::string tok = o.tokenizer.empty() ? (qwen ? "gpt2" : "llama") : o.tokenizer;
  if (tok != "llama" && tok != "gpt2") return InvalidArgument("--tokenizer '" + tok + "': expected llama or gpt2");
  const ChatStyle style = qwen ? ChatStyle::kChatML : (tok == "gpt2" ? ChatStyle::kLlama3 : ChatStyle::kLlama2);
  auto vocab_r = generate_vocab(tok, style, s.vocab);
  if (!vocab_r.ok()) return vocab_r.status().with_context("--vocab");
  GeneratedVocab& v = *vocab_r;

  ModelPlan plan;
  GgufWriter& w = plan.writer;
  Metadata& md = w.metadata();
  const std::string& a = s.arch;
  md.set("general.architecture", a);
  md.set("general.name", o.name.empty() ? "lattice-random-" + a : o.name);
  md.set("general.file_type", tc.file_type);
  md.set("general.quantization_version", uint32_t{2});
  md.set(a + ".vocab_size", s.vocab);
  md.set(a + ".context_length", o.context_length);
  md.set(a + ".embedding_length", s.dim);
  md.set(a + ".block_count", s.layers);
  md.set(a + ".feed_forward_length", s.ffn);
  md.set(a + ".attention.head_count", s.heads);
  const uint32_t v_dim = o.v_dim ? o.v_dim : o.nope_dim;
  // deepseek2's converter writes MLA as one KV head (the latent); the older kv_b form as MHA.
  md.set(a + ".attention.head_count_kv", ds ? (o.fused_kv_b ? s.heads : 1u) : s.kv_heads);
  md.set(a + ".attention.layer_norm_rms_epsilon", o.rms_eps > 0 ? o.rms_eps : (qwen ? 1e-6f : 1e-5f));
  md.set(a + ".rope.freq_base", o.rope_theta > 0 ? o.rope_theta : (qwen && !ds ? 1e6f : 1e4f));
  md.set(a + ".rope.dimension_count", ds ? o.rope_dim : s.head_dim);
  if (o.rope_scale > 0 && ds) {
    md.set(a + ".rope.scaling.type", "yarn");
    md.set(a + ".rope.scaling.factor", o.rope_scale);
    md.set(a + ".rope.scaling.original_context_length",
           std::max<uint32_t>(1, static_cast<uint32_t>(o.context_length / o.rope_scale)));
    md.set(a + ".rope.scaling.yarn_log_multiplier", 0.1f * o.yarn_mscale_all_dim);
  } else if (o.rope_scale > 0) {
    md.set(a + ".rope.scaling.type", "linear");
    md.set(a + ".rope.scaling.factor", o.rope_scale);
    md.set(a + ".rope.scaling.original_context_length", o.context_length);
  }
  const bool qk_norm = a == "qwen3" || a == "qwen3moe";
  if (s.experts) {
    md.set(a + ".expert_count", s.experts);
    md.set(a + ".expert_used_count", s.experts_used);
    if (a == "qwen3moe") md.set(a + ".expert_feed_forward_length", s.expert_ffn);
  }
  if (ds) {
    md.set(a + ".leading_dense_block_count", o.dense_layers);
    md.set(a + ".attention.q_lora_rank", o.q_lora);  // llama.cpp wants it (0: plain attn_q) but in "lite" shapes
    md.set(a + ".attention.kv_lora_rank", o.kv_lora);
    if (o.fused_kv_b) {
      md.set(a + ".attention.key_length", o.nope_dim + o.rope_dim);
      md.set(a + ".attention.value_length", v_dim);
    } else {
      md.set(a + ".attention.key_length", o.kv_lora + o.rope_dim);
      md.set(a + ".attention.value_length", o.kv_lora);
      md.set(a + ".attention.key_length_mla", o.nope_dim + o.rope_dim);
      md.set(a + ".attention.value_length_mla", v_dim);
    }
    // The converter writes these two even for a dense model (llama.cpp requires them).
    md.set(a + ".expert_feed_forward_length", s.experts ? s.expert_ffn : s.ffn);
    md.set(a + ".expert_shared_count", s.experts ? o.shared_experts : 0u);
    if (s.experts) {
      md.set(a + ".expert_weights_scale", o.expert_weights_scale);
      md.set(a + ".expert_weights_norm", true);
      md.set(a + ".expert_gating_func", uint32_t{2});  // sigmoid
      if (o.expert_groups > 1) {
        md.set(a + ".expert_group_count", o.expert_groups);
        md.set(a + ".expert_group_used_count", o.groups_used);
      }
    }
  } else if (qk_norm || s.head_dim * s.heads != s.dim) {
    md.set(a + ".attention.key_length", s.head_dim);
    md.set(a + ".attention.value_length", s.head_dim);
  }
  md.set("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) md.set("tokenizer.ggml.pre", v.pre);
  md.set("tokenizer.ggml.tokens", std::move(v.tokens));
  md.set("tokenizer.ggml.scores", std::move(v.scores));
  md.set("tokenizer.ggml.token_type", std::move(v.token_types));
  if (!v.merges.empty()) md.set("tokenizer.ggml.merges", std::move(v.merges));
  md.set("tokenizer.ggml.bos_token_id", v.bos_id);
  md.set("tokenizer.ggml.eos_token_id", v.eos_id);
  if (v.unk_id) md.set("tokenizer.ggml.unknown_token_id", *v.unk_id);
  if (v.pad_id) md.set("tokenizer.ggml.padding_token_id", *v.pad_id);
  md.set("tokenizer.ggml.add_bos_token", v.add_bos);
  md.set("tokenizer.ggml.add_eos_token", v.add_eos);
  md.set("tokenizer.chat_template", std::move(v.chat_template));

  // Weight type per matrix: llama.cpp's habits unless --pure (see make_model.h).
  auto pick = [&](Role role, uint32_t layer, uint64_t ne0) {
    TensorType t = tc.base;
    if (tc.quantized && !o.pure) {
      if (role == Role::kOutput || (role == Role::kEmbedding && o.tied)) {
        if (t != TensorType::kQ8_0) t = TensorType::kQ6_K;
      } else if (tc.mix && (role == Role::kAttnV || role == Role::kFfnDown) && use_more_bits(layer, s.layers)) {
        t = TensorType::kQ6_K;
      }
    }
    auto tr = type_traits(static_cast<uint32_t>(t));
    if (ne0 % tr->block_elems != 0) t = ne0 % 32 == 0 ? TensorType::kQ8_0 : TensorType::kF16;
    return t;
  };
  auto gens = std::make_shared<std::vector<Gen>>();
  Status st;
  auto matrix = [&](const std::string& name, Role role, uint32_t layer, uint64_t n_in, uint64_t n_out, float std) {
    if (!st.ok()) return;
    st = w.add_tensor(name, pick(role, layer, n_in), {n_in, n_out});
    gens->push_back({role, 0.0f, std});
  };
  auto expert_matrix = [&](const std::string& name, Role role, uint32_t layer, uint64_t n_in, uint64_t n_out,
                           float std) {
    if (!st.ok()) return;
    st = w.add_tensor(name, pick(role, layer, n_in), {n_in, n_out, s.experts});
    gens->push_back({role, 0.0f, std});
  };
  auto vec = [&](const std::string& name, Role role, uint64_t n, float mean, float std) {
    if (!st.ok()) return;
    st = w.add_tensor(name, TensorType::kF32, {n});
    gens->push_back({role, mean, std});
  };
  const float inv_dim = 1.0f / std::sqrt(static_cast<float>(s.dim));
  const uint64_t q_dim = uint64_t{s.heads} * s.head_dim, kv_dim = uint64_t{s.kv_heads} * s.head_dim;
  matrix("token_embd.weight", Role::kEmbedding, 0, s.dim, s.vocab, inv_dim);
  vec("output_norm.weight", Role::kNorm, s.dim, 1.0f, 0.05f);
  if (!o.tied) matrix("output.weight", Role::kOutput, 0, s.dim, s.vocab, inv_dim);
  auto tensor3 = [&](const std::string& name, Role role, uint32_t layer, uint64_t n_in, uint64_t n_out, uint64_t n3,
                     float std) {
    if (!st.ok()) return;
    st = w.add_tensor(name, pick(role, layer, n_in), {n_in, n_out, n3});
    gens->push_back({role, 0.0f, std});
  };
  for (uint32_t l = 0; l < s.layers && ds; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const uint64_t H = s.heads, KD = o.nope_dim + o.rope_dim, C = o.kv_lora;
    const auto inv = [](uint64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
    vec(b + "attn_norm.weight", Role::kNorm, s.dim, 1.0f, 0.05f);
    if (o.q_lora) {
      matrix(b + "attn_q_a.weight", Role::kAttnQ, l, s.dim, o.q_lora, inv_dim);
      vec(b + "attn_q_a_norm.weight", Role::kNorm, o.q_lora, 1.0f, 0.05f);
      matrix(b + "attn_q_b.weight", Role::kAttnQ, l, o.q_lora, H * KD, inv(o.q_lora));
    } else {
      matrix(b + "attn_q.weight", Role::kAttnQ, l, s.dim, H * KD, inv_dim);
    }
    matrix(b + "attn_kv_a_mqa.weight", Role::kAttnK, l, s.dim, C + o.rope_dim, inv_dim);
    vec(b + "attn_kv_a_norm.weight", Role::kNorm, C, 1.0f, 0.05f);
    if (o.fused_kv_b) {
      matrix(b + "attn_kv_b.weight", Role::kAttnV, l, C, H * (o.nope_dim + v_dim), inv(C));
    } else {
      tensor3(b + "attn_k_b.weight", Role::kAttnK, l, o.nope_dim, C, H, inv(C));
      tensor3(b + "attn_v_b.weight", Role::kAttnV, l, C, v_dim, H, inv(C));
    }
    matrix(b + "attn_output.weight", Role::kAttnOut, l, H * v_dim, s.dim, inv(H * v_dim));
    vec(b + "ffn_norm.weight", Role::kNorm, s.dim, 1.0f, 0.05f);
    if (l < o.dense_layers) {
      matrix(b + "ffn_gate.weight", Role::kFfnGate, l, s.dim, s.ffn, inv_dim);
      matrix(b + "ffn_up.weight", Role::kFfnUp, l, s.dim, s.ffn, inv_dim);
      matrix(b + "ffn_down.weight", Role::kFfnDown, l, s.ffn, s.dim, inv(s.ffn));
      continue;
    }
    const uint64_t X = s.experts, F = s.expert_ffn, FS = uint64_t{s.expert_ffn} * o.shared_experts;
    if (st.ok()) st = w.add_tensor(b + "ffn_gate_inp.weight", TensorType::kF32, {s.dim, X});
    gens->push_back({Role::kFfnGate, 0.0f, 4.0f * inv_dim});
    vec(b + "exp_probs_b.bias", Role::kBias, X, 0.0f, 0.05f);
    if (o.fused_gate_up) {
      tensor3(b + "ffn_gate_up_exps.weight", Role::kFfnGate, l, s.dim, 2 * F, X, inv_dim);
    } else {
      tensor3(b + "ffn_gate_exps.weight", Role::kFfnGate, l, s.dim, F, X, inv_dim);
      tensor3(b + "ffn_up_exps.weight", Role::kFfnUp, l, s.dim, F, X, inv_dim);
    }
    tensor3(b + "ffn_down_exps.weight", Role::kFfnDown, l, F, s.dim, X, inv(F));
    if (FS) {
      matrix(b + "ffn_gate_shexp.weight", Role::kFfnGate, l, s.dim, FS, inv_dim);
      matrix(b + "ffn_up_shexp.weight", Role::kFfnUp, l, s.dim, FS, inv_dim);
      matrix(b + "ffn_down_shexp.weight", Role::kFfnDown, l, FS, s.dim, inv(FS));
    }
  }
  for (uint32_t l = 0; l < s.layers && !ds; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    vec(b + "attn_norm.weight", Role::kNorm, s.dim, 1.0f, 0.05f);
    matrix(b + "attn_q.weight", Role::kAttnQ, l, s.dim, q_dim, inv_dim);
    matrix(b + "attn_k.weight", Role::kAttnK, l, s.dim, kv_dim, inv_dim);
    matrix(b + "attn_v.weight", Role::kAttnV, l, s.dim, kv_dim, inv_dim);
    if (a == "qwen2") {
      vec(b + "attn_q.bias", Role::kBias, q_dim, 0.0f, 0.02f);
      vec(b + "attn_k.bias", Role::kBias, kv_dim, 0.0f, 0.02f);
      vec(b + "attn_v.bias", Role::kBias, kv_dim, 0.0f, 0.02f);
    }
    if (qk_norm) {
      vec(b + "attn_q_norm.weight", Role::kNorm, s.head_dim, 1.0f, 0.05f);
      vec(b + "attn_k_norm.weight", Role::kNorm, s.head_dim, 1.0f, 0.05f);
    }
    matrix(b + "attn_output.weight", Role::kAttnOut, l, q_dim, s.dim, 1.0f / std::sqrt(static_cast<float>(q_dim)));
    vec(b + "ffn_norm.weight", Role::kNorm, s.dim, 1.0f, 0.05f);
    if (s.experts) {
      // The router stays F32, as llama.cpp's quantizer leaves it; a larger spread than the
      // projections' so that the choice of experts is not a near-tie everywhere.
      if (st.ok()) st = w.add_tensor(b + "ffn_gate_inp.weight", TensorType::kF32, {s.dim, s.experts});
      gens->push_back({Role::kFfnGate, 0.0f, 4.0f * inv_dim});
      expert_matrix(b + "ffn_gate_exps.weight", Role::kFfnGate, l, s.dim, s.expert_ffn, inv_dim);
      expert_matrix(b + "ffn_up_exps.weight", Role::kFfnUp, l, s.dim, s.expert_ffn, inv_dim);
      expert_matrix(b + "ffn_down_exps.weight", Role::kFfnDown, l, s.expert_ffn, s.dim,
                    1.0f / std::sqrt(static_cast<float>(s.expert_ffn)));
    } else {
      matrix(b + "ffn_gate.weight", Role::kFfnGate, l, s.dim, s.ffn, inv_dim);
      matrix(b + "ffn_up.weight", Role::kFfnUp, l, s.dim, s.ffn, inv_dim);
      matrix(b + "ffn_down.weight", Role::kFfnDown, l, s.ffn, s.dim, 1.0f / std::sqrt(static_cast<float>(s.ffn)));
    }
  }
  if (!st.ok()) return st.with_context("make-model");
  for (const auto& t : w.tensors()) {
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    plan.n_params += n;
  }

  const uint64_t seed = o.seed;
  const unsigned n_threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  plan.fill = [gens, seed, n_threads](size_t index, const TensorSpec& spec, std::span<std::byte> out) -> Status {
    const Gen g = (*gens)[index];
    const uint64_t ne0 = spec.ne[0];
    uint64_t n_rows = 1;
    for (size_t d = 1; d < spec.ne.size(); ++d) n_rows *= spec.ne[d];
    const size_t rb = static_cast<size_t>(spec.n_bytes / n_rows);
    uint64_t seed_state = seed ^ fnv1a(spec.name);
    const uint64_t base = splitmix(seed_state);
    std::atomic<uint64_t> next_row{0};
    std::atomic<bool> failed{false};
    Status first_error;
    std::mutex mu;
    auto work = [&] {
      std::vector<float> row(static_cast<size_t>(ne0));
      constexpr uint64_t kChunk = 16;
      for (;;) {
        const uint64_t r0 = next_row.fetch_add(kChunk);
        if (r0 >= n_rows || failed.load()) return;
        for (uint64_t r = r0; r < std::min(n_rows, r0 + kChunk); ++r) {
          uint64_t rs = base ^ (r * 0xd1b54a32d192ed03ull);
          generate_row(splitmix(rs), g.mean, g.std, row.data(), row.size());
          Status s = quantize_row(spec.type, row.data(), out.data() + r * rb, row.size());
          if (!s.ok()) {
            std::lock_guard lock(mu);
            if (!failed.exchange(true)) first_error = s.with_context("tensor '" + spec.name + "'");
            return;
          }
        }
      }
    };
    const uint64_t n_elems = n_rows * ne0;
    const unsigned t = n_elems < (1u << 16) ? 1 : std::min<unsigned>(n_threads, static_cast<unsigned>((n_rows + 15) / 16));
    std::vector<std::thread> pool;
    for (unsigned i = 1; i < t; ++i) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
    return failed ? first_error : Status::Ok();
  };
  return plan;
}

Result<MadeModel> make_model(const MakeModelOptions& options, const std::string& path) {
  LATTICE_ASSIGN_OR_RETURN(ModelPlan plan, plan_model(options));
  WriteOptions wo;
  wo.version = options.version;
  wo.max_tensors_per_file = options.max_tensors_per_file;
  wo.max_bytes_per_file = options.max_bytes_per_file;
  MadeModel out;
  LATTICE_ASSIGN_OR_RETURN(out.paths, plan.writer.write(path, plan.fill, wo));
  out.n_params = plan.n_params;
  for (const auto& t : plan.writer.tensors()) out.n_bytes += t.n_bytes;
  return out;
}

}  // namespace lattice::engine
