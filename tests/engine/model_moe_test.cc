// Mixtures of experts on the one forward pass: qwen3moe and Mixtral (llama with ffn_*_exps)
// files written by make-model as llama.cpp's converters write them. The router picks the
// lowest expert id on ties and renormalizes; greedy text agrees with llama.cpp (through the
// node-llama-cpp oracle) for 32 tokens on F32, Q8_0 and Q4_0; tensor parallelism over 2 and 3
// ranks (each expert's FFN columns split) and batched steps give the single node's tokens;
// bad expert keys are named.
#include <gtest/gtest.h>

#include "../require.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "lattice/cluster/group.h"
#include "lattice/coll/comm.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/parallel/comm_group.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/router.h"
#include "lattice/engine/runtime/session.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "model_testlib.h"
#include "oracle_testlib.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;

TEST(Router, TopKWithTiesToTheLowestIdRenormalizedAndScaled) {
  uint32_t ids[3], order[6];
  float w[3];
  float logits[6] = {1.0f, 3.0f, 3.0f, 0.5f, 3.0f, -2.0f};  // a three-way tie at the top
  route_softmax_topk(logits, 6, 2, true, 1.0f, ids, w, order);
  EXPECT_EQ(ids[0], 1u);
  EXPECT_EQ(ids[1], 2u);
  EXPECT_NEAR(w[0], 0.5f, 1e-6);
  EXPECT_NEAR(w[1], 0.5f, 1e-6);
  float l2[6] = {0.0f, 1.0f, 2.0f, 0.0f, 0.0f, 0.0f};
  route_softmax_topk(l2, 6, 3, false, 2.5f, ids, w, order);
  const double z = 4 * 1.0 + std::exp(1.0) + std::exp(2.0);
  EXPECT_EQ(ids[0], 2u);
  EXPECT_EQ(ids[1], 1u);
  EXPECT_EQ(ids[2], 0u);  // the lowest of the four tied at 0
  EXPECT_NEAR(w[0], 2.5 * std::exp(2.0) / z, 1e-5);
  EXPECT_NEAR(w[2], 2.5 * 1.0 / z, 1e-5);
}

MakeModelOptions moe(const std::string& arch, const std::string& type) { return testing::small_moe_options(arch, type); }

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("lattice-moe-test-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
} temp;

std::string file_of(const MakeModelOptions& o) {
  const std::string path = (temp.dir / (o.arch + "-" + o.type + ".gguf")).string();
  if (!fs::exists(path)) {
    EXPECT_TRUE(make_model(o, path).ok());
  }
  return path;
}

const std::vector<int32_t> kPrompt = {257, 306, 111, 393, 286};

std::vector<int32_t> greedy_tokens(const Model& m, int n) { return testing::greedy_tokens(m, kPrompt, n); }

class MoeLlamaCpp : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(MoeLlamaCpp, GreedyTokensAgreeFor32Tokens) {
  if (!testing::oracle_available())
    LATTICE_SKIP_OR_FAIL("oracle", "the llama.cpp oracle is missing: tests/node/node_modules absent (run scripts/setup.sh)");
  const auto [arch, type] = GetParam();
  const std::string path = file_of(moe(arch, type));
  auto m = Model::load(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE((*m)->hparams().moe());
  const auto ours = greedy_tokens(**m, 32);
  auto oracle = testing::oracle_greedy(path, kPrompt, 32);
  ASSERT_TRUE(oracle.ok()) << oracle.status().to_string();
  const std::vector<int32_t>& theirs = *oracle;
  if (std::string(type) == "f32") {
    EXPECT_EQ(theirs, ours) << arch << " " << type;
    return;
  }
  // Quantized: activations are rounded differently (ggml keeps Q8_0 activation scales in f16,
  // docs/NUMERICS.md), and on random weights a router near-tie then picks another expert, so
  // the texts may part later; the first 16 bytes must agree.
  auto tok = tokenizer_from_gguf((*m)->file());
  ASSERT_TRUE(tok.ok());
  const std::string a = tok->decode(ours), b = tok->decode(theirs);
  ASSERT_GE(a.size(), 16u);
  EXPECT_EQ(a.substr(0, 16), b.substr(0, 16)) << arch << " " << type;
  size_t same = 0;
  while (same < ours.size() && ours[same] == theirs[same]) ++same;
  std::printf("[ info ] %s %s: %zu of 32 greedy tokens identical to llama.cpp's\n", arch, type, same);
}

INSTANTIATE_TEST_SUITE_P(Files, MoeLlamaCpp,
                         ::testing::Values(std::pair{"qwen3moe", "f32"}, std::pair{"qwen3moe", "q8_0"},
                                           std::pair{"qwen3moe", "q4_0"}, std::pair{"llama", "f32"},
                                           std::pair{"llama", "q8_0"}),
                         [](const auto& info) { return std::string(info.param.first) + "_" + info.param.second; });

void expect_tp_matches(const std::string& arch, int world) {
  const std::string path = file_of(moe(arch, "f32"));
  auto whole = Model::load(path);
  ASSERT_TRUE(whole.ok());
  const auto ref = greedy_tokens(**whole, 24);
  auto g = cluster::make_local_groups(world, "shm", Deadline::after(std::chrono::seconds(60)));
  ASSERT_TRUE(g.ok());
  std::vector<std::vector<int32_t>> toks(world);
  std::vector<Status> st(world);
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r)
    th.emplace_back([&, r] {
      st[r] = [&]() -> Status {
        LATTICE_ASSIGN_OR_RETURN(auto comm, coll::Communicator::create(*(*g)[r]));
        LoadOptions lo;
        lo.shard = {.rank = r, .world = world, .weights = {}};
        LATTICE_ASSIGN_OR_RETURN(auto m, Model::load(path, lo));
        parallel::CommGroup group(*comm);
        LATTICE_ASSIGN_OR_RETURN(auto s, Session::create(*m, group, {.n_ctx = 64}));
        LATTICE_RETURN_IF_ERROR(s->prefill(kPrompt));
        for (int i = 0; i < 24; ++i) {
          LATTICE_ASSIGN_OR_RETURN(int32_t t, s->argmax());
          toks[r].push_back(t);
          LATTICE_RETURN_IF_ERROR(s->decode(t));
        }
        return Status::Ok();
      }();
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    EXPECT_EQ(toks[r], ref) << arch << " rank " << r << " of " << world;
  }
}

TEST(MoeParallel, Qwen3MoeTensorParallel2Ranks) { expect_tp_matches("qwen3moe", 2); }
TEST(MoeParallel, MixtralTensorParallel3Ranks) { expect_tp_matches("llama", 3); }

TEST(Moe, BatchedStepsGiveEachSequenceItsOwnTokens) {
  auto mm = testing::make_mem_model(moe("qwen3moe", "q8_0"));
  ASSERT_TRUE(mm.model);
  const auto ref = greedy_tokens(*mm.model, 12);
  SoloGroup solo;
  auto f = Forward::create(*mm.model, solo, {.n_threads = 2, .n_batch = 32, .max_items = 3, .n_ctx = 64});
  ASSERT_TRUE(f.ok());
  std::vector<std::unique_ptr<Sequence>> seq;
  for (int i = 0; i < 3; ++i) seq.push_back(std::move(*(*f)->new_sequence()));
  std::vector<StepItem> items(3);
  for (int i = 0; i < 3; ++i) items[i] = {.seq = seq[i].get(), .tokens = kPrompt};
  ASSERT_TRUE((*f)->step(items).ok());
  std::vector<std::vector<int32_t>> got(3);
  std::vector<int32_t> next(3);
  for (int s = 0; s < 12; ++s) {
    std::vector<Sampler*> none(3, nullptr);
    auto t = (*f)->choose(none);
    ASSERT_TRUE(t.ok());
    next = *t;
    for (int i = 0; i < 3; ++i) got[i].push_back(next[i]), items[i].tokens = std::span<const int32_t>(&next[i], 1);
    ASSERT_TRUE((*f)->step(items).ok());
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], ref) << i;
}

