// The topology's cable carries the data: two nodes on two bridges (netns_testlib.h's
// TwoBridges). br0 holds the hosts' addresses, so the coordinator and the control plane live
// there, and it is shaped to 20 Mbit/s (a Wi-Fi, say); br1 runs at veth speed (the
// Thunderbolt cable). A topology whose link names br1's addresses must move the data over
// br1, as the kernel's per-interface byte counters show; one without addresses falls back to
// br0 and says so. Then `run --discover` and `serve --discover`, which measure the links
// themselves, generate over the cable they chose.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../require.h"
#include "netns_testlib.h"
#include "proc_testlib.h"

namespace lattice::cluster {
namespace {

using testing::CmdResult;
using testing::Env;
using testing::lattice_bin;
using testing::Proc;
using testing::run_cmd;
using testing::subnet_ip;
using testing::TwoBridges;

int exit_code(const CmdResult& r) { return WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1; }

struct Dir {
  std::filesystem::path path = std::filesystem::temp_directory_path() / ("lattice_cable_" + std::to_string(::getpid()));
  Dir() { std::filesystem::create_directories(path); }
  ~Dir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

std::string keygen(const std::string& path) {
  auto r = run_cmd({lattice_bin(), "keygen", "-o", path}, {}, Deadline::after(std::chrono::seconds(10)));
  return exit_code(r) == 0 ? path : "";
}

// Two hosts named after their namespaces, addressed on br0; one tcp link, on br1 if `cable`.
void write_two_hosts(const std::string& path, const TwoBridges& net, bool cable) {
  std::ofstream f(path);
  f << "{\"version\": 1, \"hosts\": [";
  for (int i = 1; i <= 2; ++i)
    f << (i > 1 ? ", " : "") << "{\"name\": \"" << net.ns_name(i) << "\", \"address\": \"" << subnet_ip(0, i) << "\"}";
  f << "], \"links\": [{\"a\": \"" << net.ns_name(1) << "\", \"b\": \"" << net.ns_name(2) << "\", \"provider\": \"tcp\"";
  if (cable) f << ", \"a_addr\": \"" << subnet_ip(1, 1) << "\", \"b_addr\": \"" << subnet_ip(1, 2) << "\"";
  f << "}]}\n";
}

// Rank 0's stdout lines, without the launcher's "[rank 0] " prefix.
std::string rank0_text(const std::string& out) {
  std::string text, line;
  std::istringstream in(out);
  const std::string prefix = "[rank 0] ";
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) text += line.substr(prefix.size()) + "\n";
  return text;
}

struct Sent {
  long long br0 = 0, br1 = 0;  // bytes both nodes sent out of eth0 / eth1
};
Sent sent(const TwoBridges& net) {
  Sent s;
  for (int i = 1; i <= 2; ++i) {
    s.br0 += net.tx_bytes(i, 0);
    s.br1 += net.tx_bytes(i, 1);
  }
  return s;
}

// `lattice ping` on the two hosts of `topo`: latency, then rank 0 streams `size` sends to rank 1
// (a warm-up of 8, then 0.3 s).
CmdResult ping(TwoBridges& net, const std::string& topo, const std::string& secret, const std::string& size) {
  return net.control({"launch", "--hostfile", topo, "--secret-file", secret, "--remote", "ip netns exec {host} {cmd}", "--",
                      lattice_bin(), "ping", "--iters", "20", "--size", size, "--bw-seconds", "0.3", "--json"},
                     {{"LATTICE_LOG", "info"}});
}

TEST(CableNetns, DataGoesOverTheTopologysCableNotTheCoordinatorsNetwork) {
  TwoBridges net(2);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  Dir dir;
  std::string secret = keygen(dir / "secret");
  ASSERT_FALSE(secret.empty());
  for (int i = 1; i <= 2; ++i) ASSERT_TRUE(net.shape(i, 0, "20mbit")) << "tc tbf on node" << i;

  write_two_hosts(dir / "cable.json", net, true);
  const Sent before = sent(net);
  auto r = ping(net, dir / "cable.json", secret, "1M");
  const Sent after = sent(net);
  ASSERT_EQ(exit_code(r), 0) << r.out << r.err;
  const long long over_br0 = after.br0 - before.br0, over_br1 = after.br1 - before.br1;
  // At least the warm-up's eight 1 MiB sends, and the window behind them.
  EXPECT_GT(over_br1, 8ll << 20) << "br0 " << over_br0 << " B, br1 " << over_br1 << " B\n" << r.out << r.err;
  EXPECT_GT(over_br1, 20 * over_br0) << "br0 " << over_br0 << " B, br1 " << over_br1 << " B";
  EXPECT_NE(r.err.find("data over the topology's cable, " + subnet_ip(1, 1) + " here to " + subnet_ip(1, 2) + " there"),
            std::string::npos)
      << r.err;
  // 20 Mbit/s is 0.0025 GB/s: the cable is far faster.
  auto j = nlohmann::json::parse(rank0_text(r.out), nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("pairs") && !j["pairs"].empty()) << r.out;
  EXPECT_GT(j["pairs"][0].value("bw_gbps", 0.0), 0.02) << r.out;

  // No address in the topology: the data goes where the coordinator is, and the log says so.
  write_two_hosts(dir / "plain.json", net, false);
  const Sent b2 = sent(net);
  auto p = ping(net, dir / "plain.json", secret, "64K");
  const Sent a2 = sent(net);
  ASSERT_EQ(exit_code(p), 0) << p.out << p.err;
  EXPECT_GT(a2.br0 - b2.br0, 512ll << 10) << "br0 " << a2.br0 - b2.br0 << " B, br1 " << a2.br1 - b2.br1 << " B";
  EXPECT_LT(a2.br1 - b2.br1, 256ll << 10) << "br1 " << a2.br1 - b2.br1 << " B";
  EXPECT_NE(p.err.find("the topology gives no address for this end of their cable; its data goes over " + subnet_ip(0, 1)),
            std::string::npos)
      << p.err;
}

// A cable address this host does not have fails the job with the pair and the fix named.
TEST(CableNetns, ACableAddressThisHostLacksIsAClearError) {
  TwoBridges net(2);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  Dir dir;
  std::string secret = keygen(dir / "secret");
  ASSERT_FALSE(secret.empty());
  std::ofstream(dir / "bad.json") << "{\"version\": 1, \"hosts\": [{\"name\": \"" << net.ns_name(1) << "\", \"address\": \""
                                  << subnet_ip(0, 1) << "\"}, {\"name\": \"" << net.ns_name(2) << "\", \"address\": \""
                                  << subnet_ip(0, 2) << "\"}], \"links\": [{\"a\": \"" << net.ns_name(1) << "\", \"b\": \""
                                  << net.ns_name(2) << "\", \"provider\": \"tcp\", \"a_addr\": \"10.99.0.1\", \"b_addr\": \""
                                  << subnet_ip(1, 2) << "\"}]}\n";
  auto r = net.control({"launch", "--hostfile", dir / "bad.json", "--secret-file", secret, "--remote",
                        "ip netns exec {host} {cmd}", "--", lattice_bin(), "ping", "--iters", "5", "--timeout", "20"});
  EXPECT_NE(exit_code(r), 0) << r.out << r.err;
  EXPECT_NE(r.err.find("the topology puts this end of their cable on 10.99.0.1, but this host cannot listen there"),
            std::string::npos)
      << r.out << r.err;
}

// run --discover, with br0 shaped: the probe picks br1, and the generation goes over it.
TEST(CableNetns, RunDiscoverGeneratesOverTheMeasuredCable) {
  TwoBridges net(2);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  Dir dir;
  std::string secret = keygen(dir / "secret");
  ASSERT_FALSE(secret.empty());
  for (int i = 1; i <= 2; ++i) ASSERT_TRUE(net.shape(i, 0, "20mbit"));
  ASSERT_TRUE(net.start_nodes(secret, {{1, ""}, {2, ""}}, /*netns_names=*/true));
  auto r = net.control({"run", "--demo", "--discover", "--expect", "2", "--discover-out", dir / "d.json", "--secret-file",
                        secret, "--remote", "ip netns exec {host} {cmd}", "-n", "8", "--temp", "0", "--json"},
                       {{"LATTICE_LOG", "info"}});
  ASSERT_EQ(exit_code(r), 0) << r.out << r.err;
  EXPECT_NE(r.err.find("data over the topology's cable, " + subnet_ip(1, 1) + " here to " + subnet_ip(1, 2) + " there"),
            std::string::npos)
      << r.err;
  auto j = nlohmann::json::parse(r.out.substr(std::min(r.out.find('{'), r.out.size())), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["nodes"], 2) << r.out;
  EXPECT_FALSE(j["text"].get<std::string>().empty());
}

}  // namespace
}  // namespace lattice::cluster
