// Lockstep: `lattice serve` over N ranks, tensor, pipeline or expert parallel (the placement
// engine/parallel/distributed.h makes for `run --nodes`, every mode a Stepper). Rank 0 listens and schedules (its
// EngineLoop); every rank runs a Generator over its shard of the model, and the followers make
// the same calls as rank 0 in the same order, so every step is the same batched step on every
// rank (the collectives inside it are the engine's, through engine/parallel's CommGroup).
//
// Before each step rank 0 hands the followers the calls it made since the last one (submits,
// with the whole request, sampler seed included, and cancels). While the ranks are stepping,
// that message is a broadcast on the data plane (the step's own collectives' path: one more
// small collective a step); after a message without a step (rank 0 went idle) the next one
// comes in an allgather over the cluster's control plane, where the followers sleep in a
// socket read instead of spinning. An idle rank 0 ticks every EngineLoopOptions::idle_tick,
// so the followers' wait has a deadline. The followers report their figures (resident
// memory, collective bytes) in the control-plane allgathers, and about once a second while
// stepping (the message asks for it), which is how rank 0 knows every rank's figures for
// /metrics.
//
// A lost rank fails a step's collective or the allgather on every survivor; they shrink the
// cluster (engine/parallel/recovery.h), re-place the model over themselves, and rank 0
// resubmits every running request from its progress (their text so far was sent): the
// streams pause and go on. Losing rank 0 loses the server: the followers exit with an error
// naming it.
//
// Thread safety: a ClusterEngine belongs to the thread that runs its Generator (the engine
// thread on rank 0, the main thread on a follower); reports() and recoveries() may be read
// from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lattice/cluster/cluster.h"
#include "lattice/coll/comm.h"
#include "lattice/core/status.h"
#include "lattice/engine/parallel/distributed.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/engine/tokenizer/tokenizer.h"
#include "lattice/serve/engine_loop.h"
#include "lattice/serve/link_probe.h"
#include "lattice/serve/metrics.h"
#include "lattice/serve/rank_report.h"

namespace lattice::serve {

// One exchange's content: rank 0's calls, and what follows them.
struct StepMessage {
  std::vector<StepOp> ops;
  bool step = false;
  bool stop = false;
  bool report = false;  // after a data-plane message: every rank reports (control plane)
};
std::string encode_step(const StepMessage& m);
// kCorrupt for anything malformed (the bytes come from another process).
Result<StepMessage> decode_step(const std::string& text);

struct Recovery {
  engine::parallel::RecoveryEvent event;
  int64_t unix_ms = 0;  // when it ended (wall clock)
};

class ClusterEngine {
 public:
  // Maps this rank's shard and prepares its Generators (go: slots, context, queue).
  static Result<std::unique_ptr<ClusterEngine>> create(cluster::Cluster& cluster,
                                                       const engine::parallel::DistOptions& options,
                                                       const engine::Tokenizer& tokenizer,
                                                       const engine::GeneratorOptions& go);
  // A fresh Generator over the current placement (drop it before recover()).
  Result<std::unique_ptr<engine::Generator>> generator();
  // Shrinks to the survivors and re-places the model; kPeerLost when the first-epoch rank 0
  // (the server) is among the lost, or when no survivor is left to take the work.
  Status recover(const Status& cause);
  // Rank 0: sends the message; the followers: get it (kTimeout when rank 0 said nothing
  // within `timeout`). Every rank's report comes back and is kept.
  Result<StepMessage> exchange(const StepMessage* mine, std::chrono::milliseconds timeout);

  int rank() const { return cluster_.rank(); }
  int world() const { return cluster_.world_size(); }
  uint32_t n_ctx() const;
  uint32_t n_vocab() const;
  std::vector<RankReport> reports() const;
  // The measured (or the topology file's) figures of this rank's links, by the peer's first
  // rank; reported with the link bytes. Before serving.
  void set_link_figures(std::map<int, LinkFigures> f) { link_figures_ = std::move(f); }
  std::vector<Recovery> recoveries() const;

 private:
  ClusterEngine(cluster::Cluster& c, const engine::Tokenizer& t) : cluster_(c), tokenizer_(t) {}
  RankReport my_report() const;
  Status gather_reports(std::chrono::milliseconds timeout);
  Status broadcast(std::string* text);

  cluster::Cluster& cluster_;
  const engine::Tokenizer& tokenizer_;
  engine::parallel::DistOptions opt_;
  engine::GeneratorOptions go_;
  std::unique_ptr<coll::Communicator> comm_;
  std::unique_ptr<engine::parallel::Placement> pl_;
  std::vector<int> members_;  // first-epoch ranks of the current members, by current rank
  int first_rank_ = 0;
  bool data_plane_ = false;  // the last message had a step: the next comes on the data plane
  std::chrono::steady_clock::time_point last_report_{};  // rank 0
  uint64_t coll_bytes_before_ = 0, coll_calls_before_ = 0;  // of earlier placements
  // Link bytes to each peer (by first rank) the endpoints of earlier epochs moved.
  std::map<int, std::pair<uint64_t, uint64_t>> link_bytes_before_;
  // Per peer (first rank): the bytes of earlier epochs plus the current endpoints'.
  std::map<int, std::pair<uint64_t, uint64_t>> link_bytes() const;
  std::map<int, LinkFigures> link_figures_;
  mutable HostReadings host_;
  mutable std::mutex mu_;
  std::vector<RankReport> reports_;                            // guarded by mu_
  std::chrono::steady_clock::time_point reports_at_{};         // guarded by mu_
  void set_reports(std::vector<RankReport> reports);           // with mu_ held
  std::vector<Recovery> recoveries_;                           // guarded by mu_
};

// Rank 0's side of the channel, for its EngineLoop.
class LeaderChannel final : public StepChannel {
 public:
  explicit LeaderChannel(ClusterEngine& engine) : engine_(engine) {}
  Status exchange(const std::vector<StepOp>& ops, bool step, bool stop) override;
  bool recoverable(const Status& failure) const override;
  Result<std::unique_ptr<engine::Generator>> recover(const Status& cause) override;

 private:
  ClusterEngine& engine_;
};

// A follower: takes rank 0's calls and steps with it until rank 0 stops (Ok) or is lost, or
// a failure cannot be recovered from.
Status follow(ClusterEngine& engine, std::chrono::milliseconds timeout);

}  // namespace lattice::serve
