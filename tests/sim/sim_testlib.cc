#include "sim_testlib.h"

#include <filesystem>

#include <gtest/gtest.h>

namespace lattice::sim::testing {

cluster::Topology mesh(int n, const std::string& machine, const std::string& provider, const std::string& medium,
                       bool ring, const std::string& extra) {
  std::string t = "{\"version\": 1, \"hosts\": [";
  for (int i = 0; i < n; ++i)
    t += std::string(i ? "," : "") + "{\"name\": \"h" + std::to_string(i) + "\", \"address\": \"10.0.0." +
         std::to_string(i + 1) + ":7070\", \"machine\": \"" + machine + "\"}";
  t += "], \"links\": [";
  bool first = true;
  int dev = 0;
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) {
      if (ring && !(j == i + 1 || (i == 0 && j == n - 1))) continue;
      t += std::string(first ? "" : ",") + "{\"a\": \"h" + std::to_string(i) + "\", \"b\": \"h" + std::to_string(j) +
           "\", \"provider\": \"" + provider + "\"";
      if (provider == "verbs") {
        const int da = dev++, db = dev++;
        t += ", \"a_device\": \"rdma_en" + std::to_string(da) + "\", \"b_device\": \"rdma_en" + std::to_string(db) + "\"";
      }
      if (!medium.empty()) t += ", \"medium\": \"" + medium + "\"";
      t += extra + "}";
      first = false;
    }
  t += "]}";
  auto topo = cluster::parse_topology(t, "test.json");
  EXPECT_TRUE(topo.ok()) << topo.status().to_string() << "\n" << t;
  return topo.ok() ? *topo : cluster::Topology{};
}

std::string scratch_dir(const std::string& name) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto dir = std::filesystem::temp_directory_path() /
             ("lattice-sim-" + std::string(info->test_suite_name()) + "-" + info->name() + "-" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace lattice::sim::testing
