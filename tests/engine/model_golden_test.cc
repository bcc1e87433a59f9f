// Golden greedy token sequences for small generated models, checked in at
// tests/engine/golden_greedy.json. A change in any of make-model, the GGUF reader, the
// kernels or the runtime that changes what these models say fails here. Regenerate only
// deliberately (and say why in the commit):
//   LATTICE_UPDATE_GOLDEN=1 build/tests/engine_tests --gtest_filter='ModelGolden.*'
// The f32 sequences are llama.cpp's too: GoldenLlamaCpp in model_llamacpp_test.cc runs
// llama.cpp on the same files and prompt and compares its tokens with this file.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lattice/engine/runtime/session.h"
#include "model_testlib.h"

namespace lattice::engine {
namespace {

using testing::kGoldenPath;

struct GoldenCase {
  std::string arch, type;
};
const GoldenCase kCases[] = {{"llama", "f32"}, {"llama", "f16"}, {"llama", "q8_0"}, {"llama", "q4_0"},
                             {"qwen2", "f32"}, {"qwen2", "q8_0"}, {"qwen3", "f32"}, {"qwen3", "q4_k_m"}};

std::vector<int32_t> greedy(const GoldenCase& c, std::vector<int32_t>& prompt) {
  auto m = testing::make_mem_model(testing::golden_model_options(c.arch, c.type));
  if (!m.model) return {};
  prompt = testing::golden_prompt();
  auto s = Session::create(*m.model, {.n_ctx = 64, .n_threads = 1, .n_batch = 8});
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE((*s)->prefill(prompt).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < testing::kGoldenSteps; ++i) {
    auto lg = (*s)->logits();
    const int32_t next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    out.push_back(next);
    EXPECT_TRUE((*s)->decode(next).ok());
  }
  return out;
}

TEST(ModelGolden, GreedySequencesMatchCheckedInGoldens) {
  nlohmann::json golden = nlohmann::json::object();
  const bool update = std::getenv("LATTICE_UPDATE_GOLDEN") != nullptr;
  if (!update) {
    std::ifstream in(kGoldenPath);
    ASSERT_TRUE(in.good()) << "missing " << kGoldenPath;
    golden = nlohmann::json::parse(in);
  }
  for (const auto& c : kCases) {
    const std::string key = c.arch + "/" + c.type;
    std::vector<int32_t> prompt;
    const auto got = greedy(c, prompt);
    if (update) {
      golden[key] = {{"prompt", prompt}, {"tokens", got}};
      continue;
    }
    ASSERT_TRUE(golden.contains(key)) << key;
    EXPECT_EQ(golden[key]["prompt"].get<std::vector<int32_t>>(), prompt) << key;
    EXPECT_EQ(golden[key]["tokens"].get<std::vector<int32_t>>(), got) << key;
  }
  if (update) {
    std::ofstream out(kGoldenPath);
    out << "{\n";
    size_t i = 0;
    for (auto it = golden.begin(); it != golden.end(); ++it, ++i)
      out << "  " << nlohmann::json(it.key()).dump() << ": " << it.value().dump() << (i + 1 < golden.size() ? "," : "")
          << "\n";
    out << "}\n";
    GTEST_SKIP() << "goldens rewritten: " << kGoldenPath;
  }
}

}  // namespace
}  // namespace lattice::engine
