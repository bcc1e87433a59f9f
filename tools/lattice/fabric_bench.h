// The fabric benchmark engine shared by `lattice bench fabric` and `lattice demo`.
//
// Two processes, each holding one connected Endpoint and one registered region, run a
// sequence of phases. The initiator drives; the responder serves. Phases are coordinated
// in band (over the endpoint itself, with small control messages), so the two sides need no
// other channel once connected: the demo can measure any pair of ranks.
//
// Region layout (both sides, same BenchLayout), four areas:
//   recv  targets of posted receives. With --check each receive has its own slot; without,
//         receive i starts at byte 64*i, so messages up to 64 bytes (control messages) never
//         share bytes with another receive while larger ones overlap (their contents are not read).
//   send  send/write sources and read landing buffers (n_slots slots)
//   rma   the target of the peer's writes and the source of its reads (n_slots slots)
//   ctl   the control message send buffer
// Latency (one way, microseconds; busy polling the completion queue):
//   send  ping-pong of `bytes` messages; one way = round trip / 2.
//   write ib_write_lat style: each side writes into the peer's rma area and polls the last
//         byte of its own for the new sequence value; one way = round trip / 2.
//   read  one post_read round trip, reported as is (a read has no one-way time).
// Bandwidth: `window` operations kept outstanding for about `bw_seconds`; the clock stops when
// the responder acknowledges the last one. GB/s = 1e9 bytes per second.
//
// Not thread-safe: one BenchSide per thread. Every wait has a deadline.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "lattice/core/deadline.h"
#include "lattice/core/size.h"  // parse_size / format_size, used by the benches
#include "lattice/core/status.h"
#include "lattice/fabric/fabric.h"

namespace lattice::cli {

enum class BenchOp : uint8_t { kSend = 1, kWrite = 2, kRead = 3 };
std::string_view to_string(BenchOp op);
Result<BenchOp> parse_bench_op(std::string_view s);

struct BenchLayout {
  static constexpr size_t kStagger = 64;       // distance between unchecked receives
  static constexpr size_t kMaxUncheckedRecvs = 64;  // receives kept posted without --check, at most
  static constexpr size_t kPad = 4096;
  size_t slot_bytes = 0;  // >= the largest message, >= the control message size
  size_t n_slots = 1;     // > 1 only with --check (distinct buffers per outstanding op)
  size_t unchecked_recvs = 18;  // window + 2, in [18, 64]

  size_t n_recvs() const { return n_slots > 1 ? n_slots : unchecked_recvs; }
  size_t recv_offset(size_t i) const {
    return n_slots > 1 ? (i % n_slots) * slot_bytes : (i % unchecked_recvs) * kStagger;
  }
  size_t send_offset(size_t i) const { return n_slots * slot_bytes + kPad + (i % n_slots) * slot_bytes; }
  size_t rma_offset(size_t i) const { return 2 * n_slots * slot_bytes + kPad + (i % n_slots) * slot_bytes; }
  size_t ctl_offset() const { return 3 * n_slots * slot_bytes + kPad; }
  size_t region_bytes() const { return ctl_offset() + kPad; }
  static BenchLayout for_run(size_t max_bytes, int window, bool check);
};
static_assert(BenchLayout::kStagger * BenchLayout::kMaxUncheckedRecvs <= BenchLayout::kPad);

struct PhaseSpec {
  BenchOp op = BenchOp::kSend;
  size_t bytes = 8;
  int iters = 1000;        // latency iterations measured
  int warmup = 100;        // latency iterations not measured (also bandwidth warmup ops)
  int window = 16;         // outstanding operations for bandwidth
  double bw_seconds = 0.2; // bandwidth streaming time
  bool latency = true;
  bool bandwidth = true;
  bool check = false;      // verify payloads (a distinct pattern per iteration)
};

struct PhaseResult {
  size_t bytes = 0;
  int iters = 0;
  // Latency in microseconds (one way for send/write, round trip for read); 0 if not run.
  double lat_us_min = 0, lat_us_median = 0, lat_us_avg = 0, lat_us_p99 = 0, lat_us_max = 0;
  // Bandwidth; 0 if not run.
  double bw_gbps = 0;          // 1e9 bytes per second
  double bw_msgs_per_s = 0;
  uint64_t bw_ops = 0;
  double bw_seconds = 0;
  uint64_t check_errors = 0;   // payload mismatches found (only with check)
};

// One side of a connected pair.
class BenchSide {
 public:
  // All pointers are borrowed and must outlive the BenchSide. `cq` serves as both send and
  // recv queue of `ep`. `region` has layout.region_bytes() bytes; `peer` is the peer's region.
  BenchSide(fabric::Provider* provider, fabric::Endpoint* ep, fabric::CompletionQueue* cq,
            fabric::MemoryRegion* region, fabric::RemoteRegion peer, BenchLayout layout, int peer_rank);

