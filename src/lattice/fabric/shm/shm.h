// The shm provider: processes on one host talk through shared memory.
//
// Segments (all memfds, so nothing ever appears in /dev/shm and nothing is left behind even
// after SIGKILL: a peer opens a segment through /proc/<owner pid>/fd/<fd>, maps it, closes
// the fd, and the memory lives as long as someone maps it):
//   provider segment  page 0: doorbell page, the only page peers map writable (they ring the
//                     owner's futex doorbell there); page 1: header + heartbeat; then the
//                     directory of the owner's registered regions (read-only for peers).
//   endpoint segment  page 0: header (consumer index, rendezvous acks, state); then the ring
//                     of messages this endpoint sends. Only the owner writes it; the peer maps
//                     it read-only, so each side reads the other's state and never trusts it:
//                     every index, length and key read from a peer is bounds-checked.
//   region segment    one per allocate_memory(); peers map it on first access by key.
// Every segment is sealed at its size (F_SEAL_SHRINK|GROW|SEAL) and a peer maps only sealed
// memfds whose inode matches what the owner published, so a peer cannot make our mapping
// fault by truncating it, nor point us at another file.
// Remote-access rights are enforced by the initiator (it reads the target's directory), and
// by the kernel for writes: a region without remote write/atomic rights is mapped read-only
// by peers. Processes of one user can ptrace each other anyway; the checks stop mistakes and
// corrupt peers, not a hostile same-user process.
//
// Data paths
//   small send     copied into ring slots (<= kSlotPayload per slot, fragments up to kEagerMax)
//   large send     rendezvous: the slot names the sender's region; the receiver copies straight
//                  from it (mapped shm, or process_vm_readv for caller memory) into the posted
//                  buffer, then acks; the send completes on the ack. One copy. (From caller
//                  memory to a receiver that cannot attach to us, e.g. Yama ptrace_scope=1,
//                  the message goes through the ring in fragments instead: two copies.)
//   truncation     the receive completes kTruncated with the bytes that fit; for rendezvous
//                  sends the sender's completion says kTruncated too (eager sends completed
//                  when they entered the ring). The endpoint stays usable.
//   write/read     a direct memcpy into or out of the peer's mapped region at post time
//                  (process_vm_writev/readv for caller-registered memory); atomics use
//                  __atomic builtins on the mapped word (allocate_memory regions only).
// Progress runs on the caller's thread in CompletionQueue::poll/wait; a per-provider watchdog
// thread only beats the heartbeat and watches peers (pidfd exit + heartbeat silence + state).
// wait() spins ~50 us, then sleeps on the futex doorbell (<= 100 ms at a time); a poll() that
// found nothing 256 times in a row yields the CPU once (an oversubscribed host). Completion
// queues are unbounded (create_cq's depth is a hint); send-side completions of one endpoint
// come in posting order.
//
// Lock order: Provider::registry_mu_ -> Endpoint::mu_ -> Cq::mu_.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric::shm {

constexpr uint32_t kVersion = 1;
constexpr size_t kPage = 4096;
constexpr size_t kCacheLine = 64;
constexpr uint32_t kSlotBytes = 4096;
constexpr uint32_t kSlots = 128;  // power of two
constexpr size_t kSlotHeaderBytes = 32;
constexpr size_t kSlotPayload = kSlotBytes - kSlotHeaderBytes;
constexpr size_t kEagerMax = 32 * 1024;  // larger sends use rendezvous (single copy), except from
                                         // caller memory when the receiver cannot attach to us
constexpr uint32_t kMaxRndv = 64;        // rendezvous sends in flight per endpoint
constexpr uint32_t kDirEntries = 1024;   // regions per provider
constexpr size_t kMaxMsg = size_t{1} << 30;
constexpr size_t kMaxQueued = 8192;      // posted-but-unfinished ops per endpoint and direction
constexpr uint64_t kMaxRegionBytes = uint64_t{1} << 40;

// ---- Shared-memory layouts (host byte order: both sides are on one host) ----

enum SlotType : uint32_t { kSlotEager = 1, kSlotImm = 2, kSlotRndv = 3 };
enum SlotFlags : uint32_t { kFirstFragment = 1 };

struct SlotHeader {
  uint64_t seq;        // ring position + 1; stored last (release): the slot is ready
  uint32_t type;       // SlotType
  uint32_t frag_bytes; // payload bytes in this slot (eager)
  uint64_t msg_bytes;  // whole message (eager, rndv) or write length (imm)
  uint32_t imm;
  uint32_t flags;
};
static_assert(sizeof(SlotHeader) == kSlotHeaderBytes);

// Payload of a kSlotRndv slot: where the receiver reads the message from.
struct RndvPayload {
  uint64_t src_key;     // the sender's region, in the sender's directory
  uint64_t src_offset;
  uint64_t index;       // 0,1,2...: which ack entry the receiver fills
};

struct RndvAck {
  uint64_t bytes;  // bytes the receiver copied
  uint64_t code;   // 0 ok, 1 truncated
};

