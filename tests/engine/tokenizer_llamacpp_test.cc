// Cross-check against llama.cpp itself (through node-llama-cpp, tests/node): the generator's
// models of each tokenizer kind, many strings, token ids with and without special-token
// parsing, and detokenization must all be identical. Skipped when node or node-llama-cpp is
// not installed (scripts/setup.sh installs them).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/tokenizer/from_gguf.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> test_strings() {
  std::vector<std::string> s = {
      "Hello world", " leading space", "  two spaces", "trailing  ", "I'm fine, you're OK. We'll see; they've it's",
      "I'M WE'LL", "1234567 89 2024-01-05 3.14159", "x = (a+b)*c; // comment", "line1\nline2\n\nline3\r\n\tindent",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x8C\xE4\xB8\xAD\xE6\x96\x87\xE3\x80\x82",
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBC\xD0\xB8\xD1\x80!",
      "emoji \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and \xF0\x9F\x8E\x89\xF0\x9F\x8E\x89", "e\xCC\x81 combining \xC3\xA9",
      "tabs\t\tand\xC2\xA0nbsp\xE3\x80\x80ideo", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "<s>[INST] hi [/INST]", "</s>",
      "<unk>", "don't won't can't", "   ", "\n", "a", "!!!???", "$100 & 50% off #deal @home", "a \xE2\x80\x94 b",
      "\xC2\xBD \xE2\x85\xA5 \xD9\xA3", "code: def f(x):\n    return x**2\n", "<0x41> byte token text",
      "he said , ok . ' s 're"};
  const std::vector<std::string> pieces = {"a", "b", "the", " ", "  ", "\n", "\t", "'s", "'re", ".", ",", "?", "0",
                                           "123", "\xE4\xBD\xA0", "\xC3\xA9", "e\xCC\x81", "\xF0\x9F\x91\x8D",
                                           "<|im_end|>", "<s>", "X", "-"};
  std::mt19937 rng(17);
  for (int i = 0; i < 60; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 25);
    for (int j = 0; j < n; ++j) t += pieces[rng() % pieces.size()];
    s.push_back(t);
  }
  return s;
}

std::string run(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    status = -1;
    return out;
  }
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  status = ::pclose(p);
  return out;
}

struct Model {
  const char* name;
  const char* arch;
  const char* tokenizer;
  uint32_t vocab;
};

class TokenizerLlamaCpp : public ::testing::TestWithParam<Model> {};

TEST_P(TokenizerLlamaCpp, SameIdsAndTextAsLlamaCpp) {
  const fs::path node_dir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";
  int status = 0;
  run("node --version >/dev/null 2>&1", status);
  if (status != 0 || !fs::exists(node_dir / "node_modules" / "node-llama-cpp")) {
    GTEST_SKIP() << "node or node-llama-cpp is not installed";
  }
  const Model m = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("lattice_tok_llamacpp_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  const std::string model_path = (dir / (std::string(m.name) + ".gguf")).string();
  MakeModelOptions o;
  o.arch = m.arch;
  o.tokenizer = m.tokenizer;
  o.vocab = m.vocab;
  o.dim = 64;
  o.layers = 1;
  o.heads = 2;
  o.type = "f32";
  o.threads = 1;
  ASSERT_TRUE(make_model(o, model_path).ok());
  auto file = GgufFile::open(model_path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto t = tokenizer_from_gguf(**file);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const std::vector<std::string> strings = test_strings();
  const std::string strings_path = (dir / "strings.json").string();
  std::ofstream(strings_path) << nlohmann::json(strings).dump();

  const std::string out = run("node " + (node_dir / "tokenizer_oracle.mjs").string() + " " + model_path + " " +
                                  strings_path + " 2>&1",
                              status);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) GTEST_SKIP() << out;
  ASSERT_EQ(status, 0) << out;
  const nlohmann::json rows = nlohmann::json::parse(out, nullptr, false)["rows"];
  ASSERT_EQ(rows.size(), strings.size()) << out;

  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string& s = strings[i];
    EXPECT_EQ(t->encode(s, {.add_special = false, .parse_special = false}), rows[i]["plain"].get<std::vector<TokenId>>())
        << m.name << " plain: '" << s << "'";
    EXPECT_EQ(t->encode(s, {.add_special = false, .parse_special = true}), rows[i]["special"].get<std::vector<TokenId>>())
        << m.name << " special: '" << s << "'";
    const std::vector<TokenId> plain = rows[i]["plain"].get<std::vector<TokenId>>();
    EXPECT_EQ(t->decode(plain, {.remove_special = false}), rows[i]["detok"].get<std::string>())
        << m.name << " detok: '" << s << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerLlamaCpp,
                         ::testing::Values(Model{"spm", "llama", "llama", 3000}, Model{"llama3", "llama", "gpt2", 4000},
                                           Model{"qwen2", "qwen2", "gpt2", 4000}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace lattice::engine
