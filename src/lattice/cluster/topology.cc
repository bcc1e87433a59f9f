// Reading topology files: syntax through nlohmann::json, lines through JsonPositions, and
// every semantic check of our own format. MLX hostfiles are in mlx_hostfile.cc.
#include "lattice/cluster/topology.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "lattice/cluster/json_positions.h"
#include "lattice/cluster/topology_parse.h"

namespace lattice::cluster {

std::string_view to_string(LinkProvider p) {
  switch (p) {
    case LinkProvider::kTcp: return "tcp";
    case LinkProvider::kShm: return "shm";
    case LinkProvider::kVerbs: return "verbs";
  }
  return "?";
}

int Topology::find_host(std::string_view name) const {
  for (size_t i = 0; i < hosts.size(); ++i)
    if (hosts[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace detail {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // A typo: at most a third of the word wrong, and never the whole of a short word.
  size_t limit = std::max<size_t>(1, std::min(word.size(), best.size()) / 3);
  return best_d <= limit ? best : std::string();
}

std::string json_type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

void ParseContext::error(std::string_view ptr, const std::string& msg) {
  if (errors_.size() >= kMaxErrors) {
    ++dropped_;
    return;
  }
  errors_.push_back(where(ptr) + ": " + msg);
}

void ParseContext::error_at_line(int line, const std::string& msg) {
  if (errors_.size() >= kMaxErrors) {
    ++dropped_;
    return;
  }
  errors_.push_back(source_ + ":" + std::to_string(line) + ": " + msg);
}

Status ParseContext::status() const {
  if (errors_.empty()) return Status::Ok();
  std::string m;
  for (const auto& e : errors_) {
    if (!m.empty()) m += '\n';
    m += e;
  }
  if (dropped_ > 0) m += "\n(" + std::to_string(dropped_) + " more errors not shown)";
  return InvalidArgument(m);
}

void ParseContext::check_keys(const json& obj, const std::string& ptr, std::initializer_list<const char*> allowed,
                              std::string_view what, bool unknown_is_error) {
  std::vector<std::string> names(allowed.begin(), allowed.end());
  for (const auto& [key, value] : obj.items()) {
    if (std::find(names.begin(), names.end(), key) != names.end()) continue;
    std::string msg = "unknown key '" + key + "' in " + std::string(what);
    if (std::string s = closest(key, names); !s.empty()) {
      msg += " (did you mean '" + s + "'?)";
    } else {
      msg += " (expected one of:";
      for (const auto& n : names) msg += " " + n;
      msg += ")";
    }
    std::string kptr = ptr + "/" + JsonPositions::escape(key);
    if (unknown_is_error) {
      error(kptr, msg);
    } else {
      warn(kptr, msg + "; ignored");
    }
  }
}

std::optional<std::string> ParseContext::get_string(const json& obj, const std::string& ptr, const char* key,
                                                    bool required, std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) error(ptr, std::string(what) + " has no \"" + key + "\"");
    return std::nullopt;
  }
  if (!it->is_string()) {
    error(ptr + "/" + key, std::string("\"") + key + "\" must be a string, not " + json_type_name(*it));
    return std::nullopt;
  }
  return it->get<std::string>();
}

std::optional<double> ParseContext::get_number(const json& obj, const std::string& ptr, const char* key,
                                               std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  if (!it->is_number()) {
    error(ptr + "/" + key, std::string("\"") + key + "\" must be a number, not " + json_type_name(*it));
    return std::nullopt;
  }
  return it->get<double>();
}

std::optional<int64_t> ParseContext::get_int(const json& obj, const std::string& ptr, const char* key,
                                             std::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end()) return std::nullopt;
  if (!it->is_number_integer()) {
    error(ptr + "/" + key, std::string("\"") + key + "\" must be an integer, not " + json_type_name(*it));
    return std::nullopt;
  }
  return it->get<int64_t>();
}

std::string check_device_name(std::string_view name) {
  if (name.empty() || name.find_first_of(" \t/") != std::string_view::npos)
    return "device name '" + std::string(name) + "' is empty or has a space or slash";
  return {};
}

std::string check_host_name(std::string_view name) {
  if (name.empty()) return "a host name cannot be empty";
  if (name.size() > 64) return "host name '" + std::string(name) + "' is longer than 64 characters";
  auto ok = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (!first && (c == '.' || c == '_' || c == '-'));
  };
  for (size_t i = 0; i < name.size(); ++i)
    if (!ok(name[i], i == 0))
      return "host name '" + std::string(name) + "' has '" + std::string(1, name[i]) +
             "': use letters, digits, '.', '_' and '-' (starting with a letter or digit)";
  return {};
}

