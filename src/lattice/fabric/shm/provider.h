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
#include "lattice/fabric/shm/address.h"
#include "lattice/fabric/shm/cq.h"
#include "lattice/fabric/shm/memory.h"
#include "lattice/fabric/shm/wire.h"

namespace lattice::fabric::shm {

class ShmEndpoint;

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

}  // namespace lattice::fabric::shm
