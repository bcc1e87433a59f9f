// Classifying a topology's shape and printing it (text, Graphviz, normalized JSON).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "lattice/cluster/topology.h"

namespace lattice::cluster {

std::string_view to_string(Shape s) {
  switch (s) {
    case Shape::kSingle: return "single host";
    case Shape::kFullMesh: return "full mesh";
    case Shape::kRing: return "ring";
    case Shape::kPartial: return "partial";
    case Shape::kDisconnected: return "disconnected";
  }
  return "?";
}

Classification classify(const Topology& topo) {
  Classification c;
  const size_t n = topo.hosts.size();
  c.cables.assign(n, std::vector<int>(n, 0));
  for (const auto& l : topo.links) {
    if (l.a < 0 || l.b < 0 || static_cast<size_t>(l.a) >= n || static_cast<size_t>(l.b) >= n || l.a == l.b) continue;
    ++c.cables[static_cast<size_t>(l.a)][static_cast<size_t>(l.b)];
    ++c.cables[static_cast<size_t>(l.b)][static_cast<size_t>(l.a)];
  }
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j)
      if (c.cables[i][j] == 0) c.missing_pairs.emplace_back(static_cast<int>(i), static_cast<int>(j));
  std::vector<int> comp(n, -1);
  for (size_t s = 0; s < n; ++s) {
    if (comp[s] >= 0) continue;
    std::vector<int> members{static_cast<int>(s)};
    comp[s] = static_cast<int>(c.components.size());
    for (size_t k = 0; k < members.size(); ++k) {
      size_t u = static_cast<size_t>(members[k]);
      for (size_t v = 0; v < n; ++v)
        if (c.cables[u][v] > 0 && comp[v] < 0) {
          comp[v] = comp[s];
          members.push_back(static_cast<int>(v));
        }
    }
    std::sort(members.begin(), members.end());
    c.components.push_back(std::move(members));
  }
  if (n <= 1) {
    c.shape = Shape::kSingle;
    return c;
  }
  if (c.components.size() > 1) {
    c.shape = Shape::kDisconnected;
    return c;
  }
  if (c.missing_pairs.empty()) {
    c.shape = Shape::kFullMesh;
    c.also_ring = n == 3;
    if (c.also_ring) c.ring_order = {0, 1, 2};
    return c;
  }
  // Connected, and every host has exactly two distinct neighbours: a single cycle.
  bool degree_two = n >= 4;
  for (size_t i = 0; i < n && degree_two; ++i)
    degree_two = std::count_if(c.cables[i].begin(), c.cables[i].end(), [](int k) { return k > 0; }) == 2;
  if (degree_two) {
    c.shape = Shape::kRing;
    int prev = -1, cur = 0;
    do {
      c.ring_order.push_back(cur);
      int next = -1;
      for (size_t v = 0; v < n; ++v)
        if (c.cables[static_cast<size_t>(cur)][v] > 0 && static_cast<int>(v) != prev) {
          next = static_cast<int>(v);
          break;
        }
      prev = cur;
      cur = next;
    } while (cur != 0 && cur >= 0 && c.ring_order.size() <= n);
    return c;
  }
  c.shape = Shape::kPartial;
  return c;
}

