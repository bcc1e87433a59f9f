#include "lattice/train/dp.h"

#include <algorithm>

#include "lattice/coll/coll.h"
#include "lattice/engine/parallel/recovery.h"

namespace lattice::train {

Result<std::unique_ptr<ClusterGradGroup>> ClusterGradGroup::create(cluster::Cluster& cluster, DpOptions options) {
  std::unique_ptr<ClusterGradGroup> g(new ClusterGradGroup(cluster, options));
  coll::CommOptions co;
  // The communication thread shares the rank's cores with backward: while it waits for a
  // peer's bucket it gives the core away at every empty poll instead of spinning on it.
  if (options.overlap) co.spin_before_yield = 1;
  LATTICE_ASSIGN_OR_RETURN(g->comm_, coll::Communicator::create(cluster, co));
  for (int r = 0; r < cluster.world_size(); ++r) g->members_.push_back(r);
  return g;
}

Status ClusterGradGroup::all_reduce_sum(std::span<float> data) {
  if (world_size() == 1) return Status::Ok();
  coll::CollOptions co;
  co.timeout = options_.coll_timeout;
  for (size_t at = 0; at < data.size(); at += options_.bucket_floats) {
    const size_t n = std::min(options_.bucket_floats, data.size() - at);
    Status st = coll::all_reduce(*comm_, data.data() + at, data.data() + at, n, coll::DType::kF32,
                                 coll::ReduceOp::kSum, co);
    if (!st.ok()) {
      // Every way a lost rank shows (lost, timed out, cancelled) is one the survivors recover from.
      if (engine::parallel::recoverable(st)) return Status(ErrorCode::kPeerLost, st.to_string());
      return st;
    }
  }
  return Status::Ok();
}

std::vector<Bucket> plan_buckets(std::span<const std::pair<size_t, size_t>> units, size_t bucket_floats) {
  bucket_floats = std::max<size_t>(1, bucket_floats);
  std::vector<Bucket> out;
  bool open = false;
  Bucket cur;
  auto flush = [&] {
    if (!open) return;
    for (size_t at = cur.lo; at < cur.hi; at += bucket_floats)
      out.push_back({at, std::min(cur.hi, at + bucket_floats), cur.unit});
    open = false;
  };
  for (size_t k = 0; k < units.size(); ++k) {
    const auto [lo, hi] = units[k];
    if (hi <= lo) continue;
    const bool below = open && hi == cur.lo, above = open && lo == cur.hi;
    if ((below || above) && cur.hi - cur.lo + (hi - lo) <= bucket_floats) {
      cur = {below ? lo : cur.lo, below ? cur.hi : hi, k};
      continue;
    }
    flush();
    cur = {lo, hi, k};
    open = true;
  }
  flush();
  return out;
}

ClusterGradGroup::~ClusterGradGroup() {
  if (!comm_thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  comm_thread_.join();
}

Status ClusterGradGroup::reduce_bucket(const Bucket& b) {
  coll::CollOptions co;
  co.timeout = options_.coll_timeout;
  float* p = pending_.data() + b.lo;
  Status st = coll::all_reduce(*comm_, p, p, b.hi - b.lo, coll::DType::kF32, coll::ReduceOp::kSum, co);
  if (st.ok()) return st;
  if (engine::parallel::recoverable(st)) return Status(ErrorCode::kPeerLost, st.to_string());
  return st;
}

void ClusterGradGroup::reduce_begin(std::span<float> data, std::span<const std::pair<size_t, size_t>> units) {
  pending_ = data;
  if (units_.size() != units.size() || !std::equal(units.begin(), units.end(), units_.begin())) {
    units_.assign(units.begin(), units.end());
    buckets_ = plan_buckets(units_, options_.bucket_floats);
  }
  std::lock_guard lock(mu_);
  queued_ = finished_ = 0;
  step_status_ = Status::Ok();
  stepping_ = true;
}

void ClusterGradGroup::issue_through(size_t unit) {
  if (world_size() == 1 || !options_.overlap) return;
  {
    std::lock_guard lock(mu_);
    const size_t before = queued_;
    while (queued_ < buckets_.size() && buckets_[queued_].unit <= unit) ++queued_;
    if (queued_ == before) return;
  }
  if (!comm_thread_.joinable()) comm_thread_ = std::thread([this] { comm_loop(); });
  cv_.notify_all();
}

void ClusterGradGroup::unit_ready(size_t unit) { issue_through(unit); }

void ClusterGradGroup::comm_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || finished_ < queued_; });
    if (stop_) return;
    const Bucket b = buckets_[finished_];
    const bool failed = !step_status_.ok();  // the communicator is sticky-failed: skip the rest
    lock.unlock();
    Status st = failed ? Status::Ok() : reduce_bucket(b);
    lock.lock();
    if (!st.ok() && step_status_.ok()) step_status_ = st;
    ++finished_;
    cv_.notify_all();
  }
}

