// Doctor in this process (no process started): a healthy emulated node reports no failure, and
// each injected fault (the emulated verbs device's four failure modes, a secret others can
// read) fails exactly its own check, with a fix. Plus the report's JSON and text forms.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "doctor_testlib.h"
#include "lattice/crypto/secret.h"
#include "lattice/fabric/verbs/emu/emu.h"

namespace lattice::doctor::testing {
namespace {

class DoctorNode : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"LATTICE_VERBS_EMU_FAULT", "LATTICE_SECRET", "LATTICE_SECRET_FILE", "LATTICE_RANK",
                          "LATTICE_WORLD_SIZE", "LATTICE_TOPOLOGY"})
      ::unsetenv(v);
    ASSERT_TRUE(write_model(dir_.file("m.gguf")));
    write_local_topology(dir_.file("hosts.json"), 3, 17470);
    ASSERT_TRUE(crypto::write_secret_file(dir_.file("secret"), crypto::ClusterSecret::generate(), false).ok());
    opt_.emulated = true;
    opt_.topology = dir_.file("hosts.json");
    opt_.host = "h1";
    opt_.model = dir_.file("m.gguf");
    opt_.secret_file = dir_.file("secret");
  }
  void TearDown() override { ::unsetenv("LATTICE_VERBS_EMU_FAULT"); }

  Report run() {
    auto r = run_single(opt_);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : Report{};
  }

  ScratchDir dir_{"node"};
  Options opt_;
};

TEST_F(DoctorNode, AHealthyEmulatedNodeReportsNoFailure) {
  Report r = run();
  EXPECT_TRUE(failures(r).empty()) << render_text(r);
  ASSERT_EQ(r.nodes.size(), 1u);
  EXPECT_EQ(r.nodes[0].host, "h1");
  // Every check of the brief is there, each with a verdict.
  for (const char* id : {"rdma", "verbs-devices", "verbs-ports", "verbs-queues", "gid1", "mtu", "memory", "thermal", "power", "secret"})
    EXPECT_NE(r.find(0, id), nullptr) << id;
  for (const char* id : {"version", "model", "clock", "cable h0-h1", "cable h1-h2", "mtu-match", "mesh"})
    EXPECT_NE(r.find(-1, id), nullptr) << id;
  EXPECT_EQ(r.find(0, "verbs-ports")->level, Level::kOk);
  // A protection domain and a queue pair were made on each emulated device's active port.
  const Check* q = r.find(0, "verbs-queues");
  ASSERT_NE(q, nullptr);
  EXPECT_NE(q->detail.find("emu_tb5_0: pd, cq, uc qp INIT on port 2"), std::string::npos) << q->detail;
  EXPECT_NE(q->detail.find("emu_rc_0: pd, cq, rc qp INIT on port 1"), std::string::npos) << q->detail;
  EXPECT_NE(r.find(0, "memory")->detail.find("the plan needs"), std::string::npos) << r.find(0, "memory")->detail;
  EXPECT_NE(r.find(-1, "model")->detail.find("blake2b:"), std::string::npos);
}

struct Fault {
  const char* knob;
  const char* check;
};
void PrintTo(const Fault& f, std::ostream* os) { *os << f.knob; }
class DoctorEmuFault : public DoctorNode, public ::testing::WithParamInterface<Fault> {};

TEST_P(DoctorEmuFault, FailsExactlyItsCheckWithAFix) {
  ::setenv("LATTICE_VERBS_EMU_FAULT", GetParam().knob, 1);
  Report r = run();
  EXPECT_EQ(failures(r), std::vector<std::string>{std::string("0:") + GetParam().check}) << render_text(r);
  const Check* c = r.find(0, GetParam().check);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->fix.empty());
  EXPECT_NE(c->fix.find("unset LATTICE_VERBS_EMU_FAULT"), std::string::npos) << c->fix;
}

INSTANTIATE_TEST_SUITE_P(Modes, DoctorEmuFault,
                         ::testing::Values(Fault{"no-device", "verbs-devices"}, Fault{"port-down", "verbs-ports"},
                                           Fault{"no-gid1", "gid1"}, Fault{"no-pd", "verbs-queues"}),
                         [](const auto& info) {
                           std::string n = info.param.knob;
                           for (char& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST_F(DoctorNode, WithoutEmulationTheEmulatorsFaultsChangeNothing) {
  opt_.emulated = false;
  ::setenv("LATTICE_VERBS_EMU_FAULT", "port-down", 1);
  Report r = run();
  EXPECT_EQ(r.find(0, "verbs-ports") ? r.find(0, "verbs-ports")->level : Level::kFail, Level::kOk) << render_text(r);
}

TEST_F(DoctorNode, ASecretOthersCanReadFailsWithChmod) {
  ASSERT_EQ(::chmod(opt_.secret_file.c_str(), 0644), 0);
  Report r = run();
  EXPECT_EQ(failures(r), std::vector<std::string>{"0:secret"}) << render_text(r);
  EXPECT_EQ(r.find(0, "secret")->fix, "chmod 600 " + opt_.secret_file);
  ASSERT_EQ(::chmod(opt_.secret_file.c_str(), 0600), 0);
  EXPECT_TRUE(failures(run()).empty());
}

TEST_F(DoctorNode, ASecretFromTheEnvironmentIsNotAFile) {
  opt_.secret_file.clear();
  ::setenv("LATTICE_SECRET", std::string(64, 'a').c_str(), 1);
  Report r = run();
  ::unsetenv("LATTICE_SECRET");
  EXPECT_EQ(r.find(0, "secret")->level, Level::kOk);
  EXPECT_NE(r.find(0, "secret")->detail.find("environment"), std::string::npos);
}

TEST_F(DoctorNode, AnAddressNotOnThisHostFailsItsCables) {
  // h1's cables are on 127.0.0.2; a host whose address is nowhere here cannot hold its end.
  std::ofstream(dir_.file("far.json")) << R"({"version": 1, "hosts": [
    {"name": "a", "address": "127.0.0.1:7470"}, {"name": "b", "address": "192.0.2.7:7470"}],
    "links": [{"a": "a", "b": "b", "provider": "tcp"}]})";
  opt_.topology = dir_.file("far.json");
  opt_.host = "b";
  Report r = run();
  EXPECT_EQ(failures(r), std::vector<std::string>{"-1:cable a-b"}) << render_text(r);
  EXPECT_NE(r.find(-1, "cable a-b")->detail.find("no interface of this host holds 192.0.2.7"), std::string::npos);
}

