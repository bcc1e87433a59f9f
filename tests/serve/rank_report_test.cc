// A rank's report through its wire form (what a follower sends rank 0) and into /metrics:
// every field survives, unknown readings stay unknown (no sample, null in /status), and what
// another process sent malformed is read as far as it goes, never a crash.
#include "lattice/serve/rank_report.h"

#include <gtest/gtest.h>

namespace lattice::serve {
namespace {

RankReport full_report() {
  RankReport r;
  r.first_rank = 2, r.resident_bytes = 123456789, r.coll_bytes = 99, r.coll_calls = 7;
  r.layer_begin = 0, r.layer_end = 24, r.kv_head_begin = 2, r.kv_head_end = 4, r.head_begin = 8, r.head_end = 16;
  r.n_expert = 64, r.experts_owned = 16, r.expert_parallel = true, r.ff_begin = 0, r.ff_end = 1408;
  r.shard_bytes = 1u << 30;
  r.links.push_back({0, 1000, 2000, 0, 0, 12.5, 9.75, "ping"});
  r.links.push_back({3, 5, 6, 0, 0, 0, 0, ""});
  r.host.mem_total = 64ull << 30, r.host.mem_available = 40ull << 30, r.host.load1 = 1.25, r.host.cpu_busy = 0.5;
  r.host.cpus = 16, r.host.temp_c = 61.5, r.host.temp_sensor = "k10temp/Tctl", r.host.power_w = 87.25;
  r.host.power_source = "rapl";
  return r;
}

TEST(ServeRankReport, EveryFieldSurvivesItsWireForm) {
  const RankReport a = full_report();
  const RankReport b = decode_report(encode_report(a), 1);
  EXPECT_EQ(b.rank, 1);
  EXPECT_EQ(b.first_rank, 2);
  EXPECT_EQ(b.resident_bytes, a.resident_bytes);
  EXPECT_EQ(b.coll_bytes, 99u);
  EXPECT_EQ(b.coll_calls, 7u);
  EXPECT_EQ(b.layer_end, 24);
  EXPECT_EQ(b.kv_head_begin, 2);
  EXPECT_EQ(b.head_begin, 8);
  EXPECT_EQ(b.head_end, 16);
  EXPECT_EQ(b.n_expert, 64u);
  EXPECT_EQ(b.experts_owned, 16u);
  EXPECT_TRUE(b.expert_parallel);
  EXPECT_EQ(b.ff_end, 1408);
  EXPECT_EQ(b.shard_bytes, a.shard_bytes);
  ASSERT_EQ(b.links.size(), 2u);
  EXPECT_EQ(b.links[0].peer, 0);
  EXPECT_EQ(b.links[0].received, 2000u);
  EXPECT_DOUBLE_EQ(b.links[0].lat_us, 12.5);
  EXPECT_DOUBLE_EQ(b.links[0].gbps, 9.75);
  EXPECT_EQ(b.links[0].figures_from, "ping");
  EXPECT_EQ(b.host.mem_total, a.host.mem_total);
  EXPECT_EQ(b.host.mem_available, a.host.mem_available);
  EXPECT_EQ(b.host.load1, 1.25);
  EXPECT_EQ(b.host.cpu_busy, 0.5);
  EXPECT_EQ(b.host.cpus, 16u);
  EXPECT_EQ(b.host.temp_c, 61.5);
  EXPECT_EQ(b.host.temp_sensor, "k10temp/Tctl");
  EXPECT_EQ(b.host.power_w, 87.25);
  EXPECT_EQ(b.host.power_source, "rapl");
}

TEST(ServeRankReport, UnknownReadingsAreNullInStatusAndAbsentFromMetrics) {
  RankReport r = full_report();
  r.host.temp_c.reset();
  r.host.power_w.reset();
  r.host.cpu_busy.reset();
  const RankReport b = decode_report(encode_report(r), 0);
  EXPECT_FALSE(b.host.temp_c);
  EXPECT_FALSE(b.host.power_w);
  const nlohmann::json s = rank_status_json(b);
  EXPECT_TRUE(s["temp_c"].is_null());
  EXPECT_TRUE(s["power_w"].is_null());
  EXPECT_TRUE(s["cpu_busy"].is_null());
  EXPECT_EQ(s["mem_used"], 24ull << 30);
  EXPECT_EQ(s["mem_free"], 40ull << 30);
  EXPECT_EQ(s["experts"]["owned"], 16);
  EXPECT_EQ(s["links"][0]["lat_us"], 12.5);
  EXPECT_TRUE(s["links"][1]["lat_us"].is_null()) << "a link with no figures";

  Metrics::Snapshot snap;
  snap.ranks = {b};
  const std::string m = render_metrics(snap);
  EXPECT_NE(m.find("lattice_rank_host_memory_total_bytes{rank=\"2\"} 68719476736\n"), std::string::npos) << m;
  EXPECT_NE(m.find("lattice_rank_host_load1{rank=\"2\"} 1.25\n"), std::string::npos) << m;
  EXPECT_NE(m.find("# TYPE lattice_rank_host_temperature_celsius gauge"), std::string::npos);
  EXPECT_EQ(m.find("lattice_rank_host_temperature_celsius{"), std::string::npos) << "an unknown reading has no sample";
  EXPECT_EQ(m.find("lattice_rank_host_power_watts{"), std::string::npos);
  EXPECT_NE(m.find("lattice_link_latency_microseconds{rank=\"2\",peer=\"0\",from=\"ping\"} 12.5\n"), std::string::npos) << m;
  EXPECT_NE(m.find("lattice_link_bandwidth_gbits{rank=\"2\",peer=\"0\",from=\"ping\"} 9.75\n"), std::string::npos) << m;
  EXPECT_EQ(m.find("peer=\"3\",from="), std::string::npos) << "no figures, no sample";
  r.host.temp_c = 45;
  snap.ranks = {r};
  EXPECT_NE(render_metrics(snap).find("lattice_rank_host_temperature_celsius{rank=\"2\"} 45\n"), std::string::npos);
}

TEST(ServeRankReport, MalformedReportsAreReadAsFarAsTheyGo) {
  for (const std::string bad : {"", "[]", "null", "{\"first_rank\":\"x\"}", "{\"shard\":[1,2]}",
                                "{\"links\":[[1,-5,2,0,0,\"ping\"]]}", "{\"host\":{\"temp_c\":\"hot\"}}",
                                "{\"first_rank\":1e300}", "{\"links\":[[0,1,2,3,4,\"\\\"}\"]]}"}) {
    const RankReport r = decode_report(bad, 3);
    EXPECT_EQ(r.rank, 3) << bad;
    EXPECT_FALSE(r.host.temp_c) << bad;
    for (const RankReport::Link& l : r.links) EXPECT_TRUE(l.figures_from.empty()) << bad;
  }
  const RankReport r = decode_report("{\"first_rank\":1,\"resident\":5,\"shard\":\"x\"}", 1);
  EXPECT_EQ(r.first_rank, 1);
  EXPECT_EQ(r.resident_bytes, 5u);
  EXPECT_EQ(r.layer_end, 0);
}

}  // namespace
}  // namespace lattice::serve
