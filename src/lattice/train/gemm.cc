#include "lattice/train/gemm.h"

namespace lattice::train {
namespace {

using Fn = void (*)(const GemmArgs&, engine::ThreadPool*);

struct Choice {
  Fn fn;
  const char* isa;
};

Choice choose() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {detail::gemm_avx512, "avx512"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {detail::gemm_avx2, "avx2"};
#endif
  return {detail::gemm_generic, "generic"};
}

const Choice& chosen() {
  static const Choice c = choose();
  return c;
}

}  // namespace

void gemm(const GemmArgs& args, engine::ThreadPool* pool) { chosen().fn(args, pool); }

const char* gemm_isa() { return chosen().isa; }

}  // namespace lattice::train
