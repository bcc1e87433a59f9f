#include <cstring>

#include "lattice/fabric/verbs/address.h"

namespace lattice::fabric::verbs {

int choose_gid(const VerbsApi& api, ibv_context* ctx, uint8_t port, int table_len, ibv_gid* out) {
  // Apple: index 1 is ::ffff:<IPv4> of the paired interface, present only once it has an
  // IPv4 address; fall back to any IPv4-mapped entry, then to the first non-empty one
  // (MAC-derived index 0 on Apple, the link-local entry elsewhere).
  ibv_gid g{};
  if (table_len > 1 && api.query_gid(ctx, port, 1, &g) == 0 && gid_is_ipv4_mapped(g) && !gid_is_zero(g)) {
    *out = g;
    return 1;
  }
  int first_nonzero = -1;
  ibv_gid first{};
  for (int i = 0; i < table_len && i < 256; ++i) {
    if (api.query_gid(ctx, port, i, &g) != 0 || gid_is_zero(g)) continue;
    if (gid_is_ipv4_mapped(g)) {
      *out = g;
      return i;
    }
    if (first_nonzero < 0) {
      first_nonzero = i;
      first = g;
    }
  }
  if (first_nonzero >= 0) *out = first;
  return first_nonzero;
}

std::vector<std::byte> encode_address(const AddressBlob& blob) {
  AddressBlob b = blob;
  b.magic = kAddressMagic;
  b.version = 1;
  b.crc = crc32c(&b, offsetof(AddressBlob, crc));
  std::vector<std::byte> out(sizeof b);
  std::memcpy(out.data(), &b, sizeof b);
  return out;
}

Result<AddressBlob> decode_address(std::span<const std::byte> bytes) {
  if (bytes.size() != sizeof(AddressBlob))
    return InvalidArgument("verbs: peer address is " + std::to_string(bytes.size()) + " bytes, expected " +
                           std::to_string(sizeof(AddressBlob)));
  AddressBlob b;
  std::memcpy(&b, bytes.data(), sizeof b);
  if (b.magic != kAddressMagic || b.version != 1)
    return InvalidArgument("verbs: peer address has a bad magic or version (not a verbs endpoint address)");
  if (b.crc != crc32c(&b, offsetof(AddressBlob, crc))) return InvalidArgument("verbs: peer address checksum mismatch");
  const uint8_t mode = b.mode & static_cast<uint8_t>(~kModeSealed);
  if (mode != static_cast<uint8_t>(Mode::kStaged) && mode != static_cast<uint8_t>(Mode::kRc))
    return InvalidArgument("verbs: peer address has an unknown mode");
  if (b.qpn > 0xffffff || b.psn > 0xffffff) return InvalidArgument("verbs: peer QPN/PSN out of range");
  if (b.slot_bytes != kSlotBytes || b.recv_slots != kRecvSlots)
    return InvalidArgument("verbs: peer uses " + std::to_string(b.slot_bytes) + "-byte slots x " +
                           std::to_string(b.recv_slots) + ", we use " + std::to_string(kSlotBytes) + " x " +
                           std::to_string(kRecvSlots) + " (frame counts must match: same lattice version on both)");
  return b;
}

}  // namespace lattice::fabric::verbs
