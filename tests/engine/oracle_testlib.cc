#include "oracle_testlib.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "lattice/engine/runtime/session.h"

namespace lattice::engine::testing {

namespace {
std::filesystem::path node_dir() { return std::filesystem::path(LATTICE_SOURCE_DIR) / "tests" / "node"; }
}  // namespace

bool oracle_available() { return std::filesystem::exists(node_dir() / "node_modules" / "node-llama-cpp"); }

Result<std::vector<int32_t>> oracle_greedy(const std::string& path, const std::vector<int32_t>& prompt, int n) {
  std::string list;
  for (int32_t t : prompt) list += (list.empty() ? "" : ",") + std::to_string(t);
  const std::string cmd = "cd '" + node_dir().string() + "' && node llamacpp_oracle.mjs greedy '" + path + "' " +
                          list + " " + std::to_string(n) + " 2>&1";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
    ::pclose(p);
  }
  const size_t brace = out.find('{');
  const auto j = nlohmann::json::parse(out.substr(brace == std::string::npos ? 0 : brace), nullptr, false);
  if (!j.is_object() || !j.contains("tokens")) return Internal("llama.cpp oracle: " + out);
  return j["tokens"].get<std::vector<int32_t>>();
}

std::vector<int32_t> session_greedy(const Model& m, const std::vector<int32_t>& prompt, int n) {
  auto s = Session::create(m, {.n_ctx = 64});
  EXPECT_TRUE(s.ok());
  if (!s.ok()) return {};
  EXPECT_TRUE((*s)->prefill(prompt).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    auto t = (*s)->argmax();
    EXPECT_TRUE(t.ok());
    if (!t.ok()) break;
    out.push_back(*t);
    EXPECT_TRUE((*s)->decode(*t).ok());
  }
  return out;
}

}  // namespace lattice::engine::testing
