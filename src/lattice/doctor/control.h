// The control plane doctor meets the other ranks on: cluster::join_cluster with control_only
// (no fabric endpoints). Kept apart because cluster.h's Link (an endpoint) and topology.h's
// Link (a cable) share a namespace.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::doctor::detail {

class Control {
 public:
  virtual ~Control() = default;
  // Every rank's `data`, by rank.
  virtual Result<std::vector<std::string>> allgather(const std::string& data, Deadline deadline) = 0;
};

// From the rank environment (cluster_options_from_env); `secret_file` overrides it.
Result<std::unique_ptr<Control>> join_control(const std::string& secret_file, Deadline deadline);

}  // namespace lattice::doctor::detail
