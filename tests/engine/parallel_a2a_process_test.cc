// `lattice run --nodes 2 --parallel ep` with the all-to-all prefill, as processes over shm and
// tcp: --ep-prefill a2a, reduce and auto (with a threshold) give the single node's greedy
// tokens on an F32 qwen3moe file, and the run reports which path its prefill took and the rule;
// a bad --ep-prefill is refused before any rank starts; `plan` states the rule.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "lattice/engine/gguf/make_model.h"

namespace lattice::engine {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::temp_directory_path() / ("lattice-a2a-proc-" + std::to_string(::getpid()));
struct Cleanup {
  ~Cleanup() {
    std::error_code ec;
    fs::remove_all(kDir, ec);
  }
} cleanup;

// Runs lattice with `args` (stderr kept after stdout when keep_err); the exit status in *code.
std::string lattice(const std::string& args, int* code, bool keep_err = false) {
  const std::string cmd = std::string(LATTICE_BINARY_DIR) + "/lattice " + args + (keep_err ? " 2>&1" : " 2>/dev/null");
  std::string out;
  *code = -1;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    *code = ::pclose(p);
  }
  return out;
}

std::string model() {
  fs::create_directories(kDir);
  const std::string path = (kDir / "qwen3moe.gguf").string();
  if (fs::exists(path)) return path;
  MakeModelOptions o;
  o.arch = "qwen3moe";
  o.dim = 256, o.layers = 2, o.heads = 4, o.kv_heads = 2, o.head_dim = 64, o.ffn = 512;
  o.experts = 8, o.experts_used = 2, o.expert_ffn = 128, o.vocab = 512;
  o.type = "f32", o.pure = true, o.seed = 5, o.threads = 1;
  auto r = make_model(o, path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return path;
}

const char* kPrompt = "\"the cluster is one computer and every node holds a part of it\"";

nlohmann::json run_json(const std::string& extra) {
  int code = 0;
  // --deadline-s bounds the ranks (it belongs to --nodes runs); one node ends on its own.
  const std::string out = lattice("run -m " + model() + " -p " + kPrompt + " -n 8 --temp 0 --ignore-eos --json " +
                                      (extra.empty() ? "" : "--deadline-s 120 ") + extra,
                                  &code, true);
  EXPECT_EQ(code, 0) << extra << ": " << out;
  // The JSON object is one line of its own; stderr's lines may come before it, and a rank's
  // late log line (a peer leaving as the run ends) after it.
  nlohmann::json j;
  for (size_t end = out.size(); end > 0 && !j.is_object();) {
    const size_t nl = out.rfind('\n', end - 1);
    const size_t begin = nl == std::string::npos ? 0 : nl + 1;
    if (out.compare(begin, 1, "{") == 0) j = nlohmann::json::parse(out.substr(begin, end - begin), nullptr, false);
    if (nl == std::string::npos) break;
    end = nl;
  }
  EXPECT_TRUE(j.is_object()) << extra << ": " << out;
  return j.is_object() ? j : nlohmann::json::object();
}

void paths_match_single_node(const std::string& provider) {
  const auto solo = run_json("");
  ASSERT_TRUE(solo.contains("tokens"));
  const std::string ep = "--nodes 2 --parallel ep --provider " + provider + " ";
  for (auto [flags, path] : {std::pair{"--ep-prefill a2a", "all-to-all"}, std::pair{"--ep-prefill reduce", "reduce"},
                             std::pair{"--ep-prefill auto --ep-a2a-min-rows 4", "all-to-all"},
                             std::pair{"--ep-prefill auto --ep-a2a-min-rows 100000", "reduce"}}) {
    const auto j = run_json(ep + flags);
    ASSERT_TRUE(j.contains("ep_prefill")) << flags << ": " << j.dump();
    EXPECT_EQ(j["tokens"], solo["tokens"]) << flags << " over " << provider;
    EXPECT_EQ(j["ep_prefill"]["path"], path) << flags << ": " << j["ep_prefill"].dump();
    EXPECT_EQ(j["n_prompt"], solo["n_prompt"]);
    EXPECT_FALSE(j["ep_prefill"]["rule"].get<std::string>().empty());
  }
}

TEST(ParallelA2aProcess, PathsGiveTheSingleNodesTokensOverShm) { paths_match_single_node("shm"); }
TEST(ParallelA2aProcess, PathsGiveTheSingleNodesTokensOverTcp) { paths_match_single_node("tcp"); }

TEST(ParallelA2aProcess, BadFlagsAreRefusedAndPlanStatesTheRule) {
  int code = 0;
  std::string out = lattice("run -m " + model() + " -p hi -n 1 --nodes 2 --parallel ep --ep-prefill sideways", &code, true);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--ep-prefill must be auto, reduce or a2a"), std::string::npos) << out;
  out = lattice("run -m " + model() + " -p hi -n 1 --nodes 2 --parallel ep --prefill-batch 0", &code, true);
  EXPECT_NE(code, 0);
  EXPECT_NE(out.find("--prefill-batch must be in 1..65536"), std::string::npos) << out;
  out = lattice("plan -m " + model() + " --nodes 2 --parallel ep", &code, true);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("prefill: auto: "), std::string::npos) << out;
}

}  // namespace
}  // namespace lattice::engine
