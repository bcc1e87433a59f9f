#include "lattice/train/dp.h"

#include <algorithm>

#include "lattice/coll/coll.h"
#include "lattice/engine/parallel/recovery.h"

namespace lattice::train {

Result<std::unique_ptr<ClusterGradGroup>> ClusterGradGroup::create(cluster::Cluster& cluster, DpOptions options) {
  std::unique_ptr<ClusterGradGroup> g(new ClusterGradGroup(cluster, options));
  LATTICE_ASSIGN_OR_RETURN(g->comm_, coll::Communicator::create(cluster));
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

Status ClusterGradGroup::recover() {
  const engine::parallel::Progress none;
  LATTICE_ASSIGN_OR_RETURN(auto shrunk,
                           engine::parallel::shrink_and_agree(*cluster_, members_, none, options_.recovery_timeout));
  members_ = shrunk.members;
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
  auto all = cluster_->allgather(std::to_string(next_step), Deadline::after(options_.recovery_timeout));
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
