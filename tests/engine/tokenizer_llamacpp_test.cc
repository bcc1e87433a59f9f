// Cross-check against llama.cpp itself (through node-llama-cpp, tests/node): token ids with
// and without special-token parsing, and detokenized text, must be identical on
//   - the generator's models of each tokenizer kind (the models later compared end to end),
//   - the unit tests' hand-built vocabularies (ties, byte fallback, user-defined and control
//     tokens, longest special match, ignore_merges, llama3's space clean-up), and
//   - a "dense" BPE vocabulary whose merges expose every pre-tokenizer split,
// for every pre-tokenizer we implement. All models go through one node process (starting it
// is the slow part). Skipped when node or node-llama-cpp is not installed (scripts/setup.sh
// installs them). Invalid UTF-8 cannot be handed to node-llama-cpp, whose strings are
// JavaScript strings; the unit tests cover it.
#include <gtest/gtest.h>

#include "../require.h"
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
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

std::vector<std::string> random_strings(const std::vector<std::string>& pieces, uint32_t seed, int count, int max_len) {
  std::vector<std::string> out;
  std::mt19937 rng(seed);
  for (int i = 0; i < count; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % static_cast<uint32_t>(max_len));
    for (int j = 0; j < n; ++j) t += pieces[rng() % pieces.size()];
    out.push_back(t);
  }
  return out;
}

std::vector<std::string> generated_model_strings() {
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
  for (auto& r : random_strings({"a", "b", "the", " ", "  ", "\n", "\t", "'s", "'re", ".", ",", "?", "0", "123",
                                 "\xE4\xBD\xA0", "\xC3\xA9", "e\xCC\x81", "\xF0\x9F\x91\x8D", "<|im_end|>", "<s>", "X",
                                 "-"},
                                17, 60, 25)) {
    s.push_back(std::move(r));
  }
  return s;
}

std::vector<std::string> hand_vocab_strings() {
  std::vector<std::string> s = {
      "hello", "hello world", " hello", "  hello  world ", "aaa", "aaaa", "world", "\xC3\xA9", "h\n", "hold", "lll",
      "llll", "he llo", "hell", "h<user>h", "<user>", "hello<user>", "<|ctl|>hello", "<|ctl|>", "<s>hello</s>",
      "<unk>", "<0x41>", "<|eot_id|>", "x<|eot_id|>y", "<|begin_of_text|>hello", "<|im_start|>x<|im_start|>",
      "hello<tool>hello", "<|repo_name|>", "he , l . d ' s 'm ?", "it's I'M 123456",
      "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8D e\xCC\x81", "\t\t\n\n  \r\n"};
  for (auto& r : random_strings({"h", "e", "l", "o", "w", "r", "d", "a", " ", "  ", "\n", "'s", "7", "<user>", "<tool>",
                                 "<|ctl|>", "<|eot_id|>", "<|im_start|>", "\xC3\xA9"},
                                23, 60, 20)) {
    s.push_back(std::move(r));
  }
  return s;
}

std::vector<std::string> dense_vocab_strings() {
  std::vector<std::string> s = {"ab XY 12 1212121 .,!' $a $$b a'b 'ab XY'S", "a\n\nb \n a  \n\n  b", "1.2,3!4'5$6",
                                 test_vocab::kDenseWideText};
  for (auto& r : random_strings({"a", "b", " ", "X", "Y", "1", "2", ".", ",", "!", "'", "$", "\n", "  ", "'s", "'LL",
                                 "\t", "\xE4\xBD\xA0", "\xC2\xA0", "\xF0\x9F\x91\x8D", "\xD9\xA3", "e\xCC\x81", "\r\n",
                                 "\xE3\x81\x82", "\xED\x95\x9C", "\xEF\xBC\x8C", "\xE3\x80\x80", "\xE2\x80\x8D", "\xC3\xA9",
                                 "\xCE\xB1", "\xD0\x96", "\xE3\x80\x82", "\xE2\x80\x9C", "\x01", "\xF0\xA0\x80\x80", "_", "+"},
                                31, 200, 30)) {
    s.push_back(std::move(r));
  }
  return s;
}

MakeModelOptions small_model(const char* arch, const char* tokenizer, uint32_t vocab) {
  MakeModelOptions o;
  o.arch = arch;
  o.tokenizer = tokenizer;
  o.vocab = vocab;
  o.dim = 64;
  o.layers = 1;
  o.heads = 2;
  o.type = "f32";
  o.threads = 1;
  return o;
}

