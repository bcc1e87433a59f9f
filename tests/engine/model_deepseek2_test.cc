// deepseek2 (DeepSeek-V2/V3, Kimi K2) on one node: the general router (sigmoid, selection
// bias, grouped top-k, lowest id on ties), the hyper-parameters and their errors, the latent
// KV cache, and greedy text against llama.cpp (the node-llama-cpp oracle) on make-model files
// in both attention layouts (attn_k_b + attn_v_b, the older attn_kv_b) and both expert
// layouts (ffn_gate_exps + ffn_up_exps, ffn_gate_up_exps), with YaRN rope scaling.
#include <gtest/gtest.h>

#include "../require.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <unistd.h>

#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/router.h"
#include "lattice/engine/runtime/session.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "model_testlib.h"
#include "oracle_testlib.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;
constexpr float kInf = std::numeric_limits<float>::infinity();

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

struct Routed {
  std::vector<uint32_t> ids;
  std::vector<float> w;
};
Routed route(const RouteParams& p, std::vector<float> logits, const float* bias) {
  Routed r;
  r.ids.resize(p.k), r.w.resize(p.k);
  std::vector<uint32_t> order(p.n_expert);
  std::vector<float> sel(p.n_expert), groups(p.n_groups + 1);
  route_topk(p, logits.data(), bias, r.ids.data(), r.w.data(), order.data(), sel.data(), groups.data());
  return r;
}

TEST(RouterGeneral, SigmoidTiesGoToTheLowestExpertId) {
  const RouteParams p{.gating = ExpertGating::kSigmoid, .n_expert = 6, .k = 2, .norm = false, .scale = 1.0f};
  const auto r = route(p, {0.5f, 2.0f, 0.1f, 2.0f, 2.0f, -1.0f}, nullptr);  // three tied at the top
  EXPECT_EQ(r.ids, (std::vector<uint32_t>{1, 3}));
  EXPECT_NEAR(r.w[0], sigmoid(2.0f), 1e-6);
  EXPECT_NEAR(r.w[1], sigmoid(2.0f), 1e-6);
}

TEST(RouterGeneral, BiasChoosesButDoesNotWeigh) {
  const RouteParams p{.gating = ExpertGating::kSigmoid, .n_expert = 4, .k = 2, .norm = true, .scale = 2.5f};
  const std::vector<float> logits = {3.0f, 2.0f, 1.0f, 0.0f};
  const float bias[4] = {0.0f, 0.0f, 0.0f, 1.0f};  // lifts expert 3 over 1 and 2 for choosing
  const auto r = route(p, logits, bias);
  EXPECT_EQ(r.ids, (std::vector<uint32_t>{3, 0}));  // 0.5 + 1 > sigmoid(3) = 0.95
  const float a = sigmoid(0.0f), b = sigmoid(3.0f);
  EXPECT_NEAR(r.w[0], 2.5f * a / (a + b), 1e-6);  // unbiased probabilities, renormalized, scaled
  EXPECT_NEAR(r.w[1], 2.5f * b / (a + b), 1e-6);
}

TEST(RouterGeneral, GroupsScoreBySumOfTheirTwoBestAndMaskTheRest) {
  // 4 groups of 3; zero logits give sigmoid 0.5 everywhere, so the selection is 0.5 + bias.
  // Top-2 sums: g0 = 10.5 - 4.5 = 6, g1 = 4.5 + 3.5 = 8, g2 = 6.5 + 6.5 = 13, g3 = 1.5 + 0.5.
  // Groups 2 and 1 stay: expert 0, the best single one, is masked with its group.
  const RouteParams p{.gating = ExpertGating::kSigmoid, .n_expert = 12, .k = 3, .n_groups = 4, .groups_used = 2,
                      .norm = true, .scale = 1.0f};
  const std::vector<float> bias = {10, -5, -6, 4, 3, 2, 6, 6, 5, 1, 0, -1};
  const auto r = route(p, std::vector<float>(12, 0.0f), bias.data());
  EXPECT_EQ(r.ids, (std::vector<uint32_t>{6, 7, 8}));
  for (float w : r.w) EXPECT_NEAR(w, 1.0f / 3.0f, 1e-6);
  // With one group used, only group 2 is left; softmax gating over the same numbers as
  // logits puts group 0 first (its best expert holds nearly all the probability).
  const RouteParams p1{.gating = ExpertGating::kSigmoid, .n_expert = 12, .k = 2, .n_groups = 4, .groups_used = 1,
                       .norm = false, .scale = 1.0f};
  EXPECT_EQ(route(p1, std::vector<float>(12, 0.0f), bias.data()).ids, (std::vector<uint32_t>{6, 7}));
  const RouteParams ps{.gating = ExpertGating::kSoftmax, .n_expert = 12, .k = 2, .n_groups = 4, .groups_used = 1,
                       .norm = true, .scale = 1.0f};
  EXPECT_EQ(route(ps, bias, nullptr).ids, (std::vector<uint32_t>{0, 1}));
}