namespace {

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

std::string fmt_num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string describe_link(const Link& l) {
  std::string s(to_string(l.provider));
  if (!l.a_device.empty() || !l.b_device.empty()) s += " " + l.a_device + " <-> " + l.b_device;
  if (!l.a_addr.empty() || !l.b_addr.empty())
    s += " " + (l.a_addr.empty() ? std::string("*") : l.a_addr) + " <-> " + (l.b_addr.empty() ? std::string("*") : l.b_addr);
  if (l.gbps) s += " (" + fmt_num(*l.gbps) + " Gbit/s)";
  return s;
}

std::string dot_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string render_text(const Topology& topo, const Classification& c) {
  std::ostringstream o;
  const size_t n = topo.hosts.size();
  o << "topology " << topo.source << " (" << topo.format << " format): " << n << (n == 1 ? " host, " : " hosts, ")
    << topo.links.size() << (topo.links.size() == 1 ? " link\n" : " links\n");
  if (topo.format == "mlx" && !topo.mlx_backend.empty()) o << "MLX backend: " << topo.mlx_backend << "\n";
  if (!topo.coordinator.empty()) o << "coordinator: " << topo.coordinator << "\n";

  size_t wn = 4, wa = 7;
  for (const auto& h : topo.hosts) {
    wn = std::max(wn, h.name.size());
    wa = std::max(wa, h.address.size());
  }
  o << "\nhosts:\n  " << pad("rank", 6) << pad("name", wn + 2) << pad("address", wa + 2) << "ssh / memory\n";
  std::vector<size_t> by_rank(n);
  for (size_t i = 0; i < n; ++i) by_rank[i] = i;
  std::sort(by_rank.begin(), by_rank.end(), [&](size_t a, size_t b) { return topo.hosts[a].rank < topo.hosts[b].rank; });
  for (size_t i : by_rank) {
    const auto& h = topo.hosts[i];
    o << "  " << pad(std::to_string(h.rank), 6) << pad(h.name, wn + 2) << pad(h.address, wa + 2);
    std::string extra = h.ssh;
    if (h.memory_gb) extra += (extra.empty() ? "" : ", ") + fmt_num(*h.memory_gb) + " GB";
    o << (extra.empty() ? "-" : extra) << "\n";
  }

  o << "\nlinks (per pair):\n";
  if (topo.links.empty()) o << "  none\n";
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      if (c.cables[i][j] == 0) continue;
      int k = c.cables[i][j];
      o << "  " << topo.hosts[i].name << " -- " << topo.hosts[j].name << ": " << k << (k == 1 ? " cable" : " cables") << "\n";
      for (const auto& l : topo.links)
        if ((static_cast<size_t>(l.a) == i && static_cast<size_t>(l.b) == j) ||
            (static_cast<size_t>(l.a) == j && static_cast<size_t>(l.b) == i)) {
          // Print from i's side whichever way the file wrote it.
          Link shown = l;
          if (static_cast<size_t>(l.a) != i) {
            std::swap(shown.a_addr, shown.b_addr);
            std::swap(shown.a_device, shown.b_device);
          }
          o << "      " << describe_link(shown) << "\n";
        }
    }

  o << "\nshape: " << to_string(c.shape);
  auto names = [&](const std::vector<int>& v, const char* sep) {
    std::string s;
    for (size_t k = 0; k < v.size(); ++k) s += (k ? sep : "") + topo.hosts[static_cast<size_t>(v[k])].name;
    return s;
  };
  if (c.shape == Shape::kRing || c.also_ring) {
    o << (c.also_ring ? " (also a ring: " : " (") << names(c.ring_order, " -> ") << " -> "
      << topo.hosts[static_cast<size_t>(c.ring_order[0])].name << ")";
  }
  o << "\n";
  if (c.shape == Shape::kPartial || c.shape == Shape::kRing) {
    o << "  pairs without a direct link (traffic between them is forwarded):";
    size_t shown = 0;
    for (auto [a, b] : c.missing_pairs) {
      if (++shown > 24) {
        o << " ...";
        break;
      }
      o << " " << topo.hosts[static_cast<size_t>(a)].name << "--" << topo.hosts[static_cast<size_t>(b)].name;
    }
    o << "\n";
  }
  if (c.shape == Shape::kDisconnected) {
    o << "  hosts in separate groups cannot reach each other:";
    for (const auto& comp : c.components) o << " {" << names(comp, ", ") << "}";
    o << "\n";
  }