// A generated model with its tokenizer metadata replaced by `spec`.
Status write_with_vocab(const TokenizerSpec& spec, const std::string& path) {
  auto plan = plan_model(small_model("llama", spec.model == "llama" ? "llama" : "gpt2",
                                     static_cast<uint32_t>(spec.tokens.size())));
  if (!plan.ok()) return plan.status();
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
  auto written = plan->writer.write(path, plan->fill);
  return written.ok() ? Status::Ok() : written.status();
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

struct Case {
  std::string name;
  std::vector<std::string> strings;
  std::optional<Tokenizer> tokenizer;  // ours, read back from the file
  nlohmann::json rows;                 // llama.cpp's
  std::string error;                   // set if this case could not be prepared
};

// Everything is prepared at once: models written, our tokenizers loaded, llama.cpp run.
class Oracle {
 public:
  static Oracle& get() {
    static Oracle o;
    return o;
  }
  bool skip = false;
  std::string message;
  std::map<std::string, Case> cases;

 private:
  Oracle() {
    const fs::path node_dir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";
    int status = 0;
    run("node --version >/dev/null 2>&1", status);
    if (status != 0 || !fs::exists(node_dir / "node_modules" / "node-llama-cpp")) {
      skip = true;
      message = "node or node-llama-cpp is not installed";
      return;
    }
    dir_ = fs::temp_directory_path() / ("lattice_tok_llamacpp_" + std::to_string(::getpid()));
    fs::create_directories(dir_);

    struct Generated {
      const char* name;
      const char* arch;
      const char* tokenizer;
      uint32_t vocab;
    };
    nlohmann::json manifest = nlohmann::json::array();
    std::vector<std::string> order;
    auto add = [&](const std::string& name, std::vector<std::string> strings, const Status& written) {
      Case& c = cases[name];
      c.name = name;
      c.strings = std::move(strings);
      const std::string path = (dir_ / (name + ".gguf")).string();
      if (!written.ok()) {
        c.error = written.to_string();
        return;
      }
      auto file = GgufFile::open(path);
      if (!file.ok()) {
        c.error = file.status().to_string();
        return;
      }
      auto t = tokenizer_from_gguf(**file);
      if (!t.ok()) {
        c.error = t.status().to_string();
        return;
      }
      c.tokenizer = std::move(t).value();
      manifest.push_back({{"model", path}, {"strings", c.strings}});
      order.push_back(name);
    };
    for (Generated g : {Generated{"generated_spm", "llama", "llama", 3000},
                        Generated{"generated_llama3", "llama", "gpt2", 4000},
                        Generated{"generated_qwen2", "qwen2", "gpt2", 4000}}) {
      const std::string path = (dir_ / (std::string(g.name) + ".gguf")).string();
      auto made = make_model(small_model(g.arch, g.tokenizer, g.vocab), path);
      add(g.name, generated_model_strings(), made.ok() ? Status::Ok() : made.status());
    }
    add("hand_spm", hand_vocab_strings(),
        write_with_vocab(test_vocab::hand_spm_spec(), (dir_ / "hand_spm.gguf").string()));
    for (const char* pre : {"llama-bpe", "qwen2", "gpt-2", "default", "starcoder", "deepseek-llm", "deepseek-coder",
                            "deepseek-v3", "kimi-k2"}) {
      const std::string hand = std::string("hand_bpe_") + pre;
      add(hand, hand_vocab_strings(), write_with_vocab(test_vocab::hand_bpe_spec(pre), (dir_ / (hand + ".gguf")).string()));
      const std::string dense = std::string("dense_bpe_") + pre;
      add(dense, dense_vocab_strings(),
          write_with_vocab(test_vocab::dense_bpe_spec(pre), (dir_ / (dense + ".gguf")).string()));
    }

    const std::string manifest_path = (dir_ / "manifest.json").string();
    std::ofstream(manifest_path) << manifest.dump();
    message = run("node " + (node_dir / "tokenizer_oracle.mjs").string() + " " + manifest_path + " 2>&1", status);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
      skip = true;
      return;
    }
    const nlohmann::json out = nlohmann::json::parse(message, nullptr, false);
    if (status == 0 && out.is_object() && out["results"].size() == order.size()) {
      for (size_t i = 0; i < order.size(); ++i) cases[order[i]].rows = out["results"][i]["rows"];
    }
  }
  ~Oracle() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

// One test for all vocabularies: ctest runs every test in its own process, and llama.cpp
// is started once per process.
TEST(TokenizerLlamaCpp, SameIdsAndTextAsLlamaCpp) {
  Oracle& o = Oracle::get();
  if (o.skip) LATTICE_SKIP_OR_FAIL("oracle", o.message);
  ASSERT_EQ(o.cases.size(), 22u);
  for (const auto& [name, c] : o.cases) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(c.error.empty()) << c.error;
    ASSERT_TRUE(c.tokenizer.has_value());
    ASSERT_EQ(c.rows.size(), c.strings.size()) << "llama.cpp said: " << o.message.substr(0, 2000);
    const Tokenizer& t = *c.tokenizer;
    for (size_t i = 0; i < c.strings.size(); ++i) {
      const std::string& s = c.strings[i];
      const std::vector<TokenId> plain = c.rows[i]["plain"].get<std::vector<TokenId>>();
      EXPECT_EQ(t.encode(s, {.add_special = false, .parse_special = false}), plain) << name << " plain: '" << s << "'";
      EXPECT_EQ(t.encode(s, {.add_special = false, .parse_special = true}),
                c.rows[i]["special"].get<std::vector<TokenId>>())
          << name << " special: '" << s << "'";
      EXPECT_EQ(t.decode(plain, {.remove_special = false}), c.rows[i]["detok"].get<std::string>())
          << name << " detok: '" << s << "'";
    }
  }
}

}  // namespace
}  // namespace lattice::engine
