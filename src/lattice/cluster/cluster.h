// Cluster: a Group of processes (or hosts) that met through the coordinator.
//
// join_cluster() dials the coordinator (rank 0 hosts it unless told otherwise), authenticates
// with the cluster secret, claims its rank, and once every rank arrived: creates one fabric
// endpoint per linked peer, publishes the endpoints' address blobs through the coordinator
// (an allgather over the authenticated, encrypted control plane), connects them all, and
// agrees with every other rank that every link came up (else every rank fails with the same
// message naming the pairs that could not connect and why).
//
// Membership (membership.h): a heartbeat thread watches the coordinator; the coordinator
// watches everyone and broadcasts a view when a rank dies. From then on, posts on the dead
// rank's links fail with kPeerLost, events() reports it, and shrink() moves every survivor
// (plus nodes waiting to rejoin) to the next epoch: ranks renumbered in the old order, fresh
// endpoints, epoch + 1.
//
// Environment (cluster_options_from_env; the names are in rank_env.h):
//   rank/world    LATTICE_RANK / LATTICE_WORLD_SIZE, else OMPI_COMM_WORLD_RANK/SIZE (mpirun),
//                 PMI_RANK/PMI_SIZE (MPICH, Intel MPI), SLURM_PROCID/SLURM_NTASKS (srun);
//                 none: a single rank (no control plane at all)
//   coordinator   LATTICE_COORDINATOR "host:port", else the topology file's coordinator or its
//                 rank 0 host's address (LATTICE_TOPOLOGY), port 7470 by default; rank 0 hosts
//                 it unless LATTICE_EXTERNAL_COORDINATOR=1 (another process runs it, e.g. the
//                 launcher of `lattice run --nodes`, so that losing rank 0 is survivable);
//                 a hosting rank 0 given port 0 binds a free one and prints "lattice:
//                 coordinator listening on port N" on stderr for whatever starts the others
//   provider      LATTICE_PROVIDER shm|tcp (default tcp); LATTICE_FABRIC_ADDR: tcp bind IP
//   secret        LATTICE_SECRET / LATTICE_SECRET_FILE (crypto/secret.h); LATTICE_INSECURE=1
//   timing        LATTICE_HEARTBEAT_MS, LATTICE_FAILURE_TIMEOUT_MS, LATTICE_CONNECT_TIMEOUT_MS
//   rejoin        LATTICE_REJOIN=1: join a running cluster at its next epoch
//
// Thread safety: like every Group, a Cluster is used by one thread at a time; events may be
// read (next_event) from another thread. The event callback runs on the heartbeat thread.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/cluster/bootstrap.h"
#include "lattice/cluster/group.h"
#include "lattice/cluster/membership.h"
#include "lattice/crypto/secret.h"

namespace lattice::cluster {

struct ClusterOptions {
  int rank = 0;
  int world_size = 1;
  std::string coordinator;        // "host:port"; empty with world_size 1: no control plane
  bool host_coordinator = true;   // rank 0 runs the coordinator on the coordinator's port
  std::string provider = "tcp";   // "tcp" | "shm" (or an emulated link: cluster_provider_ok)
  std::string fabric_host;        // tcp: IP to bind endpoints to; empty: the IP that reaches the coordinator
  std::optional<crypto::ClusterSecret> secret;
  bool insecure = false;
  bool rejoin = false;
  std::string name;               // for logs on the coordinator (default: host name)
  MembershipOptions membership;
  std::chrono::milliseconds peer_timeout{2000};  // fabric endpoints' own liveness timeout
  // Bound on connecting one epoch's links (within the join/shrink deadline), leaving time to
  // tell every rank which pairs failed.
  std::chrono::milliseconds connect_timeout{15000};
  // Which pairs get an endpoint (ranks of the epoch being built); empty: full mesh.
  std::function<bool(int, int)> linked;
  // tcp: the IPs at each end of a pair's cable (origin ranks, TopologyPlan::link_addrs). A rank
  // binds the pair's endpoint to its end's IP, so the peer dials it over that cable, not over
  // the coordinator's network; an end without one uses fabric_host (logged at info level). An
  // IP this host does not have fails the join, naming the pair.
  std::function<std::pair<std::string, std::string>(int, int)> link_addrs;
  // tcp: the RDMA devices at each end of a pair whose data cable is a verbs link (origin
  // ranks, TopologyPlan::link_devices). A rank opens that pair's endpoint on its end's device
  // (verbs_device_uri; one provider per device, kept across epochs) instead of tcp; a device
  // this host cannot open fails the join, naming the pair and the device.
  std::function<std::pair<std::string, std::string>(int, int)> link_devices;
  // No fabric at all (no provider, no endpoints): only the control plane, its allgather and
  // the membership. For programs that make their own endpoints (demo, bench fabric) and use
  // the cluster to start, swap address blobs and agree on steps.
  bool control_only = false;
  MemberLink::Callback on_event;
};

// From the environment (see above and rank_env.h); the secret is required unless the world has
// one rank. `secret_file` non-empty (a --secret-file flag): the secret comes from that file.
Result<ClusterOptions> cluster_options_from_env(const std::string& secret_file = "");

// A provider word as every command takes it, as a fabric URI: plain "tcp" is tcp on `host`
// (empty: 127.0.0.1) with a port picked by the system; anything else (shm, tcp://HOST:PORT,
// verbs, ...) is already a URI and returned as it is.
// "tcp?latency_us=50&gbytes_s=1" is that tcp with the query (an emulated link, tcp/link_emu.h).
std::string provider_uri(std::string_view word, std::string_view host = {});

// The providers a cluster's ranks can use: shm, tcp, tcp?QUERY (emulated link timing) and
// verbs-emu[://PROFILE][?QUERY] (the emulated RDMA device on this machine).
bool cluster_provider_ok(std::string_view word);

class Cluster;
Result<std::unique_ptr<Cluster>> join_cluster(ClusterOptions options, Deadline deadline);

class Cluster final : public Group {
 public:
  ~Cluster() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  uint64_t epoch() const override { return epoch_; }
  std::span<const Link> links(int peer) const override;
  std::span<fabric::Provider* const> providers() const override { return provider_list_; }
  // From the topology (through each member's origin); a full mesh without one.
  bool pair_linked(int a, int b) const override;

