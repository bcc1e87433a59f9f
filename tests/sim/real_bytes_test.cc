// The simulator's traffic against a real distributed run: `lattice run --nodes 2` reports the bytes
// each rank sends per decoded token; the simulator, given the same model and a two-host shm
// topology, must predict exactly those bytes (they follow from the layout and the schedules, not
// from timing, so the comparison is exact even on a busy machine). `run` counts the payload a rank
// hands to its collectives (CollStats::bytes), which is what crosses the wire for point-to-point
// stages and for a two-rank all-reduce; beyond two ranks an all-reduce's wire bytes differ from its
// payload and `run` does not report them, so tensor parallel is checked at two ranks.
#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "lattice/engine/gguf/make_model.h"
#include "lattice/sim/sim.h"
#include "sim_testlib.h"

namespace lattice::sim {
namespace {

std::string capture(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ::pclose(p);
  return out;
}

struct Case {
  const char* mode;
  int ranks;
  const char* provider;
  bool moe = false;
};

class SimProcess : public ::testing::TestWithParam<Case> {};

TEST_P(SimProcess, BytesPerTokenMatchARealRun) {
  const std::string mode = GetParam().mode, prov = GetParam().provider;
  const int W = GetParam().ranks;
  const std::string dir = testing::scratch_dir(mode + std::to_string(W) + prov + (GetParam().moe ? "moe" : ""));
  engine::MakeModelOptions mo;
  mo.dim = 256;
  mo.layers = 3;
  mo.heads = 8;
  mo.kv_heads = 4;
  mo.vocab = 512;
  mo.type = "q8_0";
  if (GetParam().moe) {
    mo.arch = "qwen3moe";
    mo.experts = 8;
    mo.experts_used = 2;
    mo.expert_ffn = 64;
  }
  ASSERT_TRUE(engine::make_model(mo, dir + "/m.gguf").ok());
  const std::string out = capture("timeout 120 " + std::string(LATTICE_BINARY_DIR) + "/lattice run -m " + dir +
                                  "/m.gguf -p 'a b c d' -n 8 --nodes " + std::to_string(W) + " -t 1 --provider " + prov +
                                  " --parallel " + mode +
                                  " --ignore-eos --temp 0 --json 2>/dev/null");
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  ASSERT_EQ(j["ranks"].size(), static_cast<size_t>(W)) << out;
  auto file = engine::GgufFile::open(dir + "/m.gguf");
  ASSERT_TRUE(file.ok());
  auto shape = shape_from_gguf(**file, "m.gguf");
  ASSERT_TRUE(shape.ok());
  std::string t = R"({"version": 1, "hosts": [)";
  for (int i = 0; i < W; ++i)
    t += std::string(i ? "," : "") + R"({"name": "r)" + std::to_string(i) + R"(", "address": "127.0.0.1:)" +
         std::to_string(7100 + i) + R"(", "machine": "m4-pro"})";
  t += R"(], "links": [)";
  for (int i = 0; i < W; ++i)
    for (int k = i + 1; k < W; ++k)
      t += std::string(i + k > 1 ? "," : "") + R"({"a": "r)" + std::to_string(i) + R"(", "b": "r)" + std::to_string(k) +
           R"(", "provider": ")" + prov + R"("})";
  auto topo = cluster::parse_topology(t + "]}", "local.json");
  ASSERT_TRUE(topo.ok()) << topo.status().to_string();
  SimOptions o;
  o.mode = mode == std::string("tp") ? Mode::kTensor : Mode::kPipeline;
  auto r = simulate(*shape, *topo, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::vector<double> sent(W, 0);
  for (size_t c = 0; c < r->links.size(); ++c) {
    sent[r->links[c].a[1] - '0'] += r->links[c].bytes_per_token_ab;
    sent[r->links[c].b[1] - '0'] += r->links[c].bytes_per_token_ba;
  }
  for (int i = 0; i < W; ++i)
    EXPECT_DOUBLE_EQ(sent[i], j["ranks"][i]["bytes_sent_per_token"].get<double>()) << "rank " << i << "\n" << out;
}

INSTANTIATE_TEST_SUITE_P(Modes, SimProcess,
                         ::testing::Values(Case{"tp", 2, "shm"}, Case{"pp", 2, "shm"}, Case{"tp", 2, "tcp"},
                                           Case{"pp", 3, "tcp"}, Case{"pp", 3, "shm"}, Case{"tp", 2, "shm", true},
                                           Case{"pp", 2, "tcp", true}));

}  // namespace
}  // namespace lattice::sim
