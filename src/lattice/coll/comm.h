// Communicator: the collectives' view of a Group, plus the staging memory every transfer
// goes through, registered once per provider (one region per provider: providers such as
// Apple's Thunderbolt RDMA allow only ~100 registrations, and two-sided providers need
// registered buffers for sends and receives).
//
// Staging layout per provider: for each peer lane on that provider, `slots_per_peer` send
// slots then `slots_per_peer` receive slots of `chunk_bytes` each (direct lanes, see
// CommOptions::zero_copy: receive slots only, of direct_chunk_bytes). Dedicated slots per peer keep
// the executor free of cross-peer waits: a receive posted for peer A can only wait on A. A pair
// with several links (cables) has one lane per link (up to kMaxLanes), and the executor stripes
// each step's messages to that peer round robin over them.
//
// Failure: a collective that fails (peer lost, timeout, corrupt message) leaves receives
// posted on healthy endpoints, so the communicator turns sticky-failed: every later call
// returns the same error until the group moves to a new epoch (Cluster::shrink), when the
// next call rebuilds the staging for the new membership automatically.
//
// Thread safety: like its Group, used by one thread at a time. The Group must outlive it.
//
// Files: comm.cc (staging, lanes, plan cache, liveness checks), executor.cc + pipeline.cc (the
// one executor every plan runs on), landing.cc + twoshot.cc (the one-sided landing zones). Which
// of them a collective call takes is chosen once per call: choose.h.
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "lattice/cluster/group.h"
#include "lattice/coll/dtype.h"
#include "lattice/coll/plan/plan.h"
#include "lattice/coll/plan/ring_route.h"
#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::coll {

struct CommOptions {
  size_t chunk_bytes = 256 * 1024;  // staging slot size: the largest single message
  int slots_per_peer = 4;           // messages in flight per peer and direction
  // Empty polls before the executor yields the core on every further empty poll. 0: automatic,
  // 1 when the world has more ranks than this host has cores (oversubscribed: the peer we
  // wait for needs our core, so every empty poll gives it away), else never (the provider's
  // own back-off applies).
  int spin_before_yield = 0;
  // One-shot all-reduce through one-sided writes (when every link's provider has rma_write):
  // each rank writes its buffer into every peer's landing zone, then reduces locally in rank
  // order. Buffers up to this size take that path; 0 disables it.
  size_t rma_zone_bytes = 64 * 1024;
  // Two-shot all-reduce through one-sided writes (same providers as above): reduce-scatter by
  // writing segment q of my buffer into rank q's landing slots, rank q reduces its segment in
  // rank order, then all-gather by writing the reduced segment into every peer's slots.
  // Pipelined in chunks of this size with `twoshot_depth` landing slots per peer and phase
  // (credits written back keep a writer from overwriting an unread slot). 0 disables it.
  size_t twoshot_chunk_bytes = 64 * 1024;
  int twoshot_depth = 4;
  // Where the provider maps peers' memory (ProviderCaps::map_remote: shm), both one-sided paths
  // load and store peers' landing zones directly (one-shot: each rank's contribution stays in
  // its own zone and peers read it) instead of posting writes and reaping their completions.
  // Every rank must map every peer, else all post. False: always post.
  bool map_peers = true;
  // Two-sided transfers on providers that can release posted memory (ProviderCaps::
  // release_buffer: tcp) send straight from the caller's buffers and receive plain copies
  // straight into them, skipping the staging slots (two of a byte's four copies on tcp).
  // Reducing receives still land in a slot. False: everything goes through the slots.
  bool zero_copy = true;
  // Message size on such direct lanes (at least chunk_bytes): their slots only take reducing
  // receives, and larger messages cost fewer completion rounds.
  size_t direct_chunk_bytes = 1024 * 1024;
  // Two-sided all_reduce plans on buffers above this size run as consecutive all-reduces of
  // slices of at most this size (same bits: every element is still combined in rank order).
  // At 4 ranks over tcp loopback a 4 MiB all-reduce cost well over four 1 MiB ones: the bytes a
  // whole-buffer step keeps in flight fall out of the caches. 0: never slice.
  size_t slice_bytes = 1024 * 1024;
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
  // Empty polls a waiting loop spins through before it gives its core away (1: more ranks than
  // the job's cores, see comm.cc; ~0u: never).
  uint32_t spin_before_yield() const { return spin_before_yield_; }
  // True when every pair of ranks is linked. Otherwise collectives run along route(): a cycle
  // through every rank over linked pairs, else a path (plan/ring_route.h); its order is empty
  // when the topology has neither.
  bool full_mesh() const { return full_mesh_; }
  const plan::Route& route() const { return route_; }
  // The plan for `shape` with `algo` on this epoch's topology (full mesh: plan::build; else
  // along route()), from a small cache: plans are plain data, and a decode loop issues the
  // same few shapes call after call. Valid until the next plan_for() or epoch change.
  Result<const plan::Plan*> plan_for(const plan::Shape& shape, Algorithm algo);
  // Rebuilds for the group's current epoch if it moved on (shrink); every collective calls it.
  Status refresh() {
    return group_->epoch() != epoch_ || group_->world_size() != world_ ? build() : Status::Ok();
  }

