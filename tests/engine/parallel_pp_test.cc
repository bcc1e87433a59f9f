// Pipeline parallel with ranks as threads: logits bit-identical to the single-node Session
// after a micro-batched prefill (quantized; float weights: one batch, see below) and every decode step, for 2, 3 and 4 stages over shm and tcp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "lattice/cluster/group.h"
#include "lattice/coll/comm.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/parallel/plan.h"
#include "lattice/engine/parallel/comm_group.h"
#include "lattice/engine/parallel/pp.h"
#include "lattice/engine/runtime/session.h"
#include "parallel_testlib.h"

namespace lattice::engine::parallel {
namespace {

const testing::TempDir temp("lattice-pp-test");

std::string model_file(const std::string& type) {
  MakeModelOptions o;
  o.dim = 256;
  o.layers = 5;
  o.heads = 8;
  o.kv_heads = 2;
  o.ffn = 704;
  o.vocab = 512;
  o.type = type;
  o.pure = true;
  o.seed = 3;
  o.threads = 1;
  return testing::cached_model(temp.file(type + ".gguf"), o);
}

const std::vector<int32_t> kPrompt = {1, 5, 77, 300, 12, 9, 401, 33, 2};

void expect_bit_identical(const std::string& type, int world, const std::string& uri, uint32_t micro) {
  const std::string path = model_file(type);
  const int steps = 16;
  const testing::Trace ref = testing::single_node_trace(path, kPrompt, steps, 64);
  std::vector<std::vector<std::vector<float>>> logits(world);
  std::vector<std::vector<int32_t>> toks(world);
  auto st = testing::on_local_ranks(world, uri, [&](int r, CommGroup& group) -> Status {
    LATTICE_ASSIGN_OR_RETURN(auto ranges, pp_layers(5, world));
    LoadOptions lo;
    lo.shard.layer_begin = ranges[r].begin;
    lo.shard.layer_end = ranges[r].end;
    LATTICE_ASSIGN_OR_RETURN(auto stage, Model::load(path, lo));
    PpSessionOptions po;
    po.session.n_ctx = 64;
    po.session.n_batch = micro;
    LATTICE_ASSIGN_OR_RETURN(auto s, PpSession::create(*stage, group, po));
    LATTICE_RETURN_IF_ERROR(s->prefill(kPrompt));
    for (int i = 0; i < steps; ++i) {
      std::vector<float> lg;
      LATTICE_RETURN_IF_ERROR(s->gather_logits(&lg));
      logits[r].push_back(std::move(lg));
      LATTICE_ASSIGN_OR_RETURN(int32_t t, s->argmax());
      toks[r].push_back(t);
      LATTICE_RETURN_IF_ERROR(s->decode(t));
    }
    return Status::Ok();
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
    EXPECT_EQ(toks[r], ref.tokens) << "rank " << r;
    ASSERT_EQ(logits[r].size(), ref.logits.size());
    for (size_t i = 0; i < ref.logits.size(); ++i)
      ASSERT_EQ(0, std::memcmp(logits[r][i].data(), ref.logits[i].data(), ref.logits[i].size() * sizeof(float)))
          << type << " " << world << " stages over " << uri << ": rank " << r << " step " << i << " differs";
  }
}

TEST(ParallelPpSplit, EveryStageGetsALayer) {
  auto r = pp_layers(22, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].begin, 0u);
  EXPECT_EQ((*r)[2].end, 22u);
  for (auto x : *r) EXPECT_GE(x.size(), 7u);
  const double w[] = {1, 3};
  auto u = pp_layers(10, 2, w);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ((*u)[0].size(), 3u);  // 1 + 8/4
  EXPECT_FALSE(pp_layers(2, 3).ok());
}

TEST(ParallelPp, Q8_0BitIdentical2StagesShm) { expect_bit_identical("q8_0", 2, "shm", 2); }
TEST(ParallelPp, Q4_0BitIdentical3StagesTcp) { expect_bit_identical("q4_0", 3, "tcp://127.0.0.1:0", 3); }
// Float weights: the engine's prefill tiles tokens by 4, so results are bit-identical only
// when prefill is cut the same way as on the single node (one batch here); quantized weights
// are bit-identical for any micro-batch (each block's integer dot product is exact).
TEST(ParallelPp, F16BitIdentical4StagesShm) { expect_bit_identical("f16", 4, "shm", 16); }
TEST(ParallelPp, F32BitIdentical2StagesTcp) { expect_bit_identical("f32", 2, "tcp://127.0.0.1:0", 16); }

}  // namespace
}  // namespace lattice::engine::parallel

