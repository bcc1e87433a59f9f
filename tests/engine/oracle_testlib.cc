#include "oracle_testlib.h"

#include <gtest/gtest.h>

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

std::string gguf_py_path(std::string* why) {
  const std::string script = (fs::path(LATTICE_SOURCE_DIR) / "scripts" / "gguf_py.sh").string();
  std::string out;
  if (run_command(quoted(script) + " " + quoted(LATTICE_BINARY_DIR), &out, 300) != 0) {
    *why = "gguf-py unavailable: " + out;
    return "";
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  const std::string dir = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  std::string py;
  if (run_command("PYTHONPATH=" + quoted(dir) + " python3 -c 'import numpy, gguf'", &py, 60) != 0) {
    *why = "gguf-py or numpy cannot be imported by python3 (Debian: python3-numpy; scripts/setup.sh installs it): " + py;
    return "";
  }
  return dir;
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

void expect_same_text_prefix(const Model& model, const std::vector<int32_t>& ours, const std::vector<int32_t>& theirs,
                             size_t n_bytes, const std::string& label) {
  auto tok = tokenizer_from_gguf(model.file());
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string a = tok->decode(ours), b = tok->decode(theirs);
  ASSERT_GE(a.size(), n_bytes) << label;
  ASSERT_GE(b.size(), n_bytes) << label;
  EXPECT_EQ(a.substr(0, n_bytes), b.substr(0, n_bytes)) << label;
  size_t same = 0;
  while (same < ours.size() && same < theirs.size() && ours[same] == theirs[same]) ++same;
  std::printf("[ info ] %s: %zu of %zu greedy tokens identical to llama.cpp's\n", label.c_str(), same, ours.size());
}

}  // namespace lattice::engine::testing
