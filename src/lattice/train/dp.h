// Data parallel over a cluster: the GradGroup of train.h on lattice's collectives.
//
// all_reduce_sum sums in buckets (bucket_floats each, one coll::all_reduce per bucket; every
// rank gets the same bits, so the weights stay identical). A lost rank fails the call with
// kPeerLost (or kTimeout: both count as a loss); recover() then moves the survivors to the
// next epoch together (cluster shrink, engine/parallel/recovery.h: a rank that cannot rejoin
// within the bound is fenced and fails). sync_state() makes every survivor continue from the
// furthest step any of them reached: a rank whose all-reduce completed just before the loss
// has applied that step; the others receive its weights and optimizer state (a broadcast),
// instead of diverging by one update.
//
// Thread safety: the rank's training thread only, like its Cluster.
#pragma once

#include <chrono>
#include <memory>

#include "lattice/cluster/cluster.h"
#include "lattice/coll/comm.h"
#include "lattice/train/train.h"

namespace lattice::train {

struct DpOptions {
  size_t bucket_floats = size_t{1} << 20;  // 4 MiB buckets
  std::chrono::milliseconds coll_timeout{30000};
  std::chrono::milliseconds recovery_timeout{20000};
};

class ClusterGradGroup final : public GradGroup {
 public:
  static Result<std::unique_ptr<ClusterGradGroup>> create(cluster::Cluster& cluster, DpOptions options = {});

  int rank() const override { return cluster_->rank(); }
  int world_size() const override { return cluster_->world_size(); }
  Status all_reduce_sum(std::span<float> data) override;
  Status recover() override;
  Status sync_state(uint64_t& next_step, std::span<float> params, std::span<float> m, std::span<float> v) override;
  Status before_step(uint64_t step) override { return hook_ ? hook_(step) : Status::Ok(); }

  // Called at the start of every step (fault injection: a rank that kills itself at step N).
  void set_before_step(std::function<Status(uint64_t)> hook) { hook_ = std::move(hook); }
  // First-epoch ranks of the current members, by current rank.
  const std::vector<int>& members() const { return members_; }

 private:
  ClusterGradGroup(cluster::Cluster& c, DpOptions o) : cluster_(&c), options_(o) {}
  Status broadcast(std::span<float> data, int root);

  cluster::Cluster* cluster_;
  DpOptions options_;
  std::unique_ptr<coll::Communicator> comm_;
  std::vector<int> members_;
  std::function<Status(uint64_t)> hook_;
};

}  // namespace lattice::train
