// The one table of model architectures the engine runs. Each architecture lives in its own
// file (llama.cc, qwen2.cc, qwen3.cc) as one ArchInfo: what its GGUF holds and how its forward
// pass differs from the common decoder (RoPE layout, biases, QK-norm). The loader and the
// runtime read these fields; nothing else in the engine names an architecture.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "lattice/engine/runtime/ops.h"

namespace lattice::engine {

struct ArchInfo {
  std::string_view name;                 // general.architecture, and the prefix of its keys
  ops::RopeLayout rope_layout;           // how RoPE pairs components
  float default_rope_freq_base;          // when {arch}.rope.freq_base is absent
  bool qkv_bias_required;                // attn_{q,k,v}.bias must be present (qwen2)
  bool qk_norm;                          // per-head RMSNorm of q and k before RoPE (qwen3)
  bool head_dim_from_key_length;         // head size read from {arch}.attention.key_length
  std::string_view notes;                // one line for `--help` and error messages
};

extern const ArchInfo kLlamaArch;
extern const ArchInfo kQwen2Arch;
extern const ArchInfo kQwen3Arch;

// All supported architectures, in the order they are listed to users.
std::span<const ArchInfo* const> supported_archs();
// nullptr if `name` is not supported.
const ArchInfo* find_arch(std::string_view name);
// "llama, qwen2, qwen3"
std::string supported_arch_names();

}  // namespace lattice::engine
