// The cluster checks as functions of every node's facts (checks.h): facts are built by hand, so
// faults that are hard to stage between processes (another lattice build, skewed clocks, MTUs
// that differ at a cable's two ends, a topology without a full mesh) are checked here.
#include <gtest/gtest.h>

#include "doctor_testlib.h"
#include "lattice/doctor/checks.h"

namespace lattice::doctor::testing {
namespace {

using detail::CableEnd;
using detail::Context;
using detail::NodeFacts;

Context context_for(const std::string& topology_json) {
  Context c;
  auto t = cluster::parse_topology(topology_json, "t.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  if (t.ok()) c.topology = *t;
  c.options.topology = "t.json";
  c.launched = true;
  c.world_size = t.ok() ? static_cast<int>(t->hosts.size()) : 1;
  return c;
}

std::string hosts_json(int n, const std::vector<std::pair<int, int>>& links) {
  std::string s = R"({"version": 1, "hosts": [)";
  for (int i = 0; i < n; ++i)
    s += std::string(i ? "," : "") + R"({"name": "h)" + std::to_string(i) + R"(", "address": "10.0.0.)" +
         std::to_string(i + 1) + R"("})";
  s += R"(], "links": [)";
  for (size_t k = 0; k < links.size(); ++k)
    s += std::string(k ? "," : "") + R"({"a": "h)" + std::to_string(links[k].first) + R"(", "b": "h)" +
         std::to_string(links[k].second) + R"(", "provider": "tcp"})";
  return s + "]}";
}

std::vector<NodeFacts> healthy_facts(int n) {
  std::vector<NodeFacts> out;
  for (int r = 0; r < n; ++r) {
    NodeFacts f;
    f.rank = r;
    f.host_index = r;
    f.host = "h" + std::to_string(r);
    f.version = "0.1.0 abc1234";
    for (int k = 0; k < 5; ++k) {
      f.clock_us.push_back(1'000'000'000 + k * 1000 + r * 20);  // 20 us apart: nothing
      f.round_us.push_back(300);
    }
    out.push_back(std::move(f));
  }
  return out;
}

TEST(DoctorJoin, HealthyFactsFailNothing) {
  Context c = context_for(hosts_json(3, {{0, 1}, {0, 2}, {1, 2}}));
  Report r = detail::join(c, healthy_facts(3));
  EXPECT_TRUE(failures(r).empty()) << render_text(r);
  EXPECT_EQ(r.find(-1, "clock")->level, Level::kOk);
  EXPECT_EQ(r.find(-1, "mesh")->level, Level::kOk);
}

TEST(DoctorJoin, AnotherBuildOnOneNodeFailsTheVersionCheck) {
  Context c = context_for(hosts_json(3, {{0, 1}, {0, 2}, {1, 2}}));
  auto facts = healthy_facts(3);
  facts[1].version = "0.1.0 fff0000";
  Report r = detail::join(c, facts);
  EXPECT_EQ(failures(r), std::vector<std::string>{"-1:version"}) << render_text(r);
  EXPECT_NE(r.find(-1, "version")->detail.find("h1 runs 0.1.0 fff0000"), std::string::npos);
  EXPECT_NE(r.find(-1, "version")->fix.find("abc1234"), std::string::npos);
}

TEST(DoctorJoin, ClockSkewWarnsThenFails) {
  Context c = context_for(hosts_json(3, {{0, 1}, {0, 2}, {1, 2}}));
  auto facts = healthy_facts(3);
  for (auto& t : facts[2].clock_us) t += 200'000;  // 200 ms ahead
  Report r = detail::join(c, facts);
  EXPECT_EQ(r.find(-1, "clock")->level, Level::kWarn) << r.find(-1, "clock")->detail;
  EXPECT_NE(r.find(-1, "clock")->detail.find("+200.0"), std::string::npos) << r.find(-1, "clock")->detail;
  for (auto& t : facts[2].clock_us) t += 10'000'000;  // and 10 s more
  r = detail::join(c, facts);
  EXPECT_EQ(failures(r), std::vector<std::string>{"-1:clock"}) << render_text(r);
  EXPECT_NE(r.find(-1, "clock")->fix.find("on h2"), std::string::npos) << r.find(-1, "clock")->fix;
}

TEST(DoctorJoin, AnMtuThatDiffersAtACablesEndsFailsWithTheLargerValue) {
  Context c = context_for(hosts_json(2, {{0, 1}}));
  auto facts = healthy_facts(2);
  for (int r = 0; r < 2; ++r) {
    CableEnd e;
    e.link = 0;
    e.peer = 1 - r;
    e.addr = "10.0.0." + std::to_string(r + 1);
    e.ifname = r == 0 ? "en3" : "en5";
    e.up = e.running = true;
    e.mtu = r == 0 ? 9000 : 1500;
    facts[static_cast<size_t>(r)].ends.push_back(e);
    facts[static_cast<size_t>(r)].probes.push_back({0, true, 0.1, ""});
  }
  Report r = detail::join(c, facts);
  EXPECT_EQ(failures(r), std::vector<std::string>{"-1:mtu-match"}) << render_text(r);
  EXPECT_NE(r.find(-1, "mtu-match")->fix.find("on h1:"), std::string::npos) << r.find(-1, "mtu-match")->fix;
  EXPECT_NE(r.find(-1, "mtu-match")->fix.find("en5 mtu 9000"), std::string::npos) << r.find(-1, "mtu-match")->fix;
  EXPECT_EQ(r.find(-1, "cable h0-h1")->level, Level::kOk);
}

TEST(DoctorJoin, ARingWarnsAndADisconnectedClusterFails) {
  // Four hosts in a ring: collectives route around it (ring-only), a warning with the cables to add.
  Context ring = context_for(hosts_json(4, {{0, 1}, {1, 2}, {2, 3}, {3, 0}}));
  Report r = detail::join(ring, healthy_facts(4));
  EXPECT_EQ(r.find(-1, "mesh")->level, Level::kWarn) << r.find(-1, "mesh")->detail;
  EXPECT_NE(r.find(-1, "mesh")->fix.find("h0-h2"), std::string::npos) << r.find(-1, "mesh")->fix;
  Context split = context_for(hosts_json(4, {{0, 1}, {2, 3}}));
  r = detail::join(split, healthy_facts(4));
  EXPECT_EQ(r.find(-1, "mesh")->level, Level::kFail) << r.find(-1, "mesh")->detail;
}

TEST(DoctorJoin, FactsSurviveTheirJsonForm) {
  auto facts = healthy_facts(1);
  CableEnd e;
  e.link = 0, e.peer = 1, e.addr = "10.0.0.1", e.ifname = "en3", e.up = true, e.mtu = 1500, e.port = 4242;
  facts[0].ends.push_back(e);
  facts[0].checks.push_back(detail::make("gid1", "GID index 1 (IPv4)", Level::kFail, "empty", "ip addr add"));
  auto back = detail::facts_from_json(detail::facts_to_json(facts[0]));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->ends.at(0).port, 4242);
  EXPECT_EQ(back->ends.at(0).ifname, "en3");
  EXPECT_EQ(back->checks.at(0).level, Level::kFail);
  EXPECT_EQ(back->clock_us, facts[0].clock_us);
  EXPECT_FALSE(detail::facts_from_json(nlohmann::json{{"rank", 0}}).ok());
}

}  // namespace
}  // namespace lattice::doctor::testing
