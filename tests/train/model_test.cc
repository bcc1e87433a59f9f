#include "lattice/train/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace lattice::train {
namespace {

struct Fixture {
  LlamaConfig cfg;
  size_t batch, seq;
  std::vector<float> params;
  std::vector<int32_t> inputs, targets;
};

Fixture make(size_t seq) {
  Fixture f;
  f.cfg = {.vocab = 37, .dim = 16, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 24};
  f.batch = 2;
  f.seq = seq;
  f.params.resize(param_count(f.cfg));
  init_params(f.cfg, 7, f.params);
  // Norm weights away from 1 so their gradients are exercised.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> jitter(0.7f, 1.3f);
  for (const ParamTensor& t : param_table(f.cfg))
    if (!t.is_matrix())
      for (size_t i = 0; i < t.size(); ++i) f.params[t.offset + i] = jitter(rng);
  std::uniform_int_distribution<int32_t> tok(0, 36);
  for (size_t i = 0; i < f.batch * f.seq; ++i) {
    f.inputs.push_back(tok(rng));
    f.targets.push_back(tok(rng));
  }
  return f;
}

// Directional finite differences per tensor: (L(p + e u) - L(p - e u)) / 2e against g . u,
// with u a random direction over the whole tensor (better signal than one coordinate in f32).
void check_against_finite_differences(size_t seq) {
  Fixture f = make(seq);
  Model model(f.cfg);
  engine::ThreadPool pool(2);
  const float scale = 1.0f / static_cast<float>(f.batch * f.seq);
  std::vector<float> grads(model.n_params(), 0.0f);
  model.forward_backward(f.params, grads, f.inputs, f.targets, f.batch, f.seq, scale, pool);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (const ParamTensor& t : model.tensors()) {
    std::vector<float> u(t.size());
    double gu = 0;
    for (size_t i = 0; i < t.size(); ++i) {
      u[i] = nd(rng);
      gu += static_cast<double>(u[i]) * grads[t.offset + i];
    }
    const float eps = 1e-2f / std::sqrt(static_cast<float>(t.size()));
    auto loss_at = [&](float sign) {
      std::vector<float> p = f.params;
      for (size_t i = 0; i < t.size(); ++i) p[t.offset + i] += sign * eps * u[i];
      return model.loss(p, f.inputs, f.targets, f.batch, f.seq, pool) * scale;
    };
    const double fd = (loss_at(1) - loss_at(-1)) / (2.0 * eps);
    EXPECT_NEAR(fd, gu, 2e-2 * std::abs(gu) + 2e-4) << t.name << " seq " << seq;
  }
}

TEST(TrainModel, GradientsMatchFiniteDifferences) { check_against_finite_differences(9); }

// Past one causal block (64 rows): the blocked attention paths.
TEST(TrainModel, GradientsMatchFiniteDifferencesOverSeveralAttentionBlocks) { check_against_finite_differences(70); }

TEST(TrainModel, InitialLossIsNearLogVocabAndThreadCountDoesNotChangeBits) {
  Fixture f = make(33);
  Model model(f.cfg);
  engine::ThreadPool p1(1), p2(2);
  std::vector<float> g1(model.n_params(), 0.0f), g2(model.n_params(), 0.0f);
  const double l1 = model.forward_backward(f.params, g1, f.inputs, f.targets, f.batch, f.seq, 1.0f, p1);
  const double l2 = model.forward_backward(f.params, g2, f.inputs, f.targets, f.batch, f.seq, 1.0f, p2);
  EXPECT_EQ(l1, l2);
  EXPECT_EQ(g1, g2);
  const double mean = l1 / (f.batch * f.seq);
  EXPECT_GT(mean, 0.5 * std::log(37.0));
  EXPECT_LT(mean, 3.0 * std::log(37.0));
}

}  // namespace
}  // namespace lattice::train
