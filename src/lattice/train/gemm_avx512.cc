// gemm.h's product compiled for avx512: 12 x 32 micro-tiles of 16-float vectors.
#include <algorithm>
#include <cstdlib>

#include "lattice/core/check.h"
#include "lattice/train/gemm.h"

namespace lattice::train::detail {
namespace avx512_impl {
#define GEMM_W 16
#define GEMM_MR 12
#define GEMM_NR 32
#define GEMM_NAME run
#include "lattice/train/gemm_impl.inc"
}  // namespace avx512_impl

void gemm_avx512(const GemmArgs& args, engine::ThreadPool* pool) { avx512_impl::run(args, pool); }

}  // namespace lattice::train::detail
