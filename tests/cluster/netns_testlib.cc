#include "netns_testlib.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "proc_testlib.h"

namespace lattice::cluster::testing {

int sh(const std::string& cmd) {
  int st = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Netns::Netns(int n, const std::string& tag) : n_(n) {
  base_ = "lt" + std::to_string(::getpid() % 100000) + tag;
  hub_ = base_ + "h";
  if (sh("ip netns add " + hub_) != 0) {
    skip_ = "ip netns is not permitted here (need root / CAP_SYS_ADMIN)";
    return;
  }
  created_.push_back(hub_);
  bool ok = sh("ip -n " + hub_ + " link add br0 type bridge") == 0 && sh("ip -n " + hub_ + " link set br0 up") == 0;
  for (int i = 0; ok && i < n; ++i) {
    std::string ns = name(i), a = base_ + "a" + std::to_string(i), b = base_ + "b" + std::to_string(i);
    ok = sh("ip netns add " + ns) == 0;
    if (!ok) break;
    created_.push_back(ns);
    ok = sh("ip link add " + a + " type veth peer name " + b) == 0 && sh("ip link set " + a + " netns " + ns) == 0 &&
         sh("ip link set " + b + " netns " + hub_) == 0 &&
         sh("ip -n " + ns + " addr add " + ip(i) + "/24 dev " + a) == 0 &&
         sh("ip -n " + ns + " link set " + a + " up") == 0 && sh("ip -n " + ns + " link set lo up") == 0 &&
         sh("ip -n " + hub_ + " link set " + b + " master br0") == 0 && sh("ip -n " + hub_ + " link set " + b + " up") == 0;
    if (!ok) sh("ip link del " + a);  // if it never left the root namespace
  }
  if (!ok) skip_ = "could not build veth links and a bridge between namespaces";
}

Netns::~Netns() {
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) sh("ip netns del " + *it);
}

void write_topology(const std::string& path, Netns& net, const std::vector<std::pair<int, int>>& cables) {
  std::ofstream f(path);
  f << "{\"version\": 1, \"hosts\": [";
  for (int i = 0; i < net.size(); ++i)
    f << (i ? "," : "") << "{\"name\": \"" << net.name(i) << "\", \"address\": \"" << net.ip(i) << ":7470\"}";
  f << "], \"links\": [";
  for (size_t k = 0; k < cables.size(); ++k)
    f << (k ? "," : "") << "{\"a\": \"" << net.name(cables[k].first) << "\", \"b\": \"" << net.name(cables[k].second)
      << "\", \"provider\": \"tcp\"}";
  f << "]}\n";
}

int exit_code(const CmdResult& r) { return WIFEXITED(r.status) ? WEXITSTATUS(r.status) : -1; }

std::string keygen(const std::string& path) {
  auto r = run_cmd({lattice_bin(), "keygen", "-o", path}, {}, Deadline::after(std::chrono::seconds(10)));
  return exit_code(r) == 0 ? path : "";
}

ScratchDir::ScratchDir(const std::string& tag)
    : path((std::filesystem::temp_directory_path() / ("lattice_" + tag + "_" + std::to_string(::getpid()))).string()) {
  std::filesystem::create_directories(path);
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string subnet_ip(int bridge, int host) { return "10.6" + std::to_string(bridge + 1) + ".0." + std::to_string(host); }

TwoBridges::TwoBridges(int n) : n_(n) {
  base_ = "ld" + std::to_string(::getpid() % 100000);
  if (sh("ip netns add " + base_ + "h") != 0) {
    skip_ = "ip netns is not permitted here (need root / CAP_SYS_ADMIN)";
    return;
  }
  created_.push_back(base_ + "h");
  std::string hub = "ip -n " + base_ + "h ";
  bool ok = true;
  for (int b = 0; ok && b < 2; ++b)
    ok = sh(hub + "link add br" + std::to_string(b) + " type bridge") == 0 &&
         sh(hub + "link set br" + std::to_string(b) + " up") == 0;
  for (int i = 1; ok && i <= n + 1; ++i) {
    int host = i <= n ? i : 100;
    std::string ns = ns_name(i <= n ? i : 0);
    ok = sh("ip netns add " + ns) == 0;
    if (!ok) break;
    created_.push_back(ns);
    ok = sh("ip -n " + ns + " link set lo up") == 0;
    for (int b = 0; ok && b < 2; ++b) {
      std::string a = base_ + "a" + std::to_string(host) + "x" + std::to_string(b);
      std::string z = base_ + "z" + std::to_string(host) + "x" + std::to_string(b);
      std::string dev = "eth" + std::to_string(b);
      ok = sh("ip link add " + a + " type veth peer name " + z) == 0 && sh("ip link set " + a + " netns " + ns) == 0 &&
           sh("ip link set " + z + " netns " + base_ + "h") == 0 &&
           sh("ip -n " + ns + " link set " + a + " name " + dev) == 0 &&
           sh("ip -n " + ns + " addr add " + subnet_ip(b, host) + "/24 dev " + dev) == 0 &&
           sh("ip -n " + ns + " link set " + dev + " up") == 0 &&
           sh(hub + "link set " + z + " master br" + std::to_string(b)) == 0 && sh(hub + "link set " + z + " up") == 0;
      if (!ok) sh("ip link del " + a);
    }
  }
  if (!ok) skip_ = "could not build veth links and bridges between namespaces";
}

TwoBridges::~TwoBridges() {
  nodes_.clear();  // stop the announcers before their namespaces go
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) sh("ip netns del " + *it);
}

bool TwoBridges::shape(int i, int bridge, const std::string& rate) {
  return sh("tc -n " + ns_name(i) + " qdisc add dev eth" + std::to_string(bridge) + " root tbf rate " + rate +
            " burst 16kb latency 100ms") == 0;
}

long long TwoBridges::tx_bytes(int i, int bridge) const {
  auto r = run_cmd({"ip", "-n", ns_name(i), "-s", "-j", "link", "show", "dev", "eth" + std::to_string(bridge)}, {},
                   Deadline::after(std::chrono::seconds(10)));
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  if (!j.is_array() || j.empty() || !j[0].contains("stats64")) return -1;
  return j[0]["stats64"]["tx"].value("bytes", -1LL);
}

::testing::AssertionResult TwoBridges::start_nodes(const std::string& secret,
                                                   const std::vector<std::pair<int, std::string>>& nodes,
                                                   bool netns_names) {
  std::vector<std::pair<int, Proc>> started;
  for (const auto& [i, kinds] : nodes) {
    Env env;
    if (!kinds.empty()) env.emplace_back("LATTICE_IFACE_KIND", kinds);
    std::string name = netns_names ? ns_name(i) : "node" + std::to_string(i);
    auto p = Proc::spawn({"ip", "netns", "exec", ns_name(i), lattice_bin(), "discover", "--announce", "--name", name,
                          "--secret-file", secret, "--for-s", "120"},
                         env);
    if (!p.ok()) return ::testing::AssertionFailure() << p.status().to_string();
    started.emplace_back(i, std::move(*p));
  }
  for (auto& [i, p] : started) {
    auto line = p.wait_line("announcing", Deadline::after(std::chrono::seconds(15)));
    if (!line.ok()) return ::testing::AssertionFailure() << "node " << i << ": " << p.out() << p.err();
    nodes_.push_back(std::move(p));
  }
  return ::testing::AssertionSuccess();
}

CmdResult TwoBridges::control(std::vector<std::string> args, const Env& env) {
  std::vector<std::string> argv = {"ip", "netns", "exec", ns_name(0), lattice_bin()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_cmd(argv, env, Deadline::after(std::chrono::seconds(60)));
}

std::string survivors(const Netns& net) {
  std::string out;
  for (int i = 0; i < net.size(); ++i) {
    auto r = run_cmd({"ip", "netns", "pids", net.name(i)}, {}, Deadline::after(std::chrono::seconds(30)));
    std::string pids;
    for (char ch : r.out) pids += ch == '\n' ? ' ' : ch;
    if (pids.find_first_not_of(' ') != std::string::npos) out += net.name(i) + ": " + pids + "; ";
  }
  return out;
}

std::string wait_until_empty(const Netns& net, std::chrono::seconds bound) {
  auto until = Deadline::after(bound);
  std::string left = survivors(net);
  while (!left.empty() && !until.expired()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    left = survivors(net);
  }
  return left;
}

}  // namespace lattice::cluster::testing
