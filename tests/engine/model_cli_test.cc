// `lattice run` and `lattice bench engine` end to end on a tiny generated model: JSON
// fields, greedy tokens equal to the Session's, exit code 2 on bad input. Skipped when the
// lattice binary has not been built next to the tests.
#include <gtest/gtest.h>

#include <chrono>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "parallel_testlib.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;

using testing::Ran;
Ran run(const std::string& args, const std::string& env = "") { return testing::run_lattice(args, false, env); }

class EngineCliProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fs::path(LATTICE_BINARY_DIR) / "lattice")) GTEST_SKIP() << "lattice binary not built";
    dir_ = fs::temp_directory_path() / ("lattice-cli-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "tiny.gguf").string();
    MakeModelOptions o;
    o.dim = 64;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.vocab = 300;
    o.type = "q8_0";
    o.threads = 1;
    ASSERT_TRUE(make_model(o, model_).ok());
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  fs::path dir_;
  std::string model_;
};

TEST_F(EngineCliProcess, RunJsonGivesTheSessionsGreedyTokens) {
  const Ran r = run("run -m " + model_ + " -p 'hello world' -n 12 --temp 0 --ignore-eos -t 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"tokens", "text", "prefill_tok_s", "decode_tok_s", "n_prompt", "n_gen"})
    EXPECT_TRUE(j.contains(k)) << k;
  const auto tokens = j["tokens"].get<std::vector<int32_t>>();
  EXPECT_EQ(tokens.size(), 12u);
  EXPECT_EQ(j["n_gen"].get<int>(), 12);
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0.0);

  auto model = Model::load(model_);
  ASSERT_TRUE(model.ok());
  auto tok = tokenizer_from_gguf((*model)->file());
  ASSERT_TRUE(tok.ok());
  auto s = Session::create(**model, {.n_ctx = 64, .n_threads = 1});
  ASSERT_TRUE(s.ok());
  GenerateOptions go;
  go.prompt = "hello world";
  go.n_predict = 12;
  go.stop_at_eog = false;
  go.sampler.temperature = 0;
  auto g = generate(**s, *tok, go);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->tokens, tokens);
  EXPECT_EQ(j["n_prompt"].get<size_t>(), g->prompt_tokens.size());
  EXPECT_EQ(g->n_decode_steps, 11u);  // the last token needs no forward pass
}

TEST_F(EngineCliProcess, BadInputExitsWith2) {
  EXPECT_EQ(run("run -m " + (dir_ / "missing.gguf").string() + " -p hi").exit_code, 2);
  EXPECT_EQ(run("run -m " + model_ + " -p hi -n -1").exit_code, 2);
  EXPECT_EQ(run("run -m " + model_ + " -p hi --top-p -1").exit_code, 2);
  EXPECT_EQ(run("run -m " + model_ + " -p hi --top-p 2").exit_code, 2);
  EXPECT_EQ(run("run -m " + model_ + " -p hi --temp -1").exit_code, 2);
  EXPECT_EQ(run("run -m " + model_ + " -p hi --min-p 1.5").exit_code, 2);
  EXPECT_EQ(run("run -m " + model_ + " -p hi --inject-fault 1@2").exit_code, 2);  // one node: no rank to lose
  EXPECT_EQ(run("bench engine -m " + model_ + " --batch 0").exit_code, 2);
  EXPECT_EQ(run("bench engine -m " + model_ + " -p 8,x").exit_code, 2);
  EXPECT_EQ(run("bench engine -m " + model_ + " -t 0").exit_code, 2);
  // A file that is not a GGUF.
  const std::string junk = (dir_ / "junk.gguf").string();
  FILE* f = std::fopen(junk.c_str(), "wb");
  std::fputs("not a model at all", f);
  std::fclose(f);
  EXPECT_EQ(run("run -m " + junk + " -p hi").exit_code, 2);
}

