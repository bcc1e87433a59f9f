// The Generator's prefix cache: a request sharing leading tokens with what a free slot holds
// prefills only the rest, and gets the tokens (and, under the Forward, the logits, to the bit)
// it gets from an empty slot: alone, batched with others, after a cancel mid-prefill, in the
// next turn of a chat (whose prompt holds the last answer), and resumed.
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

std::unique_ptr<Fixture> make(uint32_t max_items) {
  auto f = std::make_unique<Fixture>();
  MakeModelOptions o;
  o.dim = 128;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 352;
  o.vocab = 512;
  o.type = "q4_0";
  o.seed = 5;
  o.threads = 1;
  f->mm = testing::make_mem_model(o);
  EXPECT_TRUE(f->mm.model);
  auto t = tokenizer_from_gguf(f->mm.model->file());
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  f->tok.emplace(std::move(*t));
  auto fw = Forward::create(*f->mm.model, f->solo, {.n_threads = 2, .n_batch = 64, .max_items = max_items, .n_ctx = 160});
  EXPECT_TRUE(fw.ok());
  f->forward = std::move(*fw);
  return f;
}

GenerationRequest request(const Tokenizer& tok, const std::string& text, uint32_t n, uint64_t seed = 0) {
  GenerationRequest r;
  r.prompt = tok.encode(text);
  r.n_predict = n;
  r.stop_at_eog = false;
  if (seed) {  // sampled: a token depends on the whole distribution, not only its top
    r.sampler.temperature = 0.9f;
    r.sampler.top_k = 0;
    r.sampler.top_p = 1;
    r.sampler.min_p = 0;
    r.sampler.seed = seed;
  } else {
    r.sampler.temperature = 0;
  }
  return r;
}

// Each request alone on an empty slot (a generator without the cache).
GenerateResult alone(Fixture& f, const GenerationRequest& q) {
  auto g = Generator::create(*f.forward, *f.tok, {.max_seqs = 1, .prefill_chunk = 7, .prefix_cache = false});
  EXPECT_TRUE(g.ok());
  auto r = (*g)->generate(q);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->cached_tokens, 0u);
  return std::move(*r);
}

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

TEST(PrefixCache, KeptPositionsGiveTheLogitsOfAFreshPrefill) {
  auto f = make(2);
  std::vector<int32_t> toks = f->tok->encode("a long shared system prompt, then the user's own question here");
  ASSERT_GT(toks.size(), 12u);
  auto a = f->forward->new_sequence();
  auto b = f->forward->new_sequence();
  ASSERT_TRUE(a.ok() && b.ok());
  // a: the whole prompt in one step. b: another prompt sharing the first 9 tokens, truncated
  // back to them, then the rest of the first prompt in chunks of 1 and 3 rows, beside a.
  Status st = f->forward->step(std::vector<StepItem>{{.seq = a->get(), .tokens = toks}});
  ASSERT_TRUE(st.ok()) << st.to_string() << " (" << toks.size() << " tokens)";
  std::vector<float> want(f->forward->logits(0).begin(), f->forward->logits(0).end());
  std::vector<int32_t> other(toks.begin(), toks.begin() + 9);
  other.push_back(7);
  other.push_back(8);
  ASSERT_TRUE(f->forward->step(std::vector<StepItem>{{.seq = b->get(), .tokens = other}}).ok());
  (*b)->truncate(9);
  size_t at = 9;
  int32_t tok_a = 3;
  while (at < toks.size()) {
    const size_t n = std::min<size_t>(at == 9 ? 1 : 3, toks.size() - at);
    std::vector<StepItem> items{{.seq = b->get(), .tokens = std::span<const int32_t>(toks.data() + at, n)},
                                {.seq = a->get(), .tokens = std::span<const int32_t>(&tok_a, 1)}};
    ASSERT_TRUE(f->forward->step(items).ok());
    at += n;
  }
  EXPECT_EQ((*b)->n_past(), toks.size());
  auto got = f->forward->logits(0);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
}

TEST(PrefixCache, RepeatedAndSharedPromptsReuseTheSlotAndGetTheSameTokens) {
  auto f = make(1);
  auto g = Generator::create(*f->forward, *f->tok, {.max_seqs = 1, .prefill_chunk = 7});
  ASSERT_TRUE(g.ok());
  const std::string head = "You are a helpful assistant on a cluster. User: ";
  const GenerationRequest q1 = request(*f->tok, head + "Request 1: tell me about links.", 12);
  const GenerationRequest q2 = request(*f->tok, head + "Request 2: tell me about links.", 12, /*seed=*/11);
  auto r1 = (*g)->generate(q1);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->cached_tokens, 0u);
  EXPECT_EQ(r1->tokens, alone(*f, q1).tokens);
  // The same prompt again: all but its last token are kept.
  auto again = (*g)->generate(q1);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->cached_tokens, q1.prompt.size() - 1);
  EXPECT_EQ(again->tokens, r1->tokens);
  // Another prompt with the same head: the shared run is kept.
  auto r2 = (*g)->generate(q2);
  ASSERT_TRUE(r2.ok());
  const size_t shared = common_prefix(q1.prompt, q2.prompt);
  ASSERT_GT(shared, 5u);
  EXPECT_EQ(r2->cached_tokens, shared);
  EXPECT_EQ(r2->tokens, alone(*f, q2).tokens);
  // The next turn of a chat: the prompt holds the last answer's tokens, which the slot holds.
  GenerationRequest q3 = q2;
  q3.prompt.insert(q3.prompt.end(), r2->tokens.begin(), r2->tokens.end());
  const std::vector<int32_t> more = f->tok->encode(" And then?");
  q3.prompt.insert(q3.prompt.end(), more.begin(), more.end());
  auto r3 = (*g)->generate(q3);
  ASSERT_TRUE(r3.ok());
  // The last answer token was chosen but never fed: one less than prompt + answer.
  EXPECT_EQ(r3->cached_tokens, q2.prompt.size() + r2->tokens.size() - 1);
  EXPECT_EQ(r3->tokens, alone(*f, q3).tokens);
}

