#include "lattice/cluster/topology.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <set>
#include <string>

namespace lattice::cluster {
namespace {

Topology parse_ok(const std::string& text) {
  auto t = parse_topology(text, "t.json");
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? *t : Topology{};
}

// The error message, which must contain `expected` (e.g. "t.json:7: duplicate host name").
std::string parse_err(const std::string& text) {
  auto t = parse_topology(text, "t.json");
  EXPECT_FALSE(t.ok());
  if (t.ok()) return {};
  EXPECT_EQ(t.status().code(), ErrorCode::kInvalidArgument);
  return t.status().message();
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// (Appending rather than "h" + to_string(): GCC 12 warns falsely on the latter, -Wrestrict.)
std::string hname(int i) {
  std::string s = "h";
  s += std::to_string(i);
  return s;
}
std::string addr(int i) {
  std::string s = "10.0.0.";
  s += std::to_string(i + 1);
  return s;
}

// Builds a topology file with n hosts h0..h(n-1) and the given links (pairs, tcp).
std::string file_with(int n, const std::vector<std::pair<int, int>>& links) {
  nlohmann::json j;
  j["version"] = 1;
  for (int i = 0; i < n; ++i)
    j["hosts"].push_back({{"name", hname(i)}, {"address", addr(i)}});
  j["links"] = nlohmann::json::array();
  for (auto [a, b] : links)
    j["links"].push_back({{"a", hname(a)}, {"b", hname(b)}, {"provider", "tcp"}});
  return j.dump(2);
}

const char* kGood = R"({
  "version": 1,
  "hosts": [
    {"name": "a", "address": "10.0.0.1:7070", "ssh": "me@a", "memory_gb": 192},
    {"name": "b", "address": "10.0.0.2:7070"},
    {"name": "c", "address": "[fe80::1]:7070"}
  ],
  "links": [
    {"a": "a", "b": "b", "provider": "verbs", "a_device": "rdma_en3", "b_device": "rdma_en4", "gbps": 80},
    {"a": "a", "b": "b", "provider": "verbs", "a_device": "rdma_en5", "b_device": "rdma_en5"},
    {"a": "b", "b": "c", "provider": "tcp", "a_addr": "169.254.0.2", "b_addr": "169.254.0.3"},
    {"a": "c", "b": "a", "provider": "tcp"}
  ],
  "coordinator": "10.0.0.1:7070"
})";

TEST(TopologyParse, GoodFile) {
  auto t = parse_ok(kGood);
  EXPECT_EQ(t.format, "lattice");
  ASSERT_EQ(t.hosts.size(), 3u);
  EXPECT_EQ(t.hosts[0].name, "a");
  EXPECT_EQ(t.hosts[0].ssh, "me@a");
  EXPECT_EQ(t.hosts[0].memory_gb.value_or(0), 192);
  EXPECT_EQ(t.hosts[0].line, 4);
  EXPECT_EQ(t.hosts[2].line, 6);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.hosts[static_cast<size_t>(i)].rank, i);
  ASSERT_EQ(t.links.size(), 4u);
  EXPECT_EQ(t.links[0].provider, LinkProvider::kVerbs);
  EXPECT_EQ(t.links[0].a_device, "rdma_en3");
  EXPECT_EQ(t.links[0].b_device, "rdma_en4");
  EXPECT_EQ(t.links[0].gbps.value_or(0), 80);
  EXPECT_EQ(t.links[0].line, 9);
  EXPECT_EQ(t.links[2].a_addr, "169.254.0.2");
  EXPECT_EQ(t.links[3].a, 2);
  EXPECT_EQ(t.links[3].b, 0);
  EXPECT_EQ(t.coordinator, "10.0.0.1:7070");
  EXPECT_TRUE(t.warnings.empty());
}

