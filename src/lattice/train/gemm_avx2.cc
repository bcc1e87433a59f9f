// gemm.h's product compiled for avx2: 6 x 16 micro-tiles of 8-float vectors.
#include <algorithm>
#include <cstdlib>

#include "lattice/core/check.h"
#include "lattice/train/gemm.h"

namespace lattice::train::detail {
namespace avx2_impl {
#define GEMM_W 8
#define GEMM_MR 6
#define GEMM_NR 16
#define GEMM_NAME run
#include "lattice/train/gemm_impl.inc"
}  // namespace avx2_impl

void gemm_avx2(const GemmArgs& args, engine::ThreadPool* pool) { avx2_impl::run(args, pool); }

}  // namespace lattice::train::detail
