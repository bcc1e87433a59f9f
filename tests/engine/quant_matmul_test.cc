// matmul against independent oracles, for every weight type, every ISA this CPU has, packed
// and in-place weights, decode (1 token) and prefill (odd token counts), row ranges, fused
// outputs and 1..3 threads.
//
// Oracle 1: a double-precision product of the *dequantized* weights with the *unquantized*
// activations. What separates the kernels from it is the activation quantization: each
// activation block (32 or 256 values) is rounded to steps of dx = amax/127, an error that is
// uniform in [-dx/2, dx/2] (variance dx^2/12) and independent across elements. The output
// error of row r is then sum_c W[r][c] e[c], with standard deviation
//   sigma_r = sqrt(sum_c W[r][c]^2 dx(c)^2 / 12).
// We allow 6 sigma, plus float accumulation (1e-5 of sum |W x|). F32/F16/BF16 activations are
// not quantized: only the float term applies.
// Oracle 2: the scalar kernels. With the same quantized activations the integer dot products
// are exact, so SIMD and scalar differ only by float summation order: 2e-6 of sum |W x|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "lattice/engine/quant/matmul.h"
#include "lattice/engine/quant/quantize.h"

namespace lattice::engine {
namespace {

struct Mat {
  TensorType type;
  size_t rows, cols, stride;
  std::vector<uint8_t> bytes;
  std::vector<double> deq;  // rows x cols
};

Mat make_mat(TensorType type, size_t rows, size_t cols, uint32_t seed, size_t pad = 0) {
  Mat m{type, rows, cols, *row_bytes(type, cols) + pad, {}, {}};
  m.bytes.assign(rows * m.stride, 0xcd);
  m.deq.resize(rows * cols);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::vector<float> row(cols), back(cols);
  for (size_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = nd(rng);
    row[r % cols] = 3.0f;  // an outlier per row, as real weights have
    EXPECT_TRUE(quantize_row(type, row.data(), m.bytes.data() + r * m.stride, cols).ok());
    EXPECT_TRUE(dequantize_row(type, m.bytes.data() + r * m.stride, back.data(), cols).ok());
    for (size_t c = 0; c < cols; ++c) m.deq[r * cols + c] = back[c];
  }
  return m;
}

std::vector<float> make_x(size_t n_tok, size_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n_tok * cols);
  for (auto& v : x) v = nd(rng);
  for (size_t t = 0; t < n_tok; ++t) x[t * cols + (7 * t) % cols] = 8.0f;  // activation outlier
  return x;
}

size_t act_block(TensorType t) {
  switch (t) {
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kIQ4_NL:
    case TensorType::kQ8_0: return 32;
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K: return 256;
    default: return 0;  // not quantized
  }
}

struct Bound {
  double ref, tol, abs_sum;
};

Bound reference(const Mat& m, const std::vector<float>& x, size_t t, size_t r) {
  const size_t k = m.cols, blk = act_block(m.type);
  double ref = 0, abs_sum = 0, var = 0;
  for (size_t c0 = 0; c0 < k; c0 += blk ? blk : k) {
    const size_t c1 = c0 + (blk ? blk : k);
    double amax = 0;
    for (size_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(double(x[t * k + c])));
    const double dx = blk ? amax / 127 : 0;
    for (size_t c = c0; c < c1; ++c) {
      const double w = m.deq[r * k + c];
      ref += w * x[t * k + c];
      abs_sum += std::fabs(w * x[t * k + c]);
      var += w * w * dx * dx / 12;
    }
  }
  return {ref, 6 * std::sqrt(var) + 1e-5 * abs_sum, abs_sum};
}

const TensorType kTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16, TensorType::kQ8_0,
                             TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1,
                             TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K, TensorType::kQ2_K,
                             TensorType::kQ3_K, TensorType::kIQ4_NL};

bool is_kquant(TensorType t) {
  return t == TensorType::kQ2_K || t == TensorType::kQ3_K || t == TensorType::kQ4_K || t == TensorType::kQ5_K ||
         t == TensorType::kQ6_K;
}

std::vector<Isa> isas() {
  std::vector<Isa> v;
  for (Isa i : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(i)) v.push_back(i);
  return v;
}

class IsaGuard {
 public:
  IsaGuard() : saved_(active_isa()) {}
  ~IsaGuard() { (void)set_active_isa(saved_); }

