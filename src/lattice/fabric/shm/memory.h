// The shm provider's memory regions: its own (a memfd segment, or caller memory registered in
// the directory) and a peer's as seen from here (memory.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "lattice/fabric/fabric.h"
#include "lattice/fabric/shm/address.h"

namespace lattice::fabric::shm {

class ShmProvider;

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

}  // namespace lattice::fabric::shm
