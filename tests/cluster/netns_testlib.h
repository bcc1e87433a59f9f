// Network namespaces for tests: n namespaces on a bridge (one veth each, the "cable" of a
// rank), a topology file naming them, and the processes left in them. Used by the fault,
// launch and chaos tests; everything a Netns made is deleted by its destructor.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "proc_testlib.h"

namespace lattice::cluster::testing {

// Runs a shell command quietly; its exit code (-1 if it did not exit).
int sh(const std::string& cmd);

// n namespaces "lt<pid><tag>0..n-1", each with one veth into a bridge in a hub namespace;
// rank i has 10.213.0.(i+1)/24. Everything is deleted by the destructor, even after a failure.
class Netns {
 public:
  Netns(int n, const std::string& tag);
  ~Netns();
  Netns(const Netns&) = delete;
  Netns& operator=(const Netns&) = delete;
  const std::string& skip_reason() const { return skip_; }
  int size() const { return n_; }
  std::string name(int i) const { return base_ + std::to_string(i); }
  std::string ip(int i) const { return "10.213.0." + std::to_string(i + 1); }
  std::string veth(int i) const { return base_ + "a" + std::to_string(i); }
  int cut(int i) const { return sh("ip -n " + name(i) + " link set " + veth(i) + " down"); }
  int heal(int i) const { return sh("ip -n " + name(i) + " link set " + veth(i) + " up"); }
  // A slow cable (a token bucket: this kernel has tbf but no netem), and back to full speed.
  int throttle(int i, const std::string& rate) const {
    return sh("ip netns exec " + name(i) + " tc qdisc replace dev " + veth(i) + " root tbf rate " + rate +
              " burst 32kb latency 400ms");
  }
  int unthrottle(int i) const { return sh("ip netns exec " + name(i) + " tc qdisc del dev " + veth(i) + " root"); }

 private:
  int n_ = 0;
  std::string base_, hub_, skip_;
  std::vector<std::string> created_;
};

// A topology file: the namespaces as hosts, a tcp cable for each pair in `cables`.
void write_topology(const std::string& path, Netns& net, const std::vector<std::pair<int, int>>& cables);

// The processes left in each namespace (ip netns pids), as "ns: pid pid; ...", empty if none.
std::string survivors(const Netns& net);
// Polls until no process is left in any namespace (or the bound); returns what is left.
std::string wait_until_empty(const Netns& net, std::chrono::seconds bound);

// The two-bridge layout of the discovery and cable tests: node namespaces 1..n and a control
// namespace 0 (host .100). Bridge b joins every namespace's eth<b>: br0 is 10.61.0.0/24, br1
// 10.62.0.0/24, node i is .i on both.
std::string subnet_ip(int bridge, int host);

// The exit code of a finished command, -1 if it did not exit.
int exit_code(const CmdResult& r);
// A cluster secret made by `lattice keygen` at `path`; "" if that failed.
std::string keygen(const std::string& path);
// A scratch directory "lattice_<tag>_<pid>" under the temporary directory, removed with it.
struct ScratchDir {
  explicit ScratchDir(const std::string& tag);
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::string operator/(const std::string& f) const { return path + "/" + f; }
  std::string path;
};

class TwoBridges {
 public:
  explicit TwoBridges(int n);
  ~TwoBridges();
  TwoBridges(const TwoBridges&) = delete;
  TwoBridges& operator=(const TwoBridges&) = delete;
  const std::string& skip_reason() const { return skip_; }
  // 0: the control namespace; 1..n: the nodes.
  std::string ns_name(int i) const { return base_ + (i == 0 ? std::string("c") : std::to_string(i)); }
  // Egress shaping of node i's interface eth<bridge> (tc tbf).
  bool shape(int i, int bridge, const std::string& rate);
  // Bytes namespace i sent out of eth<bridge> so far (the kernel's counter), -1 if unreadable.
  long long tx_bytes(int i, int bridge) const;
  // Starts nodes (number, LATTICE_IFACE_KIND override) as `lattice discover --announce`, all at
  // once; waits until each is registered on the network. Node i is named "node<i>", or its
  // namespace's name.
  ::testing::AssertionResult start_nodes(const std::string& secret, const std::vector<std::pair<int, std::string>>& nodes,
                                         bool netns_names = false);
  // Runs `lattice args...` in the control namespace (60 s bound).
  CmdResult control(std::vector<std::string> args, const Env& env = {});

 private:
  int n_;
  std::string base_, skip_;
  std::vector<std::string> created_;
  std::vector<Proc> nodes_;
};

}  // namespace lattice::cluster::testing