TEST_F(DoctorNode, AVerbsCableIsCheckedThroughItsEmulatedDevice) {
  // A Thunderbolt-style verbs cable between two hosts: this host's end is emu_tb5_0.
  std::ofstream(dir_.file("tb.json")) << R"({"version": 1, "hosts": [
    {"name": "a", "address": "127.0.0.1:7470"}, {"name": "b", "address": "127.0.0.2:7470"}],
    "links": [{"a": "a", "b": "b", "provider": "verbs", "a_device": "emu_tb5_0", "b_device": "emu_tb5_0"}]})";
  opt_.topology = dir_.file("tb.json");
  opt_.host = "a";
  opt_.emulated = false;  // a verbs link asks for RDMA by itself; only --emulated lists the emulated devices
  Report r = run();
  // (rdma fails too on a machine without RDMA; one with it has no emu_tb5_0 either)
  auto f = failures(r);
  for (const char* id : {"0:verbs-devices", "-1:cable a-b"})
    EXPECT_NE(std::find(f.begin(), f.end(), id), f.end()) << id << "\n" << render_text(r);
  opt_.emulated = true;
  r = run();
  EXPECT_TRUE(failures(r).empty()) << render_text(r);
  EXPECT_NE(r.find(0, "verbs-ports")->detail.find("emu_tb5_0: port 1 DOWN, port 2 ACTIVE"), std::string::npos);
  EXPECT_EQ(r.find(0, "verbs-ports")->detail.find("emu_rc_0"), std::string::npos) << "only the named device";
  // Its port down: the device's ports fail, and so does the cable it is.
  ::setenv("LATTICE_VERBS_EMU_FAULT", "port-down", 1);
  r = run();
  EXPECT_EQ(failures(r), (std::vector<std::string>{"0:verbs-ports", "-1:cable a-b"})) << render_text(r);
  EXPECT_NE(r.find(-1, "cable a-b")->detail.find("device emu_tb5_0 is DOWN"), std::string::npos) << render_text(r);
}

TEST_F(DoctorNode, AMissingTopologyOrUnknownHostIsAnError) {
  opt_.topology = dir_.file("absent.json");
  EXPECT_FALSE(run_single(opt_).ok());
  opt_.topology = dir_.file("hosts.json");
  opt_.host = "nosuch";
  auto r = run_single(opt_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nosuch"), std::string::npos);
}

TEST_F(DoctorNode, JsonCarriesTheSameReportAsText) {
  ::setenv("LATTICE_VERBS_EMU_FAULT", "no-gid1", 1);
  Report r = run();
  auto j = to_json(r);
  EXPECT_EQ(j["failures"], 1);
  EXPECT_EQ(j["world_size"], 1);
  ASSERT_EQ(j["nodes"].size(), 1u);
  size_t n_checks = 0;
  for (const auto& c : j["nodes"][0]["checks"]) {
    auto back = check_from_json(c);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->id, r.nodes[0].checks[n_checks].id);
    EXPECT_EQ(back->level, r.nodes[0].checks[n_checks].level);
    ++n_checks;
  }
  EXPECT_EQ(n_checks, r.nodes[0].checks.size());
  const std::string text = render_text(r);
  EXPECT_NE(text.find("  fail  gid1"), std::string::npos) << text;
  EXPECT_NE(text.find("        fix: "), std::string::npos) << text;
  EXPECT_NE(text.find("summary: 1 failure(s)"), std::string::npos) << text;
}

TEST(DoctorJson, AnUnknownStatusIsRefused) {
  auto c = check_from_json({{"id", "x"}, {"title", "x"}, {"status", "maybe"}, {"detail", ""}, {"fix", ""}});
  EXPECT_FALSE(c.ok());
  EXPECT_FALSE(check_from_json({{"id", "x"}}).ok());
}

TEST(DoctorEmuKnob, ParsesItsWordsAndRefusesOthers) {
  using fabric::verbs::emu::parse_machine_faults;
  auto f = parse_machine_faults("no-device,no-gid1,no-pd");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->no_device);
  EXPECT_FALSE(f->port_down);
  EXPECT_TRUE(f->no_gid1);
  EXPECT_TRUE(f->no_pd);
  EXPECT_TRUE(parse_machine_faults("").ok());
  auto bad = parse_machine_faults("port-down,unplugged");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unplugged"), std::string::npos);
}

}  // namespace
}  // namespace lattice::doctor::testing
