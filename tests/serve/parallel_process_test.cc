// `lattice serve --nodes N --parallel pp|ep|auto`: the server over pipeline stages and over
// experts spread across ranks, as real rank processes over shm with curl and the official
// `openai` npm client. Pipeline stages run every layer's kernels whole, so their text is one
// process's to the token, through a lost stage too; expert parallel (auto's choice for a
// mixture of experts) answers what one process answers on an F32 file.
#include <gtest/gtest.h>

#include "../require.h"

#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "lattice/engine/gguf/make_model.h"
#include "serve_testlib.h"

namespace lattice::serve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::curl;
using testing::metric;

const fs::path kNodeDir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";

// Three requests at once (they share batched steps); each one's text.
std::vector<std::string> three_texts(const std::string& base, const json& req) {
  std::vector<testing::HttpResult> got(3);
  std::vector<std::thread> ts;
  for (auto& g : got) ts.emplace_back([&] { g = curl(base + "/v1/completions", {"-d", req.dump()}); });
  for (auto& t : ts) t.join();
  std::vector<std::string> out;
  for (const auto& g : got) {
    json j = json::parse(g.body, nullptr, false);
    out.push_back(g.status == 200 && j.is_object() ? j["choices"][0]["text"].get<std::string>() : "HTTP " + std::to_string(g.status) + ": " + g.body);
  }
  return out;
}

std::string one_text(const std::string& model, const json& req) {
  testing::ServeProc one;
  if (!one.start(model, {"-t", "1", "--slots", "2", "--ctx", "512"}).ok()) return "serve did not start";
  auto r = curl(one.base_url() + "/v1/completions", {"-d", req.dump()});
  json j = json::parse(r.body, nullptr, false);
  return r.status == 200 && j.is_object() ? j["choices"][0]["text"].get<std::string>() : "HTTP " + std::to_string(r.status);
}

class ServeParallelProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cluster::testing::lattice_bin())) GTEST_SKIP() << "lattice not built";
    if (!testing::have_curl()) GTEST_SKIP() << "curl absent (scripts/setup.sh installs it)";
    ASSERT_TRUE(model_.ok());
  }
  testing::TinyModel model_{true};  // 4 layers: up to 4 stages
};

TEST_F(ServeParallelProcess, PipelineStagesAnswerWhatOneProcessAnswers) {
  const json req{{"prompt", "abc def"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string ref = one_text(model_.path(), req);
  testing::ServeProc two;
  ASSERT_TRUE(two.start(model_.path(), {"--nodes", "2", "--parallel", "pp", "-t", "1", "--slots", "2", "--ctx", "512"}).ok())
      << two.proc().err();
  for (const std::string& t : three_texts(two.base_url(), req)) EXPECT_EQ(t, ref);
  // /status: each stage its own layers, every layer once.
  testing::HttpResult st;
  json sj;
  for (int i = 0; i < 50; ++i) {
    st = curl(two.base_url() + "/status");
    sj = json::parse(st.body, nullptr, false);
    if (sj.is_object() && sj["ranks"].size() == 2 && sj["ranks"][1]["shard_bytes"].get<uint64_t>() > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(sj.is_object()) << st.body;
  ASSERT_EQ(sj["ranks"].size(), 2u) << st.body;
  EXPECT_EQ(sj["ranks"][0]["layers"], json::array({0, 2})) << st.body;
  EXPECT_EQ(sj["ranks"][1]["layers"], json::array({2, 4})) << st.body;
  ASSERT_TRUE(two.stop().ok());
  EXPECT_EQ(two.proc().err().find("out of step"), std::string::npos) << two.proc().err();
}

TEST_F(ServeParallelProcess, AutoPlacesAMixtureOfExpertsOverRanksByExperts) {
  const fs::path dir = fs::temp_directory_path() / ("lattice-serve-moe-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "moe.gguf").string();
  engine::MakeModelOptions o;
  o.arch = "qwen3moe";
  o.dim = 64, o.layers = 2, o.heads = 4, o.kv_heads = 2, o.vocab = 300, o.context_length = 2048;
  o.experts = 8, o.experts_used = 2, o.expert_ffn = 32;
  o.type = "f32";
  o.threads = 1;
  ASSERT_TRUE(engine::make_model(o, path).ok());
  const json req{{"prompt", "abc def"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string ref = one_text(path, req);
  {
    testing::ServeProc two;
    ASSERT_TRUE(two.start(path, {"--nodes", "2", "-t", "1", "--slots", "2", "--ctx", "512"}).ok()) << two.proc().err();
    for (const std::string& t : three_texts(two.base_url(), req)) EXPECT_EQ(t, ref);
    ASSERT_TRUE(two.stop().ok());
    EXPECT_NE(two.proc().err().find("auto: expert parallel (8 experts over 2 nodes"), std::string::npos) << two.proc().err();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
}

TEST_F(ServeParallelProcess, AStageKilledDuringFourStreamsOnThreeRanks) {
  if (!fs::exists(kNodeDir / "node_modules" / "openai"))
    LATTICE_SKIP_OR_FAIL("oracle", "tests/node/node_modules/openai absent (run scripts/setup.sh)");
  const std::vector<std::string> client = {"node", (kNodeDir / "openai_client.mjs").string(), "streams"};
  const std::string n = "4", tokens = "400";
  testing::ServeProc three;
  ASSERT_TRUE(three.start(model_.path(), {"--nodes", "3", "--parallel", "pp", "-t", "1", "--slots", "4", "--ctx", "1024"}).ok())
      << three.proc().err();
  auto run = testing::streams_through_a_kill(three, 1, 4, 400);  // the middle stage
  ASSERT_TRUE(run.ok()) << run.status().to_string() << "\n" << three.proc().err();
  const json& got = run->streams;
  auto m = curl(three.base_url() + "/metrics");
  EXPECT_EQ(metric(m.body, "lattice_recoveries_total"), 1) << three.proc().err();
  EXPECT_EQ(metric(m.body, "lattice_world_size"), 2);
  ASSERT_TRUE(three.stop().ok());

  // One process's text for the same four requests, to the token: the stages ran the same
  // kernels on whole matrices before the loss and after it.
  testing::ServeProc one;
  ASSERT_TRUE(one.start(model_.path(), {"-t", "1", "--slots", "4", "--ctx", "1024"}).ok());
  auto argv = client;
  argv.insert(argv.end(), {one.base_url(), "none", n, tokens});
  auto ref_run = cluster::testing::run_cmd(argv, {}, Deadline::after(std::chrono::seconds(180)));
  json ref = json::parse(ref_run.out, nullptr, false);
  ASSERT_TRUE(ref.is_object()) << ref_run.err;
  int longest_pause_ms = 0;
  for (size_t i = 0; i < 4; ++i) {
    const json& s = got["streams"][i];
    EXPECT_EQ(s["finish"], "length");
    EXPECT_EQ(s["usage"]["completion_tokens"], 400);
    EXPECT_EQ(s["text"], ref["streams"][i]["text"]) << "stream " << i;
    longest_pause_ms = std::max(longest_pause_ms, s["max_gap_ms"].get<int>());
  }
  std::cout << "longest pause of a stream across the stage's loss: " << longest_pause_ms << " ms\n";
  RecordProperty("longest_pause_ms", longest_pause_ms);
}

}  // namespace
}  // namespace lattice::serve
