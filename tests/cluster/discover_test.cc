// Discovery without a network: the TXT record, the kind override, sysfs kind detection on a
// fake tree, how found nodes are classified, which link wins a pair, and that the file
// written is a topology the parser takes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "lattice/cluster/discover.h"
#include "lattice/cluster/discover_probe.h"
#include "lattice/cluster/discover_topology.h"
#include "lattice/cluster/topology.h"
#include "lattice/cluster/topology_links.h"

namespace lattice::cluster {
namespace {

NodeIface iface(std::string name, IfaceKind kind, std::string ip, int prefix = 24, std::string dev = "") {
  return NodeIface{std::move(name), kind, std::move(ip), prefix, std::move(dev)};
}

TEST(Discover, TxtRoundTrips) {
  Announcement a;
  a.name = "m1";
  a.version = "0.1.0";
  a.fingerprint = "a1b2c3d4";
  a.memory_bytes = 512ull << 30;
  a.ifaces = {iface("en3", IfaceKind::kRdma, "169.254.0.1", 30, "rdma_en3"), iface("en0", IfaceKind::kWifi, "192.168.1.5")};
  auto txt = encode_txt(a);
  for (const auto& e : txt) EXPECT_LT(e.size(), 256u) << e;
  auto b = decode_txt(txt);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->name, "m1");
  EXPECT_EQ(b->version, "0.1.0");
  EXPECT_EQ(b->fingerprint, "a1b2c3d4");
  EXPECT_EQ(b->memory_bytes, 512ull << 30);
  ASSERT_EQ(b->ifaces.size(), 2u);  // sorted by name
  EXPECT_EQ(b->ifaces[0].name, "en0");
  EXPECT_EQ(b->ifaces[0].kind, IfaceKind::kWifi);
  EXPECT_EQ(b->ifaces[1].rdma_device, "rdma_en3");
  EXPECT_EQ(b->ifaces[1].prefix_len, 30);
  // The secret itself is never in it: only the fingerprint.
  for (const auto& e : txt) EXPECT_EQ(e.find("secret"), std::string::npos);
}

TEST(Discover, TxtRejectsGarbageWithAMessage) {
  EXPECT_EQ(decode_txt({"lv=0.1.0"}).status().code(), ErrorCode::kCorrupt);  // no dp=
  EXPECT_EQ(decode_txt({"dp=1"}).status().code(), ErrorCode::kCorrupt);      // no lv=
  auto bad_ip = decode_txt({"dp=1", "lv=0.1.0", "if.eth0=ethernet,999.1.1.1/24"});
  EXPECT_NE(bad_ip.status().message().find("IPv4"), std::string::npos) << bad_ip.status().message();
  EXPECT_FALSE(decode_txt({"dp=1", "lv=0.1.0", "if.eth0=ethernet,10.0.0.1/40"}).ok());
  EXPECT_FALSE(decode_txt({"dp=x", "lv=0.1.0"}).ok());
  EXPECT_FALSE(decode_txt({"dp=1", "lv=0.1.0", "mem=-5"}).ok());
  // Unknown keys and kinds from newer nodes are tolerated.
  auto newer = decode_txt({"dp=1", "lv=0.1.0", "zz=1", "if.x0=quantum,10.0.0.1/24"});
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(newer->ifaces[0].kind, IfaceKind::kOther);
}

TEST(Discover, KindOverrideParsesAndRefusesTypos) {
  auto o = parse_kind_override("veth0=thunderbolt,eth1=rdma@rxe0,,wl0=wifi");
  ASSERT_TRUE(o.ok()) << o.status().to_string();
  EXPECT_EQ(o->at("veth0").kind, IfaceKind::kThunderbolt);
  EXPECT_EQ(o->at("eth1").rdma_device, "rxe0");
  EXPECT_EQ(o->at("wl0").kind, IfaceKind::kWifi);
  auto typo = parse_kind_override("veth0=thunderbolts");
  EXPECT_EQ(typo.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(typo.status().message().find("thunderbolts"), std::string::npos);
  EXPECT_FALSE(parse_kind_override("veth0").ok());
  EXPECT_FALSE(parse_kind_override("eth0=ethernet@mlx5_0").ok());  // only rdma names a device
}

TEST(Discover, KindFromAFakeSysfs) {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / ("lattice_sysfs_" + std::to_string(::getpid()));
  auto write = [&](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  };
  write(root / "class/net/wlan0/type", "1");
  fs::create_directories(root / "class/net/wlan0/wireless");
  write(root / "class/net/eth0/type", "1");
  write(root / "class/net/en5/type", "1");
  fs::create_directories(root / "bus/thunderbolt-net");
  fs::create_directories(root / "class/net/en5/device");
  fs::create_symlink(root / "bus/thunderbolt-net", root / "class/net/en5/device/driver");
  write(root / "class/net/enp1/type", "1");
  write(root / "class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0", "enp1");
  write(root / "class/net/tun0/type", "65534");
  std::string dev;
  EXPECT_EQ(detect_kind(root.string(), "wlan0", &dev), IfaceKind::kWifi);
  EXPECT_EQ(detect_kind(root.string(), "eth0", &dev), IfaceKind::kEthernet);
  EXPECT_EQ(detect_kind(root.string(), "en5", &dev), IfaceKind::kThunderbolt);
  EXPECT_EQ(detect_kind(root.string(), "enp1", &dev), IfaceKind::kRdma);
  EXPECT_EQ(dev, "rxe0");
  EXPECT_EQ(detect_kind(root.string(), "tun0", nullptr), IfaceKind::kOther);
  EXPECT_EQ(detect_kind(root.string(), "missing0", nullptr), IfaceKind::kOther);
  fs::remove_all(root);
}

TEST(Discover, ClassifiesBySecretAndVersion) {
  Announcement a;
  a.version = "0.1.7";
  a.fingerprint = "aaaa0000";
  std::string why;
  EXPECT_EQ(classify_node(a, "aaaa0000", "0.1.0", &why), NodeStatus::kJoinable);
  EXPECT_EQ(classify_node(a, "bbbb1111", "0.1.0", &why), NodeStatus::kForeignSecret);
  EXPECT_NE(why.find("aaaa0000"), std::string::npos);
  EXPECT_EQ(classify_node(a, "aaaa0000", "0.2.0", &why), NodeStatus::kIncompatible);
  EXPECT_NE(why.find("0.1.7"), std::string::npos);
  a.protocol = kDiscoverProtocol + 1;
  EXPECT_EQ(classify_node(a, "aaaa0000", "0.1.0", &why), NodeStatus::kIncompatible);
}

TEST(Discover, SameSubnet) {
  EXPECT_TRUE(same_subnet(iface("a", IfaceKind::kEthernet, "10.0.0.1"), iface("b", IfaceKind::kEthernet, "10.0.0.2")));
  EXPECT_FALSE(same_subnet(iface("a", IfaceKind::kEthernet, "10.0.0.1"), iface("b", IfaceKind::kEthernet, "10.0.1.2")));
  EXPECT_FALSE(same_subnet(iface("a", IfaceKind::kEthernet, "10.0.0.1", 24), iface("b", IfaceKind::kEthernet, "10.0.0.2", 16)));
  EXPECT_FALSE(same_subnet(iface("a", IfaceKind::kEthernet, "10.0.0.1"), iface("b", IfaceKind::kEthernet, "10.0.0.1")));
  EXPECT_TRUE(same_subnet(iface("a", IfaceKind::kEthernet, "169.254.0.1", 30), iface("b", IfaceKind::kEthernet, "169.254.0.2", 30)));
}

LinkProbe probe(int a, int b, IfaceKind ka, IfaceKind kb, double gbps, bool ok = true) {
  LinkProbe p;
  p.a = a, p.b = b;
  p.a_iface = iface("x", ka, "10.0.0.1");
  p.b_iface = iface("y", kb, "10.0.0.2");
  p.kind = link_kind(p.a_iface, p.b_iface);
  p.ok = ok;
  p.result.gbps = gbps;
  if (!ok) p.error = "refused";
  return p;
}

TEST(Discover, KindBeatsBandwidthAndBandwidthBreaksTies) {
  std::vector<LinkProbe> ps = {
      probe(0, 1, IfaceKind::kEthernet, IfaceKind::kEthernet, 9.0),     // 0
      probe(0, 1, IfaceKind::kThunderbolt, IfaceKind::kThunderbolt, 1.0),  // 1: tb wins, slower
      probe(0, 2, IfaceKind::kWifi, IfaceKind::kWifi, 5.0),             // 2
      probe(0, 2, IfaceKind::kEthernet, IfaceKind::kWifi, 8.0),         // 3: a wifi end makes it wifi
      probe(0, 2, IfaceKind::kEthernet, IfaceKind::kEthernet, 0.1),     // 4: the wire wins
      probe(1, 2, IfaceKind::kEthernet, IfaceKind::kEthernet, 2.0),     // 5
      probe(1, 2, IfaceKind::kEthernet, IfaceKind::kEthernet, 3.0),     // 6: faster among equals
      probe(1, 3, IfaceKind::kRdma, IfaceKind::kRdma, 50, false),       // 7: failed: never chosen
      probe(1, 3, IfaceKind::kWifi, IfaceKind::kWifi, 0.5),             // 8: wifi when nothing else answers
  };
  choose_links(ps);
  std::vector<bool> chosen;
  for (const auto& p : ps) chosen.push_back(p.chosen);
  EXPECT_EQ(chosen, (std::vector<bool>{false, true, false, false, true, false, true, false, true}));
  EXPECT_EQ(link_kind(ps[3].a_iface, ps[3].b_iface), IfaceKind::kWifi);
}

TEST(Discover, RenderedTopologyParsesWithFiguresAndUnjoinedNodesNoted) {
  std::vector<DiscoveredNode> nodes(3);
  const char* names[] = {"a", "b", "c"};
  for (int i = 0; i < 3; ++i) {
    auto& n = nodes[static_cast<size_t>(i)];
    n.announcement.name = names[i];
    n.announcement.version = "0.1.0";
    n.announcement.memory_bytes = 64ull << 30;
    n.announcement.ifaces = {iface("eth0", IfaceKind::kEthernet, "10.9.0." + std::to_string(i + 1)),
                             iface("tb0", IfaceKind::kRdma, "10.8.0." + std::to_string(i + 1), 24, "rxe" + std::to_string(i))};
    n.status = NodeStatus::kJoinable;
  }
  nodes[2].status = NodeStatus::kForeignSecret;
  nodes[2].why = "secret fingerprint 12345678, ours is 87654321";
  LinkProbe tcp_probe, rdma_probe;
  tcp_probe.a = rdma_probe.a = 0;
  tcp_probe.b = rdma_probe.b = 1;
  tcp_probe.a_iface = nodes[0].announcement.ifaces[0];
  tcp_probe.b_iface = nodes[1].announcement.ifaces[0];
  rdma_probe.a_iface = nodes[0].announcement.ifaces[1];
  rdma_probe.b_iface = nodes[1].announcement.ifaces[1];
  for (auto* p : {&tcp_probe, &rdma_probe}) {
    p->kind = link_kind(p->a_iface, p->b_iface);
    p->ok = true;
    p->result = {12.5, 9.25, 1000};
  }
  std::vector<LinkProbe> probes = {tcp_probe, rdma_probe};
  choose_links(probes);
  std::string text = render_discovered(nodes, {0, 1}, probes);
  auto topo = parse_topology(text, "discovered.json");
  ASSERT_TRUE(topo.ok()) << topo.status().message() << "\n" << text;
  ASSERT_EQ(topo->hosts.size(), 2u);
  EXPECT_EQ(topo->hosts[0].address, "10.8.0.1");  // the best network both share: rdma
  ASSERT_EQ(topo->links.size(), 1u);
  EXPECT_EQ(topo->links[0].provider, LinkProvider::kVerbs);
  EXPECT_EQ(topo->links[0].a_device, "rxe0");
  EXPECT_DOUBLE_EQ(*topo->links[0].gbps, 9.25);
  EXPECT_DOUBLE_EQ(*topo->links[0].latency_us, 12.5);
  EXPECT_NE(text.find("not joined: c (foreign-secret"), std::string::npos) << text;
  EXPECT_NE(text.find("not chosen"), std::string::npos) << text;
}

// The probe over loopback: real sockets, the handshake and the sealed frames.
TEST(DiscoverProbe, MeasuresOverLoopbackAndRefusesAnotherSecret) {
  auto secret = crypto::ClusterSecret::generate();
  auto server = ProbeServer::start(secret, 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  ProbeOptions o;
  o.pings = 5;
  o.stream_time = std::chrono::milliseconds(20);
  auto r = probe_direct(secret, "127.0.0.1", (*server)->port(), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_GT(r->latency_us, 0);
  EXPECT_GT(r->gbps, 0);
  EXPECT_GT(r->bytes, 0u);
  // A relayed probe: the server probes (itself) on our behalf.
  auto relayed = probe_between(secret, "127.0.0.1", (*server)->port(), "127.0.0.1", (*server)->port(), o);
  ASSERT_TRUE(relayed.ok()) << relayed.status().to_string();
  EXPECT_GT(relayed->gbps, 0);
  // Another cluster's secret gets nothing, and says so.
  auto other = probe_direct(crypto::ClusterSecret::generate(), "127.0.0.1", (*server)->port(), o);
  EXPECT_EQ(other.status().code(), ErrorCode::kAuthFailed) << other.status().to_string();
  // The server probing a port where nothing listens reports the failure, within the bound.
  auto t0 = Clock::now();
  auto dead = probe_between(secret, "127.0.0.1", (*server)->port(), "127.0.0.1", 1, o);
  EXPECT_EQ(dead.status().code(), ErrorCode::kUnavailable) << dead.status().to_string();
  EXPECT_LT(Clock::now() - t0, o.timeout + std::chrono::seconds(2));
}

// Both ends rdma: the verbs probe's outcome decides the link. Measured: a verbs link with the
// verbs figures, the TCP ones in the comment. Failed: a tcp link with the TCP figures, ranked
// as ethernet (so a thunderbolt cable now beats it), and the comment says why.
TEST(Discover, AVerbsProbeDecidesTheLinkAndAFailedOneDowngradesIt) {
  std::vector<DiscoveredNode> nodes(2);
  for (int i = 0; i < 2; ++i) {
    auto& n = nodes[static_cast<size_t>(i)];
    n.announcement.name = i == 0 ? "a" : "b";
    n.announcement.version = "0.1.0";
    n.announcement.ifaces = {iface("eth1", IfaceKind::kRdma, "10.8.0." + std::to_string(i + 1), 24, "emu_rc_0"),
                             iface("tb0", IfaceKind::kThunderbolt, "10.7.0." + std::to_string(i + 1))};
    n.status = NodeStatus::kJoinable;
  }
  auto make = [&](size_t which) {
    LinkProbe p;
    p.a = 0, p.b = 1;
    p.a_iface = nodes[0].announcement.ifaces[which];
    p.b_iface = nodes[1].announcement.ifaces[which];
    p.kind = link_kind(p.a_iface, p.b_iface);
    p.ok = true;
    p.result = {which == 0 ? 30.0 : 40.0, which == 0 ? 1.5 : 2.5, 1000};
    return p;
  };
  LinkProbe rdma = make(0), tb = make(1);
  EXPECT_TRUE(verbs_capable(rdma));
  EXPECT_FALSE(verbs_capable(tb));

  std::vector<LinkProbe> measured = {rdma, tb};
  apply_verbs_probe(measured[0], ProbeResult{4.0, 12.0, 5000});
  EXPECT_EQ(measured[0].verbs, VerbsProbe::kMeasured);
  EXPECT_EQ(measured[0].kind, IfaceKind::kRdma);
  choose_links(measured);
  EXPECT_TRUE(measured[0].chosen);
  // The file's first link's comment.
  auto comment_of = [](const std::string& text) {
    auto j = nlohmann::json::parse(text, nullptr, false);
    return j.is_object() && j["links"].is_array() && !j["links"].empty() ? j["links"][0].value("comment", "") : "";
  };
  std::string text = render_discovered(nodes, {0, 1}, measured);
  auto topo = parse_topology(text, "d.json");
  ASSERT_TRUE(topo.ok()) << topo.status().message();
  std::string comment = comment_of(text);
  ASSERT_EQ(topo->links.size(), 1u);
  EXPECT_EQ(topo->links[0].provider, LinkProvider::kVerbs);
  EXPECT_EQ(topo->links[0].a_device, "emu_rc_0");
  EXPECT_DOUBLE_EQ(*topo->links[0].gbps, 12.0);  // verbs' figures, not TCP's 1.5
  EXPECT_DOUBLE_EQ(*topo->links[0].latency_us, 4.0);
  EXPECT_NE(comment.find("over verbs (emu_rc_0 <-> emu_rc_0) 12.00 Gbit/s, 4.0 us"), std::string::npos) << comment;
  EXPECT_NE(comment.find("over TCP on the interfaces 1.50 Gbit/s, 30.0 us"), std::string::npos) << comment;

  std::vector<LinkProbe> failed = {rdma, tb};
  apply_verbs_probe(failed[0], Result<ProbeResult>(Unavailable("no device emu_rc_0 here")));
  EXPECT_EQ(failed[0].verbs, VerbsProbe::kFailed);
  EXPECT_EQ(failed[0].kind, IfaceKind::kEthernet);
  EXPECT_TRUE(failed[0].ok);  // the TCP probe still counts
  choose_links(failed);
  EXPECT_FALSE(failed[0].chosen);  // a thunderbolt cable beats an ethernet one
  EXPECT_TRUE(failed[1].chosen);
  failed.pop_back();  // without the thunderbolt cable: the downgraded link, over tcp
  choose_links(failed);
  ASSERT_TRUE(failed[0].chosen);
  text = render_discovered(nodes, {0, 1}, failed);
  topo = parse_topology(text, "d.json");
  ASSERT_TRUE(topo.ok()) << topo.status().message();
  ASSERT_EQ(topo->links.size(), 1u);
  EXPECT_EQ(topo->links[0].provider, LinkProvider::kTcp);
  EXPECT_TRUE(topo->links[0].a_device.empty());
  EXPECT_EQ(topo->links[0].a_addr, "10.8.0.1");
  EXPECT_DOUBLE_EQ(*topo->links[0].gbps, 1.5);
  const std::string c = comment_of(text);
  EXPECT_EQ(c.rfind("ethernet: ", 0), 0u) << c;
  EXPECT_NE(c.find("downgraded from rdma: the verbs probe (emu_rc_0 <-> emu_rc_0) failed"), std::string::npos) << c;
  EXPECT_NE(c.find("no device emu_rc_0 here"), std::string::npos) << c;
}

// The verbs probe on the emulated device: two probe servers in this process (the emulator's
// queue pairs work between threads as between processes), real sockets for the set-up.
TEST(DiscoverProbe, MeasuresOverTheEmulatedVerbsDeviceAndReportsAMissingOne) {
  auto secret = crypto::ClusterSecret::generate();
  auto a = ProbeServer::start(secret, 0), b = ProbeServer::start(secret, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  ProbeOptions o;
  o.pings = 5;
  o.stream_time = std::chrono::milliseconds(30);
  for (const char* dev : {"emu_rc_0", "emu_tb5_0"}) {
    auto r = probe_verbs_direct(secret, "127.0.0.1", (*b)->port(), dev, dev, o);
    ASSERT_TRUE(r.ok()) << dev << ": " << r.status().to_string();
    EXPECT_GT(r->latency_us, 0) << dev;
    EXPECT_GT(r->gbps, 0) << dev;
    EXPECT_GE(r->bytes, 256u << 10) << dev;  // at least one whole chunk, counted by the peer
  }
  // Relayed: a's server probes b over verbs on our behalf.
  auto relayed = probe_verbs_between(secret, "127.0.0.1", (*a)->port(), "127.0.0.1", (*b)->port(), "emu_rc_0", "emu_rc_0", o);
  ASSERT_TRUE(relayed.ok()) << relayed.status().to_string();
  EXPECT_GT(relayed->gbps, 0);
  // The peer's device is not there: the peer says so, and a relay reports it as kUnavailable.
  auto t0 = Clock::now();
  auto missing = probe_verbs_between(secret, "127.0.0.1", (*a)->port(), "127.0.0.1", (*b)->port(), "emu_rc_0", "nosuch_dev9", o);
  EXPECT_EQ(missing.status().code(), ErrorCode::kUnavailable) << missing.status().to_string();
  EXPECT_NE(missing.status().message().find("nosuch_dev9"), std::string::npos) << missing.status().to_string();
  EXPECT_LT(Clock::now() - t0, o.timeout + std::chrono::seconds(2));
  // Ours is not there: the error names it.
  auto ours = probe_verbs_direct(secret, "127.0.0.1", (*b)->port(), "nosuch_dev9", "emu_rc_0", o);
  EXPECT_FALSE(ours.ok());
  EXPECT_NE(ours.status().to_string().find("nosuch_dev9"), std::string::npos) << ours.status().to_string();
  // Another secret gets no verbs probe either.
  auto other = probe_verbs_direct(crypto::ClusterSecret::generate(), "127.0.0.1", (*b)->port(), "emu_rc_0", "emu_rc_0", o);
  EXPECT_EQ(other.status().code(), ErrorCode::kAuthFailed) << other.status().to_string();
}

// The data path's reading of a verbs cable: the devices of the pair's data cable, by rank, and
// the URI each device opens.
TEST(CableDevices, AVerbsDataCableNamesEachEndsDeviceAndATcpOneNone) {
  char tmpl[] = "/tmp/lattice_cable_devices_XXXXXX";
  int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::ofstream(tmpl) << R"({"version": 1, "hosts": [
    {"name": "x", "address": "10.0.0.1", "rank": 1}, {"name": "y", "address": "10.0.0.2", "rank": 0},
    {"name": "z", "address": "10.0.0.3", "rank": 2}],
  "links": [
    {"a": "x", "b": "y", "provider": "tcp", "a_addr": "10.1.0.1", "b_addr": "10.1.0.2", "gbps": 10},
    {"a": "x", "b": "y", "provider": "verbs", "a_device": "emu_rc_0", "b_device": "rxe7", "a_addr": "10.2.0.1", "b_addr": "10.2.0.2", "gbps": 80},
    {"a": "y", "b": "z", "provider": "verbs", "a_device": "emu_tb5_0", "b_device": "emu_tb5_0", "gbps": 5},
    {"a": "y", "b": "z", "provider": "tcp", "gbps": 40}]})";
  auto plan = plan_from_topology_file(tmpl);
  std::filesystem::remove(tmpl);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  // Ranks: y 0, x 1, z 2. x-y: the verbs link is the faster, so it carries the data.
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(plan->link_devices(1, 0), (P{"emu_rc_0", "rxe7"}));
  EXPECT_EQ(plan->link_devices(0, 1), (P{"rxe7", "emu_rc_0"}));
  EXPECT_EQ(plan->link_addrs(1, 0), (P{"10.2.0.1", "10.2.0.2"}));
  // y-z: the tcp link is the faster: no device.
  EXPECT_EQ(plan->link_devices(0, 2), P{});
  EXPECT_EQ(plan->link_devices(1, 2), P{});  // no cable at all
  EXPECT_EQ(plan->link_devices(0, 0), P{});
  EXPECT_EQ(plan->link_devices(0, 7), P{});
  EXPECT_EQ(verbs_device_uri("emu_rc_0"), "verbs-emu://linux-rc");
  EXPECT_EQ(verbs_device_uri("emu_tb5_0"), "verbs-emu://apple-tb5");
  EXPECT_EQ(verbs_device_uri("rdma_en3"), "verbs://rdma_en3");
}

}  // namespace
}  // namespace lattice::cluster
