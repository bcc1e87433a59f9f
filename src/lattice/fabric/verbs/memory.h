// The verbs provider's memory regions (memory.cc): heap or caller memory, registered with the
// device in RC mode.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric::verbs {

struct Device;

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

}  // namespace lattice::fabric::verbs
