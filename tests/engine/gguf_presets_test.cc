// Shape-only presets (make-model --preset NAME --shape-only): sparse files with the real
// tensor table of DeepSeek-V3.1, Kimi K2 Thinking and Qwen3-235B-A22B. The parameter counts
// the tables add up to must be the published ones (671 B, about 1.03 T, 235 B), the files
// must take no disk for their data, the reader and the planner must read them without
// touching the data, and loading them to run must fail with a message that says why.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "lattice/engine/gguf/presets.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/parallel/plan.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;

class ShapeOnly : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lattice-shape-only-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& preset) {
    const std::string path = (dir_ / (preset + ".gguf")).string();
    auto r = write_shape_only(preset, path);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return path;
  }
  fs::path dir_;
};

uint64_t n_params(const GgufFile& f) {
  uint64_t n = 0;
  for (const auto& t : f.tensors()) n += t.n_elems;
  return n;
}

TEST_F(ShapeOnly, TablesAddUpToThePublishedParameterCounts) {
  struct Case {
    const char* preset;
    double params;  // published totals
    size_t tensors;
  };
  // DeepSeek-V3: 671 B without the MTP module; Kimi K2: "1 T" (1.03 T by its config);
  // Qwen3-235B-A22B: 235 B. Tensors: 3 global + per layer 13 (dense) / 18 (MoE) for MLA,
  // 12 for Qwen3-MoE.
  for (Case c : {Case{"deepseek-v3.1-q8", 671e9, 3 + 3 * 13 + 58 * 18}, Case{"kimi-k2-thinking-q4", 1.03e12, 3 + 13 + 60 * 18},
                 Case{"qwen3-235b-a22b-q8", 235e9, 3 + 94 * 12}}) {
    const std::string path = write(c.preset);
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    EXPECT_EQ((*f)->tensors().size(), c.tensors) << c.preset;
    const double n = static_cast<double>(n_params(**f));
    EXPECT_NEAR(n / c.params, 1.0, 0.01) << c.preset << ": " << n;
    EXPECT_TRUE((*f)->metadata().get_bool(kShapeOnlyKey).value_or(false));
    // The data is a hole: the file is as long as its tensors say, yet takes almost no disk.
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    const TensorInfo& last = (*f)->tensors().back();
    EXPECT_GE(static_cast<uint64_t>(st.st_size), last.file_offset + last.n_bytes);
    EXPECT_GT(static_cast<uint64_t>(st.st_size), (*f)->total_tensor_bytes());
    EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{4} << 20) << c.preset << " takes disk";
    std::printf("[ info ] %s: %zu tensors, %.1f B parameters, %.1f GiB of tensors, %lld KiB on disk\n", c.preset,
                (*f)->tensors().size(), n / 1e9, static_cast<double>((*f)->total_tensor_bytes()) / (1ull << 30),
                static_cast<long long>(st.st_blocks) / 2);
  }
}

TEST_F(ShapeOnly, DeepSeekTensorsHaveTheConvertersShapesAndTypes) {
  auto f = GgufFile::open(write("deepseek-v3.1-q8"));
  ASSERT_TRUE(f.ok());
  auto shape = [&](const char* name) {
    const TensorInfo* t = (*f)->find_tensor(name);
    EXPECT_NE(t, nullptr) << name;
    return t ? t->shape_string() : std::string();
  };
  EXPECT_EQ(shape("blk.0.ffn_gate.weight"), "[7168, 18432]");  // a leading dense block
  EXPECT_EQ(shape("blk.3.ffn_gate_exps.weight"), "[7168, 2048, 256]");
  EXPECT_EQ(shape("blk.3.ffn_down_exps.weight"), "[2048, 7168, 256]");
  EXPECT_EQ(shape("blk.3.ffn_gate_shexp.weight"), "[7168, 2048]");
  EXPECT_EQ(shape("blk.3.exp_probs_b.bias"), "[256]");
  EXPECT_EQ(shape("blk.60.attn_q_b.weight"), "[1536, 24576]");  // 128 heads x (128 nope + 64 rope)
  EXPECT_EQ(shape("blk.60.attn_kv_a_mqa.weight"), "[7168, 576]");
  EXPECT_EQ(shape("blk.60.attn_k_b.weight"), "[128, 512, 128]");
  EXPECT_EQ(shape("blk.60.attn_v_b.weight"), "[512, 128, 128]");
  EXPECT_EQ(shape("token_embd.weight"), "[7168, 129280]");
  EXPECT_EQ((*f)->find_tensor("blk.2.ffn_gate_exps.weight"), nullptr);
  const auto& md = (*f)->metadata();
  EXPECT_EQ(md.get_string("general.architecture").value_or(""), "deepseek2");
  EXPECT_EQ(md.get_u32("deepseek2.leading_dense_block_count").value_or(0), 3u);
  EXPECT_EQ(md.get_u32("deepseek2.expert_group_count").value_or(0), 8u);
  EXPECT_EQ(md.get_u32("deepseek2.expert_group_used_count").value_or(0), 4u);
  EXPECT_EQ(md.get_u32("deepseek2.attention.key_length_mla").value_or(0), 192u);
  // Kimi's "q4": Q4_K routed experts, Q8_0 elsewhere, Q6_K output.
  auto k = GgufFile::open(write("kimi-k2-thinking-q4"));
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)->find_tensor("blk.1.ffn_up_exps.weight")->type, TensorType::kQ4_K);
  EXPECT_EQ((*k)->find_tensor("blk.1.ffn_up_shexp.weight")->type, TensorType::kQ8_0);
  EXPECT_EQ((*k)->find_tensor("blk.1.attn_q_b.weight")->type, TensorType::kQ8_0);
  EXPECT_EQ((*k)->find_tensor("output.weight")->type, TensorType::kQ6_K);
  EXPECT_EQ((*k)->find_tensor("blk.1.ffn_gate_exps.weight")->shape_string(), "[7168, 2048, 384]");
}

TEST_F(ShapeOnly, RunRefusesItAndThePlannerReadsItWithoutTheData) {
  const std::string path = write("qwen3-235b-a22b-q8");
  auto m = Model::load(path);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(m.status().to_string().find("shape-only"), std::string::npos) << m.status().to_string();
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  // 4 nodes of 512 GB: the Q8_0 model (~233 GiB) fits.
  std::vector<parallel::NodeSpec> nodes;
  for (int i = 0; i < 4; ++i) nodes.push_back({"mac" + std::to_string(i), uint64_t{512} << 30});
  auto p = parallel::plan_placement(**f, nodes, parallel::ParallelMode::kAuto, 4096);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(p->fits) << p->why;
  EXPECT_EQ(p->model_bytes, (*f)->total_tensor_bytes());
  // Nothing read the data: no page of the experts is resident.
  auto res = (*f)->resident_bytes(*(*f)->find_tensor("blk.50.ffn_up_exps.weight"));
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(*res, 0u);
}

TEST(ShapeOnlyPresets, UnknownPresetIsNamed) {
  auto r = write_shape_only("llama-405b", "/nonexistent/x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("deepseek-v3.1-q8"), std::string::npos);
}

}  // namespace
}  // namespace lattice::engine
