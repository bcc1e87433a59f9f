#include "lattice/engine/sampler/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <set>
#include <vector>

namespace lattice::engine {
namespace {

SamplerParams plain(float temperature = 1.0f) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  return p;
}

// Logits whose softmax is exactly `probs`.
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

TEST(Sampler, GreedyTakesTheArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f));
  EXPECT_EQ(*s.sample(std::vector<float>{0.1f, 3.0f, -2.0f, 2.9f}), 1);
  EXPECT_EQ(*s.sample(std::vector<float>{1.0f, 5.0f, 5.0f, 5.0f}), 1);
  EXPECT_EQ(*s.sample(std::vector<float>{-INFINITY, -INFINITY, -1e30f}), 2);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 1.1f;
  Sampler s(p);
  // 2.0 / 1.1 = 1.82 < 1.9: the repeated token loses.
  s.accept(0);
  EXPECT_EQ(*s.sample(std::vector<float>{2.0f, 1.9f}), 1);
  // -1.0 * 1.1 = -1.1 < -1.05: a negative logit gets more negative.
  EXPECT_EQ(*s.sample(std::vector<float>{-1.0f, -1.05f}), 1);
  // Without the history the first wins again.
  s.reset();
  EXPECT_EQ(*s.sample(std::vector<float>{2.0f, 1.9f}), 0);
}

TEST(Sampler, PenaltyWindowForgetsOldTokens) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 2;
  Sampler s(p);
  s.accept(0);
  s.accept(5);
  s.accept(6);  // token 0 falls out of the window
  EXPECT_EQ(*s.sample(std::vector<float>{2.0f, 1.9f}), 0);
}

TEST(Sampler, FrequencyAndPresencePenalties) {
  SamplerParams p = plain(0.0f);
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s(p);
  s.accept(0);
  s.accept(0);
  // 3.0 - 2*0.5 - 0.25 = 1.75 < 2.0
  EXPECT_EQ(*s.sample(std::vector<float>{3.0f, 2.0f}), 1);
  // 3.0 - 1.25 = 1.75 > 1.7
  EXPECT_EQ(*s.sample(std::vector<float>{3.0f, 1.7f}), 0);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i) * 0.37f) * 3.0f;
  SamplerParams p;  // the defaults: top-k 40, top-p 0.95, min-p 0.05, temperature 0.8
  p.seed = 42;
  Sampler a(p), b(p);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 200; ++i) {
    ta.push_back(*a.sample(logits));
    tb.push_back(*b.sample(logits));
  }
  EXPECT_EQ(ta, tb);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> tc;
  for (int i = 0; i < 200; ++i) tc.push_back(*c.sample(logits));
  EXPECT_NE(ta, tc);
  a.reset();
  EXPECT_EQ(*a.sample(logits), ta[0]);
}

TEST(Sampler, TopKDrawsOnlyTheKBest) {
  std::vector<float> logits(150000, 0.0f);
  const std::set<int32_t> best = {7, 70000, 149999};
  for (int32_t id : best) logits[id] = 1.0f;
  logits[5] = 0.9f;  // fourth best: excluded by k = 3
  SamplerParams p = plain();
  p.top_k = 3;
  Sampler s(p);
  std::set<int32_t> seen;
  for (int i = 0; i < 300; ++i) seen.insert(*s.sample(logits));
  EXPECT_EQ(seen, best);
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingP) {
  const auto logits = logits_for({0.5, 0.3, 0.15, 0.05});
  SamplerParams p = plain();
  p.top_p = 0.75f;  // 0.5 < 0.75 <= 0.8: tokens 0 and 1
  Sampler s(p);
  std::set<int32_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(*s.sample(logits));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
  ASSERT_EQ(s.last_candidates().size(), 2u);
  EXPECT_NEAR(s.last_candidates()[0].second, 0.5 / 0.8, 1e-5);

  p.top_p = 0.85f;  // tokens 0, 1, 2
  Sampler s2(p);
  seen.clear();
  for (int i = 0; i < 500; ++i) seen.insert(*s2.sample(logits));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheBest) {
  const auto logits = logits_for({0.5, 0.3, 0.15, 0.05});
  SamplerParams p = plain();
  p.min_p = 0.2f;  // threshold 0.1: 0.05 goes
  Sampler s(p);
  std::set<int32_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(*s.sample(logits));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
  p.min_p = 0.7f;  // threshold 0.35: only token 0
  Sampler s2(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(*s2.sample(logits), 0);
}

// Pearson's chi-square statistic of observed counts against expected probabilities.
double chi_square(const std::vector<int>& counts, const std::vector<double>& probs, int n) {
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = probs[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
  }
  return chi;
}

TEST(Sampler, DrawsFollowTheDistribution) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  const auto logits = logits_for(probs);
  Sampler s(plain(1.0f));
  const int n = 20000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < n; ++i) ++counts[*s.sample(logits)];
  // 3 degrees of freedom: P(chi2 > 16.27) = 0.001. The seed is fixed, so this cannot flake;
  // a biased draw (e.g. an off-by-one in the cumulative search) lands far above.
  EXPECT_LT(chi_square(counts, probs, n), 16.27);
}