namespace {
bool parse_port(std::string_view s) {
  if (s.empty() || s.size() > 5) return false;
  unsigned v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  return v >= 1 && v <= 65535;
}
}  // namespace

std::string check_address(std::string_view a, bool port_required) {
  std::string q = "'" + std::string(a) + "'";
  if (a.empty()) return "an address cannot be empty";
  for (char c : a)
    if (c == ' ' || c == '\t' || c == '/' || static_cast<unsigned char>(c) < 0x20)
      return "address " + q + " has a space, a slash or a control character";
  std::string_view port;
  bool has_port = false;
  if (a.front() == '[') {
    size_t close = a.find(']');
    if (close == std::string_view::npos || close == 1) return "address " + q + " opens '[' without a closing ']'";
    std::string_view rest = a.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return "address " + q + ": expected ':port' after ']'";
      port = rest.substr(1);
      has_port = true;
    }
  } else {
    size_t colons = static_cast<size_t>(std::count(a.begin(), a.end(), ':'));
    if (colons == 1) {
      size_t c = a.find(':');
      if (c == 0) return "address " + q + " has no host before ':'";
      port = a.substr(c + 1);
      has_port = true;
    }
  }
  if (has_port && !parse_port(port)) return "address " + q + " has port '" + std::string(port) + "', expected 1-65535";
  if (port_required && !has_port) return "address " + q + " needs a port (host:port)";
  return {};
}

std::string address_host(std::string_view a) {
  if (!a.empty() && a.front() == '[') {
    size_t close = a.find(']');
    return std::string(a.substr(1, close == std::string_view::npos ? a.size() - 1 : close - 1));
  }
  if (std::count(a.begin(), a.end(), ':') == 1) return std::string(a.substr(0, a.find(':')));
  return std::string(a);
}

