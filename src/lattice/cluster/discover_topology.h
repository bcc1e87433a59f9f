// A topology measured rather than written: browse for the nodes (discover.h), probe every
// pair on every network they share (discover_probe.h), keep the best link per pair, and write
// it as a topology file in the usual format (topology.h, docs/TOPOLOGY.md) with the figures in
// its fields ("gbps", "latency_us") and what was measured in "comment".
//
// The best link of a pair: the best kind first (rdma, then thunderbolt, then ethernet, then
// wifi, then other; a link's kind is the worse of its two ends), measured bandwidth among
// equals, so Wi-Fi is never chosen while a wire answers. A link whose probe failed is never
// chosen. Both ends rdma with their devices known: the pair is probed over verbs as well, on
// those devices, and is a verbs link with verbs' figures; if that probe fails, it is a tcp
// link over those IPs, with the TCP figures, ranked as ethernet, and its comment says why.
// Else tcp over those IPs.
//
// A host's address (the control address, and so rank 0's the coordinator) is its IP on the best
// network every member shares, so the bootstrap, and the data connections that follow it, run
// there; with none shared by all, the address it was discovered at.
#pragma once

#include <string>
#include <vector>

#include "lattice/cluster/discover.h"
#include "lattice/cluster/discover_probe.h"
#include "lattice/cluster/topology.h"
#include "lattice/crypto/secret.h"

namespace lattice::cluster {

// Whether a link was probed over verbs too (both ends rdma with their devices known).
enum class VerbsProbe { kNotTried, kMeasured, kFailed };

struct LinkProbe {
  int a = -1, b = -1;  // indices into DiscoveredCluster::nodes; a's name sorts first
  NodeIface a_iface, b_iface;
  IfaceKind kind = IfaceKind::kOther;  // link_kind(), or kEthernet once a verbs probe failed
  bool ok = false;
  ProbeResult result;  // the verbs figures when verbs == kMeasured, else the TCP ones
  std::string error;   // when !ok
  bool chosen = false;
  VerbsProbe verbs = VerbsProbe::kNotTried;
  bool tcp_ok = false;       // the TCP probe on the interfaces, when verbs was tried
  ProbeResult tcp;           // its figures
  std::string verbs_error;   // when verbs == kFailed: why (the link is tcp then)
};

// Both ends rdma with their devices known: the pairs probed over verbs, and written as verbs
// links (unless that probe failed).
bool verbs_capable(const LinkProbe& p);
// Folds the verbs probe's outcome into a probe whose TCP probe already ran (p.ok, p.result,
// p.error as it left them): measured, the figures are verbs'; failed, the TCP figures stay,
// the kind drops to ethernet (so the link is tcp, ranked as a wire), and verbs_error says why.
void apply_verbs_probe(LinkProbe& p, const Result<ProbeResult>& verbs);

struct DiscoveredCluster {
  std::vector<DiscoveredNode> nodes;  // everything found, sorted by name, joined or not
  std::vector<int> members;           // indices of the nodes joined (kJoinable), in rank order
  std::vector<LinkProbe> probes;      // every probe made
  std::string text;                   // the topology file, valid for parse_topology()
  Topology topology;                  // `text` parsed back
};

struct DiscoverOptions {
  BrowseOptions browse;
  ProbeOptions probe;
  std::string source = "discovered.json";  // the name used in the file's messages
};

// The kind of a link between two interfaces: the worse of the two.
IfaceKind link_kind(const NodeIface& a, const NodeIface& b);
// Marks the chosen probe of each pair (rules above); pure, for tests.
void choose_links(std::vector<LinkProbe>& probes);
// Builds the topology text from the nodes, members and probes (choose_links() already run).
std::string render_discovered(const std::vector<DiscoveredNode>& nodes, const std::vector<int>& members,
                              const std::vector<LinkProbe>& probes);

// Browses through `responder`, probes, chooses, renders. Blocks: the browse's timeout, then
// probes in rounds (each node in one probe at a time, disjoint pairs at once), each bounded by
// options.probe.timeout. Fewer than one member is kNotFound (with what was found, and why
// those were not joined).
Result<DiscoveredCluster> discover_topology(Responder& responder, const crypto::ClusterSecret& secret,
                                            const DiscoverOptions& options);

// make_responder() + discover_topology(), then the file written to `path` (write_text_file);
// what `lattice topo --discover -o F` and `launch --discover` do.
Result<DiscoveredCluster> discover_to_file(const crypto::ClusterSecret& secret, const DiscoverOptions& options,
                                           const std::string& path);
// A table of the probes ("pair  link  Gbit/s  us  chosen"), for the commands' reports.
std::string render_probes(const DiscoveredCluster& c);

// A node taking part in discovery: its probe server and its announcement, both up until
// destroyed. The announcement is this machine's interfaces (local_interfaces()), memory, the
// secret's fingerprint and `version` (this build's unless a test says otherwise).
struct AnnounceOptions {
  std::string name;          // node name; empty: the host name
  uint16_t probe_port = 0;   // 0: any free port
  std::string version;       // empty: lattice_version()
  Clock::duration timeout = std::chrono::seconds(5);  // until the announcement is registered
};
struct Announcer {
  Announcement announcement;
  std::unique_ptr<ProbeServer> probe;
  std::unique_ptr<Responder> responder;
};
Result<Announcer> start_announcer(const crypto::ClusterSecret& secret, const AnnounceOptions& options);

// Writes `text` to `path` atomically (a temporary file beside it, then rename).
Status write_text_file(const std::string& path, const std::string& text);

}  // namespace lattice::cluster
