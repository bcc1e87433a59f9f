// Quantize / dequantize: round-trip error bounds per type, and bit-layout checks against
// hand-built blocks whose values are derived from the GGUF format description (not from our
// dequantizer).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "lattice/engine/quant/fp16.h"
#include "lattice/engine/quant/quantize.h"

namespace lattice::engine {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
  }
  return num / den;
}

// Bounds for unit gaussian data. A uniform quantizer of step s has error variance s^2/12.
//  Q8_0: s = amax/127 per 32; E[amax] of 32 gaussians ~2.0 (tail to ~3): (3/127)^2/12 = 4.6e-5.
//  Q4_0: s = amax/8 (asymmetric, largest maps to -8): (3/8)^2/12 = 1.2e-2 worst, ~7e-3 typical.
//  Q4_1: s = range/15 per 32 (range of 32 gaussians ~4-5): (5/15)^2/12 = 9e-3 worst, ~6e-3 typical.
//  Q5_0: s = amax/16 per 32: (3/16)^2/12 = 2.9e-3 worst, ~1.7e-3 typical.
//  Q5_1: s = range/31 per 32: (5/31)^2/12 = 2.2e-3 worst, ~1.5e-3 typical.
//  IQ4_NL: 16 levels over [-127, 113] * d, d = amax/127, closer together near zero: at most
//        Q4_0's error (levels no further apart than Q4_0's step where the data is), ~5e-3.
//  Q4_K: s = range/15 per 32, range ~4-5 sigma, plus 6-bit scale/min rounding: ~(5/15)^2/12 = 9e-3.
//  Q5_K: same with 31 levels: (5/31)^2/12 = 2.2e-3.
//  Q6_K: s = amax/32 per 16 (amax ~1.8-2.5) with 8-bit scales: (2.5/32)^2/12 = 5.1e-4.
//  Q3_K: s = amax/4 per 16 (amax ~2-2.5) with 6-bit scales: (2.5/4)^2/12 = 3.3e-2.
//  Q2_K: s = range/3 per 16 (range ~3.5-4, min clamped <= 0) with 4-bit scales and mins:
//        (4/3)^2/12 = 0.15 worst, ~0.1 typical.
//  F16: relative rounding 2^-11, NMSE <= 2^-22/3 ~ 8e-8;  BF16: 2^-8 -> 2^-16/3 ~ 5e-6.
struct RoundTrip {
  TensorType type;
  double max_nmse;
};

class QuantRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(QuantRoundTrip, ErrorWithinQuantizationBound) {
  const auto p = GetParam();
  const size_t n = 256 * 64;
  auto x = gaussian(n, 7);
  std::vector<uint8_t> q(*row_bytes(p.type, n));
  ASSERT_TRUE(quantize_row(p.type, x.data(), q.data(), n).ok());
  std::vector<float> y(n);
  ASSERT_TRUE(dequantize_row(p.type, q.data(), y.data(), n).ok());
  const double e = nmse(x, y);
  EXPECT_LT(e, p.max_nmse) << "type " << static_cast<int>(p.type);
  RecordProperty("nmse_x1e6", static_cast<int>(e * 1e6));
  // A quantizer that lost all information would sit at NMSE ~1; make sure we're far below and
  // not trivially zero for the lossy types.
  if (p.max_nmse > 1e-6) {
    EXPECT_GT(e, 0.0);
  }
}

