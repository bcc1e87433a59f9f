// The one forward pass: a step of B sequences gives each the logits it gets alone (bit for bit
// on quantized weights, whose block products are exact; within float reassociation on F32),
// a prompt chunk mixed into a decode step changes nothing, and bad steps are refused whole.
#include <gtest/gtest.h>

#include <cmath>

#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/session.h"
#include "model_testlib.h"

namespace lattice::engine {
namespace {

MakeModelOptions shape(const std::string& type, const std::string& arch = "llama") {
  MakeModelOptions o;
  o.arch = arch;
  o.dim = 128;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.ffn = 352;
  o.vocab = 512;
  o.type = type;
  o.pure = true;
  o.seed = 11;
  o.threads = 1;
  return o;
}

// Greedy tokens and the logits before each, from one Session (the reference).
std::vector<std::vector<float>> alone(const Model& m, std::vector<int32_t> prompt, int steps, uint32_t threads) {
  std::vector<std::vector<float>> out;
  auto s = Session::create(m, {.n_ctx = 64, .n_threads = threads});
  EXPECT_TRUE(s.ok());
  EXPECT_TRUE((*s)->prefill(prompt).ok());
  for (int i = 0; i < steps; ++i) {
    auto lg = (*s)->logits();
    out.emplace_back(lg.begin(), lg.end());
    auto t = (*s)->argmax();
    EXPECT_TRUE(t.ok());
    EXPECT_TRUE((*s)->decode(*t).ok());
  }
  return out;
}

void expect_batched_equals_alone(const std::string& type, const std::string& arch, double tol) {
  auto mm = testing::make_mem_model(shape(type, arch));
  ASSERT_TRUE(mm.model);
  const Model& m = *mm.model;
  const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9}, {2, 7, 7, 30, 4}, {3}, {100, 101, 102, 103}};
  const int steps = 12, B = static_cast<int>(prompts.size());
  std::vector<std::vector<std::vector<float>>> ref;
  for (const auto& p : prompts) ref.push_back(alone(m, p, steps, 2));

  SoloGroup solo;
  auto f = Forward::create(m, solo, {.n_threads = 2, .n_batch = 64, .max_items = 4, .n_ctx = 64});
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::vector<std::unique_ptr<Sequence>> seq;
  for (int i = 0; i < B; ++i) seq.push_back(std::move(*(*f)->new_sequence()));
  // The prompts: all four in one step, as chunks of different lengths.
  std::vector<StepItem> items(B);
  for (int i = 0; i < B; ++i) items[i].seq = seq[i].get(), items[i].tokens = prompts[i];
  ASSERT_TRUE((*f)->step(items).ok());
  std::vector<int32_t> next(B);
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < B; ++i) {
      const auto lg = (*f)->logits(i);
      ASSERT_EQ(lg.size(), ref[i][s].size());
      for (size_t v = 0; v < lg.size(); ++v)
        ASSERT_NEAR(lg[v], ref[i][s][v], tol * (1 + std::fabs(ref[i][s][v]))) << "seq " << i << " step " << s;
    }
    std::vector<Sampler*> greedy(B, nullptr);
    auto t = (*f)->choose(greedy);
    ASSERT_TRUE(t.ok());
    next = *t;
    for (int i = 0; i < B; ++i) items[i].tokens = std::span<const int32_t>(&next[i], 1);
    ASSERT_TRUE((*f)->step(items).ok());
  }
  for (int i = 0; i < B; ++i) EXPECT_EQ(seq[i]->n_past(), prompts[i].size() + steps);
}

TEST(Forward, BatchedStepsGiveEachSequenceItsOwnLogitsQ8_0) { expect_batched_equals_alone("q8_0", "llama", 0); }
TEST(Forward, BatchedStepsGiveEachSequenceItsOwnLogitsQ4_0Qwen3) { expect_batched_equals_alone("q4_0", "qwen3", 0); }
TEST(Forward, BatchedStepsGiveEachSequenceItsOwnLogitsF32Qwen2) { expect_batched_equals_alone("f32", "qwen2", 1e-4); }

