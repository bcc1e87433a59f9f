// Internal interface between the matmul driver (matmul.cc) and the per-ISA kernels
// (kernels_scalar.cc, kernels_avx2.cc, kernels_avx512.cc). Not part of the public API.
//
// Activations are quantized once per matmul call into one of these forms:
//   kF32 : the float input itself (F32 / F16 / BF16 weights).
//   kQ8  : blocks of 32 (Q4_0 / Q4_1 / Q5_0 / Q5_1 / IQ4_NL / Q8_0 weights): int8 q[k], float d[k/32],
//          int32 s[k/32] where x ~ d*q and s is the sum of the block's q (for the unsigned-weight
//          offset trick, and the m * sum(x) term of Q4_1 / Q5_1: what ggml's Q8_1 carries).
//   kQ8K : blocks of 256 (K-quant weights, Q2_K..Q6_K): int8 q[k], float d[k/256], int16 bsum[k/16]
//          (sum of each 16 q's, for the K-quant mins and the Q6_K offset of 32).
// Token t's data starts at q + t*k, d + t*(k/block), s/bsum + t*(k/32 or k/16).
//
// Packed ("interleaved") weight layout for Q4_0 and Q8_0, built by Weight::pack: rows are
// taken 16 at a time (a "group"; missing rows of the last group are zero). Within a group,
// block column b (32 input features) stores:
//   Q4_0: 256 bytes at b*256: dword i (0..3) of row r's 16 nibble bytes at i*64 + r*4, i.e.
//         one 64-byte vector per i whose lane r holds row r's bytes 4i..4i+3. The low nibbles
//         are elements 4i..4i+3, the high ones 16+4i..16+4i+3 (GGUF order, unchanged).
//   Q8_0: 512 bytes at b*512: dword i (0..7) of row r's 32 values at i*64 + r*4, each value
//         stored as q + 128 (unsigned), so both types are u8 x s8 dot products.
//   then all blocks' scales: 16 fp16 (one per row) at nb*bytes_per_block + b*32.
// Group stride: nb*(256 or 512) + nb*32, rounded up to 64 bytes.
//
// Packed Q4_K (16-row groups, kQ4KPackedBytes per 256-column super-block s, at s*2368):
//   [0, 2048)    nibbles: sub-block j (0..7) at j*256, arranged like a Q4_0 block: dword i of
//                lane r holds row r's elements 4i..4i+3 (low nibbles) and 16+4i.. (high);
//   [2048, 2176) scales: byte j*16 + r = 6-bit scale of sub-block j, row r;
//   [2176, 2304) mins, by pairs: byte p*32 + 2r + h = 6-bit min of sub-block 2p+h, row r
//                (zero-extended to int16, lane r holds the pair for vpdpwssd);
//   [2304, 2336) d of the 16 rows (fp16); [2336, 2368) dmin of the 16 rows (fp16).
// Row r's element 32j + e equals d*sc_j*q - dmin*m_j as in GGUF; only the byte order changes.
// Packed Q5_K: the same plus the fifth bits after the nibbles, shifting what follows by 512
// (K4Layout<5>): sub-block j at 2048 + j*64, byte r*4+m, bit 2i = element 4i+m, bit 2i+1 =
// element 16+4i+m (i = 0..3); 2880 bytes per super-block.
//
// Packed Q6_K (16-row groups, kQ6KPackedBytes per super-block, values q in 0..63, x = d*sc*(q-32)):
//   [0, 2048)    low 4 bits, sub-block j (32 elements) at j*256 arranged as a Q4_0 block;
//   [2048, 3072) top 2 bits, sub-block j at 2048 + j*128, half p (0,1) at +p*64, byte r*4+m:
//                bits 0-1: element 4p+m, 2-3: 16+4p+m, 4-5: 4(p+2)+m, 6-7: 16+4(p+2)+m;
//   [3072, 3328) int8 scales: byte g*16 + r = scale of elements 16g..16g+15 of row r;
//   [3328, 3360) d of the 16 rows (fp16); padded to 3392 bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lattice/engine/quant/types.h"

