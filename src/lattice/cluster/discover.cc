// The platform-independent half of discovery: interface kinds, the TXT record, and how a
// found node relates to us. The responder itself is in discover_avahi.cc.
#include "lattice/cluster/discover.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lattice/cluster/topology_parse.h"

#ifndef LATTICE_VERSION
#define LATTICE_VERSION "0.0.0"
#endif

namespace lattice::cluster {
namespace fs = std::filesystem;

std::string_view to_string(IfaceKind k) {
  switch (k) {
    case IfaceKind::kRdma: return "rdma";
    case IfaceKind::kThunderbolt: return "thunderbolt";
    case IfaceKind::kEthernet: return "ethernet";
    case IfaceKind::kWifi: return "wifi";
    case IfaceKind::kOther: return "other";
  }
  return "other";
}

std::optional<IfaceKind> parse_iface_kind(std::string_view s) {
  for (auto k : {IfaceKind::kRdma, IfaceKind::kThunderbolt, IfaceKind::kEthernet, IfaceKind::kWifi, IfaceKind::kOther})
    if (s == to_string(k)) return k;
  if (s == "thunderbolt-bridge" || s == "tb") return IfaceKind::kThunderbolt;
  return std::nullopt;
}

std::string_view to_string(NodeStatus s) {
  switch (s) {
    case NodeStatus::kJoinable: return "joinable";
    case NodeStatus::kForeignSecret: return "foreign-secret";
    case NodeStatus::kIncompatible: return "incompatible";
    case NodeStatus::kMalformed: return "malformed";
  }
  return "?";
}

std::string_view lattice_version() { return LATTICE_VERSION; }

uint64_t physical_memory_bytes() {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

namespace {

std::optional<uint32_t> parse_ipv4(const std::string& s) {
  in_addr a{};
  if (::inet_pton(AF_INET, s.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

template <class T>
bool parse_num(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string read_first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

bool valid_iface_name(std::string_view n) {
  return !n.empty() && n.size() < IFNAMSIZ &&
         std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '@'; });
}

}  // namespace

bool same_subnet(const NodeIface& a, const NodeIface& b) {
  if (a.prefix_len != b.prefix_len || a.prefix_len < 0 || a.prefix_len > 32) return false;
  auto x = parse_ipv4(a.ipv4), y = parse_ipv4(b.ipv4);
  if (!x || !y) return false;
  uint32_t mask = a.prefix_len == 0 ? 0 : ~uint32_t{0} << (32 - a.prefix_len);
  return (*x & mask) == (*y & mask) && *x != *y;
}

Result<std::map<std::string, KindOverride>> parse_kind_override(std::string_view text) {
  std::map<std::string, KindOverride> out;
  while (!text.empty()) {
    size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return InvalidArgument(std::string(kIfaceKindEnv) + ": '" + std::string(item) +
                             "' is not IFACE=KIND (e.g. en5=thunderbolt,eth1=rdma@rxe0)");
    std::string name(item.substr(0, eq));
    std::string_view rest = item.substr(eq + 1), device;
    if (size_t at = rest.find('@'); at != std::string_view::npos) {
      device = rest.substr(at + 1);
      rest = rest.substr(0, at);
    }
    auto kind = parse_iface_kind(rest);
    if (!kind)
      return InvalidArgument(std::string(kIfaceKindEnv) + ": unknown kind '" + std::string(rest) + "' for " + name +
                             " (rdma, thunderbolt, ethernet, wifi or other)");
    if (!device.empty() && *kind != IfaceKind::kRdma)
      return InvalidArgument(std::string(kIfaceKindEnv) + ": only an rdma interface names a device (" + name + ")");
    out[name] = {*kind, std::string(device)};
  }
  return out;
}

IfaceKind detect_kind(const std::string& sysfs, const std::string& name, std::string* rdma_device) {
  std::error_code ec;
  fs::path net = fs::path(sysfs) / "class/net" / name;
  if (fs::exists(net / "wireless", ec) || fs::exists(net / "phy80211", ec)) return IfaceKind::kWifi;
  // An RDMA device whose port is bound to this netdev (hardware RoCE and soft RoCE alike).
  fs::path ib = fs::path(sysfs) / "class/infiniband";
  if (fs::is_directory(ib, ec)) {
    for (const auto& dev : fs::directory_iterator(ib, ec)) {
      fs::path ports = dev.path() / "ports";
      for (const auto& port : fs::directory_iterator(ports, ec)) {
        fs::path ndevs = port.path() / "gid_attrs/ndevs";
        for (const auto& nd : fs::directory_iterator(ndevs, ec)) {
          if (read_first_line(nd.path()) == name) {
            if (rdma_device) *rdma_device = dev.path().filename().string();
            return IfaceKind::kRdma;
          }
        }
      }
    }
  }
  fs::path driver = fs::read_symlink(net / "device/driver", ec);
  if (!ec) {
    std::string d = driver.filename().string();
    if (d == "thunderbolt-net" || d == "thunderbolt_net") return IfaceKind::kThunderbolt;
  }
  if (read_first_line(net / "type") == "1") return IfaceKind::kEthernet;
  return IfaceKind::kOther;
}

Result<std::vector<NodeIface>> local_interfaces() {
  std::map<std::string, KindOverride> over;
  if (const char* env = std::getenv(kIfaceKindEnv)) {
    LATTICE_ASSIGN_OR_RETURN(over, parse_kind_override(env));
  }
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return ErrnoError("getifaddrs", errno);
  std::vector<NodeIface> out;
  for (ifaddrs* p = list; p; p = p->ifa_next) {
    if (!p->ifa_addr || p->ifa_addr->sa_family != AF_INET || !p->ifa_netmask) continue;
    if ((p->ifa_flags & IFF_LOOPBACK) || !(p->ifa_flags & IFF_UP)) continue;
    if (!valid_iface_name(p->ifa_name)) continue;
    NodeIface i;
    i.name = p->ifa_name;
    char buf[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(p->ifa_addr)->sin_addr, buf, sizeof buf);
    i.ipv4 = buf;
    uint32_t mask = ntohl(reinterpret_cast<sockaddr_in*>(p->ifa_netmask)->sin_addr.s_addr);
    i.prefix_len = __builtin_popcount(mask);
    if (auto it = over.find(i.name); it != over.end()) {
      i.kind = it->second.kind;
      i.rdma_device = it->second.rdma_device;
    } else {
      i.kind = detect_kind("/sys", i.name, &i.rdma_device);
    }
    out.push_back(std::move(i));
  }
  ::freeifaddrs(list);
  std::sort(out.begin(), out.end(), [](const NodeIface& a, const NodeIface& b) { return a.name < b.name; });
  return out;
}

std::vector<std::string> encode_txt(const Announcement& a) {
  std::vector<std::string> txt = {"lv=" + a.version, "dp=" + std::to_string(a.protocol), "fp=" + a.fingerprint,
                                  "mem=" + std::to_string(a.memory_bytes), "name=" + a.name};
  for (const auto& i : a.ifaces) {
    std::string e = "if." + i.name + "=" + std::string(to_string(i.kind)) + "," + i.ipv4 + "/" + std::to_string(i.prefix_len);
    if (!i.rdma_device.empty()) e += "," + i.rdma_device;
    txt.push_back(std::move(e));
  }
  return txt;
}

Result<Announcement> decode_txt(const std::vector<std::string>& txt) {
  Announcement a;
  a.protocol = -1;
  for (const auto& e : txt) {
    size_t eq = e.find('=');
    if (eq == std::string::npos) continue;  // a boolean attribute: not ours
    std::string key = e.substr(0, eq), value = e.substr(eq + 1);
    auto bad = [&](const std::string& what) { return Corrupt("TXT entry '" + e.substr(0, 80) + "': " + what); };
    if (key == "lv") {
      a.version = value;
    } else if (key == "dp") {
      if (!parse_num(value, a.protocol)) return bad("not a protocol number");
    } else if (key == "fp") {
      a.fingerprint = value;
    } else if (key == "mem") {
      if (!parse_num(value, a.memory_bytes)) return bad("not a byte count");
    } else if (key == "name") {
      a.name = value;
    } else if (key.rfind("if.", 0) == 0) {
      NodeIface i;
      i.name = key.substr(3);
      if (!valid_iface_name(i.name)) return bad("not an interface name");
      size_t c1 = value.find(',');
      if (c1 == std::string::npos) return bad("expected KIND,IPV4/PREFIX[,DEVICE]");
      auto kind = parse_iface_kind(value.substr(0, c1));
      i.kind = kind.value_or(IfaceKind::kOther);  // a kind newer than us: the least preferred
      std::string rest = value.substr(c1 + 1);
      if (size_t c2 = rest.find(','); c2 != std::string::npos) {
        i.rdma_device = rest.substr(c2 + 1);
        rest = rest.substr(0, c2);
      }
      size_t slash = rest.find('/');
      if (slash == std::string::npos || !parse_num(std::string_view(rest).substr(slash + 1), i.prefix_len) ||
          i.prefix_len < 0 || i.prefix_len > 32)
        return bad("expected IPV4/PREFIX");
      i.ipv4 = rest.substr(0, slash);
      if (!parse_ipv4(i.ipv4)) return bad("not an IPv4 address");
      a.ifaces.push_back(std::move(i));
    }
  }
  if (a.protocol < 0) return Corrupt("no discovery protocol (dp=) in the TXT record");
  if (a.version.empty()) return Corrupt("no lattice version (lv=) in the TXT record");
  if (!a.name.empty() && !detail::check_host_name(a.name).empty()) return Corrupt(detail::check_host_name(a.name));
  std::sort(a.ifaces.begin(), a.ifaces.end(), [](const NodeIface& x, const NodeIface& y) { return x.name < y.name; });
  return a;
}

NodeStatus classify_node(const Announcement& a, std::string_view our_fingerprint, std::string_view our_version,
                         std::string* why) {
  auto major_minor = [](std::string_view v) { return v.substr(0, v.find('.', v.find('.') + 1)); };
  if (a.protocol != kDiscoverProtocol) {
    if (why) *why = "discovery protocol " + std::to_string(a.protocol) + ", we speak " + std::to_string(kDiscoverProtocol);
    return NodeStatus::kIncompatible;
  }
  if (major_minor(a.version) != major_minor(our_version)) {
    if (why) *why = "lattice " + a.version + ", we are " + std::string(our_version) + " (major.minor must match)";
    return NodeStatus::kIncompatible;
  }
  if (a.fingerprint != our_fingerprint) {
    if (why) *why = "secret fingerprint " + a.fingerprint + ", ours is " + std::string(our_fingerprint);
    return NodeStatus::kForeignSecret;
  }
  if (why) why->clear();
  return NodeStatus::kJoinable;
}

}  // namespace lattice::cluster
