// Every architecture, layer by layer, against the double-precision reference of
// model_testlib.cc, on tiny generated models; plus the loader's refusals.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "lattice/engine/runtime/session.h"
#include "model_testlib.h"

namespace lattice::engine {
namespace {

using testing::cosine;
using testing::make_mem_model;
using testing::nmse;
using testing::reference_forward;

struct Case {
  const char* arch;
  const char* type;
  double max_nmse;  // from the activation quantization of the kernels (none for float types)
};

MakeModelOptions tiny(const Case& c) {
  MakeModelOptions o;
  o.arch = c.arch;
  o.type = c.type;
  o.dim = 128;
  o.layers = 3;
  o.heads = 4;
  o.kv_heads = 2;  // GQA
  o.ffn = 256;
  o.vocab = 320;
  o.seed = 7;
  o.threads = 1;
  if (std::string(c.arch) == "qwen3") o.head_dim = 64;  // head size != dim / heads
  return o;
}

std::vector<int32_t> prompt(size_t n, uint32_t vocab) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
  return t;
}

class ArchTest : public ::testing::TestWithParam<Case> {};

TEST_P(ArchTest, LayerByLayerMatchesReference) {
  const Case c = GetParam();
  auto m = make_mem_model(tiny(c));
  ASSERT_TRUE(m.model);
  const Hparams& hp = m.model->hparams();
  const auto toks = prompt(13, hp.n_vocab);
  const auto ref = reference_forward(*m.model, toks);

  SessionOptions so;
  so.n_ctx = 64;
  so.n_threads = 2;
  so.n_batch = 5;  // three prefill steps, the last one partial
  auto s = Session::create(*m.model, so);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  std::vector<std::vector<float>> hidden(hp.n_layer);
  (*s)->set_layer_observer([&](uint32_t layer, std::span<const float> h) {
    hidden[layer].insert(hidden[layer].end(), h.begin(), h.end());
  });
  std::vector<float> logits;
  ASSERT_TRUE((*s)->prefill(toks, &logits).ok());
  for (uint32_t l = 0; l < hp.n_layer; ++l) {
    ASSERT_EQ(hidden[l].size(), ref.hidden[l].size());
    EXPECT_LT(nmse(ref.hidden[l], hidden[l]), c.max_nmse) << c.arch << " " << c.type << " layer " << l;
  }
  ASSERT_EQ(logits.size(), ref.logits.size());
  for (size_t t = 0; t < toks.size(); ++t) {
    std::span<const double> r(ref.logits.data() + t * hp.n_vocab, hp.n_vocab);
    std::span<const float> g(logits.data() + t * hp.n_vocab, hp.n_vocab);
    EXPECT_LT(nmse(r, g), c.max_nmse) << "position " << t;
    EXPECT_GT(cosine(r, g), 0.999) << "position " << t;
  }
  // logits() holds the last position's row.
  EXPECT_EQ(0, std::memcmp((*s)->logits().data(), logits.data() + (toks.size() - 1) * hp.n_vocab,
                           hp.n_vocab * sizeof(float)));
}

TEST_P(ArchTest, DecodeOneByOneMatchesBatchedPrefill) {
  const Case c = GetParam();
  auto m = make_mem_model(tiny(c));
  ASSERT_TRUE(m.model);
  const uint32_t V = m.model->hparams().n_vocab;
  const auto toks = prompt(9, V);
  auto batched = Session::create(*m.model, {.n_ctx = 32, .n_threads = 1, .n_batch = 16});
  auto single = Session::create(*m.model, {.n_ctx = 32, .n_threads = 2, .n_batch = 16});
  ASSERT_TRUE(batched.ok() && single.ok());
  std::vector<float> all;
  ASSERT_TRUE((*batched)->prefill(toks, &all).ok());
  for (size_t t = 0; t < toks.size(); ++t) {
    ASSERT_TRUE((*single)->decode(toks[t]).ok());
    std::vector<double> a(all.begin() + t * V, all.begin() + (t + 1) * V);
    EXPECT_LT(nmse(a, (*single)->logits()), c.max_nmse) << "position " << t;
  }
  EXPECT_EQ((*single)->n_past(), toks.size());
}

INSTANTIATE_TEST_SUITE_P(
    Models, ArchTest,
    ::testing::Values(Case{"llama", "f32", 1e-9}, Case{"llama", "f16", 1e-9}, Case{"llama", "q8_0", 2e-3},
                      Case{"llama", "q4_0", 5e-3}, Case{"llama", "q4_k_m", 5e-3}, Case{"qwen2", "f32", 1e-9},
                      Case{"qwen2", "q8_0", 2e-3}, Case{"qwen3", "f32", 1e-9}, Case{"qwen3", "q4_k_m", 5e-3}),
    [](const auto& info) { return std::string(info.param.arch) + "_" + info.param.type; });

// Llama 3 style frequency factors (rope_freqs) and linear RoPE scaling, read from the file.
TEST(ModelRope, FreqFactorsAndLinearScalingFollowTheFile) {
  MakeModelOptions o = tiny({"llama", "f32", 0});
  auto plan = plan_model(o);
  ASSERT_TRUE(plan.ok());
  const uint32_t half = o.dim / o.heads / 2;
  std::vector<float> ff(half);
  for (uint32_t i = 0; i < half; ++i) ff[i] = 1.0f + 0.5f * i;
  std::vector<std::byte> ffb(half * 4);
  std::memcpy(ffb.data(), ff.data(), ffb.size());
  ASSERT_TRUE(plan->writer.add_tensor("rope_freqs.weight", TensorType::kF32, {half}, ffb).ok());
  plan->writer.metadata().set("llama.rope.scaling.type", std::string("linear"));
  plan->writer.metadata().set("llama.rope.scaling.factor", 4.0f);
  // The fill function makes the generated tensors; the added one carries its own bytes.
  auto fill = [&](size_t i, const TensorSpec& spec, std::span<std::byte> out) -> Status {
    if (!spec.data.empty()) {
      std::memcpy(out.data(), spec.data.data(), out.size());
      return Status::Ok();
    }
    return plan->fill(i, spec, out);
  };
  auto bytes = plan->writer.write_to_memory(fill);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto file = GgufFile::parse(*bytes);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto model = Model::bind(std::move(file).value());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_NE((*model)->rope_freq_factors(), nullptr);
  EXPECT_FLOAT_EQ((*model)->hparams().rope.pos_scale, 0.25f);

  const auto toks = prompt(10, (*model)->hparams().n_vocab);
  const auto ref = reference_forward(**model, toks);
  auto s = Session::create(**model, {.n_ctx = 16, .n_threads = 1, .n_batch = 16});
  ASSERT_TRUE(s.ok());
  std::vector<float> logits;
  ASSERT_TRUE((*s)->prefill(toks, &logits).ok());
  EXPECT_LT(nmse(ref.logits, logits), 1e-9);
}

Result<std::unique_ptr<Model>> bind_modified(const MakeModelOptions& o,
                                             const std::function<void(GgufWriter&)>& edit,
                                             std::vector<std::byte>& keep) {
  auto plan = plan_model(o);
  if (!plan.ok()) return plan.status();
  edit(plan->writer);
  auto bytes = plan->writer.write_to_memory(plan->fill);
  if (!bytes.ok()) return bytes.status();
  keep = std::move(bytes).value();
  auto file = GgufFile::parse(keep);
  if (!file.ok()) return file.status();
  return Model::bind(std::move(file).value());
}

TEST(ModelLoad, UnsupportedArchitectureIsRefusedByName) {
  std::vector<std::byte> keep;
  auto m = bind_modified(tiny({"llama", "f32", 0}), [](GgufWriter& w) {
    w.metadata().set("general.architecture", std::string("gemma3"));
  }, keep);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kUnavailable);
  EXPECT_EQ(m.status().message(), "architecture 'gemma3' is not supported (supported: llama, qwen2, qwen3, qwen3moe, deepseek2)");
}