  if (n > 1) {
    o << "\nadjacency (cables per pair):\n";
    size_t w = 2;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) w = std::max(w, std::to_string(c.cables[i][j]).size() + 1);
    w = std::max(w, std::to_string(n - 1).size() + 1);
    o << "  " << pad("", 4 + wn);
    for (size_t j = 0; j < n; ++j) {
      std::string h = std::to_string(j);
      o << std::string(w - h.size(), ' ') << h;
    }
    o << "\n";
    for (size_t i = 0; i < n; ++i) {
      o << "  " << pad(std::to_string(i), 4) << pad(topo.hosts[i].name, wn);
      for (size_t j = 0; j < n; ++j) {
        std::string cell = i == j ? "-" : c.cables[i][j] == 0 ? "." : std::to_string(c.cables[i][j]);
        o << std::string(w - cell.size(), ' ') << cell;
      }
      o << "\n";
    }
  }
  if (!topo.warnings.empty()) {
    o << "\nwarnings:\n";
    for (const auto& w : topo.warnings) o << "  " << w << "\n";
  }
  return o.str();
}

std::string render_dot(const Topology& topo) {
  std::ostringstream o;
  o << "graph \"lattice\" {\n";
  o << "  label=\"" << dot_escape(topo.source) << "\";\n";
  o << "  node [shape=box, fontname=\"Helvetica\"];\n";
  o << "  edge [fontname=\"Helvetica\", fontsize=10];\n";
  for (const auto& h : topo.hosts)
    o << "  \"" << dot_escape(h.name) << "\" [label=\"" << dot_escape(h.name) << "\\nrank " << h.rank << "\\n"
      << dot_escape(h.address) << "\"];\n";
  for (const auto& l : topo.links) {
    if (l.a < 0 || l.b < 0) continue;
    std::string label(to_string(l.provider));
    if (!l.a_device.empty()) label += "\\n" + dot_escape(l.a_device) + " : " + dot_escape(l.b_device);
    if (l.gbps) label += "\\n" + fmt_num(*l.gbps) + " Gbit/s";
    const char* style = l.provider == LinkProvider::kVerbs ? "color=\"blue\", penwidth=2"
                        : l.provider == LinkProvider::kShm ? "color=\"darkgreen\", style=dotted"
                                                           : "color=\"black\", style=dashed";
    o << "  \"" << dot_escape(topo.hosts[static_cast<size_t>(l.a)].name) << "\" -- \""
      << dot_escape(topo.hosts[static_cast<size_t>(l.b)].name) << "\" [label=\"" << label << "\", " << style << "];\n";
  }
  o << "}\n";
  return o.str();
}

std::string render_json(const Topology& topo) {
  nlohmann::ordered_json j;
  j["version"] = 1;
  auto& hosts = j["hosts"] = nlohmann::ordered_json::array();
  for (const auto& h : topo.hosts) {
    nlohmann::ordered_json e;
    e["name"] = h.name;
    e["address"] = h.address;
    if (!h.ssh.empty()) e["ssh"] = h.ssh;
    if (h.memory_gb) e["memory_gb"] = *h.memory_gb;
    if (!h.machine.empty()) e["machine"] = h.machine;
    e["rank"] = h.rank;
    hosts.push_back(std::move(e));
  }
  auto& links = j["links"] = nlohmann::ordered_json::array();
  for (const auto& l : topo.links) {
    nlohmann::ordered_json e;
    e["a"] = topo.hosts[static_cast<size_t>(l.a)].name;
    e["b"] = topo.hosts[static_cast<size_t>(l.b)].name;
    e["provider"] = std::string(to_string(l.provider));
    if (!l.a_addr.empty()) e["a_addr"] = l.a_addr;
    if (!l.b_addr.empty()) e["b_addr"] = l.b_addr;
    if (!l.a_device.empty()) e["a_device"] = l.a_device;
    if (!l.b_device.empty()) e["b_device"] = l.b_device;
    if (l.gbps) e["gbps"] = *l.gbps;
    if (!l.medium.empty()) e["medium"] = l.medium;
    if (l.latency_us) e["latency_us"] = *l.latency_us;
    links.push_back(std::move(e));
  }
  if (!topo.coordinator.empty()) j["coordinator"] = topo.coordinator;
  return j.dump(2) + "\n";
}

}  // namespace lattice::cluster
