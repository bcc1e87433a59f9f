// Helpers shared by the tests of tests/train.
#pragma once

#include <cmath>
#include <span>

namespace lattice::train::testing {

// ||a - b|| / ||a||: how far two runs' weights are apart (float reassociation is ~1e-6).
inline double relative_l2(std::span<const float> a, std::span<const float> b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += double(a[i] - b[i]) * (a[i] - b[i]);
    norm += double(a[i]) * a[i];
  }
  return a.size() == b.size() ? std::sqrt(diff / norm) : INFINITY;
}

}  // namespace lattice::train::testing
