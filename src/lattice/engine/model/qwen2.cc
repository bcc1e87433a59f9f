// qwen2: Qwen2 and Qwen2.5. Biases on the q, k and v projections; RoPE on halves (NeoX).
#include "lattice/engine/model/arch.h"

namespace lattice::engine {

const ArchInfo kQwen2Arch{
    .name = "qwen2",
    .rope_layout = ops::RopeLayout::kNeox,
    .default_rope_freq_base = 1000000.0f,
    .qkv_bias_required = true,
    .qk_norm = false,
    .head_dim_from_key_length = true,
    .notes = "Qwen2, Qwen2.5",
};

}  // namespace lattice::engine
