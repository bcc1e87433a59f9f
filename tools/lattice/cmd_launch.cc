// `lattice launch`: start the ranks of a cluster and supervise them (src/lattice/cluster/launcher.h).
//
//   lattice launch -n 3 [--provider shm|tcp|verbs-emu://...] [--secret-file F] [--insecure] -- lattice ping
//   lattice launch --hostfile hosts.json --secret-file F [--remote "ssh {ssh} {cmd}"] -- CMD...
//   lattice launch --discover [--expect N] --secret-file F [--remote ...] -- CMD...
//     (the hostfile measured on the fly: cluster/discover_topology.h, as `lattice topo --discover`)
//
// Each rank gets the rank environment (cluster/rank_env.h): rank, world size, coordinator,
// provider and the secret (LATTICE_SECRET_FILE, or for local runs without --secret-file an
// ephemeral LATTICE_SECRET generated here, which never leaves this machine). Without --provider,
// a LATTICE_PROVIDER already in launch's environment is the ranks' provider (launch sets the
// variable for every rank, so ignoring it would silently replace the user's choice).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>

#include "command.h"
#include "discover_flags.h"
#include "lattice/cluster/bootstrap.h"
#include "lattice/cluster/cluster.h"
#include "lattice/cluster/control.h"
#include "lattice/cluster/hostfile_job.h"
#include "lattice/cluster/launcher.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/cluster/topology_links.h"
#include "lattice/crypto/secret.h"

namespace lattice::cli {
namespace {

struct LaunchArgs {
  int n = 0;
  std::string hostfile;
  std::string provider;
  bool insecure = false;
  std::string coordinator;
  int grace_ms = 3000;
  double deadline_s = 0;
  bool no_prefix = false;
  bool keep_going = false;
  int heartbeat_ms = 0;
  int failure_timeout_ms = 0;
  std::string bind = "auto";
  std::vector<std::string> command;
  // --discover and its flags; its secret file and remote template are also those of -n and
  // --hostfile jobs.
  DiscoverFlags discover;
};

int run_launch(const LaunchArgs& a) {
  using namespace lattice::cluster;
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "lattice launch: %s\n", m.c_str());
    return 2;
  };
  if (a.discover.on && (!a.hostfile.empty() || a.n > 0)) return fail("--discover finds the hosts itself: no -n or --hostfile");
  if (std::string e = a.discover.on ? check_discover_flags(a.discover) : ""; !e.empty()) return fail(e);
  if (!a.discover.on && (a.n > 0) == !a.hostfile.empty()) return fail("give either -n N (local ranks) or --hostfile FILE");
  if (a.command.empty()) return fail("no command (lattice launch -n 2 -- CMD ARGS...)");
  if (a.insecure)
    std::fprintf(stderr, "lattice launch: WARNING: --insecure: ranks authenticate but do NOT encrypt their traffic\n");
  std::string provider = a.provider;
  if (const char* env = std::getenv(env::kProvider); provider.empty() && env && *env) provider = env;
  if (!provider.empty() && !cluster_provider_ok(provider))
    return fail("provider '" + provider + "'" + (a.provider.empty() ? " (from LATTICE_PROVIDER)" : "") +
                ": use shm or tcp, or an emulated link: tcp?latency_us=L&gbytes_s=R, verbs-emu://apple-tb5?...");
  auto bind = parse_bind(a.bind);
  if (!bind.ok()) return fail(bind.status().message());
  LaunchOptions lo;
  lo.grace = std::chrono::milliseconds(a.grace_ms);
  lo.prefix = !a.no_prefix;
  lo.keep_going = a.keep_going;
  if (!(a.deadline_s >= 0) || a.deadline_s > 1e7) return fail("--deadline-s must be 0 (none) or a positive number of seconds");
  lo.deadline = std::chrono::milliseconds(static_cast<int64_t>(a.deadline_s * 1000));
  std::optional<int> heartbeat_ms, failure_timeout_ms;
  if (a.heartbeat_ms > 0) heartbeat_ms = a.heartbeat_ms;
  if (a.failure_timeout_ms > 0) failure_timeout_ms = a.failure_timeout_ms;
  if (a.n > 0) {
    if (a.n > 256) return fail("-n " + std::to_string(a.n) + ": at most 256 local ranks");
    LocalJob job;
    job.world_size = a.n;
    job.argv = a.command;
    job.provider = provider.empty() ? "shm" : provider;
    job.bind = *bind;
    job.coordinator = a.coordinator;
    // Jobs that survive lost ranks: the launcher (which outlives them all) hosts the
    // coordinator, so rank 0 is as expendable as the others.
    job.host_coordinator = a.keep_going && a.coordinator.empty();
    job.secret_file = a.discover.secret_file;
    job.insecure = a.insecure;
    job.heartbeat_ms = heartbeat_ms;
    job.failure_timeout_ms = failure_timeout_ms;
    job.launch = lo;
    auto code = run_local_job(std::move(job));
    if (!code.ok()) return fail(code.status().to_string());
    return *code;
  }
  HostfileJob job;
  job.secret_file = a.discover.secret_file;
  job.insecure = a.insecure;
  job.remote = a.discover.remote;
  job.coordinator = a.coordinator;
  job.provider = provider.empty() ? "tcp" : provider;
  job.heartbeat_ms = heartbeat_ms;
  job.failure_timeout_ms = failure_timeout_ms;
  job.argv = a.command;
  job.launch = lo;
  Result<int> code = 0;
  if (a.discover.on) {
    code = run_on_discovered_hosts(a.discover, std::move(job), "launch");
  } else {
    job.hostfile = a.hostfile;
    code = run_hostfile_job(std::move(job));
  }
  // Bad flags and files read as themselves ("FILE:LINE: ..."); anything else with its kind.
  if (!code.ok())
    return fail(code.status().code() == ErrorCode::kInvalidArgument ? code.status().message() : code.status().to_string());
  return *code;
}