  // ---- landing zones (landing.cc, twoshot.cc): the one-sided paths ----
  // True when the one-sided one-shot path can run (every link's provider writes one-sided);
  // its largest buffer in bytes. The first such call swaps landing-zone keys with the peers.
  bool rma_ready() const { return rma_capable_; }
  size_t rma_zone_bytes() const { return rma_capable_ ? options_.rma_zone_bytes : 0; }
  // True once the one-sided paths store straight into peers' mapped landing zones
  // (ProviderCaps::map_remote) instead of posting writes; set up by the first such call.
  bool stores_to_peers() const { return !peer_maps_.empty(); }
  // One-shot all-reduce through one-sided writes (see CommOptions::rma_zone_bytes). Gives
  // the same bits as the two-sided one-shot plan: contributions combined in rank order.
  Status all_reduce_rma(const void* in, void* out, size_t count, DType dtype, ReduceOp op, Deadline deadline);
  // True when the one-sided two-shot can run (see CommOptions::twoshot_chunk_bytes); any size.
  // `op`: all_reduce (same bits as every other all-reduce here: each segment reduced in rank
  // order), reduce_scatter (its first half) or all_gather (its second half), with coll.h's
  // buffer conventions (count: the all_reduce buffer, else one rank's block; reduce_scatter
  // reads all of in before writing out where they overlap). `chunk_bytes` (0: the option)
  // shrinks the pipeline's chunk; every rank passes the same.
  bool twoshot_ready() const { return rma_capable_ && options_.twoshot_chunk_bytes > 0; }
  Status twoshot(CollOp op, const void* in, void* out, size_t count, DType dtype, ReduceOp rop, size_t chunk_bytes,
                 Deadline deadline);

  // ---- the executor (executor.cc, pipeline.cc): runs plans over the staging slots ----
  // Runs a plan: `in`/`out` are the caller's buffers (either may be null where the plan never
  // references it), `chunk_bytes` (0: the staging slot size) splits transfers into messages.
  // Blocks until done or `deadline`.
  Status execute(const plan::Plan& plan, DType dtype, ReduceOp op, const void* in, void* out, size_t chunk_bytes,
                 Deadline deadline);

 private:
  struct Staging;
  struct PeerState;
  Communicator() = default;
  // ---- comm.cc: staging and lanes per epoch, failure, the checks of waiting loops ----
  Status build();
  Status fail(Status s);
  Status check_links();
  // After an empty poll of the executors: yields the core when oversubscribed; every 1024
  // empty polls in a row checks the deadline (the timeout names waiting_on(), a rank still
  // awaited, or none if it gives -1) and every link. Ok: keep polling.
  template <typename WaitingOn>
  Status after_empty_poll(uint32_t* idle, Deadline deadline, const WaitingOn& waiting_on) {
    // Inline: this runs between every two empty polls of a waiting loop.
    ++*idle;
    if (*idle >= spin_before_yield_) std::this_thread::yield();
    if ((*idle & 1023) != 0) return Status::Ok();
    return idle_check(deadline, waiting_on());
  }
  // The deadline and every link, now and then from a waiting loop; `waiting_on` names the
  // rank it waits for (-1: several) in a timeout.
  Status idle_check(Deadline deadline, int waiting_on);
  // ---- executor.cc, pipeline.cc ----
  // Transfers are split into messages of chunk_of_[peer] bytes (set by execute()).
  Status exchange(const plan::Step& step, size_t esize, DType dtype, ReduceOp op, Deadline deadline);
  // Runs consecutive steps overlapped chunk by chunk (pipeline.cc); false (nothing sent) when
  // the run's messages overlap in ways it does not track, else true with the outcome in *result.
  bool exchange_pipelined(const std::vector<const plan::Step*>& run, size_t esize, DType dtype, ReduceOp op,
                          Deadline deadline, Status* result);
  std::byte* resolve(plan::Ref ref, size_t esize) const;
  // Direct transfers: registers this call's buffers (their extent in `plan`) with every
  // provider whose lanes are direct; drops them when the call ends (release_user()).
  Status register_user(const plan::Plan& plan, size_t esize);
  void release_user();
  // A failed call: providers that can (fabric::Endpoint::release_buffer: tcp) let go of the
  // memory its still outstanding sends and receives name: the caller's buffers on direct
  // lanes, and the staging slots too, which die with the communicator while a late message
  // could still land in them (tcp progresses on a background thread).
  void release_posted(const std::vector<int>& lanes);
  // The completion queues of these lanes, each once: the executors poll only those (on tcp
  // every poll of a queue is a recv() per link).
  void queues_of(const std::vector<int>& lanes, std::vector<fabric::CompletionQueue*>* out) const;
  // ---- landing.cc, twoshot.cc ----
  Status setup_rma(Deadline deadline);
  Status swap_words(fabric::MemoryRegion* fresh, uint64_t mine, std::vector<uint64_t>* theirs, Deadline deadline);
  Status rma_begin(Deadline deadline);
  size_t poll_all(fabric::Completion* comps, size_t cap, Status* error);
  // Polls every queue once and counts the current call's completions into *done (one-sided
  // writes: their completions carry nothing else); a failed one of this call is returned.
  Status reap_writes(size_t* done);
  Status zone_gone(int peer) const;
  size_t twoshot_area_bytes();  // also sets ts_chunk_, ts_depth_ and the counters
  Status post_write_retry(int peer, fabric::LocalSlice src, fabric::RemoteSlice dst, fabric::WorkId id,
                          Deadline deadline, size_t* done);

