// Internal to the cluster layer: what the two topology readers (topology.cc for our format,
// mlx_hostfile.cc for MLX hostfiles) share: error collection with file:line, key checks
// with suggestions, typed getters, and the checks on names and addresses.
#pragma once

#include <nlohmann/json.hpp>

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/cluster/json_positions.h"
#include "lattice/cluster/topology.h"

namespace lattice::cluster::detail {

using json = nlohmann::json;

inline constexpr size_t kMaxErrors = 20;

class ParseContext {
 public:
  ParseContext(std::string source, const JsonPositions& pos) : source_(std::move(source)), pos_(pos) {}

  int line(std::string_view ptr) const { return pos_.line(ptr); }
  std::string where(std::string_view ptr) const { return source_ + ":" + std::to_string(line(ptr)); }
  void error(std::string_view ptr, const std::string& msg);
  // For a position the pointer cannot name (a repeated key shares its pointer with the first).
  void error_at_line(int line, const std::string& msg);
  void warn(std::string_view ptr, const std::string& msg) { warnings_.push_back(where(ptr) + ": " + msg); }
  bool ok() const { return errors_.empty(); }
  // kInvalidArgument with one "FILE:LINE: ..." line per error.
  Status status() const;
  std::vector<std::string> take_warnings() { return std::move(warnings_); }
  const std::string& source() const { return source_; }

  // Reports every key of `obj` not in `allowed` (with a suggestion), as an error or a warning.
  void check_keys(const json& obj, const std::string& ptr, std::initializer_list<const char*> allowed,
                  std::string_view what, bool unknown_is_error = true);
  // Typed member access: nullopt if absent (an error if `required`) or of the wrong type (an error).
  std::optional<std::string> get_string(const json& obj, const std::string& ptr, const char* key, bool required,
                                        std::string_view what);
  std::optional<double> get_number(const json& obj, const std::string& ptr, const char* key, std::string_view what);
  std::optional<int64_t> get_int(const json& obj, const std::string& ptr, const char* key, std::string_view what);

 private:
  std::string source_;
  const JsonPositions& pos_;
  std::vector<std::string> errors_;
  std::vector<std::string> warnings_;
  size_t dropped_ = 0;
};

std::string json_type_name(const json& v);
// Empty if fine, else what is wrong with it.
std::string check_host_name(std::string_view name);
std::string check_address(std::string_view address, bool port_required);
// An RDMA device name: not empty, no space, tab or slash (it becomes part of a path and a URI).
std::string check_device_name(std::string_view name);
// The host part of an address ("10.0.0.1:5000" -> "10.0.0.1", "[::1]:5" -> "::1").
std::string address_host(std::string_view address);

bool looks_like_mlx_hostfile(const json& doc);
// Fills topo.hosts/links/mlx_* from an MLX hostfile; errors go to ctx.
void read_mlx_hostfile(const json& doc, ParseContext& ctx, Topology& topo);
// Fills topo from our format; errors go to ctx.
void read_lattice_topology(const json& doc, ParseContext& ctx, Topology& topo);

}  // namespace lattice::cluster::detail
