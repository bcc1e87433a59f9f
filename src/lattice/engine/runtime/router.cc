#include "lattice/engine/runtime/router.h"

#include <algorithm>
#include <numeric>

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

}  // namespace lattice::engine
