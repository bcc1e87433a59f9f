// The verbs provider (internal header): one opened RDMA device behind the VerbsApi table.
//
// Path selection (probed when the provider is made):
//   - staged (Apple TB5, or any device that refuses RC QPs): one UC QP per endpoint, a small
//     pool of frame-aligned staging slots registered as ONE memory region per endpoint (10
//     endpoints stay far below the ~100-MR limit); every verbs send spans a whole slot so the
//     frame counts of a send and its receive always match; receives are posted only after RTS.
//     UC has no hardware acks, so this path adds its own reliability: sequence numbers, a
//     crc32c per message, cumulative acks with a receiver credit window, go-back-N
//     retransmission from the staging copy, and an endpoint failure (never wrong data) when the
//     peer stays silent past the deadline.
//   - RC mode (devices that allow RC QPs, e.g. linux-rc): two-sided messages still use the staged
//     protocol (its acks are redundant on RC but harmless), and one-sided write, write-with-imm,
//     read and atomics go zero-copy from registered regions: regions are registered with the
//     device, addressed by offset (zero-based) and an rkey carried in the region key; the target
//     checks rkey, rights and bounds. Write-with-imm is the write followed, on the same QP, by a
//     sequenced zero-byte staged message carrying the immediate. Enabled on the emulated device
//     only: real NICs need zero-based registration (ibv_reg_mr_iova2), not wired yet.
//
// Progress: one thread per endpoint polls the verbs CQ, runs the protocol and pushes fabric
// completions; it sleeps (bounded by the heartbeat period) when idle, or spins with busy_poll.
// QP teardown never passes through ERR (it can wedge an Apple port): destroy from RTS.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lattice/fabric/fabric.h"
#include "lattice/fabric/verbs/api.h"
#include "lattice/fabric/verbs/emu/emu.h"
#include "lattice/fabric/verbs/wire.h"

namespace lattice::fabric::verbs {

constexpr size_t kFrameBytes = 4096;
constexpr size_t kSlotBytes = 32 * 1024;  // 8 frames; every staged verbs message is exactly this
constexpr size_t kChunkPayload = kSlotBytes - sizeof(ChunkHeader);
constexpr uint32_t kDataSlots = 32;       // send window (chunks in flight awaiting ack)
constexpr uint32_t kCtrlSlots = 8;        // acks, hellos, byes
constexpr uint32_t kRecvSlots = 48;
constexpr uint32_t kRecvReserve = 8;      // receive slots never promised to data: control always fits

// What the probe found; shared by the provider and its endpoints.
struct Device {
  const VerbsApi* api = nullptr;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  std::string name;
  uint8_t port = 0;
  int gid_index = 0;
  ibv_gid gid{};
  ibv_qp_type qp_type = IBV_QPT_UC;
  size_t max_msg = 0;
  int max_qp = 0;
  bool emulated = false;
  bool busy_poll = false;
  // One-sided write/read/atomics on registered user memory (zero-copy): RC QPs whose regions
  // are addressed by offset (zero-based). The emulator does that; on real NICs it needs
  // zero-based registration (ibv_reg_mr_iova2 with iova 0), not wired yet, so off there.
  bool rma = false;
  ~Device();
};

// Which GID to use: index 1 when it is an IPv4-mapped entry (the paired interface has IPv4),
// else the first IPv4-mapped entry, else the first non-empty one. -1: none.
int choose_gid(const VerbsApi& api, ibv_context* ctx, uint8_t port, int table_len, ibv_gid* out);
std::vector<std::byte> encode_address(const AddressBlob& blob);
Result<AddressBlob> decode_address(std::span<const std::byte> bytes);

// Something a completion queue's poller can progress on its own thread (an endpoint).
class Progressable {
 public:
  virtual ~Progressable() = default;
  // Non-blocking: one round of progress if the endpoint's lock is free.
  virtual void try_progress() = 0;
};

// Completions are pushed by endpoint progress (their threads, or a poller of this queue);
// poll() and wait()'s spin phase also progress the attached endpoints on the caller's thread,
// the lowest-latency path (no thread handoff on a 2-core machine).
// Lock order: attached_mu_ -> endpoint lock (try-lock only) -> mu_.
class VerbsCompletionQueue final : public CompletionQueue {
 public:
  explicit VerbsCompletionQueue(bool busy_poll) : busy_poll_(busy_poll) {}
  size_t poll(std::span<Completion> out) override;
  Result<size_t> wait(std::span<Completion> out, Deadline deadline) override;
  void push(Completion c);
  void attach(Progressable* ep);
  void detach(Progressable* ep);  // blocks until no poller is inside ep

 private:
  size_t pop(std::span<Completion> out);
  const bool busy_poll_;
  std::mutex attached_mu_;
  std::vector<Progressable*> attached_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Completion> q_;
  std::atomic<size_t> n_{0};
};

class HeapRegion final : public MemoryRegion {
 public:
  HeapRegion(std::byte* data, size_t n, uint32_t access, bool owned);
  // RC mode: the region is registered with the device; the key carries its rkey in the low
  // 32 bits (the target checks it) above 32 random bits.
  HeapRegion(std::byte* data, size_t n, uint32_t access, bool owned, std::shared_ptr<Device> dev, ibv_mr* mr);
  ibv_mr* mr() const { return mr_; }
  ~HeapRegion() override;
  std::byte* data() const override { return data_; }
  size_t size() const override { return size_; }
  uint64_t key() const override { return key_; }
  uint32_t access() const override { return access_; }

 private:
  std::byte* data_;
  size_t size_;
  uint32_t access_;
  bool owned_;
  uint64_t key_;
  std::shared_ptr<Device> dev_;
  ibv_mr* mr_ = nullptr;
};

// Counters of the reliability layer (tests read them through endpoint_stats()).
struct EndpointStats {
  uint64_t chunks_sent = 0, retransmits = 0, bad_crc = 0, duplicates = 0, gaps = 0, acks_sent = 0;
};


class VerbsProvider final : public Provider {
 public:
  static Result<std::unique_ptr<VerbsProvider>> open(const VerbsApi* api, std::string_view device_name,
                                                     const emu::Faults* faults, const ProviderOptions& options,
                                                     std::string scheme);
  std::string_view name() const override { return scheme_; }
  const ProviderCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<MemoryRegion>> allocate_memory(size_t n_bytes, uint32_t access) override;
  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t n_bytes, uint32_t access) override;
  Result<std::unique_ptr<CompletionQueue>> create_cq(size_t depth) override;
  Result<std::unique_ptr<Endpoint>> create_endpoint(CompletionQueue* send_cq, CompletionQueue* recv_cq,
                                                    const EndpointOptions& options) override;
  const Device& device() const { return *dev_; }

 private:
  explicit VerbsProvider(std::shared_ptr<Device> dev, std::string scheme);
  Result<std::unique_ptr<MemoryRegion>> wrap_region(std::byte* data, size_t n_bytes, uint32_t access, bool owned);
  std::shared_ptr<Device> dev_;
  std::string scheme_;
  ProviderCaps caps_;
};

Result<std::unique_ptr<Endpoint>> make_endpoint(std::shared_ptr<Device> dev, VerbsCompletionQueue* send_cq,
                                                VerbsCompletionQueue* recv_cq, const EndpointOptions& options);

// Test hook: the reliability counters of a verbs endpoint (nullopt-like zero for others).
EndpointStats endpoint_stats(const Endpoint* ep);
// Test hook: the emulator's counters for the device of a verbs-emu provider.
emu::Stats emulator_stats(const Provider* provider);

}  // namespace lattice::fabric::verbs