TEST(TopologyParse, ExplicitRanksArePermutation) {
  auto t = parse_ok(R"({"version": 1, "hosts": [
      {"name": "a", "address": "x1", "rank": 1},
      {"name": "b", "address": "x2", "rank": 0}]})");
  EXPECT_EQ(t.hosts[0].rank, 1);
  EXPECT_EQ(t.hosts[1].rank, 0);
  EXPECT_HAS(parse_err(R"({"version": 1, "hosts": [
      {"name": "a", "address": "x1", "rank": 1},
      {"name": "b", "address": "x2", "rank": 1}]})"),
             "t.json:3: duplicate rank 1 (first at line 2)");
  EXPECT_HAS(parse_err(R"({"version": 1, "hosts": [
      {"name": "a", "address": "x1", "rank": 0},
      {"name": "b", "address": "x2"}]})"),
             "t.json:3: host 'b' has no rank");
  EXPECT_HAS(parse_err(R"({"version": 1, "hosts": [
      {"name": "a", "address": "x1", "rank": 2},
      {"name": "b", "address": "x2", "rank": 0}]})"),
             "t.json:2: rank 2 is outside 0..1");
}

TEST(TopologyParse, SyntaxErrorNamesLineAndColumn) {
  std::string m = parse_err("{\n  \"version\": 1,\n  \"hosts\": [\n    {\"name\": \"a\",, \"address\": \"x\"}\n  ]\n}\n");
  EXPECT_HAS(m, "t.json:4:18: invalid JSON");
  EXPECT_HAS(parse_err(""), "t.json:1:");
  EXPECT_HAS(parse_err("{\"version\": 1,\n\"hosts\": [\n"), "t.json:3:");
}

TEST(TopologyParse, UnknownKeysWithSuggestionAndLine) {
  std::string m = parse_err(R"({
  "version": 1,
  "hosts": [
    {"name": "a", "address": "x1"},
    {"name": "b", "adress": "x2"}
  ],
  "linkz": [],
  "frobnicate": 3
})");
  EXPECT_HAS(m, "t.json:5: unknown key 'adress' in a host (did you mean 'address'?)");
  EXPECT_HAS(m, "t.json:7: unknown key 'linkz' in the topology (did you mean 'links'?)");
  EXPECT_HAS(m, "t.json:8: unknown key 'frobnicate' in the topology (expected one of:");
  EXPECT_HAS(parse_err(R"({"version": 1, "hosts": [{"name": "a", "address": "x"}],
  "links": [{"a": "a", "b": "a", "provder": "tcp"}]})"),
             "t.json:2: unknown key 'provder' in a link (did you mean 'provider'?)");
}

TEST(TopologyParse, DuplicateHostsAndAddresses) {
  std::string m = parse_err(R"({
  "version": 1,
  "hosts": [
    {"name": "a", "address": "10.0.0.1"},
    {"name": "b", "address": "10.0.0.2"},
    {"name": "a", "address": "10.0.0.3"},
    {"name": "c", "address": "10.0.0.2"}
  ]
})");
  EXPECT_HAS(m, "t.json:6: duplicate host name 'a' (first defined at line 4)");
  EXPECT_HAS(m, "t.json:7: duplicate address '10.0.0.2' (already used by the host at line 5)");
  // Same machine, different ports: fine (several ranks on one host).
  parse_ok(R"({"version": 1, "hosts": [{"name": "a", "address": "127.0.0.1:7000"},
                                       {"name": "b", "address": "127.0.0.1:7001"}]})");
}

TEST(TopologyParse, DuplicateJsonKeysAreErrors) {
  EXPECT_HAS(parse_err(R"({
  "version": 1,
  "hosts": [
    {"name": "a",
     "address": "x",
     "name": "b"}
  ]
})"),
             "t.json:6: duplicate key 'name' (first at line 4)");
}

