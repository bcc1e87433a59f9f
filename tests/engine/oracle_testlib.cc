#include "oracle_testlib.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "lattice/engine/runtime/session.h"
#include "lattice/engine/tokenizer/from_gguf.h"

namespace lattice::engine::testing {

namespace fs = std::filesystem;

namespace {
const fs::path kNodeDir = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node";
// s as one shell word.
std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

int run_command(const std::string& cmd, std::string* out, int timeout_s) {
  const std::string full = "timeout " + std::to_string(timeout_s) + " sh -c " + quoted(cmd) + " 2>&1";
  out->clear();
  FILE* p = ::popen(full.c_str(), "r");
  if (p == nullptr) return -1;
  char buf[65536];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, got);
  const int rc = ::pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string oracle_missing() {
  if (!fs::exists(kNodeDir / "node_modules" / "node-llama-cpp"))
    return "llama.cpp oracle missing: " + (kNodeDir / "node_modules" / "node-llama-cpp").string() +
           " absent (run scripts/setup.sh, or npm ci in tests/node)";
  if (std::system("command -v node >/dev/null 2>&1") != 0)
    return "llama.cpp oracle missing: no node on PATH (it runs tests/node/llamacpp_oracle.mjs)";
  return "";
}

nlohmann::json llamacpp_oracle(const std::string& mode, const std::string& path, const std::vector<int32_t>& toks,
                               int n) {
  std::string list;
  for (int32_t t : toks) list += (list.empty() ? "" : ",") + std::to_string(t);
  const std::string cmd = "cd " + quoted(kNodeDir.string()) + " && node llamacpp_oracle.mjs " + mode + " " + quoted(path) + " " + list +
                          " " + std::to_string(n);
  std::string out;
  const int rc = run_command(cmd, &out, 240);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out.substr(0, 2000);
  const auto brace = out.rfind('{');
  if (rc != 0 || brace == std::string::npos) {
    ADD_FAILURE() << "no JSON from the oracle: " << out.substr(0, 2000);
    return nullptr;
  }
  return nlohmann::json::parse(out.substr(brace), nullptr, false);
}

GgufPy gguf_py(std::string* why) {
  // Once per process: the script reads the 35 MB bundle's head each time.
  static const std::pair<GgufPy, std::string> found = [] {
    const std::string script = (fs::path(LATTICE_SOURCE_DIR) / "scripts" / "gguf_py.sh").string();
    std::string out;
    if (run_command(quoted(script) + " " + quoted(LATTICE_BINARY_DIR), &out, 300) != 0)
      return std::pair{GgufPy{}, "gguf-py unavailable: " + out};
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    const std::string dir = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
    // Debian's python3-numpy belongs to /usr/bin/python3, which a python3 earlier on PATH
    // (pyenv, a venv) may not see.
    std::string errors;
    for (const std::string py : {"/usr/bin/python3", "python3"}) {
      std::string msg;
      if (run_command("PYTHONPATH=" + quoted(dir) + " " + py + " -c 'import numpy, gguf'", &msg, 60) == 0)
        return std::pair{GgufPy{py, dir}, std::string()};
      errors += py + ": " + msg;
    }
    return std::pair{GgufPy{}, "gguf-py or numpy cannot be imported (Debian: python3-numpy; scripts/setup.sh installs it): " +
                                   errors};
  }();
  *why = found.second;
  return found.first;
}

std::string GgufPy::command(const std::string& script, const std::string& args) const {
  return "PYTHONPATH=" + quoted(path) + " " + python + " " + quoted(script) + " " + args;
}

std::vector<int32_t> spread_prompt(uint32_t n_vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < 12; ++i) t.push_back(static_cast<int32_t>((i * 97 + 5) % n_vocab));
  return t;
}

std::vector<int32_t> greedy_tokens(const Model& model, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> out;
  auto s = Session::create(model, {.n_ctx = 128, .n_threads = 2, .n_batch = 64});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return out;
  EXPECT_TRUE((*s)->prefill(prompt).ok());
  for (int i = 0; i < n; ++i) {
    auto lg = (*s)->logits();
    const auto next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    out.push_back(next);
    EXPECT_TRUE((*s)->decode(next).ok());
  }
  return out;
}

namespace {
// log-softmax of lattice's logits after prompt + ours[0..k).
std::vector<double> our_logprobs_at(const Model& model, const std::vector<int32_t>& prompt,
                                    const std::vector<int32_t>& ours, size_t k) {
  auto s = Session::create(model, {.n_ctx = 128, .n_threads = 2, .n_batch = 64});
  EXPECT_TRUE(s.ok());
  if (!s.ok()) return {};
  EXPECT_TRUE((*s)->prefill(prompt).ok());
  for (size_t i = 0; i < k; ++i) EXPECT_TRUE((*s)->decode(ours[i]).ok());
  const auto lg = (*s)->logits();
  double mx = -INFINITY, sum = 0;
  for (float v : lg) mx = std::max(mx, static_cast<double>(v));
  for (float v : lg) sum += std::exp(v - mx);
  std::vector<double> out(lg.size());
  for (size_t v = 0; v < lg.size(); ++v) out[v] = lg[v] - mx - std::log(sum);
  return out;
}
}  // namespace

void expect_same_text_prefix(const Model& model, const std::vector<int32_t>& prompt, const std::vector<int32_t>& ours,
                             const std::vector<int32_t>& theirs, size_t n_bytes, double tie, const std::string& label) {
  auto tok = tokenizer_from_gguf(model.file());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string a = tok->decode(ours), b = tok->decode(theirs);
  ASSERT_GE(a.size(), n_bytes) << label;
  ASSERT_GE(b.size(), n_bytes) << label;
  size_t same = 0;
  while (same < ours.size() && same < theirs.size() && ours[same] == theirs[same]) ++same;
  std::printf("[ info ] %s: %zu of %zu greedy tokens identical to llama.cpp's\n", label.c_str(), same, ours.size());
  if (a.substr(0, n_bytes) == b.substr(0, n_bytes)) return;
  // The texts part within n_bytes at token `same`, after identical histories. That is allowed
  // only at a near-tie: llama.cpp's log-probabilities of its token and of ours within `tie`.
  ASSERT_LT(same, std::min(ours.size(), theirs.size())) << label;
  const auto j = llamacpp_oracle("steps", model.file().path(0), prompt, static_cast<int>(same) + 1);
  ASSERT_TRUE(j.is_object() && j.contains("logprobs")) << label;
  const auto& row = j["logprobs"][same];
  const auto ref = [&](int32_t t) {
    return t < static_cast<int32_t>(row.size()) && !row[t].is_null() ? row[t].get<double>() : -INFINITY;
  };
  const auto mine = our_logprobs_at(model, prompt, ours, same);
  ASSERT_FALSE(mine.empty());
  const int32_t lt = theirs[same], ot = ours[same];
  std::printf("[ info ] %s: parted at token %zu: llama.cpp %d %.5f / %d %.5f, lattice %d %.5f / %d %.5f\n",
              label.c_str(), same, lt, ref(lt), ot, ref(ot), lt, mine[lt], ot, mine[ot]);
  EXPECT_LE(ref(lt) - ref(ot), tie) << label << ": the texts differ in their first " << n_bytes
                                    << " bytes at token " << same << ", where llama.cpp's margin is no near-tie\n"
                                    << "  ours:   " << a.substr(0, n_bytes) << "\n  theirs: " << b.substr(0, n_bytes);
}

bool oracle_available() { return oracle_missing().empty(); }

Result<std::vector<int32_t>> oracle_greedy(const std::string& path, const std::vector<int32_t>& prompt, int n) {
  const nlohmann::json j = llamacpp_oracle("greedy", path, prompt, n);
  if (!j.is_object() || !j.contains("tokens")) return Internal("llama.cpp oracle gave no tokens for " + path);
  return j["tokens"].get<std::vector<int32_t>>();
}

}  // namespace lattice::engine::testing
