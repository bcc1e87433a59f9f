// Why lattice and llama.cpp part on model_deepseek2_test.cc's deepseek2 Q4_0 file (issue 14):
// both engines run the Q4_0 file and a twin of it with every tensor dequantized to F32 (the
// same weights, products without activation rounding: the exact answer for these weights).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../require.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/quant/quantize.h"
#include "lattice/engine/runtime/session.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "oracle_testlib.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;

// model_deepseek2_test.cc's ds("q4_0").
MakeModelOptions ds_q4_0() {
  MakeModelOptions o;
  o.arch = "deepseek2";
  o.dim = 256, o.layers = 3, o.heads = 4, o.ffn = 512, o.vocab = 512;
  o.q_lora = 64, o.kv_lora = 64, o.rope_dim = 16, o.nope_dim = 32, o.v_dim = 32;
  o.experts = 8, o.experts_used = 2, o.expert_groups = 4, o.groups_used = 2, o.shared_experts = 1;
  o.dense_layers = 1, o.expert_ffn = 128, o.rope_scale = 4;
  o.type = "q4_0";
  o.pure = true;
  o.seed = 9;
  return o;
}

// `src` written again with the tensors `pick` selects dequantized to F32.
Status write_dequantized(const GgufFile& src, const std::string& out, const std::function<bool(const std::string&)>& pick) {
  GgufWriter w;
  w.metadata() = src.metadata();
  for (const TensorInfo& t : src.tensors()) {
    const bool deq = pick(t.name) && t.type != TensorType::kF32;
    LATTICE_RETURN_IF_ERROR(w.add_tensor(t.name, deq ? TensorType::kF32 : t.type, std::vector<uint64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)));
  }
  auto r = w.write(out, [&](size_t i, const TensorSpec& spec, std::span<std::byte> bytes) -> Status {
    const TensorInfo& t = src.tensors()[i];
    if (spec.type == t.type) {
      std::copy(t.data, t.data + t.n_bytes, bytes.data());
      return Status::Ok();
    }
    const uint64_t n = t.ne[0];
    for (uint64_t r = 0; r < t.n_rows(); ++r)
      LATTICE_RETURN_IF_ERROR(dequantize_row(t.type, t.data + r * t.row_bytes(),
                                             reinterpret_cast<float*>(bytes.data()) + r * n, n));
    return Status::Ok();
  });
  return r.ok() ? Status::Ok() : r.status();
}

std::vector<double> log_softmax(std::span<const float> lg) {
  double mx = -INFINITY, sum = 0;
  for (float v : lg) mx = std::max(mx, double(v));
  for (float v : lg) sum += std::exp(v - mx);
  std::vector<double> out(lg.size());
  for (size_t i = 0; i < lg.size(); ++i) out[i] = lg[i] - mx - std::log(sum);
  return out;
}

std::vector<double> ours_after(const std::string& path, const std::vector<int32_t>& prompt) {
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  auto s = Session::create(**m, {.n_ctx = 64, .n_threads = 2, .n_batch = 64});
  EXPECT_TRUE(s.ok() && (*s)->prefill(prompt).ok());
  return log_softmax((*s)->logits());
}

std::vector<double> theirs_after(const std::string& path, const std::vector<int32_t>& prompt) {
  const auto j = testing::llamacpp_oracle("logprobs", path, prompt, 0);
  if (!j.is_object()) return {};
  const auto& row = j["logprobs"].back();
  std::vector<double> out(row.size(), -INFINITY);
  for (size_t i = 0; i < row.size(); ++i)
    if (!row[i].is_null()) out[i] = row[i].get<double>();
  return out;
}

