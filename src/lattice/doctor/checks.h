// Doctor's internals: what a node measures (NodeFacts, sent to every rank as JSON), the
// context the checks read, and the two check tables. Each check is one function of the
// context; a cluster check also reads every node's facts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lattice/cluster/topology.h"
#include "lattice/doctor/doctor.h"
#include "lattice/fabric/device_queues.h"
#include "lattice/fabric/fabric.h"

namespace lattice::doctor::detail {

// This node's end of one cable of the topology.
struct CableEnd {
  int link = -1;           // index into Topology::links
  int peer = -1;           // host index of the other end
  std::string addr;        // this end's IP (link a_addr/b_addr, else the host's address)
  std::string device;      // verbs: this end's RDMA device
  std::string device_state;  // verbs: "ACTIVE" (a port is), "DOWN" (none is) or "missing"
  std::string ifname;      // the interface holding `addr` ("" if none does)
  bool up = false;         // IFF_UP
  bool running = false;    // IFF_RUNNING: carrier
  int mtu = 0;
  std::string error;       // why the end could not be looked at
  uint16_t port = 0;       // under launch: the probe listener on `addr` (0: none)
};

// One TCP connect over a cable, from this end to the peer's listener.
struct Probe {
  int link = -1;
  bool ok = false;
  double ms = 0;
  std::string error;
};

struct NodeFacts {
  int rank = 0;
  int host_index = -1;  // in the topology, -1: none
  std::string host;
  std::string version;  // "0.1.0 abc1234" (project version and commit)
  std::string model_path, model_hash, model_error;
  uint64_t mem_available = 0;
  std::vector<Check> checks;  // the node checks
  std::vector<CableEnd> ends;
  std::vector<Probe> probes;
  std::vector<int64_t> clock_us;   // under launch: wall clock at each clock round's broadcast
  std::vector<int64_t> round_us;   // and how long each round took on this node
};

nlohmann::json facts_to_json(const NodeFacts& f);
Result<NodeFacts> facts_from_json(const nlohmann::json& j);

struct Context {
  Options options;
  std::optional<cluster::Topology> topology;
  int rank = 0, world_size = 1;
  int self = -1;                       // this node's host index in the topology (-1: none)
  bool launched = false;
  fabric::DeviceList devices;          // system devices, plus the emulated ones with --emulated
  std::vector<fabric::DeviceQueues> queues;  // a PD and QP made and destroyed on each of them
  std::vector<std::string> named_devices;  // verbs devices the topology gives this host
  bool rdma_expected = false;          // --emulated, or a verbs link on this host
  uint64_t mem_available = 0;
  std::vector<CableEnd> ends;
  std::string secret_source;           // "file", "env" or "" (none)
  std::string secret_path;
};

using NodeCheck = Check (*)(const Context&);
using ClusterCheck = std::vector<Check> (*)(const Context&, const std::vector<NodeFacts>&);

struct NodeCheckEntry {
  const char* id;
  const char* title;
  NodeCheck run;
};
struct ClusterCheckEntry {
  const char* id;
  ClusterCheck run;
};

// checks_rdma.cc: rdma, verbs-devices, verbs-ports, gid1, mtu.
// checks_host.cc: memory, thermal, power, secret.
const std::vector<NodeCheckEntry>& node_checks();
// checks_cluster.cc: version, model, clock, cable <a>-<b>, mtu-match, mesh.
const std::vector<ClusterCheckEntry>& cluster_checks();

// Registered by the check files (one table each, joined by node_checks()).
const std::vector<NodeCheckEntry>& rdma_checks();
const std::vector<NodeCheckEntry>& host_checks();

Check make(const char* id, const char* title, Level level, std::string detail, std::string fix = {});

// facts.cc: what this node measures.
Result<Context> make_context(const Options& options, int rank, int world_size, bool launched);
NodeFacts local_facts(const Context& ctx);
std::string lattice_version();
// "blake2b:<32 hex>" of every file's header and tensor table (not the weights).
Result<std::string> model_hash(const std::string& path);
uint64_t mem_available_bytes();

// net.cc
void look_at_interface(CableEnd* end);  // fills ifname, up, running, mtu (or error)
std::string fix_link_up(const std::string& ifname);
std::string fix_mtu(const std::string& ifname, int mtu);
std::string host_of(const std::string& address);  // "h:p" / "[v6]:p" / "h" -> "h"

// The report from every node's facts (the cluster checks run here).
Report join(const Context& ctx, const std::vector<NodeFacts>& facts);

}  // namespace lattice::doctor::detail
