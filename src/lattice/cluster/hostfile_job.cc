#include "lattice/cluster/hostfile_job.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "lattice/cluster/bootstrap.h"
#include "lattice/cluster/control.h"
#include "lattice/cluster/discover_topology.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/cluster/topology_links.h"
#include "lattice/crypto/secret.h"

namespace lattice::cluster {
namespace {

std::string absolute(const std::string& path) {
  if (path.empty() || path.front() == '/') return path;
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf)) return buf;
  return path;
}

}  // namespace

Result<int> run_hostfile_job(HostfileJob job) {
  if (job.secret_file.empty())
    return InvalidArgument("--hostfile needs --secret-file (the same secret file, at the same path, on every host)");
  if (job.argv.empty()) return InvalidArgument("no command for the ranks");
  // A bad file is refused here, not in N ranks.
  LATTICE_RETURN_IF_ERROR(crypto::load_secret_file(job.secret_file).status());
  LATTICE_ASSIGN_OR_RETURN(TopologyPlan plan, plan_from_topology_file(job.hostfile));
  std::string coordinator = job.coordinator.empty() ? plan.coordinator : job.coordinator;
  if (auto hp = split_host_port(coordinator); !hp.ok()) return hp.status().with_context("coordinator");
  if (coordinator.find(':') == std::string::npos || (coordinator.front() == '[' && coordinator.back() == ']'))
    coordinator += ":" + std::to_string(kDefaultCoordinatorPort);
  RankEnv e;
  e.world_size = plan.world_size;
  e.coordinator = coordinator;
  e.provider = job.provider;
  e.topology = absolute(job.hostfile);
  e.secret_file = absolute(job.secret_file);
  e.insecure = job.insecure;
  e.heartbeat_ms = job.heartbeat_ms;
  e.failure_timeout_ms = job.failure_timeout_ms;
  for (int r = 0; r < plan.world_size; ++r) {
    e.rank = r;
    LaunchRank what;
    what.rank = r;
    what.argv = job.argv;
    what.env = e.to_env();
    what.env.insert(what.env.end(), job.env.begin(), job.env.end());
    what.env.emplace_back(env::kLifeline, "stdin");  // the remote stdin closes with our ssh session
    LaunchRank lr;
    lr.rank = r;
    lr.argv = {"/bin/sh", "-c", expand_remote(job.remote, plan.names[r], plan.ssh[r], r, what)};
    job.launch.ranks.push_back(std::move(lr));
  }
  return run_ranks(job.launch);
}

Result<int> run_discovered_job(const DiscoverJob& d, HostfileJob job, std::string* report) {
  LATTICE_ASSIGN_OR_RETURN(auto secret, crypto::load_secret_file(job.secret_file));
  std::string path = d.topology_out;
  if (path.empty()) {
    const char* home = std::getenv("HOME");
    std::string dir = std::string(home && *home ? home : "/tmp") + "/.cache";
    ::mkdir(dir.c_str(), 0700);
    dir += "/lattice";
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) dir = "/tmp";
    path = dir + "/discovered.json";
  }
  DiscoverOptions o;
  o.browse = d.browse;
  o.probe = d.probe;
  if (d.expect > 0) o.browse.expect = d.expect;
  LATTICE_ASSIGN_OR_RETURN(auto c, discover_to_file(secret, o, path));
  if (report)
    *report = std::to_string(c.topology.hosts.size()) + " hosts, " + std::to_string(c.topology.links.size()) +
              " links, written to " + path;
  if (d.expect > 0 && static_cast<int>(c.members.size()) < d.expect)
    return NotFound("expected " + std::to_string(d.expect) + " nodes of this cluster, found " +
                    std::to_string(c.members.size()) + " (" + path + ")");
  job.hostfile = path;
  return run_hostfile_job(std::move(job));
}

}  // namespace lattice::cluster