void read_lattice_topology(const json& doc, ParseContext& ctx, Topology& topo) {
  topo.format = "lattice";
  if (!doc.is_object()) {
    ctx.error("", "a topology file holds a JSON object, not " + json_type_name(doc));
    return;
  }
  ctx.check_keys(doc, "", {"version", "hosts", "links", "coordinator", "comment"}, "the topology");
  if (auto v = doc.find("version"); v == doc.end()) {
    ctx.error("", "missing \"version\": 1");
  } else if (!v->is_number_integer() || v->get<int64_t>() != 1) {
    ctx.error("/version", "unsupported version " + v->dump() + " (this lattice reads version 1)");
  }

  // Hosts.
  auto hosts_it = doc.find("hosts");
  if (hosts_it == doc.end() || !hosts_it->is_array() || hosts_it->empty()) {
    ctx.error(hosts_it == doc.end() ? "" : "/hosts", "\"hosts\" must be a non-empty array of host objects");
    return;
  }
  std::map<std::string, int> name_line;
  std::map<std::string, std::pair<int, std::string>> address_line;  // address -> (line, ssh)
  int ranked = 0;
  for (size_t i = 0; i < hosts_it->size(); ++i) {
    const json& h = (*hosts_it)[i];
    std::string ptr = "/hosts/" + std::to_string(i);
    Host host;
    host.line = ctx.line(ptr);
    if (!h.is_object()) {
      ctx.error(ptr, "a host must be an object, not " + json_type_name(h));
      topo.hosts.push_back(host);
      continue;
    }
    ctx.check_keys(h, ptr, {"name", "address", "ssh", "memory_gb", "machine", "rank", "comment"}, "a host");
    if (auto name = ctx.get_string(h, ptr, "name", true, "a host")) {
      host.name = *name;
      if (std::string e = check_host_name(*name); !e.empty()) {
        ctx.error(ptr + "/name", e);
      } else if (auto [it, fresh] = name_line.emplace(*name, ctx.line(ptr + "/name")); !fresh) {
        ctx.error(ptr + "/name", "duplicate host name '" + *name + "' (first defined at line " +
                                     std::to_string(it->second) + ")");
      }
    }
    if (auto ssh = ctx.get_string(h, ptr, "ssh", false, "a host")) host.ssh = *ssh;
    if (auto addr = ctx.get_string(h, ptr, "address", true, "host '" + host.name + "'")) {
      host.address = *addr;
      // Several ranks of one machine share its address when they say so by naming the same
      // ssh destination (what `topo --json` writes for an MLX hostfile listing a machine twice).
      if (std::string e = check_address(*addr, false); !e.empty()) {
        ctx.error(ptr + "/address", e);
      } else if (auto [it, fresh] = address_line.emplace(*addr, std::pair{ctx.line(ptr + "/address"), host.ssh});
                 !fresh && (host.ssh.empty() || host.ssh != it->second.second)) {
        ctx.error(ptr + "/address", "duplicate address '" + *addr + "' (already used by the host at line " +
                                        std::to_string(it->second.first) + ")");
      }
    }
    if (auto m = ctx.get_string(h, ptr, "machine", false, "a host")) {
      if (m->empty()) ctx.error(ptr + "/machine", "\"machine\" must not be empty");
      host.machine = *m;
    }
    if (auto mem = ctx.get_number(h, ptr, "memory_gb", "a host")) {
      if (*mem <= 0) ctx.error(ptr + "/memory_gb", "\"memory_gb\" must be positive");
      host.memory_gb = *mem;
    }
    if (h.contains("rank")) {
      ++ranked;
      if (auto r = ctx.get_int(h, ptr, "rank", "a host")) {
        if (*r < 0 || *r >= static_cast<int64_t>(hosts_it->size())) {
          ctx.error(ptr + "/rank", "rank " + std::to_string(*r) + " is outside 0.." + std::to_string(hosts_it->size() - 1));
        } else {
          host.rank = static_cast<int>(*r);
        }
      }
    }
    topo.hosts.push_back(std::move(host));
  }
  const int n = static_cast<int>(topo.hosts.size());
  if (ranked > 0 && ranked < n) {
    for (int i = 0; i < n; ++i)
      if (!(*hosts_it)[static_cast<size_t>(i)].contains("rank")) {
        ctx.error("/hosts/" + std::to_string(i), "host '" + topo.hosts[static_cast<size_t>(i)].name +
                                                     "' has no rank: give every host a rank, or none");
        break;
      }
  } else if (ranked == n) {
    std::map<int, int> rank_line;
    for (int i = 0; i < n; ++i) {
      int r = topo.hosts[static_cast<size_t>(i)].rank;
      if (r < 0) continue;
      std::string ptr = "/hosts/" + std::to_string(i) + "/rank";
      if (auto [it, fresh] = rank_line.emplace(r, ctx.line(ptr)); !fresh)
        ctx.error(ptr, "duplicate rank " + std::to_string(r) + " (first at line " + std::to_string(it->second) + ")");
    }
  } else {
    for (int i = 0; i < n; ++i) topo.hosts[static_cast<size_t>(i)].rank = i;
  }

  // Links.
  std::vector<std::string> host_names;
  for (const auto& h : topo.hosts) host_names.push_back(h.name);
  auto links_it = doc.find("links");
  if (links_it != doc.end() && !links_it->is_array()) {
    ctx.error("/links", "\"links\" must be an array, not " + json_type_name(*links_it));
  } else if (links_it != doc.end()) {
    std::map<std::pair<int, std::string>, int> device_line;  // (host, device) -> line of its link
    for (size_t j = 0; j < links_it->size(); ++j) {
      const json& l = (*links_it)[j];
      std::string ptr = "/links/" + std::to_string(j);
      if (!l.is_object()) {
        ctx.error(ptr, "a link must be an object, not " + json_type_name(l));
        continue;
      }
      ctx.check_keys(l, ptr, {"a", "b", "provider", "a_addr", "b_addr", "a_device", "b_device", "gbps", "medium",
                                   "latency_us", "comment"},
                     "a link");
      Link link;
      link.line = ctx.line(ptr);
      bool good = true;
      for (const char* end : {"a", "b"}) {
        auto name = ctx.get_string(l, ptr, end, true, "a link");
        if (!name) {
          good = false;
          continue;
        }
        int idx = topo.find_host(*name);
        if (idx < 0) {
          std::string msg = "link end \"" + std::string(end) + "\" names host '" + *name + "', which is not among the hosts";
          if (std::string s = closest(*name, host_names); !s.empty()) msg += " (did you mean '" + s + "'?)";
          ctx.error(ptr + "/" + end, msg);
          good = false;
        }
        (end[0] == 'a' ? link.a : link.b) = idx;
      }
      if (good && link.a == link.b) {
        ctx.error(ptr, "link joins host '" + topo.hosts[static_cast<size_t>(link.a)].name + "' to itself");
        good = false;
      }
      if (auto prov = ctx.get_string(l, ptr, "provider", true, "a link")) {
        if (*prov == "tcp") {
          link.provider = LinkProvider::kTcp;
        } else if (*prov == "shm") {
          link.provider = LinkProvider::kShm;
        } else if (*prov == "verbs") {
          link.provider = LinkProvider::kVerbs;
        } else {
          std::string msg = "unknown provider '" + *prov + "' (tcp, shm or verbs";
          if (std::string s = closest(*prov, {"tcp", "shm", "verbs"}); !s.empty()) msg += "; did you mean '" + s + "'?";
          if (*prov == "rdma" || *prov == "jaccl" || *prov == "thunderbolt") msg += "; RDMA over Thunderbolt is 'verbs'";
          ctx.error(ptr + "/provider", msg + ")");
          good = false;
        }
      } else {
        good = false;
      }
      for (const char* key : {"a_addr", "b_addr"}) {
        if (auto addr = ctx.get_string(l, ptr, key, false, "a link")) {
          if (std::string e = check_address(*addr, false); !e.empty()) ctx.error(ptr + "/" + key, e);
          if (link.provider == LinkProvider::kShm) ctx.error(ptr + "/" + key, std::string("an shm link takes no \"") + key + "\"");
          (key[0] == 'a' ? link.a_addr : link.b_addr) = *addr;
        }
      }
      for (const char* key : {"a_device", "b_device"}) {
        if (auto dev = ctx.get_string(l, ptr, key, false, "a link")) {
          if (std::string e = check_device_name(*dev); !e.empty()) ctx.error(ptr + "/" + key, e);
          if (good && link.provider != LinkProvider::kVerbs)
            ctx.error(ptr + "/" + key, std::string("\"") + key + "\" names an RDMA device: only verbs links have one");
          (key[0] == 'a' ? link.a_device : link.b_device) = *dev;
        }
      }
      if (auto g = ctx.get_number(l, ptr, "gbps", "a link")) {
        if (*g <= 0) ctx.error(ptr + "/gbps", "\"gbps\" must be positive");
        link.gbps = *g;
      }
      if (auto m = ctx.get_string(l, ptr, "medium", false, "a link")) {
        if (m->empty()) ctx.error(ptr + "/medium", "\"medium\" must not be empty");
        link.medium = *m;
      }
      if (auto us = ctx.get_number(l, ptr, "latency_us", "a link")) {
        if (*us <= 0) ctx.error(ptr + "/latency_us", "\"latency_us\" must be positive");
        link.latency_us = *us;
      }
      if (!good) continue;
      if (link.provider == LinkProvider::kVerbs) {
        if (link.a_device.empty() || link.b_device.empty()) {
          ctx.error(ptr, "a verbs link needs \"a_device\" and \"b_device\" (the RDMA device at each end, e.g. rdma_en3)");
        } else {
          for (auto [host, dev] : {std::pair{link.a, link.a_device}, std::pair{link.b, link.b_device}}) {
            if (auto [it, fresh] = device_line.emplace(std::pair{host, dev}, link.line); !fresh)
              ctx.error(ptr, "device " + dev + " on host '" + topo.hosts[static_cast<size_t>(host)].name +
                                 "' is already used by the link at line " + std::to_string(it->second) +
                                 " (one device is one cable)");
          }
        }
      }
      if (link.provider == LinkProvider::kShm) {
        const auto& ha = topo.hosts[static_cast<size_t>(link.a)];
        const auto& hb = topo.hosts[static_cast<size_t>(link.b)];
        if (!ha.address.empty() && !hb.address.empty() && address_host(ha.address) != address_host(hb.address))
          ctx.warn(ptr, "shm link between '" + ha.name + "' and '" + hb.name +
                            "', whose addresses name different machines; shared memory works within one machine only");
      }
      topo.links.push_back(std::move(link));
    }
  }

  if (auto c = ctx.get_string(doc, "", "coordinator", false, "the topology")) {
    if (std::string e = check_address(*c, true); !e.empty()) ctx.error("/coordinator", "coordinator: " + e);
    topo.coordinator = *c;
  }
}