TEST(RouterGeneral, AFullyMaskedGroupIsNeverChosen) {
  // Group 1's experts are all masked (-inf selection, e.g. on a lost rank): with k larger than
  // the finite experts left in the chosen groups, the router still never takes a masked one
  // from an unchosen group, and the weights stay finite.
  const RouteParams p{.gating = ExpertGating::kSigmoid, .n_expert = 8, .k = 4, .n_groups = 2, .groups_used = 1,
                      .norm = true, .scale = 1.0f};
  const float bias[8] = {0, 0, 0, 0, -kInf, -kInf, -kInf, -kInf};
  const auto r = route(p, {1, 2, 3, 4, 9, 9, 9, 9}, bias);
  EXPECT_EQ(r.ids, (std::vector<uint32_t>{3, 2, 1, 0}));
  float sum = 0;
  for (float w : r.w) {
    EXPECT_TRUE(std::isfinite(w));
    sum += w;
  }
  EXPECT_NEAR(sum, 1.0f, 1e-6);
  // Masked inside the chosen group too: the group's finite experts first, then its masked
  // ones by lowest id, never the other group's.
  const float bias2[8] = {0, -kInf, -kInf, -kInf, -5, -5, -5, -5};
  const RouteParams p2{.gating = ExpertGating::kSigmoid, .n_expert = 8, .k = 3, .n_groups = 2, .groups_used = 1,
                       .norm = false, .scale = 1.0f};
  const auto r2 = route(p2, {0, 0, 0, 0, 0, 0, 0, 0}, bias2);
  EXPECT_EQ(r2.ids, (std::vector<uint32_t>{4, 5, 6}));  // group 1 (-4.5 + -4.5) beats group 0 (0.5 + -inf)
}

MakeModelOptions ds(const std::string& type) { return testing::small_deepseek2_options(type); }

