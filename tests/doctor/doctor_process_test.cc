// `lattice doctor` as processes: three ranks under `lattice launch` on a local hostfile (hosts
// on 127.0.0.1..3, each rank in its own directory, as if each host had its own disk), healthy,
// then with another model on one rank; `launch -n 3`; and one node's exit code and JSON.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "doctor_testlib.h"
#include "lattice/cluster/launcher.h"
#include "proc_testlib.h"

namespace lattice::doctor::testing {
namespace {

namespace fs = std::filesystem;
using cluster::testing::lattice_bin;
using cluster::testing::run_cmd;

constexpr auto kBound = std::chrono::seconds(120);  // a loaded machine

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

std::vector<std::string> json_failures(const nlohmann::json& j) {
  std::vector<std::string> out;
  for (const auto& n : j["nodes"])
    for (const auto& c : n["checks"])
      if (c["status"] == "fail") out.push_back(std::to_string(n["rank"].get<int>()) + ":" + c["id"].get<std::string>());
  for (const auto& c : j["cluster"])
    if (c["status"] == "fail") out.push_back("-1:" + c["id"].get<std::string>());
  return out;
}

const nlohmann::json* cluster_check(const nlohmann::json& j, const std::string& id) {
  for (const auto& c : j["cluster"])
    if (c["id"] == id) return &c;
  return nullptr;
}

// Three hosts h0..h2, a directory each holding m.gguf, a secret, a topology.
class DoctorLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(lattice_bin())) << lattice_bin();
    for (int i = 0; i < 3; ++i) fs::create_directories(dir_.file("h" + std::to_string(i)));
    ASSERT_TRUE(write_model(dir_.file("h0/m.gguf")));
    fs::copy_file(dir_.file("h0/m.gguf"), dir_.file("h1/m.gguf"));
    fs::copy_file(dir_.file("h0/m.gguf"), dir_.file("h2/m.gguf"));
    auto kg = run_cmd({lattice_bin(), "keygen", "-o", dir_.file("secret")}, {}, Deadline::after(kBound));
    ASSERT_EQ(exit_code(kg.status), 0) << kg.err;
  }

  // The hostfile names the coordinator's port, so it is picked here (bound and released): if
  // another test took it meanwhile, the coordinator cannot bind it, and the run is tried again
  // on a fresh port (at most three times).
  cluster::testing::CmdResult doctor(const std::vector<std::string>& args, bool verbs = false) {
    cluster::testing::CmdResult r;
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto port = cluster::pick_free_port();
      if (!port.ok()) continue;
      write_local_topology(dir_.file("hosts.json"), 3, *port, verbs);
      r = doctor_once(args);
      if (r.err.find("in use") == std::string::npos) break;
    }
    return r;
  }

  cluster::testing::CmdResult doctor_once(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {lattice_bin(), "launch", "--hostfile", dir_.file("hosts.json"), "--secret-file",
                                     dir_.file("secret"), "--no-prefix", "--remote", "cd " + dir_.path() + "/{host} && {cmd}",
                                     "--", lattice_bin(), "doctor", "--emulated", "-m", "m.gguf", "--json"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_cmd(argv, {{"LATTICE_VERBS_EMU_FAULT", ""}}, Deadline::after(kBound));
  }

  ScratchDir dir_{"launch"};
};

TEST_F(DoctorLaunch, ProcessThreeRanksOfAHealthyEmulatedClusterReportNoFailure) {
  auto r = doctor({});
  ASSERT_EQ(exit_code(r.status), 0) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["world_size"], 3);
  EXPECT_EQ(j["failures"], 0) << r.out;
  ASSERT_EQ(j["nodes"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["nodes"][i]["host"], "h" + std::to_string(i));
  // Each cable was probed from both of its ends; the clock was compared across the ranks.
  for (const char* id : {"cable h0-h1", "cable h0-h2", "cable h1-h2"}) {
    const auto* c = cluster_check(j, id);
    ASSERT_NE(c, nullptr) << id;
    const std::string d = (*c)["detail"];
    EXPECT_NE(d.find("reached the other end"), d.rfind("reached the other end")) << d;
  }
  const auto* clock = cluster_check(j, "clock");
  ASSERT_NE(clock, nullptr);
  EXPECT_NE((*clock)["detail"].get<std::string>().find("largest offset"), std::string::npos) << *clock;
  EXPECT_EQ((*cluster_check(j, "model"))["status"], "ok");
}

