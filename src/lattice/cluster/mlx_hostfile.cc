// Reading MLX hostfiles, so MLX users can switch without rewriting theirs. Two shapes exist:
//   - a list of hosts: [{"ssh": "m1", "ips": ["10.0.0.1"]}, ...]   (the ring backend)
//   - {"backend": "jaccl", "envs": [...], "hosts": [{"ssh", "ips", "rdma": [...]}, ...]}
// where hosts[i].rdma[j] is the RDMA device on host i whose cable reaches host j: null for
// none, a name, or a list of names for several cables (paired in order with hosts[j].rdma[i]).
//
// Conversion: host i becomes rank i, named after its ssh name (made unique with "-<rank>"
// when several ranks share a machine), addressed by its first ip (else its ssh name). With
// RDMA devices: one verbs link per cable. Without any: tcp links in a ring in file order,
// which is how MLX's ring backend connects them. Keys MLX may add later are warnings, not
// errors: the file belongs to another tool.
#include <map>
#include <set>

#include "lattice/cluster/topology_parse.h"

namespace lattice::cluster::detail {
namespace {

std::string host_name_from_ssh(std::string_view ssh) {
  if (size_t at = ssh.rfind('@'); at != std::string_view::npos) ssh = ssh.substr(at + 1);
  std::string out;
  for (char c : ssh) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-';
    out += ok ? c : '-';
  }
  while (!out.empty() && !((out[0] >= 'a' && out[0] <= 'z') || (out[0] >= 'A' && out[0] <= 'Z') ||
                           (out[0] >= '0' && out[0] <= '9')))
    out.erase(0, 1);
  return out.empty() ? std::string("host") : out.substr(0, 56);
}

// The devices host i lists toward host j: from null, a string or a list of strings.
std::vector<std::string> devices(const json& entry, const std::string& ptr, ParseContext& ctx) {
  std::vector<std::string> out;
  if (entry.is_null()) return out;
  if (entry.is_string()) {
    const std::string& d = entry.get<std::string>();
    if (d.empty()) return out;
    if (std::string e = check_device_name(d); !e.empty()) ctx.error(ptr, e);
    out.push_back(d);
    return out;
  }
  if (entry.is_array()) {
    for (size_t k = 0; k < entry.size(); ++k) {
      if (!entry[k].is_string() || entry[k].get<std::string>().empty()) {
        ctx.error(ptr + "/" + std::to_string(k), "an RDMA device must be a non-empty string, not " + json_type_name(entry[k]));
        continue;
      }
      if (std::string e = check_device_name(entry[k].get<std::string>()); !e.empty()) ctx.error(ptr + "/" + std::to_string(k), e);
      out.push_back(entry[k].get<std::string>());
    }
    return out;
  }
  ctx.error(ptr, "an rdma entry must be null, a device name or a list of names, not " + json_type_name(entry));
  return out;
}

}  // namespace

