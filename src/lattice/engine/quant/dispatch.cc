// Run-time choice of the kernel table from cpuid, with the LATTICE_ISA override.
#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "lattice/engine/quant/kernels.h"
#include "lattice/engine/quant/matmul.h"

namespace lattice::engine {

namespace {

// F16C from cpuid leaf 1 (ECX bit 29) itself: clang 14's __builtin_cpu_supports does not know
// "f16c" (the fuzz preset builds the engine with clang).
bool cpu_has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
bool cpu_has_avx2() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c(); }
bool cpu_has_avx512() {
  // The AVX-512 kernels use F, BW, VL, DQ and VNNI (vpdpbusd).
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}

Isa detect() {
  Isa best = cpu_has_avx512() ? Isa::kAvx512 : cpu_has_avx2() ? Isa::kAvx2 : Isa::kScalar;
  if (const char* env = std::getenv("LATTICE_ISA")) {
    Isa want = best;
    if (std::strcmp(env, "scalar") == 0) want = Isa::kScalar;
    else if (std::strcmp(env, "avx2") == 0) want = Isa::kAvx2;
    else if (std::strcmp(env, "avx512") == 0) want = Isa::kAvx512;
    if (static_cast<int>(want) < static_cast<int>(best)) best = want;
  }
  return best;
}

std::atomic<Isa>& active() {
  static std::atomic<Isa> isa{detect()};
  return isa;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return cpu_has_avx2();
    case Isa::kAvx512: return cpu_has_avx512();
  }
  return false;
}

Isa active_isa() { return active().load(std::memory_order_relaxed); }

Status set_active_isa(Isa isa) {
  if (!isa_supported(isa)) return Unavailable("this CPU lacks " + std::string(isa_name(isa)));
  active().store(isa, std::memory_order_relaxed);
  return Status::Ok();
}

namespace detail {
const KernelTable& active_kernels() {
  switch (active_isa()) {
    case Isa::kAvx512: return avx512_kernels();
    case Isa::kAvx2: return avx2_kernels();
    default: return scalar_kernels();
  }
}
}  // namespace detail

}  // namespace lattice::engine
