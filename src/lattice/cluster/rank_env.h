// The rank environment contract: what a launcher tells each rank process through its
// environment, written once. `lattice launch`, `run --nodes`, `demo`, `bench fabric` and
// `bench coll --procs` (all through launcher.h) write it with to_env(); every rank reads it
// with RankEnv::from_env() (cluster_options_from_env builds on it).
//
//   LATTICE_RANK, LATTICE_WORLD_SIZE  this rank and the world; read also from mpirun
//                                     (OMPI_COMM_WORLD_RANK/SIZE), PMI (PMI_RANK/SIZE) and
//                                     Slurm (SLURM_PROCID/NTASKS), ours first
//   LATTICE_COORDINATOR               "host:port" of the coordinator
//   LATTICE_EXTERNAL_COORDINATOR=1    another process (the launcher) hosts it, not rank 0
//   LATTICE_TOPOLOGY                  a topology file: coordinator and cables
//   LATTICE_PROVIDER                  shm | tcp
//   LATTICE_FABRIC_ADDR               tcp: the IP to bind endpoints to
//   LATTICE_SECRET / LATTICE_SECRET_FILE  the cluster secret (hex) or its file (crypto/secret.h)
//   LATTICE_INSECURE=1                authenticate, do not encrypt
//   LATTICE_REJOIN=1                  join a running cluster at its next epoch
//   LATTICE_HEARTBEAT_MS, LATTICE_FAILURE_TIMEOUT_MS, LATTICE_CONNECT_TIMEOUT_MS  timing
//   LATTICE_LOCAL_CPUS                the CPUs the launcher's job had on this host, which the
//                                     ranks share (a rank pinned to one of them sees one)
//   LATTICE_LIFELINE=stdin            stdin is the launcher's lifeline (lifeline.h): it closes
//                                     when the launcher dies, and the rank then stops
//
// Boolean variables: set, non-empty and not "0" means true. Integers: decimal, 0..1e6.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::cluster {

namespace env {
inline constexpr const char* kRank = "LATTICE_RANK";
inline constexpr const char* kWorldSize = "LATTICE_WORLD_SIZE";
inline constexpr const char* kCoordinator = "LATTICE_COORDINATOR";
inline constexpr const char* kExternalCoordinator = "LATTICE_EXTERNAL_COORDINATOR";
inline constexpr const char* kTopology = "LATTICE_TOPOLOGY";
inline constexpr const char* kProvider = "LATTICE_PROVIDER";
inline constexpr const char* kFabricAddr = "LATTICE_FABRIC_ADDR";
inline constexpr const char* kSecret = "LATTICE_SECRET";          // = crypto::kSecretEnv
inline constexpr const char* kSecretFile = "LATTICE_SECRET_FILE";  // = crypto::kSecretFileEnv
inline constexpr const char* kInsecure = "LATTICE_INSECURE";
inline constexpr const char* kRejoin = "LATTICE_REJOIN";
inline constexpr const char* kHeartbeatMs = "LATTICE_HEARTBEAT_MS";
inline constexpr const char* kFailureTimeoutMs = "LATTICE_FAILURE_TIMEOUT_MS";
inline constexpr const char* kConnectTimeoutMs = "LATTICE_CONNECT_TIMEOUT_MS";
inline constexpr const char* kLifeline = "LATTICE_LIFELINE";
inline constexpr const char* kLocalCpus = "LATTICE_LOCAL_CPUS";
}  // namespace env

struct RankEnv {
  bool launched = false;  // from_env: a rank and world size were found (ours, mpirun's, PMI's or Slurm's)
  int rank = 0;
  int world_size = 1;
  std::string coordinator;        // empty: not set
  bool external_coordinator = false;
  std::string topology;           // a file path; empty: none
  std::string provider;           // empty: not set (the reader's default applies)
  std::string fabric_addr;
  std::string secret_hex;         // the secret itself (local runs; never leaves the machine)
  std::string secret_file;        // or its file, at the same path on every host
  bool insecure = false;
  bool rejoin = false;
  std::optional<int> heartbeat_ms, failure_timeout_ms, connect_timeout_ms;
  std::optional<int> local_cpus;  // the job's CPUs on this host (launcher.cc: usable_cpus)

  // The variables to set for this rank (unset fields are left out, so the reader's defaults
  // apply). rank and world size are always written.
  std::vector<std::pair<std::string, std::string>> to_env() const;
  // Reads the process environment. Fails (kInvalidArgument, naming the variable) on an
  // unparsable integer or a rank not below the world size; missing variables are not errors.
  static Result<RankEnv> from_env();
};

// One of the integer variables above from the process environment, read as RankEnv::from_env
// reads it (a launcher reads the timings the ranks will inherit the same way); none when unset.
Result<std::optional<int>> env_int(const char* name);

}  // namespace lattice::cluster
