// Discovery across network namespaces: each node namespace runs `lattice discover --announce`
// (its own in-process mDNS responder), and a control namespace on the same bridges runs
// `lattice discover` and `lattice topo --discover`. Two bridges: br0 (10.61.0.0/24, every
// node's eth0) and br1 (10.62.0.0/24, every node's eth1); the control namespace has .100 on
// both. Interface kinds are declared through LATTICE_IFACE_KIND, links shaped with tc tbf.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "../require.h"
#include "lattice/cluster/topology.h"
#include "netns_testlib.h"
#include "proc_testlib.h"

namespace lattice::cluster {
namespace {

using testing::CmdResult;
using testing::exit_code;
using testing::keygen;
using testing::ScratchDir;
using testing::Env;
using testing::lattice_bin;
using testing::Proc;
using testing::run_cmd;
using testing::subnet_ip;
using testing::TwoBridges;

TEST(DiscoverNetns, FindsExactlyTheNodesAndListsAForeignSecretUnjoined) {
  TwoBridges net(4);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  ScratchDir dir("disc");
  std::string secret = keygen(dir / "secret"), other = keygen(dir / "other");
  ASSERT_FALSE(secret.empty() || other.empty());
  ASSERT_TRUE(net.start_nodes(secret, {{1, ""}, {2, ""}, {3, ""}}));
  ASSERT_TRUE(net.start_nodes(other, {{4, ""}}));

  auto r = net.control({"discover", "--json", "--timeout-ms", "4000", "--secret-file", secret});
  ASSERT_EQ(exit_code(r), 0) << r.out << r.err;
  auto found = nlohmann::json::parse(r.out);
  std::map<std::string, std::string> status;
  for (const auto& n : found) {
    EXPECT_FALSE(status.count(n["name"])) << "listed twice (it is on two bridges): " << n["name"];
    status[n["name"]] = n["status"];
    // Both of its interfaces, and the addresses it answered at on each bridge.
    EXPECT_EQ(n["interfaces"].size(), 2u) << n.dump();
  }
  EXPECT_EQ(status, (std::map<std::string, std::string>{
                        {"node1", "joinable"}, {"node2", "joinable"}, {"node3", "joinable"}, {"node4", "foreign-secret"}}))
      << r.out;

  // --expect: more than there are is exit 1 once the timeout passes, with what was found.
  auto few = net.control({"discover", "--expect", "4", "--timeout-ms", "1500", "--secret-file", secret});
  EXPECT_EQ(exit_code(few), 1) << few.out << few.err;
  EXPECT_NE(few.err.find("found 3"), std::string::npos) << few.err;

  // The topology holds the three, not the foreign node, and says why not.
  auto t = net.control({"topo", "--discover", "--timeout-ms", "4000", "--secret-file", secret, "-o", dir / "c.json"});
  ASSERT_EQ(exit_code(t), 0) << t.out << t.err;
  auto topo = load_topology(dir / "c.json");
  ASSERT_TRUE(topo.ok()) << topo.status().message();
  std::set<std::string> hosts;
  for (const auto& h : topo->hosts) hosts.insert(h.name);
  EXPECT_EQ(hosts, (std::set<std::string>{"node1", "node2", "node3"}));
  EXPECT_EQ(topo->links.size(), 3u);
  std::ifstream in(dir / "c.json");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("not joined: node4 (foreign-secret"), std::string::npos) << text;
}

TEST(DiscoverNetns, NoNodesIsAClearErrorWithinTheTimeout) {
  TwoBridges net(1);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  ScratchDir dir("disc");
  std::string secret = keygen(dir / "secret");
  auto t0 = Clock::now();
  auto t = net.control({"topo", "--discover", "--timeout-ms", "1000", "--secret-file", secret, "-o", dir / "c.json"});
  EXPECT_EQ(exit_code(t), 3) << t.out << t.err;
  EXPECT_NE(t.err.find("nothing announces _lattice._tcp"), std::string::npos) << t.err;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(10));
  EXPECT_FALSE(std::filesystem::exists(dir / "c.json"));
}