int argmax(const std::vector<double>& v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }
double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::isfinite(a[i]) && std::isfinite(b[i])) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Figures (2026-12-02, llama.cpp 80fb11a via node-llama-cpp, lattice avx512), first step
// after the prompt, log-probabilities; "exact" is the all-F32 twin, where both engines agree:
//   exact (F32 twin):        top 438 at -4.4711 in both engines
//   Q4_0, lattice:           top 438 at -4.4533 (0.018 from exact); whole row within 0.083
//   Q4_0, llama.cpp:         top 488 at -4.5992; it gives 438 -4.7232 (0.252 from exact); whole
//                            row within 0.436; its top five 488 400 133 402 87 within 0.083
//   llama.cpp, attn_k_b F32 (the rest Q4_0): top 438, greedy 438 499 321 143 as lattice's;
//   the same with only attn_v_b or only the ffn_* tensors in F32; not with only ffn_gate_inp or
//   output/token_embd in F32.
// So the Q4_0 file's first token parts because llama.cpp's Q4_0 products land 0.25 nats from
// the exact products of the same weights, enough to reorder its flat top five; lattice stays
// with the exact answer. (The one difference in the two engines' Q4_0 arithmetic we know of:
// ggml's 8-bit activation blocks keep f16 scales, lattice's f32.) The test checks lattice
// against the exact answer, not against llama.cpp's Q4_0.
TEST(Deepseek2Q4LlamaCpp, Q4_0TextFollowsTheExactProductsOfItsWeights) {
  const std::string why = testing::oracle_missing();
  if (!why.empty()) LATTICE_SKIP_OR_FAIL("oracle", why);
  const fs::path dir = fs::temp_directory_path() / ("lattice-ds2q4-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string q4 = (dir / "q4_0.gguf").string(), twin = (dir / "q4_0-as-f32.gguf").string();
  ASSERT_TRUE(make_model(ds_q4_0(), q4).ok());
  {
    auto src = GgufFile::open(q4);
    ASSERT_TRUE(src.ok());
    ASSERT_TRUE(write_dequantized(**src, twin, [](const std::string&) { return true; }).ok());
  }
  const std::vector<int32_t> prompt = {257, 306, 111, 393, 286};
  auto mq = Model::load(q4), mt = Model::load(twin);
  ASSERT_TRUE(mq.ok() && mt.ok());
  // The exact answer: on the F32 twin the engines agree token for token.
  const auto exact = testing::greedy_tokens(**mt, prompt, 32);
  const auto exact_theirs = testing::oracle_greedy(twin, prompt, 32);
  ASSERT_TRUE(exact_theirs.ok()) << exact_theirs.status().to_string();
  EXPECT_EQ(*exact_theirs, exact);
  // lattice's Q4_0 text keeps the exact text's first 16 bytes.
  const auto ours = testing::greedy_tokens(**mq, prompt, 32);
  auto tok = tokenizer_from_gguf((*mq)->file());
  ASSERT_TRUE(tok.ok());
  const std::string a = tok->decode(ours), e = tok->decode(exact);
  ASSERT_GE(a.size(), 16u);
  EXPECT_EQ(a.substr(0, 16), e.substr(0, 16));
  // The first step's figures, printed: each engine's Q4_0 distance from the exact answer.
  const auto lo = ours_after(q4, prompt), lt = theirs_after(q4, prompt), le = ours_after(twin, prompt);
  ASSERT_FALSE(lo.empty() || lt.empty() || le.empty());
  const int te = argmax(le), to = argmax(lo), tt = argmax(lt);
  std::printf("[ info ] deepseek2 q4_0 first step: exact top %d %.4f; lattice top %d, gives it %.4f; llama.cpp top %d "
              "%.4f, gives it %.4f; max |d| from exact: lattice %.4f, llama.cpp %.4f\n",
              te, le[te], to, lo[te], tt, lt[tt], lt[te], max_abs_diff(lo, le), max_abs_diff(lt, le));
  std::vector<int> order(lt.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::partial_sort(order.begin(), order.begin() + 5, order.end(), [&](int x, int y) { return lt[x] > lt[y]; });
  std::printf("[ info ] llama.cpp's q4_0 top five:");
  for (int i = 0; i < 5; ++i) std::printf(" %d %.4f", order[i], lt[order[i]]);
  std::printf("\n");
  std::fflush(stdout);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lattice::engine