  // Every member contributes `data`; returns all contributions by rank. Fails with kPeerLost
  // if a member died before everyone contributed (then shrink()).
  Result<std::vector<std::string>> allgather(const std::string& data, Deadline deadline);
  Status barrier(Deadline deadline) { return allgather("", deadline).status(); }

  // Moves to the next epoch with the survivors (and nodes waiting to rejoin): every survivor
  // must call it. Invalidates every Link and endpoint obtained before.
  Status shrink(Deadline deadline);

  // False once the membership declared `peer` (of the current epoch) dead.
  bool peer_alive(int peer) const override;
  std::vector<int> lost_peers() const;
  Result<MembershipEvent> next_event(Deadline deadline);
  // Ok while the control plane works.
  Status control_status() const;
  // Names the coordinator gave the members of this epoch, by rank.
  const std::vector<std::string>& member_names() const { return names_; }
  // Each member's first rank (the rank it joined with: its place in the topology file), by
  // current rank; -1 when unknown.
  const std::vector<int>& origins() const { return origins_; }

  // This host's IP as the coordinator sees it (the address peers reach it by); 127.0.0.1
  // without a control plane.
  std::string local_ip() const;
  // The coordinator this rank hosts, or nullptr.
  Coordinator* coordinator() { return coordinator_.get(); }
  // Test hooks: behave as a stopped process (pause) or a killed one (drop control).
  void pause_heartbeats(bool paused);
  void drop_control();
  // How often the heartbeat thread woke so far (MemberLink::wakeups); 0 without a control plane.
  uint64_t heartbeat_wakeups() const { return link_ ? link_->wakeups() : 0; }

  struct EpochState;

 private:
  friend Result<std::unique_ptr<Cluster>> join_cluster(ClusterOptions, Deadline);
  Cluster() = default;
  Status build_epoch(const nlohmann::json& plan, Deadline deadline);
  void on_internal_event(const MembershipEvent& e);

  ClusterOptions opt_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<MemberLink> link_;
  // The provider for fabric_host (every pair without a cable address), then one per other
  // local IP a cable names (tcp), made when a pair first needs it and kept across epochs.
  Result<std::unique_ptr<fabric::Provider>> make_fabric(const std::string& host) const;
  // The provider for the endpoint this rank opens to `peer` (ranks of the epoch being built).
  Result<fabric::Provider*> cable_provider(int rank, int peer, bool first_epoch);
  std::string default_host_;  // where provider_ listens
  std::unique_ptr<fabric::Provider> provider_;
  std::vector<std::pair<std::string, std::unique_ptr<fabric::Provider>>> cable_providers_;
  std::vector<fabric::Provider*> provider_list_;
  std::shared_ptr<EpochState> state_;
  std::vector<std::string> names_;
  std::vector<int> origins_;
  int rank_ = 0;
  int world_ = 1;
  uint64_t epoch_ = 0;
  uint64_t ag_seq_ = 0;
  bool dropped_ = false;
  std::atomic<uint64_t> live_epoch_{0};  // epoch_ as seen by the heartbeat thread
};

}  // namespace lattice::cluster
