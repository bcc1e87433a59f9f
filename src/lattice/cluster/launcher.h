// The launcher behind `lattice launch`: starts one process per rank (locally, or through a
// remote command template such as "ssh {ssh} {cmd}"), prefixes every output line with
// "[rank N] ", and supervises them:
//   - all ranks exit 0: exit 0;
//   - a rank exits non-zero or dies by a signal: the others are told (SIGTERM to their process
//     group, SIGKILL after `grace`), and the launcher exits with that rank's status (128+signal
//     for a signal), naming the rank and how it ended on stderr;
//   - SIGINT/SIGTERM/SIGHUP to the launcher (Ctrl-C): the same stop sequence, exit 130/143/129.
//   - keep_going (jobs that re-place work on the survivors, `lattice run --nodes`): a failed rank
//     is reported on stderr and the others carry on; once a rank completed (exit 0), ranks left
//     stopped (SIGSTOP; the cluster evicted them) are killed, and ranks still running
//     finish_within later are stopped; the launcher exits 0 if any rank completed, else with
//     the first failed rank's status.
//   - deadline: a job still running then is stopped as above; exit 124.
// Every rank runs in its own process group and dies with the launcher: PR_SET_PDEATHSIG for
// the process we start, and for everything it starts in turn (a remote command, a rank on
// another host) the lifeline (lifeline.h): stdin is a pipe only the launcher holds, and the
// rank stops when it closes (LATTICE_LIFELINE=stdin is set for every child). Every wait is
// bounded (poll ticks of 100 ms, the grace period, 1 s to drain output after the last exit);
// every child is reaped: no zombies.
//
// Not thread-safe: run() installs process-wide signal handlers for its duration.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lattice/cluster/rank_env.h"
#include "lattice/core/status.h"
#include "lattice/crypto/secret.h"

namespace lattice::cluster {

struct LaunchRank {
  int rank = 0;
  std::vector<std::string> argv;                            // argv[0] is looked up in PATH
  std::vector<std::pair<std::string, std::string>> env;     // added to (or replacing) ours
  std::vector<int> cpus;  // non-empty: the process is pinned to these CPUs (bind_cpus)
};

// Pinning local ranks to CPUs, as mpirun binds ranks to cores: a rank that stays on its core
// keeps its caches and never queues behind another rank that the scheduler moved next to it.
//   kAuto: pin when every rank can have cores of its own (ranks <= usable CPUs), else not;
//   kCores: always (more ranks than CPUs share them round robin); kNone: never.
enum class Bind : uint8_t { kAuto, kCores, kNone };
Result<Bind> parse_bind(std::string_view text);  // "auto" | "cores" | "none"
// For local jobs: kCores when `ranks` x `threads_per_rank` fit the CPUs this process may use (each rank
// on CPUs of its own), else kNone.
Bind bind_when_fits(int ranks, int threads_per_rank);
// The CPUs this process may run on (its affinity mask), ascending.
std::vector<int> usable_cpus();
// Per rank, the CPUs to pin it to (empty: leave it unpinned): `cpus` split into equal
// contiguous blocks, one per rank, the remainder unused.
std::vector<std::vector<int>> bind_cpus(int ranks, Bind bind, const std::vector<int>& cpus);

struct LaunchOptions {
  std::vector<LaunchRank> ranks;
  std::chrono::milliseconds grace{3000};  // SIGTERM -> SIGKILL
  bool prefix = true;
  bool keep_going = false;  // see above
  // Bound on the whole job (0: none): ranks still running then are stopped (SIGTERM, SIGKILL
  // after grace) and run_ranks returns 124, as timeout(1) does.
  std::chrono::milliseconds deadline{0};
  // keep_going: once a rank completed, the others have this long to end as well; then they
  // are stopped (SIGTERM, SIGKILL after grace). A rank that could neither rejoin the
  // survivors nor end by itself cannot hold the launcher.
  std::chrono::milliseconds finish_within{10000};
  int out_fd = 1;
  int err_fd = 2;
};

// Runs the ranks to completion; returns the launcher's exit code (see above). Fails only if
// it could not start (fork/pipe errors), after stopping whatever it started.
Result<int> run_ranks(const LaunchOptions& options);

// A job of local ranks, the one way this codebase starts rank processes on this machine
// (`lattice launch -n`, `run --nodes`, `demo`, `bench fabric`, `bench coll --procs`): every
// rank runs `argv` with the rank environment contract (rank_env.h) filled in, pinned to CPUs
// as `bind` says, and supervised by run_ranks() (see above).
struct LocalJob {
  int world_size = 0;
  std::vector<std::string> argv;  // the same for every rank; see self_exe()
  std::string provider = "shm";   // LATTICE_PROVIDER
  // kAuto pins only when every rank can have CPUs of its own, and never with keep_going (ranks
  // that survive others' loss should be free to use the cores those leave): `launch --bind auto`.
  Bind bind = Bind::kAuto;
  // The launcher itself hosts the coordinator (LATTICE_EXTERNAL_COORDINATOR=1), so no rank is
  // special (jobs that survive losing rank 0). Else rank 0 hosts it at `coordinator`.
  bool host_coordinator = false;
  std::string coordinator;        // empty: the launcher hosts it on 127.0.0.1, port chosen at bind
  // The cluster secret: secret_file (absolute path, passed as LATTICE_SECRET_FILE), else
  // `secret`, else a fresh one for this run; both of the latter travel as LATTICE_SECRET in
  // the environment of our children only.
  std::string secret_file;
  std::optional<crypto::ClusterSecret> secret;
  bool insecure = false;
  std::optional<int> heartbeat_ms, failure_timeout_ms;
  std::vector<std::pair<std::string, std::string>> env;  // more variables for every rank
  LaunchOptions launch;  // grace, prefix, keep_going, fds; its `ranks` are filled in here
};

// Starts and supervises the job; returns run_ranks()'s exit code. Fails (nothing started) on
// a bad job: world_size outside 1..256, no argv, an unreadable secret file, no free port, a
// coordinator that cannot start.
Result<int> run_local_job(LocalJob job);
// Per-rank CPUs for the job, as run_local_job pins them.
std::vector<std::vector<int>> local_job_cpus(const LocalJob& job);
// This executable's absolute path (/proc/self/exe resolved), for jobs that re-run it.
std::string self_exe();

// 'text' quoted for /bin/sh (single quotes, embedded quotes escaped).
std::string shell_quote(const std::string& text);
// Expands {host}, {ssh}, {rank} and {cmd} in a remote template. {cmd} becomes
// `env VAR=value ... argv...`, each word shell-quoted.
std::string expand_remote(const std::string& templ, const std::string& host, const std::string& ssh, int rank,
                          const LaunchRank& what);
// A free TCP port on 127.0.0.1 (bound and released: another process could take it, rarely).
Result<uint16_t> pick_free_port();

}  // namespace lattice::cluster
