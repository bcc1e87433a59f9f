// Model shapes: the presets add up to the published parameter counts, and a GGUF's shape agrees
// with its own tensor table and with the engine's planner.
#include <gtest/gtest.h>

#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/model/shard.h"
#include "lattice/engine/parallel/plan.h"
#include "lattice/sim/placement.h"
#include "lattice/sim/shape.h"
#include "sim_testlib.h"

namespace lattice::sim {
namespace {

TEST(ShapePreset, PublishedSizes) {
  // Total and active parameters from the model cards, at the preset's bits per weight.
  struct Case {
    const char* name;
    double total_params, active_params, bits;
  } cases[] = {{"qwen3-235b-a22b-q8", 235e9, 22e9, 8.5}, {"deepseek-v3.1-q8", 671e9, 37e9, 8.5},
               {"deepseek-v3.1-q4", 671e9, 37e9, 4.5}};
  for (const auto& c : cases) {
    auto s = shape_preset(c.name);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_NEAR(s->total_bytes() / (c.total_params * c.bits / 8), 1.0, 0.03) << c.name;
    EXPECT_NEAR(s->bytes_per_step(1) / (c.active_params * c.bits / 8), 1.0, 0.06) << c.name;
  }
  // Kimi K2 Thinking: about 594 GB as released (INT4 experts, BF16 elsewhere).
  auto k = shape_preset("kimi-k2-thinking-q4");
  ASSERT_TRUE(k.ok());
  EXPECT_NEAR(k->total_bytes() / 594e9, 1.0, 0.04);
  EXPECT_EQ(k->n_expert, 384u);
  EXPECT_EQ(k->kv_elems_per_token_layer(), 512 + 64);
}

TEST(ShapePreset, UnknownNameListsThePresets) {
  auto s = shape_preset("qwen3-236b");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("qwen3-235b-a22b-q8"), std::string::npos);
  EXPECT_EQ(shape_preset_names().size(), 6u);
}

TEST(ShapePreset, ExpertFractionGrowsWithTheBatch) {
  auto s = shape_preset("qwen3-235b-a22b-q8");
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->expert_fraction(1), 8.0 / 128);
  EXPECT_GT(s->expert_fraction(8), s->expert_fraction(1));
  EXPECT_LT(s->expert_fraction(8), 8 * 8.0 / 128);
  EXPECT_NEAR(s->expert_fraction(4096), 1.0, 1e-9);
}

class ShapeFromGguf : public ::testing::Test {
 protected:
  std::unique_ptr<engine::GgufFile> make(const engine::MakeModelOptions& mo) {
    const std::string path = testing::scratch_dir("m") + "/m.gguf";
    auto made = engine::make_model(mo, path);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    auto f = engine::GgufFile::open(path);
    EXPECT_TRUE(f.ok()) << f.status().to_string();
    return f.ok() ? std::move(*f) : nullptr;
  }
};

TEST_F(ShapeFromGguf, DenseMatchesTheTensorTableAndThePlanner) {
  engine::MakeModelOptions mo;
  mo.dim = 256;
  mo.layers = 3;
  mo.heads = 8;
  mo.kv_heads = 4;
  mo.vocab = 512;
  mo.type = "q8_0";
  auto f = make(mo);
  ASSERT_TRUE(f);
  auto s = shape_from_gguf(*f, "m.gguf");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->n_layer, 3u);
  EXPECT_EQ(s->n_head_kv, 4u);
  EXPECT_EQ(s->n_vocab, 512u);
  EXPECT_DOUBLE_EQ(s->total_bytes(), static_cast<double>(f->total_tensor_bytes()));
  // The same split as `lattice plan` over two nodes with these memories.
  std::vector<engine::parallel::NodeSpec> nodes = {{"a", 3ull << 30}, {"b", 1ull << 30}};
  auto plan = engine::parallel::plan_placement(*f, nodes, engine::parallel::ParallelMode::kTensor, 512);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  auto L = place(*s, {3.0 * (1ull << 30), 1.0 * (1ull << 30)}, Mode::kTensor, 512, 4,
                 {3.0 * (1ull << 30), 1.0 * (1ull << 30)});
  ASSERT_TRUE(L.ok()) << L.status().to_string();
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(L->nodes[i].part, plan->nodes[i].part) << i;
    EXPECT_NEAR(L->nodes[i].weight_bytes, double(plan->nodes[i].weight_bytes), 0.02 * plan->nodes[i].weight_bytes) << i;
    EXPECT_DOUBLE_EQ(L->nodes[i].kv_bytes, double(plan->nodes[i].kv_bytes)) << i;
  }
}

TEST_F(ShapeFromGguf, MixtureOfExperts) {
  engine::MakeModelOptions mo;
  mo.arch = "qwen3moe";
  mo.dim = 128;
  mo.layers = 2;
  mo.heads = 4;
  mo.kv_heads = 2;
  mo.experts = 8;
  mo.experts_used = 2;
  mo.expert_ffn = 64;
  mo.type = "q8_0";
  auto f = make(mo);
  ASSERT_TRUE(f);
  auto s = shape_from_gguf(*f, "moe.gguf");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->n_expert, 8u);
  EXPECT_EQ(s->n_expert_used, 2u);
  EXPECT_GT(s->expert_bytes, 0);
  EXPECT_GT(s->router_bytes, 0);
  EXPECT_DOUBLE_EQ(s->total_bytes(), static_cast<double>(f->total_tensor_bytes()));
  EXPECT_NEAR(s->bytes_per_step(1), s->total_bytes() - s->embd_bytes - 0.75 * s->expert_bytes + (s->tied_output ? s->output_bytes : 0), 1);
}

