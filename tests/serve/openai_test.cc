// The OpenAI protocol as plain data: request bodies parsed and refused with the field named,
// responses and SSE chunks in OpenAI's shape.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "lattice/serve/openai.h"

namespace lattice::serve {
namespace {

using nlohmann::json;

TEST(OpenAi, ChatRequestFieldsAreRead) {
  auto r = parse_request(Endpoint::kChat, R"({"model":"m","messages":[{"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"hel"},{"type":"text","text":"lo"}]}],
      "max_tokens":12,"temperature":0.5,"top_p":0.9,"seed":42,"stop":["a","bc"],"stream":true,
      "stream_options":{"include_usage":true},"frequency_penalty":0.5,"unknown_field":{"x":1}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[1].role, "user");
  EXPECT_EQ(r->messages[1].content, "hello");
  EXPECT_EQ(r->max_tokens, 12u);
  EXPECT_FLOAT_EQ(r->sampler.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampler.top_p, 0.9f);
  EXPECT_FLOAT_EQ(r->sampler.frequency_penalty, 0.5f);
  EXPECT_EQ(r->sampler.seed, 42u);
  EXPECT_TRUE(r->seed_set);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  // max_completion_tokens wins over max_tokens; a stop string alone is one stop.
  auto r2 = parse_request(Endpoint::kChat,
                          R"({"messages":[{"role":"user","content":"x"}],"max_tokens":5,"max_completion_tokens":7,"stop":"END"})");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->max_tokens, 7u);
  EXPECT_EQ(r2->stop, std::vector<std::string>{"END"});
  EXPECT_FALSE(r2->stream);
  EXPECT_FALSE(r2->seed_set);
}

TEST(OpenAi, CompletionPromptForms) {
  auto a = parse_request(Endpoint::kCompletion, R"({"prompt":"once"})");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->prompt, "once");
  auto b = parse_request(Endpoint::kCompletion, R"({"prompt":["upon"]})");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->prompt, "upon");
  auto c = parse_request(Endpoint::kCompletion, R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prompt_ids, (std::vector<int32_t>{1, 2, 3}));
}

