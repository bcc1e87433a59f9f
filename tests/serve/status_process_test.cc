// GET /status and /metrics carry each rank's shard, its machine's readings and each link's
// figures: on one process, and on two ranks (`lattice serve --nodes 2`, where rank 1 reports
// its own through the lockstep reports and its link to rank 0 is measured at start).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "lattice/engine/gguf/make_model.h"
#include "serve_testlib.h"

namespace lattice::serve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::curl;
using testing::metric;

// A reading is a number or, where this machine does not give it, null; never absent.
void expect_reading(const json& rank, const char* key, bool must_be_known) {
  ASSERT_TRUE(rank.contains(key)) << key << " missing: " << rank.dump();
  const json& v = rank[key];
  EXPECT_TRUE(v.is_number() || v.is_null()) << key << ": " << v.dump();
  if (must_be_known) EXPECT_TRUE(v.is_number()) << key << " unknown on Linux: " << rank.dump();
}

void expect_host_fields(const json& rank) {
  const bool linux_proc = fs::exists("/proc/meminfo");
  expect_reading(rank, "mem_used", linux_proc);
  expect_reading(rank, "mem_free", linux_proc);
  expect_reading(rank, "mem_total", linux_proc);
  expect_reading(rank, "load1", linux_proc);
  expect_reading(rank, "cpu_busy", false);  // a rate: known from the second sample
  expect_reading(rank, "temp_c", false);
  expect_reading(rank, "power_w", false);
  if (rank["mem_used"].is_number()) {
    EXPECT_GT(rank["mem_used"].get<double>(), 0);
    EXPECT_NEAR(rank["mem_used"].get<double>() + rank["mem_free"].get<double>(), rank["mem_total"].get<double>(), 1);
  }
  // Temperatures where this machine has them (the same readers, with /sys for a root).
  bool zones = false;
  for (const char* d : {"/sys/class/thermal", "/sys/class/hwmon"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      std::ifstream t(e.path() / "temp");
      std::ifstream h(e.path() / "temp1_input");
      long v = 0;
      zones = zones || ((t >> v) && v > 0) || ((h >> v) && v > 0);
    }
  }
  if (zones) EXPECT_TRUE(rank["temp_c"].is_number()) << rank.dump();
  EXPECT_GE(rank["cpus"].get<int>(), 1);
  EXPECT_TRUE(rank["experts"].is_object());
  EXPECT_EQ(rank["experts"]["n_expert"], 0) << "the test model is dense";
  EXPECT_GT(rank["heads"][1].get<int>(), rank["heads"][0].get<int>());
}

TEST(ServeStatusProcess, OneProcessReportsItsMachine) {
  if (!fs::exists(cluster::testing::lattice_bin())) GTEST_SKIP() << "lattice not built";
  if (!testing::have_curl()) GTEST_SKIP() << "curl absent (scripts/setup.sh installs it)";
  testing::TinyModel model;
  ASSERT_TRUE(model.ok());
  testing::ServeProc serve;
  ASSERT_TRUE(serve.start(model.path(), {"-t", "1", "--slots", "1"}).ok()) << serve.proc().err();
  json s = json::parse(curl(serve.base_url() + "/status").body, nullptr, false);
  ASSERT_TRUE(s.is_object());
  ASSERT_EQ(s["ranks"].size(), 1u);
  expect_host_fields(s["ranks"][0]);
  // The second look, a second later, has a CPU rate.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  s = json::parse(curl(serve.base_url() + "/status").body, nullptr, false);
  if (fs::exists("/proc/stat")) {
    ASSERT_TRUE(s["ranks"][0]["cpu_busy"].is_number()) << s.dump();
    EXPECT_GE(s["ranks"][0]["cpu_busy"].get<double>(), 0);
    EXPECT_LE(s["ranks"][0]["cpu_busy"].get<double>(), 1);
  }
  const std::string m = curl(serve.base_url() + "/metrics").body;
  if (fs::exists("/proc/meminfo")) {
    EXPECT_GT(metric(m, "lattice_rank_host_memory_total_bytes{rank=\"0\"}"), 1e6) << m;
    EXPECT_GE(metric(m, "lattice_rank_host_load1{rank=\"0\"}"), 0) << m;
  }
  EXPECT_NE(m.find("# TYPE lattice_rank_host_temperature_celsius gauge"), std::string::npos);
  EXPECT_NE(m.find("# TYPE lattice_rank_host_power_watts gauge"), std::string::npos);
  ASSERT_TRUE(serve.stop().ok());
}