// Checked before any rank starts: the run ends at once with the usage error, nothing launched.
TEST_F(EngineCliProcess, DistributedRunRefusesBadOptionsBeforeStartingRanks) {
  for (const std::string bad : {"--inject-fault x", "--inject-fault 5@2", "--temp -1", "--top-p 2", "--split 1,2,3",
                                "--parallel zz"}) {
    const auto t0 = std::chrono::steady_clock::now();
    const Ran r = run("run -m " + model_ + " -p hi -n 2 --nodes 2 " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << bad;
  }
}

TEST_F(EngineCliProcess, TextRunShowsThePromptThenTheText) {
  const Ran r = run("run -m " + model_ + " -p 'hello world' -n 6 --temp 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("hello world", 0), 0u) << r.out;
  EXPECT_GT(r.out.size(), std::string("hello world").size());
}

TEST_F(EngineCliProcess, BenchEngineBatchReportsAggregateDecodeRows) {
  const Ran r = run("bench engine -m " + model_ + " -p 8 -n 4 --batch 1,4 -t 1 -r 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 3u);  // pp8, tg4@b1, tg4@b4
  EXPECT_EQ(rows[1]["test"], "tg4@b1");
  EXPECT_EQ(rows[2]["test"], "tg4@b4");
  EXPECT_EQ(rows[2]["batch"].get<int>(), 4);
  EXPECT_GT(rows[2]["decode_tok_s"].get<double>(), 0.0);
}

TEST_F(EngineCliProcess, BenchEngineJsonHasOneRowPerThreadAndTest) {
  const Ran r = run("bench engine -m " + model_ + " -p 8,16 -n 4 -t 1,2 -r 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto rows = nlohmann::json::parse(r.out);
  ASSERT_EQ(rows.size(), 6u);  // {pp8, pp16, tg4} x {1, 2} threads
  for (const auto& row : rows) {
    for (const char* k : {"threads", "prefill_tok_s", "decode_tok_s", "prefill_tok_s_sd", "decode_tok_s_sd",
                          "n_prompt", "n_gen", "commit", "build_flags", "isa"})
      EXPECT_TRUE(row.contains(k)) << k;
    if (row["n_gen"].get<int>() > 0) {
      EXPECT_GT(row["decode_tok_s"].get<double>(), 0.0);
    } else {
      EXPECT_GT(row["prefill_tok_s"].get<double>(), 0.0);
    }
  }
  EXPECT_EQ(rows[0]["threads"].get<int>(), 1);
  EXPECT_EQ(rows[5]["threads"].get<int>(), 2);
}


// make-model as a user runs it: the file it prints is one the engine loads with the shape and
// weight type asked for; bad flags exit 2 and leave no file.
TEST_F(EngineCliProcess, MakeModelWritesAFileTheEngineLoadsAndRefusesBadFlags) {
  const std::string out = (dir_ / "made.gguf").string();
  const Ran r = run("make-model -o " + out + " --arch qwen3 --dim 64 --layers 3 --heads 4 --kv-heads 2 --ffn 96 " +
                    "--vocab 300 --type q4_0 --seed 7");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, out + "\n");
  auto m = Model::load(out);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->hparams().n_layer, 3u);
  EXPECT_EQ((*m)->hparams().n_embd, 64u);
  EXPECT_EQ((*m)->type_name().rfind("Q4_0", 0), 0u) << (*m)->type_name();  // norms stay f32: "Q4_0 mix"
  for (const std::string bad : {"--dim 0", "--type q9_9", "--arch nope", "--layers -1", "--heads 3"}) {
    const std::string path = (dir_ / "bad.gguf").string();
    EXPECT_NE(run("make-model -o " + path + " --dim 64 --layers 2 --heads 4 --vocab 300 " + bad).exit_code, 0) << bad;
    EXPECT_FALSE(fs::exists(path)) << bad << ": a refused make-model left a file";
  }
}

// plan end to end: local nodes split the weights (each rank holds less than the model, the
// ranks together at least all of it), pp asks for stages, and a hostfile whose hosts are too
// small says the model does not fit and by how much.
TEST_F(EngineCliProcess, PlanPlacesTheModelOverNodesAndHostfiles) {
  const Ran tp = run("plan -m " + model_ + " --nodes 2 --json");
  ASSERT_EQ(tp.exit_code, 0) << tp.out;
  const auto j = nlohmann::json::parse(tp.out);
  EXPECT_TRUE(j.at("fits").get<bool>());
  ASSERT_EQ(j.at("nodes").size(), 2u);
  const auto model_bytes = j.at("model_bytes").get<uint64_t>();
  EXPECT_GT(model_bytes, 0u);
  EXPECT_LE(model_bytes, fs::file_size(model_));
  uint64_t sum = 0;
  for (const auto& n : j.at("nodes")) {
    const auto w = n.at("weight_bytes").get<uint64_t>();
    EXPECT_LT(w, model_bytes);
    sum += w;
  }
  // Every weight is placed once or more, except the embedding table, which is read a row at a
  // time (as ParallelPlan.BytesAddUpAndTooLittleMemoryIsRefused states for the library).
  auto file = GgufFile::open(model_);
  ASSERT_TRUE(file.ok());
  const uint64_t emb = (*file)->find_tensor("token_embd.weight")->n_bytes;
  EXPECT_GE(sum, (model_bytes - emb) * 98 / 100) << "the ranks together hold less than the model";

  const Ran pp = run("plan -m " + model_ + " --nodes 2 --parallel pp --json");
  ASSERT_EQ(pp.exit_code, 0) << pp.out;
  EXPECT_EQ(nlohmann::json::parse(pp.out).at("pp").get<int>(), 2);

  const std::string hosts = (dir_ / "small.json").string();
  FILE* f = std::fopen(hosts.c_str(), "w");
  std::fputs(R"({"version": 1, "hosts": [{"name": "a", "address": "10.0.0.1:7070", "memory_gb": 0.0001},
                 {"name": "b", "address": "10.0.0.2:7070", "memory_gb": 0.0001}]})",
             f);
  std::fclose(f);
  const Ran small = run("plan -m " + model_ + " --hostfile " + hosts + " --json");
  const auto s = nlohmann::json::parse(small.out, nullptr, false);
  ASSERT_FALSE(s.is_discarded()) << small.out;
  EXPECT_FALSE(s.at("fits").get<bool>()) << small.out;
  EXPECT_GT(s.at("missing_bytes").get<uint64_t>(), 0u);
  EXPECT_EQ(run("plan -m " + model_ + " --parallel zz").exit_code, 2);
  EXPECT_NE(run("plan -m " + (dir_ / "missing.gguf").string()).exit_code, 0);
}

// The README's first command: `run --demo` runs the embedded model lattice train made from the
// King James Bible on 2 ranks, and the greedy text is made of the corpus's words.
TEST_F(EngineCliProcess, DemoWritesEnglish) {
  const std::string cache = (dir_ / "cache").string();
  const Ran r = run("run --demo -n 24 --temp 0 --json", "XDG_CACHE_HOME=" + cache);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const std::string text = j.at("text").get<std::string>();
  int words = 0;
  for (const char* w : {" unto ", " the ", "LORD", " and ", " shall "}) words += text.find(w) != std::string::npos;
  EXPECT_GE(words, 3) << text;
  // The model was written once into the cache, byte for byte the checked-in file.
  const fs::path shipped = fs::path(LATTICE_SOURCE_DIR) / "tools/lattice/data/kjv-demo.gguf";
  EXPECT_TRUE(fs::exists(fs::path(cache) / "lattice" / ("demo-kjv-" + std::to_string(fs::file_size(shipped)) + ".gguf")));
}

}  // namespace
}  // namespace lattice::engine