// Every eth0 shaped to 20 Mbit/s; eth1 runs at veth speed. Declared kinds:
//   node1 eth0 thunderbolt, node4 eth0 thunderbolt, node3 eth1 wifi, the rest ethernet.
// So: node1-node4 takes eth0 (thunderbolt beats ethernet, however slow), pairs with node3 take
// eth0 (a wire beats Wi-Fi, however fast), the other pairs take eth1 (faster among equals).
TEST(DiscoverNetns, TheBestLinkWinsAndTheFileEqualsTheHandWrittenOne) {
  TwoBridges net(4);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  ScratchDir dir("disc");
  std::string secret = keygen(dir / "secret");
  ASSERT_FALSE(secret.empty());
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(net.shape(i, 0, "20mbit")) << "tc tbf on node" << i;
  ASSERT_TRUE(net.start_nodes(secret, {{1, "eth0=thunderbolt"}, {2, ""}, {3, "eth1=wifi"}, {4, "eth0=thunderbolt"}}));

  auto t = net.control({"topo", "--discover", "--expect", "4", "--secret-file", secret, "-o", dir / "found.json"});
  ASSERT_EQ(exit_code(t), 0) << t.out << t.err;
  auto found = load_topology(dir / "found.json");
  ASSERT_TRUE(found.ok()) << found.status().message();

  auto link = [](int a, int b, int bridge) {
    return "{\"a\": \"node" + std::to_string(a) + "\", \"b\": \"node" + std::to_string(b) +
           "\", \"provider\": \"tcp\", \"a_addr\": \"" + subnet_ip(bridge, a) + "\", \"b_addr\": \"" + subnet_ip(bridge, b) + "\"}";
  };
  std::string hand = "{\"version\": 1, \"hosts\": [";
  for (int i = 1; i <= 4; ++i)
    hand += std::string(i > 1 ? ", " : "") + "{\"name\": \"node" + std::to_string(i) + "\", \"address\": \"" + subnet_ip(0, i) + "\"}";
  hand += "], \"links\": [" + link(1, 2, 1) + ", " + link(1, 3, 0) + ", " + link(1, 4, 0) + ", " + link(2, 3, 0) + ", " +
          link(2, 4, 1) + ", " + link(3, 4, 0) + "]}";
  auto want = parse_topology(hand, "hand.json");
  ASSERT_TRUE(want.ok()) << want.status().message();

  ASSERT_EQ(found->hosts.size(), want->hosts.size()) << t.out;
  for (size_t i = 0; i < want->hosts.size(); ++i) {
    EXPECT_EQ(found->hosts[i].name, want->hosts[i].name);
    EXPECT_EQ(found->hosts[i].address, want->hosts[i].address) << found->hosts[i].name;
    EXPECT_EQ(found->hosts[i].rank, want->hosts[i].rank);
  }
  ASSERT_EQ(found->links.size(), want->links.size()) << t.out;
  for (size_t i = 0; i < want->links.size(); ++i) {
    const auto &f = found->links[i], &w = want->links[i];
    std::string pair = want->hosts[static_cast<size_t>(w.a)].name + "-" + want->hosts[static_cast<size_t>(w.b)].name;
    EXPECT_EQ(f.a, w.a) << pair;
    EXPECT_EQ(f.b, w.b) << pair;
    EXPECT_EQ(f.provider, w.provider) << pair;
    EXPECT_EQ(f.a_addr, w.a_addr) << pair << "\n" << t.out;
    EXPECT_EQ(f.b_addr, w.b_addr) << pair << "\n" << t.out;
    // The figures are the probe's: the shaped bridge measures near its 20 Mbit/s.
    ASSERT_TRUE(f.gbps && f.latency_us) << pair;
    if (f.a_addr.rfind("10.61.", 0) == 0) {
      EXPECT_LT(*f.gbps, 0.06) << pair << "\n" << t.out;
    } else {
      EXPECT_GT(*f.gbps, 0.05) << pair << "\n" << t.out;  // 2.5x the shaped rate, even on a loaded host
    }
  }
}

// launch --discover: the hosts found, their links measured, and the job run on them (through
// `ip netns exec {host}`: the nodes are named after their namespaces).
TEST(DiscoverNetns, LaunchDiscoverRunsAJobOnTheNodesFound) {
  TwoBridges net(3);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  ScratchDir dir("disc");
  std::string secret = keygen(dir / "secret");
  ASSERT_TRUE(net.start_nodes(secret, {{1, ""}, {2, ""}, {3, ""}}, /*netns_names=*/true));
  auto r = net.control({"launch", "--discover", "--expect", "3", "--discover-out", dir / "d.json", "--secret-file", secret,
                        "--remote", "ip netns exec {host} {cmd}", "--", lattice_bin(), "ping", "--iters", "20",
                        "--bw-seconds", "0.01"});
  EXPECT_EQ(exit_code(r), 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] lattice ping: 3 rank(s), epoch 0, provider tcp"), std::string::npos) << r.out << r.err;
  auto topo = load_topology(dir / "d.json");
  ASSERT_TRUE(topo.ok()) << topo.status().message();
  EXPECT_EQ(topo->hosts.size(), 3u);
  EXPECT_EQ(topo->links.size(), 3u);
}