constexpr uint64_t kEndpointMagic = 0x31444e454d485354ull;  // "TSHMEND1"
struct EndpointHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t slot_bytes;
  uint32_t n_slots;
  uint32_t max_rndv;
  int32_t pid;
  uint32_t pad0;
  uint64_t nonce;                         // random id of this endpoint
  alignas(kCacheLine) uint64_t rx_consumed;  // slots of the peer's ring this side consumed
  alignas(kCacheLine) uint64_t rndv_acked;   // rendezvous messages of the peer finished
  RndvAck acks[kMaxRndv];
  alignas(kCacheLine) uint32_t state;        // EndpointState
  uint32_t reason;                            // ErrorCode of the failure
  uint64_t peer_nonce;                        // the endpoint this one connected to
  uint32_t cma_ok;  // 1: this side can read the peer's memory with process_vm_readv (probed at connect)
};
static_assert(sizeof(EndpointHeader) <= kPage);
enum EndpointState : uint32_t { kStateOpen = 0, kStateClosed = 1, kStateFailed = 2 };
constexpr size_t kEndpointSegmentBytes = kPage + size_t{kSlots} * kSlotBytes;

constexpr uint64_t kProviderMagic = 0x31564f52504d4853ull;  // "SHMPROV1"
struct DoorbellPage {  // page 0, peer-writable
  alignas(kCacheLine) uint32_t doorbell;  // futex word; bumped by whoever wakes the owner
  alignas(kCacheLine) uint32_t sleepers;  // >0 while an owner thread sleeps on the doorbell
};
struct ProviderHeader {  // page 1, read-only for peers
  uint64_t magic;
  uint32_t version;
  int32_t pid;
  uint64_t nonce;
  uint32_t n_entries;
  uint32_t pad0;
  uint64_t probe_addr;  // address of `magic` in the owner's process: peers test cross-memory attach on it
  alignas(kCacheLine) uint64_t heartbeat;  // bumped by the watchdog every kHeartbeatTick
};
enum RegionKind : uint32_t { kKindFree = 0, kKindShm = 1, kKindUser = 2 };
struct DirEntry {   // a seqlock: seq is odd while the owner changes the entry
  uint64_t seq;
  uint64_t key;
  uint64_t size;
  uint64_t addr;    // kKindUser: address in the owner's process
  uint64_t ino;     // kKindShm: inode of the memfd, checked after opening it
  int32_t fd;       // kKindShm: fd in the owner's process
  uint32_t access;
  uint32_t kind;
  uint32_t pad[3];
};
static_assert(sizeof(DirEntry) == 64);
constexpr size_t kDirOffset = 2 * kPage;
constexpr size_t kProviderSegmentBytes = kDirOffset + size_t{kDirEntries} * sizeof(DirEntry);

// The address blob an endpoint hands to its peer (opaque to callers).
constexpr uint64_t kBlobMagic = 0x31424c424d485354ull;  // "TSHMBLB1"
struct AddressBlob {
  uint64_t magic;
  uint32_t version;
  int32_t pid;
  uint64_t host_id;        // hash of the kernel boot id: both ends must share a host
  int32_t provider_fd;
  int32_t endpoint_fd;
  uint64_t provider_ino;
  uint64_t endpoint_ino;
  uint64_t provider_nonce;
  uint64_t endpoint_nonce;
};
static_assert(sizeof(AddressBlob) == 64);

constexpr auto kHeartbeatTick = std::chrono::milliseconds(20);
constexpr auto kMinPeerTimeout = std::chrono::milliseconds(100);

// ---- Helpers (address.cc) ----

// A mapping of a memfd; unmapped (and closed, if owned) on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(std::byte* base, size_t bytes) : base_(base), bytes_(bytes) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
  std::byte* base() const { return base_; }
  size_t bytes() const { return bytes_; }

 private:
  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
};

uint64_t host_id();
void wake_doorbell(DoorbellPage* db);
// Creates a memfd of `bytes` (rounded up to a page), maps it read-write. Returns fd and inode.
struct OwnedSegment {
  int fd = -1;
  uint64_t ino = 0;
  std::unique_ptr<Mapping> map;
};
Result<OwnedSegment> create_segment(const char* name, size_t bytes);
void close_segment(OwnedSegment& s);
// Opens another process's memfd through /proc/<pid>/fd/<fd>, checks its inode and that it
// holds at least `bytes`, maps `bytes` at `offset` with `prot`.
Result<std::unique_ptr<Mapping>> map_peer_segment(int pid, int fd, uint64_t ino, size_t offset, size_t bytes,
                                                   bool writable, int peer_rank);
size_t round_up_page(size_t n);
std::vector<std::byte> encode_blob(const AddressBlob& blob);
// Validates magic, version, size and host; errors name the peer.
Result<AddressBlob> decode_blob(std::span<const std::byte> bytes, int peer_rank);

