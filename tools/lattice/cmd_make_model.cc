// `lattice make-model`: writes a GGUF with random weights of a chosen architecture and shape
// and a working tokenizer (see src/lattice/engine/gguf/make_model.h).
#include <chrono>
#include <cstdio>
#include <memory>

#include "command.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/gguf/presets.h"

namespace lattice::cli {
namespace {

Registrar make_model_cmd{
    {"make-model", "write a GGUF model with random weights (llama, qwen2, qwen3, qwen3moe, deepseek2; llama with --experts: Mixtral)", [](CLI::App& app) {
       auto o = std::make_shared<engine::MakeModelOptions>();
       auto out = std::make_shared<std::string>();
       auto preset = std::make_shared<std::string>();
       auto shape_only = std::make_shared<bool>(false);
       app.add_option("--arch", o->arch, "llama | qwen2 | qwen3 | qwen3moe | deepseek2 (llama with --experts: Mixtral)")
           ->capture_default_str();
       app.add_option("--dim", o->dim, "embedding length")->capture_default_str();
       app.add_option("--layers", o->layers, "number of blocks")->capture_default_str();
       app.add_option("--heads", o->heads, "attention heads")->capture_default_str();
       app.add_option("--kv-heads", o->kv_heads, "key/value heads (0: same as --heads)")->capture_default_str();
       app.add_option("--head-dim", o->head_dim, "head dimension (0: dim / heads)")->capture_default_str();
       app.add_option("--ffn", o->ffn, "feed-forward length (0: about 8/3 * dim)")->capture_default_str();
       app.add_option("--vocab", o->vocab, "vocabulary size")->capture_default_str();
       app.add_option("--experts", o->experts, "experts per layer (mixture of experts; 0: dense)")->capture_default_str();
       app.add_option("--experts-used", o->experts_used, "experts each token uses")->capture_default_str();
       app.add_option("--expert-ffn", o->expert_ffn, "each expert's feed-forward length (0: --ffn)")
           ->capture_default_str();
       app.add_option("--q-lora", o->q_lora, "deepseek2: query lora rank (0: a plain attn_q)")->capture_default_str();
       app.add_option("--kv-lora", o->kv_lora, "deepseek2: key/value latent rank (the cached latent)")
           ->capture_default_str();
       app.add_option("--rope-dim", o->rope_dim, "deepseek2: rotated dims per head")->capture_default_str();
       app.add_option("--nope-dim", o->nope_dim, "deepseek2: unrotated query/key dims per head")->capture_default_str();
       app.add_option("--v-dim", o->v_dim, "deepseek2: value dims per head (0: --nope-dim)")->capture_default_str();
       app.add_option("--expert-groups", o->expert_groups, "deepseek2: expert groups (0: none)")->capture_default_str();
       app.add_option("--groups-used", o->groups_used, "deepseek2: groups a token may choose from")
           ->capture_default_str();
       app.add_option("--shared-experts", o->shared_experts, "deepseek2: shared experts per layer")
           ->capture_default_str();
       app.add_option("--dense-layers", o->dense_layers, "deepseek2: leading blocks with a dense FFN of --ffn")
           ->capture_default_str();
       app.add_flag("--fused-kv-b", o->fused_kv_b, "deepseek2: the older fused attn_kv_b, not attn_k_b + attn_v_b");
       app.add_flag("--fused-gate-up", o->fused_gate_up, "deepseek2: ffn_gate_up_exps, not ffn_gate_exps + ffn_up_exps");
       app.add_option("--ctx", o->context_length, "training context length")->capture_default_str();
       app.add_option("--type", o->type, "f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m")->capture_default_str();
       app.add_flag("--pure", o->pure, "every weight matrix in --type (no Q6_K output, no mixing)");
       app.add_option("--seed", o->seed, "weights are a function of the seed")->capture_default_str();
       app.add_flag("--tied", o->tied, "no output.weight: the output reuses token_embd");
       app.add_option("--tokenizer", o->tokenizer, "llama (SentencePiece) or gpt2 (byte-level BPE); default by arch");
       app.add_option("--rope-theta", o->rope_theta, "RoPE base (0: 10000 llama, 1e6 qwen)");
       app.add_option("--rope-scale", o->rope_scale, "RoPE scaling factor (0: none; linear, YaRN for deepseek2)");
       app.add_option("--rms-eps", o->rms_eps, "RMSNorm epsilon (0: 1e-5 llama, 1e-6 qwen)");
       app.add_option("--name", o->name, "general.name");
       app.add_option("--gguf-version", o->version, "2 or 3")->capture_default_str();
       app.add_option("--split-max-tensors", o->max_tensors_per_file, "write a split set with at most N tensors a file");
       app.add_option("--split-max-size", o->max_bytes_per_file,
                      "write a split set with at most this much tensor data a file (e.g. 500M, 2G)")
           ->transform(CLI::AsSizeValue(false));
       app.add_option("--threads", o->threads, "worker threads (0: all cores)");
       app.add_option("--preset", *preset,
                      "a real model's shape: kimi-k2-thinking-q4, deepseek-v3.1-q8 or qwen3-235b-a22b-q8 (with --shape-only)");
       app.add_flag("--shape-only", *shape_only,
                    "with --preset: a sparse file with the real tensor table and no weights (for plan; run refuses it)");
       app.add_option("-o,--output", *out, "output file")->required();
       return [o, out, preset, shape_only]() -> int {
         const auto t0 = std::chrono::steady_clock::now();
         if (preset->empty() != !*shape_only) {
           std::fprintf(stderr, "lattice make-model: --preset and --shape-only go together (only shape-only presets exist)\n");
           return 2;
         }
         auto r = *shape_only ? engine::write_shape_only(*preset, *out) : engine::make_model(*o, *out);
         if (!r.ok()) {
           std::fprintf(stderr, "lattice make-model: %s\n", r.status().to_string().c_str());
           return 1;
         }
         const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
         for (const auto& p : r->paths) std::printf("%s\n", p.c_str());
         const double n = static_cast<double>(r->n_params);
         const auto [scale, unit] = n >= 1e9 ? std::pair{1e9, "B"} : n >= 1e6 ? std::pair{1e6, "M"} : std::pair{1e3, "K"};
         std::fprintf(stderr, "%s: %.4g %s params, %.1f MiB of tensors%s, %.2f s\n",
                      preset->empty() ? o->arch.c_str() : preset->c_str(), n / scale, unit,
                      static_cast<double>(r->n_bytes) / (1 << 20), *shape_only ? " (a hole: no disk)" : "", s);
         return 0;
       };
     }}};

}  // namespace
}  // namespace lattice::cli
