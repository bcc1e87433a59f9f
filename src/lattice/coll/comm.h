// Communicator: the collectives' view of a Group, plus the staging memory every transfer
// goes through, registered once per provider (one region per provider: providers such as
// Apple's Thunderbolt RDMA allow only ~100 registrations, and two-sided providers need
// registered buffers for sends and receives).
//
// Staging layout per provider: for each peer on that provider, `slots_per_peer` send slots
// then `slots_per_peer` receive slots of `chunk_bytes` each. Dedicated slots per peer keep
// the executor free of cross-peer waits: a receive posted for peer A can only wait on A.
//
// Failure: a collective that fails (peer lost, timeout, corrupt message) leaves receives
// posted on healthy endpoints, so the communicator turns sticky-failed: every later call
// returns the same error until the group moves to a new epoch (Cluster::shrink), when the
// next call rebuilds the staging for the new membership automatically.
//
// Thread safety: like its Group, used by one thread at a time. The Group must outlive it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "lattice/cluster/group.h"
#include "lattice/coll/dtype.h"
#include "lattice/coll/plan/plan.h"
#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::coll {

struct CommOptions {
  size_t chunk_bytes = 256 * 1024;  // staging slot size: the largest single message
  int slots_per_peer = 4;           // messages in flight per peer and direction
};

class Communicator {
 public:
  // Registers the staging memory with every provider the group's links use.
  static Result<std::unique_ptr<Communicator>> create(cluster::Group& group, const CommOptions& options = {});
  ~Communicator();

  cluster::Group& group() const { return *group_; }
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->world_size(); }
  const CommOptions& options() const { return options_; }
  // Ok, or the error of the collective that broke this communicator (see above).
  Status status() const { return broken_; }
  // True when every link's provider supports one-sided writes.
  bool rma_write() const { return rma_write_; }

  // Runs a plan: `in`/`out` are the caller's buffers (either may be null where the plan never
  // references it), `chunk_bytes` (0: the staging slot size) splits transfers into messages.
  // Blocks until done or `deadline`.
  Status execute(const plan::Plan& plan, DType dtype, ReduceOp op, const void* in, void* out, size_t chunk_bytes,
                 Deadline deadline);

 private:
  struct Staging;
  struct PeerState;
  Communicator() = default;
  Status build();
  Status exchange(const plan::Step& step, size_t esize, DType dtype, ReduceOp op, size_t chunk_bytes,
                  Deadline deadline);
  std::byte* resolve(plan::Ref ref, size_t esize) const;
  Status fail(Status s);
  Status check_links();

  cluster::Group* group_ = nullptr;
  CommOptions options_;
  uint64_t epoch_ = 0;
  int world_ = 0;
  Status broken_;
  bool rma_write_ = false;
  uint64_t seq_ = 0;
  std::vector<std::unique_ptr<Staging>> staging_;
  std::vector<std::unique_ptr<Staging>> retired_;  // staging of past epochs: may still be the target of posted receives
  std::vector<PeerState> peers_;
  std::vector<fabric::CompletionQueue*> cqs_;
  // Current call's buffers.
  const std::byte* in_ = nullptr;
  std::byte* out_ = nullptr;
  std::byte* tmp_ = nullptr;
  std::unique_ptr<std::byte[]> tmp_storage_;
  size_t tmp_bytes_ = 0;
};

}  // namespace lattice::coll
