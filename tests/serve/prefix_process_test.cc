// The prefix cache through `lattice serve` (a process, curl): a repeated prompt and the next
// turn of a chat reuse a slot's keys and values, and say so in usage
// (prompt_tokens_details.cached_tokens) and /metrics (lattice_prompt_tokens_cached_total);
// the texts are those of a server started with --no-prefix-cache.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "serve_testlib.h"

namespace lattice::serve {
namespace {

using nlohmann::json;
using testing::curl;
using testing::metric;

struct Turn {
  std::string text;
  int prompt_tokens = 0, cached = 0;
};

// Three chat requests, one after the other: a question, the same question, then the next turn
// (the question, the answer, a follow-up). Streamed with usage when `stream`.
std::vector<Turn> converse(const std::string& base, bool stream) {
  const json q = {{"role", "user"}, {"content", "tell me about clusters of machines and the links between them"}};
  std::vector<json> bodies = {json{{"messages", {q}}}, json{{"messages", {q}}}};
  std::vector<Turn> out;
  for (size_t i = 0; i < 3; ++i) {
    json body = i < 2 ? bodies[i] : json{{"messages", {q, {{"role", "assistant"}, {"content", out[0].text}},
                                                       {{"role", "user"}, {"content", "and then?"}}}}};
    body["max_tokens"] = 12;
    body["temperature"] = 0;
    body["ignore_eos"] = true;
    if (stream) {
      body["stream"] = true;
      body["stream_options"] = {{"include_usage", true}};
    }
    auto r = curl(base + "/v1/chat/completions", {"-d", body.dump()});
    EXPECT_EQ(r.status, 200) << r.body;
    Turn t;
    json usage;
    if (stream) {
      std::istringstream in(r.body);
      std::string line;
      while (std::getline(in, line)) {
        if (line.rfind("data: {", 0) != 0) continue;
        json ev = json::parse(line.substr(6));
        if (!ev["choices"].empty() && ev["choices"][0]["delta"].contains("content"))
          t.text += ev["choices"][0]["delta"]["content"].get<std::string>();
        if (ev.contains("usage") && ev["usage"].is_object()) usage = ev["usage"];
      }
    } else {
      json j = json::parse(r.body, nullptr, false);
      if (!j.is_object() || !j.contains("usage")) {
        ADD_FAILURE() << r.body;
        return out;
      }
      t.text = j["choices"][0]["message"]["content"];
      usage = j["usage"];
    }
    EXPECT_TRUE(usage.is_object()) << r.body;
    if (!usage.is_object()) return out;
    t.prompt_tokens = usage["prompt_tokens"];
    t.cached = usage["prompt_tokens_details"]["cached_tokens"];
    out.push_back(t);
  }
  return out;
}

class ServePrefixProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(cluster::testing::lattice_bin())) GTEST_SKIP() << "lattice not built";
    if (!testing::have_curl()) GTEST_SKIP() << "curl absent (scripts/setup.sh installs it)";
    ASSERT_TRUE(model_.ok());
  }
  testing::TinyModel model_;
};

TEST_F(ServePrefixProcess, ARepeatedPromptAndTheNextTurnReuseTheCache) {
  testing::ServeProc off;
  ASSERT_TRUE(off.start(model_.path(), {"-t", "1", "--slots", "2", "--ctx", "512", "--no-prefix-cache"}).ok());
  const std::vector<Turn> ref = converse(off.base_url(), false);
  ASSERT_EQ(ref.size(), 3u);
  for (const Turn& t : ref) EXPECT_EQ(t.cached, 0);
  EXPECT_EQ(metric(curl(off.base_url() + "/metrics").body, "lattice_prompt_tokens_cached_total"), 0);
  ASSERT_TRUE(off.stop().ok());

  testing::ServeProc on;
  ASSERT_TRUE(on.start(model_.path(), {"-t", "1", "--slots", "2", "--ctx", "512"}).ok());
  double cached = 0;
  for (bool stream : {false, true}) {
    const std::vector<Turn> got = converse(on.base_url(), stream);
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].text, ref[i].text) << "turn " << i << (stream ? " streamed" : "");
      EXPECT_EQ(got[i].prompt_tokens, ref[i].prompt_tokens);
    }
    // The first question finds nothing the first time round; streamed, the slots still hold
    // the last round's turns.
    EXPECT_EQ(got[0].cached, stream ? got[0].prompt_tokens - 1 : 0);
    EXPECT_EQ(got[1].cached, got[1].prompt_tokens - 1);  // all but the last token
    // The next turn shares the template head, the question and (most of) the answer.
    EXPECT_GE(got[2].cached, got[0].prompt_tokens - 1) << got[2].cached;
    EXPECT_LT(got[2].cached, got[2].prompt_tokens);
    for (const Turn& t : got) cached += t.cached;
  }
  EXPECT_EQ(metric(curl(on.base_url() + "/metrics").body, "lattice_prompt_tokens_cached_total"), cached);
  ASSERT_TRUE(on.stop().ok());
}

}  // namespace
}  // namespace lattice::serve