TEST(Deepseek2, HyperParametersAsLlamaCppReadsThem) {
  auto mm = testing::make_mem_model(ds("f32"));
  ASSERT_TRUE(mm.model);
  const Hparams& h = mm.model->hparams();
  EXPECT_EQ(mm.model->arch().attention, AttentionKind::kMla);
  EXPECT_EQ(h.kv_lora_rank, 64u);
  EXPECT_EQ(h.q_lora_rank, 64u);
  EXPECT_EQ(h.mla_k_dim, 48u);
  EXPECT_EQ(h.mla_v_dim, 32u);
  EXPECT_EQ(h.nope_dim(), 32u);
  EXPECT_TRUE(h.mla_split_kv_b);
  EXPECT_EQ(h.n_layer_dense_lead, 1u);
  EXPECT_FALSE(h.moe_layer(0));
  EXPECT_TRUE(h.moe_layer(1));
  EXPECT_EQ(h.expert_gating, ExpertGating::kSigmoid);
  EXPECT_EQ(h.n_expert_groups, 4u);
  EXPECT_EQ(h.n_group_used, 2u);
  EXPECT_EQ(h.n_expert_shared, 1u);
  EXPECT_TRUE(h.expert_weights_norm);
  EXPECT_FLOAT_EQ(h.expert_weights_scale, 2.5f);
  // The file holds 0.1 * mscale_all_dim (0.0707); llama.cpp divides by 0.1 for deepseek2.
  EXPECT_NEAR(h.yarn_log_mul, 0.707f, 1e-6);
  EXPECT_FLOAT_EQ(h.rope.pos_scale, 0.25f);
  EXPECT_EQ(h.rope.ext_factor, 1.0f);
  // mscale = mscale_all_dim: the context factor is 1 / (1 + 0.1 ln 4), which rope multiplies back.
  EXPECT_NEAR(h.rope.mscale, 1.0f, 1e-6);
  const float ms = 1.0f + 0.1f * 0.707f * std::log(4.0f);
  EXPECT_NEAR(h.attn_scale, ms * ms / std::sqrt(48.0f), 1e-6);
  const LayerWeights& L1 = mm.model->layers()[1];
  EXPECT_TRUE(L1.moe());
  EXPECT_NE(L1.exp_probs_b, nullptr);
  EXPECT_EQ(L1.gate_shexp.n_rows(), 128u);
  EXPECT_EQ(L1.k_b.size(), 4u);
  EXPECT_EQ(L1.k_b[0].n_rows(), 64u);  // kv_lora rows of nope columns: absorbs q_nope
  EXPECT_EQ(L1.v_b[0].n_rows(), 32u);
  EXPECT_FALSE(mm.model->layers()[0].moe());
  EXPECT_EQ(mm.model->layers()[0].w_gate.n_rows(), 512u);
}

TEST(Deepseek2, ThePerLayerExpertWidthArrayIsRead) {
  auto plan = plan_model(ds("f32"));
  ASSERT_TRUE(plan.ok());
  plan->writer.metadata().set("deepseek2.expert_feed_forward_length", std::vector<uint32_t>{0, 128, 128});
  auto bytes = plan->writer.write_to_memory(plan->fill);
  ASSERT_TRUE(bytes.ok());
  auto file = GgufFile::parse(*bytes, "array");
  ASSERT_TRUE(file.ok());
  auto m = Model::bind(std::move(*file));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->hparams().n_ff_exp, 128u);
}

