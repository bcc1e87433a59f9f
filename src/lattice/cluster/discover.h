// Zero-config discovery: nodes announce themselves over DNS-SD/mDNS as `_lattice._tcp`, and
// anyone on the same networks can list them (docs/DISCOVER.md).
//
// What a node announces (Announcement, carried in the service's TXT record, each entry
// "key=value", each < 256 bytes):
//   lv=<lattice version>  dp=<discovery protocol>  fp=<cluster secret fingerprint>
//   mem=<physical memory, bytes>  name=<node name>
//   if.<iface>=<kind>,<ipv4>/<prefix>[,<rdma device>]   one per IPv4 interface
// and the SRV port is the node's probe port (discover_probe.h). The fingerprint is
// ClusterSecret::fingerprint() (a keyed hash, never the secret); joining and probing still
// prove the secret through the handshake.
//
// Interface kinds (IfaceKind) come from sysfs on Linux (local_interfaces()), or from the
// override LATTICE_IFACE_KIND="IFACE=KIND[@RDMA_DEVICE],..." (KIND: rdma, thunderbolt,
// ethernet, wifi, other), which wins over sysfs for the interfaces it names; tests and
// machines whose drivers sysfs misreports use it.
//
// The responder behind the interface (Responder) is Avahi's embeddable core on Linux
// (discover_avahi.cc): no daemon, no D-Bus, one responder per process, so every network
// namespace can run its own node. On macOS the same interface would sit over Bonjour's
// dns_sd.h (DNSServiceRegister / DNSServiceBrowse / DNSServiceResolve); that backend is not
// written yet and make_responder() says so there (kUnavailable).
//
// Thread safety: the free functions are thread-compatible; a Responder is used from one
// thread at a time (announce() starts the backend's own thread, which the destructor stops).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::cluster {

inline constexpr const char* kServiceType = "_lattice._tcp";
inline constexpr int kDiscoverProtocol = 1;
inline constexpr const char* kIfaceKindEnv = "LATTICE_IFACE_KIND";

// Ordered best first: a link over a better kind wins whatever the figures say.
enum class IfaceKind : uint8_t { kRdma = 0, kThunderbolt = 1, kEthernet = 2, kWifi = 3, kOther = 4 };
std::string_view to_string(IfaceKind k);
std::optional<IfaceKind> parse_iface_kind(std::string_view s);

struct NodeIface {
  std::string name;  // "eth0"
  IfaceKind kind = IfaceKind::kOther;
  std::string ipv4;  // "10.0.0.2"
  int prefix_len = 24;
  std::string rdma_device;  // the RDMA device on this netdev ("rxe0", "rdma_en3"), if any
};

// True when both interfaces are on one IPv4 subnet (same prefix, same network bits).
bool same_subnet(const NodeIface& a, const NodeIface& b);

// "veth0=thunderbolt,eth1=rdma@rxe0" -> name -> (kind, device). kInvalidArgument naming the
// bad entry (an unknown kind, no '=', an empty name).
struct KindOverride {
  IfaceKind kind;
  std::string rdma_device;
};
Result<std::map<std::string, KindOverride>> parse_kind_override(std::string_view text);

// What sysfs says netdev `name` is, under `sysfs` ("/sys" outside tests): wifi (wireless/ or
// phy80211), rdma (an RDMA device whose port names this netdev; `rdma_device` is set),
// thunderbolt (driver thunderbolt-net), ethernet (ARPHRD_ETHER), else other.
IfaceKind detect_kind(const std::string& sysfs, const std::string& name, std::string* rdma_device);

// This machine's IPv4 interfaces that are up, not loopback, with their kinds (the override from
// LATTICE_IFACE_KIND applied; a malformed override is an error, not ignored).
Result<std::vector<NodeIface>> local_interfaces();

struct Announcement {
  std::string name;           // node name, the DNS-SD instance name; [A-Za-z0-9][A-Za-z0-9._-]*
  std::string version;        // lattice version ("0.1.0")
  int protocol = kDiscoverProtocol;
  std::string fingerprint;    // ClusterSecret::fingerprint()
  uint64_t memory_bytes = 0;
  uint16_t probe_port = 0;    // the SRV port
  std::vector<NodeIface> ifaces;
};

// This build's version (CMake's project version).
std::string_view lattice_version();
// Physical memory of this machine in bytes (0 if unknown).
uint64_t physical_memory_bytes();

std::vector<std::string> encode_txt(const Announcement& a);
// Parses TXT entries (unknown keys are ignored: newer nodes may add some). kCorrupt naming
// the bad entry; the port is not in the TXT (the SRV record has it).
Result<Announcement> decode_txt(const std::vector<std::string>& txt);

// How a node found by browsing relates to us.
enum class NodeStatus : uint8_t {
  kJoinable,       // same fingerprint, compatible version: part of the cluster
  kForeignSecret,  // another cluster's secret: listed, never joined
  kIncompatible,   // another protocol or lattice major.minor: listed, never joined
  kMalformed,      // an announcement we could not read
};
std::string_view to_string(NodeStatus s);

struct DiscoveredNode {
  Announcement announcement;       // name is the instance name even when the TXT is bad
  std::vector<std::string> seen_at;  // resolved addresses ("10.0.0.2"), sorted, unique
  NodeStatus status = NodeStatus::kMalformed;
  std::string why;                 // for anything but kJoinable: what differs
};

// Classifies an announcement against our fingerprint and version.
NodeStatus classify_node(const Announcement& a, std::string_view our_fingerprint, std::string_view our_version,
                         std::string* why);

struct BrowseOptions {
  Clock::duration timeout = std::chrono::milliseconds(1500);  // the browse never lasts longer
  // Stop as soon as this many nodes are resolved (0: browse for the whole timeout).
  int expect = 0;
  std::string fingerprint;  // ours, for classification
  std::string version;      // ours; empty: lattice_version()
};

// A DNS-SD responder: publishes one node and browses for the others.
class Responder {
 public:
  virtual ~Responder() = default;
  // Publishes `a` and returns once the responder has registered it (or failed: a name
  // already taken on the network is kInvalidArgument), at the latest at `deadline`.
  // The announcement stays up until the Responder is destroyed.
  virtual Status announce(const Announcement& a, Deadline deadline) = 0;
  // Browses for `_lattice._tcp`, resolves what it sees, and returns the nodes found, sorted by
  // name (a node announcing itself through this responder is included).
  virtual Result<std::vector<DiscoveredNode>> browse(const BrowseOptions& o) = 0;
};

// The platform's responder: Avahi's core on Linux; kUnavailable elsewhere (see the top).
Result<std::unique_ptr<Responder>> make_responder();

}  // namespace lattice::cluster