TEST(TopologyParse, LinkErrors) {
  std::string m = parse_err(R"({
  "version": 1,
  "hosts": [
    {"name": "alpha", "address": "10.0.0.1"},
    {"name": "beta", "address": "10.0.0.2"}
  ],
  "links": [
    {"a": "alpha", "b": "betta", "provider": "tcp"},
    {"a": "alpha", "b": "alpha", "provider": "tcp"},
    {"a": "alpha", "b": "beta", "provider": "rdma"},
    {"a": "alpha", "b": "beta", "provider": "verbs", "a_device": "rdma_en3"},
    {"a": "alpha", "b": "beta", "provider": "tcp", "a_device": "rdma_en3", "b_device": "rdma_en3"},
    {"a": "alpha", "b": "beta", "provider": "verbs", "a_device": "rdma_en3", "b_device": "rdma_en3", "gbps": -1},
    {"a": "beta", "b": "alpha", "provider": "verbs", "a_device": "rdma_en4", "b_device": "rdma_en3"},
    {"a": "alpha", "provider": "tcp"},
    {"a": 3, "b": "beta", "provider": "tcp"}
  ]
})");
  EXPECT_HAS(m, "t.json:8: link end \"b\" names host 'betta', which is not among the hosts (did you mean 'beta'?)");
  EXPECT_HAS(m, "t.json:9: link joins host 'alpha' to itself");
  EXPECT_HAS(m, "t.json:10: unknown provider 'rdma'");
  EXPECT_HAS(m, "t.json:11: a verbs link needs \"a_device\" and \"b_device\"");
  EXPECT_HAS(m, "t.json:12: \"a_device\" names an RDMA device: only verbs links have one");
  EXPECT_HAS(m, "t.json:13: \"gbps\" must be positive");
  EXPECT_HAS(m, "t.json:14: device rdma_en3 on host 'alpha' is already used by the link at line 13");
  EXPECT_HAS(m, "t.json:15: a link has no \"b\"");
  EXPECT_HAS(m, "t.json:16: \"a\" must be a string, not a number");
}

TEST(TopologyParse, StructureAndValueErrors) {
  EXPECT_HAS(parse_err(R"({"hosts": [{"name": "a", "address": "x"}]})"), "t.json:1: missing \"version\": 1");
  EXPECT_HAS(parse_err("{\"version\": 2,\n \"hosts\": [{\"name\": \"a\", \"address\": \"x\"}]}"),
             "t.json:1: unsupported version 2");
  EXPECT_HAS(parse_err(R"({"version": 1, "hosts": []})"), "\"hosts\" must be a non-empty array");
  EXPECT_HAS(parse_err("{\"version\": 1,\n \"hosts\": [\"a\"]}"), "t.json:2: a host must be an object, not a string");
  EXPECT_HAS(parse_err("{\"version\": 1,\n \"hosts\": [{\"name\": \"a b\", \"address\": \"x\"}]}"),
             "t.json:2: host name 'a b' has ' '");
  EXPECT_HAS(parse_err("{\"version\": 1,\n \"hosts\": [{\"name\": \"a\", \"address\": \"x:99999\"}]}"),
             "t.json:2: address 'x:99999' has port '99999'");
  EXPECT_HAS(parse_err("{\"version\": 1,\n \"hosts\": [{\"name\": \"a\", \"address\": \"x\", \"memory_gb\": \"lots\"}]}"),
             "t.json:2: \"memory_gb\" must be a number, not a string");
  EXPECT_HAS(parse_err("{\"version\": 1,\n \"hosts\": [{\"name\": \"a\", \"address\": \"x\"}],\n \"links\": {}}"),
             "t.json:3: \"links\" must be an array");
  EXPECT_HAS(parse_err("[1, 2]"), "an MLX host must be an object");
}

TEST(TopologyParse, ShmAcrossMachinesWarns) {
  auto t = parse_ok(R"({"version": 1,
    "hosts": [{"name": "a", "address": "10.0.0.1:1"}, {"name": "b", "address": "10.0.0.2:1"},
              {"name": "c", "address": "10.0.0.1:2"}],
    "links": [{"a": "a", "b": "b", "provider": "shm"}, {"a": "a", "b": "c", "provider": "shm"}]})");
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_HAS(t.warnings[0], "t.json:4: shm link between 'a' and 'b'");
}

