// Recovery, in process: ranks as threads in a real cluster (a coordinator, authenticated
// links over shm or tcp), generation through engine::parallel::generate_distributed, and a
// rank that leaves mid-request (its control link dropped, its endpoints closed). The survivors
// shrink, agree on the progress, re-place the model and finish with the single node's greedy
// tokens. A rank cut off from the coordinator is fenced: it fails fast, it does not spin.
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "lattice/cluster/cluster.h"
#include "lattice/cluster/membership.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/parallel/distributed.h"
#include "lattice/engine/parallel/recovery.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "model_testlib.h"
#include "parallel_testlib.h"

namespace lattice::engine::parallel {
namespace {

using namespace std::chrono_literals;

TEST(Recovery, TheFurthestProgressWinsAndOthersMustBeItsPrefix) {
  auto best = agree({{{1, 2}, 3}, {{1, 2, 3}, 5}, {{1}, 1}});
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(best->draws, 5u);
  EXPECT_EQ(agree({{{1, 2}, 0}, {{1, 3, 4}, 0}}).status().code(), ErrorCode::kInternal);
  EXPECT_EQ(agree({}).status().code(), ErrorCode::kInvalidArgument);
  auto round = decode_progress(encode_progress({{7, 8}, 2}));
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->tokens, (std::vector<int32_t>{7, 8}));
  for (const char* bad : {"", "[]", "{\"tokens\":[1]}", "{\"tokens\":[\"a\"],\"draws\":1}", "{\"tokens\":[-5],\"draws\":1}",
                          "{\"tokens\":[1],\"draws\":-1}"})
    EXPECT_EQ(decode_progress(bad).status().code(), ErrorCode::kCorrupt) << bad;
}

const testing::TempDir temp("lattice-recovery-test");

std::string model_path() {
  MakeModelOptions o;
  o.arch = "llama";
  o.dim = 256;
  o.layers = 4;
  o.heads = 4;
  o.kv_heads = 4;
  o.ffn = 704;
  o.vocab = 384;
  o.type = "f32";
  o.pure = true;
  o.seed = 5;
  o.threads = 1;
  static const std::string path = testing::cached_model(temp.file("m.gguf"), o);
  return path;
}

// A mixture of experts (qwen3moe, F32, 8 experts, 2 a token) for expert-parallel recovery.
std::string moe_model_path() {
  MakeModelOptions o = testing::small_moe_options("qwen3moe");
  o.layers = 3;
  o.kv_heads = 4;
  o.vocab = 384;
  o.seed = 6;
  static const std::string path = testing::cached_model(temp.file("moe.gguf"), o);
  return path;
}

// deepseek2 (F32): multi-head latent attention split by heads, 8 experts in 4 groups (2
// used, 2 a token), a shared expert and a leading dense block; 4 heads, so 3 ranks hold 2, 1, 1
// and the 2 survivors 2, 2.
std::string ds_model_path() {
  MakeModelOptions o = testing::small_deepseek2_options();
  o.rope_scale = 0;
  o.vocab = 384;
  o.seed = 7;
  static const std::string path = testing::cached_model(temp.file("ds2.gguf"), o);
  return path;
}

crypto::ClusterSecret secret() { return crypto::ClusterSecret::from_bytes({4, 2}); }

struct Ranks {
  std::unique_ptr<cluster::Coordinator> coordinator;
  std::vector<std::unique_ptr<cluster::Cluster>> ranks;
};

Ranks join(int world, const std::string& provider) {
  Ranks t;
  cluster::CoordinatorOptions co;
  co.listen = "127.0.0.1:0";
  co.world_size = world;
  co.secret = secret();
  auto c = cluster::Coordinator::start(co);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return t;
  t.coordinator = std::move(*c);
  const std::string addr = "127.0.0.1:" + std::to_string(t.coordinator->port());
  std::vector<std::future<Result<std::unique_ptr<cluster::Cluster>>>> f;
  for (int r = 0; r < world; ++r)
    f.push_back(std::async(std::launch::async, [&, r] {
      cluster::ClusterOptions o;
      o.rank = r;
      o.world_size = world;
      o.coordinator = addr;
      o.host_coordinator = false;
      o.provider = provider;
      o.secret = secret();
      o.name = "rank" + std::to_string(r);
      o.peer_timeout = 1000ms;
      return cluster::join_cluster(o, Deadline::after(30s));
    }));
  for (int r = 0; r < world; ++r) {
    auto res = f[r].get();
    EXPECT_TRUE(res.ok()) << res.status().to_string();
    if (res.ok()) t.ranks.push_back(std::move(*res));
  }
  return t;
}

GenerationRequest request(const Tokenizer& tok) {
  GenerationRequest q;
  q.prompt = tok.encode("the cluster is one computer");
  q.n_predict = 24;
  q.stop_at_eog = false;
  q.sampler.temperature = 0;
  return q;
}

std::vector<int32_t> single_node_tokens(const Tokenizer& tok, const std::string& path) {
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok());
  auto s = Session::create(**m, {.n_ctx = 64});
  EXPECT_TRUE(s.ok());
  GenerateOptions go;
  go.prompt = "the cluster is one computer";
  go.n_predict = 24;
  go.stop_at_eog = false;
  go.sampler.temperature = 0;
  auto r = generate(**s, tok, go);
  EXPECT_TRUE(r.ok());
  return r.ok() ? r->tokens : std::vector<int32_t>{};
}

