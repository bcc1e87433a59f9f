// The router of a mixture-of-experts layer: which k experts a token goes to, and with what
// weight. Plain arithmetic on one token's router logits, the same on every rank.
#pragma once

#include <cstdint>

#include "lattice/engine/model/arch.h"

namespace lattice::engine {

// Softmax over all n_expert logits (in place: `logits` becomes the probabilities), the k most
// probable chosen (ties: the lowest expert id), their probabilities renormalized to sum to 1
// when `norm` (the sum clamped below at 2^-14, as llama.cpp does), then multiplied by `scale`.
// ids[k] and weights[k] receive the choice, best first; order[n_expert] is scratch.
void route_softmax_topk(float* logits, uint32_t n_expert, uint32_t k, bool norm, float scale, uint32_t* ids,
                        float* weights, uint32_t* order);

// The general router (DeepSeek-V3, Kimi K2; llama.cpp's build_moe_ffn):
//   probabilities = softmax or sigmoid of the logits (in place: `logits` becomes them);
//   selection = probabilities + bias (bias may be null; it only chooses, never weighs);
//   with n_groups > 1, experts form n_groups consecutive groups, a group scores the sum of its
//     two best selection values, the groups_used best groups stay and the others are masked;
//   the k best unmasked experts by selection are chosen (ties: lowest group / expert id;
//     a masked expert is never chosen while an unmasked one is left, even one at -inf);
//   their weights are their probabilities, renormalized to sum to 1 when `norm` (the sum
//     clamped below at 2^-14), then multiplied by `scale`.
// ids[k] and weights[k] receive the choice, best first. Scratch: order[n_expert],
// selection[n_expert], group_scores[n_groups].
struct RouteParams {
  ExpertGating gating = ExpertGating::kSoftmax;
  uint32_t n_expert = 0, k = 0;
  uint32_t n_groups = 0, groups_used = 0;  // n_groups <= 1: no groups
  bool norm = true;
  float scale = 1.0f;
};
void route_topk(const RouteParams& p, float* logits, const float* bias, uint32_t* ids, float* weights,
                uint32_t* order, float* selection, float* group_scores);

}  // namespace lattice::engine
