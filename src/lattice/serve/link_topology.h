// A link's figures for the dashboard (link_probe.h measures them) and the topology file's
// (latency_us and gbps of its cables: `lattice topo --discover` writes them). Apart from
// link_probe.h because cluster/topology.h and cluster/cluster.h cannot share a file (both
// define cluster::Link).
#pragma once

#include <map>
#include <string>
#include <utility>

#include "lattice/core/status.h"

namespace lattice::serve {

struct LinkFigures {
  double lat_us = 0;  // one way: the median round trip of 8-byte sends / 2
  double gbps = 0;    // Gbit/s (1e9 bits per second) of a stream of 256 KiB sends
  std::string from;   // "ping" or "topology"
};

// The topology file's cables that give both figures, by their ends' ranks (a < b).
Result<std::map<std::pair<int, int>, LinkFigures>> topology_figures(const std::string& path);

}  // namespace lattice::serve