TEST_P(QuantRoundTrip, ConstantAndZeroBlocks) {
  const auto p = GetParam();
  const size_t n = 512;
  std::vector<float> x(n, 0.0f);
  for (size_t i = 256; i < n; ++i) x[i] = 0.75f;  // a constant non-zero half
  std::vector<uint8_t> q(*row_bytes(p.type, n));
  ASSERT_TRUE(quantize_row(p.type, x.data(), q.data(), n).ok());
  std::vector<float> y(n);
  ASSERT_TRUE(dequantize_row(p.type, q.data(), y.data(), n).ok());
  for (size_t i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << i;
  for (size_t i = 256; i < n; ++i) ASSERT_NEAR(y[i], 0.75f, 0.75f * 0.04f) << i;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRoundTrip,
                         ::testing::Values(RoundTrip{TensorType::kF32, 1e-30}, RoundTrip{TensorType::kF16, 1e-7},
                                           RoundTrip{TensorType::kBF16, 6e-6}, RoundTrip{TensorType::kQ8_0, 6e-5},
                                           RoundTrip{TensorType::kQ4_0, 1.2e-2}, RoundTrip{TensorType::kQ4_1, 9e-3},
                                           RoundTrip{TensorType::kQ5_0, 2.9e-3}, RoundTrip{TensorType::kQ5_1, 2.2e-3},
                                           RoundTrip{TensorType::kIQ4_NL, 1.2e-2},
                                           RoundTrip{TensorType::kQ4_K, 9e-3},
                                           RoundTrip{TensorType::kQ5_K, 2.2e-3}, RoundTrip{TensorType::kQ6_K, 5.1e-4},
                                           RoundTrip{TensorType::kQ3_K, 3.3e-2}, RoundTrip{TensorType::kQ2_K, 0.15}));

TEST(Quantize, RejectsPartialBlocksAndUnsupportedTypes) {
  std::vector<float> x(100);
  std::vector<uint8_t> q(1024);
  EXPECT_EQ(quantize_row(TensorType::kQ4_0, x.data(), q.data(), 33).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(quantize_row(TensorType::kQ4_K, x.data(), q.data(), 32).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(quantize_row(TensorType::kQ5_1, x.data(), q.data(), 48).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(quantize_row(TensorType::kQ8_1, x.data(), q.data(), 256).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(quantize_row(TensorType::kQ3_K, x.data(), q.data(), 128).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(dequantize_row(TensorType::kQ8_K, q.data(), x.data(), 256).code(), ErrorCode::kInvalidArgument);
}

TEST(Fp16, ConversionsMatchKnownValues) {
  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(1e6f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(5.9604644775390625e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(fp32_to_fp16(1.0f + 1.0f / 2048), 0x3c00);        // tie rounds to even
  EXPECT_EQ(fp32_to_fp16(1.0f + 3.0f / 2048), 0x3c02);        // tie rounds to even (up)
  EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_fp32(0xc040), -3.0f);
}

// ---- Bit layouts, from the format description ----

void put_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

TEST(QuantLayout, Q4_0AndQ8_0) {
  // Q4_0: [fp16 d][16 bytes]; byte i holds element i (low nibble) and i+16 (high), offset 8.
  uint8_t b40[18];
  put_u16(b40, 0x4000);  // d = 2
  for (int i = 0; i < 16; ++i) b40[2 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  float y[32];
  ASSERT_TRUE(dequantize_row(TensorType::kQ4_0, b40, y, 32).ok());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(y[i], 2.0f * (i - 8));
    EXPECT_EQ(y[i + 16], 2.0f * (15 - i - 8));
  }
  // Q8_0: [fp16 d][32 x int8].
  uint8_t b80[34];
  put_u16(b80, 0x3800);  // d = 0.5
  for (int i = 0; i < 32; ++i) b80[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i * 7 - 100));
  ASSERT_TRUE(dequantize_row(TensorType::kQ8_0, b80, y, 32).ok());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.5f * (i * 7 - 100));
}

TEST(QuantLayout, Q4_1Q5_0AndQ5_1) {
  // Q4_1: [fp16 d][fp16 m][16 bytes]: x = d*q + m, byte i holds element i (low nibble) and i+16.
  uint8_t b41[20];
  put_u16(b41, 0x4000);      // d = 2
  put_u16(b41 + 2, 0xbc00);  // m = -1
  for (int i = 0; i < 16; ++i) b41[4 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  float y[32];
  ASSERT_TRUE(dequantize_row(TensorType::kQ4_1, b41, y, 32).ok());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(y[i], 2.0f * i - 1);
    EXPECT_EQ(y[i + 16], 2.0f * (15 - i) - 1);
  }
  // Q5_0: [fp16 d][qh: 4 bytes, bit e = fifth bit of element e][16 nibble bytes], offset 16.
  // Q5_1: [fp16 d][fp16 m][qh][16 bytes], x = d*u + m.
  const uint32_t qh = 0xa5c3'0f81u;
  for (const bool with_min : {false, true}) {
    uint8_t b[24];
    put_u16(b, 0x3800);  // d = 0.5
    if (with_min) put_u16(b + 2, 0x4200);  // m = 3
    uint8_t* p = b + (with_min ? 4 : 2);
    std::memcpy(p, &qh, 4);
    for (int i = 0; i < 16; ++i) p[4 + i] = static_cast<uint8_t>(((i * 5) & 15) | (((i * 3 + 1) & 15) << 4));
    ASSERT_TRUE(dequantize_row(with_min ? TensorType::kQ5_1 : TensorType::kQ5_0, b, y, 32).ok());
    for (int e = 0; e < 32; ++e) {
      const int nib = e < 16 ? (e * 5) & 15 : ((e - 16) * 3 + 1) & 15;
      const int u = nib | (((qh >> e) & 1) << 4);
      EXPECT_EQ(y[e], with_min ? 0.5f * u + 3 : 0.5f * (u - 16)) << "element " << e << " min " << with_min;
    }
  }
}

TEST(QuantLayout, IQ4_NL) {
  // [fp16 d][16 bytes] as Q4_0, each nibble an index into the format's 16 levels.
  static const int kLevels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  uint8_t b[18];
  put_u16(b, 0x3400);  // d = 0.25
  for (int i = 0; i < 16; ++i) b[2 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  float y[32];
  ASSERT_TRUE(dequantize_row(TensorType::kIQ4_NL, b, y, 32).ok());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(y[i], 0.25f * kLevels[i]);
    EXPECT_EQ(y[i + 16], 0.25f * kLevels[15 - i]);
  }
}

// Q4_K / Q5_K scale bytes, as the format describes them: bytes 0-3 hold scale[0..3] in the
// low 6 bits and bits 4-5 of scale[4..7] on top; bytes 4-7 the same for the mins; bytes 8-11
// hold bits 0-3 of scale[4..7] (low nibble) and of min[4..7] (high nibble).
void build_k_scales(const int sc[8], const int mn[8], uint8_t out[12]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    out[4 + j] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    out[8 + j] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
}

TEST(QuantLayout, Q4_KAndQ5_K) {
  const int sc[8] = {1, 63, 17, 5, 48, 33, 2, 60};
  const int mn[8] = {0, 9, 63, 31, 16, 47, 62, 1};
  std::mt19937 rng(3);
  for (bool five : {false, true}) {
    // Q4_K: d, dmin, scales[12], qs[128]; Q5_K: d, dmin, scales[12], qh[32], qs[128].
    std::vector<uint8_t> blk(five ? 176 : 144);
    for (auto& b : blk) b = static_cast<uint8_t>(rng());
    put_u16(blk.data(), 0x3400);      // d = 0.25
    put_u16(blk.data() + 2, 0x2e00);  // dmin = 0.09375
    build_k_scales(sc, mn, blk.data() + 4);
    const uint8_t* qh = blk.data() + 16;
    const uint8_t* qs = blk.data() + (five ? 48 : 16);
    std::vector<float> y(256);
    ASSERT_TRUE(dequantize_row(five ? TensorType::kQ5_K : TensorType::kQ4_K, blk.data(), y.data(), 256).ok());
    for (int e = 0; e < 256; ++e) {
      // Element e: sub-block e/32; 64-element chunk e/64; byte 32*(e/64) + e%32, low nibble
      // for the chunk's first 32 elements; fifth bit: bit (e/32) of qh[e%32].
      const int sub = e / 32, chunk = e / 64, l = e % 32;
      const uint8_t byte = qs[32 * chunk + l];
      int q = (e % 64) < 32 ? (byte & 15) : (byte >> 4);
      if (five && (qh[l] >> sub) & 1) q += 16;
      const float expect = 0.25f * sc[sub] * q - 0.09375f * mn[sub];
      ASSERT_FLOAT_EQ(y[e], expect) << "element " << e << (five ? " Q5_K" : " Q4_K");
    }
  }
}

TEST(QuantLayout, Q6_K) {
  // ql[128], qh[64], int8 scales[16], fp16 d. Element e: half h = e/128, r = e%128,
  // quarter k = r/32, l = r%32; low 4 bits from ql[64h + 32*(k&1) + l] (low nibble for k<2),
  // top 2 bits from bits 2k,2k+1 of qh[32h + l]; scale index e/16; value d*sc*(q-32).
  std::mt19937 rng(5);
  uint8_t blk[210];
  for (auto& b : blk) b = static_cast<uint8_t>(rng());
  put_u16(blk + 208, 0x3c00);  // d = 1
  const int8_t* scales = reinterpret_cast<const int8_t*>(blk + 192);
  float y[256];
  ASSERT_TRUE(dequantize_row(TensorType::kQ6_K, blk, y, 256).ok());
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const uint8_t lo = blk[64 * h + 32 * (k & 1) + l];
    const int low4 = k < 2 ? (lo & 15) : (lo >> 4);
    const int top2 = (blk[128 + 32 * h + l] >> (2 * k)) & 3;
    const float expect = 1.0f * scales[e / 16] * ((low4 | (top2 << 4)) - 32);
    ASSERT_FLOAT_EQ(y[e], expect) << "element " << e;
  }
}

TEST(QuantLayout, Q2_KAndQ3_K) {
  // Q2_K: scales[16] (low nibble scale, high nibble min), qs[64], fp16 d, fp16 dmin.
  // Q3_K: hmask[32], qs[64], scales[12] (6-bit, offset 32), fp16 d.
  // Element e = 128h + 32j + l: low 2 bits at bits 2j of qs[32h + l]; Q3_K's third bit is bit
  // 4h + j of hmask[l], and a clear bit subtracts 4. Scale index e/16.
  std::mt19937 rng(9);
  uint8_t b2[84];
  for (auto& b : b2) b = static_cast<uint8_t>(rng());
  put_u16(b2 + 80, 0x3800);  // d = 0.5
  put_u16(b2 + 82, 0x3400);  // dmin = 0.25
  float y[256];
  ASSERT_TRUE(dequantize_row(TensorType::kQ2_K, b2, y, 256).ok());
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int q = (b2[16 + 32 * h + l] >> (2 * j)) & 3;
    ASSERT_FLOAT_EQ(y[e], 0.5f * (b2[e / 16] & 15) * q - 0.25f * (b2[e / 16] >> 4)) << "Q2_K element " << e;
  }
  uint8_t b3[110];
  for (auto& b : b3) b = static_cast<uint8_t>(rng());
  put_u16(b3 + 108, 0x3c00);  // d = 1
  // Scales as llama.cpp's dequantizer reads them: three little-endian words a0, a1, a2 of the
  // 12 bytes; scales 0-3 = low nibbles of a0 | bits 0-1 of a2's bytes << 4, 4-7 = low nibbles
  // of a1 | bits 2-3, 8-11 = high nibbles of a0 | bits 4-5, 12-15 = high nibbles of a1 | bits 6-7.
  uint32_t aw[3];
  std::memcpy(aw, b3 + 96, 12);
  int sc[16];
  for (int i = 0; i < 4; ++i) {
    const int top = (aw[2] >> (8 * i)) & 0xff;
    sc[i] = ((aw[0] >> (8 * i)) & 15) | ((top & 3) << 4);
    sc[4 + i] = ((aw[1] >> (8 * i)) & 15) | (((top >> 2) & 3) << 4);
    sc[8 + i] = ((aw[0] >> (8 * i + 4)) & 15) | (((top >> 4) & 3) << 4);
    sc[12 + i] = ((aw[1] >> (8 * i + 4)) & 15) | (((top >> 6) & 3) << 4);
  }
  ASSERT_TRUE(dequantize_row(TensorType::kQ3_K, b3, y, 256).ok());
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int low = (b3[32 + 32 * h + l] >> (2 * j)) & 3;
    const bool hi = (b3[l] >> (4 * h + j)) & 1;
    ASSERT_FLOAT_EQ(y[e], 1.0f * (sc[e / 16] - 32) * (low - (hi ? 0 : 4))) << "Q3_K element " << e;
  }
}

TEST(QuantLayout, QuantizeProducesTheLayoutItDescribes) {
  // Quantizing the dequantized values of a random valid block must reproduce the block values
  // (quantize -> dequantize is idempotent on representable rows).
  for (TensorType t : {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ5_0, TensorType::kIQ4_NL, TensorType::kQ6_K,
                       TensorType::kQ3_K}) {
    auto x = gaussian(256, 11);
    std::vector<uint8_t> q(*row_bytes(t, 256)), q2(q.size());
    std::vector<float> y(256), y2(256);
    ASSERT_TRUE(quantize_row(t, x.data(), q.data(), 256).ok());
    ASSERT_TRUE(dequantize_row(t, q.data(), y.data(), 256).ok());
    ASSERT_TRUE(quantize_row(t, y.data(), q2.data(), 256).ok());
    ASSERT_TRUE(dequantize_row(t, q2.data(), y2.data(), 256).ok());
    for (int i = 0; i < 256; ++i) ASSERT_NEAR(y2[i], y[i], 1e-3f * std::fabs(y[i]) + 1e-6f) << i;
  }
}

}  // namespace
}  // namespace lattice::engine
