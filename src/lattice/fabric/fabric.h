// The fabric: registered memory, reliable ordered endpoints, two-sided and one-sided
// operations, completion queues. Shaped like RDMA verbs so that shm, tcp and verbs
// providers sit behind one interface (see docs/ARCHITECTURE.md).
//
// Lifetime and ownership
//   Provider owns nothing the caller created; the caller destroys endpoints, then completion
//   queues and memory regions, then the provider. Destroying an endpoint cancels its
//   outstanding work (completions with kCancelled may still be polled from its CQ until the
//   CQ is destroyed).
//
// Thread safety
//   A Provider is thread-safe. An Endpoint may be used by one posting thread at a time
//   (posts are not internally serialised against each other). A CompletionQueue may be
//   polled by one thread at a time. Posting and polling may happen on different threads.
//
// Blocking
//   post_* never block: they return kResourceExhausted when the queue is full. Only
//   connect() and CompletionQueue::wait() block, each until its Deadline.
//
// Errors
//   A post that fails returns its Status and produces no completion. A post that returns
//   ok produces exactly one completion (on the endpoint's send CQ, or its recv CQ for
//   post_recv), whose status the caller must check. Errors are sticky on an endpoint: once
//   it failed (peer lost, corrupt frame, protocol violation) every outstanding operation
//   completes with that error and every later post returns it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::fabric {

// What a provider can do; the protocol layers above pick their path from these.
struct ProviderCaps {
  size_t max_msg = 0;          // largest single send/write/read, bytes
  size_t max_inline = 0;       // sends up to this size are copied at post time (buffer reusable at once)
  bool rma_write = false;      // post_write / post_write_with_imm
  // One-sided writes land in the target's memory without the target's CPU (shm: a copy into
  // the mapped region at post time; RDMA NICs). False where the target's polls move the data
  // (tcp, emulated verbs): a target spinning on a flag in its memory must then poll its queues.
  bool rma_write_passive = false;
  bool rma_read = false;       // post_read
  bool atomics = false;        // post_fetch_add / post_compare_swap
  size_t frame_bytes = 0;      // >0: sends are padded to whole frames of this size (Apple TB5: 4096)
  size_t max_regions = 0;      // 0: no fixed limit
  bool needs_registration_for_send = false;  // send buffers must be registered regions
  // Endpoint::release_buffer works: a caller may post sends and receives straight from memory
  // it frees after a failed exchange (tcp). False: post from memory that outlives the endpoint.
  bool release_buffer = false;
  // Endpoint::map_remote works: a peer's region can be mapped into this process and read or
  // written with plain loads and stores, no post and no completion (shm).
  bool map_remote = false;
};

// Access rights of a memory region. Remote rights are checked by the target on every access.
enum Access : uint32_t {
  kLocalRead = 1u << 0,
  kLocalWrite = 1u << 1,
  kRemoteRead = 1u << 2,
  kRemoteWrite = 1u << 3,
  kRemoteAtomic = 1u << 4,
  kAllAccess = kLocalRead | kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic,
};

// What a peer needs to address a region: no raw pointers cross the wire, only a random,
// unguessable 64-bit key and a size. 16 bytes, little-endian when serialised.
struct RemoteRegion {
  uint64_t key = 0;
  uint64_t size = 0;
};

class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual std::byte* data() const = 0;
  virtual size_t size() const = 0;
  virtual uint64_t key() const = 0;
  virtual uint32_t access() const = 0;
  RemoteRegion remote() const { return {key(), size()}; }
};

// A byte range of a local registered region.
struct LocalSlice {
  MemoryRegion* region = nullptr;
  size_t offset = 0;
  size_t length = 0;
  std::byte* data() const { return region->data() + offset; }
};

// A byte range of a peer's region, by key and offset; the target checks both.
struct RemoteSlice {
  uint64_t key = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

using WorkId = uint64_t;

enum class Opcode : uint8_t {
  kSend,
  kRecv,         // a message arrived for a posted receive
  kWrite,
  kWriteImm,     // initiator side of post_write_with_imm
  kRecvImm,      // target side: a write-with-imm landed; consumes a posted receive (0 bytes used)
  kRead,
  kFetchAdd,
  kCompareSwap,
};
std::string_view to_string(Opcode op);

struct Completion {
  WorkId id = 0;
  Opcode op = Opcode::kSend;
  Status status;       // must be checked
  size_t bytes = 0;    // bytes received (kRecv) or transferred
  uint32_t imm = 0;    // kRecvImm only
};

class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Non-blocking: moves up to out.size() completions into `out`, returns how many.
  // Also drives progress for providers that progress on the caller's thread.
  virtual size_t poll(std::span<Completion> out) = 0;
  // Blocks until at least one completion is available or the deadline passes
  // (then kTimeout). Spins briefly, then sleeps: an idle waiter burns no CPU.
  virtual Result<size_t> wait(std::span<Completion> out, Deadline deadline) = 0;
};