  // The communicator and its executor (comm.cc, executor.cc, pipeline.cc).
  cluster::Group* group_ = nullptr;
  CommOptions options_;
  uint64_t epoch_ = 0;
  int world_ = 0;
  Status broken_;
  bool rma_write_ = false;
  bool full_mesh_ = true;
  plan::Route route_;
  uint64_t seq_ = 0;
  uint32_t spin_before_yield_ = ~0u;
  std::vector<std::unique_ptr<Staging>> staging_;
  std::vector<std::unique_ptr<Staging>> retired_;  // staging of past epochs: may still be the target of posted receives
  static constexpr size_t kMaxLanes = 4;  // links striped per pair (work ids: slots_per_peer * lanes < 2048)
  std::vector<PeerState> peers_;          // lane l of peer p at p + world * l
  std::vector<int> lanes_;                // per peer
  std::vector<size_t> chunk_of_;          // per peer: the current call's message size
  // exchange()'s scratch: lanes of the step, lanes seen, messages per peer and direction, queues.
  std::vector<int> ex_active_;
  std::vector<char> ex_seen_;
  std::vector<size_t> ex_msgs_;
  std::vector<fabric::CompletionQueue*> ex_cqs_;
  // plan_for()'s cache: recent plans with the buffer extents register_user() needs.
  struct CachedPlan {
    plan::Shape shape;
    Algorithm algo = Algorithm::kAuto;
    plan::Plan plan;
    plan::Extents extents;
    bool used = false;
  };
  static constexpr size_t kCachedPlans = 8;
  CachedPlan plans_[kCachedPlans];
  size_t plans_next_ = 0;  // round-robin victim
  std::vector<fabric::CompletionQueue*> cqs_;
  // Landing zones (landing.cc, twoshot.cc). My landing region (peer p writes into zones (p * 2 + parity) * stride),
  // the source area + flag word I write from, and each peer's landing key.
  std::unique_ptr<fabric::MemoryRegion> landing_;
  std::vector<uint64_t> peer_keys_;
  // Where the provider maps peers' memory (ProviderCaps::map_remote: shm), each peer's landing
  // region, mapped: the one-sided paths store into it instead of posting writes (no post, no
  // completion to reap). Empty: post writes.
  std::vector<std::unique_ptr<fabric::RemoteMapping>> peer_maps_;
  size_t zone_stride_ = 0, src_off_ = 0, flag_off_ = 0;
  uint64_t rma_seq_ = 0;
  bool rma_capable_ = false;
  // Two-shot area of the landing region (twoshot.cc): slot size, depth, offset, and the
  // lifetime chunk counters both ends of a pair keep in step (they index slots and flags).
  size_t ts_chunk_ = 0, ts_off_ = 0;
  int ts_depth_ = 0;
  std::vector<uint64_t> ts_rs_sent_, ts_ag_recv_;  // per peer
  uint64_t ts_rs_recv_ = 0, ts_ag_sent_ = 0;        // the same for every peer
  // Current call's buffers.
  const std::byte* in_ = nullptr;
  std::byte* out_ = nullptr;
  std::byte* tmp_ = nullptr;
  std::unique_ptr<std::byte[]> tmp_storage_;
  size_t tmp_bytes_ = 0;
};

}  // namespace lattice::coll
