// Tensor parallel with ranks as processes: `lattice run --nodes N` (launcher + cluster
// bootstrap) must print the same greedy tokens as single-node `lattice run`, over shm and tcp;
// a rank killed or stopped mid-generation is re-placed on the survivors and the request still
// completes with the same tokens (or, with --no-recover, the run fails promptly naming it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "lattice/cluster/launcher.h"
#include "lattice/engine/gguf/make_model.h"
#include "model_testlib.h"
#include "parallel_testlib.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;
using testing::lattice_bin;

const testing::TempDir temp("lattice-tp-proc");

// Runs the command; returns stdout (stderr appended when keep_err).
std::string run(const std::string& args, int* code, bool keep_err = false) {
  testing::Ran r = testing::run_lattice(args, keep_err);
  *code = r.exit_code;
  return r.out;
}

// A small random model, made once per test program: `layers` layers of `type` weights.
std::string model_path(int layers = 2, const char* type = "f16") {
  MakeModelOptions o;
  o.dim = 256;
  o.layers = layers;
  o.heads = 8;
  o.kv_heads = 4;
  o.ffn = 704;
  o.vocab = 1024;
  o.type = type;
  o.pure = true;
  o.threads = 1;
  return testing::cached_model(temp.file("m" + std::to_string(layers) + type + ".gguf"), o);
}

// A qwen3moe F32 file (8 experts, 2 a token), for expert parallelism.
std::string moe_path() {
  MakeModelOptions o = testing::small_moe_options("qwen3moe");
  o.kv_heads = 4;
  o.vocab = 1024;
  o.seed = 1;
  return testing::cached_model(temp.file("qwen3moe-f32.gguf"), o);
}

std::vector<int> tokens_of(const std::string& out) {
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded() || !j.contains("tokens")) return {};
  return j["tokens"].get<std::vector<int>>();
}

class ParallelProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(lattice_bin())) GTEST_SKIP() << "lattice binary not built";
  }
};

TEST_F(ParallelProcess, RunNodesMatchesSingleNodeOverShmAndTcp) {
  const std::string m = model_path();
  const std::string common = "-m " + m + " -p 'the quick brown fox' -n 48 --temp 0 --ignore-eos --json -t 1";
  int code = -1;
  const auto ref = tokens_of(run("run " + common, &code));
  ASSERT_EQ(code, 0);
  ASSERT_EQ(ref.size(), 48u);
  for (const char* prov : {"shm", "tcp"})
    for (int n : {2, 3}) {
      const std::string out = run("run " + common + " --nodes " + std::to_string(n) + " --provider " + prov, &code);
      ASSERT_EQ(code, 0) << prov << " " << n << ": " << out;
      EXPECT_EQ(tokens_of(out), ref) << prov << " x" << n;
      auto j = nlohmann::json::parse(out, nullptr, false);
      ASSERT_TRUE(j.contains("ranks"));
      ASSERT_EQ(j["ranks"].size(), size_t(n));
      for (const auto& r : j["ranks"]) {
        // Two all-reduces of n_embd floats per layer plus the argmax gather, per token.
        EXPECT_GE(r["bytes_sent_per_token"].get<double>(), 2.0 * 2 * 256 * 4);
        EXPECT_GT(r["shard_bytes"].get<double>(), 0);
        // The forward steps' share of a decoded token is within it (the chosen token's gather,
        // a collective too, is outside the step).
        const double step = r["step_ms_per_token"].get<double>(), tok = r["decode_ms_per_token"].get<double>();
        EXPECT_GT(step, 0);
        EXPECT_LE(step, tok);
        // The prompt's prefill: its forward steps, and its collectives (every layer's, and the
        // chosen token's gather outside the steps).
        const double pre = r["prefill_step_ms"].get<double>(), pre_coll = r["prefill_coll_ms"].get<double>();
        EXPECT_GT(pre_coll, 0);
        EXPECT_GT(pre, 0);
        if (r["rank"] == 0) EXPECT_LE(pre, j["prefill_ms"].get<double>() + 1e-6);  // rank 0's clock
      }
    }
}

