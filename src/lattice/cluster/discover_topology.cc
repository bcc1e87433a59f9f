// discover_topology.h: probing in rounds, the choice of links, and the file.
#include "lattice/cluster/discover_topology.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <ctime>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "lattice/cluster/topology_parse.h"

namespace lattice::cluster {
namespace {

using ojson = nlohmann::ordered_json;

std::string fmt(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

double round_to(double v, int decimals) {
  double p = std::pow(10.0, decimals);
  return std::round(v * p) / p;
}

std::string figures(const ProbeResult& r) { return fmt(r.gbps, 2) + " Gbit/s, " + fmt(r.latency_us, 1) + " us"; }

std::string describe(const LinkProbe& p) {
  std::string s = p.a_iface.name + " (" + std::string(to_string(p.a_iface.kind)) + ") " + p.a_iface.ipv4 + " <-> " +
                  p.b_iface.name + " (" + std::string(to_string(p.b_iface.kind)) + ") " + p.b_iface.ipv4;
  const std::string devices = p.a_iface.rdma_device + " <-> " + p.b_iface.rdma_device;
  switch (p.verbs) {
    case VerbsProbe::kNotTried: break;
    case VerbsProbe::kMeasured:
      return s + ": over verbs (" + devices + ") " + figures(p.result) + "; over TCP on the interfaces " +
             (p.tcp_ok ? figures(p.tcp) : "failed: " + p.error);
    case VerbsProbe::kFailed:
      return s + ": " + (p.ok ? "over TCP " + figures(p.result) : "probe failed: " + p.error) +
             "; downgraded from rdma: the verbs probe (" + devices + ") failed: " + p.verbs_error;
  }
  if (p.ok) return s + ": " + figures(p.result);
  return s + ": probe failed: " + p.error;
}

// Rounds in which every node is in at most one pair (the circle method), over member slots.
std::vector<std::vector<std::pair<int, int>>> rounds_of(int n) {
  std::vector<int> slot(static_cast<size_t>(n % 2 ? n + 1 : n));
  for (size_t i = 0; i < slot.size(); ++i) slot[i] = static_cast<int>(i) < n ? static_cast<int>(i) : -1;
  std::vector<std::vector<std::pair<int, int>>> out;
  const size_t m = slot.size();
  for (size_t r = 0; m >= 2 && r + 1 < m; ++r) {
    std::vector<std::pair<int, int>> round;
    for (size_t i = 0; i < m / 2; ++i) {
      int x = slot[i], y = slot[m - 1 - i];
      if (x >= 0 && y >= 0) round.emplace_back(std::min(x, y), std::max(x, y));
    }
    out.push_back(std::move(round));
    std::rotate(slot.begin() + 1, slot.end() - 1, slot.end());
  }
  return out;
}

// The member's address on the best subnet that every member has an interface on.
std::vector<std::string> host_addresses(const std::vector<DiscoveredNode>& nodes, const std::vector<int>& members) {
  struct Net {
    IfaceKind worst = IfaceKind::kRdma;
    std::vector<std::string> ip;  // by member
    int present = 0;
  };
  std::map<std::string, Net> nets;  // "network/prefix" of the first member's interfaces
  const auto& first = nodes[static_cast<size_t>(members[0])].announcement.ifaces;
  for (const auto& f : first) {
    Net net;
    net.ip.resize(members.size());
    for (size_t m = 0; m < members.size(); ++m) {
      for (const auto& i : nodes[static_cast<size_t>(members[m])].announcement.ifaces) {
        if (m == 0 ? i.name != f.name : !same_subnet(i, f)) continue;
        net.ip[m] = i.ipv4;
        net.worst = std::max(net.worst, i.kind);
        ++net.present;
        break;
      }
    }
    if (net.present == static_cast<int>(members.size())) nets[f.name] = std::move(net);
  }
  const Net* best = nullptr;
  for (const auto& [name, net] : nets)
    if (!best || net.worst < best->worst) best = &net;
  std::vector<std::string> out(members.size());
  for (size_t m = 0; m < members.size(); ++m) {
    const auto& n = nodes[static_cast<size_t>(members[m])];
    out[m] = best ? best->ip[m] : (n.seen_at.empty() ? n.announcement.name : n.seen_at.front());
  }
  return out;
}

}  // namespace

IfaceKind link_kind(const NodeIface& a, const NodeIface& b) { return std::max(a.kind, b.kind); }

bool verbs_capable(const LinkProbe& p) {
  return link_kind(p.a_iface, p.b_iface) == IfaceKind::kRdma && !p.a_iface.rdma_device.empty() &&
         !p.b_iface.rdma_device.empty();
}

void apply_verbs_probe(LinkProbe& p, const Result<ProbeResult>& verbs) {
  p.tcp_ok = p.ok;
  p.tcp = p.result;
  if (verbs.ok()) {
    p.verbs = VerbsProbe::kMeasured;
    p.ok = true;
    p.result = *verbs;
    return;
  }
  // TCP on the device's interface still answered: a wire, but not one lattice can use as RDMA.
  p.verbs = VerbsProbe::kFailed;
  p.verbs_error = verbs.status().to_string();
  p.kind = IfaceKind::kEthernet;
}

void choose_links(std::vector<LinkProbe>& probes) {
  std::map<std::pair<int, int>, LinkProbe*> best;
  for (auto& p : probes) {
    p.chosen = false;
    if (!p.ok) continue;
    auto& b = best[{p.a, p.b}];
    if (!b || p.kind < b->kind || (p.kind == b->kind && p.result.gbps > b->result.gbps)) b = &p;
  }
  for (auto& [pair, p] : best) p->chosen = true;
}

std::string render_discovered(const std::vector<DiscoveredNode>& nodes, const std::vector<int>& members,
                              const std::vector<LinkProbe>& probes) {
  ojson doc;
  doc["version"] = 1;
  char when[32];
  std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string comment = std::string("measured by `lattice topo --discover` at ") + when +
                        "; gbps and latency_us are the probe's figures; edit freely";
  for (const auto& n : nodes)
    if (n.status != NodeStatus::kJoinable)
      comment += "; not joined: " + n.announcement.name + " (" + std::string(to_string(n.status)) + ": " + n.why + ")";
  doc["comment"] = comment;
  auto addrs = host_addresses(nodes, members);
  ojson hosts = ojson::array();
  std::map<int, int> rank_of;
  for (size_t m = 0; m < members.size(); ++m) {
    const auto& n = nodes[static_cast<size_t>(members[m])];
    rank_of[members[m]] = static_cast<int>(m);
    ojson h;
    h["name"] = n.announcement.name;
    h["address"] = addrs[m];
    if (n.announcement.memory_bytes > 0)
      h["memory_gb"] = std::max(0.1, round_to(static_cast<double>(n.announcement.memory_bytes) / (1ull << 30), 1));
    h["rank"] = static_cast<int>(m);
    std::string ifs;
    for (const auto& i : n.announcement.ifaces)
      ifs += (ifs.empty() ? "" : ", ") + i.name + " " + std::string(to_string(i.kind)) + " " + i.ipv4 + "/" +
             std::to_string(i.prefix_len);
    h["comment"] = "lattice " + n.announcement.version + "; interfaces: " + ifs;
    hosts.push_back(std::move(h));
  }
  doc["hosts"] = std::move(hosts);
  ojson links = ojson::array();
  for (const auto& p : probes) {
    if (!p.chosen) continue;
    ojson l;
    l["a"] = nodes[static_cast<size_t>(p.a)].announcement.name;
    l["b"] = nodes[static_cast<size_t>(p.b)].announcement.name;
    const bool verbs = p.kind == IfaceKind::kRdma && verbs_capable(p);
    l["provider"] = verbs ? "verbs" : "tcp";
    l["a_addr"] = p.a_iface.ipv4;
    l["b_addr"] = p.b_iface.ipv4;
    if (verbs) {
      l["a_device"] = p.a_iface.rdma_device;
      l["b_device"] = p.b_iface.rdma_device;
    }
    if (p.result.gbps > 0) l["gbps"] = std::max(0.001, round_to(p.result.gbps, 3));
    if (p.result.latency_us > 0) l["latency_us"] = std::max(0.1, round_to(p.result.latency_us, 1));
    std::string c = std::string(to_string(p.kind)) + ": " + describe(p);
    for (const auto& q : probes)
      if (&q != &p && q.a == p.a && q.b == p.b) c += "; not chosen: " + describe(q);
    if (verbs && p.verbs == VerbsProbe::kMeasured) c += " (gbps and latency_us measured over verbs on the devices)";
    if (verbs && p.verbs != VerbsProbe::kMeasured) c += " (gbps and latency_us measured over TCP on the devices' interfaces)";
    l["comment"] = c;
    links.push_back(std::move(l));
  }
  doc["links"] = std::move(links);
  return doc.dump(2) + "\n";
}

Result<DiscoveredCluster> discover_topology(Responder& responder, const crypto::ClusterSecret& secret,
                                            const DiscoverOptions& options) {
  DiscoveredCluster c;
  BrowseOptions bo = options.browse;
  if (bo.fingerprint.empty()) bo.fingerprint = secret.fingerprint();
  LATTICE_ASSIGN_OR_RETURN(c.nodes, responder.browse(bo));
  for (size_t i = 0; i < c.nodes.size(); ++i)
    if (c.nodes[i].status == NodeStatus::kJoinable) c.members.push_back(static_cast<int>(i));
  if (c.members.empty()) {
    std::string m = "no node of this cluster (secret " + secret.fingerprint() + ") answered";
    for (const auto& n : c.nodes) m += "; " + n.announcement.name + ": " + std::string(to_string(n.status)) + " (" + n.why + ")";
    if (c.nodes.empty()) m += "; nothing announces _lattice._tcp here (start `lattice discover --announce` on each node)";
    return NotFound(m);
  }
  // Every shared subnet of every pair, probed from the first node of the pair.
  for (size_t x = 0; x < c.members.size(); ++x)
    for (size_t y = x + 1; y < c.members.size(); ++y) {
      const auto& na = c.nodes[static_cast<size_t>(c.members[x])].announcement;
      const auto& nb = c.nodes[static_cast<size_t>(c.members[y])].announcement;
      for (const auto& ia : na.ifaces)
        for (const auto& ib : nb.ifaces)
          if (same_subnet(ia, ib)) {
            LinkProbe p;
            p.a = c.members[x], p.b = c.members[y];
            p.a_iface = ia, p.b_iface = ib;
            p.kind = link_kind(ia, ib);
            c.probes.push_back(std::move(p));
          }
    }
  auto run_pair = [&](int a, int b) {
    const auto& from = c.nodes[static_cast<size_t>(a)];
    const auto& to = c.nodes[static_cast<size_t>(b)];
    for (auto& p : c.probes) {
      if (p.a != a || p.b != b) continue;
      // Reach A's probe server at an address we saw it at, and have it probe B over this subnet.
      std::vector<std::string> via = from.seen_at;
      via.push_back(p.a_iface.ipv4);
      Status last = Unavailable("no address");
      std::string answered;  // the address A's probe server answered at
      for (const auto& v : via) {
        auto r = probe_between(secret, v, from.announcement.probe_port, p.b_iface.ipv4, to.announcement.probe_port,
                               options.probe);
        if (r.ok()) {
          p.ok = true;
          p.result = *r;
          answered = v;
          break;
        }
        last = r.status();
        if (last.code() == ErrorCode::kUnavailable) {  // A answered: B is what failed
          answered = v;
          break;
        }
      }
      if (!p.ok) p.error = last.to_string();
      // Both ends RDMA: A measures B over verbs too, its device to B's, set up over this subnet.
      if (verbs_capable(p) && !answered.empty())
        apply_verbs_probe(p, probe_verbs_between(secret, answered, from.announcement.probe_port, p.b_iface.ipv4,
                                                 to.announcement.probe_port, p.a_iface.rdma_device,
                                                 p.b_iface.rdma_device, options.probe));
    }
  };
  std::vector<int> slot_node = c.members;
  for (const auto& round : rounds_of(static_cast<int>(c.members.size()))) {
    std::vector<std::thread> threads;
    for (auto [x, y] : round) threads.emplace_back(run_pair, slot_node[static_cast<size_t>(x)], slot_node[static_cast<size_t>(y)]);
    for (auto& t : threads) t.join();
  }
  choose_links(c.probes);
  c.text = render_discovered(c.nodes, c.members, c.probes);
  LATTICE_ASSIGN_OR_RETURN(c.topology, parse_topology(c.text, options.source));
  return c;
}

Result<DiscoveredCluster> discover_to_file(const crypto::ClusterSecret& secret, const DiscoverOptions& options,
                                           const std::string& path) {
  LATTICE_ASSIGN_OR_RETURN(auto responder, make_responder());
  DiscoverOptions o = options;
  o.source = path;
  LATTICE_ASSIGN_OR_RETURN(DiscoveredCluster c, discover_topology(*responder, secret, o));
  LATTICE_RETURN_IF_ERROR(write_text_file(path, c.text));
  return c;
}

std::string render_probes(const DiscoveredCluster& c) {
  std::string out;
  for (const auto& p : c.probes) {
    std::string kind(to_string(p.kind));
    if (p.verbs == VerbsProbe::kMeasured) kind += "/verbs";
    if (p.verbs == VerbsProbe::kFailed) kind += " (rdma: verbs failed)";
    const std::string pair = c.nodes[static_cast<size_t>(p.a)].announcement.name + " - " +
                             c.nodes[static_cast<size_t>(p.b)].announcement.name;
    char line[512];
    if (p.ok) {
      std::snprintf(line, sizeof line, "  %-24s %-12s %-32s %9.3f Gbit/s %8.1f us%s\n", pair.c_str(),
                    kind.c_str(), (p.a_iface.ipv4 + " -> " + p.b_iface.ipv4).c_str(), p.result.gbps, p.result.latency_us, p.chosen ? "  chosen" : "");
    } else {
      std::snprintf(line, sizeof line, "  %-24s %-12s %-32s failed: %s\n", pair.c_str(),
                    kind.c_str(), (p.a_iface.ipv4 + " -> " + p.b_iface.ipv4).c_str(), p.error.substr(0, 200).c_str());
    }
    out += line;
  }
  return out;
}

Result<Announcer> start_announcer(const crypto::ClusterSecret& secret, const AnnounceOptions& options) {
  Announcer a;
  a.announcement.name = options.name;
  if (a.announcement.name.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) return ErrnoError("gethostname", errno);
    a.announcement.name = host;
    if (auto dot = a.announcement.name.find('.'); dot != std::string::npos) a.announcement.name.resize(dot);
  }
  if (std::string e = detail::check_host_name(a.announcement.name); !e.empty()) return InvalidArgument("node name: " + e);
  a.announcement.version = options.version.empty() ? std::string(lattice_version()) : options.version;
  a.announcement.fingerprint = secret.fingerprint();
  a.announcement.memory_bytes = physical_memory_bytes();
  LATTICE_ASSIGN_OR_RETURN(a.announcement.ifaces, local_interfaces());
  if (a.announcement.ifaces.empty()) return Unavailable("no IPv4 interface is up (besides loopback): nothing to announce on");
  LATTICE_ASSIGN_OR_RETURN(a.probe, ProbeServer::start(secret, options.probe_port));
  a.announcement.probe_port = a.probe->port();
  LATTICE_ASSIGN_OR_RETURN(a.responder, make_responder());
  LATTICE_RETURN_IF_ERROR(a.responder->announce(a.announcement, Deadline::after(options.timeout)));
  return a;
}

Status write_text_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return ErrnoError("cannot write " + tmp, errno);
    out << text;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      return IoError("cannot write " + tmp);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    std::remove(tmp.c_str());
    return ErrnoError("cannot rename " + tmp + " to " + path, e);
  }
  return Status::Ok();
}

}  // namespace lattice::cluster
