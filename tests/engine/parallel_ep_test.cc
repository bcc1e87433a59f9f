// Expert parallelism with ranks as threads (make_local_groups): every expert whole on the
// rank that owns it, attention split as in tensor parallel. Checked against the single node
// on the same F32 qwen3moe and Mixtral files (the same greedy tokens over 2 and 3 ranks, equal,
// weighted and per-layer placements), a rank binds and reads only the experts it owns (its
// shard holds only them; the rows its experts ran add up to every routed row once), every
// rank reports the same per-expert load, and `plan` places experts by memory.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

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

const testing::TempDir temp("lattice-ep-test");

// Small qwen3moe / Mixtral (llama with ffn_*_exps) files: 8 experts, 2 a token.
std::string moe_file(const std::string& arch, const std::string& type = "f32") {
  MakeModelOptions o = testing::small_moe_options(arch, type);
  o.seed = 11;
  return testing::cached_model(temp.file(arch + "-" + type + ".gguf"), o);
}

const std::vector<int32_t> kPrompt = {257, 306, 111, 393, 286, 12, 480};

LoadOptions ep_shard(int r, int world, std::vector<double> weights = {}, std::vector<int> owners = {},
                     double spare = 0) {
  LoadOptions lo = testing::shard_of(r, world, std::move(weights), true);
  lo.shard.expert_owner = std::move(owners);
  lo.shard.expert_spare = spare;
  return lo;
}

std::vector<int32_t> single_node(const std::string& path, int n) { return testing::single_node_greedy(path, kPrompt, n); }

struct RankRun {
  std::vector<int32_t> tokens;
  ExpertLoad load;
  uint64_t bytes_read = 0, shard_bytes = 0;
  uint32_t owned = 0;
};

// Greedy tokens on every rank of `world`, expert parallel.
std::vector<RankRun> expert_parallel(const std::string& path, int world, int n, std::vector<double> weights = {},
                                     std::vector<int> owners = {}, const std::string& uri = "shm",
                                     double spare = 0) {
  std::vector<RankRun> out(world);
  auto st = testing::on_local_ranks(world, uri, [&](int r, parallel::CommGroup& group) -> Status {
    LATTICE_ASSIGN_OR_RETURN(auto m, Model::load(path, ep_shard(r, world, weights, owners, spare)));
    if (!m->expert_parallel()) return Internal("not expert parallel");
    LATTICE_ASSIGN_OR_RETURN(auto s, Session::create(*m, group, {.n_ctx = 64}));
    LATTICE_RETURN_IF_ERROR(s->prefill(kPrompt));
    for (int i = 0; i < n; ++i) {
      LATTICE_ASSIGN_OR_RETURN(int32_t t, s->argmax());
      out[r].tokens.push_back(t);
      LATTICE_RETURN_IF_ERROR(s->decode(t));
    }
    out[r].load = s->forward().expert_load();
    out[r].bytes_read = s->forward().weight_bytes_read();
    out[r].shard_bytes = m->shard_bytes();
    out[r].owned = m->n_owned_experts();
    return Status::Ok();
  });
  for (int r = 0; r < world; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
  return out;
}

void expect_same_tokens(const std::string& arch, int world, std::vector<double> weights = {},
                        std::vector<int> owners = {}, const std::string& uri = "shm") {
  const std::string path = moe_file(arch);
  const auto ref = single_node(path, 24);
  ASSERT_EQ(ref.size(), 24u);
  const auto runs = expert_parallel(path, world, 24, weights, owners, uri);
  uint32_t owned = 0;
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(runs[r].tokens, ref) << arch << " rank " << r << " of " << world;
    // Every rank saw the same routing, so it reports the same load for every rank.
    EXPECT_EQ(runs[r].load.tokens, runs[0].load.tokens) << r;
    EXPECT_EQ(runs[r].load.rank_rows, runs[0].load.rank_rows) << r;
    owned += runs[r].owned;
  }
  EXPECT_EQ(owned, 8u * 2) << "every expert of every layer on exactly one rank";
}

