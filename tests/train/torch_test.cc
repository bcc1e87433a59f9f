// lattice train's gradients against PyTorch's (Debian's python3-torch, float64) on the same
// weights and batch: relative error ||g - g_torch|| / ||g_torch|| at most 1e-4 for every tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/train/model.h"
#include "../require.h"

namespace lattice::train {
namespace {

namespace fs = std::filesystem;

bool have_torch() { return std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0; }

template <class T>
void write_raw(const fs::path& p, const std::vector<T>& v) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
}

void compare_with_torch(const LlamaConfig& cfg, size_t batch, size_t seq) {
  if (!have_torch()) LATTICE_SKIP_OR_FAIL("torch", "/usr/bin/python3 cannot import torch (apt-get install python3-torch)");
  const fs::path dir = fs::path(::testing::TempDir()) / ("lattice_torch_" + std::to_string(::getpid()) + "_" +
                                                         std::to_string(seq));
  fs::create_directories(dir);
  std::vector<float> params(param_count(cfg));
  init_params(cfg, 5, params);
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> jitter(0.8f, 1.2f);
  nlohmann::json tensors = nlohmann::json::array();
  for (const ParamTensor& t : param_table(cfg)) {
    tensors.push_back({t.name, t.rows, t.cols});
    if (!t.is_matrix())
      for (size_t i = 0; i < t.size(); ++i) params[t.offset + i] = jitter(rng);
  }
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(cfg.vocab) - 1);
  std::vector<int32_t> toks(2 * batch * seq);
  for (int32_t& t : toks) t = tok(rng);
  const nlohmann::json config = {{"vocab", cfg.vocab}, {"dim", cfg.dim}, {"layers", cfg.layers},
                                 {"heads", cfg.heads}, {"kv_heads", cfg.n_kv_heads()}, {"ffn", cfg.ffn},
                                 {"rms_eps", cfg.rms_eps}, {"rope_theta", cfg.rope_theta}, {"batch", batch},
                                 {"seq", seq}, {"tensors", tensors}};
  std::ofstream(dir / "config.json") << config.dump();
  write_raw(dir / "params.f32", params);
  write_raw(dir / "tokens.i32", toks);
  const std::string cmd = "/usr/bin/python3 " LATTICE_SOURCE_DIR "/tests/train/torch_grads.py " + dir.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  Model model(cfg);
  engine::ThreadPool pool(2);
  std::vector<float> grads(model.n_params(), 0.0f);
  const std::span<const int32_t> all(toks);
  const double sum = model.forward_backward(params, grads, all.first(batch * seq), all.subspan(batch * seq), batch,
                                            seq, 1.0f / static_cast<float>(batch * seq), pool);
  double torch_loss = 0;
  std::ifstream(dir / "loss.txt") >> torch_loss;
  EXPECT_NEAR(sum / (batch * seq), torch_loss, 1e-5 * torch_loss);
  std::vector<double> want(model.n_params());
  std::ifstream(dir / "grads.f64", std::ios::binary)
      .read(reinterpret_cast<char*>(want.data()), static_cast<std::streamsize>(want.size() * sizeof(double)));
  for (const ParamTensor& t : model.tensors()) {
    double diff = 0, norm = 0;
    for (size_t i = t.offset; i < t.offset + t.size(); ++i) {
      diff += (grads[i] - want[i]) * (grads[i] - want[i]);
      norm += want[i] * want[i];
    }
    const double rel = std::sqrt(diff / norm);
    EXPECT_LE(rel, 1e-4) << t.name;
    ::testing::Test::RecordProperty(t.name, std::to_string(rel));
  }
  fs::remove_all(dir);
}

TEST(TrainTorchProcess, GradientsMatchPytorchPerTensor) {
  compare_with_torch({.vocab = 97, .dim = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 96}, 3, 80);
}

TEST(TrainTorchProcess, GradientsMatchPytorchAtTheBenchmarkWidth) {
  compare_with_torch({.vocab = 512, .dim = 256, .layers = 1, .heads = 8, .kv_heads = 8, .ffn = 768}, 2, 128);
}

}  // namespace
}  // namespace lattice::train