TEST(Sampler, TemperatureSharpensTheDistribution) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  const auto logits = logits_for(probs);
  // T = 0.5 squares the odds.
  std::vector<double> sharp;
  double z = 0;
  for (double p : probs) z += p * p;
  for (double p : probs) sharp.push_back(p * p / z);
  Sampler s(plain(0.5f));
  const int n = 20000;
  std::vector<int> counts(4, 0);
  for (int i = 0; i < n; ++i) ++counts[*s.sample(logits)];
  EXPECT_LT(chi_square(counts, sharp, n), 16.27);
  // And the same counts are far from the untempered distribution.
  EXPECT_GT(chi_square(counts, probs, n), 100.0);
  double total = 0;
  for (const auto& c : s.last_candidates()) total += c.second;
  EXPECT_NEAR(total, 1.0, 1e-5);
}

// llama.cpp's chain written the slow, obvious way: full sort, top-k, softmax, top-p, min-p,
// temperature. Returns (token, probability) highest first.
std::vector<std::pair<int32_t, double>> reference_chain(const std::vector<float>& logits, const SamplerParams& p) {
  std::vector<std::pair<int32_t, float>> c;
  for (size_t i = 0; i < logits.size(); ++i) c.push_back({static_cast<int32_t>(i), logits[i]});
  std::sort(c.begin(), c.end(), [](auto& a, auto& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size()) c.resize(p.top_k);
  if (p.top_p < 1.0f) {
    double z = 0;
    for (auto& x : c) z += std::exp(static_cast<double>(x.second - c[0].second));
    double cum = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      cum += std::exp(static_cast<double>(c[i].second - c[0].second)) / z;
      if (cum >= p.top_p) {
        c.resize(i + 1);
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const double pmax = 1.0;  // relative to the best
    std::vector<std::pair<int32_t, float>> kept;
    for (auto& x : c) {
      if (std::exp(static_cast<double>(x.second - c[0].second)) >= p.min_p * pmax * (1 - 1e-6)) kept.push_back(x);
    }
    c = kept;
  }
  std::vector<std::pair<int32_t, double>> out;
  double z = 0;
  for (auto& x : c) z += std::exp((x.second - c[0].second) / static_cast<double>(p.temperature));
  for (auto& x : c) out.push_back({x.first, std::exp((x.second - c[0].second) / static_cast<double>(p.temperature)) / z});
  return out;
}

TEST(Sampler, FilterChainMatchesAFullSortReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const std::vector<std::array<float, 4>> settings = {
      // top_k, top_p, min_p, temperature
      {40, 0.95f, 0.05f, 0.8f}, {0, 0.9f, 0.0f, 1.0f}, {0, 0.999f, 0.0f, 1.3f}, {10, 1.0f, 0.0f, 0.7f},
      {0, 1.0f, 0.1f, 1.0f},    {500, 0.5f, 0.0f, 1.0f}, {3, 0.2f, 0.9f, 2.0f}};
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> logits(3000);
    const float scale = trial % 2 ? 0.3f : 4.0f;  // flat and peaked distributions
    for (float& l : logits) l = nd(rng) * scale;
    for (const auto& st : settings) {
      SamplerParams p = plain(st[3]);
      p.top_k = static_cast<int32_t>(st[0]);
      p.top_p = st[1];
      p.min_p = st[2];
      Sampler s(p);
      ASSERT_TRUE(s.sample(logits).ok());
      const auto want = reference_chain(logits, p);
      const auto& got = s.last_candidates();
      ASSERT_EQ(got.size(), want.size()) << "trial " << trial << " top_k " << p.top_k << " top_p " << p.top_p;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].first, want[i].first);
        EXPECT_NEAR(got[i].second, want[i].second, 1e-5);
      }
    }
  }
}

TEST(Sampler, RejectsBadInput) {
  Sampler s(plain());
  EXPECT_EQ(s.sample({}).status().code(), ErrorCode::kInvalidArgument);
  SamplerParams p = plain();
  p.top_p = NAN;
  EXPECT_FALSE(p.validate().ok());
  p = plain();
  p.repeat_penalty = 0.0f;
  EXPECT_FALSE(p.validate().ok());
  EXPECT_TRUE(plain().validate().ok());
}

}  // namespace
TEST(Sampler, AReplayedSamplerContinuesExactlyWhereTheOriginalIs) {
  SamplerParams p = plain(0.9f);
  p.repeat_penalty = 1.3f;
  p.repeat_last_n = 8;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  auto logits = [&] {
    std::vector<float> l(50);
    for (float& x : l) x = dist(gen);
    return l;
  };
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < 40; ++i) steps.push_back(logits());
  Sampler a(p);
  std::vector<int32_t> taken;
  for (int i = 0; i < 20; ++i) {
    const int32_t t = *a.sample(steps[size_t(i)]);
    a.accept(t);
    taken.push_back(t);
  }
  EXPECT_EQ(a.draws(), 20u);
  // Rebuilt from the accepted tokens and the draw count (a cluster's recovery).
  Sampler b(p);
  for (int32_t t : taken) b.accept(t);
  b.skip_draws(a.draws());
  for (int i = 20; i < 40; ++i) {
    const int32_t ta = *a.sample(steps[size_t(i)]);
    const int32_t tb = *b.sample(steps[size_t(i)]);
    ASSERT_EQ(ta, tb) << "step " << i;
    a.accept(ta);
    b.accept(tb);
  }
  EXPECT_EQ(a.draws(), b.draws());
  Sampler greedy(plain(0.0f));
  (void)greedy.sample(steps[0]);
  EXPECT_EQ(greedy.draws(), 0u);  // greedy never draws
  a.reset();
  EXPECT_EQ(a.draws(), 0u);
}

}  // namespace lattice::engine