// A test-and-test-and-set lock: an uncontended lock/unlock pair is one atomic exchange and one
// store, half of a pthread mutex's cost on the latency path; a waiter yields after a short spin.
class SpinLock {
 public:
  void lock() {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      for (int n = 0; flag_.load(std::memory_order_relaxed); ++n) {
        if (n < 100) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
          n = 0;
        }
      }
    }
  }
  bool try_lock() { return !flag_.load(std::memory_order_relaxed) && !flag_.exchange(true, std::memory_order_acquire); }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// ---- Classes ----

class ShmProvider;
class ShmEndpoint;

class ShmRegion final : public MemoryRegion {
 public:
  ShmRegion(ShmProvider* provider, std::byte* data, size_t size, uint64_t key, uint32_t access, uint32_t slot,
            OwnedSegment segment, bool shared)
      : provider_(provider), data_(data), size_(size), key_(key), access_(access), slot_(slot),
        segment_(std::move(segment)), shared_(shared) {}
  ~ShmRegion() override;
  std::byte* data() const override { return data_; }
  size_t size() const override { return size_; }
  uint64_t key() const override { return key_; }
  uint32_t access() const override { return access_; }
  ShmProvider* provider() const { return provider_; }
  bool shared() const { return shared_; }

 private:
  ShmProvider* provider_;
  std::byte* data_;
  size_t size_;
  uint64_t key_;
  uint32_t access_;
  uint32_t slot_;
  OwnedSegment segment_;
  bool shared_;
};

class ShmCq final : public CompletionQueue {
 public:
  ShmCq(ShmProvider* provider, size_t depth) : provider_(provider), depth_(depth) {}
  ~ShmCq() override;
  size_t poll(std::span<Completion> out) override;
  Result<size_t> wait(std::span<Completion> out, Deadline deadline) override;

  // Called by endpoints (under their lock).
  void push(const Completion& c);
  void attach(ShmEndpoint* ep);
  void detach(ShmEndpoint* ep);

 private:
  size_t progress_and_pop(std::span<Completion> out, bool blocking_locks);
  size_t pop(std::span<Completion> out);

  ShmProvider* provider_;
  size_t depth_;
  SpinLock mu_;
  std::deque<Completion> q_;
  std::atomic<size_t> n_ready_{0};
  std::atomic<int> sleeping_{0};
  uint32_t empty_polls_ = 0;  // consecutive empty poll() calls (one poller at a time)
  SpinLock attach_mu_;
  std::vector<ShmEndpoint*> endpoints_;
};

class ShmProvider final : public Provider {
 public:
  static Result<std::unique_ptr<ShmProvider>> create(const ProviderOptions& options, bool cma = true);
  ~ShmProvider() override;

  std::string_view name() const override { return "shm"; }
  const ProviderCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<MemoryRegion>> allocate_memory(size_t n_bytes, uint32_t access) override;
  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t n_bytes, uint32_t access) override;
  Result<std::unique_ptr<CompletionQueue>> create_cq(size_t depth) override;
  Result<std::unique_ptr<Endpoint>> create_endpoint(CompletionQueue* send_cq, CompletionQueue* recv_cq,
                                                    const EndpointOptions& options) override;

  bool busy_poll() const { return options_.busy_poll; }
  bool cma_allowed() const { return cma_allowed_; }
  int pid() const { return pid_; }
  uint64_t nonce() const { return nonce_; }
  int segment_fd() const { return segment_.fd; }
  uint64_t segment_ino() const { return segment_.ino; }
  DoorbellPage* doorbell() const { return reinterpret_cast<DoorbellPage*>(segment_.map->base()); }
  // Wakes this provider's own sleeping waiters (a local completion arrived).
  void ring_own_doorbell();

  // Directory (memory.cc).
  Result<uint32_t> publish_region(uint64_t key, uint64_t size, uint64_t addr, const OwnedSegment* seg,
                                  uint32_t access, RegionKind kind);
  void unpublish_region(uint32_t slot);

  void register_endpoint(ShmEndpoint* ep);
  void poke_watchdog();
  void unregister_endpoint(ShmEndpoint* ep);

 private:
  ShmProvider(const ProviderOptions& options, bool cma) : options_(options), cma_allowed_(cma) {}
  void watchdog();

  ProviderOptions options_;
  bool cma_allowed_ = true;  // "shm://?cma=0" behaves as if the kernel refused cross-memory attach
  ProviderCaps caps_;
  int pid_ = 0;
  uint64_t nonce_ = 0;
  OwnedSegment segment_;
  std::mutex dir_mu_;
  std::vector<bool> dir_used_;

  std::mutex registry_mu_;
  std::vector<ShmEndpoint*> endpoints_;
  int wake_fd_ = -1;  // eventfd: stop or registry changed
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

// A peer's region as seen from here: cached per endpoint, revalidated on every access.
struct PeerRegion {
  uint32_t slot = 0;
  uint64_t seq = 0;
  uint64_t size = 0;
  uint64_t addr = 0;
  uint32_t access = 0;
  uint32_t kind = 0;
  std::shared_ptr<Mapping> map;  // kKindShm
};

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
};

}  // namespace lattice::fabric::shm
