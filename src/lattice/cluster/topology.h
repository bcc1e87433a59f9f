// The cluster's topology: which hosts there are, and which cables (links) join which pairs,
// with the fabric provider to use on each. Read from a JSON file in our format (documented
// in docs/TOPOLOGY.md) or from an MLX hostfile (detected automatically, converted).
//
// Parsing never trusts its input: syntax errors, unknown keys (with "did you mean"),
// duplicate hosts or addresses, links naming a missing host, self-links, bad providers,
// reused RDMA devices... are all reported as kInvalidArgument whose message holds one line
// per problem, each "FILE:LINE: what is wrong". Warnings (valid but suspicious) are kept in
// Topology::warnings in the same form.
//
// Everything here is plain data and pure functions: thread-compatible, no I/O except
// load_topology() reading the file.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::cluster {

enum class LinkProvider : uint8_t { kTcp, kShm, kVerbs };
std::string_view to_string(LinkProvider p);

struct Host {
  std::string name;     // unique; [A-Za-z0-9][A-Za-z0-9._-]*
  std::string address;  // control/bootstrap address: "host", "host:port" or "[v6]:port"
  std::string ssh;      // how the launcher reaches it (empty: use `name`)
  std::optional<double> memory_gb;
  // For `lattice sim`: a machine preset ("m3-ultra") or a machine file (from `sim --calibrate`,
  // relative to the topology file). Empty: not said (the simulator's default machine).
  std::string machine;
  int rank = -1;        // always set after parsing: given in the file, or the host's index
  int line = 0;         // where it was defined (0: not from a file)
};

struct Link {
  int a = -1;  // host indices into Topology::hosts
  int b = -1;
  LinkProvider provider = LinkProvider::kTcp;
  std::string a_addr, b_addr;      // tcp (and verbs' paired IP interface): the IPs at each end
  std::string a_device, b_device;  // verbs: the RDMA device at each end, e.g. "rdma_en3"
  std::optional<double> gbps;
  // For `lattice sim`: what the cable is ("tb5", "10gbe", "100gbe", "loopback"...; empty: the
  // provider's default) and its one-way latency, when known.
  std::string medium;
  std::optional<double> latency_us;
  int line = 0;
};

struct Topology {
  int version = 1;
  std::string source;  // the file name used in messages
  std::string format;  // "lattice" or "mlx"
  std::vector<Host> hosts;
  std::vector<Link> links;
  std::string coordinator;  // "host:port", empty: the launcher picks rank 0's address
  // Kept from an MLX hostfile (informational).
  std::string mlx_backend;
  std::vector<std::string> mlx_envs;
  std::vector<std::string> warnings;  // "FILE:LINE: ..."

  // Index of the host named `name`, or -1.
  int find_host(std::string_view name) const;
};

// Parses either format (an MLX hostfile is a top-level array, or an object with "hosts"
// but neither "version" nor "links"). `source` names the file in messages.
Result<Topology> parse_topology(std::string_view text, std::string_view source);
// Reads and parses a file; kNotFound / kIoError if it cannot be read.
Result<Topology> load_topology(const std::string& path);

enum class Shape : uint8_t {
  kSingle,        // one host, nothing to link
  kFullMesh,      // every pair has at least one link
  kRing,          // >= 4 hosts, each with exactly two neighbours, one cycle
  kPartial,       // connected, but neither of the above
  kDisconnected,  // some hosts cannot reach others at all
};
std::string_view to_string(Shape s);

struct Classification {
  Shape shape = Shape::kSingle;
  std::vector<std::vector<int>> cables;            // cables[i][j]: links between hosts i and j
  std::vector<std::pair<int, int>> missing_pairs;  // i < j without a link
  std::vector<std::vector<int>> components;        // connected components, each sorted
  std::vector<int> ring_order;                     // kRing: hosts in cycle order from host 0
  bool also_ring = false;                          // kFullMesh of 3 hosts is a ring too
};

Classification classify(const Topology& topo);

// `lattice topo` output: hosts, links per pair with cable counts, the shape and an ASCII
// adjacency matrix of cable counts.
std::string render_text(const Topology& topo, const Classification& c);
// Graphviz: one node per host, one edge per cable (parallel edges for several cables).
std::string render_dot(const Topology& topo);
// The normalized topology in our own format (ranks and defaults explicit), 2-space indent.
std::string render_json(const Topology& topo);

namespace detail {
// Levenshtein distance, for "did you mean" suggestions (exposed for tests).
size_t edit_distance(std::string_view a, std::string_view b);
// The closest of `candidates` to `word` if close enough to be a likely typo, else "".
std::string closest(std::string_view word, const std::vector<std::string>& candidates);
}  // namespace detail

}  // namespace lattice::cluster
