#include "lattice/engine/quant/types.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace lattice::engine {

namespace {
struct Row {
  uint32_t id;
  TypeTraits traits;
};
// Block sizes as fixed by the GGUF/ggml format.
constexpr std::array kTypes{
    Row{0, {"F32", 1, 4, true}},       Row{1, {"F16", 1, 2, true}},
    Row{2, {"Q4_0", 32, 18, true}},    Row{3, {"Q4_1", 32, 20, true}},
    Row{6, {"Q5_0", 32, 22, true}},   Row{7, {"Q5_1", 32, 24, true}},
    Row{8, {"Q8_0", 32, 34, true}},    Row{9, {"Q8_1", 32, 36, false}},
    Row{10, {"Q2_K", 256, 84, true}},  Row{11, {"Q3_K", 256, 110, true}},
    Row{12, {"Q4_K", 256, 144, true}}, Row{13, {"Q5_K", 256, 176, true}},
    Row{14, {"Q6_K", 256, 210, true}}, Row{15, {"Q8_K", 256, 292, false}},
    Row{20, {"IQ4_NL", 32, 18, true}}, Row{30, {"BF16", 1, 2, true}},
};
}  // namespace

std::optional<TypeTraits> type_traits(uint32_t type) {
  for (const auto& r : kTypes)
    if (r.id == type) return r.traits;
  return std::nullopt;
}

std::optional<size_t> row_bytes(TensorType type, uint64_t n_elems) {
  auto t = type_traits(static_cast<uint32_t>(type));
  if (!t || n_elems % t->block_elems != 0) return std::nullopt;
  return static_cast<size_t>(n_elems / t->block_elems * t->block_bytes);
}

std::optional<TensorType> parse_type_name(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const auto& r : kTypes)
    if (r.traits.name == upper) return static_cast<TensorType>(r.id);
  return std::nullopt;
}

}  // namespace lattice::engine