bool looks_like_mlx_hostfile(const json& doc) {
  if (doc.is_array()) return true;
  if (!doc.is_object() || doc.contains("version") || doc.contains("links") || doc.contains("coordinator")) return false;
  if (doc.contains("backend") || doc.contains("envs")) return true;
  // {"hosts": [...]} alone: MLX's hosts have "ssh"/"ips", ours "name"/"address".
  auto h = doc.find("hosts");
  if (h == doc.end() || !h->is_array() || h->empty() || !(*h)[0].is_object()) return false;
  const json& first = (*h)[0];
  return !first.contains("name") && !first.contains("address") &&
         (first.contains("ssh") || first.contains("ips") || first.contains("rdma"));
}

}  // namespace detail

Result<Topology> parse_topology(std::string_view text, std::string_view source) {
  using detail::json;
  std::string src(source.empty() ? "<topology>" : source);
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    auto [line, col] = detail::line_col(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] parse error at line L, column C: ".
    if (size_t c = what.find(", column "); c != std::string::npos) {
      if (size_t colon = what.find(": ", c); colon != std::string::npos) what = what.substr(colon + 2);
    }
    return InvalidArgument(src + ":" + std::to_string(line) + ":" + std::to_string(col) + ": invalid JSON: " + what);
  } catch (const json::exception& e) {
    // A number beyond a double ("1e999": out_of_range 406) is not a parse_error.
    std::string what = e.what();
    if (size_t b = what.find("] "); b != std::string::npos) what = what.substr(b + 2);
    return InvalidArgument(src + ": invalid JSON: " + what);
  }
  // Topology files nest 3 deep; refuse pathological nesting before the recursive scanner.
  if (detail::json_max_depth(text) > 32) return InvalidArgument(src + ": JSON nested deeper than 32 levels; not a topology file");
  auto positions = detail::JsonPositions::build(text);
  detail::ParseContext ctx(src, positions);
  for (const auto& d : positions.duplicates()) {
    std::string key = d.pointer.substr(d.pointer.rfind('/') + 1);
    ctx.error_at_line(d.line, "duplicate key '" + key + "' (first at line " + std::to_string(d.first_line) +
                             "); JSON objects take each key once");
  }
  Topology topo;
  topo.source = src;
  if (detail::looks_like_mlx_hostfile(doc)) {
    detail::read_mlx_hostfile(doc, ctx, topo);
  } else {
    detail::read_lattice_topology(doc, ctx, topo);
  }
  if (!ctx.ok()) return ctx.status();
  topo.warnings = ctx.take_warnings();
  return topo;
}

Result<Topology> load_topology(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int e = errno;
    if (e == ENOENT) return NotFound(path + ": no such file");
    return ErrnoError("cannot open " + path, e);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return IoError("cannot read " + path);
  std::string text = ss.str();
  if (text.size() > (16u << 20)) return InvalidArgument(path + ": larger than 16 MiB, not a topology file");
  return parse_topology(text, path);
}

}  // namespace lattice::cluster