TEST(OpenAi, BadBodiesAreRefusedWithTheFieldNamed) {
  struct Case {
    Endpoint e;
    std::string body, needle;
  };
  const std::string m = R"("messages":[{"role":"user","content":"x"}])";
  const Case cases[] = {
      {Endpoint::kChat, "{bad", "not valid JSON"},
      {Endpoint::kChat, "[1,2]", "JSON object"},
      {Endpoint::kChat, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", "UTF-8"},
      {Endpoint::kChat, "{}", "'messages' is required"},
      {Endpoint::kChat, R"({"messages":[]})", "'messages'"},
      {Endpoint::kChat, R"({"messages":[{"content":"x"}]})", "role"},
      {Endpoint::kChat, R"({"messages":[{"role":"user"}]})", "content"},
      {Endpoint::kChat, R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "content"},
      {Endpoint::kChat, "{" + m + R"(,"max_tokens":0})", "'max_tokens'"},
      {Endpoint::kChat, "{" + m + R"(,"max_tokens":"5"})", "'max_tokens'"},
      {Endpoint::kChat, "{" + m + R"(,"temperature":-1})", "'temperature'"},
      {Endpoint::kChat, "{" + m + R"(,"temperature":3})", "'temperature'"},
      {Endpoint::kChat, "{" + m + R"(,"top_p":0})", "'top_p'"},
      {Endpoint::kChat, "{" + m + R"(,"top_p":1.5})", "'top_p'"},
      {Endpoint::kChat, "{" + m + R"(,"seed":1.5})", "'seed'"},
      {Endpoint::kChat, "{" + m + R"(,"stop":[1]})", "'stop'"},
      {Endpoint::kChat, "{" + m + R"(,"stop":{"a":1}})", "'stop'"},
      {Endpoint::kChat, "{" + m + R"(,"stream":"yes"})", "'stream'"},
      {Endpoint::kChat, "{" + m + R"(,"stream_options":3})", "'stream_options'"},
      {Endpoint::kChat, "{" + m + R"(,"n":2})", "'n'"},
      {Endpoint::kChat, "{" + m + R"(,"model":5})", "'model'"},
      {Endpoint::kCompletion, "{}", "'prompt' is required"},
      {Endpoint::kCompletion, R"({"prompt":""})", "'prompt' is empty"},
      {Endpoint::kCompletion, R"({"prompt":[1,"a"]})", "'prompt'"},
      {Endpoint::kCompletion, R"({"prompt":[-1]})", "'prompt'"},
      {Endpoint::kCompletion, R"({"prompt":{"x":1}})", "'prompt'"},
  };
  for (const Case& c : cases) {
    auto r = parse_request(c.e, c.body);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << c.body;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << c.body << " -> " << r.status().message();
  }
}

TEST(OpenAi, GenerationRequestFitsTheContext) {
  auto r = parse_request(Endpoint::kCompletion, R"({"prompt":"x","max_tokens":6,"ignore_eos":true,"stop":["q"]})");
  ASSERT_TRUE(r.ok());
  auto g = generation_request(*r, {1, 2, 3, 4}, 10);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(g->n_predict, 6u);
  EXPECT_FALSE(g->stop_at_eog);
  EXPECT_EQ(g->stop, std::vector<std::string>{"q"});
  EXPECT_FALSE(generation_request(*r, {1, 2, 3, 4, 5}, 10).ok());  // 5 + 6 > 10
  auto open = parse_request(Endpoint::kCompletion, R"({"prompt":"x"})");
  ASSERT_TRUE(open.ok());
  auto g2 = generation_request(*open, {1, 2, 3}, 10);
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(g2->n_predict, 7u);  // up to the context
  EXPECT_FALSE(generation_request(*open, std::vector<int32_t>(10, 1), 10).ok());  // no room for one token
  EXPECT_FALSE(generation_request(*open, {}, 10).ok());
}

TEST(OpenAi, FinishReasons) {
  EXPECT_EQ(finish_reason("length"), "length");
  EXPECT_EQ(finish_reason("eog"), "stop");
  EXPECT_EQ(finish_reason("stop"), "stop");
}

json event_json(const std::string& ev) {
  EXPECT_EQ(ev.rfind("data: ", 0), 0u) << ev;
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  return json::parse(ev.substr(6, ev.size() - 8));
}

TEST(OpenAi, ChatResponsesAndChunks) {
  ResponseMeta m{Endpoint::kChat, "chatcmpl-1", 1700000000, "tiny", true};
  json whole = json::parse(completion_body(m, "hi there", "stop", 5, 2));
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "hi there");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(whole["usage"]["total_tokens"], 7);
  EXPECT_EQ(whole["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(json::parse(completion_body(m, "x", "stop", 5, 1, 4))["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  json open = event_json(sse_open(m));
  EXPECT_EQ(open["object"], "chat.completion.chunk");
  EXPECT_EQ(open["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(open["usage"].is_null());
  EXPECT_TRUE(open.contains("usage"));  // include_usage: null on every chunk
  json piece = event_json(sse_piece(m, "tok"));
  EXPECT_EQ(piece["choices"][0]["delta"]["content"], "tok");
  EXPECT_TRUE(piece["choices"][0]["finish_reason"].is_null());
  json fin = event_json(sse_finish(m, "length"));
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  json usage = event_json(sse_usage(m, 3, 4, 2));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  // Bytes that are not UTF-8 (a random model) are replaced, not thrown on.
  json bad = event_json(sse_piece(m, "\xff"));
  EXPECT_EQ(bad["choices"][0]["delta"]["content"], "\xEF\xBF\xBD");
}

TEST(OpenAi, CompletionResponsesModelsAndErrors) {
  ResponseMeta m{Endpoint::kCompletion, "cmpl-1", 1, "tiny", false};
  json whole = json::parse(completion_body(m, "abc", "length", 1, 3));
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "abc");
  EXPECT_TRUE(sse_open(m).empty());  // completions have no role chunk
  json piece = event_json(sse_piece(m, "d"));
  EXPECT_EQ(piece["choices"][0]["text"], "d");
  EXPECT_FALSE(piece.contains("usage"));
  json models = json::parse(models_body("tiny", 5));
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  for (int status : {400, 401, 404, 413, 503, 500}) {
    json e = json::parse(error_body(status, "why", status == 401 ? "invalid_api_key" : ""));
    EXPECT_EQ(e["error"]["message"], "why");
    EXPECT_TRUE(e["error"]["type"].is_string());
    EXPECT_TRUE(e["error"].contains("param"));
    EXPECT_EQ(e["error"]["code"].is_null(), status != 401);
  }
  EXPECT_EQ(json::parse(error_body(401, "k"))["error"]["type"], "authentication_error");
  EXPECT_EQ(json::parse(error_body(400, "k"))["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace lattice::serve