// Binds the ds("f32") file with one metadata change, or with a tensor renamed (same length:
// the file stays valid, the tensor is missing); returns the status.
Status bind_with(const std::function<void(GgufWriter&)>& edit, const std::string& rename = {}) {
  auto plan = plan_model(ds("f32"));
  if (!plan.ok()) return plan.status();
  if (edit) edit(plan->writer);
  auto bytes = plan->writer.write_to_memory(plan->fill);
  if (!bytes.ok()) return bytes.status();
  if (!rename.empty()) {
    std::string_view all(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    const size_t at = all.find(rename);
    if (at == std::string_view::npos) return NotFound("test: no tensor " + rename);
    (*bytes)[at + rename.size() - 8] = std::byte{'X'};  // "....weight" -> "....Xeight"
  }
  auto file = GgufFile::parse(*bytes, "edited");
  if (!file.ok()) return file.status();
  return Model::bind(std::move(*file)).status();
}

TEST(Deepseek2, MissingTensorsAndInconsistentKeysAreNamed) {
  struct Case {
    std::function<void(GgufWriter&)> edit;
    ErrorCode code;
    const char* names;
  } cases[] = {
      {[](GgufWriter& w) { w.metadata().erase("deepseek2.attention.kv_lora_rank"); }, ErrorCode::kNotFound,
       "deepseek2.attention.kv_lora_rank"},
      {[](GgufWriter& w) { w.metadata().set("deepseek2.attention.key_length", uint32_t{99}); }, ErrorCode::kCorrupt,
       "deepseek2.attention.key_length"},
      {[](GgufWriter& w) { w.metadata().erase("deepseek2.attention.value_length_mla"); }, ErrorCode::kNotFound,
       "deepseek2.attention.value_length_mla"},
      {[](GgufWriter& w) { w.metadata().set("deepseek2.expert_group_count", uint32_t{3}); }, ErrorCode::kCorrupt,
       "deepseek2.expert_group_count"},
      {[](GgufWriter& w) { w.metadata().set("deepseek2.expert_group_used_count", uint32_t{4}); }, ErrorCode::kCorrupt,
       "deepseek2.expert_group_used_count"},
      {[](GgufWriter& w) { w.metadata().set("deepseek2.expert_gating_func", uint32_t{3}); }, ErrorCode::kUnavailable,
       "deepseek2.expert_gating_func"},
      {[](GgufWriter& w) { w.metadata().set("deepseek2.leading_dense_block_count", uint32_t{9}); },
       ErrorCode::kCorrupt, "deepseek2.leading_dense_block_count"},
      {[](GgufWriter& w) { w.metadata().set("deepseek2.rope.scaling.type", std::string("longrope")); },
       ErrorCode::kUnavailable, "deepseek2.rope.scaling.type"},
      {nullptr, ErrorCode::kNotFound, "blk.1.attn_k_b.weight"},
      {nullptr, ErrorCode::kNotFound, "blk.2.attn_kv_a_norm.weight"},
      {nullptr, ErrorCode::kNotFound, "blk.2.ffn_up_shexp.weight"},
      {nullptr, ErrorCode::kNotFound, "blk.0.ffn_gate.weight"},
  };
  for (const Case& c : cases) {
    const Status st = c.edit ? bind_with(c.edit) : bind_with(nullptr, c.names);
    EXPECT_EQ(st.code(), c.code) << c.names << ": " << st.to_string();
    EXPECT_NE(st.to_string().find(c.names), std::string::npos) << st.to_string();
  }
}

TEST(Deepseek2, TheCacheHoldsOnlyTheLatentAndTheRopeKey) {
  auto mm = testing::make_mem_model(ds("f32"));
  ASSERT_TRUE(mm.model);
  SoloGroup solo;
  auto f = Forward::create(*mm.model, solo, {.n_threads = 1, .n_batch = 16, .max_items = 1, .n_ctx = 64});
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto seq = (*f)->new_sequence();
  ASSERT_TRUE(seq.ok());
  const Hparams& h = mm.model->hparams();
  EXPECT_EQ((*seq)->kv_bytes(), size_t{64} * h.n_layer * (h.kv_lora_rank + h.rope.n_rot) * sizeof(float));
  EXPECT_EQ((*seq)->kv_bytes() / 64, size_t{3} * (64 + 16) * 4);
}

const std::vector<int32_t> kPrompt = {257, 306, 111, 393, 286};

TEST(Deepseek2, PrefillInOneStepEqualsTokenByToken) {
  auto mm = testing::make_mem_model(ds("f32"));
  ASSERT_TRUE(mm.model);
  SoloGroup solo;
  auto f = Forward::create(*mm.model, solo, {.n_threads = 2, .n_batch = 16, .max_items = 1, .n_ctx = 32});
  ASSERT_TRUE(f.ok());
  auto a = std::move(*(*f)->new_sequence()), b = std::move(*(*f)->new_sequence());
  StepItem all{.seq = a.get(), .tokens = kPrompt};
  ASSERT_TRUE((*f)->step(std::span<const StepItem>(&all, 1)).ok());
  const std::vector<float> one_step((*f)->logits(0).begin(), (*f)->logits(0).end());
  for (size_t i = 0; i < kPrompt.size(); ++i) {
    StepItem it{.seq = b.get(), .tokens = std::span<const int32_t>(&kPrompt[i], 1)};
    ASSERT_TRUE((*f)->step(std::span<const StepItem>(&it, 1)).ok());
  }
  const auto last = (*f)->logits(0);
  ASSERT_EQ(last.size(), one_step.size());
  for (size_t v = 0; v < last.size(); ++v) EXPECT_NEAR(last[v], one_step[v], 1e-4) << v;
}

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("lattice-ds2-test-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
} temp;

struct Variant {
  const char* name;
  const char* type;
  bool fused_kv_b, fused_gate_up;
};

class Deepseek2LlamaCpp : public ::testing::TestWithParam<Variant> {};

TEST_P(Deepseek2LlamaCpp, GreedyTextAgrees) {
  if (!testing::oracle_available())
    LATTICE_SKIP_OR_FAIL("oracle", "the llama.cpp oracle is missing: tests/node/node_modules absent (run scripts/setup.sh)");
  const Variant v = GetParam();
  MakeModelOptions o = ds(v.type);
  o.fused_kv_b = v.fused_kv_b;
  o.fused_gate_up = v.fused_gate_up;
  const std::string path = (temp.dir / (std::string(v.name) + ".gguf")).string();
  ASSERT_TRUE(make_model(o, path).ok());
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->hparams().mla_split_kv_b, !v.fused_kv_b);
  const auto ours = testing::greedy_tokens(**m, kPrompt, 32);
  auto oracle = testing::oracle_greedy(path, kPrompt, 32);
  ASSERT_TRUE(oracle.ok()) << oracle.status().to_string();
  const std::vector<int32_t>& theirs = *oracle;
  if (std::string(v.type) == "f32") {
    EXPECT_EQ(theirs, ours) << v.name;
    return;
  }
  // Quantized: activations are rounded differently (docs/NUMERICS.md); the first 16 bytes of
  // text must agree.
  auto tok = tokenizer_from_gguf((*m)->file());
  ASSERT_TRUE(tok.ok());
  const std::string a = tok->decode(ours), b = tok->decode(theirs);
  ASSERT_GE(a.size(), 16u);
  EXPECT_EQ(a.substr(0, 16), b.substr(0, 16)) << v.name;
  size_t same = 0;
  while (same < ours.size() && ours[same] == theirs[same]) ++same;
  std::printf("[ info ] deepseek2 %s: %zu of 32 greedy tokens identical to llama.cpp's\n", v.name, same);
}

