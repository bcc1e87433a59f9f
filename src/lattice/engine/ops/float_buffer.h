// FloatBuffer: a 64-byte aligned array of floats, allocated once (activation scratch of the
// single-node and tensor-parallel sessions). Owns its memory; not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <memory>

namespace lattice::engine {

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using FloatBuffer = std::unique_ptr<float, AlignedFree>;

// At least one float, rounded up to whole cache lines.
inline FloatBuffer alloc_floats(size_t n) {
  const size_t bytes = (std::max<size_t>(n, 1) * sizeof(float) + 63) / 64 * 64;
  return FloatBuffer(static_cast<float*>(std::aligned_alloc(64, bytes)));
}

}  // namespace lattice::engine