TEST(TopologyParse, DeepNestingIsRefusedNotACrash) {
  std::string deep(100000, '[');
  deep += std::string(100000, ']');
  EXPECT_HAS(parse_err("{\"version\": 1, \"hosts\": " + deep + "}"), "nested deeper than 32 levels");
  // Brackets inside strings do not count.
  parse_ok(R"({"version": 1, "hosts": [{"name": "a", "address": "x", "comment": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}]})");
}

TEST(TopologyParse, ManyErrorsAreCapped) {
  std::string text = "{\"version\": 1, \"hosts\": [";
  for (int i = 0; i < 40; ++i) text += std::string(i ? "," : "") + "{\"name\": \"a\", \"address\": \"x\"}";
  text += "]}";
  std::string m = parse_err(text);
  EXPECT_HAS(m, "more errors not shown");
}

TEST(Classify, FullMeshRingPartialDisconnected) {
  EXPECT_EQ(classify(parse_ok(file_with(1, {}))).shape, Shape::kSingle);
  EXPECT_EQ(classify(parse_ok(file_with(2, {{0, 1}}))).shape, Shape::kFullMesh);
  auto tri = classify(parse_ok(file_with(3, {{0, 1}, {1, 2}, {2, 0}})));
  EXPECT_EQ(tri.shape, Shape::kFullMesh);
  EXPECT_TRUE(tri.also_ring);
  EXPECT_EQ(classify(parse_ok(file_with(4, {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}}))).shape, Shape::kFullMesh);

  auto ring = classify(parse_ok(file_with(5, {{0, 2}, {2, 4}, {4, 1}, {1, 3}, {3, 0}})));
  EXPECT_EQ(ring.shape, Shape::kRing);
  EXPECT_EQ(ring.ring_order, (std::vector<int>{0, 2, 4, 1, 3}));
  EXPECT_EQ(ring.missing_pairs.size(), 5u);

  // A path: connected, two hosts of degree one.
  auto path = classify(parse_ok(file_with(4, {{0, 1}, {1, 2}, {2, 3}})));
  EXPECT_EQ(path.shape, Shape::kPartial);
  EXPECT_EQ(path.missing_pairs, (std::vector<std::pair<int, int>>{{0, 2}, {0, 3}, {1, 3}}));
  // Two disjoint triangles: every degree is 2 but it is not one cycle.
  auto two = classify(parse_ok(file_with(6, {{0, 1}, {1, 2}, {2, 0}, {3, 4}, {4, 5}, {5, 3}})));
  EXPECT_EQ(two.shape, Shape::kDisconnected);
  EXPECT_EQ(two.components, (std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}}));
  // A star.
  EXPECT_EQ(classify(parse_ok(file_with(4, {{0, 1}, {0, 2}, {0, 3}}))).shape, Shape::kPartial);
  // No links at all.
  EXPECT_EQ(classify(parse_ok(file_with(3, {}))).shape, Shape::kDisconnected);
}

TEST(Classify, MultiCableCountsAndShapes) {
  // A ring with two cables on one pair is still a ring (distinct neighbours count).
  auto ring = classify(parse_ok(file_with(4, {{0, 1}, {1, 0}, {1, 2}, {2, 3}, {3, 0}})));
  EXPECT_EQ(ring.shape, Shape::kRing);
  EXPECT_EQ(ring.cables[0][1], 2);
  EXPECT_EQ(ring.cables[1][0], 2);
  EXPECT_EQ(ring.cables[0][2], 0);
  // Parallel cables do not make a mesh out of a path.
  auto path = classify(parse_ok(file_with(3, {{0, 1}, {0, 1}, {1, 2}, {1, 2}, {1, 2}})));
  EXPECT_EQ(path.shape, Shape::kPartial);
  EXPECT_EQ(path.cables[1][2], 3);
  EXPECT_EQ(path.missing_pairs, (std::vector<std::pair<int, int>>{{0, 2}}));
  auto mesh = classify(parse_ok(kGood));
  EXPECT_EQ(mesh.shape, Shape::kFullMesh);
  EXPECT_EQ(mesh.cables[0][1], 2);
}

