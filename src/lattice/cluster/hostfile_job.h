// A job of one rank per host of a topology file (`lattice launch --hostfile`), and the same on
// hosts found and measured on the fly (`launch/run/serve --discover`, discover_topology.h).
// Every rank runs `argv` through the remote template (launcher.h's expand_remote: {host},
// {ssh}, {rank}, {cmd}) with the rank environment (rank_env.h): the topology, the coordinator
// (rank 0's address unless given), the secret file, and `env`.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

// Not topology.h (its Link would meet group.h's in files that include both): discover.h and
// discover_probe.h are enough.
#include "lattice/cluster/discover.h"
#include "lattice/cluster/discover_probe.h"
#include "lattice/cluster/launcher.h"
#include "lattice/core/status.h"

namespace lattice::cluster {

struct HostfileJob {
  std::string hostfile;     // topology file or MLX hostfile; the ranks read it at this path
  std::string secret_file;  // required: the same file, at the same path, on every host
  bool insecure = false;
  std::string remote = "ssh {ssh} {cmd}";
  std::string coordinator;  // "host[:port]"; empty: the file's, else rank 0's address
  std::string provider = "tcp";
  std::optional<int> heartbeat_ms, failure_timeout_ms;
  std::vector<std::pair<std::string, std::string>> env;  // more variables for every rank
  std::vector<std::string> argv;
  LaunchOptions launch;  // its `ranks` are filled in here
};

// Starts and supervises the job; returns run_ranks()'s exit code. Fails (nothing started) on
// an unreadable secret file or topology, or a bad coordinator.
Result<int> run_hostfile_job(HostfileJob job);

struct DiscoverJob {
  BrowseOptions browse;
  ProbeOptions probe;
  std::string topology_out;  // empty: ~/.cache/lattice/discovered.json
  int expect = 0;            // > 0: fewer joinable nodes found is an error (kNotFound)
};
// discover_to_file() on `d`, then run_hostfile_job() on the file; `job.hostfile` is set here.
// `report` (may be null) gets one line: hosts, links and where the file went.
Result<int> run_discovered_job(const DiscoverJob& d, HostfileJob job, std::string* report);

}  // namespace lattice::cluster
