#include "lattice/engine/parallel/comm_group.h"

#include "lattice/coll/coll.h"

namespace lattice::engine::parallel {

template <class Fn>
Status CommGroup::timed(Fn&& fn, size_t bytes_sent) {
  const auto t0 = std::chrono::steady_clock::now();
  coll::CollOptions co;
  co.timeout = timeout_;
  Status st = fn(co);
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.calls++;
  stats_.bytes += bytes_sent;
  return st;
}

Status CommGroup::all_reduce_sum(float* buf, size_t count) {
  return timed([&](const coll::CollOptions& co) {
    return coll::all_reduce(*comm_, buf, buf, count, coll::DType::kF32, coll::ReduceOp::kSum, co);
  }, count * sizeof(float));
}

Status CommGroup::all_gather(const float* in, float* out, size_t count) {
  return timed([&](const coll::CollOptions& co) {
    return coll::all_gather(*comm_, in, out, count, coll::DType::kF32, co);
  }, count * sizeof(float));
}

Status CommGroup::reduce_scatter_sum(const float* in, float* out, size_t count) {
  return timed([&](const coll::CollOptions& co) {
    return coll::reduce_scatter(*comm_, in, out, count, coll::DType::kF32, coll::ReduceOp::kSum, co);
  }, count * size_t(comm_->world_size()) * sizeof(float));
}

Status CommGroup::all_to_all32(const void* in, void* out, size_t count) {
  return timed([&](const coll::CollOptions& co) {
    return coll::all_to_all(*comm_, in, out, count, coll::DType::kI32, co);
  }, count * size_t(comm_->world_size() - 1) * 4);
}

Status CommGroup::all_to_allv(const float* in, std::span<const size_t> sc, std::span<const size_t> so, float* out,
                              std::span<const size_t> rc, std::span<const size_t> ro) {
  size_t sent = 0;
  for (size_t q = 0; q < sc.size(); ++q)
    if (int(q) != comm_->rank()) sent += sc[q];
  return timed([&](const coll::CollOptions& co) {
    return coll::all_to_allv(*comm_, in, sc, so, out, rc, ro, coll::DType::kF32, co);
  }, sent * sizeof(float));
}

Status CommGroup::broadcast32(void* buf, size_t n_words, int root) {
  const size_t sent = comm_->rank() == root ? n_words * 4 * (comm_->world_size() - 1) : 0;
  return timed([&](const coll::CollOptions& co) {
    return coll::broadcast(*comm_, buf, buf, n_words, coll::DType::kI32, root, co);
  }, sent);
}

Status CommGroup::send(const float* buf, size_t count, int peer) {
  return timed([&](const coll::CollOptions& co) {
    return coll::send(*comm_, buf, count, coll::DType::kF32, peer, co);
  }, count * sizeof(float));
}

Status CommGroup::recv(float* buf, size_t count, int peer) {
  return timed([&](const coll::CollOptions& co) {
    return coll::recv(*comm_, buf, count, coll::DType::kF32, peer, co);
  }, 0);
}

}  // namespace lattice::engine::parallel