TEST_F(ParallelProcess, PipelineRunMatchesSingleNode) {
  const std::string m = model_path();
  const std::string common = "-m " + m + " -p 'the quick brown fox' -n 24 --temp 0 --ignore-eos --json -t 1";
  int code = -1;
  const auto ref = tokens_of(run("run " + common, &code));
  ASSERT_EQ(code, 0);
  const std::string out = run("run " + common + " --nodes 2 --parallel pp --provider tcp", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(tokens_of(out), ref);
  // Uneven shares: tensor parallel 3:1 and a pipeline with the second stage taking more.
  const std::string tp31 = run("run " + common + " --nodes 2 --split 3,1", &code);
  ASSERT_EQ(code, 0) << tp31;
  EXPECT_EQ(tokens_of(tp31), ref);
  auto jt = nlohmann::json::parse(tp31, nullptr, false);
  EXPECT_EQ(jt["ranks"][0]["kv_heads"][1], 3);  // 4 KV heads split 3:1
  const std::string pp13 = run("run " + common + " --nodes 2 --parallel pp --split 1,3", &code);
  ASSERT_EQ(code, 0) << pp13;
  EXPECT_EQ(tokens_of(pp13), ref);
  auto j = nlohmann::json::parse(out, nullptr, false);
  EXPECT_EQ(j["parallel"], "pp");
  EXPECT_EQ(j["ranks"][0]["layers"][1], j["ranks"][1]["layers"][0]);
}

// Expert parallel as processes: `--parallel ep` and `auto` give the single node's tokens,
// report the experts each rank owns and the tokens each ran, and a killed rank's experts
// are re-placed on the survivors.
TEST_F(ParallelProcess, ExpertParallelRunMatchesSingleNodeAndReportsTheLoad) {
  const std::string m = moe_path();
  const std::string common = "-m " + m + " -p 'the quick brown fox' -n 32 --temp 0 --ignore-eos --json -t 1";
  int code = -1;
  const auto ref = tokens_of(run("run " + common, &code));
  ASSERT_EQ(code, 0);
  ASSERT_EQ(ref.size(), 32u);
  for (const char* how : {"--nodes 2 --parallel ep --provider shm", "--nodes 3 --parallel auto --provider tcp"}) {
    const std::string out = run("run " + common + " " + how, &code);
    ASSERT_EQ(code, 0) << how << ": " << out;
    EXPECT_EQ(tokens_of(out), ref) << how;
    auto j = nlohmann::json::parse(out, nullptr, false);
    ASSERT_TRUE(j.contains("expert_load")) << out;
    EXPECT_EQ(j["parallel"], "ep");
    const auto& load = j["expert_load"];
    EXPECT_EQ(load["mode"], "ep");
    size_t experts = 0;
    uint64_t rows = 0;
    for (const auto& r : load["per_rank"]) experts += r["experts"].size(), rows += r["rows"].get<uint64_t>();
    EXPECT_EQ(experts, 8u);
    // Decode steps after the first token: 31 tokens x 2 experts x 2 layers.
    EXPECT_EQ(rows, 31u * 2 * 2) << load.dump();
    EXPECT_GT(load["balance"].get<double>(), 0.3);
  }
  const std::string killed = run("run " + common + " --nodes 3 --parallel ep --provider shm --inject-fault 1@8", &code);
  ASSERT_EQ(code, 0) << killed;
  EXPECT_EQ(tokens_of(killed), ref);
  auto j = nlohmann::json::parse(killed, nullptr, false);
  ASSERT_EQ(j["recoveries"].size(), 1u) << killed;
  size_t experts = 0;
  for (const auto& r : j["expert_load"]["per_rank"]) experts += r["experts"].size();
  EXPECT_EQ(j["expert_load"]["per_rank"].size(), 2u);
  EXPECT_EQ(experts, 8u);
}

TEST_F(ParallelProcess, DemoRunsTwoRanks) {
  const fs::path home = fs::temp_directory_path() / ("lattice-tp-home-" + std::to_string(::getpid()));
  fs::create_directories(home);
  // The demo model goes to the cache directory: a private one here.
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", home.c_str(), 1);
  int code = -1;
  const std::string out = run("run --demo -n 8 --temp 0 --json", &code);
  if (old) ::setenv("XDG_CACHE_HOME", saved.c_str(), 1); else ::unsetenv("XDG_CACHE_HOME");
  EXPECT_TRUE(fs::exists(home / "lattice"));
  fs::remove_all(home);
  ASSERT_EQ(code, 0) << out;
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["nodes"].get<int>(), 2);
  EXPECT_EQ(j["n_gen"].get<int>() + 0, static_cast<int>(j["tokens"].size()));
  // When each token was chosen, on the steady clock (ms): one a token, in order, the first one
  // the prefill's end (bench/sim_vs_real.py --interleave lines them up with its phases).
  ASSERT_TRUE(j["token_clock_ms"].is_array()) << out;
  const auto& clock = j["token_clock_ms"];
  ASSERT_EQ(clock.size(), j["tokens"].size());
  for (size_t i = 1; i < clock.size(); ++i) EXPECT_GE(clock[i].get<double>(), clock[i - 1].get<double>()) << i;
  const double now_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  EXPECT_LE(clock.back().get<double>(), now_ms);
  EXPECT_GT(clock.front().get<double>(), now_ms - 600e3);  // this run's, on this clock
}

