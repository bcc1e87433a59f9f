// `lattice serve --nodes N`: rank 0 listens and schedules, the others follow every step
// (serve/lockstep.h). Real rank processes over shm, curl and the official `openai` npm client:
// two ranks answer what one process answers (temperature 0, with a prefix cache hit too), /metrics shows every rank and link; a
// follower killed during four streams on three ranks: all four complete, starting with the
// text one process gives, and /metrics counts the recovery; a lost rank 0 ends the job with an error.
#include <gtest/gtest.h>

#include "../require.h"

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "serve_testlib.h"

namespace lattice::serve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::curl;

const fs::path kNodeDir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";

// The child of `launcher` started as rank `rank` (LATTICE_RANK in its environment), or -1.
pid_t rank_pid(pid_t launcher, int rank) {
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  pid_t child;
  while (children >> child) {
    std::ifstream env("/proc/" + std::to_string(child) + "/environ", std::ios::binary);
    std::stringstream ss;
    ss << env.rdbuf();
    const std::string all = ss.str();
    size_t at = 0;
    while (at < all.size()) {
      const std::string var = all.c_str() + at;
      if (var == "LATTICE_RANK=" + std::to_string(rank)) return child;
      at += var.size() + 1;
    }
  }
  return -1;
}

// The value of an unlabelled (or exactly labelled) sample in Prometheus text, or -1.
double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

class ServeClusterProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cluster::testing::lattice_bin())) GTEST_SKIP() << "lattice not built";
    if (!testing::have_curl()) GTEST_SKIP() << "curl absent (scripts/setup.sh installs it)";
    ASSERT_TRUE(model_.ok());
  }
  testing::TinyModel model_{true};
};

