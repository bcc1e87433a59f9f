// The bridge from a topology file to the bootstrap: which rank pairs get an endpoint and
// where the coordinator is. Kept apart from topology.h because that header's `Link` (a cable)
// and group.h's `Link` (an endpoint) share the namespace.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::cluster {

struct TopologyPlan {
  std::string coordinator;              // the file's coordinator, else rank 0's address
  std::function<bool(int, int)> linked; // by rank: true if at least one cable joins the pair
  // By rank: the IPs at a's end and at b's end of the pair's data cable: of the tcp/verbs
  // cables joining them, the fastest by "gbps" (unknown counts as slowest; ties: the first
  // listed). An end the file gives no a_addr/b_addr for is empty, and so is a pair without one.
  std::function<std::pair<std::string, std::string>(int, int)> link_addrs;
  int world_size = 0;
  std::vector<std::string> ssh;         // by rank: how the launcher reaches the host
  std::vector<std::string> names;       // by rank: host names
};

Result<TopologyPlan> plan_from_topology_file(const std::string& path);

}  // namespace lattice::cluster
