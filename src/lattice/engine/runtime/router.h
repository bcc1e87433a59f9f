// The router of a mixture-of-experts layer: which k experts a token goes to, and with what
// weight. Plain arithmetic on one token's router logits, the same on every rank.
#pragma once

#include <cstdint>

namespace lattice::engine {

// Softmax over all n_expert logits (in place: `logits` becomes the probabilities), the k most
// probable chosen (ties: the lowest expert id), their probabilities renormalized to sum to 1
// when `norm` (the sum clamped below at 2^-14, as llama.cpp does), then multiplied by `scale`.
// ids[k] and weights[k] receive the choice, best first; order[n_expert] is scratch.
void route_softmax_topk(float* logits, uint32_t n_expert, uint32_t k, bool norm, float scale, uint32_t* ids,
                        float* weights, uint32_t* order);

}  // namespace lattice::engine