struct EndpointOptions {
  // A peer that shows no sign of life for this long is declared lost (kPeerLost).
  std::chrono::milliseconds peer_timeout{2000};
  // Rank of the peer, only for error messages and logs.
  int peer_rank = Status::kNoPeer;
  // Optional: the owner's verdict on the peer (a cluster's membership sets it when the peer is
  // declared dead, or when this rank lost the coordinator). Read at every progress: once true
  // the endpoint fails with kPeerLost, every outstanding operation completes with that error,
  // at the next poll instead of after peer_timeout. Must outlive the endpoint.
  const std::atomic<bool>* declared_lost = nullptr;
};

// A peer's region (a slice of it) mapped into this process: loads and stores reach the
// peer's memory directly. The mapping stays valid while this object lives, whatever the peer
// does: once it deregisters the region or dies, stores go to memory nobody reads and live()
// turns false. Ordering is the CPU's: publish data before a flag with a release store.
// Payload bytes an endpoint moved over its link, per direction, since it was made. Counted by
// the side that sees the bytes: sent: its sends and writes (with imm or not); received: the
// messages that landed in its receives, and its reads' data; 8 bytes each way per atomic. A
// plain write is seen by its writer only, a read by its reader only (the other side's CPU may
// take no part), so one direction of a link moved at least max(sender's sent, receiver's
// received).
struct LinkBytes {
  uint64_t sent = 0, received = 0;
};

// What the providers count LinkBytes with: relaxed atomic adds, one per completed operation
// (a completion counted), readable from any thread.
class LinkCounter {
 public:
  void add_sent(uint64_t n) { sent_.fetch_add(n, std::memory_order_relaxed); }
  void add_received(uint64_t n) { received_.fetch_add(n, std::memory_order_relaxed); }
  // A successful completion this endpoint hands out (failed ones moved nothing that counts).
  void count(const Completion& c) {
    if (!c.status.ok()) return;
    switch (c.op) {
      case Opcode::kSend:
      case Opcode::kWrite:
      case Opcode::kWriteImm: add_sent(c.bytes); break;
      case Opcode::kRecv:
      case Opcode::kRead: add_received(c.bytes); break;
      case Opcode::kFetchAdd:
      case Opcode::kCompareSwap: add_sent(8), add_received(8); break;
      case Opcode::kRecvImm: break;  // the data is the writer's to count
    }
  }
  LinkBytes get() const { return {sent_.load(std::memory_order_relaxed), received_.load(std::memory_order_relaxed)}; }

 private:
  std::atomic<uint64_t> sent_{0}, received_{0};
};

class RemoteMapping {
 public:
  virtual ~RemoteMapping() = default;
  virtual std::byte* data() const = 0;  // the slice's first byte
  virtual size_t size() const = 0;      // the slice's length
  // The peer still holds the registration this mapping was made from (one load; a poll loop
  // may call it now and then to notice a peer that went away without dying).
  virtual bool live() const = 0;
  // Bytes the caller loaded from / stored to the peer through this mapping: no operation sees
  // them, so the caller tells, and they count in the endpoint's link_bytes() (as received /
  // sent). A caller that moves data through a mapping should call these.
  virtual void count_loaded(size_t bytes) = 0;
  virtual void count_stored(size_t bytes) = 0;
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // The blob a peer passes to its connect(); opaque, carried by some out-of-band channel.
  virtual std::vector<std::byte> local_address() const = 0;
  // Connects to the peer whose local_address() is `peer_address`. Both sides call it.
  virtual Status connect(std::span<const std::byte> peer_address, Deadline deadline) = 0;

  virtual Status post_send(LocalSlice src, WorkId id) = 0;
  virtual Status post_recv(LocalSlice dst, WorkId id) = 0;
  virtual Status post_write(LocalSlice src, RemoteSlice dst, WorkId id) = 0;
  virtual Status post_write_with_imm(LocalSlice src, RemoteSlice dst, uint32_t imm, WorkId id) = 0;
  virtual Status post_read(LocalSlice dst, RemoteSlice src, WorkId id) = 0;
  // 64-bit atomics on an 8-byte aligned remote word; the old value lands in `result` (8 bytes).
  virtual Status post_fetch_add(LocalSlice result, RemoteSlice target, uint64_t add, WorkId id) = 0;
  virtual Status post_compare_swap(LocalSlice result, RemoteSlice target, uint64_t expected,
                                   uint64_t desired, WorkId id) = 0;

  // Stops the endpoint from touching the memory of the outstanding send or receive `id`, so the
  // caller may free it: a send's bytes not yet handed to the link are copied aside and still
  // go out (the stream stays in order); a receive keeps its place in the order, but the message
  // it matches is dropped and it completes with kCancelled. The operation still produces its
  // one completion. Ok (nothing to do) when `id` already completed or names no operation here.
  // For callers whose exchange failed mid-way (a deadline, a lost neighbour) with operations
  // posted from memory they are about to give back. kUnavailable unless
  // ProviderCaps::release_buffer. (Pure: an endpoint wrapping another must forward it.)
  virtual Status release_buffer(WorkId id) = 0;

