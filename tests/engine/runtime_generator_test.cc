// Generator: concurrent requests get the tokens they get alone, with their prompts chunked
// into decode steps; streamed pieces add up to the text and never split a character; stops at
// end-of-generation tokens, stop strings and the length; chat mode wraps the prompt in the
// template; cancel frees the slot; a full queue is refused.
#include <gtest/gtest.h>

#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "model_testlib.h"

namespace lattice::engine {
namespace {

struct Fixture {
  testing::MemModel mm;
  std::optional<Tokenizer> tok;
  SoloGroup solo;
  std::unique_ptr<Forward> forward;
};

std::unique_ptr<Fixture> make(uint32_t max_items, const std::string& arch = "llama") {
  auto f = std::make_unique<Fixture>();
  MakeModelOptions o;
  o.arch = arch;
  o.dim = 128;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 352;
  o.vocab = 512;
  o.type = "q8_0";
  o.pure = true;
  o.seed = 3;
  o.threads = 1;
  f->mm = testing::make_mem_model(o);
  EXPECT_TRUE(f->mm.model);
  auto t = tokenizer_from_gguf(f->mm.model->file());
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  f->tok.emplace(std::move(*t));
  auto fw = Forward::create(*f->mm.model, f->solo, {.n_threads = 1, .n_batch = 32, .max_items = max_items, .n_ctx = 96});
  EXPECT_TRUE(fw.ok());
  f->forward = std::move(*fw);
  return f;
}

GenerationRequest greedy(const Tokenizer& tok, const std::string& text, uint32_t n) {
  GenerationRequest r;
  r.prompt = tok.encode(text);
  r.n_predict = n;
  r.stop_at_eog = false;
  r.sampler.temperature = 0;
  return r;
}

TEST(Generator, ConcurrentRequestsGetTheTokensTheyGetAlone) {
  auto f = make(4);
  const std::vector<std::string> texts = {"the cluster", "one computer on a desk of many machines", "hi", "x y z w"};
  std::vector<GenerateResult> alone;
  for (const auto& t : texts) {
    auto g = Generator::create(*f->forward, *f->tok, {.max_seqs = 1});
    ASSERT_TRUE(g.ok());
    auto r = (*g)->generate(greedy(*f->tok, t, 20));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    alone.push_back(std::move(*r));
  }
  // All four at once, prompts fed 3 tokens a step beside the running decodes.
  auto g = Generator::create(*f->forward, *f->tok, {.max_seqs = 4, .prefill_chunk = 3});
  ASSERT_TRUE(g.ok());
  std::vector<int> ids;
  std::vector<std::string> streamed(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    auto id = (*g)->submit(greedy(*f->tok, texts[i], 20), [&, i](int, std::string_view p) { streamed[i] += p; });
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
    ASSERT_TRUE((*g)->step().ok());  // requests arrive while others run
  }
  int steps = 0;
  while ((*g)->busy() && steps < 1000) {
    ASSERT_TRUE((*g)->step().ok());
    ++steps;
  }
  for (size_t i = 0; i < texts.size(); ++i) {
    auto r = (*g)->take(ids[i]);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->tokens, alone[i].tokens) << texts[i];
    EXPECT_EQ(r->text, alone[i].text);
    EXPECT_EQ(streamed[i], r->text);
    EXPECT_EQ(r->stop_reason, "length");
  }
}

TEST(Generator, StreamedPiecesAreWholeCharactersAndAddUpToTheText) {
  auto f = make(1);
  auto g = Generator::create(*f->forward, *f->tok, {});
  ASSERT_TRUE(g.ok());
  std::vector<std::string> pieces;
  GenerationRequest q = greedy(*f->tok, "é ü 雪", 40);
  q.sampler.temperature = 1.0f;  // wander over the vocabulary, byte tokens included
  q.sampler.top_k = 0;
  q.sampler.top_p = 1;
  q.sampler.min_p = 0;
  q.sampler.seed = 7;
  auto r = (*g)->generate(q, [&](std::string_view p) { pieces.emplace_back(p); });
  ASSERT_TRUE(r.ok());
  std::string joined;
  for (const auto& p : pieces) {
    EXPECT_FALSE(p.empty());
    // A piece never ends inside a multi-byte character.
    size_t k = 0;
    while (k < p.size() && k < 4 && (static_cast<unsigned char>(p[p.size() - 1 - k]) & 0xC0) == 0x80) ++k;
    if (k < p.size()) {
      const unsigned char lead = static_cast<unsigned char>(p[p.size() - 1 - k]);
      const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
      EXPECT_EQ(k + 1, need) << "piece ends mid-character";
    }
    joined += p;
  }
  EXPECT_EQ(joined, r->text);
}

TEST(Generator, StopsAtAnEndOfGenerationToken) {
  auto f = make(1);
  auto g = Generator::create(*f->forward, *f->tok, {});
  ASSERT_TRUE(g.ok());
  auto free_run = (*g)->generate(greedy(*f->tok, "once upon", 12));
  ASSERT_TRUE(free_run.ok());
  ASSERT_GE(free_run->tokens.size(), 6u);
  // The same file with the 5th generated token declared end-of-sequence.
  auto spec = tokenizer_spec_from_gguf(f->mm.model->file());
  ASSERT_TRUE(spec.ok());
  const int32_t eos = free_run->tokens[4];
  spec->eos_id = eos;
  auto tok = Tokenizer::create(*spec);
  ASSERT_TRUE(tok.ok());
  size_t first = 0;
  while (free_run->tokens[first] != eos) ++first;  // it may occur earlier
  auto g2 = Generator::create(*f->forward, *tok, {});
  ASSERT_TRUE(g2.ok());
  GenerationRequest q = greedy(*tok, "once upon", 12);
  q.stop_at_eog = true;
  auto r = (*g2)->generate(q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_reason, "eog");
  EXPECT_EQ(r->tokens, std::vector<int32_t>(free_run->tokens.begin(), free_run->tokens.begin() + first));
}

TEST(Generator, StopsBeforeAStopStringAndNeverStreamsIt) {
  auto f = make(1);
  auto g = Generator::create(*f->forward, *f->tok, {});
  ASSERT_TRUE(g.ok());
  auto free_run = (*g)->generate(greedy(*f->tok, "the cluster", 24));
  ASSERT_TRUE(free_run.ok());
  ASSERT_GE(free_run->text.size(), 12u);
  const std::string stop = free_run->text.substr(8, 3);
  const size_t at = free_run->text.find(stop);
  GenerationRequest q = greedy(*f->tok, "the cluster", 24);
  q.stop = {stop, "\x01never"};
  std::string streamed;
  auto r = (*g)->generate(q, [&](std::string_view p) { streamed += p; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_reason, "stop");
  EXPECT_EQ(r->text, free_run->text.substr(0, at));
  EXPECT_EQ(streamed, r->text);
}

TEST(Generator, ChatModeWrapsThePromptInTheTemplate) {
  auto f = make(1, "qwen3");
  GenerateOptions go;
  go.prompt = "hello";
  go.chat = true;
  const auto chat = prompt_tokens(*f->tok, go);
  go.chat = false;
  const auto plain = prompt_tokens(*f->tok, go);
  EXPECT_GT(chat.size(), plain.size() + 4);  // <|im_start|>user ... <|im_end|> <|im_start|>assistant
  auto s = Session::create(*f->mm.model, {.n_ctx = 64});
  ASSERT_TRUE(s.ok());
  go.chat = true;
  go.n_predict = 6;
  go.sampler.temperature = 0;
  go.stop_at_eog = false;
  auto r = generate(**s, *f->tok, go);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->prompt_tokens, chat);
  EXPECT_EQ(r->tokens.size(), 6u);
}

TEST(Generator, CancelFreesTheSlotAndAFullQueueIsRefused) {
  auto f = make(1);
  auto g = Generator::create(*f->forward, *f->tok, {.max_seqs = 1, .max_queue = 2});
  ASSERT_TRUE(g.ok());
  auto a = (*g)->submit(greedy(*f->tok, "a", 50));
  auto b = (*g)->submit(greedy(*f->tok, "b", 5));
  auto c = (*g)->submit(greedy(*f->tok, "c", 5));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ((*g)->submit(greedy(*f->tok, "d", 5)).status().code(), ErrorCode::kResourceExhausted);
  ASSERT_TRUE((*g)->step().ok());
  (*g)->cancel(*a);
  int steps = 0;
  while ((*g)->busy() && steps < 200) {
    ASSERT_TRUE((*g)->step().ok());
    ++steps;
  }
  auto ra = (*g)->take(*a);
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->stop_reason, "cancelled");
  EXPECT_LT(ra->tokens.size(), 50u);
  EXPECT_EQ((*g)->take(*b)->tokens.size(), 5u);
  EXPECT_EQ((*g)->take(*c)->tokens.size(), 5u);
  EXPECT_EQ((*g)->take(*c).status().code(), ErrorCode::kNotFound);  // once
}

TEST(Generator, BadRequestsAreRefused) {
  auto f = make(1);
  auto g = Generator::create(*f->forward, *f->tok, {});
  ASSERT_TRUE(g.ok());
  GenerationRequest q = greedy(*f->tok, "x", 4);
  q.prompt.clear();
  EXPECT_EQ((*g)->submit(q).status().code(), ErrorCode::kInvalidArgument);
  q = greedy(*f->tok, "x", 200);  // beyond the context of 96
  EXPECT_EQ((*g)->submit(q).status().code(), ErrorCode::kInvalidArgument);
  q = greedy(*f->tok, "x", 4);
  q.prompt.push_back(100000);
  EXPECT_EQ((*g)->submit(q).status().code(), ErrorCode::kInvalidArgument);
  q = greedy(*f->tok, "x", 4);
  q.sampler.temperature = -1;
  EXPECT_EQ((*g)->submit(q).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Generator::create(*f->forward, *f->tok, {.max_seqs = 2}).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace lattice::engine