// --bind: each rank reports the CPUs it ran on, and they are the ones launch's policy gives (cores:
// beyond the CPUs too, rank r on CPU r mod CPUs; auto: unpinned beyond them). A wrong word is
// refused by name before any rank starts.
TEST_F(ParallelProcess, RanksRunOnTheCpusBindGives) {
  using namespace lattice::cluster;
  const std::vector<int> cpus = usable_cpus();
  const int n = static_cast<int>(cpus.size()) + 1;  // one rank beyond the CPUs, a pipeline stage each
  if (n > 8) GTEST_SKIP() << "a rank beyond " << cpus.size() << " CPUs is more stages than the model's layers";
  const std::string m = model_path(8);
  for (const char* policy : {"cores", "auto"}) {
    int code = -1;
    const std::string out = run("run -m " + m + " -p hi -n 2 --temp 0 --json -t 1 --nodes " + std::to_string(n) +
                                    " --parallel pp --bind " + policy, &code);
    ASSERT_EQ(code, 0) << out;
    auto j = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out;
    ASSERT_EQ(j["ranks"].size(), size_t(n)) << out;
    const auto want = bind_cpus(n, *parse_bind(policy) == Bind::kAuto ? Bind::kNone : Bind::kCores, cpus);
    for (const auto& r : j["ranks"]) {
      const int rank = r["rank"].get<int>();
      const auto& w = want[size_t(rank)];
      EXPECT_EQ(r["cpus"].get<std::vector<int>>(), w.empty() ? cpus : w) << policy << " rank " << rank;
    }
  }
  int code = -1;
  const std::string out = run("run -m " + m + " -p hi -n 2 --nodes 2 --bind core", &code, true);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find("--bind must be auto, cores or none (got 'core')"), std::string::npos) << out;
}

TEST_F(ParallelProcess, AKilledRankIsReplacedOnTheSurvivorsAndTheRunCompletes) {
  const std::string m = model_path();
  const std::string common = "-m " + m + " -p 'the quick brown fox' -n 40 --temp 0 --ignore-eos --json -t 1";
  int code = -1;
  const auto ref = tokens_of(run("run " + common, &code));
  ASSERT_EQ(code, 0);
  ASSERT_EQ(ref.size(), 40u);
  const std::string out = run("run " + common + " --nodes 3 --provider tcp --inject-fault 2@10", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(tokens_of(out), ref);
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["nodes_at_start"].get<int>(), 3);
  EXPECT_EQ(j["nodes"].get<int>(), 2);
  EXPECT_EQ(j["epoch"].get<int>(), 1);
  ASSERT_EQ(j["recoveries"].size(), 1u) << out;
  EXPECT_EQ(j["recoveries"][0]["lost_ranks"], nlohmann::json::array({2}));
  // Rank 2 kills itself before its 11th token, having chosen 10; the survivors resume from 10,
  // or from 9 when its last message of the 10th token never reached them (seen once in CI under
  // load; the likely cause: a killed process's unread data makes the kernel reset its sockets,
  // which drops what the peers had not read yet). Either way the text is the single node's,
  // checked above.
  EXPECT_GE(j["recoveries"][0]["at_token"].get<int>(), 9);
  EXPECT_LE(j["recoveries"][0]["at_token"].get<int>(), 10);
  EXPECT_EQ(j["ranks"].size(), 2u);
}