void lose_a_rank_mid_request(const std::string& provider, Parallelism mode, int world, int victim, size_t at,
                             const std::string& path = model_path()) {
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  auto tok = tokenizer_from_gguf(**file);
  ASSERT_TRUE(tok.ok());
  const auto ref = single_node_tokens(*tok, path);
  Ranks t = join(world, provider);
  ASSERT_EQ(static_cast<int>(t.ranks.size()), world);
  DistOptions d;
  d.model_path = path;
  d.parallel = mode;
  d.coll_timeout = 10s;
  d.recovery_timeout = 15s;
  std::vector<std::future<Result<DistResult>>> f;
  for (int r = 0; r < world; ++r)
    f.push_back(std::async(std::launch::async, [&, r]() -> Result<DistResult> {
      DistHooks hooks;
      hooks.before_token = [&, r](size_t n) -> Status {
        if (r == victim && n == at) {
          // Leaves as a killed process would: no goodbye, control dropped, links closed.
          t.ranks[r]->drop_control();
          return Cancelled("injected fault: rank left");
        }
        return Status::Ok();
      };
      auto res = generate_distributed(*t.ranks[r], d, *tok, request(*tok), hooks);
      if (r == victim) t.ranks[r].reset();  // its endpoints close: the others see it gone
      return res;
    }));
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < world; ++r) {
    auto res = f[r].get();
    if (r == victim) {
      EXPECT_EQ(res.status().code(), ErrorCode::kCancelled);
      continue;
    }
    ASSERT_TRUE(res.ok()) << "rank " << r << ": " << res.status().to_string();
    EXPECT_EQ(res->gen.tokens, ref) << "rank " << r;
    ASSERT_EQ(res->recoveries.size(), 1u);
    EXPECT_EQ(res->recoveries[0].lost_ranks, std::vector<int>{victim});
    // At the token the victim left before, or the one before it: the victim may have done its
    // part of that token's last collective (rank 0's broadcast of the sampled token) when its
    // links closed, with the bytes still unread on a survivor's side, which then redoes it.
    EXPECT_TRUE(res->recoveries[0].at_token == at || res->recoveries[0].at_token + 1 == at)
        << "recovered at token " << res->recoveries[0].at_token << ", the victim left before " << at;
    EXPECT_EQ(res->world, world - 1);
    if (mode != Parallelism::kPipeline) {
      // The survivors' query heads cover the model's, each head on one of them.
      uint32_t heads = 0;
      for (const auto& rk : res->ranks) {
        EXPECT_EQ(rk["heads"][0].get<uint32_t>(), heads) << rk.dump();
        heads = rk["heads"][1].get<uint32_t>();
      }
      EXPECT_EQ(heads, 4u);
    }
    if (mode == Parallelism::kExpert) {
      // The lost rank's experts now live on the survivors: every expert on one of them.
      ASSERT_TRUE(res->expert_load.is_object());
      EXPECT_EQ(res->expert_load["per_rank"].size(), size_t(world - 1));
      size_t owned = 0;
      for (const auto& pr : res->expert_load["per_rank"]) owned += pr["experts"].size();
      EXPECT_EQ(owned, 8u);
      for (const auto& rk : res->ranks) EXPECT_GT(rk["experts_per_layer"].get<double>(), 0);
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 25s);
}

TEST(RecoveryFault, TensorParallelLosesARankOverShmAndFinishes) {
  lose_a_rank_mid_request("shm", Parallelism::kTensor, 3, 2, 6);
}
TEST(RecoveryFault, TensorParallelLosesRankZeroOverTcpAndFinishes) {
  lose_a_rank_mid_request("tcp", Parallelism::kTensor, 3, 0, 9);
}
TEST(RecoveryFault, ExpertParallelLosesARankAndItsExpertsAreRePlaced) {
  lose_a_rank_mid_request("shm", Parallelism::kExpert, 3, 1, 5, moe_model_path());
}
TEST(RecoveryFault, ExpertParallelLosesRankZeroOverTcp) {
  lose_a_rank_mid_request("tcp", Parallelism::kExpert, 2, 0, 7, moe_model_path());
}
TEST(RecoveryFault, Deepseek2TensorParallelLosesARankAndItsHeadsAreRePlaced) {
  lose_a_rank_mid_request("shm", Parallelism::kTensor, 3, 1, 6, ds_model_path());
}
TEST(RecoveryFault, Deepseek2ExpertParallelLosesARankOverTcp) {
  lose_a_rank_mid_request("tcp", Parallelism::kExpert, 3, 2, 5, ds_model_path());
}
TEST(RecoveryFault, PipelineLosesAStageAndFinishes) { lose_a_rank_mid_request("shm", Parallelism::kPipeline, 3, 1, 4); }

TEST(RecoveryFault, ARankCutOffFromTheCoordinatorIsFencedWithinTheBound) {
  Ranks t = join(2, "shm");
  ASSERT_EQ(t.ranks.size(), 2u);
  // Rank 1 loses its control link; its shrink cannot complete, so it must fail, not retry.
  t.ranks[1]->drop_control();
  Progress mine{{1, 2}, 0};
  const auto start = std::chrono::steady_clock::now();
  auto r = shrink_and_agree(*t.ranks[1], {0, 1}, mine, 2000ms);
  EXPECT_EQ(r.status().code(), ErrorCode::kPeerLost) << r.status().to_string();
  EXPECT_NE(r.status().message().find("fenced"), std::string::npos) << r.status().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4500ms);  // within 2x the bound
}

}  // namespace
}  // namespace lattice::engine::parallel
