// The shm provider's addresses and segments (address.cc): memfd segments and their mappings,
// the address blob an endpoint hands its peer, the host identity, the doorbell.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/fabric/shm/wire.h"

namespace lattice::fabric::shm {

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

}  // namespace lattice::fabric::shm
