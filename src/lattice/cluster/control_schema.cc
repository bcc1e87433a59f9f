#include "lattice/cluster/control_schema.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/cluster/control.h"

namespace lattice::cluster {

using nlohmann::json;

namespace {

enum class Kind : uint8_t { kUint, kInt, kBool, kString, kIntArray, kStringArray };

struct Field {
  const char* name;
  Kind kind;
  bool required;
  int64_t min = 0;          // kInt / kIntArray elements
  int64_t max = 0;
  size_t max_len = kMaxControlReason;  // bytes of a string (of each, in a string array)
};

struct Type {
  const char* t;
  std::vector<Field> fields;
};

constexpr int64_t kRankMax = kMaxControlWorld - 1;

Field rank_field(const char* name, bool required) { return {name, Kind::kInt, required, 0, kRankMax}; }
Field uint_field(const char* name) { return {name, Kind::kUint, true}; }
Field text_field(const char* name, bool required, size_t max_len = kMaxControlReason) {
  return {name, Kind::kString, required, 0, 0, max_len};
}

std::string_view kind_name(Kind k) {
  switch (k) {
    case Kind::kUint: return "an unsigned integer";
    case Kind::kInt: return "an integer";
    case Kind::kBool: return "a boolean";
    case Kind::kString: return "a string";
    case Kind::kIntArray: return "an array of integers";
    case Kind::kStringArray: return "an array of strings";
  }
  return "?";
}

Status bad(const char* t, const Field& f, const std::string& why) {
  return Corrupt("control message '" + std::string(t) + "': field '" + f.name + "' " + why);
}

Status check_field(const char* t, const Field& f, const json& v) {
  auto in_range = [&](const json& x) {
    if (!x.is_number_integer()) return false;
    if (x.is_number_unsigned()) return x.get<uint64_t>() <= static_cast<uint64_t>(f.max);
    const int64_t i = x.get<int64_t>();
    return i >= f.min && i <= f.max;
  };
  switch (f.kind) {
    case Kind::kUint:
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        return bad(t, f, "must be " + std::string(kind_name(f.kind)));
      return Status::Ok();
    case Kind::kInt:
      if (!in_range(v))
        return bad(t, f, "must be an integer in " + std::to_string(f.min) + ".." + std::to_string(f.max));
      return Status::Ok();
    case Kind::kBool:
      if (!v.is_boolean()) return bad(t, f, "must be a boolean");
      return Status::Ok();
    case Kind::kString:
      if (!v.is_string()) return bad(t, f, "must be a string");
      if (v.get_ref<const std::string&>().size() > f.max_len)
        return bad(t, f, "is longer than " + std::to_string(f.max_len) + " bytes");
      return Status::Ok();
    case Kind::kIntArray:
    case Kind::kStringArray:
      if (!v.is_array()) return bad(t, f, "must be " + std::string(kind_name(f.kind)));
      if (v.size() > static_cast<size_t>(kMaxControlWorld))
        return bad(t, f, "has more than " + std::to_string(kMaxControlWorld) + " elements");
      for (const json& x : v) {
        if (f.kind == Kind::kIntArray && !in_range(x))
          return bad(t, f, "must hold integers in " + std::to_string(f.min) + ".." + std::to_string(f.max));
        if (f.kind == Kind::kStringArray && (!x.is_string() || x.get_ref<const std::string&>().size() > f.max_len))
          return bad(t, f, "must hold strings of at most " + std::to_string(f.max_len) + " bytes");
      }
      return Status::Ok();
  }
  return Status::Ok();
}

Status validate(const json& m, const std::vector<Type>& schema) {
  if (!m.is_object()) return Corrupt("control message is not a JSON object");
  auto it = m.find("t");
  if (it == m.end() || !it->is_string()) return Corrupt("control message without a string 't'");
  const std::string& t = it->get_ref<const std::string&>();
  for (const Type& type : schema) {
    if (t != type.t) continue;
    for (const Field& f : type.fields) {
      auto v = m.find(f.name);
      if (v == m.end()) {
        if (f.required) return bad(type.t, f, "is missing");
        continue;
      }
      LATTICE_RETURN_IF_ERROR(check_field(type.t, f, *v));
    }
    return Status::Ok();
  }
  return Status::Ok();  // unknown types are the reader's to ignore
}

}  // namespace

Status validate_from_member(const json& m) {
  static const std::vector<Type> schema = {
      {"hello", {rank_field("rank", true), {"world", Kind::kInt, true, 1, kMaxControlWorld},
                 {"rejoin", Kind::kBool, false}, text_field("name", false, kMaxControlName)}},
      {"hb", {}},
      {"ag", {uint_field("epoch"), uint_field("seq"), text_field("data", true, kMaxControlPayload)}},
      {"shrink", {uint_field("epoch")}},
      {"bye", {}},
  };
  return validate(m, schema);
}

Status validate_from_coordinator(const json& m) {
  static const std::vector<Type> schema = {
      {"plan", {uint_field("epoch"), rank_field("rank", true), {"world", Kind::kInt, true, 1, kMaxControlWorld},
                {"members", Kind::kStringArray, false, 0, 0, 2 * kMaxControlName},
                {"origins", Kind::kIntArray, false, -1, kRankMax}}},
      {"ag_done", {uint_field("epoch"), uint_field("seq"), {"data", Kind::kStringArray, true, 0, 0, kMaxControlPayload}}},
      {"ag_fail", {uint_field("epoch"), uint_field("seq"), text_field("reason", false)}},
      {"view", {uint_field("epoch"), {"lost", Kind::kIntArray, true, 0, kRankMax},
                {"alive", Kind::kIntArray, true, 0, kRankMax}, text_field("reason", false)}},
      {"join_request", {text_field("name", false, 2 * kMaxControlName)}},
      {"refused", {text_field("reason", false)}},
      {"wait", {}},
      {"hb", {}},
  };
  return validate(m, schema);
}

}  // namespace lattice::cluster