TEST_F(ParallelProcess, AStoppedLastStageIsReplacedAndSamplingContinuesUnchanged) {
  // A pipeline whose last stage (it samples) hangs: found by the heartbeats, re-placed; the
  // survivors rebuild the sampler's state, so a seeded sampled run gives the same tokens.
  const std::string m = model_path(4, "q8_0");
  const std::string common = "-m " + m + " -p 'once upon a time' -n 32 --temp 0.8 --seed 11 --ignore-eos --json -t 1";
  int code = -1;
  const auto ref = tokens_of(run("run " + common + " --nodes 3 --parallel pp --provider shm", &code));
  ASSERT_EQ(code, 0);
  ASSERT_EQ(ref.size(), 32u);
  const std::string out = run("run " + common + " --nodes 3 --parallel pp --provider shm --inject-fault 2@12:stop", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(tokens_of(out), ref);
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_EQ(j["recoveries"].size(), 1u) << out;
  EXPECT_EQ(j["recoveries"][0]["lost_ranks"], nlohmann::json::array({2}));
  EXPECT_EQ(j["nodes"].get<int>(), 2);
}

TEST_F(ParallelProcess, WithoutRecoveryALostRankFailsTheRunNamingIt) {
  const std::string m = model_path();
  int code = -1;
  const std::string out = run("run -m " + m + " -p hi -n 32 --temp 0 --ignore-eos -t 1 --nodes 3 --provider tcp "
                              "--no-recover --inject-fault 1@4", &code, true);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("rank 1"), std::string::npos) << out;
}

TEST_F(ParallelProcess, LosingRankZeroIsSurvivedToo) {
  // The launcher hosts the coordinator, so the first rank (which prints) is expendable as well.
  const std::string m = model_path();
  const std::string common = "-m " + m + " -p 'the quick brown fox' -n 24 --temp 0 --ignore-eos --json -t 1";
  int code = -1;
  const auto ref = tokens_of(run("run " + common, &code));
  ASSERT_EQ(code, 0);
  const std::string out = run("run " + common + " --nodes 3 --provider shm --inject-fault 0@6", &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(tokens_of(out), ref);
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  ASSERT_EQ(j["recoveries"].size(), 1u) << out;
  EXPECT_EQ(j["recoveries"][0]["lost_ranks"], nlohmann::json::array({0}));
  EXPECT_EQ(j["ranks"][0]["first_rank"].get<int>(), 1);  // the new rank 0 started as rank 1
}

TEST_F(ParallelProcess, UnderLaunchKeepGoingRankZeroCanBeLost) {
  const std::string m = model_path();
  const std::string common = "-m " + m + " -p 'the quick brown fox' -n 24 --temp 0 --ignore-eos --json -t 1";
  int code = -1;
  const auto ref = tokens_of(run("run " + common, &code));
  ASSERT_EQ(code, 0);
  const std::string out = run("launch -n 3 --keep-going --no-prefix --provider tcp -- " + lattice_bin() + " run " +
                                  common + " --seed 1 --inject-fault 0@6",
                              &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(tokens_of(out), ref) << out;
}

TEST_F(ParallelProcess, BadFaultSpecIsRefused) {
  const std::string m = model_path();
  int code = -1;
  const std::string out = run("run -m " + m + " -p hi -n 4 --nodes 2 --inject-fault 1x4", &code, true);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--inject-fault wants RANK@TOKEN"), std::string::npos) << out;
}

TEST_F(ParallelProcess, MissingModelIsRefused) {
  int code = -1;
  const std::string out = run("run --nodes 2 -m /nonexistent.gguf -p hi", &code, true);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("no such model file"), std::string::npos) << out;
}

}  // namespace
}  // namespace lattice::engine
