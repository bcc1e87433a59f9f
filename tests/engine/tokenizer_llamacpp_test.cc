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
#include "tokenizer_testlib.h"

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

// Runs the oracle on a model file; false (with *skip set) when llama.cpp is unavailable.
struct OracleRows {
  bool skip = false;
  std::string message;
  nlohmann::json rows;
};

OracleRows run_oracle(const std::string& model_path, const std::vector<std::string>& strings, const fs::path& dir) {
  OracleRows r;
  const fs::path node_dir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";
  int status = 0;
  run("node --version >/dev/null 2>&1", status);
  if (status != 0 || !fs::exists(node_dir / "node_modules" / "node-llama-cpp")) {
    r.skip = true;
    r.message = "node or node-llama-cpp is not installed";
    return r;
  }
  const std::string strings_path = (dir / "strings.json").string();
  std::ofstream(strings_path) << nlohmann::json(strings).dump();
  r.message = run("node " + (node_dir / "tokenizer_oracle.mjs").string() + " " + model_path + " " + strings_path +
                      " 2>&1",
                  status);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
    r.skip = true;
    return r;
  }
  if (status == 0) r.rows = nlohmann::json::parse(r.message, nullptr, false)["rows"];
  return r;
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("lattice_tok_" + tag + "_" + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

void expect_same(const Tokenizer& t, const std::vector<std::string>& strings, const nlohmann::json& rows,
                 const std::string& name) {
  ASSERT_EQ(rows.size(), strings.size());
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string& s = strings[i];
    const std::vector<TokenId> plain = rows[i]["plain"].get<std::vector<TokenId>>();
    EXPECT_EQ(t.encode(s, {.add_special = false, .parse_special = false}), plain) << name << " plain: '" << s << "'";
    EXPECT_EQ(t.encode(s, {.add_special = false, .parse_special = true}), rows[i]["special"].get<std::vector<TokenId>>())
        << name << " special: '" << s << "'";
    EXPECT_EQ(t.decode(plain, {.remove_special = false}), rows[i]["detok"].get<std::string>())
        << name << " detok: '" << s << "'";
  }
}

class TokenizerLlamaCpp : public ::testing::TestWithParam<Model> {};

TEST_P(TokenizerLlamaCpp, SameIdsAndTextAsLlamaCpp) {
  const Model m = GetParam();
  TempDir dir(m.name);
  const std::string model_path = (dir.path / (std::string(m.name) + ".gguf")).string();
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
  const OracleRows r = run_oracle(model_path, strings, dir.path);
  if (r.skip) GTEST_SKIP() << r.message;
  ASSERT_FALSE(r.rows.is_null()) << r.message;
  expect_same(*t, strings, r.rows, m.name);
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerLlamaCpp,
                         ::testing::Values(Model{"spm", "llama", "llama", 3000}, Model{"llama3", "llama", "gpt2", 4000},
                                           Model{"qwen2", "qwen2", "gpt2", 4000}),
                         [](const auto& info) { return std::string(info.param.name); });

// The hand-built vocabularies of the unit tests (ties, byte fallback, user-defined and
// control tokens, longest special match, ignore_merges, clean-up of spaces), written into a
// generated model in place of its own vocabulary. (Invalid UTF-8 cannot be handed to
// node-llama-cpp, whose strings are JavaScript strings; it is covered by the unit tests.)
struct HandVocab {
  const char* name;
  bool spm;
  const char* pre;
};

class TokenizerLlamaCppHand : public ::testing::TestWithParam<HandVocab> {};

TEST_P(TokenizerLlamaCppHand, SameIdsAndTextAsLlamaCpp) {
  const HandVocab h = GetParam();
  const TokenizerSpec spec = h.spm ? test_vocab::hand_spm_spec() : test_vocab::hand_bpe_spec(h.pre);
  MakeModelOptions o;
  o.arch = "llama";
  o.tokenizer = h.spm ? "llama" : "gpt2";
  o.vocab = static_cast<uint32_t>(spec.tokens.size());
  o.dim = 64;
  o.layers = 1;
  o.heads = 2;
  o.type = "f32";
  o.threads = 1;
  auto plan = plan_model(o);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  Metadata& md = plan->writer.metadata();
  for (const char* k : {"tokenizer.ggml.pre", "tokenizer.ggml.scores", "tokenizer.ggml.merges",
                        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token",
                        "tokenizer.ggml.add_eos_token", "tokenizer.chat_template"}) {
    md.erase(k);
  }
  md.set("tokenizer.ggml.model", spec.model);
  if (!spec.pre.empty()) md.set("tokenizer.ggml.pre", spec.pre);
  md.set("tokenizer.ggml.tokens", spec.tokens);
  if (!spec.scores.empty()) md.set("tokenizer.ggml.scores", spec.scores);
  md.set("tokenizer.ggml.token_type", spec.token_types);
  if (!spec.merges.empty()) md.set("tokenizer.ggml.merges", spec.merges);
  if (spec.bos_id) md.set("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*spec.bos_id));
  if (spec.eos_id) md.set("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*spec.eos_id));

  TempDir dir(h.name);
  const std::string model_path = (dir.path / "hand.gguf").string();
  ASSERT_TRUE(plan->writer.write(model_path, plan->fill).ok());
  auto file = GgufFile::open(model_path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto t = tokenizer_from_gguf(**file);
  ASSERT_TRUE(t.ok()) << t.status().to_string();

  std::vector<std::string> strings = {
      "hello", "hello world", " hello", "  hello  world ", "aaa", "aaaa", "world", "\xC3\xA9", "h\n", "hold", "lll", "llll",
      "he llo", "hell", "h<user>h", "<user>", "hello<user>", "<|ctl|>hello", "<|ctl|>", "<s>hello</s>", "<unk>",
      "<0x41>", "<|eot_id|>", "x<|eot_id|>y", "<|begin_of_text|>hello", "<|im_start|>x<|im_start|>",
      "hello<tool>hello", "<|repo_name|>", "he , l . d ' s 'm ?", "it's I'M 123456",
      "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8D e\xCC\x81", "\t\t\n\n  \r\n"};
  const std::vector<std::string> pieces = {"h", "e", "l", "o", "w", "r", "d", "a", " ", "  ", "\n", "'s", "7",
                                           "<user>", "<tool>", "<|ctl|>", "<|eot_id|>", "<|im_start|>", "\xC3\xA9"};
  std::mt19937 rng(23);
  for (int i = 0; i < 60; ++i) {
    std::string x;
    const int n = 1 + static_cast<int>(rng() % 20);
    for (int j = 0; j < n; ++j) x += pieces[rng() % pieces.size()];
    strings.push_back(x);
  }
  const OracleRows r = run_oracle(model_path, strings, dir.path);
  if (r.skip) GTEST_SKIP() << r.message;
  ASSERT_FALSE(r.rows.is_null()) << r.message;
  expect_same(*t, strings, r.rows, h.name);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, TokenizerLlamaCppHand,
                         ::testing::Values(HandVocab{"spm", true, ""}, HandVocab{"llama_bpe", false, "llama-bpe"},
                                           HandVocab{"qwen2", false, "qwen2"}, HandVocab{"gpt2", false, "gpt-2"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace lattice::engine
