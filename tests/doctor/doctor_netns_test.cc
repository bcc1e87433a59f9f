// A cut cable shows as fail in `lattice doctor`, between network namespaces: three hosts, each
// a namespace on a control bridge (the coordinator's network), and one veth "cable" straight
// between every pair of namespaces, which the topology file lists with its addresses. Doctor
// runs under `lattice launch --remote "ip netns exec {host} {cmd}"`; cutting one cable at one
// end (ip link set ... down) must fail that cable's check alone, with the command that fixes it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../require.h"
#include "doctor_testlib.h"
#include "proc_testlib.h"

namespace lattice::doctor::testing {
namespace {

using cluster::testing::lattice_bin;
using cluster::testing::run_cmd;

int sh(const std::string& cmd) {
  int st = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// n namespaces "ld<pid><tag>0..": control veths into a hub bridge (10.215.0.i+1/24), and a
// cable per pair k = (a, b): veth "<base>c<a><b>x" in a (10.216.k.1/30) to "...y" in b
// (10.216.k.2/30). The destructor deletes the namespaces (and with them every veth).
class CabledNamespaces {
 public:
  explicit CabledNamespaces(int n) : n_(n) {
    base_ = "ld" + std::to_string(::getpid() % 100000);
    if (sh("ip netns add " + base_ + "h") != 0) {
      skip_ = "ip netns is not permitted here (need root / CAP_SYS_ADMIN)";
      return;
    }
    made_.push_back(base_ + "h");
    bool ok = sh("ip -n " + base_ + "h link add br0 type bridge") == 0 && sh("ip -n " + base_ + "h link set br0 up") == 0;
    for (int i = 0; ok && i < n; ++i) {
      ok = sh("ip netns add " + name(i)) == 0;
      if (!ok) break;
      made_.push_back(name(i));
      const std::string a = base_ + "a" + std::to_string(i), b = base_ + "b" + std::to_string(i);
      ok = sh("ip link add " + a + " type veth peer name " + b) == 0 && sh("ip link set " + a + " netns " + name(i)) == 0 &&
           sh("ip link set " + b + " netns " + base_ + "h") == 0 &&
           sh("ip -n " + name(i) + " addr add 10.215.0." + std::to_string(i + 1) + "/24 dev " + a) == 0 &&
           sh("ip -n " + name(i) + " link set " + a + " up") == 0 && sh("ip -n " + name(i) + " link set lo up") == 0 &&
           sh("ip -n " + base_ + "h link set " + b + " master br0") == 0 && sh("ip -n " + base_ + "h link set " + b + " up") == 0;
      if (!ok) sh("ip link del " + a);
    }
    int k = 0;
    for (int a = 0; ok && a < n; ++a)
      for (int b = a + 1; ok && b < n; ++b, ++k) {
        const std::string x = cable_if(a, b, true), y = cable_if(a, b, false);
        ok = sh("ip link add " + x + " type veth peer name " + y) == 0 && sh("ip link set " + x + " netns " + name(a)) == 0 &&
             sh("ip link set " + y + " netns " + name(b)) == 0 &&
             sh("ip -n " + name(a) + " addr add " + cable_ip(k, true) + "/30 dev " + x) == 0 &&
             sh("ip -n " + name(b) + " addr add " + cable_ip(k, false) + "/30 dev " + y) == 0 &&
             sh("ip -n " + name(a) + " link set " + x + " up") == 0 && sh("ip -n " + name(b) + " link set " + y + " up") == 0;
        if (!ok) sh("ip link del " + x);
        cables_.push_back({a, b});
      }
    if (!ok) skip_ = "could not build the bridge and the veth cables between namespaces";
  }
  ~CabledNamespaces() {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) sh("ip netns del " + *it);
  }
  const std::string& skip_reason() const { return skip_; }
  std::string name(int i) const { return base_ + std::to_string(i); }
  std::string cable_if(int a, int b, bool a_end) const {
    return base_ + "c" + std::to_string(a) + std::to_string(b) + (a_end ? "x" : "y");
  }
  static std::string cable_ip(int k, bool a_end) { return "10.216." + std::to_string(k) + (a_end ? ".1" : ".2"); }

  void write_topology(const std::string& path) const {
    std::ofstream f(path);
    f << "{\"version\": 1, \"hosts\": [";
    for (int i = 0; i < n_; ++i)
      f << (i ? "," : "") << "{\"name\": \"" << name(i) << "\", \"address\": \"10.215.0." << i + 1 << ":7470\"}";
    f << "], \"links\": [";
    for (size_t k = 0; k < cables_.size(); ++k)
      f << (k ? "," : "") << "{\"a\": \"" << name(cables_[k].first) << "\", \"b\": \"" << name(cables_[k].second)
        << "\", \"provider\": \"tcp\", \"a_addr\": \"" << cable_ip(static_cast<int>(k), true) << "\", \"b_addr\": \""
        << cable_ip(static_cast<int>(k), false) << "\"}";
    f << "]}\n";
  }

 private:
  int n_;
  std::string base_, skip_;
  std::vector<std::string> made_;
  std::vector<std::pair<int, int>> cables_;
};

std::vector<std::string> failed(const nlohmann::json& j) {
  std::vector<std::string> out;
  for (const auto& n : j["nodes"])
    for (const auto& c : n["checks"])
      if (c["status"] == "fail") out.push_back(c["id"]);
  for (const auto& c : j["cluster"])
    if (c["status"] == "fail") out.push_back(c["id"]);
  return out;
}

TEST(DoctorNetns, ACutCableShowsAsFailAndNothingElseDoes) {
  CabledNamespaces net(3);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  ScratchDir dir("netns");
  net.write_topology(dir.file("cluster.json"));
  auto kg = run_cmd({lattice_bin(), "keygen", "-o", dir.file("secret")}, {}, Deadline::after(std::chrono::seconds(60)));
  ASSERT_TRUE(WIFEXITED(kg.status) && WEXITSTATUS(kg.status) == 0) << kg.err;
  auto doctor = [&] {
    return run_cmd({lattice_bin(), "launch", "--hostfile", dir.file("cluster.json"), "--secret-file", dir.file("secret"),
                    "--no-prefix", "--remote", "ip netns exec {host} {cmd}", "--", lattice_bin(), "doctor", "--json",
                    "--probe-timeout-ms", "1000"},
                   {}, Deadline::after(std::chrono::seconds(120)));
  };
  auto healthy = doctor();
  ASSERT_TRUE(WIFEXITED(healthy.status) && WEXITSTATUS(healthy.status) == 0) << healthy.out << healthy.err;
  auto j = nlohmann::json::parse(healthy.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << healthy.out;
  EXPECT_TRUE(failed(j).empty()) << healthy.out;

  // Cut the cable between hosts 0 and 2 at host 2's end.
  ASSERT_EQ(sh("ip -n " + net.name(2) + " link set " + net.cable_if(0, 2, false) + " down"), 0);
  auto cut = doctor();
  EXPECT_TRUE(WIFEXITED(cut.status) && WEXITSTATUS(cut.status) == 1) << cut.status << cut.out << cut.err;
  j = nlohmann::json::parse(cut.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << cut.out << cut.err;
  const std::string id = "cable " + net.name(0) + "-" + net.name(2);
  EXPECT_EQ(failed(j), std::vector<std::string>{id}) << cut.out;
  for (const auto& c : j["cluster"])
    if (c["id"] == id) {
      const std::string detail = c["detail"], fix = c["fix"];
      EXPECT_NE(detail.find(net.cable_if(0, 2, false) + ") is DOWN"), std::string::npos) << detail;
      EXPECT_NE(fix.find("ip link set dev " + net.cable_if(0, 2, false) + " up"), std::string::npos) << fix;
    }
}

}  // namespace
}  // namespace lattice::doctor::testing