TEST(PlaceExperts, InterleavesEqualSharesAndFollowsWeights) {
  const auto even = place_experts(8, 2);
  EXPECT_EQ(even, (std::vector<int>{0, 1, 0, 1, 0, 1, 0, 1}));
  const double w[] = {3, 1};
  const auto weighted = place_experts(8, 2, w);
  EXPECT_EQ(std::count(weighted.begin(), weighted.end(), 0), 6);
  EXPECT_EQ(std::count(weighted.begin(), weighted.end(), 1), 2);
  const auto three = place_experts(32, 3);
  EXPECT_EQ(std::count(three.begin(), three.end(), 0), 11);
  EXPECT_EQ(std::count(three.begin(), three.end(), 2), 10);
  // A rank with no share gets no expert; one node owns everything.
  const double none[] = {1, 0};
  const auto zero = place_experts(4, 2, none);
  EXPECT_EQ(zero, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(place_experts(5, 1), (std::vector<int>(5, 0)));
}

TEST(PlaceExperts, BalancesAMeasuredLoad) {
  // Two hot experts go to different ranks, and the rest even out the sums.
  const double load[] = {100, 90, 1, 1, 1, 1, 50, 40};
  const auto o = place_experts(8, 2, {}, load);
  EXPECT_NE(o[0], o[1]);
  double sum[2] = {0, 0};
  for (int e = 0; e < 8; ++e) sum[o[e]] += load[e];
  EXPECT_LE(std::max(sum[0], sum[1]) / ((sum[0] + sum[1]) / 2), 1.05);
  EXPECT_EQ(std::count(o.begin(), o.end(), 0), 4);
}

TEST(ParallelEp, Qwen3MoeGreedyMatchesSingleNode2Ranks) { expect_same_tokens("qwen3moe", 2); }
TEST(ParallelEp, Qwen3MoeGreedyMatchesSingleNode3RanksTcp) {
  expect_same_tokens("qwen3moe", 3, {}, {}, "tcp://127.0.0.1:0");
}
TEST(ParallelEp, MixtralGreedyMatchesSingleNode2Ranks) { expect_same_tokens("llama", 2); }
TEST(ParallelEp, MixtralGreedyMatchesSingleNode3Ranks) { expect_same_tokens("llama", 3); }
TEST(ParallelEp, WeightedSharesGiveUnevenCounts) { expect_same_tokens("qwen3moe", 2, {3, 1}); }
TEST(ParallelEp, PerLayerOwnersAndARankWithoutExperts) {
  // Layer 0: everything on rank 1; layer 1: the first six on rank 0, two on rank 2.
  std::vector<int> owners = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2};
  expect_same_tokens("llama", 3, {}, owners);
}

TEST(ParallelEp, RanksReadOnlyTheirExpertsAndTheBytesAddUp) {
  const std::string path = moe_file("qwen3moe");
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.ok());
  const auto runs = expert_parallel(path, 2, 8);
  uint64_t shard_sum = 0;
  for (const RankRun& r : runs) shard_sum += r.shard_bytes;
  // Each rank holds half the experts whole and half the attention: the shards add up to the
  // whole (the router is on both ranks, so a little more).
  uint64_t routers = 0;
  for (const LayerWeights& L : (*whole)->layers()) routers += L.router.bytes();
  EXPECT_NEAR(double(shard_sum), double((*whole)->shard_bytes() + routers), (*whole)->shard_bytes() * 0.01);
  // Both ranks together ran every routed row exactly once: prompt + 8 decode steps, 2 experts
  // a row, 2 layers.
  const uint64_t rows = (kPrompt.size() + 8) * 2 * 2;
  EXPECT_EQ(runs[0].load.rank_rows[0] + runs[0].load.rank_rows[1], rows);
  EXPECT_EQ(std::accumulate(runs[0].load.tokens.begin(), runs[0].load.tokens.end(), uint64_t{0}), rows);
  EXPECT_GT(runs[0].load.balance(), 0.4);
  EXPECT_LE(runs[0].load.balance(), 1.0);
}

