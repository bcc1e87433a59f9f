// Helpers for the simulator's tests: topologies written as text, a scratch directory.
#pragma once

#include <string>

#include "lattice/cluster/topology.h"

namespace lattice::sim::testing {

// n hosts named h0.. at 10.0.0.i with `machine`, full mesh of links with `provider`/`medium`
// (ring: only neighbours), as a parsed topology.
cluster::Topology mesh(int n, const std::string& machine, const std::string& provider, const std::string& medium,
                       bool ring = false, const std::string& extra_link_keys = "");
// A fresh directory under the test's temp dir.
std::string scratch_dir(const std::string& name);

}  // namespace lattice::sim::testing
