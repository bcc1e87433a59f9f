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
  // The data cable of each host pair: index into topo.links, -1 if none.
  std::vector<std::vector<int>> best(size_t(n), std::vector<int>(size_t(n), -1));
  for (size_t k = 0; k < topo.links.size(); ++k) {
    const Link& l = topo.links[k];
    if (l.provider == LinkProvider::kShm || l.a < 0 || l.b < 0 || l.a >= n || l.b >= n) continue;
    int& cur = best[size_t(l.a)][size_t(l.b)];
    if (cur < 0 || l.gbps.value_or(0) > topo.links[size_t(cur)].gbps.value_or(0)) cur = int(k);
    best[size_t(l.b)][size_t(l.a)] = cur;
  }
  std::vector<Link> links = topo.links;
  plan.link_addrs = [best, links, host_of_rank](int a, int b) -> std::pair<std::string, std::string> {
    const int n = static_cast<int>(host_of_rank.size());
    if (a < 0 || b < 0 || a >= n || b >= n || a == b) return {};
    const int ha = host_of_rank[size_t(a)], hb = host_of_rank[size_t(b)];
    const int k = best[size_t(ha)][size_t(hb)];
    if (k < 0) return {};
    const Link& l = links[size_t(k)];
    if (l.a == ha) return {l.a_addr, l.b_addr};
    return {l.b_addr, l.a_addr};
  };
  plan.link_devices = [best, links, host_of_rank](int a, int b) -> std::pair<std::string, std::string> {
    const int n = static_cast<int>(host_of_rank.size());
    if (a < 0 || b < 0 || a >= n || b >= n || a == b) return {};
    const int ha = host_of_rank[size_t(a)], hb = host_of_rank[size_t(b)];
    const int k = best[size_t(ha)][size_t(hb)];
    if (k < 0 || links[size_t(k)].provider != LinkProvider::kVerbs) return {};
    const Link& l = links[size_t(k)];
    if (l.a == ha) return {l.a_device, l.b_device};
    return {l.b_device, l.a_device};
  };
  return plan;
}

std::string verbs_device_uri(std::string_view device) {
  // The emulator's device names, as emu.h lists them (one per profile).
  if (device == "emu_tb5_0") return "verbs-emu://apple-tb5";
  if (device == "emu_rc_0") return "verbs-emu://linux-rc";
  return "verbs://" + std::string(device);
}

}  // namespace lattice::cluster