namespace lattice::engine::detail {

inline constexpr size_t kPackRows = 16;
inline constexpr size_t kMaxTileTokens = 8;  // a packed tile handles up to this many tokens

struct Act {
  size_t k = 0;  // n_cols
  const float* f32 = nullptr;
  const int8_t* q = nullptr;      // kQ8 and kQ8K quantized values (the one in use)
  const float* d = nullptr;       // per-block scales
  const int32_t* s = nullptr;     // kQ8: per-32 sums
  const int32_t* off4 = nullptr;  // kQ8: -8 * s, -128 * s (the packed tiles' accumulator starts,
  const int32_t* off8 = nullptr;  //      broadcast straight from memory)
  const int16_t* bsum = nullptr;  // kQ8K: per-16 sums
};

// Dot product of one weight row in GGUF layout with token `tok` of the activations.
using RowDotFn = float (*)(const void* row, const Act& a, size_t tok);
// One packed group (16 rows) against tokens [t0, t0+nt), nt <= kMaxTileTokens:
// out[i*16 + r] = row r . token t0+i.
using PackedTileFn = void (*)(const uint8_t* group, size_t nb, const Act& a, size_t t0, size_t nt, float* out);
// Float weights (F32/F16/BF16) in prefill: rows [0, nr) (nr <= 4, row i at rows + i*stride)
// against tokens [t0, t0+nt) (nt <= 4): out[t*4 + i]. Null where an ISA has none.
using FloatTileFn = void (*)(const uint8_t* rows, size_t stride, size_t nr, const Act& a, size_t t0, size_t nt,
                             float* out);
// Quantizes one token of k floats (k a multiple of 32 / 256) into the kQ8 / kQ8K form.
using QuantQ8Fn = void (*)(const float* x, size_t k, int8_t* q, float* d, int32_t* s);
using QuantQ8KFn = void (*)(const float* x, size_t k, int8_t* q, float* d, int16_t* bsum);

struct KernelTable {
  const char* name;
  QuantQ8Fn quant_q8;
  QuantQ8KFn quant_q8k;
  RowDotFn dot_f32, dot_f16, dot_bf16, dot_q8_0, dot_q4_0, dot_q4_k, dot_q5_k, dot_q6_k;
  PackedTileFn tile_q4_0, tile_q8_0, tile_q4_k, tile_q5_k, tile_q6_k;
  FloatTileFn ftile_f32 = nullptr, ftile_f16 = nullptr, ftile_bf16 = nullptr;
  RowDotFn dot_q2_k = nullptr, dot_q3_k = nullptr;  // GGUF rows only (never packed)
  RowDotFn dot_q4_1 = nullptr, dot_q5_0 = nullptr, dot_q5_1 = nullptr, dot_iq4_nl = nullptr;  // GGUF rows only
};

const KernelTable& scalar_kernels();
const KernelTable& avx2_kernels();    // defined in kernels_avx2.cc
const KernelTable& avx512_kernels();  // defined in kernels_avx512.cc
void add_b32_avx512(KernelTable& k);  // Q4_1 / Q5_0 / Q5_1 / IQ4_NL rows (kernels_b32_avx512.cc)

// Offsets inside one packed Q4_K (kBits 4) / Q5_K (kBits 5) super-block.
template <int kBits>
struct K4Layout {
  static constexpr size_t kHighBits = 2048;  // Q5_K only
  static constexpr size_t kScales = kBits == 5 ? 2560 : 2048;
  static constexpr size_t kMins = kScales + 128;
  static constexpr size_t kD = kMins + 128;
  static constexpr size_t kDmin = kD + 32;
  static constexpr size_t kBytes = kDmin + 32;
};
inline constexpr size_t kQ4KPackedBytes = K4Layout<4>::kBytes;
inline constexpr size_t kQ5KPackedBytes = K4Layout<5>::kBytes;
static_assert(kQ4KPackedBytes == 2368 && kQ5KPackedBytes == 2880);
inline constexpr size_t kQ6KPackedBytes = 3392;
inline size_t packed_block_bytes(TensorType t) { return t == TensorType::kQ4_0 ? 256 : 512; }
// nb = number of format blocks in a row (32-blocks for Q4_0/Q8_0, 256-blocks for Q4_K).
inline size_t packed_group_bytes(TensorType t, size_t nb) {
  if (t == TensorType::kQ4_K) return nb * kQ4KPackedBytes;
  if (t == TensorType::kQ5_K) return nb * kQ5KPackedBytes;
  if (t == TensorType::kQ6_K) return nb * kQ6KPackedBytes;
  return (nb * (packed_block_bytes(t) + 32) + 63) / 64 * 64;
}

}  // namespace lattice::engine::detail

namespace lattice::engine::detail {
const KernelTable& active_kernels();  // dispatch.cc
}
