// `lattice serve` against the official `openai` npm client (tests/node/openai_client.mjs):
// chat and completions, streamed and not; 8 concurrent streams each getting the text it gets
// alone (temperature 0); 64 concurrent streams all complete, in bounded memory; a client that
// drops its stream frees its slot. Skipped only when
// tests/node/node_modules/openai is absent (scripts/setup.sh installs it).
#include <gtest/gtest.h>

#include "../require.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "serve_testlib.h"

namespace lattice::serve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kNodeDir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";

class ServeClientProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cluster::testing::lattice_bin())) GTEST_SKIP() << "lattice not built";
    if (!fs::exists(kNodeDir / "node_modules" / "openai")) LATTICE_SKIP_OR_FAIL("oracle", "tests/node/node_modules/openai absent (run scripts/setup.sh)");
  }
  json client(const std::string& mode, const std::string& base, const std::string& key, const std::string& arg = "") {
    std::vector<std::string> argv = {"node", (kNodeDir / "openai_client.mjs").string(), mode, base, key};
    if (!arg.empty()) argv.push_back(arg);
    auto r = cluster::testing::run_cmd(argv, {}, Deadline::after(std::chrono::seconds(120)));
    EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_object()) << r.out << r.err;
    return j.is_object() ? j : json::object();
  }
};

TEST_F(ServeClientProcess, OpenAiClientStreamingAndNot) {
  testing::TinyModel model;
  ASSERT_TRUE(model.ok());
  testing::ServeProc serve;
  ASSERT_TRUE(serve.start(model.path(), {"-t", "1", "--slots", "2", "--ctx", "512", "--api-key", "sk-test"}).ok());
  json j = client("basic", serve.base_url(), "sk-test");
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["chat"]["object"], "chat.completion");
  EXPECT_EQ(j["chat"]["role"], "assistant");
  EXPECT_EQ(j["chat"]["finish"], "length");
  EXPECT_EQ(j["chat"]["usage"]["completion_tokens"], 8);
  EXPECT_GT(j["chat"]["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(j["chat_stream"]["role"], "assistant");
  EXPECT_EQ(j["chat_stream"]["finish"], "length");
  EXPECT_EQ(j["chat_stream"]["usage"]["completion_tokens"], 8);
  EXPECT_FALSE(j["chat_stream"]["text"].get<std::string>().empty());
  EXPECT_EQ(j["completion"]["object"], "text_completion");
  EXPECT_EQ(j["completion"]["usage"]["completion_tokens"], 6);
  // Greedy: the streamed completion is the same text as the whole one.
  EXPECT_EQ(j["completion_stream"]["text"], j["completion"]["text"]);
  EXPECT_EQ(j["models"], json::array({"tiny.gguf"}));
  EXPECT_EQ(j["bad_key"]["status"], 401);
  EXPECT_EQ(j["bad_request"]["status"], 400);
}

TEST_F(ServeClientProcess, EightConcurrentStreamsGetWhatTheyGetAlone) {
  testing::TinyModel model;
  ASSERT_TRUE(model.ok());
  testing::ServeProc serve;
  ASSERT_TRUE(serve.start(model.path(), {"-t", "2", "--slots", "8", "--ctx", "256"}).ok());
  json j = client("concurrent", serve.base_url(), "none", "8");
  ASSERT_EQ(j["alone"].size(), 8u);
  ASSERT_EQ(j["together"].size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(j["together"][i]["text"], j["alone"][i]["text"]) << i;
    EXPECT_EQ(j["together"][i]["finish"], j["alone"][i]["finish"]) << i;
    EXPECT_FALSE(j["together"][i]["finish"].is_null()) << i;
    EXPECT_EQ(j["together"][i]["role"], "assistant");
  }
  EXPECT_EQ(j["health"]["requests_completed"], 16);
  EXPECT_EQ(j["health"]["active"], 0);
}

// The server's resident set (VmRSS) in bytes, 0 if unreadable.
uint64_t rss_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

TEST_F(ServeClientProcess, SixtyFourConcurrentClientsAllCompleteInBoundedMemory) {
  testing::TinyModel model;
  ASSERT_TRUE(model.ok());
  testing::ServeProc serve;
  ASSERT_TRUE(serve.start(model.path(), {"-t", "2", "--slots", "8", "--ctx", "256"}).ok());
  // Two rounds of 64 streams over 8 slots (56 queued at a time): every one completes; the
  // second round, on warm queues and buffers, grows the process by little (nothing kept per
  // request).
  std::vector<uint64_t> rss;
  for (int round = 0; round < 2; ++round) {
    json j = client("streams", serve.base_url(), "none", "64");
    ASSERT_EQ(j["streams"].size(), 64u) << j.dump();
    for (const json& s : j["streams"]) {
      EXPECT_EQ(s["finish"], "length");
      EXPECT_EQ(s["usage"]["completion_tokens"], 64);  // the client's default length
    }
    rss.push_back(rss_bytes(serve.proc().pid()));
  }
  ASSERT_GT(rss[0], 0u);
  EXPECT_LT(rss[1], rss[0] + (16u << 20)) << rss[0] << " then " << rss[1];
  json h = json::parse(cluster::testing::run_cmd({"curl", "-s", serve.base_url() + "/health"}, {},
                                                 Deadline::after(std::chrono::seconds(30))).out, nullptr, false);
  EXPECT_EQ(h["requests_completed"], 128);
  EXPECT_EQ(h["requests_failed"], 0);
  EXPECT_EQ(h["in_flight"], 0);
}

TEST_F(ServeClientProcess, AClientThatDisconnectsFreesItsSlot) {
  testing::TinyModel model(/*big=*/true);  // 8000 tokens take far longer than the wait below
  ASSERT_TRUE(model.ok());
  testing::ServeProc serve;
  ASSERT_TRUE(serve.start(model.path(), {"-t", "1", "--slots", "1", "--ctx", "8192"}).ok());
  json j = client("abort", serve.base_url(), "none");
  EXPECT_GE(j["chunks"].get<int>(), 3);
  EXPECT_EQ(j["health"]["requests_cancelled"], 1);
  EXPECT_EQ(j["health"]["active"], 0);
  EXPECT_LT(j["freed_ms"].get<int>(), 5000);
  // The one slot served the next request.
  EXPECT_EQ(j["after"]["finish"], "length");
  EXPECT_FALSE(j["after"]["text"].get<std::string>().empty());
}

}  // namespace
}  // namespace lattice::serve
