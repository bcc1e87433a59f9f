// llama: Llama 2 and 3, Mistral, TinyLlama, and the many models converted to this layout;
// with llama.expert_count > 0 and ffn_*_exps tensors, Mixtral (softmax router over all
// experts, top k renormalized). RoPE on adjacent pairs (GGUF converters permute q/k rows into
// that order); optional biases; llama3-style frequency factors come from the rope_freqs
// tensor when present.
#include "lattice/engine/model/arch.h"

namespace lattice::engine {

const ArchInfo kLlamaArch{
    .name = "llama",
    .notes = "Llama 2/3, Mistral, TinyLlama, Mixtral",
    .default_rope_freq_base = 10000.0f,
    .head_dim_from_key_length = true,
    .attention = AttentionKind::kGqa,
    .ffn = FfnKind::kSwiGlu,
    .rope_layout = ops::RopeLayout::kNormal,
    .qkv_bias = Presence::kOptional,
    .qk_norm = false,
    .experts = Presence::kOptional,
    .router = RouterKind::kSoftmaxTopK,
    .expert_weights_norm = true,
    .names = {},
};

}  // namespace lattice::engine