INSTANTIATE_TEST_SUITE_P(Files, Deepseek2LlamaCpp,
                         ::testing::Values(Variant{"f32_split", "f32", false, false},
                                           Variant{"f32_fused_kv_b", "f32", true, false},
                                           Variant{"f32_fused_gate_up", "f32", false, true},
                                           Variant{"q8_0", "q8_0", false, false}),
                         [](const auto& info) { return std::string(info.param.name); });
// Q4_0: the first greedy token differs from llama.cpp's, because llama.cpp's Q4_0 products land
// 0.25 nats from the exact products of the same weights where its top five lie within 0.083;
// lattice keeps the exact answer. quant_deepseek2_q4_test.cc checks that against the file's
// dequantized F32 twin (with the figures), so this file has no Q4_0 case.

}  // namespace
}  // namespace lattice::engine

namespace lattice::engine {
namespace {

// A file lattice did not write: tests/engine/deepseek2_gguf_py.py lays out a deepseek2 model
// with llama.cpp's gguf-py as its converter does (split k_b / v_b from a kv_b, 3-D experts,
// sigmoid groups, YaRN); greedy tokens must equal llama.cpp's for 32 tokens (F32).
TEST(Deepseek2GgufPyLlamaCpp, AFileWrittenByGgufPyAgreesWithLlamaCpp) {
  if (!testing::oracle_available())
    LATTICE_SKIP_OR_FAIL("oracle", "the llama.cpp oracle is missing: tests/node/node_modules absent (run scripts/setup.sh)");
  const fs::path src(LATTICE_SOURCE_DIR);
  if (!fs::exists(src / "scripts" / "gguf_py.sh"))
    LATTICE_SKIP_OR_FAIL("oracle", "scripts/gguf_py.sh (gguf-py from the oracle's bundle) is absent");
  const std::string path = (temp.dir / "gguf-py-deepseek2.gguf").string();
  const Status made = testing::write_gguf_py_deepseek2(path);
  ASSERT_TRUE(made.ok()) << made.to_string();
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const std::vector<int32_t> prompt = {104, 101, 108, 108, 111, 32, 116, 104, 101, 114, 101};  // "hello there"
  const auto ours = testing::greedy_tokens(**m, prompt, 32);
  auto theirs = testing::oracle_greedy(path, prompt, 32);
  ASSERT_TRUE(theirs.ok()) << theirs.status().to_string();
  EXPECT_EQ(*theirs, ours);
}

}  // namespace
}  // namespace lattice::engine
