// qwen2: Qwen2 and Qwen2.5. Biases on the q, k and v projections; RoPE on halves (NeoX).
#include "lattice/engine/model/arch.h"

namespace lattice::engine {

const ArchInfo kQwen2Arch{
    .name = "qwen2",
    .notes = "Qwen2, Qwen2.5",
    .default_rope_freq_base = 1000000.0f,
    .head_dim_from_key_length = true,
    .attention = AttentionKind::kGqa,
    .ffn = FfnKind::kSwiGlu,
    .rope_layout = ops::RopeLayout::kNeox,
    .qkv_bias = Presence::kRequired,
    .qk_norm = false,
    .experts = Presence::kAbsent,
    .router = RouterKind::kSoftmaxTopK,
    .expert_weights_norm = true,
    .names = {},
};

}  // namespace lattice::engine