  // Posts the receives both sides keep outstanding; call once, after connect().
  Status start(Deadline deadline);

  // Initiator: runs one phase with the responder (which must be in serve()).
  Result<PhaseResult> run_phase(const PhaseSpec& spec, Deadline deadline);
  // Initiator: tells the responder to leave serve().
  Status stop_peer(Deadline deadline);
  // Responder: serves phases until the initiator calls stop_peer(), an error, or the deadline.
  Status serve(Deadline deadline);

  // Waits until every operation this side posted has completed (call before tearing down).
  Status drain(Deadline deadline);
  // Polls the completion queue once without waiting: an idle side calls it now and then so
  // providers that progress on the caller's thread keep the link alive.
  Status progress() { return poll_once(); }

 public:
  struct Ctl;  // the in-band control message (fabric_bench.cc)

 private:
  Status post_ctl(const Ctl& c);
  Result<Ctl> wait_ctl(uint32_t kind, Deadline deadline, bool block = false);
  // Polls the CQ once; handles send/write/read completions, queues receives. With `block`,
  // waits (CompletionQueue::wait, which sleeps) up to a millisecond for one instead.
  Status poll_once(bool block = false);
  // Waits for the next receive completion; returns its slot and byte count. The caller must
  // repost it with repost_recv(slot) once it has read the data. `block`: sleep-wait instead of
  // busy polling (for a side that only waits while its peer streams one-sided operations).
  Status wait_recv(size_t* slot, size_t* n_bytes, Deadline deadline, bool block = false);
  Status repost_recv(size_t slot);
  Status wait_sends_below(int limit, Deadline deadline);

  Status lat_send(const PhaseSpec& s, bool initiator, std::vector<double>* rtt_ns, uint64_t* errors, Deadline d);
  Status lat_write(const PhaseSpec& s, bool initiator, std::vector<double>* rtt_ns, uint64_t* errors, Deadline d);
  Status lat_read(const PhaseSpec& s, std::vector<double>* rtt_ns, uint64_t* errors, Deadline d);
  Status bw_initiator(const PhaseSpec& s, PhaseResult* r, Deadline d);
  Status bw_responder(const PhaseSpec& s, uint64_t* errors, Deadline d);

  fabric::LocalSlice recv_slot(size_t i, size_t n) const;
  fabric::LocalSlice send_slot(size_t i, size_t n) const;
  fabric::LocalSlice rma_slot(size_t i, size_t n) const;
  fabric::RemoteSlice peer_rma_slot(size_t i, size_t n) const;

  fabric::Provider* provider_;
  fabric::Endpoint* ep_;
  fabric::CompletionQueue* cq_;
  fabric::MemoryRegion* region_;
  fabric::RemoteRegion peer_;
  BenchLayout layout_;
  int peer_rank_;
  size_t max_inline_;
  size_t n_recvs_ = 0;        // receives kept posted
  int outstanding_ = 0;       // posted sends/writes/reads not yet completed
  uint64_t next_id_ = 1;
  Status error_;              // first failed completion; sticky
  std::deque<std::pair<size_t, size_t>> ready_recvs_;  // (slot, bytes) completed receives, FIFO
};

// One side's fabric objects for one peer. Members are destroyed endpoint first (reverse order).
struct BenchEnd {
  std::unique_ptr<fabric::CompletionQueue> cq;
  std::unique_ptr<fabric::MemoryRegion> region;
  std::unique_ptr<fabric::Endpoint> ep;
};
Result<BenchEnd> make_bench_end(fabric::Provider& provider, const BenchLayout& layout, int window, int peer_rank);

// What one side tells the other before connect(): address blob, region, provider name (JSON).
struct PeerInfo {
  std::vector<std::byte> address;
  fabric::RemoteRegion region;
  std::string provider;
};
std::string encode_peer_info(const BenchEnd& end, std::string_view provider_name);
// Validates everything (the bytes come from another process or host).
Result<PeerInfo> decode_peer_info(std::string_view json, const BenchLayout& expected);

// Iterations for `bytes` when the user asked for `iters` at small sizes: fewer for large
// messages (ib_*_lat style), never below a floor.
int scaled_iters(int iters, size_t bytes);

}  // namespace lattice::cli