// A block count the tensor table cannot hold is refused before anything is sized by it (it
// used to allocate 2^31 layers and abort with bad_alloc).
TEST(ModelLoad, ABlockCountBeyondTheTensorsIsCorrupt) {
  std::vector<std::byte> keep;
  auto m = bind_modified(tiny({"llama", "f32", 0}), [](GgufWriter& w) {
    w.metadata().set("llama.block_count", uint32_t{1u << 31});
  }, keep);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(m.status().message().find("llama.block_count"), std::string::npos) << m.status().to_string();
}

TEST(ModelLoad, MissingKeyAndBadValuesAreNamed) {
  std::vector<std::byte> keep;
  auto m = bind_modified(tiny({"llama", "f32", 0}), [](GgufWriter& w) { w.metadata().erase("llama.block_count"); },
                         keep);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("llama.block_count"), std::string::npos) << m.status().to_string();

  m = bind_modified(tiny({"llama", "f32", 0}),
                    [](GgufWriter& w) { w.metadata().set("llama.attention.head_count_kv", uint32_t{3}); }, keep);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("head_count_kv"), std::string::npos) << m.status().to_string();

  m = bind_modified(tiny({"llama", "f32", 0}),
                    [](GgufWriter& w) { w.metadata().set("llama.rope.scaling.type", std::string("longrope")); }, keep);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kUnavailable);
  EXPECT_NE(m.status().message().find("longrope"), std::string::npos);

  // A wrong feed-forward length makes the ffn tensors' shapes disagree: named.
  m = bind_modified(tiny({"llama", "f32", 0}),
                    [](GgufWriter& w) { w.metadata().set("llama.feed_forward_length", uint32_t{384}); }, keep);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(m.status().message().find("blk.0.ffn_gate.weight"), std::string::npos) << m.status().to_string();
}

TEST(ModelLoad, QwenBiasesRequiredAndQkNormRequired) {
  std::vector<std::byte> keep;
  // Rebuild a qwen2 plan without one bias tensor is awkward; instead declare a llama file as
  // qwen2: its biases are missing and the error names the first one.
  auto m = bind_modified(tiny({"llama", "f32", 0}), [](GgufWriter& w) {
    w.metadata().set("general.architecture", std::string("qwen2"));
    for (const auto& e : std::vector<Metadata::Entry>(w.metadata().entries()))
      if (e.key.rfind("llama.", 0) == 0) w.metadata().set("qwen2." + e.key.substr(6), e.value);
  }, keep);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.0.attn_q.bias"), std::string::npos) << m.status().to_string();
}

TEST(SessionApi, RejectsBadTokensAndContextOverflow) {
  auto m = make_mem_model(tiny({"llama", "f32", 0}));
  ASSERT_TRUE(m.model);
  auto s = Session::create(*m.model, {.n_ctx = 8, .n_threads = 1, .n_batch = 4});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->decode(-1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ((*s)->decode(static_cast<int32_t>(m.model->hparams().n_vocab)).code(), ErrorCode::kInvalidArgument);
  std::vector<int32_t> nine(9, 1);
  EXPECT_EQ((*s)->prefill(nine).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ((*s)->n_past(), 0u);
  EXPECT_EQ((*s)->prefill({}).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Session::create(*m.model, {.n_ctx = 8, .n_threads = 0}).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace lattice::engine