TEST(MlxHostfile, JacclWithRdmaBecomesVerbsLinks) {
  auto t = parse_ok(R"({
  "backend": "jaccl",
  "envs": ["MLX_METAL_FAST_SYNCH=1"],
  "hosts": [
    {"ssh": "m1", "ips": ["10.0.0.1"], "rdma": [null, "rdma_en3", ["rdma_en4", "rdma_en6"]]},
    {"ssh": "m2", "ips": ["10.0.0.2"], "rdma": ["rdma_en5", null, null]},
    {"ssh": "m3", "ips": ["10.0.0.3"], "rdma": [["rdma_en2", "rdma_en7"], null, null]}
  ]
})");
  EXPECT_EQ(t.format, "mlx");
  EXPECT_EQ(t.mlx_backend, "jaccl");
  EXPECT_EQ(t.mlx_envs, (std::vector<std::string>{"MLX_METAL_FAST_SYNCH=1"}));
  ASSERT_EQ(t.hosts.size(), 3u);
  EXPECT_EQ(t.hosts[1].name, "m2");
  EXPECT_EQ(t.hosts[1].address, "10.0.0.2");
  EXPECT_EQ(t.hosts[1].ssh, "m2");
  EXPECT_EQ(t.hosts[2].rank, 2);
  ASSERT_EQ(t.links.size(), 3u);
  for (const auto& l : t.links) EXPECT_EQ(l.provider, LinkProvider::kVerbs);
  EXPECT_EQ(t.links[0].a, 0);
  EXPECT_EQ(t.links[0].b, 1);
  EXPECT_EQ(t.links[0].a_device, "rdma_en3");
  EXPECT_EQ(t.links[0].b_device, "rdma_en5");
  EXPECT_EQ(t.links[0].line, 5);
  EXPECT_EQ(t.links[1].b, 2);
  EXPECT_EQ(t.links[1].a_device, "rdma_en4");
  EXPECT_EQ(t.links[1].b_device, "rdma_en2");
  EXPECT_EQ(t.links[2].a_device, "rdma_en6");
  EXPECT_EQ(t.links[2].b_device, "rdma_en7");
  auto c = classify(t);
  EXPECT_EQ(c.shape, Shape::kPartial);  // m2 -- m3 has no cable
  EXPECT_EQ(c.cables[0][2], 2);
}

TEST(MlxHostfile, RingListBecomesTcpRingAndSharedMachinesGetUniqueNames) {
  auto t = parse_ok(R"([
    {"ssh": "localhost", "ips": ["127.0.0.1"]},
    {"ssh": "localhost", "ips": ["127.0.0.1"]},
    {"ssh": "user@other.local", "ips": []},
    {"ssh": "fourth"}
  ])");
  EXPECT_EQ(t.format, "mlx");
  ASSERT_EQ(t.hosts.size(), 4u);
  EXPECT_EQ(t.hosts[0].name, "localhost-0");
  EXPECT_EQ(t.hosts[1].name, "localhost-1");
  EXPECT_EQ(t.hosts[2].name, "other.local");
  EXPECT_EQ(t.hosts[2].address, "other.local");
  EXPECT_EQ(t.hosts[2].ssh, "user@other.local");
  ASSERT_EQ(t.links.size(), 4u);
  for (const auto& l : t.links) EXPECT_EQ(l.provider, LinkProvider::kTcp);
  auto c = classify(t);
  EXPECT_EQ(c.shape, Shape::kRing);
  EXPECT_EQ(c.ring_order, (std::vector<int>{0, 1, 2, 3}));
  // Two hosts: one link, not a double one.
  EXPECT_EQ(parse_ok(R"([{"ssh": "a"}, {"ssh": "b"}])").links.size(), 1u);
}

