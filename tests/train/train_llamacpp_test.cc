// A model trained by lattice train, loaded by llama.cpp (node-llama-cpp's prebuilt binaries,
// tests/node): its tokenizer splits text as ours does, and greedy decoding gives the same
// tokens as lattice's engine. Skipped only when the oracle is missing (LATTICE_REQUIRE=oracle
// makes that a failure).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../require.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/runtime/session.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "lattice/train/train.h"

namespace lattice::train {
namespace {

namespace fs = std::filesystem;
const fs::path kNodeDir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";

std::string run(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[65536];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
    EXPECT_EQ(::pclose(p), 0) << cmd << "\n" << out.substr(0, 2000);
  }
  return out;
}

nlohmann::json last_json(const std::string& out) {
  const auto at = out.rfind("\n{");
  return nlohmann::json::parse(at == std::string::npos ? out : out.substr(at + 1), nullptr, false);
}

TEST(TrainLlamaCpp, TrainedModelGivesTheSameTokensAndGreedyTextInLlamaCpp) {
  if (!fs::exists(kNodeDir / "node_modules" / "node-llama-cpp"))
    LATTICE_SKIP_OR_FAIL("oracle", "llama.cpp oracle missing: tests/node/node_modules absent (run scripts/setup.sh)");
  if (std::system("command -v node >/dev/null 2>&1") != 0)
    LATTICE_SKIP_OR_FAIL("oracle", "llama.cpp oracle missing: no node on PATH");
  const fs::path dir = fs::temp_directory_path() / ("lattice-train-llamacpp-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "corpus.txt");
    for (int i = 0; i < 40; ++i)
      f << "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
           "and darkness was upon the face of the deep.\nAnd God said, Let there be light: and there was light "
        << i % 7 << ".\n";
  }
  TrainOptions o;
  o.data = {(dir / "corpus.txt").string()};
  o.model = {.vocab = 320, .dim = 64, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 128};
  o.steps = 60;
  o.batch = 4;
  o.seq = 48;
  o.lr = 5e-3f;
  o.warmup = 5;
  o.threads = 2;
  o.out = (dir / "trained.gguf").string();
  SoloGroup solo;
  auto r = train(o, solo);
  ASSERT_TRUE(r.ok()) << r.status().to_string();

  auto file = engine::GgufFile::open(o.out);
  ASSERT_TRUE(file.ok());
  auto tok = engine::tokenizer_from_gguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::vector<std::string> strings = {"And God said, Let there be light", "the face of the deep.\n\nwaters 1234",
                                            "  unseen words: caf\xc3\xa9 zebra!"};
  nlohmann::json manifest = nlohmann::json::array({{{"model", o.out}, {"strings", strings}}});
  std::ofstream(dir / "manifest.json") << manifest.dump();
  const auto tj = last_json(run("cd '" + kNodeDir.string() + "' && node tokenizer_oracle.mjs '" +
                                (dir / "manifest.json").string() + "' 2>&1"));
  ASSERT_FALSE(tj.is_discarded());
  for (size_t i = 0; i < strings.size(); ++i) {
    const auto ours = tok->encode(strings[i], {.add_special = false});
    const auto theirs = tj["results"][0]["rows"][i]["plain"].get<std::vector<int32_t>>();
    EXPECT_EQ(std::vector<int32_t>(ours.begin(), ours.end()), theirs) << strings[i];
  }

  const auto prompt = tok->encode("And God said", {.add_special = false});
  auto model = engine::Model::load(o.out);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto s = engine::Session::create(**model, {.n_ctx = 128, .n_threads = 2, .n_batch = 64});
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE((*s)->prefill(std::vector<int32_t>(prompt.begin(), prompt.end())).ok());
  std::vector<int32_t> ours;
  for (int i = 0; i < 32; ++i) {
    auto lg = (*s)->logits();
    const int32_t next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    ours.push_back(next);
    ASSERT_TRUE((*s)->decode(next).ok());
  }
  std::string list;
  for (int32_t t : prompt) list += (list.empty() ? "" : ",") + std::to_string(t);
  const auto gj = last_json(run("cd '" + kNodeDir.string() + "' && node llamacpp_oracle.mjs greedy '" + o.out + "' " +
                                list + " 32 2>&1"));
  ASSERT_FALSE(gj.is_discarded());
  EXPECT_EQ(ours, gj.at("tokens").get<std::vector<int32_t>>());
  // The text is made of the corpus's words.
  const std::string text = tok->decode(ours);
  EXPECT_NE(text.find("the"), std::string::npos) << text;
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace lattice::train