  // Maps the peer's region slice `slice` for loads (kRemoteRead) and/or stores (kRemoteWrite):
  // the region must grant those rights, as for post_read/post_write. kUnavailable unless
  // ProviderCaps::map_remote (a network in between: post instead). (Pure, like release_buffer.)
  virtual Result<std::unique_ptr<RemoteMapping>> map_remote(RemoteSlice slice, uint32_t access) = 0;

  // Ok while healthy; the sticky error once the endpoint failed.
  virtual Status status() const = 0;
  virtual int peer_rank() const = 0;
  // What this endpoint moved over its link (LinkBytes). (Pure: an endpoint wrapping another
  // must forward it.)
  virtual LinkBytes link_bytes() const = 0;
};

struct ProviderOptions {
  bool busy_poll = false;  // spin instead of sleeping while waiting (lowest latency, burns a core)
  // The cluster secret (32 bytes). tcp: when set, every connection runs the crypto handshake
  // and every frame is AEAD-sealed (see tcp/wire.h); unset means plaintext (trusted links).
  std::optional<std::array<uint8_t, 32>> secret{};
};

class Provider {
 public:
  virtual ~Provider() = default;
  virtual std::string_view name() const = 0;  // "shm", "tcp", ...
  virtual const ProviderCaps& caps() const = 0;

  // Memory the provider allocates where remote access is cheapest (shm: shared memory).
  virtual Result<std::unique_ptr<MemoryRegion>> allocate_memory(size_t n_bytes, uint32_t access) = 0;
  // Registers caller-owned memory; the caller keeps it alive and in place until the region dies.
  virtual Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t n_bytes,
                                                                uint32_t access) = 0;

  virtual Result<std::unique_ptr<CompletionQueue>> create_cq(size_t depth) = 0;
  // The endpoint reports sends, writes, reads and atomics on send_cq, receives on recv_cq
  // (they may be the same queue). Both must outlive the endpoint.
  virtual Result<std::unique_ptr<Endpoint>> create_endpoint(CompletionQueue* send_cq,
                                                            CompletionQueue* recv_cq,
                                                            const EndpointOptions& options) = 0;
};

// "shm", "tcp://127.0.0.1:0", "tcp://[::1]:7000", "tcp://0.0.0.0:0?busy_poll=1".
// A provider that is compiled out or missing at run time gives kUnavailable.
Result<std::unique_ptr<Provider>> make_provider(std::string_view uri, const ProviderOptions& options = {});
// Providers usable on this machine right now (probed at run time).
std::vector<std::string> available_providers();

// ---- RDMA devices (diagnostics: `lattice devices`) ----------------------------------------
// Plain data, no verbs types: what the verbs provider sees of the machine's RDMA devices, and
// of the emulated ones (verbs-emu). Listing opens each device read-only for a moment; it needs
// no root and never fails as a whole: what could not be read is reported in `error`.

struct DeviceGid {
  int index = 0;
  bool empty = true;         // an all-zero entry (index 1 on a Mac: no IPv4 on the paired interface?)
  std::string address;       // "fe80::1", "::ffff:10.0.0.2"; empty when `empty`
  bool ipv4_mapped = false;  // ::ffff:a.b.c.d (RoCE v2 over IPv4)
};

struct DevicePort {
  uint8_t number = 0;        // 1-based, as in verbs
  std::string error;         // non-empty: the port could not be queried (the rest is unset)
  std::string state;         // "ACTIVE", "DOWN", ...
  bool active = false;
  int mtu_bytes = 0;         // active MTU
  uint32_t max_msg_bytes = 0;
  std::string link_layer;    // "ethernet" or "infiniband"
  std::vector<DeviceGid> gids;  // the first kMaxListedGids entries of the GID table
};

struct DeviceInfo {
  std::string name;          // "mlx5_0", "rdma_en2", "emu_tb5_0"
  bool emulated = false;     // the verbs-emu device (open it with verbs-emu://<profile>)
  std::string error;         // non-empty: the device could not be opened or queried
  std::string firmware;
  int max_qp = 0, max_mr = 0, max_qp_wr = 0;
  bool atomics = false;
  std::vector<DevicePort> ports;
};

struct DeviceList {
  std::vector<DeviceInfo> devices;  // the system's first, then the emulated ones (if asked for)
  // Whether the system's verbs library loaded ("no RDMA" otherwise: kUnavailable with the
  // loader's error), and which library it was.
  Status system;
  std::string system_library;
};

inline constexpr int kMaxListedGids = 16;

// Blocks only as long as the device queries do (no network). Thread-safe.
DeviceList list_devices(bool include_emulated = true);

}  // namespace lattice::fabric