TEST(Forward, APromptChunkMixedIntoADecodeStepChangesNothing) {
  auto mm = testing::make_mem_model(shape("q8_0"));
  ASSERT_TRUE(mm.model);
  const auto ref_a = alone(*mm.model, {4, 8, 15}, 6, 1);
  const auto ref_b = alone(*mm.model, {16, 23, 42, 5, 6, 7, 8, 9}, 1, 1);
  SoloGroup solo;
  auto f = Forward::create(*mm.model, solo, {.n_threads = 1, .n_batch = 16, .max_items = 2, .n_ctx = 64});
  ASSERT_TRUE(f.ok());
  auto a = std::move(*(*f)->new_sequence());
  auto b = std::move(*(*f)->new_sequence(32));
  const std::vector<int32_t> pa = {4, 8, 15}, pb = {16, 23, 42, 5, 6, 7, 8, 9};
  StepItem ia{.seq = a.get(), .tokens = pa};
  ASSERT_TRUE((*f)->step(std::span<const StepItem>(&ia, 1)).ok());
  // Sequence a decodes while b's prompt comes in two chunks beside it.
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(std::vector<float>((*f)->logits(0).begin(), (*f)->logits(0).end()), ref_a[s]) << s;
    auto t = (*f)->argmax(0);
    ASSERT_TRUE(t.ok());
    const int32_t tok = *t;
    std::vector<StepItem> items = {{.seq = a.get(), .tokens = std::span<const int32_t>(&tok, 1)}};
    if (s < 2) items.push_back({.seq = b.get(), .tokens = std::span<const int32_t>(pb).subspan(s * 4, 4)});
    ASSERT_TRUE((*f)->step(items).ok());
    if (s == 1) {
      EXPECT_EQ(std::vector<float>((*f)->logits(1).begin(), (*f)->logits(1).end()), ref_b[0]);
    }
  }
  EXPECT_EQ(b->n_past(), 8u);
}

TEST(Forward, BadStepsAreRefusedWhole) {
  auto mm = testing::make_mem_model(shape("q8_0"));
  ASSERT_TRUE(mm.model);
  SoloGroup solo;
  auto f = Forward::create(*mm.model, solo, {.n_threads = 1, .n_batch = 8, .max_items = 2, .n_ctx = 16});
  ASSERT_TRUE(f.ok());
  auto a = std::move(*(*f)->new_sequence());
  const std::vector<int32_t> ok = {1, 2}, nine(9, 3), bad = {1, 9999};
  auto code = [&](std::vector<StepItem> items) { return (*f)->step(items).code(); };
  EXPECT_EQ(code({}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{.seq = a.get(), .tokens = nine}}), ErrorCode::kInvalidArgument);  // > n_batch rows
  EXPECT_EQ(code({{.seq = a.get(), .tokens = bad}}), ErrorCode::kInvalidArgument);   // outside the vocabulary
  EXPECT_EQ(code({{.seq = a.get(), .tokens = ok}, {.seq = a.get(), .tokens = ok}}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code({{.seq = a.get(), .tokens = {}}}), ErrorCode::kInvalidArgument);
  EXPECT_EQ(a->n_past(), 0u);  // nothing appended
  EXPECT_EQ((*f)->new_sequence(17).status().code(), ErrorCode::kInvalidArgument);
  // Another forward pass's sequence.
  auto g = Forward::create(*mm.model, solo, {.n_threads = 1, .n_batch = 8, .max_items = 1, .n_ctx = 16});
  ASSERT_TRUE(g.ok());
  auto other = std::move(*(*g)->new_sequence());
  EXPECT_EQ(code({{.seq = other.get(), .tokens = ok}}), ErrorCode::kInvalidArgument);
  // A shard's group must match it.
  LoadOptions lo;
  lo.shard = {.rank = 1, .world = 2, .weights = {}};
  auto half = testing::make_mem_model(shape("q8_0"), lo);
  ASSERT_TRUE(half.model);
  EXPECT_EQ(Forward::create(*half.model, solo, {}).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace lattice::engine
