// The bridge from a topology file to the bootstrap: which rank pairs get an endpoint and
// where the coordinator is. Kept apart from topology.h because that header's `Link` (a cable)
// and group.h's `Link` (an endpoint) share the namespace.
#pragma once

#include <functional>
#include <string>
#include <string_view>
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
  // By rank: the RDMA devices at a's end and at b's end when that data cable (the one
  // link_addrs picks) is a verbs link; both empty otherwise. The cluster opens the pair's
  // endpoint on this end's device (verbs_device_uri), not over tcp.
  std::function<std::pair<std::string, std::string>(int, int)> link_devices;
  int world_size = 0;
  std::vector<std::string> ssh;         // by rank: how the launcher reaches the host
  std::vector<std::string> names;       // by rank: host names
};

Result<TopologyPlan> plan_from_topology_file(const std::string& path);

// The fabric URI of an RDMA device named in a topology (a_device/b_device) or an announcement:
// the emulated devices (fabric/verbs/emu/emu.h: emu_tb5_0, emu_rc_0) are their verbs-emu
// profile (verbs-emu://apple-tb5, verbs-emu://linux-rc), anything else the system's device
// (verbs://DEVICE).
std::string verbs_device_uri(std::string_view device);

}  // namespace lattice::cluster