TEST(PrefixCache, BatchedRequestsTakeTheSlotWithTheLongestMatch) {
  auto f = make(3);
  auto g = Generator::create(*f->forward, *f->tok, {.max_seqs = 3, .prefill_chunk = 5});
  ASSERT_TRUE(g.ok());
  const std::vector<std::string> texts = {"the first of the machines on the rack says hello",
                                          "a second prompt about the network between the hosts",
                                          "and a third one on memory and the page cache"};
  std::vector<GenerationRequest> qs;
  for (size_t i = 0; i < texts.size(); ++i) qs.push_back(request(*f->tok, texts[i], 10, i % 2 ? 0 : 20 + i));
  auto run_all = [&](const std::vector<GenerationRequest>& batch) {
    std::vector<int> ids;
    for (const auto& q : batch) {
      auto id = (*g)->submit(q);
      EXPECT_TRUE(id.ok());
      ids.push_back(*id);
      EXPECT_TRUE((*g)->step().ok());  // arriving while the others run
    }
    for (int steps = 0; (*g)->busy() && steps < 1000; ++steps) EXPECT_TRUE((*g)->step().ok());
    std::vector<GenerateResult> out;
    for (int id : ids) out.push_back(*(*g)->take(id));
    return out;
  };
  auto first = run_all(qs);
  for (size_t i = 0; i < qs.size(); ++i) {
    EXPECT_EQ(first[i].cached_tokens, 0u);
    EXPECT_EQ(first[i].tokens, alone(*f, qs[i]).tokens) << texts[i];
  }
  // The same prompts in another order, each with a new ending: each finds its own slot.
  std::vector<GenerationRequest> next;
  for (size_t i : {2, 0, 1}) {
    GenerationRequest q = qs[i];
    q.prompt.push_back(static_cast<int32_t>(100 + i));
    q.prompt.push_back(static_cast<int32_t>(200 + i));
    next.push_back(q);
  }
  auto second = run_all(next);
  for (size_t i = 0; i < next.size(); ++i) {
    EXPECT_EQ(second[i].cached_tokens, next[i].prompt.size() - 2) << i;
    EXPECT_EQ(second[i].tokens, alone(*f, next[i]).tokens) << i;
  }
}

TEST(PrefixCache, ACancelMidPrefillKeepsWhatWasFedAndResumedRequestsMatch) {
  auto f = make(1);
  auto g = Generator::create(*f->forward, *f->tok, {.max_seqs = 1, .prefill_chunk = 4});
  ASSERT_TRUE(g.ok());
  const GenerationRequest q = request(*f->tok, "a prompt of a fair length, so that it takes several chunks", 8);
  ASSERT_GT(q.prompt.size(), 9u);
  auto id = (*g)->submit(q);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE((*g)->step().ok());
  ASSERT_TRUE((*g)->step().ok());  // 8 tokens fed
  (*g)->cancel(*id);
  for (int steps = 0; (*g)->busy() && steps < 10; ++steps) ASSERT_TRUE((*g)->step().ok());
  EXPECT_EQ((*g)->take(*id)->stop_reason, "cancelled");
  auto r = (*g)->generate(q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cached_tokens, 8u);
  const GenerateResult want = alone(*f, q);
  EXPECT_EQ(r->tokens, want.tokens);
  // Resumed from its 3rd token (as after a recovery): the cache holds prompt + answer.
  GenerationRequest resumed = q;
  resumed.resume_tokens.assign(want.tokens.begin(), want.tokens.begin() + 3);
  auto whole = (*g)->generate(q);  // leaves the whole run in the slot
  ASSERT_TRUE(whole.ok());
  auto rr = (*g)->generate(resumed);
  ASSERT_TRUE(rr.ok());
  EXPECT_EQ(rr->cached_tokens, q.prompt.size() + 2);
  EXPECT_EQ(rr->tokens, want.tokens);
}

TEST(PrefixCache, OffMeansEveryPromptIsPrefilled) {
  auto f = make(1);
  auto g = Generator::create(*f->forward, *f->tok, {.max_seqs = 1, .prefix_cache = false});
  ASSERT_TRUE(g.ok());
  const GenerationRequest q = request(*f->tok, "the same words twice", 4);
  ASSERT_TRUE((*g)->generate(q).ok());
  auto r = (*g)->generate(q);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->cached_tokens, 0u);
}

}  // namespace
}  // namespace lattice::engine