TEST(ServeStatusProcess, TwoRanksReportTheirMachinesAndTheMeasuredLink) {
  if (!fs::exists(cluster::testing::lattice_bin())) GTEST_SKIP() << "lattice not built";
  if (!testing::have_curl()) GTEST_SKIP() << "curl absent (scripts/setup.sh installs it)";
  testing::TinyModel model;
  ASSERT_TRUE(model.ok());
  testing::ServeProc serve;
  ASSERT_TRUE(serve.start(model.path(), {"--nodes", "2", "-t", "1", "--slots", "1"}).ok()) << serve.proc().err();
  // Rank 1's report comes at rank 0's next exchange (an idle tick).
  json s;
  for (auto until = Deadline::after(std::chrono::seconds(20)); !until.expired();) {
    s = json::parse(curl(serve.base_url() + "/status").body, nullptr, false);
    if (s.is_object() && s["ranks"].size() == 2 && s["ranks"][1]["mem_total"].is_number()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(s["ranks"].size(), 2u) << s.dump();
  for (const json& r : s["ranks"]) expect_host_fields(r);
  // Two tensor-parallel shards: the heads split between them.
  EXPECT_EQ(s["ranks"][0]["heads"][1], s["ranks"][1]["heads"][0]) << s.dump();
  // The link 0-1, measured at start by its lower end (rank 0): a latency and a bandwidth.
  const json* link = nullptr;
  for (const json& l : s["ranks"][0]["links"])
    if (l["peer"] == 1) link = &l;
  ASSERT_NE(link, nullptr) << s.dump();
  ASSERT_TRUE((*link)["lat_us"].is_number()) << link->dump();
  ASSERT_TRUE((*link)["gbps"].is_number()) << link->dump();
  EXPECT_GT((*link)["lat_us"].get<double>(), 0);
  EXPECT_LT((*link)["lat_us"].get<double>(), 1e5) << "a local link over 100 ms";
  EXPECT_GT((*link)["gbps"].get<double>(), 0.01) << "a local link under 10 Mbit/s";
  EXPECT_EQ((*link)["figures_from"], "ping");
  const std::string m = curl(serve.base_url() + "/metrics").body;
  EXPECT_GT(metric(m, "lattice_link_latency_microseconds{rank=\"0\",peer=\"1\",from=\"ping\"}"), 0) << m;
  EXPECT_GT(metric(m, "lattice_link_bandwidth_gbits{rank=\"0\",peer=\"1\",from=\"ping\"}"), 0) << m;
  if (fs::exists("/proc/meminfo")) {
    EXPECT_GT(metric(m, "lattice_rank_host_memory_available_bytes{rank=\"1\"}"), 0) << m;
  }
  // Still serving after the probe: the links work for the collectives.
  EXPECT_EQ(curl(serve.base_url() + "/v1/completions", {"-d", R"({"prompt":"abc","max_tokens":8})"}).status, 200);
  ASSERT_TRUE(serve.stop().ok());
  EXPECT_EQ(serve.proc().err().find("out of step"), std::string::npos) << serve.proc().err();
}

// A mixture of experts over two tensor-parallel ranks: each holds every expert, a column
// slice of each, and the slices meet.
TEST(ServeStatusProcess, TwoRanksOfAMixtureOfExpertsShowTheirExpertSlices) {
  if (!fs::exists(cluster::testing::lattice_bin())) GTEST_SKIP() << "lattice not built";
  if (!testing::have_curl()) GTEST_SKIP() << "curl absent (scripts/setup.sh installs it)";
  const fs::path dir = fs::temp_directory_path() / ("lattice-status-moe-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "moe.gguf").string();
  engine::MakeModelOptions o;
  o.dim = 64, o.layers = 2, o.heads = 4, o.kv_heads = 2, o.vocab = 300, o.context_length = 2048;
  o.ffn = 128, o.experts = 4, o.experts_used = 2, o.type = "q8_0", o.threads = 1;
  ASSERT_TRUE(engine::make_model(o, path).ok());
  testing::ServeProc serve;
  ASSERT_TRUE(serve.start(path, {"--nodes", "2", "--parallel", "tp", "-t", "1", "--slots", "1", "--ctx", "512"}).ok()) << serve.proc().err();
  json s;
  for (auto until = Deadline::after(std::chrono::seconds(20)); !until.expired();) {
    s = json::parse(curl(serve.base_url() + "/status").body, nullptr, false);
    if (s.is_object() && s["ranks"].size() == 2 && s["ranks"][1]["experts"]["n_expert"] == 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(s["ranks"].size(), 2u) << s.dump();
  for (const json& r : s["ranks"]) {
    EXPECT_EQ(r["experts"]["n_expert"], 4) << r.dump();
    EXPECT_EQ(r["experts"]["owned"], 4) << "tensor parallel: every expert, sliced";
    EXPECT_EQ(r["experts"]["expert_parallel"], false);
    EXPECT_GT(r["experts"]["ff"][1].get<int>(), r["experts"]["ff"][0].get<int>()) << r.dump();
  }
  EXPECT_EQ(s["ranks"][0]["experts"]["ff"][0], 0);
  EXPECT_EQ(s["ranks"][0]["experts"]["ff"][1], s["ranks"][1]["experts"]["ff"][0]);
  EXPECT_EQ(s["ranks"][1]["experts"]["ff"][1], 128);
  ASSERT_TRUE(serve.stop().ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lattice::serve
