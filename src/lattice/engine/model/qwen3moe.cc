// qwen3moe: Qwen3 mixtures of experts (Qwen3-30B-A3B, Qwen3-235B-A22B). Attention as qwen3
// (per-head q/k RMSNorm before RoPE on halves, head size from attention.key_length); every
// layer's FFN is experts_used of expert_count SwiGLU experts of expert_feed_forward_length,
// chosen by a softmax router over all experts, the chosen weights renormalized to sum to 1.
#include "lattice/engine/model/arch.h"

namespace lattice::engine {

const ArchInfo kQwen3MoeArch{
    .name = "qwen3moe",
    .notes = "Qwen3 mixture of experts",
    .default_rope_freq_base = 1000000.0f,
    .head_dim_from_key_length = true,
    .attention = AttentionKind::kGqa,
    .ffn = FfnKind::kSwiGlu,
    .rope_layout = ops::RopeLayout::kNeox,
    .qkv_bias = Presence::kOptional,
    .qk_norm = true,
    .experts = Presence::kRequired,
    .router = RouterKind::kSoftmaxTopK,
    .expert_weights_norm = true,
    .names = {},
};

}  // namespace lattice::engine
