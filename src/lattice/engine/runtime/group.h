// Group: the ranks one forward pass runs over, as the engine sees them. The forward pass
// calls these collectives at fixed points (after attention, after the FFN, to agree on a
// token); on a group of one they are no-ops, so one node runs the same code as N ranks and
// nothing branches on "am I distributed" (MLX's empty group). The implementation over the
// collectives layer is parallel::CommGroup (engine/parallel/comm_group.h); this header
// depends on no network code, so programs that only run one node need not link it.
//
// Thread safety: used by one thread at a time (the rank's), like the communicator under it.
// Every call blocks until done or failed; implementations bound each call by a deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "lattice/core/status.h"

namespace lattice::engine {

// What the collectives cost this rank so far.
struct CollStats {
  uint64_t calls = 0;
  uint64_t bytes = 0;  // payload bytes this rank handed to collectives (its contribution)
  double seconds = 0;  // wall time inside collective calls (waiting for peers included)
};

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // buf (count floats) becomes the sum over the group, on every rank.
  virtual Status all_reduce_sum(float* buf, size_t count) = 0;
  // out (size() * count floats) receives every rank's `in`, by rank.
  virtual Status all_gather(const float* in, float* out, size_t count) = 0;
  // buf (n_words 4-byte words: floats or int32s) from `root` to every rank.
  virtual Status broadcast32(void* buf, size_t n_words, int root) = 0;
  // Point to point (pipeline stages).
  virtual Status send(const float* buf, size_t count, int peer) = 0;
  virtual Status recv(float* buf, size_t count, int peer) = 0;

  const CollStats& stats() const { return stats_; }

 protected:
  CollStats stats_;
};

// The group of one: every collective is the identity, point to point is refused.
class SoloGroup final : public Group {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status all_reduce_sum(float*, size_t) override { return Status::Ok(); }
  Status all_gather(const float* in, float* out, size_t count) override {
    if (in != out && count) std::memmove(out, in, count * sizeof(float));
    return Status::Ok();
  }
  Status broadcast32(void*, size_t, int) override { return Status::Ok(); }
  Status send(const float*, size_t, int peer) override { return no_peer(peer); }
  Status recv(float*, size_t, int peer) override { return no_peer(peer); }

 private:
  static Status no_peer(int peer) {
    return InvalidArgument("a group of one has no peer " + std::to_string(peer));
  }
};

}  // namespace lattice::engine
