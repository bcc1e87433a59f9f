// The coordinator: the rendezvous and membership authority of a cluster.
//
// It listens on TCP; every connection must complete the join handshake (mutual
// authentication bound to the cluster secret, crypto/handshake.h) before it counts: a node
// with a wrong or missing secret is refused with a log line on both sides and changes
// nothing. Authenticated connections then speak the control protocol below (ControlChannel
// frames, sealed unless --insecure).
//
// Control protocol (JSON objects, "t" names the type). Member -> coordinator:
//   hello {rank, world, rejoin, name}   first message; before the cluster formed, claims a rank;
//                                       after (or with rejoin), queues as a joiner for the next epoch
//   hb {}                               heartbeat (any message counts as a sign of life)
//   ag {epoch, seq, data}               contributes to allgather number `seq` of `epoch`
//   shrink {epoch}                      asks for the next epoch (survivors plus waiting joiners)
// Coordinator -> member:
//   plan {epoch, rank, world, members, origins}  your rank in the new epoch (members: their names;
//                                       origins: the rank each claimed in its hello, i.e. its
//                                       place in the topology file, so later epochs keep the cabling)
//   ag_done {epoch, seq, data[]}        everyone's contribution, by rank
//   ag_fail {epoch, seq, reason}        a member died (or the epoch moved on) before all contributed
//   view {epoch, lost[], alive[], reason}  the membership changed: `lost` ranks are dead
//   join_request {name}                 a node waits to join at the next shrink()
//   refused {reason}                    the hello was refused (then the connection closes)
//   hb {}
//
// Failure detection: a member is declared dead when its connection closes (EOF: a killed
// process, at once), when a frame fails authentication, or when nothing arrived from it for
// failure_timeout (a stopped process, a cut cable). The decision is the coordinator's alone,
// so every survivor receives the same view. The coordinator's thread sleeps in poll() and
// wakes at least every heartbeat_interval / 2.
//
// Limitation: the coordinator is a single point of failure. If it dies, every member sees
// kCoordinatorLost (same event everywhere, within failure_timeout) and the cluster must be
// restarted; there is no election of a new coordinator.
//
// Thread safety: the public methods are thread-safe. The destructor stops the thread and
// closes every connection (members see EOF).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/crypto/secret.h"

namespace lattice::cluster {

struct CoordinatorOptions {
  std::string listen = "0.0.0.0:7470";  // "127.0.0.1:0" picks a free port (see port())
  // A socket already bound and listening to adopt instead of binding `listen` (socket
  // activation, or a test that held the port first): the coordinator owns it from start().
  int listen_fd = -1;
  int world_size = 1;
  crypto::ClusterSecret secret = crypto::ClusterSecret::from_bytes({});
  bool insecure = false;
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds failure_timeout{700};
  std::chrono::milliseconds handshake_timeout{5000};
};

struct CoordinatorStats {
  bool formed = false;
  uint64_t epoch = 0;
  int world_size = 0;
  std::vector<int> alive;   // ranks of the current epoch still alive
  int refused = 0;          // connections refused (handshake or hello)
  int joiners = 0;          // nodes waiting for the next epoch
};

class Coordinator {
 public:
  static Result<std::unique_ptr<Coordinator>> start(CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  uint16_t port() const;
  CoordinatorStats stats() const;

  struct Impl;

 private:
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lattice::cluster
