#include "lattice/train/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace lattice::train {
namespace {

struct Case {
  bool ta, tb;
  size_t m, n, k;
};

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The scalar reference in double: the oracle.
std::vector<double> reference(const Case& c, const std::vector<float>& a, const std::vector<float>& b,
                              const std::vector<float>& c0, bool acc) {
  const size_t lda = c.ta ? c.m : c.k, ldb = c.tb ? c.k : c.n;
  std::vector<double> out(c.m * c.n);
  for (size_t i = 0; i < c.m; ++i)
    for (size_t j = 0; j < c.n; ++j) {
      double s = acc ? c0[i * c.n + j] : 0.0;
      for (size_t p = 0; p < c.k; ++p) {
        const double av = c.ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = c.tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
      }
      out[i * c.n + j] = s;
    }
  return out;
}

TEST(Gemm, MatchesReferenceForEveryTransposeAndOddShapes) {
  engine::ThreadPool pool(2);
  const Case cases[] = {{false, false, 1, 1, 1},    {false, true, 7, 33, 5},     {true, false, 13, 17, 300},
                        {true, true, 50, 70, 9},     {false, true, 97, 65, 257},  {false, false, 200, 31, 513},
                        {true, false, 25, 2100, 40}, {false, true, 3, 3, 0}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (bool acc : {false, true}) {
      const auto a = random_vec(c.m * c.k, seed++), b = random_vec(c.k * c.n, seed++);
      const auto c0 = random_vec(c.m * c.n, seed++);
      const auto want = reference(c, a, b, c0, acc);
      for (engine::ThreadPool* p : {static_cast<engine::ThreadPool*>(nullptr), &pool}) {
        std::vector<float> got = c0;
        gemm({c.ta, c.tb, c.m, c.n, c.k, a.data(), c.ta ? c.m : c.k, b.data(), c.tb ? c.k : c.n, got.data(), c.n, acc},
             p);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-4 * std::sqrt(double(c.k) + 1) + 1e-5)
              << "m " << c.m << " n " << c.n << " k " << c.k << " ta " << c.ta << " tb " << c.tb << " at " << i;
      }
    }
  }
}

TEST(Gemm, SameBitsWhateverTheThreadCount) {
  const size_t m = 300, n = 129, k = 700;
  const auto a = random_vec(m * k, 5), b = random_vec(n * k, 6);
  std::vector<float> one(m * n), two(m * n);
  engine::ThreadPool p1(1), p2(2);
  gemm({false, true, m, n, k, a.data(), k, b.data(), k, one.data(), n, false}, &p1);
  gemm({false, true, m, n, k, a.data(), k, b.data(), k, two.data(), n, false}, &p2);
  EXPECT_EQ(one, two);
}

}  // namespace
}  // namespace lattice::train
