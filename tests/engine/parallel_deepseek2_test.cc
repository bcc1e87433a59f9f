// deepseek2 (multi-head latent attention, routed + shared experts, a leading dense block)
// over several ranks, ranks as threads over real links (make_local_groups, shm or tcp):
// tensor parallel (MLA split by query heads, every FFN by columns) and expert parallel
// (experts whole, the rest by columns) give the single node's greedy tokens over 2 and 3
// ranks (4 heads over 3 ranks: 2, 1, 1), with uneven shares, in both attention layouts and
// both expert layouts, on make-model files and on a file written by llama.cpp's gguf-py.
// A rank holds only its heads and columns (the latent projections and routers on every
// rank), the head split follows attn_output's blocks, and `plan` counts MLA shards.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "../require.h"
#include "lattice/cluster/group.h"
#include "lattice/coll/comm.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/parallel/comm_group.h"
#include "lattice/engine/parallel/plan.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/session.h"
#include "model_testlib.h"
#include "parallel_testlib.h"

namespace lattice::engine {
namespace {

const testing::TempDir temp("lattice-ds2-par-test");

struct Layout {
  bool fused_kv_b = false, fused_gate_up = false;
  uint32_t q_lora = 64;
  std::string type = "f32";
};

// 4 heads, a q lora (or a plain attn_q), 8 experts in 4 groups (2 used, 2 a token), one
// shared expert, one leading dense block, YaRN: the single-node test's shape.
std::string ds_file(const Layout& lay) {
  MakeModelOptions o = testing::small_deepseek2_options(lay.type);
  o.q_lora = lay.q_lora;
  o.fused_kv_b = lay.fused_kv_b;
  o.fused_gate_up = lay.fused_gate_up;
  return testing::cached_model(temp.file("ds2-" + lay.type + (lay.fused_kv_b ? "-kvb" : "") + (lay.fused_gate_up ? "-gu" : "") +
                                         "-q" + std::to_string(lay.q_lora) + ".gguf"),
                               o);
}

const std::vector<int32_t> kPrompt = {104, 101, 108, 108, 111, 32, 116, 104, 101, 114, 101};

LoadOptions shard(int r, int world, bool ep, std::vector<double> weights = {}) {
  return testing::shard_of(r, world, std::move(weights), ep);
}

std::vector<int32_t> single_node(const std::string& path, int n) { return testing::single_node_greedy(path, kPrompt, n); }

struct RankRun {
  std::vector<int32_t> tokens;
  uint64_t shard_bytes = 0;
  Range heads;
  uint32_t owned = 0;
};

std::vector<RankRun> run_ranks(const std::string& path, int world, int n, bool ep, std::vector<double> weights = {},
                               const std::string& uri = "shm") {
  std::vector<RankRun> out(world);
  auto st = testing::on_local_ranks(world, uri, [&](int r, parallel::CommGroup& group) -> Status {
    LATTICE_ASSIGN_OR_RETURN(auto m, Model::load(path, shard(r, world, ep, weights)));
    if (m->expert_parallel() != ep) return Internal("expert parallel is not as asked");
    LATTICE_ASSIGN_OR_RETURN(auto s, Session::create(*m, group, {.n_ctx = 64}));
    out[r].tokens = testing::greedy(*s, kPrompt, n);
    out[r].shard_bytes = m->shard_bytes();
    out[r].heads = m->heads();
    out[r].owned = m->n_owned_experts();
    return Status::Ok();
  });
  for (int r = 0; r < world; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
  return out;
}

void expect_same_tokens(const std::string& path, int world, bool ep, std::vector<double> weights = {},
                        const std::string& uri = "shm") {
  const auto ref = single_node(path, 24);
  ASSERT_EQ(ref.size(), 24u);
  const auto runs = run_ranks(path, world, 24, ep, weights, uri);
  uint32_t heads = 0;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(runs[r].tokens, ref) << (ep ? "ep" : "tp") << " rank " << r << " of " << world << " over " << uri;
    EXPECT_EQ(runs[r].heads.begin, heads) << r;
    heads = runs[r].heads.end;
  }
  EXPECT_EQ(heads, 4u) << "every head on exactly one rank";
}

TEST(ParallelDeepseek2, TensorParallelMatchesSingleNode2RanksShm) { expect_same_tokens(ds_file({}), 2, false); }
TEST(ParallelDeepseek2, TensorParallelMatchesSingleNode3RanksTcp) {
  // 4 heads over 3 ranks: 2, 1, 1.
  expect_same_tokens(ds_file({}), 3, false, {}, "tcp://127.0.0.1:0");
}
TEST(ParallelDeepseek2, TensorParallelFusedKvBAndGateUp3RanksShm) {
  expect_same_tokens(ds_file({.fused_kv_b = true, .fused_gate_up = true}), 3, false);
}
TEST(ParallelDeepseek2, TensorParallelPlainAttnQWeighted2RanksTcp) {
  expect_same_tokens(ds_file({.q_lora = 0}), 2, false, {3, 1}, "tcp://127.0.0.1:0");
}
TEST(ParallelDeepseek2, ExpertParallelMatchesSingleNode2RanksShm) { expect_same_tokens(ds_file({}), 2, true); }
TEST(ParallelDeepseek2, ExpertParallelMatchesSingleNode3RanksTcp) {
  expect_same_tokens(ds_file({}), 3, true, {}, "tcp://127.0.0.1:0");
}
TEST(ParallelDeepseek2, ExpertParallelFusedLayoutsUnevenShares3RanksShm) {
  expect_same_tokens(ds_file({.fused_kv_b = true, .fused_gate_up = true}), 3, true, {2, 1, 1});
}
TEST(ParallelDeepseek2, ARankWithoutHeadsStillAddsItsColumns) {
  // Shares 1:0 give rank 1 no head, no FFN column and no vocabulary row: it only relays.
  expect_same_tokens(ds_file({}), 2, false, {1, 0});
}

// Quantized weights: the shards cut attn_output, the FFNs and the experts on block
// boundaries, so the ranks' partial sums add up to the single node's logits but for the
// order of float additions.
TEST(ParallelDeepseek2, QuantizedShardsGiveTheSingleNodesLogits) {
  for (const char* type : {"q8_0", "q4_0"}) {
    const std::string path = ds_file({.type = type});
    auto whole = Model::load(path);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    auto solo = Session::create(**whole, {.n_ctx = 64});
    ASSERT_TRUE(solo.ok());
    ASSERT_TRUE((*solo)->prefill(kPrompt).ok());
    const auto ref = (*solo)->forward().logits(0);
    float scale = 0;
    for (float v : ref) scale = std::max(scale, std::fabs(v));
    for (const bool ep : {false, true}) {
      std::vector<float> got;
      auto st = testing::on_local_ranks(3, "shm", [&](int r, parallel::CommGroup& group) -> Status {
        LATTICE_ASSIGN_OR_RETURN(auto m, Model::load(path, shard(r, 3, ep)));
        LATTICE_ASSIGN_OR_RETURN(auto s, Session::create(*m, group, {.n_ctx = 64}));
        LATTICE_RETURN_IF_ERROR(s->prefill(kPrompt));
        std::vector<float> full;
        LATTICE_RETURN_IF_ERROR(s->forward().gather_logits(0, &full));
        if (r == 0) got = std::move(full);
        return Status::Ok();
      });
      for (int r = 0; r < 3; ++r) ASSERT_TRUE(st[r].ok()) << st[r].to_string();
      ASSERT_EQ(got.size(), ref.size());
      float worst = 0;
      for (size_t v = 0; v < ref.size(); ++v) worst = std::max(worst, std::fabs(got[v] - ref[v]));
      EXPECT_LT(worst, 2e-3f * scale) << type << (ep ? " ep" : " tp") << ": logits up to " << scale;
    }
  }
}

TEST(ParallelDeepseek2, ShardsHoldTheirHeadsAndColumnsTheLatentOnEveryRank) {
  const std::string path = ds_file({});
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  uint64_t replicated = 0;  // on every rank: the latent projections and the routers
  for (const LayerWeights& L : (*whole)->layers())
    replicated += L.wq_a.bytes() + L.wkv_a.bytes() + (L.router.n_rows() ? L.router.bytes() : 0);
  for (const bool ep : {false, true}) {
    uint64_t sum = 0;
    for (int r = 0; r < 3; ++r) {
      auto m = Model::load(path, shard(r, 3, ep));
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      const Range h = (*m)->heads();
      EXPECT_EQ(h.size(), r == 0 ? 2u : 1u);
      const LayerWeights& L = (*m)->layers()[1];  // a mixture-of-experts layer
      EXPECT_EQ(L.wq_b.n_rows(), h.size() * (32 + 16));
      EXPECT_EQ(L.k_b.size(), h.size());
      EXPECT_EQ(L.v_b.size(), h.size());
      EXPECT_EQ(L.wo.n_cols(), h.size() * 32);
      EXPECT_EQ(L.wq_a.n_rows(), 64u);
      EXPECT_EQ(L.wkv_a.n_rows(), 64u + 16);
      EXPECT_EQ(L.gate_shexp.n_rows(), (*m)->layout().ff_shared[r].size());
      EXPECT_EQ((*m)->layers()[0].w_gate.n_rows(), (*m)->layout().ff_dense[r].size());
      sum += (*m)->shard_bytes();
    }
    EXPECT_NEAR(double(sum), double((*whole)->shard_bytes() + 2 * replicated), (*whole)->shard_bytes() * 0.01)
        << (ep ? "ep" : "tp");
  }
}

TEST(ParallelDeepseek2, HeadsSplitOnAttentionOutputBlocks) {
  Hparams hp;
  hp.n_embd = 2048, hp.n_head = 16, hp.n_head_kv = 1, hp.kv_lora_rank = 256, hp.mla_v_dim = 64;
  hp.head_dim = 256 + 32, hp.head_dim_v = 256, hp.n_ff = 5632, hp.n_vocab = 32000;
  // Q4_K-like output blocks of 256 hold 4 heads of 64 value columns: heads go in fours.
  auto l = make_shard_layout(hp, 32, 256, 3);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->head_granularity, 4u);
  for (const Range& r : l->heads) EXPECT_EQ(r.begin % 4, 0u);
  EXPECT_EQ(l->heads.back().end, 16u);
  EXPECT_EQ(l->heads[0].size(), 8u);  // 4 groups over 3 ranks: 2, 1, 1
  EXPECT_EQ(l->kv_heads[1].begin, l->heads[1].begin);
  // Q8_0-like blocks of 32: any head boundary.
  auto q8 = make_shard_layout(hp, 32, 32, 3);
  ASSERT_TRUE(q8.ok());
  EXPECT_EQ(q8->heads[0].size(), 6u);
  // 6 heads cannot be cut into fours: a clear error, not a wrong split; one node is fine.
  hp.n_head = 6;
  EXPECT_EQ(make_shard_layout(hp, 32, 256, 2).status().code(), ErrorCode::kUnavailable);
  EXPECT_TRUE(make_shard_layout(hp, 32, 256, 1).ok());
}

TEST(ParallelDeepseek2Plan, CountsHeadsColumnsAndTheWholeLatentPerNode) {
  const std::string path = ds_file({.type = "q8_0"});
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  const std::vector<parallel::NodeSpec> nodes = {{"a", 1ull << 30}, {"b", 1ull << 30}, {"c", 1ull << 30}};
  for (const auto mode : {parallel::ParallelMode::kTensor, parallel::ParallelMode::kExpert}) {
    auto p = parallel::plan_placement(**file, nodes, mode, 256);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_EQ(p->nodes.size(), 3u);
    EXPECT_EQ(p->nodes[0].part.rfind("heads [0,2)", 0), 0u) << p->nodes[0].part;
    // Against what the loader binds (unpacked, in place): within a few percent per node.
    for (int r = 0; r < 3; ++r) {
      LoadOptions lo = shard(r, 3, mode == parallel::ParallelMode::kExpert);
      lo.pack = false;
      auto m = Model::load(path, lo);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      const double bound = double((*m)->shard_bytes());
      EXPECT_NEAR(double(p->nodes[r].weight_bytes), bound, 0.05 * bound) << "node " << r << " " << p->why;
      // The whole latent a token and layer on every node: (64 + 16) floats.
      EXPECT_EQ(p->nodes[r].kv_bytes, uint64_t{256} * 3 * (64 + 16) * 4);
    }
  }
  // auto: a mixture of experts with at least as many heads and experts as nodes is expert
  // parallel (the split attn_k_b files say 1 KV head: the heads that count are the 4 queries).
  auto a = parallel::plan_placement(**file, nodes, parallel::ParallelMode::kAuto, 256);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->mode, parallel::ParallelMode::kExpert) << a->why;
}

// The file llama.cpp's gguf-py writes (tests/engine/deepseek2_gguf_py.py) over 2 and 3 ranks
// (gguf-py from scripts/gguf_py.sh, or a PYTHONPATH that already holds it).
TEST(ParallelDeepseek2GgufPyIntegration, AFileWrittenByGgufPyMatchesSingleNodeOnTwoAndThreeRanks) {
  const std::string path = temp.file("gguf-py-deepseek2.gguf");
  if (const Status made = testing::write_gguf_py_deepseek2(path); !made.ok())
    LATTICE_SKIP_OR_FAIL("oracle", made.to_string());
  expect_same_tokens(path, 2, false);
  expect_same_tokens(path, 3, true, {}, "tcp://127.0.0.1:0");
}

}  // namespace
}  // namespace lattice::engine
