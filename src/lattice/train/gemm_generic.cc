// gemm.h's product compiled for generic: 6 x 8 micro-tiles of 4-float vectors.
#include <algorithm>
#include <cstdlib>

#include "lattice/core/check.h"
#include "lattice/train/gemm.h"

namespace lattice::train::detail {
namespace generic_impl {
#define GEMM_W 4
#define GEMM_MR 6
#define GEMM_NR 8
#define GEMM_NAME run
#include "lattice/train/gemm_impl.inc"
}  // namespace generic_impl

void gemm_generic(const GemmArgs& args, engine::ThreadPool* pool) { generic_impl::run(args, pool); }

}  // namespace lattice::train::detail
