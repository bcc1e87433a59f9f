#include "netns_testlib.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>

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
