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
#include <span>
#include <string>

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
  // in (size() * count floats) summed over the group; block rank() of the sum into out
  // (count floats, apart from in).
  virtual Status reduce_scatter_sum(const float* in, float* out, size_t count) = 0;
  // Block q of in (size() * count 4-byte words) to rank q; block q of out from rank q.
  virtual Status all_to_all32(const void* in, void* out, size_t count) = 0;
  // send_counts[q] floats at in + send_offsets[q] to rank q, recv_counts[q] floats from rank q
  // into out + recv_offsets[q] (one entry per rank, this one included; recv_counts[q] here is
  // send_counts[rank()] on q). in and out apart.
  virtual Status all_to_allv(const float* in, std::span<const size_t> send_counts,
                             std::span<const size_t> send_offsets, float* out, std::span<const size_t> recv_counts,
                             std::span<const size_t> recv_offsets) = 0;
  // Whether all_to_allv runs as direct transfers (a link between every pair of ranks).
  virtual bool direct_all_to_all() const = 0;
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
  Status reduce_scatter_sum(const float* in, float* out, size_t count) override { return all_gather(in, out, count); }
  Status all_to_all32(const void* in, void* out, size_t count) override {
    if (in != out && count) std::memmove(out, in, count * 4);
    return Status::Ok();
  }
  Status all_to_allv(const float* in, std::span<const size_t> sc, std::span<const size_t> so, float* out,
                     std::span<const size_t> rc, std::span<const size_t> ro) override {
    if (sc.size() != 1 || so.size() != 1 || rc.size() != 1 || ro.size() != 1 || sc[0] != rc[0])
      return InvalidArgument("all_to_allv on a group of one: one count and offset each, sent = received");
    if (sc[0]) std::memmove(out + ro[0], in + so[0], sc[0] * sizeof(float));
    return Status::Ok();
  }
  bool direct_all_to_all() const override { return true; }
  Status broadcast32(void*, size_t, int) override { return Status::Ok(); }
  Status send(const float*, size_t, int peer) override { return no_peer(peer); }
  Status recv(float*, size_t, int peer) override { return no_peer(peer); }

 private:
  static Status no_peer(int peer) {
    return InvalidArgument("a group of one has no peer " + std::to_string(peer));
  }
};

}  // namespace lattice::engine