TEST_F(DoctorLaunch, ProcessThreeRanksOverEmulatedVerbsCablesReportNoFailure) {
  auto r = doctor({}, true);
  ASSERT_EQ(exit_code(r.status), 0) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["failures"], 0) << r.out;
  // Each host looks at the two devices its cables name, and each cable was probed both ways.
  for (const auto& n : j["nodes"])
    for (const auto& c : n["checks"])
      if (c["id"] == "verbs-ports") {
        const std::string d = c["detail"];
        EXPECT_NE(d.find("emu_tb5_0"), std::string::npos) << d;
        EXPECT_NE(d.find("emu_rc_0"), std::string::npos) << d;
      }
  for (const char* id : {"cable h0-h1", "cable h0-h2", "cable h1-h2"}) {
    const auto* c = cluster_check(j, id);
    ASSERT_NE(c, nullptr) << id;
    EXPECT_EQ((*c)["status"], "ok") << *c;
  }
}

TEST_F(DoctorLaunch, ProcessAnotherModelOnOneRankFailsOnlyTheModelCheck) {
  fs::remove(dir_.file("h2/m.gguf"));
  ASSERT_TRUE(write_model(dir_.file("h2/m.gguf"), 5, 7));
  auto r = doctor({});
  EXPECT_EQ(exit_code(r.status), 1) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(json_failures(j), std::vector<std::string>{"-1:model"}) << r.out;
  const auto* m = cluster_check(j, "model");
  ASSERT_NE(m, nullptr);
  EXPECT_NE((*m)["detail"].get<std::string>().find("h2 has blake2b:"), std::string::npos) << *m;
  EXPECT_NE((*m)["fix"].get<std::string>().find("h2:" + dir_.file("h2/m.gguf")), std::string::npos) << *m;
}

TEST(DoctorLocal, ProcessLaunchMinusThreeReportsEveryRank) {
  auto r = run_cmd({lattice_bin(), "launch", "-n", "3", "--", lattice_bin(), "doctor", "--emulated"},
                   {{"LATTICE_VERBS_EMU_FAULT", ""}}, Deadline::after(kBound));
  EXPECT_EQ(exit_code(r.status), 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] lattice doctor: 3 node(s)"), std::string::npos) << r.out;
  for (const char* n : {"node rank0 (rank 0)", "node rank1 (rank 1)", "node rank2 (rank 2)"})
    EXPECT_NE(r.out.find(n), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("summary: 0 failure(s)"), std::string::npos) << r.out;
  // Only rank 0 prints.
  EXPECT_EQ(r.out.find("[rank 1]"), std::string::npos) << r.out;
}

TEST(DoctorLocal, ProcessOneNodeExitsOneOnAFailureAndPrintsItsFixInJson) {
  auto r = run_cmd({lattice_bin(), "doctor", "--emulated", "--json"}, {{"LATTICE_VERBS_EMU_FAULT", "port-down"}},
                   Deadline::after(kBound));
  EXPECT_EQ(exit_code(r.status), 1) << r.out << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(json_failures(j), std::vector<std::string>{"0:verbs-ports"}) << r.out;
  auto bad = run_cmd({lattice_bin(), "doctor", "--hostfile", "/nonexistent/hosts.json"}, {}, Deadline::after(kBound));
  EXPECT_EQ(exit_code(bad.status), 2) << bad.out << bad.err;
  EXPECT_NE(bad.err.find("/nonexistent/hosts.json"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace lattice::doctor::testing
