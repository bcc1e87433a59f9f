// qwen3: Qwen3 dense models. No q/k/v biases; an RMSNorm over each head of q and of k
// (weights attn_q_norm / attn_k_norm, head_dim long) before RoPE on halves (NeoX). The head
// size comes from attention.key_length and may differ from dim / heads.
#include "lattice/engine/model/arch.h"

namespace lattice::engine {

const ArchInfo kQwen3Arch{
    .name = "qwen3",
    .notes = "Qwen3 (dense)",
    .default_rope_freq_base = 1000000.0f,
    .head_dim_from_key_length = true,
    .attention = AttentionKind::kGqa,
    .ffn = FfnKind::kSwiGlu,
    .rope_layout = ops::RopeLayout::kNeox,
    .qkv_bias = Presence::kOptional,
    .qk_norm = true,
    .experts = Presence::kAbsent,
    .router = RouterKind::kSoftmaxTopK,
    .expert_weights_norm = true,
    .names = {},
};

}  // namespace lattice::engine
