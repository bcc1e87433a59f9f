// Where a rank learns its place: our launcher's variables, mpirun's, PMI's, Slurm's; the
// coordinator from the environment or a topology file; bad values rejected with a message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "lattice/cluster/cluster.h"
#include "lattice/cluster/rank_env.h"

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
      "LATTICE_FAILURE_TIMEOUT_MS", "LATTICE_REJOIN", "LATTICE_EXTERNAL_COORDINATOR", "LATTICE_FABRIC_ADDR",
      "LATTICE_CONNECT_TIMEOUT_MS", "LATTICE_LOCAL_CPUS"};
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

// The contract is written once: what a launcher writes with to_env() is what a rank reads.
TEST_F(EnvTest, RankEnvRoundTripsThroughTheEnvironment) {
  unsetenv("LATTICE_SECRET");
  RankEnv e;
  e.rank = 3;
  e.world_size = 5;
  e.coordinator = "10.0.0.9:7123";
  e.external_coordinator = true;
  e.provider = "tcp";
  e.fabric_addr = "10.0.0.2";
  e.secret_hex = std::string(64, 'a');
  e.insecure = true;
  e.rejoin = true;
  e.heartbeat_ms = 50;
  e.failure_timeout_ms = 900;
  e.connect_timeout_ms = 4000;
  e.local_cpus = 6;
  for (const auto& [k, v] : e.to_env()) setenv(k.c_str(), v.c_str(), 1);
  auto back = RankEnv::from_env();
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(back->launched);
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->world_size, 5);
  EXPECT_EQ(back->coordinator, e.coordinator);
  EXPECT_TRUE(back->external_coordinator);
  EXPECT_EQ(back->provider, "tcp");
  EXPECT_EQ(back->fabric_addr, "10.0.0.2");
  EXPECT_EQ(back->secret_hex, e.secret_hex);
  EXPECT_TRUE(back->secret_file.empty());
  EXPECT_TRUE(back->insecure);
  EXPECT_TRUE(back->rejoin);
  EXPECT_EQ(back->heartbeat_ms, 50);
  EXPECT_EQ(back->failure_timeout_ms, 900);
  EXPECT_EQ(back->connect_timeout_ms, 4000);
  EXPECT_EQ(back->local_cpus, 6);
  // And cluster_options_from_env reads the same variables.
  auto o = cluster_options_from_env();
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->rank, 3);
  EXPECT_FALSE(o->host_coordinator);
  EXPECT_EQ(o->fabric_host, "10.0.0.2");
  EXPECT_EQ(o->membership.heartbeat_interval, std::chrono::milliseconds(50));
  EXPECT_EQ(o->connect_timeout, std::chrono::milliseconds(4000));
  EXPECT_TRUE(o->secret.has_value());
}

TEST_F(EnvTest, UnsetFieldsAreLeftOutSoDefaultsApply) {
  RankEnv e;
  e.rank = 0;
  e.world_size = 2;
  auto vars = e.to_env();
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0], (std::pair<std::string, std::string>{"LATTICE_RANK", "0"}));
  EXPECT_EQ(vars[1], (std::pair<std::string, std::string>{"LATTICE_WORLD_SIZE", "2"}));
  auto none = RankEnv::from_env();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->launched);
  setenv("LATTICE_HEARTBEAT_MS", "soon", 1);
  auto bad = RankEnv::from_env();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("LATTICE_HEARTBEAT_MS"), std::string::npos);
}

TEST_F(EnvTest, AnExplicitSecretFileWinsAndABadOneIsNamed) {
  setenv("LATTICE_RANK", "0", 1);
  setenv("LATTICE_WORLD_SIZE", "2", 1);
  setenv("LATTICE_COORDINATOR", "127.0.0.1:1", 1);
  auto o = cluster_options_from_env("/nonexistent/lattice.secret");
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("/nonexistent/lattice.secret"), std::string::npos) << o.status().to_string();
}

TEST(ProviderUri, PlainTcpIsThisHostAnyPortAndUrisPassThrough) {
  EXPECT_EQ(provider_uri("tcp"), "tcp://127.0.0.1:0");
  EXPECT_EQ(provider_uri("tcp", "10.1.2.3"), "tcp://10.1.2.3:0");
  EXPECT_EQ(provider_uri("shm"), "shm");
  EXPECT_EQ(provider_uri("tcp://192.168.0.1:7000"), "tcp://192.168.0.1:7000");
}

}  // namespace
}  // namespace lattice::cluster
