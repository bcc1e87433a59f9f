// Fuzz harness: what a verbs peer sends before any RDMA traffic, its address blob (wire.h's
// AddressBlob, exchanged out of band and decoded by decode_address before a QP is brought up
// against it). Accepted blobs must re-encode to the same bytes. Malformed ones (size, magic,
// version, mode, checksum) are refused with an error.
//
// The staged chunks a connected peer sends have their own harness (verbs_chunk_fuzz.cc, over
// verbs/chunk_rx.cc).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "lattice/fabric/verbs/address.h"
#include "lattice/fabric/verbs/wire.h"

using namespace lattice::fabric::verbs;

namespace {

void check(const uint8_t* data, size_t size) {
  auto blob = decode_address({reinterpret_cast<const std::byte*>(data), size});
  if (!blob.ok()) return;
  std::vector<std::byte> again = encode_address(*blob);
  if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check(data, size);
  // The checksum stops almost every mutation at the door: also try the input with a correct
  // one, so the checks behind it (mode, QPN/PSN ranges, slot geometry) are reached.
  if (size == sizeof(AddressBlob)) {
    AddressBlob b;
    std::memcpy(&b, data, sizeof b);
    b.crc = crc32c(&b, offsetof(AddressBlob, crc));
    check(reinterpret_cast<const uint8_t*>(&b), sizeof b);
  }
  return 0;
}
