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
// The step's reduction (reduce_begin/unit_ready/reduce_end) runs in buckets planned from
// backward's units (plan_buckets): consecutive units adjacent in memory share a bucket up to
// bucket_floats, larger ones are split. With `overlap` a communication thread all-reduces each
// bucket as soon as its last unit is final, in backward's order, while backward goes on;
// without, reduce_end() runs the same buckets in the same order on the caller's thread. The
// same collective calls on the same bits: both give bit-identical sums (tested).
//
// Growing: the cluster tells every member when a node asks to join (LATTICE_REJOIN=1, the same
// job's options); each rank adds what it saw to the step's reduction, so all see the same sum
// and, after that step's update, move to the next epoch together with the newcomers (the same
// shrink() a loss takes). The newcomer then gets the step, the weights and the AdamW moments
// by the broadcast of sync_state(); the data position is the step (batches are drawn by step).
//
// Thread safety: the rank's training thread only, like its Cluster; the communication thread
// uses the communicator only between reduce_begin() and the end of reduce_end().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lattice/cluster/cluster.h"
#include "lattice/coll/comm.h"
#include "lattice/train/train.h"

namespace lattice::train {

struct DpOptions {
  size_t bucket_floats = size_t{1} << 20;  // 4 MiB buckets
  bool overlap = true;                      // all-reduce buckets while backward runs
  std::chrono::milliseconds coll_timeout{30000};
  std::chrono::milliseconds recovery_timeout{20000};
  // Members wait this long after a grow for the newcomer to prepare (tokenize its corpus).
  std::chrono::milliseconds join_timeout{180000};
  // Nodes asking to join, counted by the cluster's events (watch_joins()); null: never grow.
  std::shared_ptr<std::atomic<int>> joins = nullptr;
  bool joining = false;  // this rank joined a running job (cluster::ClusterOptions::rejoin)
};

struct Bucket {
  size_t lo = 0, hi = 0;  // floats [lo, hi) of the step's buffer
  size_t unit = 0;        // the last unit of backward it needs
};
// Units in backward's order -> buckets in the order they are reduced.
std::vector<Bucket> plan_buckets(std::span<const std::pair<size_t, size_t>> units, size_t bucket_floats);

class ClusterGradGroup final : public GradGroup {
 public:
  ~ClusterGradGroup() override;
  static Result<std::unique_ptr<ClusterGradGroup>> create(cluster::Cluster& cluster, DpOptions options = {});

  int rank() const override { return cluster_->rank(); }
  int world_size() const override { return cluster_->world_size(); }
  Status all_reduce_sum(std::span<float> data) override;
  Status recover() override;
  Status sync_state(uint64_t& next_step, std::span<float> params, std::span<float> m, std::span<float> v) override;
  Status before_step(uint64_t step) override { return hook_ ? hook_(step) : Status::Ok(); }
  void reduce_begin(std::span<float> data, std::span<const std::pair<size_t, size_t>> units) override;
  void unit_ready(size_t unit) override;
  Status reduce_end() override;
  Status barrier() override;
  float joiners_waiting() const override { return options_.joins ? float(options_.joins->load() > 0) : 0.0f; }
  Status grow(uint64_t next_step, std::span<float> params, std::span<float> m, std::span<float> v) override;
  bool joining() const override { return options_.joining; }
  Status check_same(uint64_t weights_hash) override;

  // Chains a counter of join requests into the options' event callback: call before
  // join_cluster(), pass the counter as DpOptions::joins.
  static std::shared_ptr<std::atomic<int>> watch_joins(cluster::ClusterOptions& options);

  // Called at the start of every step (fault injection: a rank that kills itself at step N).
  void set_before_step(std::function<Status(uint64_t)> hook) { hook_ = std::move(hook); }
  // First-epoch ranks of the current members, by current rank.
  const std::vector<int>& members() const { return members_; }

 private:
  ClusterGradGroup(cluster::Cluster& c, DpOptions o) : cluster_(&c), options_(o) {}
  Status broadcast(std::span<float> data, int root);
  Status next_epoch();
  Status sync_within(std::chrono::milliseconds timeout, uint64_t& next_step, std::span<float> params,
                     std::span<float> m, std::span<float> v);  // shrink(): the survivors plus the nodes waiting to join
  Status reduce_bucket(const Bucket& b);
  void issue_through(size_t unit);  // queues every bucket whose last unit is <= unit
  void comm_loop();

  cluster::Cluster* cluster_;
  DpOptions options_;
  std::unique_ptr<coll::Communicator> comm_;
  std::vector<int> members_;
  std::function<Status(uint64_t)> hook_;
  // The step's reduction: its buckets (re-planned when the units change), how many are queued
  // for the communication thread and how many it finished, its first error.
  std::vector<std::pair<size_t, size_t>> units_;
  std::vector<Bucket> buckets_;
  size_t queued_ = 0, finished_ = 0;
  Status step_status_;
  bool stepping_ = false, stop_ = false;
  bool joined_ = false;  // a joiner's first sync_state() is behind it
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread comm_thread_;  // started with the first overlapped step
};

}  // namespace lattice::train
