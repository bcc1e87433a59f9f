// Value and Metadata: GGUF's typed key/value store.
#include <cstdio>
#include <limits>
#include <type_traits>

#include "lattice/engine/gguf/gguf.h"

namespace lattice::engine {

namespace {
// Variant index -> format type id, scalars (0..11) then arrays (12..23) in the same order.
constexpr ValueType kIndexToType[12] = {
    ValueType::kU8,  ValueType::kI8,     ValueType::kU16, ValueType::kI16, ValueType::kU32, ValueType::kI32,
    ValueType::kF32, ValueType::kBool,   ValueType::kString, ValueType::kU64, ValueType::kI64, ValueType::kF64,
};
}  // namespace

std::string_view to_string(ValueType t) {
  switch (t) {
    case ValueType::kU8: return "u8";
    case ValueType::kI8: return "i8";
    case ValueType::kU16: return "u16";
    case ValueType::kI16: return "i16";
    case ValueType::kU32: return "u32";
    case ValueType::kI32: return "i32";
    case ValueType::kF32: return "f32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kU64: return "u64";
    case ValueType::kI64: return "i64";
    case ValueType::kF64: return "f64";
  }
  return "unknown";
}

ValueType Value::type() const { return is_array() ? ValueType::kArray : kIndexToType[v_.index()]; }
ValueType Value::elem_type() const { return kIndexToType[v_.index() % 12]; }

size_t Value::array_size() const {
  return std::visit(
      [](const auto& x) -> size_t {
        using T = std::decay_t<decltype(x)>;
        if constexpr (requires { x.size(); } && !std::is_same_v<T, std::string>) return x.size();
        return 0;
      },
      v_);
}

std::optional<int64_t> Value::as_int() const {
  return std::visit(
      [](const auto& x) -> std::optional<int64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_same_v<T, uint64_t>) {
            if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
          }
          return static_cast<int64_t>(x);
        }
        return std::nullopt;
      },
      v_);
}

std::optional<uint64_t> Value::as_uint() const {
  return std::visit(
      [](const auto& x) -> std::optional<uint64_t> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          if constexpr (std::is_signed_v<T>) {
            if (x < 0) return std::nullopt;
          }
          return static_cast<uint64_t>(x);
        }
        return std::nullopt;
      },
      v_);
}

std::string Value::to_display() const {
  return std::visit(
      [this](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) {
          std::string s = x.size() > 60 ? x.substr(0, 57) + "..." : x;
          return "\"" + s + "\"";
        } else if constexpr (std::is_same_v<T, bool>) {
          return x ? "true" : "false";
        } else if constexpr (std::is_arithmetic_v<T>) {
          return std::to_string(x);
        } else {
          std::string s(1, '[');
          s.append(to_string(elem_type()));
          s.append(" x ");
          s.append(std::to_string(x.size()));
          s.push_back(']');
          return s;
        }
      },
      v_);
}

void Metadata::set(std::string key, Value value) {
  if (auto it = index_.find(key); it != index_.end()) {
    entries_[it->second].value = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.push_back({std::move(key), std::move(value)});
}

bool Metadata::erase(std::string_view key) {
  auto it = index_.find(std::string(key));
  if (it == index_.end()) return false;
  entries_.erase(entries_.begin() + static_cast<ptrdiff_t>(it->second));
  index_.clear();
  for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].key, i);
  return true;
}

const Value* Metadata::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].value;
}

Status Metadata::missing(std::string_view key) { return NotFound("key '" + std::string(key) + "': missing"); }

Status Metadata::mistyped(std::string_view key, const Value& v, std::string_view wanted) {
  std::string have(to_string(v.type()));
  if (v.is_array()) have = "array of " + std::string(to_string(v.elem_type()));
  return Corrupt("key '" + std::string(key) + "': has type " + have + ", expected " + std::string(wanted));
}

template <class T>
Result<T> Metadata::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if constexpr (std::is_signed_v<T>) {
    auto x = v->as_int();
    if (!x) {
      if (v->as_uint()) return Corrupt("key '" + std::string(key) + "': value " + v->to_display() + " out of range");
      return mistyped(key, *v, "an integer");
    }
    if (*x < std::numeric_limits<T>::min() || *x > std::numeric_limits<T>::max())
      return Corrupt("key '" + std::string(key) + "': value " + std::to_string(*x) + " out of range");
    return static_cast<T>(*x);
  } else {
    auto x = v->as_uint();
    if (!x) {
      if (v->as_int()) return Corrupt("key '" + std::string(key) + "': negative value " + v->to_display());
      return mistyped(key, *v, "an integer");
    }
    if (*x > std::numeric_limits<T>::max())
      return Corrupt("key '" + std::string(key) + "': value " + std::to_string(*x) + " out of range");
    return static_cast<T>(*x);
  }
}

Result<uint8_t> Metadata::get_u8(std::string_view key) const { return get_int<uint8_t>(key); }
Result<uint16_t> Metadata::get_u16(std::string_view key) const { return get_int<uint16_t>(key); }
Result<uint32_t> Metadata::get_u32(std::string_view key) const { return get_int<uint32_t>(key); }
Result<uint64_t> Metadata::get_u64(std::string_view key) const { return get_int<uint64_t>(key); }
Result<int32_t> Metadata::get_i32(std::string_view key) const { return get_int<int32_t>(key); }
Result<int64_t> Metadata::get_i64(std::string_view key) const { return get_int<int64_t>(key); }

Result<double> Metadata::get_f64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (auto* f = v->get_if<float>()) return static_cast<double>(*f);
  if (auto* d = v->get_if<double>()) return *d;
  return mistyped(key, *v, "f32 or f64");
}

Result<float> Metadata::get_f32(std::string_view key) const {
  LATTICE_ASSIGN_OR_RETURN(double d, get_f64(key));
  return static_cast<float>(d);
}

Result<bool> Metadata::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (auto* b = v->get_if<bool>()) return *b;
  return mistyped(key, *v, "bool");
}

Result<std::string> Metadata::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return missing(key);
  if (auto* s = v->get_if<std::string>()) return *s;
  return mistyped(key, *v, "string");
}

Result<uint32_t> Metadata::get_u32_or(std::string_view key, uint32_t fallback) const {
  return contains(key) ? get_u32(key) : Result<uint32_t>(fallback);
}
Result<float> Metadata::get_f32_or(std::string_view key, float fallback) const {
  return contains(key) ? get_f32(key) : Result<float>(fallback);
}
Result<bool> Metadata::get_bool_or(std::string_view key, bool fallback) const {
  return contains(key) ? get_bool(key) : Result<bool>(fallback);
}
Result<std::string> Metadata::get_string_or(std::string_view key, std::string fallback) const {
  return contains(key) ? get_string(key) : Result<std::string>(std::move(fallback));
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t i = 0; i < n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

std::string split_path(std::string_view prefix, uint32_t split_index, uint32_t split_count) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "-%05u-of-%05u.gguf", split_index + 1, split_count);
  return std::string(prefix) + buf;
}

}  // namespace lattice::engine