const Registrar kLaunch{{"launch", "start the ranks of a cluster (locally or over ssh) and supervise them",
                         [](CLI::App& app) -> std::function<int()> {
                           auto a = std::make_shared<LaunchArgs>();
                           app.add_option("-n", a->n, "number of local ranks");
                           app.add_option("--hostfile", a->hostfile, "topology file or MLX hostfile: one rank per host");
                           app.add_option("--provider", a->provider,
                                          "fabric provider: shm | tcp | tcp?latency_us=L&gbytes_s=R | verbs-emu://apple-tb5?... "
                                          "(default: $LATTICE_PROVIDER, else shm local, tcp hosts)");
                           app.add_option("--secret-file", a->discover.secret_file, "cluster secret (lattice keygen); local runs without it use a fresh one");
                           app.add_flag("--insecure", a->insecure, "authenticate but do not encrypt (trusted links only)");
                           app.add_option("--remote", a->discover.remote, "remote command template: {host} {ssh} {rank} {cmd}")
                               ->capture_default_str();
                           app.add_option("--coordinator", a->coordinator, "coordinator host:port (default: rank 0's)");
                           app.add_option("--grace-ms", a->grace_ms, "SIGTERM to SIGKILL delay when stopping ranks")
                               ->capture_default_str();
                           app.add_option("--deadline-s", a->deadline_s,
                                          "bound on the whole job: ranks still running then are stopped and launch "
                                          "exits 124 (0: none)")
                               ->capture_default_str();
                           app.add_flag("--no-prefix", a->no_prefix, "do not prefix output lines with [rank N]");
                           app.add_option("--bind", a->bind,
                                          "pin local ranks to CPUs: auto (when each rank can have its own cores; "
                                          "not with --keep-going), cores (always), none")
                               ->capture_default_str();
                           app.add_flag("--keep-going", a->keep_going,
                                        "a failed rank does not stop the others (jobs that recover; local runs: the launcher hosts the coordinator)");
                           app.add_option("--heartbeat-ms", a->heartbeat_ms, "heartbeat interval for the ranks (default 100)");
                           app.add_option("--failure-timeout-ms", a->failure_timeout_ms,
                                          "silence after which a rank is declared dead (default 700)");
                           add_discover_flags(app, a->discover, "--hostfile");
                           app.add_option("--discover-timeout-ms", a->discover.timeout_ms, "with --discover: browse at most this long")
                               ->capture_default_str();
                           app.add_option("command", a->command, "the command each rank runs (after --)")->expected(-1);
                           return [a] { return run_launch(*a); };
                         }}};

}  // namespace
}  // namespace lattice::cli
