// The shm provider's endpoints (endpoint.cc): a ring of slots this side writes and the peer maps
// read-only, rendezvous for large sends, one-sided access by memcpy into mapped regions.
// Data paths, lock order and trust rules: provider.h.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lattice/fabric/fabric.h"
#include "lattice/fabric/shm/provider.h"

namespace lattice::fabric::shm {

class ShmEndpoint final : public Endpoint {
 public:
  ShmEndpoint(ShmProvider* provider, ShmCq* send_cq, ShmCq* recv_cq, const EndpointOptions& options);
  ~ShmEndpoint() override;
  Status init();

  std::vector<std::byte> local_address() const override;
  Status connect(std::span<const std::byte> peer_address, Deadline deadline) override;
  Status post_send(LocalSlice src, WorkId id) override;
  Status post_recv(LocalSlice dst, WorkId id) override;
  Status post_write(LocalSlice src, RemoteSlice dst, WorkId id) override;
  Status post_write_with_imm(LocalSlice src, RemoteSlice dst, uint32_t imm, WorkId id) override;
  Status post_read(LocalSlice dst, RemoteSlice src, WorkId id) override;
  Status post_fetch_add(LocalSlice result, RemoteSlice target, uint64_t add, WorkId id) override;
  Status post_compare_swap(LocalSlice result, RemoteSlice target, uint64_t expected, uint64_t desired,
                           WorkId id) override;
  Status release_buffer(WorkId) override {
    return Unavailable("shm: release_buffer is not supported (posted memory is kept until completion)");
  }
  Result<std::unique_ptr<RemoteMapping>> map_remote(RemoteSlice slice, uint32_t access) override;
  Status status() const override;
  int peer_rank() const override { return options_.peer_rank; }
  LinkBytes link_bytes() const override { return link_->get(); }

  // Drives progress; called from CQ poll/wait. With try_only, skips if another thread holds it.
  void progress(bool try_only);
  // Lock-free peek: could progress() do anything? (A ready or corrupt ring slot, queued sends,
  // rendezvous acks awaited.) Lets idle polls skip the lock, so a poller never starves posters.
  bool has_work() const;
  // Watchdog: checks the peer's heartbeat and state; `exited` when its pidfd fired.
  void check_peer(Clock::time_point now, bool exited);
  // The pidfd the watchdog polls; -1 once failed (an exited peer's pidfd stays readable, and
  // polling it would spin the watchdog).
  int peer_pidfd() const { return failed_.load() ? -1 : peer_pidfd_.load(std::memory_order_relaxed); }

 private:
  struct TxOp {
    SlotType kind;
    WorkId id;
    Opcode op;
    ShmRegion* region;
    size_t offset;
    size_t length;
    uint64_t sq_seq = 0;           // its entry in sq_
    size_t pushed = 0;             // eager bytes in the ring so far
    uint32_t imm = 0;
    std::vector<std::byte> staged; // small sends copied at post time when queued
  };
  struct SqEntry {  // send-side completions are released in post order
    Completion c;
    bool done = false;
  };
  struct RxOp {
    WorkId id;
    ShmRegion* region;
    size_t offset;
    size_t length;
  };

  // Shared with the mappings made from this endpoint (they count the caller's loads and stores).
  std::shared_ptr<LinkCounter> link_ = std::make_shared<LinkCounter>();

  Status check_usable_locked() const;
  Result<ShmRegion*> local_region(const LocalSlice& s, const char* what) const;
  Status fail_locked(Status s, bool tell_peer = true);
  void flush_locked(const Status& s);
  void release_sq_locked();
  void complete_now_locked(WorkId id, Opcode op, Status st, size_t bytes);
  uint64_t add_sq_locked(WorkId id, Opcode op, size_t bytes);  // a not-yet-done entry
  void finish_sq_locked(uint64_t seq, Status st, size_t bytes);
  bool push_locked(TxOp& op);  // pushes as much of op as the ring takes; true when all of it
  void push_pending_locked();
  void update_hints_locked() {
    rx_next_hint_.store(rx_next_, std::memory_order_relaxed);
    tx_work_hint_.store(!tx_pending_.empty() || rndv_acked_ != rndv_sent_, std::memory_order_relaxed);
  }
  void progress_rx_locked();
  void progress_acks_locked();
  void notify_peer();
  const SlotHeader* peer_slot(uint64_t pos) const;
  SlotHeader* my_slot(uint64_t pos) const;
  EndpointHeader* my_header() const { return reinterpret_cast<EndpointHeader*>(segment_.map->base()); }
  const EndpointHeader* peer_header() const { return reinterpret_cast<const EndpointHeader*>(peer_seg_->base()); }
  Status rx_rndv_locked(const SlotHeader& h, const std::byte* payload, RxOp& rx, size_t* copied);
  // Finds a peer region by key and checks bounds and rights (need = 0: rights not checked).
  Result<PeerRegion*> peer_region_locked(uint64_t key, uint64_t offset, uint64_t length, uint32_t need,
                                         const char* what);
  Status remote_copy_locked(PeerRegion* r, uint64_t offset, std::byte* local, size_t length, bool to_remote);
  Status one_sided_locked(Opcode op, LocalSlice local, RemoteSlice remote, uint64_t a, uint64_t b,
                          uint32_t imm, WorkId id);

  ShmProvider* provider_;
  ShmCq* send_cq_;
  ShmCq* recv_cq_;
  EndpointOptions options_;
  uint64_t nonce_ = 0;
  OwnedSegment segment_;

  mutable SpinLock mu_;
  Status error_;            // sticky
  std::atomic<bool> failed_{false};
  bool connected_ = false;
  std::atomic<bool> connected_hint_{false};
  std::atomic<uint64_t> rx_next_hint_{0};
  std::atomic<bool> tx_work_hint_{false};
  int peer_pid_ = 0;
  std::atomic<int> peer_pidfd_{-1};
  std::unique_ptr<Mapping> peer_seg_;       // peer endpoint segment, read-only
  std::unique_ptr<Mapping> peer_doorbell_;  // peer provider page 0, read-write
  std::shared_ptr<Mapping> peer_dir_;       // peer provider pages 1.., read-only (mappings share it)
  std::unordered_map<uint64_t, PeerRegion> peer_regions_;

  // transmit
  uint64_t tx_head_ = 0;          // next slot position to fill
  uint64_t tx_tail_ = 0;          // peer's consumed count, as last read
  uint64_t rndv_sent_ = 0;
  uint64_t rndv_acked_ = 0;
  std::deque<TxOp> tx_pending_;
  std::deque<SqEntry> sq_;
  uint64_t sq_front_seq_ = 0;     // sequence number of sq_.front()
  std::deque<uint64_t> rndv_wait_;  // sq sequence numbers of rendezvous sends awaiting acks
  // receive
  uint64_t rx_next_ = 0;          // next slot position of the peer's ring to read
  uint64_t rx_published_ = 0;
  uint64_t rx_rndv_next_ = 0;
  std::deque<RxOp> rq_;
  bool rx_active_ = false;        // an eager message is partly received into rq_.front()
  uint64_t rx_msg_bytes_ = 0;
  uint64_t rx_got_ = 0;
  // liveness
  uint64_t peer_heartbeat_ = 0;
  Clock::time_point peer_seen_{};
  Clock::time_point last_check_{};  // the last check_peer: a much longer gap was a stop of this process (unseen_stop)
};

}  // namespace lattice::fabric::shm
