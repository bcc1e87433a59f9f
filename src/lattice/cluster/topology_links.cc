#include "lattice/cluster/topology_links.h"

#include "lattice/cluster/topology.h"

namespace lattice::cluster {

Result<TopologyPlan> plan_from_topology_file(const std::string& path) {
  LATTICE_ASSIGN_OR_RETURN(Topology topo, load_topology(path));
  TopologyPlan plan;
  int n = static_cast<int>(topo.hosts.size());
  plan.world_size = n;
  std::vector<int> host_of_rank(n, -1);
  for (int i = 0; i < n; ++i) {
    int r = topo.hosts[i].rank;
    if (r < 0 || r >= n || host_of_rank[r] >= 0)
      return InvalidArgument(path + ": host ranks must be 0.." + std::to_string(n - 1) + ", each once");
    host_of_rank[r] = i;
  }
  plan.coordinator = topo.coordinator;
  for (int r = 0; r < n; ++r) {
    const Host& h = topo.hosts[host_of_rank[r]];
    if (r == 0 && plan.coordinator.empty()) plan.coordinator = h.address.empty() ? h.name : h.address;
    plan.ssh.push_back(h.ssh.empty() ? h.name : h.ssh);
    plan.names.push_back(h.name);
  }
  auto cables = classify(topo).cables;
  plan.linked = [cables, host_of_rank](int a, int b) {
    if (a < 0 || b < 0 || a >= static_cast<int>(host_of_rank.size()) || b >= static_cast<int>(host_of_rank.size()))
      return true;  // ranks beyond the file (joiners): full mesh
    return cables[host_of_rank[a]][host_of_rank[b]] > 0;
  };
  return plan;
}

}  // namespace lattice::cluster
