// Block layouts of the quantized weight types, byte for byte as the GGUF/ggml format defines
// them. Sizes are pinned by static_assert against types.cc. Internal to the quant folder.
//
// Dequantized values (q: stored integers, d/dmin: fp16 unless noted):
//   Q8_0 (32):  x[i] = d * qs[i]
//   Q4_0 (32):  x[i] = d * ((qs[i] & 15) - 8),  x[i+16] = d * ((qs[i] >> 4) - 8),  i < 16
//   Q4_1 (32):  x[i] = d * (qs[i] & 15) + m,  x[i+16] = d * (qs[i] >> 4) + m  (m: fp16 offset)
//   Q5_0 (32):  u = nibble as in Q4_0 | bit e of the little-endian 32-bit qh << 4 (e the element,
//               0..31);  x[e] = d * (u - 16)
//   Q5_1 (32):  u as in Q5_0;  x[e] = d * u + m
//   IQ4_NL (32): nibbles as in Q4_0, each an index into the 16 non-uniform levels kIq4nlLevels;
//               x = d * kIq4nlLevels[nibble]
//   Q4_K (256): 8 sub-blocks of 32 with 6-bit scale sc[j] and min m[j] packed in scales[12];
//               64-element chunk c (0..3) uses qs[32c..32c+31]: low nibbles are sub-block 2c,
//               high nibbles sub-block 2c+1;  x = d*sc[j]*q - dmin*m[j]
//   Q5_K (256): as Q4_K plus a fifth bit: bit (2c) of qh[l] for the low-nibble element l of
//               chunk c, bit (2c+1) for the high-nibble one
//   Q6_K (256): two 128-element halves h; in half h element l (0..31) of quarter k (0..3) takes
//               its low 4 bits from ql[64h + l + 32*(k&1)] (low nibble for k < 2, high for k >= 2)
//               and its top 2 bits from bits 2k..2k+1 of qh[32h + l]; scale sc[8h + l/16 + 2k]
//               (int8); x = d * sc * (q - 32)
//   Q2_K (256): 16 sub-blocks of 16; element e = 128h + 32j + l (h 0..1, j 0..3, l 0..31) is
//               bits 2j..2j+1 of qs[32h + l]; sub-block s = e/16 has scale scales[s] & 15 and
//               min scales[s] >> 4;  x = d * sc * q - dmin * m
//   Q3_K (256): as Q2_K for the low 2 bits (qs), plus the third bit: bit 4h + j of hmask[l];
//               u = low | third << 2 (0..7); 6-bit scale of sub-block s (q3_scale) minus 32;
//               x = d * (sc - 32) * (u - 4)
#pragma once

#include <cstdint>

namespace lattice::engine::detail {

inline constexpr int kQK = 32;    // elements per Q4_0 / Q8_0 block
inline constexpr int kQKK = 256;  // elements per K-quant super-block

struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
using BlockIQ4_NL = BlockQ4_0;  // the same bytes: fp16 d, 16 nibble bytes
// IQ4_NL's levels (the format's table: denser near zero, as weights are distributed).
inline constexpr int8_t kIq4nlLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // not a uint32_t: the block is 22 bytes, so qh sits at offset 2
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

// The fifth bits of a Q5_0 / Q5_1 block as one word: bit e belongs to element e.
inline uint32_t q5_high_bits(const uint8_t qh[4]) {
  return uint32_t{qh[0]} | uint32_t{qh[1]} << 8 | uint32_t{qh[2]} << 16 | uint32_t{qh[3]} << 24;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block.
inline void k4_scale_min(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// Inverse of k4_scale_min: packs 8 scales and 8 mins (each 0..63) into 12 bytes.
inline void k4_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// The 6-bit scale of sub-block s (0..15) of a Q3_K super-block, 0..63 (the format subtracts 32):
// low 4 bits in the low (s < 8) or high nibble of s[s % 8], top 2 bits at bit 2*(s/4) of s[8 + s%4].
inline int q3_scale(const uint8_t* sc, int s) {
  const int lo = s < 8 ? (sc[s] & 15) : (sc[s - 8] >> 4);
  return lo | (((sc[8 + s % 4] >> (2 * (s / 4))) & 3) << 4);
}
// Inverse of q3_scale: packs 16 scales (each 0..63) into 12 bytes.
inline void q3_pack_scales(const uint8_t v[16], uint8_t out[12]) {
  for (int i = 0; i < 12; ++i) out[i] = 0;
  for (int s = 0; s < 16; ++s) {
    out[s % 8] = static_cast<uint8_t>(out[s % 8] | ((v[s] & 15) << (s < 8 ? 0 : 4)));
    out[8 + s % 4] = static_cast<uint8_t>(out[8 + s % 4] | ((v[s] >> 4) << (2 * (s / 4))));
  }
}

}  // namespace lattice::engine::detail
