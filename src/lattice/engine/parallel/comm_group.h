// CommGroup: the engine's Group (runtime/group.h) over a collectives Communicator, so the one
// forward pass runs across ranks. Each call is timed into stats() and bounded by `timeout`:
// a dead peer fails it with kPeerLost (or kTimeout) instead of blocking forever.
//
// Thread safety: one thread, like the Communicator. The Communicator must outlive it.
#pragma once

#include <chrono>

#include "lattice/coll/comm.h"
#include "lattice/engine/runtime/group.h"

namespace lattice::engine::parallel {

class CommGroup final : public Group {
 public:
  explicit CommGroup(coll::Communicator& comm, std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : comm_(&comm), timeout_(timeout) {}

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->world_size(); }
  Status all_reduce_sum(float* buf, size_t count) override;
  Status all_gather(const float* in, float* out, size_t count) override;
  Status reduce_scatter_sum(const float* in, float* out, size_t count) override;
  Status all_to_all32(const void* in, void* out, size_t count) override;
  Status all_to_allv(const float* in, std::span<const size_t> send_counts, std::span<const size_t> send_offsets,
                     float* out, std::span<const size_t> recv_counts, std::span<const size_t> recv_offsets) override;
  bool direct_all_to_all() const override { return comm_->full_mesh(); }
  Status broadcast32(void* buf, size_t n_words, int root) override;
  Status send(const float* buf, size_t count, int peer) override;
  Status recv(float* buf, size_t count, int peer) override;

  coll::Communicator& comm() { return *comm_; }

 private:
  template <class Fn>
  Status timed(Fn&& fn, size_t bytes_sent);
  coll::Communicator* comm_;
  std::chrono::milliseconds timeout_;
};

}  // namespace lattice::engine::parallel
