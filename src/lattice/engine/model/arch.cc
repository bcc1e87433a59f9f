#include "lattice/engine/model/arch.h"

#include <array>

namespace lattice::engine {

namespace {
const std::array<const ArchInfo*, 5> kArchs{&kLlamaArch, &kQwen2Arch, &kQwen3Arch, &kQwen3MoeArch, &kDeepseek2Arch};
}

std::span<const ArchInfo* const> supported_archs() { return kArchs; }

const ArchInfo* find_arch(std::string_view name) {
  for (const ArchInfo* a : kArchs)
    if (a->name == name) return a;
  return nullptr;
}

std::string supported_arch_names() {
  std::string s;
  for (const ArchInfo* a : kArchs) {
    if (!s.empty()) s += ", ";
    s += a->name;
  }
  return s;
}

}  // namespace lattice::engine