TEST_F(ServeClusterProcess, TwoRanksAnswerWhatOneProcessAnswers) {
  const json req{{"prompt", "abc def"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  testing::ServeProc one;
  ASSERT_TRUE(one.start(model_.path(), {"-t", "1", "--slots", "2", "--ctx", "512"}).ok());
  auto ref = curl(one.base_url() + "/v1/completions", {"-d", req.dump()});
  ASSERT_EQ(ref.status, 200) << ref.body;
  ASSERT_TRUE(one.stop().ok());

  testing::ServeProc two;
  ASSERT_TRUE(two.start(model_.path(), {"--nodes", "2", "-t", "1", "--slots", "2", "--ctx", "512"}).ok())
      << two.proc().err();
  // Three at once: they share the batched steps on both ranks.
  std::vector<testing::HttpResult> got(3);
  std::vector<std::thread> ts;
  for (auto& g : got) ts.emplace_back([&] { g = curl(two.base_url() + "/v1/completions", {"-d", req.dump()}); });
  for (auto& t : ts) t.join();
  for (const auto& g : got) {
    ASSERT_EQ(g.status, 200) << g.body;
    EXPECT_EQ(json::parse(g.body)["choices"][0]["text"], json::parse(ref.body)["choices"][0]["text"]);
  }
  // Once more: every rank takes the same slot and keeps its cached prefix (a rank out of step
  // would attend over other keys, and the text would differ).
  auto again = curl(two.base_url() + "/v1/completions", {"-d", req.dump()});
  ASSERT_EQ(again.status, 200) << again.body;
  const json aj = json::parse(again.body);
  EXPECT_EQ(aj["choices"][0]["text"], json::parse(ref.body)["choices"][0]["text"]);
  EXPECT_EQ(aj["usage"]["prompt_tokens_details"]["cached_tokens"], aj["usage"]["prompt_tokens"].get<int>() - 1);
  // The followers report at rank 0's next control-plane exchange (an idle tick: 500 ms).
  testing::HttpResult m;
  for (int i = 0; i < 50; ++i) {
    m = curl(two.base_url() + "/metrics");
    if (metric(m.body, "lattice_rank_collective_bytes_total{rank=\"1\"}") > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(m.status, 200);
  EXPECT_EQ(metric(m.body, "lattice_world_size"), 2);
  EXPECT_EQ(metric(m.body, "lattice_recoveries_total"), 0);
  for (const char* r : {"0", "1"}) {
    const std::string label = std::string("{rank=\"") + r + "\"}";
    EXPECT_GT(metric(m.body, "lattice_rank_resident_memory_bytes" + label), 1e6) << m.body;
    EXPECT_GT(metric(m.body, "lattice_rank_shard_bytes" + label), 0) << m.body;
    EXPECT_GT(metric(m.body, "lattice_rank_collective_bytes_total" + label), 0) << m.body;
  }
  // Per link, from the fabric endpoints' counters (fabric.h LinkBytes): both directions moved bytes.
  for (const auto& [from, to] : {std::pair{"0", "1"}, std::pair{"1", "0"}}) {
    const double sent = metric(m.body, std::string("lattice_link_sent_bytes_total{rank=\"") + from + "\",peer=\"" + to + "\"}");
    const double got = metric(m.body, std::string("lattice_link_received_bytes_total{rank=\"") + to + "\",peer=\"" + from + "\"}");
    EXPECT_GT(std::max(sent, got), 0) << m.body;
  }
  // A stop (SIGTERM to the job, as a service manager sends it): the job ends within the
  // deadline, with no rank out of step or failing.
  ASSERT_TRUE(two.stop().ok());
  EXPECT_EQ(two.proc().err().find("out of step"), std::string::npos) << two.proc().err();
  EXPECT_EQ(two.proc().err().find("rank 1:"), std::string::npos) << two.proc().err();
}

TEST_F(ServeClusterProcess, AFollowerKilledDuringFourStreamsOnThreeRanks) {
  if (!fs::exists(kNodeDir / "node_modules" / "openai"))
    LATTICE_SKIP_OR_FAIL("oracle", "tests/node/node_modules/openai absent (run scripts/setup.sh)");
  const std::vector<std::string> client = {"node", (kNodeDir / "openai_client.mjs").string(), "streams"};
  const std::string n = "4", tokens = "600";
  testing::ServeProc three;
  ASSERT_TRUE(three.start(model_.path(), {"--nodes", "3", "-t", "1", "--slots", "4", "--ctx", "2048"}).ok())
      << three.proc().err();
  auto argv = client;
  argv.insert(argv.end(), {three.base_url(), "none", n, tokens});
  auto streams = cluster::testing::Proc::spawn(argv, {});
  ASSERT_TRUE(streams.ok());
  // Once all four are decoding, rank 2 goes.
  bool decoding = false;
  for (int i = 0; i < 600 && !decoding; ++i) {
    auto h = curl(three.base_url() + "/health");
    json j = json::parse(h.body, nullptr, false);
    decoding = j.is_object() && j["active"] == 4 && j["in_flight"] == 4;
    if (!decoding) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(decoding);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const pid_t victim = rank_pid(three.proc().pid(), 2);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  auto code = streams->wait(Deadline::after(std::chrono::seconds(180)));
  ASSERT_TRUE(code.ok());
  ASSERT_TRUE(WIFEXITED(*code) && WEXITSTATUS(*code) == 0) << streams->err();
  json got = json::parse(streams->out(), nullptr, false);
  ASSERT_TRUE(got.is_object()) << streams->out();
  auto m = curl(three.base_url() + "/metrics");
  EXPECT_EQ(metric(m.body, "lattice_recoveries_total"), 1) << three.proc().err();
  EXPECT_EQ(metric(m.body, "lattice_world_size"), 2);
  EXPECT_GT(metric(m.body, "lattice_recovery_seconds_total"), 0);
  EXPECT_EQ(metric(m.body, "lattice_rank_resident_memory_bytes{rank=\"2\"}"), -1) << "the lost rank still reported";
  ASSERT_TRUE(three.stop().ok());

  // What one process gives the same four requests, for their first 8 tokens (over 600
  // tokens of a random model, near-ties at temperature 0 let the sums of 3, 2 and 1 ranks,
  // added in different orders, part ways).
  testing::ServeProc one;
  ASSERT_TRUE(one.start(model_.path(), {"-t", "1", "--slots", "4", "--ctx", "2048"}).ok());
  argv = client;
  argv.insert(argv.end(), {one.base_url(), "none", n, "8"});
  auto ref_run = cluster::testing::run_cmd(argv, {}, Deadline::after(std::chrono::seconds(180)));
  json ref = json::parse(ref_run.out, nullptr, false);
  ASSERT_TRUE(ref.is_object()) << ref_run.err;
  int longest_pause_ms = 0;
  for (size_t i = 0; i < 4; ++i) {
    const json& s = got["streams"][i];
    EXPECT_EQ(s["finish"], "length");
    EXPECT_EQ(s["usage"]["completion_tokens"], 600);
    const std::string text = s["text"], head = ref["streams"][i]["text"];
    EXPECT_EQ(text.substr(0, head.size()), head) << "stream " << i;
    longest_pause_ms = std::max(longest_pause_ms, s["max_gap_ms"].get<int>());
  }
  std::cout << "longest pause of a stream across the recovery: " << longest_pause_ms << " ms\n";
  RecordProperty("longest_pause_ms", longest_pause_ms);
}

TEST_F(ServeClusterProcess, LosingRankZeroEndsTheJobWithAnError) {
  testing::ServeProc two;
  ASSERT_TRUE(two.start(model_.path(), {"--nodes", "2", "-t", "1", "--slots", "1", "--ctx", "256"}).ok());
  const pid_t leader = rank_pid(two.proc().pid(), 0);
  ASSERT_GT(leader, 0);
  ASSERT_EQ(::kill(leader, SIGKILL), 0);
  auto code = two.proc().wait(Deadline::after(std::chrono::seconds(60)));
  ASSERT_TRUE(code.ok()) << "the job did not end";
  EXPECT_FALSE(WIFEXITED(*code) && WEXITSTATUS(*code) == 0);
  EXPECT_NE(two.proc().err().find("rank 0"), std::string::npos) << two.proc().err();
}

}  // namespace
}  // namespace lattice::serve