// Found by fuzz/topology_fuzz.cc: the documented conversion (`topo hostfile --json`) of an MLX
// hostfile naming one machine twice wrote a file our reader refused (duplicate address).
TEST(MlxHostfile, ConvertedFileWithSharedMachineParsesBack) {
  auto t = parse_ok(R"([{"ssh": "localhost", "ips": ["127.0.0.1"]}, {"ssh": "localhost", "ips": ["127.0.0.1"]},
                        {"ssh": "other"}])");
  auto again = parse_topology(render_json(t), "converted.json");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->hosts.size(), 3u);
  EXPECT_EQ(again->hosts[1].address, "127.0.0.1");
  // Two hosts that do not say they are one machine still may not share an address.
  EXPECT_HAS(parse_err(R"({"version": 1, "hosts": [{"name": "a", "address": "10.0.0.2", "ssh": "a"},
                                                   {"name": "b", "address": "10.0.0.2", "ssh": "b"}]})"),
             "duplicate address '10.0.0.2'");
}

// Found by fuzz/topology_fuzz.cc (session 14, corpus/topology/regression-mlx-address-two-ssh):
// two MLX hosts at one address under different ssh names were read, and their conversion was a
// file our reader refuses (duplicate address).
TEST(MlxHostfile, OneAddressUnderTwoSshNamesIsAnError) {
  EXPECT_HAS(parse_err(R"([{"ssh": "lhost", "ips": ["127.0.0.1"]}, {"ssh": "localhost", "ips": ["127.0.0.1"]}])"),
             "t.json:1: host 1 (localhost) has the address '127.0.0.1' of host 0 (lhost): ranks at one address must "
             "name the same ssh destination");
  // Without ips the address is the ssh host name: "a@m" and "b@m" are one machine reached as two users.
  EXPECT_HAS(parse_err(R"([{"ssh": "a@m"}, {"ssh": "b@m"}])"), "has the address 'm' of host 0 (a@m)");
  EXPECT_EQ(parse_ok(R"([{"ssh": "m"}, {"ssh": "m"}])").hosts.size(), 2u);
  // An empty ssh is no destination (two of them were "one machine" at the address "host").
  EXPECT_HAS(parse_err(R"([{"ssh": ""}, {"ssh": ""}])"), "t.json:1: an MLX host's \"ssh\" must name a destination");
}

// Found by fuzz/topology_fuzz.cc (session 14, corpus/topology/regression-mlx-name-taken): a shared
// machine's "-<rank>" names could be the name of another host ("m-1" in the file), and the
// converted topology named one host twice.
TEST(MlxHostfile, DerivedNamesNeverCollide) {
  auto t = parse_ok(R"([{"ssh": "m"}, {"ssh": "m"}, {"ssh": "m-1"}, {"ssh": "a@n", "ips": ["10.0.0.1"]},
                      {"ssh": "b@n", "ips": ["10.0.0.2"]}, {"ssh": "n-4"}])");
  std::vector<std::string> want = {"m-0", "m-1-2", "m-1", "n-3", "n-4-2", "n-4"};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(t.hosts[i].name, want[i]) << i;
  auto again = parse_topology(render_json(t), "converted.json");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
}

// Found by fuzz/topology_fuzz.cc (session 14, corpus/topology/regression-number-overflow): a number
// beyond a double made nlohmann throw out_of_range, which parse_topology did not catch.
TEST(Topology, ANumberBeyondADoubleIsAnError) {
  EXPECT_HAS(parse_err(R"({"version": 1, "hosts": [{"name": "a", "address": "10.0.0.1", "memory_gb": 666666e666}]})"),
             "t.json: invalid JSON: number overflow parsing '666666e666'");
  EXPECT_HAS(parse_err(R"([{"ssh": "a", "ips": [1e999]}])"), "number overflow");
}