TEST_F(ShapeFromGguf, ExpertParallelIsThePlannersPlacement) {
  engine::MakeModelOptions mo;
  mo.arch = "qwen3moe";
  mo.dim = 128;
  mo.layers = 2;
  mo.heads = 4;
  mo.kv_heads = 4;
  mo.experts = 8;
  mo.experts_used = 2;
  mo.expert_ffn = 64;
  mo.type = "q8_0";
  auto f = make(mo);
  ASSERT_TRUE(f);
  auto s = shape_from_gguf(*f, "moe.gguf");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  // Unequal memories: place_experts gives the larger node more experts.
  std::vector<engine::parallel::NodeSpec> nodes = {{"a", 2ull << 30}, {"b", 1ull << 30}, {"c", 1ull << 30}};
  std::vector<double> mem = {2.0 * (1ull << 30), 1.0 * (1ull << 30), 1.0 * (1ull << 30)};
  auto plan = engine::parallel::plan_placement(*f, nodes, engine::parallel::ParallelMode::kAuto, 512);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_EQ(plan->mode, engine::parallel::ParallelMode::kExpert);
  auto L = place(*s, mem, Mode::kAuto, 512, 4, mem);
  ASSERT_TRUE(L.ok()) << L.status().to_string();
  EXPECT_EQ(L->mode, Mode::kExpert) << L->why;
  EXPECT_EQ(L->why, plan->why);
  ASSERT_EQ(L->expert_owner, engine::place_experts(8, 3, mem));
  uint32_t experts = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(L->nodes[i].experts, plan->nodes[i].experts) << i;
    EXPECT_EQ(L->nodes[i].part, plan->nodes[i].part) << i;
    EXPECT_NEAR(L->nodes[i].weight_bytes, double(plan->nodes[i].weight_bytes), 0.03 * plan->nodes[i].weight_bytes) << i;
    experts += L->nodes[i].experts;
  }
  EXPECT_EQ(experts, 8u);
  EXPECT_GT(L->nodes[0].experts, L->nodes[1].experts);
  // An engine that does not choose expert parallel (exo's tensor parallel) keeps auto at tp.
  PlaceRules exo;
  exo.auto_expert = false;
  auto tp = place(*s, mem, Mode::kAuto, 512, 2, {}, exo);
  ASSERT_TRUE(tp.ok());
  EXPECT_EQ(tp->mode, Mode::kTensor);
}

TEST(Placement, LatentProjectionsAndAnUnshardedOutputAreOnEveryNode) {
  auto s = shape_preset("deepseek-v3.1-q8");
  ASSERT_TRUE(s.ok());
  // q_a 7168 x 1536 and kv_a 7168 x 576 a layer at 8.5 bits, plus their norms.
  EXPECT_NEAR(s->attn_latent_bytes, 61 * (7168.0 * (1536 + 576) * 8.5 / 8 + (1536 + 512) * 4), 1);
  std::vector<double> mem(4, 512e9);
  auto sharded = place(*s, mem, Mode::kTensor, 4096, 2, {});
  PlaceRules exo;
  exo.replicate_output = true;
  auto whole = place(*s, mem, Mode::kTensor, 4096, 2, {}, exo);
  ASSERT_TRUE(sharded.ok() && whole.ok());
  EXPECT_NEAR(whole->nodes[0].weight_bytes - sharded->nodes[0].weight_bytes, 0.75 * s->output_bytes, 1e3);
  EXPECT_DOUBLE_EQ(whole->nodes[0].f_vocab, 1.0);
  // Everything but the latent (and the routers) is split four ways.
  const double split = s->attn_bytes - s->attn_latent_bytes + s->expert_bytes + s->shared_bytes +
                       s->dense_ffn_bytes + s->output_bytes;
  EXPECT_NEAR(sharded->nodes[0].weight_bytes, s->attn_latent_bytes + s->router_bytes + split / 4, 0.01 * split);
}

TEST(Placement, AutoFollowsPlansRule) {
  auto s = shape_preset("qwen3-235b-a22b-q8");  // 4 KV heads
  ASSERT_TRUE(s.ok());
  std::vector<double> mem(4, 512e9), mem5(5, 512e9);
  // A mixture of experts over no more nodes than KV heads: expert parallel, as plan chooses.
  auto ep_auto = place(*s, mem, Mode::kAuto, 4096, 2, {});
  ASSERT_TRUE(ep_auto.ok());
  EXPECT_EQ(ep_auto->mode, Mode::kExpert);
  auto dense = shape_preset("llama-1.1b-q4");
  auto tp = place(*dense, mem, Mode::kAuto, 4096, 2, {});
  ASSERT_TRUE(tp.ok());
  EXPECT_EQ(tp->mode, Mode::kTensor);
  auto pp = place(*s, mem5, Mode::kAuto, 4096, 2, {});
  ASSERT_TRUE(pp.ok());
  EXPECT_EQ(pp->mode, Mode::kPipeline);
  double layers = 0;
  for (const auto& n : pp->nodes) layers += n.layers.size();
  EXPECT_EQ(layers, 94);
  auto ep = place(*s, mem, Mode::kExpert, 4096, 2, {});
  ASSERT_TRUE(ep.ok());
  EXPECT_EQ(ep->nodes[3].experts, 32u);
  EXPECT_EQ(ep->expert_owner[127], 3);
  EXPECT_FALSE(place(*dense, mem, Mode::kExpert, 4096, 2, {}).ok());
  // Kimi K2 does not fit one 512 GB node.
  auto kimi = shape_preset("kimi-k2-thinking-q4");
  auto one = place(*kimi, {512.0 * (1ull << 30)}, Mode::kAuto, 4096, 2, {});
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->fits);
  EXPECT_GT(one->missing_bytes, 0);
}

}  // namespace
}  // namespace lattice::sim