namespace lattice::engine::parallel {
namespace {

// The model file with its layer `from`'s tensors renamed to layer `to` and block_count set to
// `layers` (the tensor data a hole: only the table is read).
std::string relabelled(uint32_t from, uint32_t to, uint32_t layers, const std::string& name) {
  auto f = GgufFile::open(model_file("q8_0"));
  EXPECT_TRUE(f.ok());
  GgufWriter w;
  w.metadata() = (*f)->metadata();
  w.metadata().set("llama.block_count", layers);
  const std::string a = "blk." + std::to_string(from) + ".", b = "blk." + std::to_string(to) + ".";
  for (const TensorInfo& t : (*f)->tensors()) {
    std::string n = t.name.rfind(a, 0) == 0 ? b + t.name.substr(a.size()) : t.name;
    EXPECT_TRUE(w.add_tensor(n, t.type, std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)).ok());
  }
  WriteOptions o;
  o.sparse_data = true;
  EXPECT_TRUE(w.write(temp.file(name), {}, o).ok());
  return temp.file(name);
}

// Found by fuzz/gguf_fuzz.cc (session 14, corpus/gguf/regression-layer-index-timeout.gguf): a
// file whose block_count matched a tensor "blk.150994944." (and so passed the check of its last
// layer) kept a pipeline plan looping over 1.5 x 10^8 layers x its tensors. Every layer must hold
// tensors, so block_count is at most the tensor count.
TEST(ParallelPlan, EveryLayerHoldsTensors) {
  const std::vector<NodeSpec> two = {{"a", 1ull << 30}, {"b", 1ull << 30}};
  auto gap = GgufFile::open(relabelled(2, 7, 8, "gap.gguf"));  // layers 0,1,3,4,7 of 8
  ASSERT_TRUE(gap.ok()) << gap.status().to_string();
  auto p = plan_placement(**gap, two, ParallelMode::kPipeline, 64);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("block_count is 8 but the file has no tensors of layer 2"), std::string::npos)
      << p.status().to_string();
  auto far = GgufFile::open(relabelled(4, 150994944, 150994945, "far.gguf"));
  ASSERT_TRUE(far.ok()) << far.status().to_string();
  p = plan_placement(**far, two, ParallelMode::kPipeline, 64);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("block_count is 150994945 but the file has only"), std::string::npos)
      << p.status().to_string();
}

TEST(ParallelPlan, BytesAddUpAndTooLittleMemoryIsRefused) {
  const std::string path = model_file("q8_0");
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  const uint64_t big = 1ull << 30;
  for (ParallelMode mode : {ParallelMode::kTensor, ParallelMode::kPipeline}) {
    auto p = plan_placement(**f, {{"a", big}, {"b", big}, {"c", big}}, mode, 256);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_TRUE(p->fits);
    uint64_t w = 0;
    for (const auto& n : p->nodes) w += n.weight_bytes;
    // Every weight but the embedding table (read a row at a time) is placed once.
    const uint64_t emb = (*f)->find_tensor("token_embd.weight")->n_bytes;
    EXPECT_NEAR(double(w), double(p->model_bytes - emb), p->model_bytes * 0.02) << (mode == ParallelMode::kTensor);
    EXPECT_GT(p->nodes[0].sent_per_token, 0u);
  }
  auto tight = plan_placement(**f, {{"a", 100000}, {"b", 100000}}, ParallelMode::kAuto, 256);
  ASSERT_TRUE(tight.ok());
  EXPECT_FALSE(tight->fits);
  EXPECT_GT(tight->missing_bytes, 0u);
  auto autop = plan_placement(**f, {{"a", big}, {"b", big}, {"c", big}}, ParallelMode::kAuto, 256);
  ASSERT_TRUE(autop.ok());
  EXPECT_EQ(autop->mode, ParallelMode::kPipeline);  // 3 nodes > 2 KV heads
}

}  // namespace
}  // namespace lattice::engine::parallel