// Found by fuzz/topology_fuzz.cc (session 14, corpus/topology/regression-mlx-device-slash): an
// MLX hostfile's RDMA device names were not held to our format's rule, so "rdm/a_en5" was read
// and its conversion refused.
TEST(MlxHostfile, DeviceNamesFollowOurRule) {
  EXPECT_HAS(parse_err(R"({"hosts": [{"ssh": "m1", "rdma": [null, "rdm/a_en5"]}, {"ssh": "m2", "rdma": ["rdma_en3", null]}]})"),
             "device name 'rdm/a_en5' is empty or has a space or slash");
  EXPECT_HAS(parse_err(R"({"hosts": [{"ssh": "m1", "rdma": [null, ["rdma en5"]]}, {"ssh": "m2", "rdma": ["rdma_en3", null]}]})"),
             "device name 'rdma en5'");
}

// Found by fuzz/topology_fuzz.cc under ASan (corpus/topology/regression-mlx-without-hosts): an
// MLX-shaped object without "hosts" was read through const json::operator[] past its end.
TEST(MlxHostfile, ObjectWithoutHostsIsAnError) {
  EXPECT_HAS(parse_err(R"({"backend": "jaccl", "envs": [], "versi": [{"ssh": "a"}]})"),
             "hosts must be a non-empty list");
}

TEST(MlxHostfile, ErrorsNameTheLine) {
  std::string m = parse_err(R"({
  "backend": "jaccl",
  "hosts": [
    {"ssh": "m1", "rdma": [null, "rdma_en3"]},
    {"ssh": "m2", "rdma": [null, null]}
  ]
})");
  EXPECT_HAS(m, "t.json:4: host 0 (m1) lists 1 device(s) toward host 1 (m2), which lists 0 toward it");
  EXPECT_HAS(parse_err(R"({
  "hosts": [
    {"ssh": "m1", "rdma": [null, "rdma_en3", "x"]},
    {"ssh": "m2", "rdma": [null, null]}
  ]
})"),
             "t.json:3: \"rdma\" has 3 entries; it needs one per host (2)");
  EXPECT_HAS(parse_err(R"({
  "hosts": [
    {"ssh": "m1", "rdma": ["rdma_en1", "rdma_en3"]},
    {"ssh": "m2", "rdma": ["rdma_en3", null]}
  ]
})"),
             "t.json:3: host 0 lists a device toward itself");
  EXPECT_HAS(parse_err(R"({
  "hosts": [
    {"ssh": "m1", "rdma": [null, "rdma_en3", "rdma_en3"]},
    {"ssh": "m2", "rdma": ["rdma_en3", null, null]},
    {"ssh": "m3", "rdma": ["rdma_en4", null, null]}
  ]
})"),
             "one device is one cable");
  EXPECT_HAS(parse_err("[{\"ips\": [\"1.2.3.4\"]}]"), "t.json:1: an MLX host has no \"ssh\"");
}

TEST(MlxHostfile, UnknownKeysAreWarnings) {
  auto t = parse_ok(R"({"backend": "ring", "future": 1, "hosts": [{"ssh": "a", "gpu": "x"}, {"ssh": "b"}]})");
  ASSERT_EQ(t.warnings.size(), 2u);
  EXPECT_HAS(t.warnings[0], "unknown key 'future'");
  EXPECT_HAS(t.warnings[1], "unknown key 'gpu'");
}

TEST(Render, DotHasOneEdgePerCable) {
  auto t = parse_ok(kGood);
  std::string dot = render_dot(t);
  EXPECT_EQ(dot.rfind("graph \"lattice\" {", 0), 0u);
  EXPECT_EQ(dot.back(), '\n');
  size_t edges = 0;
  for (size_t p = dot.find(" -- "); p != std::string::npos; p = dot.find(" -- ", p + 1)) ++edges;
  EXPECT_EQ(edges, 4u);
  EXPECT_HAS(dot, "\"a\" -- \"b\" [label=\"verbs\\nrdma_en3 : rdma_en4\\n80 Gbit/s\"");
  EXPECT_HAS(dot, "\"c\" [label=\"c\\nrank 2\\n[fe80::1]:7070\"]");
  // Quotes in names cannot break out of the DOT string.
  Topology evil = t;
  evil.hosts[0].name = "a\"b";
  EXPECT_HAS(render_dot(evil), "\"a\\\"b\"");
}

