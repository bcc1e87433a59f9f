// Tensor element types, numbered as in the GGUF format (ggml_type), with their block layout.
// The numbering is part of the file format and must never change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lattice::engine {

enum class TensorType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kBF16 = 30,
};

struct TypeTraits {
  std::string_view name;   // "Q4_0", as llama.cpp prints it
  size_t block_elems;      // elements per block (1 for float types)
  size_t block_bytes;      // bytes per block
  bool supported;          // the engine has kernels for it
};

// Traits of a type number read from a file; nullopt for numbers we do not know at all.
std::optional<TypeTraits> type_traits(uint32_t type);
// Bytes taken by a row of `n_elems` elements; nullopt if n_elems is not a whole number of blocks.
std::optional<size_t> row_bytes(TensorType type, uint64_t n_elems);
std::optional<TensorType> parse_type_name(std::string_view name);  // "q4_0", "Q8_0", "f16"...

}  // namespace lattice::engine