// Decode costs what is active: one token reads the attention matrices, the router and exactly
// experts_used of the experts of every layer, then the output matrix and one embedding row.
TEST(Moe, ADecodeStepReadsOnlyTheChosenExperts) {
  auto mm = testing::make_mem_model(moe("qwen3moe", "q8_0"));
  ASSERT_TRUE(mm.model);
  const Model& m = *mm.model;
  SoloGroup solo;
  auto f = Forward::create(m, solo, {.n_threads = 1, .n_batch = 16, .max_items = 1, .n_ctx = 32});
  ASSERT_TRUE(f.ok());
  auto seq = std::move(*(*f)->new_sequence());
  StepItem it{.seq = seq.get(), .tokens = kPrompt};
  ASSERT_TRUE((*f)->step(std::span<const StepItem>(&it, 1)).ok());
  const uint64_t before = (*f)->weight_bytes_read();
  const int32_t tok = 7;
  it.tokens = std::span<const int32_t>(&tok, 1);
  ASSERT_TRUE((*f)->step(std::span<const StepItem>(&it, 1)).ok());
  uint64_t want = m.output().bytes() + m.tok_embd().row_bytes();
  uint64_t all_experts = 0;
  for (const LayerWeights& L : m.layers()) {
    want += L.wq.bytes() + L.wk.bytes() + L.wv.bytes() + L.wo.bytes() + L.router.bytes();
    const uint64_t one = L.gate_exps[0].bytes() + L.up_exps[0].bytes() + L.down_exps[0].bytes();
    want += m.hparams().n_expert_used * one;
    all_experts += m.hparams().n_expert * one;
  }
  EXPECT_EQ((*f)->weight_bytes_read() - before, want);
  EXPECT_LT(want, all_experts);  // far less than every expert
}

TEST(Moe, BadExpertKeysAreNamed) {
  auto plan = plan_model(moe("qwen3moe", "f32"));
  ASSERT_TRUE(plan.ok());
  plan->writer.metadata().set("qwen3moe.expert_used_count", uint32_t{99});
  auto bytes = plan->writer.write_to_memory(plan->fill);
  ASSERT_TRUE(bytes.ok());
  auto file = GgufFile::parse(*bytes, "bad-keys");
  ASSERT_TRUE(file.ok());
  auto m = Model::bind(std::move(*file));
  EXPECT_EQ(m.status().code(), ErrorCode::kCorrupt);
  EXPECT_NE(m.status().message().find("qwen3moe.expert_used_count"), std::string::npos) << m.status().to_string();

  // qwen3moe without experts.
  auto plan2 = plan_model(moe("qwen3moe", "f32"));
  ASSERT_TRUE(plan2.ok());
  plan2->writer.metadata().set("qwen3moe.expert_count", uint32_t{0});
  auto bytes2 = plan2->writer.write_to_memory(plan2->fill);
  ASSERT_TRUE(bytes2.ok());
  auto file2 = GgufFile::parse(*bytes2, "no-experts");
  ASSERT_TRUE(file2.ok());
  auto m2 = Model::bind(std::move(*file2));
  EXPECT_EQ(m2.status().code(), ErrorCode::kCorrupt);  // qwen3moe needs experts
  EXPECT_NE(m2.status().message().find("qwen3moe.expert_count"), std::string::npos) << m2.status().to_string();
}

}  // namespace
}  // namespace lattice::engine