TEST(Render, TextReportHasShapeMatrixAndCableCounts) {
  auto t = parse_ok(file_with(4, {{0, 1}, {0, 1}, {1, 2}, {2, 3}, {3, 0}}));
  std::string text = render_text(t, classify(t));
  EXPECT_HAS(text, "shape: ring (h0 -> h1 -> h2 -> h3 -> h0)");
  EXPECT_HAS(text, "h0 -- h1: 2 cables");
  EXPECT_HAS(text, "h1 -- h2: 1 cable\n");
  EXPECT_HAS(text, "pairs without a direct link (traffic between them is forwarded): h0--h2 h1--h3");
  EXPECT_HAS(text, "  0   h0   - 2 . 1\n");
  EXPECT_HAS(text, "  3   h3   1 . 1 -\n");
  auto d = parse_ok(file_with(4, {{0, 1}, {2, 3}}));
  EXPECT_HAS(render_text(d, classify(d)), "cannot reach each other: {h0, h1} {h2, h3}");
}

TEST(Render, JsonRoundTripsThroughTheParser) {
  auto t = parse_ok(kGood);
  std::string j = render_json(t);
  auto back = parse_topology(j, "normalized.json");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << j;
  ASSERT_EQ(back->hosts.size(), t.hosts.size());
  ASSERT_EQ(back->links.size(), t.links.size());
  for (size_t i = 0; i < t.hosts.size(); ++i) {
    EXPECT_EQ(back->hosts[i].name, t.hosts[i].name);
    EXPECT_EQ(back->hosts[i].address, t.hosts[i].address);
    EXPECT_EQ(back->hosts[i].rank, t.hosts[i].rank);
  }
  for (size_t i = 0; i < t.links.size(); ++i) {
    EXPECT_EQ(back->links[i].a, t.links[i].a);
    EXPECT_EQ(back->links[i].b_device, t.links[i].b_device);
    EXPECT_EQ(back->links[i].a_addr, t.links[i].a_addr);
    EXPECT_EQ(back->links[i].gbps, t.links[i].gbps);
  }
  EXPECT_EQ(back->coordinator, t.coordinator);
  // And an MLX hostfile normalizes into our format.
  auto mlx = parse_ok(R"([{"ssh": "a"}, {"ssh": "b"}, {"ssh": "c"}])");
  auto conv = parse_topology(render_json(mlx), "conv.json");
  ASSERT_TRUE(conv.ok()) << conv.status().message();
  EXPECT_EQ(conv->format, "lattice");
  EXPECT_EQ(conv->links.size(), 3u);
}

TEST(Examples, AllExampleFilesAreValidWithTheDocumentedShapes) {
  struct Case {
    const char* file;
    Shape shape;
  };
  for (auto [file, shape] : {Case{"tb-ring-4.json", Shape::kRing}, Case{"mesh-3-dual.json", Shape::kFullMesh},
                             Case{"tcp-2.json", Shape::kFullMesh}, Case{"mlx-jaccl-4.json", Shape::kFullMesh}}) {
    auto t = load_topology(std::string(LATTICE_SOURCE_DIR) + "/examples/topologies/" + file);
    ASSERT_TRUE(t.ok()) << file << ": " << t.status().message();
    EXPECT_EQ(classify(*t).shape, shape) << file;
    EXPECT_TRUE(t->warnings.empty()) << file;
  }
  EXPECT_EQ(load_topology("/nonexistent/topo.json").status().code(), ErrorCode::kNotFound);
}

TEST(Suggest, EditDistanceAndClosest) {
  EXPECT_EQ(detail::edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(detail::edit_distance("", "abc"), 3u);
  EXPECT_EQ(detail::closest("adress", {"name", "address", "ssh"}), "address");
  EXPECT_EQ(detail::closest("zzz", {"name", "address", "ssh"}), "");
  EXPECT_EQ(detail::closest("a", {"b"}), "b");
}

}  // namespace
}  // namespace lattice::cluster
