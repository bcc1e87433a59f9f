#include <algorithm>
#include <array>
#include <cstring>

#include "lattice/fabric/verbs/wire.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace lattice::fabric::verbs {
namespace {

constexpr uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = make_table();

uint32_t crc_table(const uint8_t* p, size_t n, uint32_t c) {
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_hw(const uint8_t* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
  return c;
}
bool has_hw() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t seed) {
  uint32_t c = ~seed;
  const auto* p = static_cast<const uint8_t*>(data);
#if defined(__x86_64__)
  if (has_hw()) return ~crc_hw(p, n, c);
#endif
  return ~crc_table(p, n, c);
}

}  // namespace lattice::fabric::verbs

namespace lattice::fabric::verbs {

uint32_t chunk_crc(const std::byte* slot) {
  ChunkHeader h;
  std::memcpy(&h, slot, sizeof h);
  h.crc = 0;
  const size_t body = chunk_body_offset(h) - sizeof h + std::min<size_t>(h.payload_bytes, chunk_capacity(h));
  return crc32c(slot + sizeof h, body, crc32c(&h, sizeof h));
}

}  // namespace lattice::fabric::verbs
