// Dense f32 matrix products for training: C = op(A) * op(B) (+ C), row-major.
//
// op(A) is m x k: A is stored m x k (row stride lda), or k x m when trans_a. op(B) is k x n: B
// is stored k x n (ldb), or n x k when trans_b. With accumulate the product is added to C,
// otherwise C is overwritten (its old contents are never read, NaNs included).
//
// Blocked as BLIS does (B packed in panels of KC x NC shared by all threads, A packed per
// thread in MC x KC blocks, a register-blocked micro-kernel); the micro-kernel is compiled for
// AVX-512, AVX2 and the baseline ISA and chosen at run time. Each element of C is summed over
// k in the same order whatever the thread count, so results do not depend on it.
//
// Thread safety: reentrant; with a pool, must not be called from inside one of its tasks
// (pass nullptr there to run on the calling thread alone).
#pragma once

#include <cstddef>

#include "lattice/engine/ops/thread_pool.h"

namespace lattice::train {

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  size_t m = 0, n = 0, k = 0;
  const float* a = nullptr;
  size_t lda = 0;
  const float* b = nullptr;
  size_t ldb = 0;
  float* c = nullptr;
  size_t ldc = 0;
  bool accumulate = false;
};

void gemm(const GemmArgs& args, engine::ThreadPool* pool);

// The ISA the micro-kernel runs on here: "avx512", "avx2" or "generic".
const char* gemm_isa();

namespace detail {
// One implementation per ISA (gemm_<isa>.cc), each built from gemm_impl.inc.
void gemm_avx512(const GemmArgs& args, engine::ThreadPool* pool);
void gemm_avx2(const GemmArgs& args, engine::ThreadPool* pool);
void gemm_generic(const GemmArgs& args, engine::ThreadPool* pool);
}  // namespace detail

}  // namespace lattice::train
