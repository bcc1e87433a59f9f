// `--discover` and the flags that go with it, as `lattice run`, `serve` and `launch` share
// them: one rank per host found on the network (lattice discover), the links between them
// measured into a topology file, then the job started on those hosts through the remote
// template (cluster/hostfile_job.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "lattice/cluster/hostfile_job.h"
#include "lattice/core/status.h"

namespace lattice::cli {

struct DiscoverFlags {
  bool on = false;                         // --discover
  std::string secret_file;                 // --secret-file: the same path on every host
  std::string remote = "ssh {ssh} {cmd}";  // --remote: how a rank is started on a host
  std::string out;                         // --discover-out: the measured topology (empty: ~/.cache/lattice/discovered.json)
  int expect = 0;                          // --expect: stop browsing once N hosts are found; fewer is an error
  int timeout_ms = 1500;                   // the browse's bound (--discover-timeout-ms: `launch` only)
};

// --discover, --expect and --discover-out. `instead_of` names what --discover replaces in
// this command ("--nodes", "--hostfile").
void add_discover_flags(CLI::App& app, DiscoverFlags& f, const std::string& instead_of);
// --secret-file and --remote for commands that use them only with --discover (run, serve).
void add_discover_host_flags(CLI::App& app, DiscoverFlags& f);

// What stops a --discover job before anything starts ("" when nothing): no secret file,
// --expect or the timeout out of range.
std::string check_discover_flags(const DiscoverFlags& f);

// Finds the hosts and runs `job` on one rank each (its secret file and remote template
// from `f`); the one-line report (hosts, links, the file) goes to stderr as
// "lattice COMMAND: --discover: ...".
Result<int> run_on_discovered_hosts(const DiscoverFlags& f, cluster::HostfileJob job, const char* command);

}  // namespace lattice::cli
