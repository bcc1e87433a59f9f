// Memory of the staged path: user regions are never registered with the device (the
// staging slots are), so any number of them costs no MR; keys are random and unguessable.
#include <cstdlib>

#include "lattice/core/random.h"
#include "lattice/fabric/verbs/provider.h"

namespace lattice::fabric::verbs {

HeapRegion::HeapRegion(std::byte* data, size_t n, uint32_t access, bool owned)
    : data_(data), size_(n), access_(access), owned_(owned) {
  uint64_t k = 0;
  while (k == 0) k = lattice::secure_random_u64();
  key_ = k;
}

HeapRegion::HeapRegion(std::byte* data, size_t n, uint32_t access, bool owned, std::shared_ptr<Device> dev, ibv_mr* mr)
    : HeapRegion(data, n, access, owned) {
  dev_ = std::move(dev);
  mr_ = mr;
  if (mr_) key_ = (lattice::secure_random_u64() << 32) | mr_->rkey;
}

HeapRegion::~HeapRegion() {
  if (mr_) dev_->api->dereg_mr(mr_);
  if (owned_) std::free(data_);
}

}  // namespace lattice::fabric::verbs
