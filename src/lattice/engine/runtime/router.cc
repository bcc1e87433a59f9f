#include "lattice/engine/runtime/router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "lattice/engine/ops/ops.h"

namespace lattice::engine {

void route_softmax_topk(float* p, uint32_t n_expert, uint32_t k, bool norm, float scale, uint32_t* ids,
                        float* weights, uint32_t* order) {
  ops::softmax(p, n_expert);
  std::iota(order, order + n_expert, 0u);
  std::partial_sort(order, order + k, order + n_expert,
                    [&](uint32_t a, uint32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  float sum = 0;
  for (uint32_t i = 0; i < k; ++i) sum += p[order[i]];
  const float f = (norm ? 1.0f / std::max(sum, 6.103515625e-5f) : 1.0f) * scale;
  for (uint32_t i = 0; i < k; ++i) ids[i] = order[i], weights[i] = p[order[i]] * f;
}

void route_topk(const RouteParams& p, float* probs, const float* bias, uint32_t* ids, float* weights,
                uint32_t* order, float* sel, float* group_scores) {
  const uint32_t X = p.n_expert, k = std::min(p.k, p.n_expert);
  if (p.gating == ExpertGating::kSigmoid) {
    for (uint32_t e = 0; e < X; ++e) probs[e] = 1.0f / (1.0f + std::exp(-probs[e]));
  } else {
    ops::softmax(probs, X);
  }
  for (uint32_t e = 0; e < X; ++e) sel[e] = bias ? probs[e] + bias[e] : probs[e];
  // Allowed experts: those of the chosen groups (all without groups). Packed into `order`'s
  // sort key below: a disallowed expert sorts after every allowed one.
  const bool grouped = p.n_groups > 1 && X % p.n_groups == 0;
  const uint32_t per = grouped ? X / p.n_groups : X;
  std::vector<uint8_t> allowed_storage;  // only when grouped; small (n_expert bytes)
  uint8_t* allowed = nullptr;
  if (grouped) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (uint32_t g = 0; g < p.n_groups; ++g) {
      float best = kNegInf, second = kNegInf;
      for (uint32_t e = g * per; e < (g + 1) * per; ++e) {
        if (sel[e] > best) second = best, best = sel[e];
        else if (sel[e] > second) second = sel[e];
      }
      group_scores[g] = per >= 2 ? best + second : best;
    }
    std::iota(order, order + p.n_groups, 0u);
    const uint32_t gk = std::min(p.groups_used, p.n_groups);
    std::partial_sort(order, order + gk, order + p.n_groups, [&](uint32_t a, uint32_t b) {
      return group_scores[a] > group_scores[b] || (!(group_scores[a] < group_scores[b]) && a < b);
    });
    allowed_storage.assign(X, 0);
    allowed = allowed_storage.data();
    for (uint32_t i = 0; i < gk; ++i) std::fill_n(allowed + order[i] * per, per, uint8_t{1});
  }
  std::iota(order, order + X, 0u);
  std::partial_sort(order, order + k, order + X, [&](uint32_t a, uint32_t b) {
    if (allowed && allowed[a] != allowed[b]) return allowed[a] > allowed[b];
    return sel[a] > sel[b] || (!(sel[a] < sel[b]) && a < b);
  });
  float sum = 0;
  for (uint32_t i = 0; i < k; ++i) sum += probs[order[i]];
  const float f = (p.norm ? 1.0f / std::max(sum, 6.103515625e-5f) : 1.0f) * p.scale;
  for (uint32_t i = 0; i < k; ++i) ids[i] = order[i], weights[i] = probs[order[i]] * f;
}

}  // namespace lattice::engine