TEST(ParallelEpPlan, ExpertsPerNodeFollowMemoryAndBytesAddUp) {
  const std::string path = moe_file("qwen3moe");
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  const std::vector<parallel::NodeSpec> nodes = {{"big", 3ull << 30}, {"small", 1ull << 30}};
  auto p = parallel::plan_placement(**file, nodes, parallel::ParallelMode::kAuto, 256);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->mode, parallel::ParallelMode::kExpert) << p->why;
  ASSERT_EQ(p->nodes.size(), 2u);
  EXPECT_EQ(p->nodes[0].experts, 6u);
  EXPECT_EQ(p->nodes[1].experts, 2u);
  EXPECT_EQ(p->nodes[0].expert_bytes, 3 * p->nodes[1].expert_bytes);
  uint64_t experts = 0;
  for (const TensorInfo& t : (*file)->tensors())
    if (t.name.find("_exps") != std::string::npos) experts += t.n_bytes;
  EXPECT_NEAR(double(p->nodes[0].expert_bytes + p->nodes[1].expert_bytes), double(experts), 8.0);
  // Everything but the replicated vectors and routers is split (and the embedding, looked up
  // by rows in place, is not counted beside an output matrix): the nodes add up to a little
  // more than the model without its embedding.
  const uint64_t sum = p->nodes[0].weight_bytes + p->nodes[1].weight_bytes;
  const uint64_t emb = (*file)->find_tensor("token_embd.weight")->n_bytes;
  EXPECT_GE(sum + 16, p->model_bytes - emb);
  EXPECT_LT(sum, (p->model_bytes - emb) * 1.1);
  EXPECT_GT(p->nodes[0].sent_per_token, 0u);
  EXPECT_GT(p->nodes[0].kv_bytes, 0u);
  EXPECT_TRUE(p->fits);
  // A dense model asked for ep is planned tensor-parallel, saying why.
  MakeModelOptions o;
  o.dim = 128, o.layers = 1, o.heads = 2, o.ffn = 256, o.vocab = 300, o.type = "f32", o.threads = 1;
  const std::string dpath = temp.file("dense.gguf");
  ASSERT_TRUE(make_model(o, dpath).ok());
  auto df = GgufFile::open(dpath);
  ASSERT_TRUE(df.ok());
  auto dp = parallel::plan_placement(**df, nodes, parallel::ParallelMode::kExpert, 64);
  ASSERT_TRUE(dp.ok());
  EXPECT_EQ(dp->mode, parallel::ParallelMode::kTensor);
  EXPECT_NE(dp->why.find("no experts"), std::string::npos);
}

// Replicas: each step gives every chosen expert to its least busy holder. With every expert on
// both ranks the 2 experts of a decoded token go one to each rank: a perfect split, and the
// same tokens; with half of the others' experts on 3 ranks, the split is better than static.
TEST(ParallelEp, ReplicasBalanceTheRowsAndKeepTheTokens) {
  const std::string path = moe_file("qwen3moe");
  const auto ref = single_node(path, 16);
  const auto plain = expert_parallel(path, 2, 16);
  const auto full = expert_parallel(path, 2, 16, {}, {}, "shm", 1.0);
  ASSERT_EQ(full.size(), 2u);
  for (const RankRun& r : full) EXPECT_EQ(r.tokens, ref);
  EXPECT_EQ(full[0].owned, 16u);  // 8 experts x 2 layers, on each rank
  EXPECT_GE(full[0].load.balance(), 0.95);
  EXPECT_GE(full[0].load.balance(), plain[0].load.balance());
  const auto half = expert_parallel(path, 3, 16, {}, {}, "shm", 0.5);
  for (const RankRun& r : half) EXPECT_EQ(r.tokens, ref);
  EXPECT_GT(half[0].owned, 6u);  // 3 of its own a layer (8 over 3 ranks) plus replicas
  EXPECT_EQ(half[0].load.rank_rows, half[2].load.rank_rows);
  EXPECT_EQ(Model::load(path, ep_shard(0, 2, {}, {}, 1.5)).status().code(), ErrorCode::kInvalidArgument);
}

TEST(ParallelEp, BadOwnersAreRefused) {
  const std::string path = moe_file("llama");
  auto bad_rank = Model::load(path, ep_shard(0, 2, {}, {0, 1, 2, 0, 1, 0, 1, 0}));
  EXPECT_EQ(bad_rank.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad_rank.status().message().find("rank 2"), std::string::npos) << bad_rank.status().to_string();
  auto bad_count = Model::load(path, ep_shard(0, 2, {}, {0, 1, 0}));
  EXPECT_EQ(bad_count.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad_count.status().message().find("3 expert owners"), std::string::npos);
}

}  // namespace
}  // namespace lattice::engine
