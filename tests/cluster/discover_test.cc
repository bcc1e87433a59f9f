// Discovery without a network: the TXT record, the kind override, sysfs kind detection on a
// fake tree, how found nodes are classified, which link wins a pair, and that the file
// written is a topology the parser takes.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lattice/cluster/discover.h"
#include "lattice/cluster/discover_probe.h"
#include "lattice/cluster/discover_topology.h"
#include "lattice/cluster/topology.h"

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

}  // namespace
}  // namespace lattice::cluster
