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
//   - sealed sessions (ProviderOptions::secret, or ?secure=1 with the secret from the
//     environment; what the cluster passes unless --insecure, as for tcp): seal.h. Both paths
//     seal every chunk with the session cipher; RC one-sided operations are refused then
//     (caps.rma_* false, kUnavailable saying why), since the NIC would place them unopened.
//
// Progress: one thread per endpoint polls the verbs CQ, runs the protocol and pushes fabric
// completions; it sleeps (bounded by the heartbeat period) when idle, or spins with busy_poll.
// QP teardown never passes through ERR (it can wedge an Apple port): destroy from RTS.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "lattice/crypto/secret.h"
#include "lattice/fabric/fabric.h"
#include "lattice/fabric/verbs/address.h"
#include "lattice/fabric/verbs/api.h"
#include "lattice/fabric/verbs/cq.h"
#include "lattice/fabric/verbs/emu/emu.h"
#include "lattice/fabric/verbs/memory.h"
#include "lattice/fabric/verbs/wire.h"

namespace lattice::fabric::verbs {

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
  // Sealed sessions (seal.h) when set: every endpoint runs the crypto handshake and seals every
  // chunk; one-sided operations are then off (nothing on the target could open them).
  std::optional<crypto::ClusterSecret> secret;
  ~Device();
};

class VerbsProvider final : public Provider {
 public:
  static Result<std::unique_ptr<VerbsProvider>> open(const VerbsApi* api, std::string_view device_name,
                                                     const emu::Faults* faults, const ProviderOptions& options,
                                                     std::string scheme,
                                                     std::optional<crypto::ClusterSecret> secret = std::nullopt);
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

// Test hook: the emulator's counters for the device of a verbs-emu provider.
emu::Stats emulator_stats(const Provider* provider);

}  // namespace lattice::fabric::verbs
