#include "discover_flags.h"

#include <chrono>
#include <cstdio>
#include <utility>

namespace lattice::cli {

void add_discover_flags(CLI::App& app, DiscoverFlags& f, const std::string& instead_of) {
  app.add_flag("--discover", f.on,
               "one rank per host found on the network (lattice discover), links measured (instead of " + instead_of + ")");
  app.add_option("--expect", f.expect, "with --discover: stop browsing once N hosts are found; fewer is an error");
  app.add_option("--discover-out", f.out,
                 "with --discover: where the measured topology goes (default ~/.cache/lattice/discovered.json; "
                 "the ranks read it at that path)");
}

void add_discover_host_flags(CLI::App& app, DiscoverFlags& f) {
  app.add_option("--secret-file", f.secret_file, "with --discover: the cluster secret (same path on every host)");
  app.add_option("--remote", f.remote, "with --discover: how to start a rank on a host ({host} {ssh} {rank} {cmd})")
      ->capture_default_str();
}

std::string check_discover_flags(const DiscoverFlags& f) {
  if (f.secret_file.empty()) return "--discover needs --secret-file (the same file on every host)";
  if (f.expect < 0 || f.expect > 1024) return "--expect must be in 0..1024";
  if (f.timeout_ms < 1 || f.timeout_ms > 600000) return "--discover-timeout-ms must be in 1..600000";
  return "";
}

Result<int> run_on_discovered_hosts(const DiscoverFlags& f, cluster::HostfileJob job, const char* command) {
  job.secret_file = f.secret_file;
  job.remote = f.remote;
  cluster::DiscoverJob d;
  d.browse.timeout = std::chrono::milliseconds(f.timeout_ms);
  d.topology_out = f.out;
  d.expect = f.expect;
  std::string report;
  auto code = cluster::run_discovered_job(d, std::move(job), &report);
  if (!report.empty()) std::fprintf(stderr, "lattice %s: --discover: %s\n", command, report.c_str());
  return code;
}

}  // namespace lattice::cli
