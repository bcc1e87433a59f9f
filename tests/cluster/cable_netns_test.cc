// The topology's cable carries the data: two nodes on two bridges (netns_testlib.h's
// TwoBridges). br0 holds the hosts' addresses, so the coordinator and the control plane live
// there, and it is shaped to 20 Mbit/s (a Wi-Fi, say); br1 runs at veth speed (the
// Thunderbolt cable). A topology whose link names br1's addresses must move the data over
// br1, as the kernel's per-interface byte counters show; one without addresses falls back to
// br0 and says so. Then `run --discover` and `serve --discover`, which measure the links
// themselves, generate over the cable they chose (serve's answer equal to one process's).
#include <gtest/gtest.h>

#include <signal.h>
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
using testing::exit_code;
using testing::keygen;
using testing::ScratchDir;
using testing::Env;
using testing::lattice_bin;
using testing::Proc;
using testing::run_cmd;
using testing::subnet_ip;
using testing::TwoBridges;

// What rank 0 logs (LATTICE_LOG=info) when its endpoint to rank 1 is on br1's address.
std::string cable_line() { return "data over the topology's cable, " + subnet_ip(1, 1) + " here to " + subnet_ip(1, 2) + " there"; }

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
  ScratchDir dir("cable");
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
  EXPECT_NE(r.err.find(cable_line()),
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
  ScratchDir dir("cable");
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

// Two hosts addressed on br0 and one verbs link between them, on `device` at both ends, with
// br1's addresses given (they steer tcp endpoints only: a verbs cable is its devices).
void write_verbs_hosts(const std::string& path, const TwoBridges& net, const std::string& a_device,
                       const std::string& b_device) {
  std::ofstream f(path);
  f << "{\"version\": 1, \"hosts\": [";
  for (int i = 1; i <= 2; ++i)
    f << (i > 1 ? ", " : "") << "{\"name\": \"" << net.ns_name(i) << "\", \"address\": \"" << subnet_ip(0, i) << "\"}";
  f << "], \"links\": [{\"a\": \"" << net.ns_name(1) << "\", \"b\": \"" << net.ns_name(2) << "\", \"provider\": \"verbs\", "
    << "\"a_device\": \"" << a_device << "\", \"b_device\": \"" << b_device << "\", \"a_addr\": \"" << subnet_ip(1, 1)
    << "\", \"b_addr\": \"" << subnet_ip(1, 2) << "\"}]}\n";
}

// A verbs cable in the topology: the pair's endpoint is opened on the named device (here the
// emulated one, whose bytes go through shared memory), so `lattice ping` moves its data and
// neither bridge carries it; the log names the device at each end.
TEST(CableNetns, AVerbsCableOpensItsDeviceForThatPair) {
  TwoBridges net(2);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  ScratchDir dir("cable");
  std::string secret = keygen(dir / "secret");
  ASSERT_FALSE(secret.empty());
  write_verbs_hosts(dir / "verbs.json", net, "emu_rc_0", "emu_rc_0");
  const Sent before = sent(net);
  auto r = ping(net, dir / "verbs.json", secret, "1M");
  const Sent after = sent(net);
  ASSERT_EQ(exit_code(r), 0) << r.out << r.err;
  EXPECT_NE(r.err.find("data over the topology's verbs cable, device emu_rc_0 (verbs-emu://linux-rc) here to emu_rc_0 there"),
            std::string::npos)
      << r.err;
  auto j = nlohmann::json::parse(rank0_text(r.out), nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("pairs") && !j["pairs"].empty()) << r.out;
  EXPECT_GT(j["pairs"][0].value("bw_gbps", 0.0), 0.0) << r.out;
  // The warm-up alone is eight 1 MiB sends; the bridges carried the control plane only.
  const long long over_br0 = after.br0 - before.br0, over_br1 = after.br1 - before.br1;
  EXPECT_LT(over_br0, 2ll << 20) << "br0 " << over_br0 << " B, br1 " << over_br1 << " B";
  EXPECT_LT(over_br1, 256ll << 10) << "br0 " << over_br0 << " B, br1 " << over_br1 << " B";

  // A device this host does not have fails the job, naming the pair's device and the fix.
  write_verbs_hosts(dir / "missing.json", net, "emu_rc_0", "nosuch_dev9");
  auto m = net.control({"launch", "--hostfile", dir / "missing.json", "--secret-file", secret, "--remote",
                        "ip netns exec {host} {cmd}", "--", lattice_bin(), "ping", "--iters", "5", "--timeout", "20"});
  EXPECT_NE(exit_code(m), 0) << m.out << m.err;
  EXPECT_NE(m.err.find("the topology puts this end of their cable on RDMA device nosuch_dev9 (verbs://nosuch_dev9), which "
                       "this host cannot open"),
            std::string::npos)
      << m.out << m.err;
}

// run --discover, with br0 shaped: the probe picks br1, and the generation goes over it.
TEST(CableNetns, RunDiscoverGeneratesOverTheMeasuredCable) {
  TwoBridges net(2);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  ScratchDir dir("cable");
  std::string secret = keygen(dir / "secret");
  ASSERT_FALSE(secret.empty());
  for (int i = 1; i <= 2; ++i) ASSERT_TRUE(net.shape(i, 0, "20mbit"));
  ASSERT_TRUE(net.start_nodes(secret, {{1, ""}, {2, ""}}, /*netns_names=*/true));
  auto r = net.control({"run", "--demo", "--discover", "--expect", "2", "--discover-out", dir / "d.json", "--secret-file",
                        secret, "--remote", "ip netns exec {host} {cmd}", "-n", "8", "--temp", "0", "--json"},
                       {{"LATTICE_LOG", "info"}});
  ASSERT_EQ(exit_code(r), 0) << r.out << r.err;
  EXPECT_NE(r.err.find(cable_line()),
            std::string::npos)
      << r.err;
  auto j = nlohmann::json::parse(r.out.substr(std::min(r.out.find('{'), r.out.size())), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["nodes"], 2) << r.out;
  EXPECT_FALSE(j["text"].get<std::string>().empty());
}

// The port in a "listening on http://HOST:PORT" line, or -1.
int port_of(const std::string& line) {
  const size_t colon = line.rfind(':');
  return colon == std::string::npos ? -1 : std::atoi(line.c_str() + colon + 1);
}

// curl's body for a completion request, through `prefix` (a namespace to run in, or none).
CmdResult complete(std::vector<std::string> prefix, const std::string& url, const nlohmann::json& req) {
  prefix.insert(prefix.end(), {"curl", "-sS", "--max-time", "60", "-H", "Content-Type: application/json", "-d", req.dump(),
                               url + "/v1/completions"});
  return run_cmd(prefix, {}, Deadline::after(std::chrono::seconds(90)));
}

// serve --discover: one rank per host found, rank 0 answering HTTP in its namespace, the
// tensor-parallel steps over the measured cable; it answers what one process answers.
TEST(CableNetns, ServeDiscoverAnswersWhatOneProcessAnswers) {
  TwoBridges net(2);
  if (!net.skip_reason().empty()) LATTICE_SKIP_OR_FAIL("netns", net.skip_reason());
  if (exit_code(run_cmd({"curl", "--version"}, {}, Deadline::after(std::chrono::seconds(10)))) != 0)
    GTEST_SKIP() << "curl absent (scripts/setup.sh installs it)";
  ScratchDir dir("cable");
  std::string secret = keygen(dir / "secret");
  ASSERT_FALSE(secret.empty());
  auto made = run_cmd({lattice_bin(), "make-model", "-o", dir / "tiny.gguf", "--dim", "128", "--layers", "2", "--heads", "4",
                       "--kv-heads", "2", "--vocab", "300", "--type", "q8_0", "--threads", "1"},
                      {}, Deadline::after(std::chrono::seconds(60)));
  ASSERT_EQ(exit_code(made), 0) << made.out << made.err;
  for (int i = 1; i <= 2; ++i) ASSERT_TRUE(net.shape(i, 0, "20mbit"));
  ASSERT_TRUE(net.start_nodes(secret, {{1, ""}, {2, ""}}, /*netns_names=*/true));
  const nlohmann::json req{{"prompt", "abc def"}, {"max_tokens", 16}, {"temperature", 0}, {"ignore_eos", true}};

  auto one = Proc::spawn({lattice_bin(), "serve", "-m", dir / "tiny.gguf", "--port", "0", "-t", "1", "--ctx", "512"}, {});
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto one_line = one->wait_line("listening on http://", Deadline::after(std::chrono::seconds(30)));
  ASSERT_TRUE(one_line.ok()) << one->err();
  auto ref = complete({}, "http://127.0.0.1:" + std::to_string(port_of(*one_line)), req);
  one->signal(SIGTERM);
  (void)one->wait(Deadline::after(std::chrono::seconds(20)));
  auto ref_j = nlohmann::json::parse(ref.out, nullptr, false);
  ASSERT_TRUE(ref_j.is_object() && ref_j.contains("choices")) << ref.out << ref.err;

  auto two = Proc::spawn({"ip", "netns", "exec", net.ns_name(0), lattice_bin(), "serve", "-m", dir / "tiny.gguf", "--discover",
                          "--expect", "2", "--discover-out", dir / "d.json", "--secret-file", secret, "--remote",
                          "ip netns exec {host} {cmd}", "--host", "0.0.0.0", "--port", "0", "-t", "1", "--ctx", "512"},
                         {{"LATTICE_LOG", "info"}});
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  auto line = two->wait_line("listening on http://", Deadline::after(std::chrono::seconds(60)));
  ASSERT_TRUE(line.ok()) << two->out() << two->err();
  // Rank 0 is the first host by name: node 1's namespace.
  auto got = complete({"ip", "netns", "exec", net.ns_name(0)}, "http://" + subnet_ip(0, 1) + ":" + std::to_string(port_of(*line)), req);
  auto got_j = nlohmann::json::parse(got.out, nullptr, false);
  two->signal(SIGTERM);
  auto st = two->wait(Deadline::after(std::chrono::seconds(30)));
  ASSERT_TRUE(got_j.is_object() && got_j.contains("choices")) << got.out << got.err << two->err();
  EXPECT_FALSE(ref_j["choices"][0].value("text", std::string()).empty()) << ref.out;
  EXPECT_EQ(got_j["choices"][0]["text"], ref_j["choices"][0]["text"]) << got.out << "\n" << ref.out;
  EXPECT_NE(two->err().find("lattice serve: --discover: 2 hosts, 1 links"), std::string::npos) << two->err();
  EXPECT_NE(two->err().find(cable_line()),
            std::string::npos)
      << two->err();
  EXPECT_TRUE(st.ok()) << st.status().to_string();
}

}  // namespace
}  // namespace lattice::cluster