 private:
  Isa saved_;
};

TEST(Matmul, EveryTypeIsaLayoutAndTokenCountMatchesReference) {
  IsaGuard guard;
  const size_t rows = 37, cols = 512;  // 37: a partial packed group; 512: two K-quant blocks
  ThreadPool pool1(1), pool2(2);
  for (TensorType type : kTypes) {
    const Mat m = make_mat(type, rows, cols, 100 + static_cast<uint32_t>(type));
    const WeightView view{type, m.bytes.data(), rows, cols, m.stride};
    auto packed = Weight::pack(view);
    auto in_place = Weight::view(view);
    ASSERT_TRUE(packed.ok() && in_place.ok());
    // Which types get the interleaved layout: Q4_0/Q8_0 always, K-quants with AVX-512.
    // Q2_K / Q3_K and Q4_1 / Q5_0 / Q5_1 / IQ4_NL always run on their GGUF rows.
    const bool packable_kquant = type == TensorType::kQ4_K || type == TensorType::kQ5_K || type == TensorType::kQ6_K;
    const bool expect_packed = type == TensorType::kQ4_0 || type == TensorType::kQ8_0 ||
                               (packable_kquant && active_isa() == Isa::kAvx512);
    EXPECT_EQ(packed->packed(), expect_packed) << static_cast<int>(type);
    EXPECT_FALSE(in_place->packed());
    for (size_t n_tok : {1, 2, 3, 5, 7, 9, 13}) {
      const auto x = make_x(n_tok, cols, 7 * static_cast<uint32_t>(n_tok));
      std::vector<float> y_scalar;
      for (Isa isa : isas()) {
        ASSERT_TRUE(set_active_isa(isa).ok());
        for (const Weight* w : {&*packed, &*in_place}) {
          for (ThreadPool* pool : {&pool1, &pool2}) {
            std::vector<float> y(n_tok * rows, NAN);
            matmul(*w, x.data(), n_tok, y.data(), *pool);
            if (y_scalar.empty()) y_scalar = y;  // scalar ISA runs first
            for (size_t t = 0; t < n_tok; ++t) {
              for (size_t r = 0; r < rows; ++r) {
                const Bound b = reference(m, x, t, r);
                const float got = y[t * rows + r];
                ASSERT_NEAR(got, b.ref, b.tol) << "type " << static_cast<int>(type) << " isa " << isa_name(isa)
                                               << " packed " << w->packed() << " n_tok " << n_tok << " t " << t
                                               << " r " << r << " threads " << pool->n_threads();
                ASSERT_NEAR(got, y_scalar[t * rows + r], 2e-6 * b.abs_sum + 1e-6)
                    << "vs scalar: type " << static_cast<int>(type) << " isa " << isa_name(isa) << " packed "
                    << w->packed() << " n_tok " << n_tok << " t " << t << " r " << r;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Matmul, AggregateErrorIsQuantizationSized) {
  // NMSE of the kernel output against the exact float product of the *original* weights:
  // dominated by weight quantization, so it must sit near the round-trip NMSE of the type.
  IsaGuard guard;
  ThreadPool pool(2);
  const size_t rows = 64, cols = 1024, n_tok = 4;
  struct Case {
    TensorType type;
    double max_nmse;
  };
  for (Case c : {Case{TensorType::kQ8_0, 1e-4}, Case{TensorType::kQ4_0, 1.5e-2}, Case{TensorType::kQ4_K, 1.2e-2},
                 Case{TensorType::kQ5_K, 4e-3}, Case{TensorType::kQ6_K, 1.5e-3}, Case{TensorType::kBF16, 1e-5},
                 Case{TensorType::kQ3_K, 5e-2}, Case{TensorType::kQ2_K, 1.5e-1}, Case{TensorType::kQ4_1, 1.2e-2},
                 Case{TensorType::kQ5_0, 4e-3}, Case{TensorType::kQ5_1, 3e-3}, Case{TensorType::kIQ4_NL, 1.5e-2}}) {
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> wf(rows * cols);
    for (auto& v : wf) v = nd(rng);
    std::vector<uint8_t> bytes(rows * *row_bytes(c.type, cols));
    const size_t rb = *row_bytes(c.type, cols);
    for (size_t r = 0; r < rows; ++r) ASSERT_TRUE(quantize_row(c.type, &wf[r * cols], &bytes[r * rb], cols).ok());
    auto w = Weight::pack({c.type, bytes.data(), rows, cols, 0});
    ASSERT_TRUE(w.ok());
    const auto x = make_x(n_tok, cols, 3);
    for (Isa isa : isas()) {
      ASSERT_TRUE(set_active_isa(isa).ok());
      std::vector<float> y(n_tok * rows);
      matmul(*w, x.data(), n_tok, y.data(), pool);
      double num = 0, den = 0;
      for (size_t t = 0; t < n_tok; ++t)
        for (size_t r = 0; r < rows; ++r) {
          double ref = 0;
          for (size_t k = 0; k < cols; ++k) ref += double(wf[r * cols + k]) * x[t * cols + k];
          num += (y[t * rows + r] - ref) * (y[t * rows + r] - ref);
          den += ref * ref;
        }
      EXPECT_LT(num / den, c.max_nmse) << static_cast<int>(c.type) << " " << isa_name(isa);
    }
  }
}

TEST(Matmul, RowRangesAndFusedOutputsMatchWholeMatmul) {
  IsaGuard guard;
  ThreadPool pool(3);
  const size_t cols = 256;
  const Mat a = make_mat(TensorType::kQ4_0, 50, cols, 1, /*pad=*/6);  // padded rows: stride > row
  const Mat b = make_mat(TensorType::kQ4_K, 20, cols, 2);
  const Mat c = make_mat(TensorType::kQ8_0, 33, cols, 3);
  auto wa = Weight::pack({a.type, a.bytes.data(), a.rows, cols, a.stride});
  auto wb = Weight::pack({b.type, b.bytes.data(), b.rows, cols, b.stride});
  auto wc = Weight::view({c.type, c.bytes.data(), c.rows, cols, c.stride});
  ASSERT_TRUE(wa.ok() && wb.ok() && wc.ok());
  for (Isa isa : isas()) {
    ASSERT_TRUE(set_active_isa(isa).ok());
    for (size_t n_tok : {1, 5, 11}) {
      const auto x = make_x(n_tok, cols, 9);
      std::vector<float> ya(n_tok * a.rows), yb(n_tok * b.rows), yc(n_tok * c.rows);
      matmul(*wa, x.data(), n_tok, ya.data(), pool);
      matmul(*wb, x.data(), n_tok, yb.data(), pool);
      matmul(*wc, x.data(), n_tok, yc.data(), pool);
      // Fused: a's rows [3, 41) and [41, 50) (a tensor-parallel split inside a group), all of
      // b, c's rows [16, 33), into one strided output buffer.
      const size_t stride = 38 + 9 + 20 + 17 + 5;
      std::vector<float> y(n_tok * stride, -777.0f);
      const MatmulOut outs[] = {
          {&*wa, y.data(), 3, 41, stride},
          {&*wa, y.data() + 38, 41, 50, stride},
          {&*wb, y.data() + 47, 0, 0, stride},
          {&*wc, y.data() + 67, 16, 33, stride},
      };
      matmul_multi(outs, x.data(), n_tok, pool);
      for (size_t t = 0; t < n_tok; ++t) {
        const float* row = y.data() + t * stride;
        for (size_t r = 3; r < 50; ++r) ASSERT_EQ(row[r - 3], ya[t * a.rows + r]) << "a r " << r;
        for (size_t r = 0; r < 20; ++r) ASSERT_EQ(row[47 + r], yb[t * b.rows + r]) << "b r " << r;
        for (size_t r = 16; r < 33; ++r) ASSERT_EQ(row[67 + r - 16], yc[t * c.rows + r]) << "c r " << r;
        for (size_t i = 84; i < stride; ++i) ASSERT_EQ(row[i], -777.0f) << "wrote past its range";
      }
    }
  }
}

TEST(Matmul, SmallestAndLongRowsMatchReference) {
  // One row (a packed group that is mostly padding), one block of columns; and rows as long
  // as the 1.1B model's ffn_down (5632 columns) to exercise long accumulations.
  IsaGuard guard;
  ThreadPool pool(2);
  for (TensorType type : kTypes) {
    const size_t min_cols = is_kquant(type) ? 256
                            : act_block(type) == 32                                                        ? 32
                                                                                                              : 1;
    for (auto [rows, cols] : {std::pair<size_t, size_t>{1, min_cols}, {20, 5632}}) {
      const Mat m = make_mat(type, rows, cols, 5);
      auto w = Weight::pack({type, m.bytes.data(), rows, cols, m.stride});
      ASSERT_TRUE(w.ok());
      for (Isa isa : isas()) {
        ASSERT_TRUE(set_active_isa(isa).ok());
        for (size_t n_tok : {1, 9}) {
          const auto x = make_x(n_tok, cols, 21);
          std::vector<float> y(n_tok * rows);
          matmul(*w, x.data(), n_tok, y.data(), pool);
          for (size_t t = 0; t < n_tok; ++t)
            for (size_t r = 0; r < rows; ++r) {
              const Bound b = reference(m, x, t, r);
              ASSERT_NEAR(y[t * rows + r], b.ref, b.tol) << "type " << static_cast<int>(type) << " cols " << cols
                                                         << " isa " << isa_name(isa) << " t " << t << " r " << r;
            }
        }
      }
    }
  }
}

TEST(Matmul, DeterministicAcrossThreadsAndBatching) {
  // A row's arithmetic does not depend on how rows are split between threads. For quantized
  // types it does not depend on how many tokens share a tile either (integer block sums are
  // exact; the float steps are the same), so prefill of n tokens equals n decodes bit for bit.
  // Float weights use a 4x4 register tile in prefill, summing in another order: close, not
  // identical.
  IsaGuard guard;
  ThreadPool pool1(1), pool2(2), pool3(3);
  const size_t rows = 300, cols = 2048, n_tok = 11;
  for (TensorType type : kTypes) {
    const Mat m = make_mat(type, rows, cols, 77);
    auto w = Weight::pack({type, m.bytes.data(), rows, cols, m.stride});
    ASSERT_TRUE(w.ok());
    const auto x = make_x(n_tok, cols, 78);
    for (Isa isa : isas()) {
      ASSERT_TRUE(set_active_isa(isa).ok());
      std::vector<float> y2(n_tok * rows), y3(n_tok * rows), y1(n_tok * rows);
      matmul(*w, x.data(), n_tok, y2.data(), pool2);
      matmul(*w, x.data(), n_tok, y3.data(), pool3);
      for (size_t t = 0; t < n_tok; ++t) matmul(*w, x.data() + t * cols, 1, y1.data() + t * rows, pool1);
      for (size_t i = 0; i < y1.size(); ++i) {
        ASSERT_EQ(y2[i], y3[i]) << "threads: type " << static_cast<int>(type) << " isa " << isa_name(isa) << " i " << i;
        const bool float_type = type == TensorType::kF32 || type == TensorType::kF16 || type == TensorType::kBF16;
        if (!float_type) {
          ASSERT_EQ(y2[i], y1[i]) << "batch vs decode: type " << static_cast<int>(type) << " isa " << isa_name(isa)
                                  << " i " << i;
        } else {
          ASSERT_NEAR(y2[i], y1[i], 1e-4f * (1.0f + std::fabs(y1[i]))) << "batch vs decode: type "
                                                                       << static_cast<int>(type) << " i " << i;
        }
      }
    }
  }
}

TEST(Matmul, RejectsBadWeights) {
  std::vector<uint8_t> bytes(1024);
  EXPECT_EQ(Weight::view({TensorType::kQ4_0, bytes.data(), 2, 33, 0}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Weight::pack({TensorType::kQ8_1, bytes.data(), 2, 256, 0}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Weight::pack({TensorType::kQ8_0, nullptr, 2, 32, 0}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Weight::pack({TensorType::kQ8_0, bytes.data(), 2, 64, 20}).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Weight::pack({TensorType::kQ8_0, bytes.data(), 0, 64, 0}).status().code(), ErrorCode::kInvalidArgument);
}

TEST(Matmul, IsaSelection) {
  IsaGuard guard;
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  EXPECT_TRUE(set_active_isa(Isa::kScalar).ok());
  EXPECT_EQ(active_isa(), Isa::kScalar);
  for (Isa i : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(i)) {
      EXPECT_EQ(set_active_isa(i).code(), ErrorCode::kUnavailable);
    }
  }
}

}  // namespace
}  // namespace lattice::engine
