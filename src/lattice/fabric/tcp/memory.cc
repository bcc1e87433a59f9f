#include "lattice/fabric/tcp/memory.h"

#include <cstdlib>
#include <mutex>

#include "lattice/core/random.h"

namespace lattice::fabric::tcp {

uint64_t RegionTable::insert(const RegionInfo& info) {
  std::unique_lock lock(mu_);
  for (;;) {
    uint64_t key = secure_random_u64();
    if (key == 0) continue;  // 0 is never a valid key: an all-zero frame never names a region
    if (regions_.emplace(key, info).second) return key;
  }
}

void RegionTable::erase(uint64_t key) {
  std::unique_lock lock(mu_);
  regions_.erase(key);
}

std::optional<RegionInfo> RegionTable::find(uint64_t key) const {
  std::shared_lock lock(mu_);
  auto it = regions_.find(key);
  if (it == regions_.end()) return std::nullopt;
  return it->second;
}

TcpMemoryRegion::TcpMemoryRegion(std::shared_ptr<RegionTable> table, std::byte* data, size_t size,
                                 uint32_t access, void* owned)
    : table_(std::move(table)), data_(data), size_(size), access_(access), owned_(owned) {
  // Local-only memory (no remote right) is never looked up by a peer: no key, no table entry,
  // so registering a caller's buffer for one exchange costs an allocation, not a lock.
  if (access_ & (kRemoteRead | kRemoteWrite | kRemoteAtomic)) key_ = table_->insert(RegionInfo{data_, size_, access_});
}

TcpMemoryRegion::~TcpMemoryRegion() {
  if (key_ != 0) table_->erase(key_);
  std::free(owned_);
}

}  // namespace lattice::fabric::tcp
