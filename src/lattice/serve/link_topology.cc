#include "lattice/serve/link_topology.h"

#include <algorithm>

#include "lattice/cluster/topology.h"

namespace lattice::serve {

Result<std::map<std::pair<int, int>, LinkFigures>> topology_figures(const std::string& path) {
  LATTICE_ASSIGN_OR_RETURN(cluster::Topology t, cluster::load_topology(path));
  std::map<std::pair<int, int>, LinkFigures> out;
  for (const cluster::Link& l : t.links) {
    if (l.a < 0 || l.b < 0 || size_t(l.a) >= t.hosts.size() || size_t(l.b) >= t.hosts.size()) continue;
    if (!l.gbps || !l.latency_us || *l.gbps <= 0 || *l.latency_us <= 0) continue;
    const int ra = t.hosts[size_t(l.a)].rank, rb = t.hosts[size_t(l.b)].rank;
    out.emplace(std::make_pair(std::min(ra, rb), std::max(ra, rb)), LinkFigures{*l.latency_us, *l.gbps, "topology"});
  }
  return out;
}

}  // namespace lattice::serve
