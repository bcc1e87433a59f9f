// Expert parallel with the all-to-all step (EpPrefill::kAllToAll: rows split over the ranks,
// attention tensor-parallel over the gathered rows, each row dispatched to the ranks that run
// its experts and combined back), ranks as threads over real links (shm, tcp). On F32
// qwen3moe, Mixtral and deepseek2 files (MLA, shared experts, a leading dense block) over 2
// and 3 ranks: the same greedy tokens as one node, last-row logits within float rounding of
// it, prompts whose rows split evenly and unevenly, in several chunks (a later chunk attends
// to the earlier ones' cache), with per-layer owners and a rank without experts. Every rank
// reports the same expert load, which counts every routed row once, and the path of each
// step follows the rule (ep_prefill, a2a_min_rows; one row a step decodes by reduction).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <thread>

#include "lattice/cluster/group.h"
#include "lattice/coll/comm.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/parallel/comm_group.h"
#include "lattice/engine/runtime/forward.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("lattice-a2a-test-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
} temp;

std::string model_file(const std::string& arch) {
  const std::string path = (temp.dir / (arch + ".gguf")).string();
  if (fs::exists(path)) return path;
  MakeModelOptions o;
  o.arch = arch;
  o.dim = 256;
  o.heads = 4;
  o.vocab = 512;
  o.experts = 8;
  o.experts_used = 2;
  o.type = "f32";
  o.pure = true;
  o.threads = 1;
  if (arch == "deepseek2") {
    o.layers = 3, o.ffn = 512, o.q_lora = 64, o.kv_lora = 64, o.rope_dim = 16, o.nope_dim = 32, o.v_dim = 32;
    o.expert_groups = 4, o.groups_used = 2, o.shared_experts = 1, o.dense_layers = 1, o.expert_ffn = 128;
    o.seed = 9;
  } else {
    o.layers = 2, o.kv_heads = 2, o.seed = 11;
    o.ffn = arch == "qwen3moe" ? 512 : 256;
    if (arch == "qwen3moe") o.head_dim = 64, o.expert_ffn = 128;
  }
  auto r = make_model(o, path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return path;
}

std::vector<int32_t> prompt(size_t n) {
  std::vector<int32_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = int32_t((i * 131 + 7) % 509 + 1);
  return p;
}

struct RankRun {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // after the prompt, the whole vocabulary
  ExpertLoad load;
  EpPathStats paths;
};

struct A2aCase {
  int world = 1;
  std::string uri = "shm";
  std::vector<int> owners;
  double spare = 0;  // Shard::expert_spare
  size_t prompt_len = 23;
  uint32_t chunk = 64;  // prompt rows a step
  EpPrefill mode = EpPrefill::kAllToAll;
  uint32_t a2a_min_rows = ForwardOptions::kEpA2aMinRows;
  int n = 12;
};

A2aCase setup(int world, size_t prompt_len, uint32_t chunk = 64, std::string uri = "shm") {
  A2aCase s;
  s.world = world, s.prompt_len = prompt_len, s.chunk = chunk, s.uri = std::move(uri);
  return s;
}

// One rank: prefill in chunks, then greedy decode; the tokens and the last prompt logits.
Status one_rank(const Model& m, Group& g, const A2aCase& s, RankRun* out) {
  ForwardOptions fo;
  fo.n_ctx = 96;
  fo.n_batch = 64;
  fo.ep_prefill = s.mode;
  fo.a2a_min_rows = s.a2a_min_rows;
  LATTICE_ASSIGN_OR_RETURN(auto f, Forward::create(m, g, fo));
  LATTICE_ASSIGN_OR_RETURN(auto seq, f->new_sequence());
  const auto p = prompt(s.prompt_len);
  for (size_t done = 0; done < p.size();) {
    const size_t n = std::min<size_t>(s.chunk, p.size() - done);
    const StepItem it{seq.get(), std::span<const int32_t>(p).subspan(done, n)};
    LATTICE_RETURN_IF_ERROR(f->step({&it, 1}));
    done += n;
  }
  LATTICE_RETURN_IF_ERROR(f->gather_logits(0, &out->logits));
  for (int i = 0; i < s.n; ++i) {
    LATTICE_ASSIGN_OR_RETURN(int32_t t, f->argmax());
    out->tokens.push_back(t);
    const StepItem it{seq.get(), std::span<const int32_t>(&out->tokens.back(), 1)};
    LATTICE_RETURN_IF_ERROR(f->step({&it, 1}));
  }
  out->load = f->expert_load();
  out->paths = f->ep_paths();
  return Status::Ok();
}

RankRun single_node(const std::string& path, A2aCase s) {
  RankRun out;
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return out;
  SoloGroup g;
  s.world = 1;
  Status st = one_rank(**m, g, s, &out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return out;
}

std::vector<RankRun> expert_parallel(const std::string& path, const A2aCase& s) {
  std::vector<RankRun> out(s.world);
  auto g = cluster::make_local_groups(s.world, s.uri, Deadline::after(std::chrono::seconds(60)));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return out;
  std::vector<Status> st(s.world);
  std::vector<std::thread> th;
  for (int r = 0; r < s.world; ++r)
    th.emplace_back([&, r] {
      st[r] = [&]() -> Status {
        LATTICE_ASSIGN_OR_RETURN(auto comm, coll::Communicator::create(*(*g)[r]));
        LoadOptions lo;
        lo.shard.rank = r;
        lo.shard.world = s.world;
        lo.shard.expert_parallel = true;
        lo.shard.expert_owner = s.owners;
        lo.shard.expert_spare = s.spare;
        LATTICE_ASSIGN_OR_RETURN(auto m, Model::load(path, lo));
        parallel::CommGroup group(*comm);
        return one_rank(*m, group, s, &out[r]);
      }();
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < s.world; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
  return out;
}

uint64_t sum(const std::vector<uint64_t>& v) { return std::accumulate(v.begin(), v.end(), uint64_t{0}); }

void expect_single_node(const std::string& arch, const A2aCase& s) {
  const std::string path = model_file(arch);
  const RankRun ref = single_node(path, s);
  ASSERT_EQ(ref.tokens.size(), size_t(s.n));
  const auto runs = expert_parallel(path, s);
  const uint32_t chunks = uint32_t((s.prompt_len + s.chunk - 1) / s.chunk);
  const uint32_t moe_layers = arch == "deepseek2" ? 2 : 2;
  for (int r = 0; r < s.world; ++r) {
    const RankRun& got = runs[r];
    EXPECT_EQ(got.tokens, ref.tokens) << arch << " rank " << r << " of " << s.world;
    ASSERT_EQ(got.logits.size(), ref.logits.size());
    float worst = 0, scale = 0;
    for (size_t i = 0; i < ref.logits.size(); ++i)
      worst = std::max(worst, std::fabs(got.logits[i] - ref.logits[i])), scale = std::max(scale, std::fabs(ref.logits[i]));
    EXPECT_LT(worst, 1e-4f * std::max(scale, 1.0f)) << arch << " rank " << r << ": the last prompt row's logits";
    // Every rank holds every rank's figures; every routed row counted once, 2 experts a row.
    EXPECT_EQ(got.load.tokens, runs[0].load.tokens) << r;
    EXPECT_EQ(got.load.rank_rows, runs[0].load.rank_rows) << r;
    EXPECT_EQ(sum(got.load.tokens), uint64_t(s.prompt_len + s.n) * 2 * moe_layers) << r;
    EXPECT_EQ(sum(got.load.rank_rows), sum(got.load.tokens)) << r;
    // The prompt's chunks took the all-to-all path, every one-row decode step the reduction.
    EXPECT_EQ(got.paths.a2a_steps, chunks) << r;
    EXPECT_EQ(got.paths.a2a_rows, s.prompt_len) << r;
    EXPECT_EQ(got.paths.reduce_steps, uint64_t(s.n)) << r;
  }
}

TEST(ParallelA2a, Qwen3MoeMatchesSingleNode2RanksUnevenSlices) { expect_single_node("qwen3moe", setup(2, 23)); }
TEST(ParallelA2a, Qwen3MoeMatchesSingleNode2RanksEvenSlicesInChunks) {
  expect_single_node("qwen3moe", setup(2, 24, 8));
}
TEST(ParallelA2a, Qwen3MoeMatchesSingleNode3RanksTcp) {
  expect_single_node("qwen3moe", setup(3, 31, 12, "tcp://127.0.0.1:0"));
}
TEST(ParallelA2a, MixtralMatchesSingleNode2And3Ranks) {
  expect_single_node("llama", setup(2, 17));
  expect_single_node("llama", setup(3, 30, 9));
}
TEST(ParallelA2a, Deepseek2MatchesSingleNode2And3Ranks) {
  // MLA by heads (4 heads over 3 ranks: 2, 1, 1), a shared expert, a leading dense block.
  expect_single_node("deepseek2", setup(2, 21));
  expect_single_node("deepseek2", setup(3, 26, 10));
}
TEST(ParallelA2a, Deepseek2MatchesSingleNode3RanksTcp) {
  expect_single_node("deepseek2", setup(3, 19, 64, "tcp://127.0.0.1:0"));
}
TEST(ParallelA2a, PerLayerOwnersAndARankWithoutExperts) {
  // Layer 0: every expert on rank 1 (ranks 0 and 2 dispatch everything there); layer 1: six on
  // rank 0 and two on rank 2 (rank 1 runs none).
  A2aCase s = setup(3, 25, 11);
  s.owners = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 2, 2};
  expect_single_node("llama", s);
}

TEST(ParallelA2a, ReplicasRunTheirRowsWhereTheyAre) {
  // Half, then all, of the others' experts on every rank as well: a row whose experts its home
  // rank holds stays there; the text, the logits and the load figures stay one node's.
  for (double spare : {0.5, 1.0}) {
    SCOPED_TRACE(spare);
    A2aCase s = setup(3, 25, 11);
    s.spare = spare;
    expect_single_node("qwen3moe", s);
  }
}

TEST(ParallelA2a, AutoTakesAllToAllFromTheThreshold) {
  const std::string path = model_file("qwen3moe");
  // Chunks of 10 and then 3 rows: from 8 rows all-to-all, below it (and decode) reduction.
  A2aCase s = setup(2, 13, 10);
  s.mode = EpPrefill::kAuto, s.a2a_min_rows = 8, s.n = 4;
  const auto runs = expert_parallel(path, s);
  const RankRun ref = single_node(path, s);
  for (const RankRun& r : runs) {
    EXPECT_EQ(r.tokens, ref.tokens);
    EXPECT_EQ(r.paths.a2a_steps, 1u);
    EXPECT_EQ(r.paths.a2a_rows, 10u);
    EXPECT_EQ(r.paths.reduce_steps, 1u + 4u);
    EXPECT_EQ(r.paths.reduce_rows, 3u + 4u);
  }
  // kReduce, and kAuto with no threshold (the default here), never take it.
  for (auto [mode, min_rows] : {std::pair{EpPrefill::kReduce, 1u}, std::pair{EpPrefill::kAuto, 0u}}) {
    s.mode = mode, s.a2a_min_rows = min_rows, s.n = 2;
    const auto never = expert_parallel(path, s);
    for (const RankRun& r : never) EXPECT_EQ(r.paths.a2a_steps, 0u) << to_string(mode);
  }
}

TEST(ParallelA2a, OneNodeAndTensorParallelNeverTakeIt) {
  const std::string path = model_file("qwen3moe");
  const RankRun solo = single_node(path, setup(1, 9));
  EXPECT_EQ(solo.paths.a2a_steps, 0u);
  EXPECT_EQ(solo.paths.reduce_steps, 0u) << "counted for expert-parallel steps only";
}

Hparams moe_shape(uint32_t experts, uint32_t used, uint32_t shared, uint32_t dense) {
  Hparams hp;
  hp.n_embd = 2048, hp.n_layer = 24, hp.n_expert = experts, hp.n_expert_used = used;
  hp.n_expert_shared = shared, hp.n_layer_dense_lead = dense;
  return hp;
}

EpPrefillCost cost(const Hparams& hp, int world) {
  const auto owner = place_experts(hp.n_expert, world);
  return ep_prefill_cost(
      hp, world, [&](uint32_t, uint32_t e) { return owner[e]; }, [](int) { return true; });
}

TEST(EpPrefillCost, EqualBytesOnFewRanksNeverAllToAll) {
  // The Qwen3-MoE bench shape (8 of 32) over 2 ranks: almost every row reaches both ranks, so
  // dispatch + combine move what the FFN's all-reduce moved: no saving, never all-to-all.
  const EpPrefillCost q2 = cost(moe_shape(32, 8, 0, 0), 2);
  EXPECT_NEAR(q2.a2a_floats_per_row / q2.reduce_floats_per_row, 1.0, 0.01);
  EXPECT_EQ(q2.min_rows, 0u);
  EXPECT_EQ(cost(moe_shape(32, 8, 0, 0), 3).min_rows, 0u) << "about 1% fewer bytes on 3 ranks: not enough";
  // Shared experts (every rank holds columns of them): every row reaches every rank.
  EXPECT_EQ(cost(moe_shape(64, 6, 1, 1), 2).min_rows, 0u);
  EXPECT_EQ(cost(moe_shape(64, 6, 1, 1), 3).min_rows, 0u);
}

TEST(EpPrefillCost, ManyRanksAndFewExpertsATokenGoAllToAllFromAThreshold) {
  // DeepSeek-like 8 of 256 over 8 ranks: a row reaches about 4.6 of 7 other ranks.
  const EpPrefillCost c = cost(moe_shape(256, 8, 0, 0), 8);
  EXPECT_LT(c.a2a_floats_per_row, 0.9 * c.reduce_floats_per_row);
  EXPECT_GE(c.min_rows, 8u);
  EXPECT_LT(c.min_rows, 4096u);
  // Fewer experts a token save more, so the threshold comes earlier.
  EXPECT_LT(cost(moe_shape(256, 2, 0, 0), 8).min_rows, c.min_rows);
  // One rank: nothing to choose.
  EXPECT_EQ(cost(moe_shape(256, 8, 0, 0), 1).min_rows, 0u);
}

}  // namespace
}  // namespace lattice::engine
