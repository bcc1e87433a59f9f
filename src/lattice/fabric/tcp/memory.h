// Memory regions of the tcp provider and the table the target side checks remote accesses
// against. Keys are random 64-bit values (core/random.h), never addresses.
//
// Thread safety: RegionTable is internally locked (a shared_mutex: lookups from several
// progress threads run in parallel). A region removes its key from the table in its
// destructor, so later remote accesses with that key fail with kAccessDenied. A remote access
// already being served while the region is destroyed races with the destruction: callers must
// quiesce remote traffic to a region before destroying it (as with RDMA deregistration).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric::tcp {

struct RegionInfo {
  std::byte* data = nullptr;
  size_t size = 0;
  uint32_t access = 0;
};

class RegionTable {
 public:
  // Inserts under a fresh random key and returns it.
  uint64_t insert(const RegionInfo& info);
  void erase(uint64_t key);
  std::optional<RegionInfo> find(uint64_t key) const;

 private:
  mutable std::shared_mutex mu_;
  std::unordered_map<uint64_t, RegionInfo> regions_;
};

class TcpMemoryRegion final : public MemoryRegion {
 public:
  // `owned` is freed with std::free when the region dies (allocate_memory); null for
  // register_memory.
  TcpMemoryRegion(std::shared_ptr<RegionTable> table, std::byte* data, size_t size, uint32_t access,
                  void* owned);
  ~TcpMemoryRegion() override;

  std::byte* data() const override { return data_; }
  size_t size() const override { return size_; }
  uint64_t key() const override { return key_; }
  uint32_t access() const override { return access_; }

 private:
  std::shared_ptr<RegionTable> table_;
  std::byte* data_;
  size_t size_;
  uint32_t access_;
  void* owned_;
  uint64_t key_ = 0;  // 0: local-only, not in the table
};

}  // namespace lattice::fabric::tcp