// run --discover: `lattice run` itself finds the hosts and runs tensor parallel over them.
TEST(DiscoverNetns, RunDiscoverGeneratesOverTheNodesFound) {
  TwoBridges net(2);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  ScratchDir dir("disc");
  std::string secret = keygen(dir / "secret");
  ASSERT_TRUE(net.start_nodes(secret, {{1, ""}, {2, ""}}, /*netns_names=*/true));
  auto r = net.control({"run", "--demo", "--discover", "--expect", "2", "--discover-out", dir / "d.json", "--secret-file",
                        secret, "--remote", "ip netns exec {host} {cmd}", "-n", "8", "--temp", "0", "--json"});
  ASSERT_EQ(exit_code(r), 0) << r.out << r.err;
  EXPECT_NE(r.err.find("--discover: 2 hosts, 1 links"), std::string::npos) << r.err;
  auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["nodes"], 2) << r.out;
  EXPECT_EQ(j["provider"], "tcp") << r.out;
  // The same greedy text as the two local ranks of `run --demo` give.
  auto local = run_cmd({lattice_bin(), "run", "--demo", "-n", "8", "--temp", "0", "--json"}, {},
                       Deadline::after(std::chrono::seconds(60)));
  ASSERT_EQ(exit_code(local), 0) << local.err;
  auto lj = nlohmann::json::parse(local.out.substr(local.out.find('{')), nullptr, false);
  ASSERT_FALSE(lj.is_discarded()) << local.out;
  EXPECT_EQ(j["tokens"], lj["tokens"]) << r.out << "\n" << local.out;
  EXPECT_FALSE(j["text"].get<std::string>().empty());
}

// RDMA declared on eth1 (LATTICE_IFACE_KIND=eth1=rdma@DEVICE): node1 and node2 on the emulated
// device, node3 on a device it does not have. Every eth0 is shaped to 10 Mbit/s and node1's
// eth1 to 50 Mbit/s, so TCP from node1 over eth1 cannot pass 50 Mbit/s, while the emulated
// device moves its bytes through shared memory: node1-node2's figures over 0.1 Gbit/s are
// verbs', not TCP's. The pairs with node3 fail their verbs probe: tcp links over eth1 (now
// ethernet, faster than eth0) with the TCP figures, and the comment says why.
TEST(DiscoverNetns, RdmaPairsAreMeasuredOverVerbsAndAFailedVerbsProbeFallsBackToTcp) {
  TwoBridges net(3);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  ScratchDir dir("disc");
  std::string secret = keygen(dir / "secret");
  ASSERT_FALSE(secret.empty());
  for (int i = 1; i <= 3; ++i) ASSERT_TRUE(net.shape(i, 0, "10mbit")) << "tc tbf on node" << i;
  ASSERT_TRUE(net.shape(1, 1, "50mbit"));
  ASSERT_TRUE(net.start_nodes(secret, {{1, "eth1=rdma@emu_rc_0"}, {2, "eth1=rdma@emu_rc_0"}, {3, "eth1=rdma@nosuch_dev9"}}));

  auto t = net.control({"topo", "--discover", "--expect", "3", "--secret-file", secret, "-o", dir / "found.json"});
  ASSERT_EQ(exit_code(t), 0) << t.out << t.err;
  auto found = load_topology(dir / "found.json");
  ASSERT_TRUE(found.ok()) << found.status().message();
  std::ifstream in(dir / "found.json");
  auto file = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(file.is_object()) << t.out;
  ASSERT_EQ(found->links.size(), 3u) << t.out;
  for (size_t k = 0; k < found->links.size(); ++k) {
    const auto& l = found->links[k];
    const std::string pair = found->hosts[size_t(l.a)].name + "-" + found->hosts[size_t(l.b)].name;
    const std::string comment = file["links"][k].value("comment", "");
    ASSERT_TRUE(l.gbps && l.latency_us) << pair;
    EXPECT_EQ(l.a_addr.rfind("10.62.", 0), 0u) << pair << ": " << comment;
    if (pair == "node1-node2") {
      EXPECT_EQ(l.provider, LinkProvider::kVerbs) << comment;
      EXPECT_EQ(l.a_device, "emu_rc_0");
      EXPECT_EQ(l.b_device, "emu_rc_0");
      EXPECT_GT(*l.gbps, 0.1) << comment << "\n" << t.out;  // 2x what TCP from node1 can do on eth1
      EXPECT_NE(comment.find("over verbs (emu_rc_0 <-> emu_rc_0)"), std::string::npos) << comment;
      EXPECT_NE(comment.find("measured over verbs on the devices"), std::string::npos) << comment;
    } else {
      EXPECT_EQ(l.provider, LinkProvider::kTcp) << pair << ": " << comment;
      EXPECT_TRUE(l.a_device.empty() && l.b_device.empty()) << pair;
      EXPECT_EQ(comment.rfind("ethernet: ", 0), 0u) << pair << ": " << comment;
      EXPECT_NE(comment.find("downgraded from rdma: the verbs probe"), std::string::npos) << pair << ": " << comment;
      EXPECT_NE(comment.find("nosuch_dev9"), std::string::npos) << pair << ": " << comment;
    }
  }
  // The report says which links were measured over verbs.
  EXPECT_NE(t.out.find("rdma/verbs"), std::string::npos) << t.out;
}

}  // namespace
}  // namespace lattice::cluster