void read_mlx_hostfile(const json& doc, ParseContext& ctx, Topology& topo) {
  topo.format = "mlx";
  const json* hosts = &doc;
  std::string hosts_ptr;
  if (doc.is_object()) {
    ctx.check_keys(doc, "", {"backend", "envs", "hosts"}, "the MLX hostfile", /*unknown_is_error=*/false);
    if (auto b = ctx.get_string(doc, "", "backend", false, "the MLX hostfile")) topo.mlx_backend = *b;
    if (auto e = doc.find("envs"); e != doc.end()) {
      if (!e->is_array()) {
        ctx.error("/envs", "\"envs\" must be a list of \"NAME=value\" strings");
      } else {
        for (size_t k = 0; k < e->size(); ++k) {
          if ((*e)[k].is_string()) {
            topo.mlx_envs.push_back((*e)[k].get<std::string>());
          } else {
            ctx.error("/envs/" + std::to_string(k), "an env entry must be a \"NAME=value\" string");
          }
        }
      }
    }
    // find(), not operator[]: a const json's operator[] on a missing key reads past the end of
    // the object (undefined behaviour; found by fuzz/topology_fuzz.cc with {"backend": ...}
    // and no "hosts").
    static const json kNone;
    auto it = doc.find("hosts");
    hosts = it == doc.end() ? &kNone : &*it;
    hosts_ptr = "/hosts";
  }
  if (!hosts->is_array() || hosts->empty()) {
    ctx.error(hosts_ptr, "the MLX hostfile's hosts must be a non-empty list");
    return;
  }
  const size_t n = hosts->size();

  // Hosts.
  bool any_rdma = false;
  std::map<std::string, int> base_count;
  std::vector<std::string> base(n);
  std::map<std::string, size_t> at_address;  // address -> the first host there
  for (size_t i = 0; i < n; ++i) {
    const json& h = (*hosts)[i];
    std::string ptr = hosts_ptr + "/" + std::to_string(i);
    Host host;
    host.rank = static_cast<int>(i);
    host.line = ctx.line(ptr);
    if (!h.is_object()) {
      ctx.error(ptr, "an MLX host must be an object, not " + json_type_name(h));
      topo.hosts.push_back(host);
      continue;
    }
    ctx.check_keys(h, ptr, {"ssh", "ips", "rdma"}, "an MLX host", /*unknown_is_error=*/false);
    if (auto ssh = ctx.get_string(h, ptr, "ssh", true, "an MLX host")) {
      host.ssh = *ssh;
      if (ssh->empty()) ctx.error(ptr + "/ssh", "an MLX host's \"ssh\" must name a destination, not \"\"");
    }
    if (auto ips = h.find("ips"); ips != h.end()) {
      if (!ips->is_array()) {
        ctx.error(ptr + "/ips", "\"ips\" must be a list of addresses");
      } else if (!ips->empty()) {
        if (!(*ips)[0].is_string()) {
          ctx.error(ptr + "/ips/0", "an ip must be a string");
        } else {
          host.address = (*ips)[0].get<std::string>();
        }
      }
    }
    if (host.address.empty()) host.address = host_name_from_ssh(host.ssh);
    if (std::string e = check_address(host.address, false); !e.empty()) {
      ctx.error(ptr + "/ips", e);
    } else if (auto [it, fresh] = at_address.emplace(host.address, i);
               !fresh && topo.hosts[it->second].ssh != host.ssh) {
      // Ranks of one machine share its address and its ssh destination (as our own format has
      // it, so the converted file reads back); two destinations at one address are two machines.
      ctx.error(ptr + "/ips", "host " + std::to_string(i) + " (" + host.ssh + ") has the address '" + host.address +
                                  "' of host " + std::to_string(it->second) + " (" + topo.hosts[it->second].ssh +
                                  "): ranks at one address must name the same ssh destination");
    }
    if (auto r = h.find("rdma"); r != h.end() && !r->is_null()) {
      if (!r->is_array()) {
        ctx.error(ptr + "/rdma", "\"rdma\" must be a list with one entry per host");
      } else {
        for (const auto& e : *r) any_rdma = any_rdma || !e.is_null();
      }
    }
    base[i] = host_name_from_ssh(host.ssh);
    ++base_count[base[i]];
    topo.hosts.push_back(std::move(host));
  }
  // Names are unique: a machine named once keeps its name, a shared machine's ranks get
  // "-<rank>", and a name another host has already (an ssh name that itself ends in "-3", or two
  // that clean up alike) gets a further "-<k>" until it is free (a base is at most 56 characters).
  std::set<std::string> taken;
  for (size_t i = 0; i < n; ++i)
    if (base_count[base[i]] == 1) taken.insert(topo.hosts[i].name = base[i]);
  for (size_t i = 0; i < n; ++i) {
    if (base_count[base[i]] == 1) continue;
    std::string name = base[i] + "-" + std::to_string(i);
    for (int k = 2; taken.count(name); ++k) name = base[i] + "-" + std::to_string(i) + "-" + std::to_string(k);
    taken.insert(topo.hosts[i].name = name);
  }
  if (!ctx.ok()) return;

  // Links.
  if (!any_rdma) {
    auto add = [&](size_t a, size_t b) {
      Link l;
      l.a = static_cast<int>(a);
      l.b = static_cast<int>(b);
      l.provider = LinkProvider::kTcp;
      l.line = topo.hosts[a].line;
      topo.links.push_back(l);
    };
    if (n == 2) add(0, 1);
    if (n >= 3)
      for (size_t i = 0; i < n; ++i) add(i, (i + 1) % n);
    return;
  }
  std::vector<std::vector<std::vector<std::string>>> dev(n, std::vector<std::vector<std::string>>(n));
  for (size_t i = 0; i < n; ++i) {
    const json& h = (*hosts)[i];
    std::string ptr = hosts_ptr + "/" + std::to_string(i) + "/rdma";
    auto r = h.find("rdma");
    if (r == h.end() || r->is_null()) continue;
    if (r->size() != n) {
      ctx.error(ptr, "\"rdma\" has " + std::to_string(r->size()) + " entries; it needs one per host (" +
                         std::to_string(n) + ")");
      continue;
    }
    for (size_t j = 0; j < n; ++j) {
      dev[i][j] = devices((*r)[j], ptr + "/" + std::to_string(j), ctx);
      if (i == j && !dev[i][j].empty())
        ctx.error(ptr + "/" + std::to_string(j), "host " + std::to_string(i) + " lists a device toward itself");
    }
  }
  if (!ctx.ok()) return;
  // One device is one cable: it cannot reach two peers.
  for (size_t i = 0; i < n; ++i) {
    std::map<std::string, size_t> seen;
    for (size_t j = 0; j < n; ++j)
      for (const auto& d : dev[i][j])
        if (auto [it, fresh] = seen.emplace(d, j); !fresh)
          ctx.error(hosts_ptr + "/" + std::to_string(i) + "/rdma/" + std::to_string(j),
                    "host " + std::to_string(i) + " lists device " + d + " toward hosts " + std::to_string(it->second) +
                        " and " + std::to_string(j) + "; one device is one cable");
  }
  if (!ctx.ok()) return;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      std::string ptr = hosts_ptr + "/" + std::to_string(i) + "/rdma/" + std::to_string(j);
      if (dev[i][j].size() != dev[j][i].size()) {
        ctx.error(ptr, "host " + std::to_string(i) + " (" + topo.hosts[i].name + ") lists " +
                           std::to_string(dev[i][j].size()) + " device(s) toward host " + std::to_string(j) + " (" +
                           topo.hosts[j].name + "), which lists " + std::to_string(dev[j][i].size()) +
                           " toward it: a cable has a device at both ends");
        continue;
      }
      for (size_t k = 0; k < dev[i][j].size(); ++k) {
        Link l;
        l.a = static_cast<int>(i);
        l.b = static_cast<int>(j);
        l.provider = LinkProvider::kVerbs;
        l.a_device = dev[i][j][k];
        l.b_device = dev[j][i][k];
        l.line = ctx.line(ptr);
        topo.links.push_back(std::move(l));
      }
    }
  }
}

}  // namespace lattice::cluster::detail
