// The engine against llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU binaries, driven by
// tests/node/llamacpp_oracle.mjs) on models written by make-model:
//   F32/F16 weights: the same 64 greedy tokens;
//   Q8_0, Q4_0, Q4_K_M: next-token logits over a teacher-forced sequence with cosine
//   similarity >= 0.999 at every position (compared as centered log-softmax, i.e. logits up
//   to the per-position constant llama.cpp's probabilities leave undetermined).
// Skipped only when tests/node/node_modules is absent (scripts/setup.sh installs it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/runtime/session.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;

const fs::path kNodeDir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";

struct Case {
  const char* arch;
  const char* type;
};

class LlamaCppCrossCheck : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!fs::exists(kNodeDir / "node_modules" / "node-llama-cpp"))
      GTEST_SKIP() << "tests/node/node_modules absent (run scripts/setup.sh)";
    dir_ = fs::temp_directory_path() / ("lattice-llamacpp-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  std::string make(const Case& c) {
    MakeModelOptions o;
    o.arch = c.arch;
    o.type = c.type;
    o.dim = 256;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.vocab = 512;
    o.seed = 11;
    o.threads = 1;
    if (std::string(c.arch) == "qwen3") o.head_dim = 128;
    const std::string path = (dir_ / (std::string(c.arch) + "-" + c.type + ".gguf")).string();
    auto r = make_model(o, path);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return path;
  }

  // Runs the oracle; the parsed JSON, or null after a test failure.
  nlohmann::json oracle(const std::string& mode, const std::string& model, const std::vector<int32_t>& toks, int n) {
    std::string list;
    for (int32_t t : toks) list += (list.empty() ? "" : ",") + std::to_string(t);
    const std::string cmd = "cd '" + kNodeDir.string() + "' && node llamacpp_oracle.mjs " + mode + " '" + model +
                            "' " + list + " " + std::to_string(n) + " 2>&1";
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[65536];
      size_t got;
      while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
      const int rc = ::pclose(p);
      EXPECT_EQ(rc, 0) << cmd << "\n" << out.substr(0, 2000);
    }
    const auto nl = out.rfind('{');
    if (nl == std::string::npos) {
      ADD_FAILURE() << "no JSON from the oracle: " << out.substr(0, 2000);
      return nullptr;
    }
    return nlohmann::json::parse(out.substr(nl), nullptr, false);
  }

  fs::path dir_;
};

std::vector<int32_t> prompt(uint32_t vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < 12; ++i) t.push_back(static_cast<int32_t>((i * 97 + 5) % vocab));
  return t;
}

class GreedyMatch : public LlamaCppCrossCheck {};
class LogitsMatch : public LlamaCppCrossCheck {};

TEST_P(GreedyMatch, SameGreedyTokensFor64Steps) {
  const Case c = GetParam();
  const std::string path = make(c);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto toks = prompt((*model)->hparams().n_vocab);
  constexpr int kSteps = 64;

  auto s = Session::create(**model, {.n_ctx = 128, .n_threads = 2, .n_batch = 64});
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->prefill(toks).ok());
  std::vector<int32_t> ours;
  for (int i = 0; i < kSteps; ++i) {
    auto lg = (*s)->logits();
    const int32_t next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    ours.push_back(next);
    ASSERT_TRUE((*s)->decode(next).ok());
  }
  const auto j = oracle("greedy", path, toks, kSteps);
  ASSERT_FALSE(j.is_null());
  const auto theirs = j.at("tokens").get<std::vector<int32_t>>();
  EXPECT_EQ(ours, theirs) << c.arch << " " << c.type;
}

TEST_P(LogitsMatch, TeacherForcedLogitsCosineAtLeast0999) {
  const Case c = GetParam();
  const std::string path = make(c);
  auto model = Model::load(path);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const uint32_t V = (*model)->hparams().n_vocab;
  std::vector<int32_t> toks = prompt(V);
  for (int i = 0; i < 20; ++i) toks.push_back(static_cast<int32_t>((i * 31 + 7) % V));

  auto s = Session::create(**model, {.n_ctx = 64, .n_threads = 2, .n_batch = 16});
  ASSERT_TRUE(s.ok());
  std::vector<float> ours;
  ASSERT_TRUE((*s)->prefill(toks, &ours).ok());
  const auto j = oracle("logprobs", path, toks, 0);
  ASSERT_FALSE(j.is_null());
  const auto& rows = j.at("logprobs");
  ASSERT_EQ(rows.size(), toks.size());
  double worst = 1.0;
  for (size_t p = 0; p < toks.size(); ++p) {
    // Center both rows (log-softmax differs from logits by a constant per row).
    std::vector<double> a(V), b(V);
    double ma = 0, mb = 0;
    size_t n = 0;
    for (uint32_t v = 0; v < V; ++v) {
      if (v >= rows[p].size() || rows[p][v].is_null()) continue;  // probability underflowed
      a[n] = rows[p][v].get<double>();
      b[n] = ours[p * V + v];
      ma += a[n];
      mb += b[n];
      ++n;
    }
    ASSERT_GT(n, V * 9 / 10) << "position " << p;
    ma /= n;
    mb /= n;
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; ++i) {
      ab += (a[i] - ma) * (b[i] - mb);
      aa += (a[i] - ma) * (a[i] - ma);
      bb += (b[i] - mb) * (b[i] - mb);
    }
    const double cos = ab / std::sqrt(aa * bb);
    worst = std::min(worst, cos);
    EXPECT_GE(cos, 0.999) << c.arch << " " << c.type << " position " << p;
  }
  RecordProperty("worst_cosine", std::to_string(worst));
  std::printf("[ info ] %s %s: worst cosine %.6f over %zu positions\n", c.arch, c.type, worst, toks.size());
}

INSTANTIATE_TEST_SUITE_P(Float, GreedyMatch,
                         ::testing::Values(Case{"llama", "f32"}, Case{"llama", "f16"}, Case{"qwen2", "f32"},
                                           Case{"qwen3", "f16"}),
                         [](const auto& info) { return std::string(info.param.arch) + "_" + info.param.type; });
INSTANTIATE_TEST_SUITE_P(Quantized, LogitsMatch,
                         ::testing::Values(Case{"llama", "q8_0"}, Case{"llama", "q4_0"}, Case{"llama", "q4_k_m"},
                                           Case{"qwen2", "q4_0"}, Case{"qwen3", "q4_k_m"}),
                         [](const auto& info) { return std::string(info.param.arch) + "_" + info.param.type; });

}  // namespace
}  // namespace lattice::engine
