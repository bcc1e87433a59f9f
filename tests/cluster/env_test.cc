// Where a rank learns its place: our launcher's variables, mpirun's, PMI's, Slurm's; the
// coordinator from the environment or a topology file; bad values rejected with a message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lattice/cluster/cluster.h"

namespace lattice::cluster {
namespace {

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
    setenv("LATTICE_SECRET", std::string(64, 'e').c_str(), 1);
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
  }
  static constexpr const char* kVars[] = {
      "LATTICE_RANK", "LATTICE_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
      "SLURM_PROCID", "SLURM_NTASKS", "LATTICE_COORDINATOR", "LATTICE_TOPOLOGY", "LATTICE_PROVIDER",
      "LATTICE_SECRET", "LATTICE_SECRET_FILE", "LATTICE_INSECURE", "LATTICE_HEARTBEAT_MS",
      "LATTICE_FAILURE_TIMEOUT_MS", "LATTICE_REJOIN"};
};

TEST_F(EnvTest, NothingSetIsASingleRankWithoutControlPlane) {
  unsetenv("LATTICE_SECRET");
  auto o = cluster_options_from_env();
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->rank, 0);
  EXPECT_EQ(o->world_size, 1);
  EXPECT_TRUE(o->coordinator.empty());
}

TEST_F(EnvTest, OurLauncherWins) {
  setenv("LATTICE_RANK", "2", 1);
  setenv("LATTICE_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "9", 1);
  setenv("LATTICE_COORDINATOR", "10.0.0.1:7000", 1);
  setenv("LATTICE_PROVIDER", "shm", 1);
  setenv("LATTICE_INSECURE", "1", 1);
  setenv("LATTICE_FAILURE_TIMEOUT_MS", "1500", 1);
  auto o = cluster_options_from_env();
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->world_size, 4);
  EXPECT_EQ(o->coordinator, "10.0.0.1:7000");
  EXPECT_EQ(o->provider, "shm");
  EXPECT_TRUE(o->insecure);
  EXPECT_EQ(o->membership.failure_timeout, std::chrono::milliseconds(1500));
  EXPECT_TRUE(o->secret.has_value());
}

TEST_F(EnvTest, MpirunPmiAndSlurmVariables) {
  setenv("LATTICE_COORDINATOR", "node0", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
  auto o = cluster_options_from_env();
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(std::make_pair(o->rank, o->world_size), std::make_pair(1, 3));
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("OMPI_COMM_WORLD_SIZE");
  setenv("PMI_RANK", "4", 1);
  setenv("PMI_SIZE", "5", 1);
  o = cluster_options_from_env();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(std::make_pair(o->rank, o->world_size), std::make_pair(4, 5));
  unsetenv("PMI_RANK");
  unsetenv("PMI_SIZE");
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "2", 1);
  o = cluster_options_from_env();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(std::make_pair(o->rank, o->world_size), std::make_pair(0, 2));
}

TEST_F(EnvTest, CoordinatorFromATopologyFileAndItsCables) {
  auto path = std::filesystem::temp_directory_path() / ("lattice_env_topo_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream f(path);
    f << R"({"version": 1, "hosts": [{"name": "a", "address": "10.1.0.1:7100"}, {"name": "b", "address": "10.1.0.2"},
             {"name": "c", "address": "10.1.0.3"}],
             "links": [{"a": "a", "b": "b", "provider": "tcp"}, {"a": "b", "b": "c", "provider": "tcp"}]})";
  }
  setenv("SLURM_PROCID", "1", 1);
  setenv("SLURM_NTASKS", "3", 1);
  setenv("LATTICE_TOPOLOGY", path.c_str(), 1);
  auto o = cluster_options_from_env();
  std::filesystem::remove(path);
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->coordinator, "10.1.0.1:7100");
  ASSERT_TRUE(o->linked);
  EXPECT_TRUE(o->linked(0, 1));
  EXPECT_TRUE(o->linked(1, 2));
  EXPECT_FALSE(o->linked(0, 2));  // a chain: no cable between a and c
}

TEST_F(EnvTest, BadValuesAreRejectedWithAMessage) {
  setenv("LATTICE_RANK", "3", 1);
  setenv("LATTICE_WORLD_SIZE", "2", 1);
  setenv("LATTICE_COORDINATOR", "x:1", 1);
  auto o = cluster_options_from_env();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("world size"), std::string::npos) << o.status().to_string();
  setenv("LATTICE_RANK", "abc", 1);
  EXPECT_FALSE(cluster_options_from_env().ok());
  setenv("LATTICE_RANK", "1", 1);
  setenv("LATTICE_PROVIDER", "carrier-pigeon", 1);
  EXPECT_FALSE(cluster_options_from_env().ok());
  unsetenv("LATTICE_PROVIDER");
  unsetenv("LATTICE_COORDINATOR");
  o = cluster_options_from_env();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("no coordinator"), std::string::npos) << o.status().to_string();
  setenv("LATTICE_COORDINATOR", "x:1", 1);
  unsetenv("LATTICE_SECRET");
  o = cluster_options_from_env();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("secret"), std::string::npos) << o.status().to_string();
}

}  // namespace
}  // namespace lattice::cluster