Status ClusterGradGroup::reduce_end() {
  if (world_size() == 1) return Status::Ok();
  if (!options_.overlap) {
    for (const Bucket& b : buckets_) LATTICE_RETURN_IF_ERROR(reduce_bucket(b));
    return Status::Ok();
  }
  issue_through(units_.size());  // units backward did not report (a rank without rows)
  std::unique_lock lock(mu_);
  // Bounded: each bucket's all-reduce gives up at its deadline (coll_timeout).
  cv_.wait(lock, [&] { return finished_ == buckets_.size(); });
  stepping_ = false;
  return step_status_;
}

Status ClusterGradGroup::barrier() {
  if (world_size() == 1) return Unavailable("one rank");
  {
    std::lock_guard lock(mu_);
    if (stepping_ && queued_ > 0 && options_.overlap) return Unavailable("a reduction is in flight");
  }
  coll::CollOptions co;
  co.timeout = options_.coll_timeout;
  Status st = coll::barrier(*comm_, co);
  if (!st.ok() && engine::parallel::recoverable(st)) return Status(ErrorCode::kPeerLost, st.to_string());
  return st;
}

Status ClusterGradGroup::next_epoch() {
  // Fencing (engine/parallel/recovery.h): one bounded attempt; a rank that cannot rejoin stops.
  if (Status st = cluster_->shrink(Deadline::after(options_.recovery_timeout)); !st.ok())
    return Status(ErrorCode::kPeerLost, "fenced: could not rejoin the others within " +
                                            std::to_string(options_.recovery_timeout.count()) + " ms: " + st.to_string());
  members_ = cluster_->origins();
  return Status::Ok();
}

// A loss and a join both end in next_epoch() then sync_state(): a node waiting to join enters
// at whichever comes first and runs sync_state() as its first call either way.
Status ClusterGradGroup::recover() { return next_epoch(); }

Status ClusterGradGroup::grow(uint64_t next_step, std::span<float> params, std::span<float> m, std::span<float> v) {
  const int before = world_size();
  LATTICE_RETURN_IF_ERROR(next_epoch());
  if (options_.joins) {
    const int admitted = std::max(0, world_size() - before);
    int seen = options_.joins->load();
    while (!options_.joins->compare_exchange_weak(seen, std::max(0, seen - std::max(admitted, 1)))) {
    }
  }
  uint64_t next = next_step;
  return sync_within(options_.join_timeout, next, params, m, v);
}

std::shared_ptr<std::atomic<int>> ClusterGradGroup::watch_joins(cluster::ClusterOptions& options) {
  auto joins = std::make_shared<std::atomic<int>>(0);
  options.on_event = [joins, chained = std::move(options.on_event)](const cluster::MembershipEvent& e) {
    if (e.kind == cluster::EventKind::kJoinRequest) joins->fetch_add(1);
    if (chained) chained(e);
  };
  return joins;
}

Status ClusterGradGroup::check_same(uint64_t weights_hash) {
  if (world_size() == 1) return Status::Ok();
  auto all = cluster_->allgather(std::to_string(weights_hash), Deadline::after(options_.coll_timeout));
  if (!all.ok()) return Status::Ok();  // a rank gone after the last step: nothing left to compare with
  for (size_t r = 0; r < all->size(); ++r)
    if ((*all)[r] != (*all)[0])
      return Internal("rank " + std::to_string(r) + " ended with other weights than rank 0 (hash " + (*all)[r] +
                      " vs " + (*all)[0] + ")");
  return Status::Ok();
}

Status ClusterGradGroup::broadcast(std::span<float> data, int root) {
  coll::CollOptions co;
  co.timeout = options_.coll_timeout;
  for (size_t at = 0; at < data.size(); at += options_.bucket_floats) {
    const size_t n = std::min(options_.bucket_floats, data.size() - at);
    LATTICE_RETURN_IF_ERROR(
        coll::broadcast(*comm_, data.data() + at, data.data() + at, n, coll::DType::kF32, root, co));
  }
  return Status::Ok();
}

Status ClusterGradGroup::sync_state(uint64_t& next_step, std::span<float> params, std::span<float> m,
                                    std::span<float> v) {
  // A joiner's first call meets the members' call in grow().
  return sync_within(options_.joining && !joined_ ? options_.join_timeout : options_.recovery_timeout, next_step,
                     params, m, v);
}

Status ClusterGradGroup::sync_within(std::chrono::milliseconds timeout, uint64_t& next_step, std::span<float> params,
                                     std::span<float> m, std::span<float> v) {
  joined_ = true;
  auto all = cluster_->allgather(std::to_string(next_step), Deadline::after(timeout));
  if (!all.ok()) return all.status().with_context("agreeing on the step after a recovery");
  uint64_t best = 0;
  int root = -1;
  bool differ = false;
  for (size_t r = 0; r < all->size(); ++r) {
    const uint64_t s = std::strtoull((*all)[r].c_str(), nullptr, 10);
    if (root >= 0 && s != best) differ = true;
    if (root < 0 || s > best) best = s, root = static_cast<int>(r);
  }
  if (!differ) return Status::Ok();
  for (std::span<float> a : {params, m, v}) LATTICE_RETURN_IF_ERROR(broadcast(a, root));
  next_step = best;
  return Status::Ok();
}

}  // namespace lattice::train
