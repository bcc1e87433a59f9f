// The /metrics text renderer: Prometheus text format (HELP and TYPE before every family,
// lattice_ names), cumulative histogram buckets ending in +Inf == _count, and the counters.
#include "lattice/serve/metrics.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <thread>

namespace lattice::serve {
namespace {

// "name{labels}" -> value, with the families' HELP and TYPE lines checked on the way.
std::map<std::string, double> parse(const std::string& text, std::map<std::string, std::string>* types) {
  std::map<std::string, double> out;
  std::set<std::string> helped;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    EXPECT_FALSE(line.empty());
    if (line.rfind("# HELP ", 0) == 0) {
      helped.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(helped.count(name)) << "TYPE before HELP: " << line;
      EXPECT_FALSE(types->count(name)) << "family twice: " << name;
      (*types)[name] = line.substr(line.find(' ', 7) + 1);
      continue;
    }
    EXPECT_NE(line[0], '#') << line;
    const size_t sp = line.rfind(' ');
    const std::string series = line.substr(0, sp);
    const std::string name = series.substr(0, series.find('{'));
    EXPECT_EQ(name.rfind("lattice_", 0), 0u) << line;
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!types->count(family) && family.size() > strlen(suffix) &&
          family.compare(family.size() - strlen(suffix), std::string::npos, suffix) == 0)
        family.resize(family.size() - strlen(suffix));
    EXPECT_TRUE(types->count(family)) << "no TYPE for " << line;
    EXPECT_FALSE(out.count(series)) << "series twice: " << series;
    out[series] = std::stod(line.substr(sp + 1));
  }
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  return out;
}

TEST(ServeMetrics, RendersPrometheusTextWithCumulativeBuckets) {
  Metrics m;
  m.count_request(MetricsEndpoint::kChat, 200);
  m.count_request(MetricsEndpoint::kChat, 200);
  m.count_request(MetricsEndpoint::kCompletion, 503);
  m.count_request(MetricsEndpoint::kOther, 404);
  m.count_request(MetricsEndpoint::kOther, 42);  // not a status: ignored
  m.add_tokens(7, 3);
  m.add_tokens(5, 2, 4);
  for (double s : {0.003, 0.01, 0.2, 0.2, 100.0}) m.ttft().observe(s);  // 0.01 lands in le="0.01"
  m.inter_token().observe(0.004);
  Metrics::Snapshot snap = m.snapshot();
  snap.in_flight = 2;
  snap.queued = 1;
  snap.resident_bytes = resident_memory_bytes();
  EXPECT_GT(snap.resident_bytes, 0u);

  std::map<std::string, std::string> types;
  const auto v = parse(render_metrics(snap), &types);
  EXPECT_EQ(types["lattice_requests_total"], "counter");
  EXPECT_EQ(types["lattice_generated_tokens_total"], "counter");
  EXPECT_EQ(types["lattice_prompt_tokens_total"], "counter");
  EXPECT_EQ(types["lattice_prompt_tokens_cached_total"], "counter");
  EXPECT_EQ(types["lattice_time_to_first_token_seconds"], "histogram");
  EXPECT_EQ(types["lattice_inter_token_latency_seconds"], "histogram");
  EXPECT_EQ(types["lattice_requests_in_flight"], "gauge");
  EXPECT_EQ(types["lattice_queue_depth"], "gauge");
  EXPECT_EQ(types["lattice_process_resident_memory_bytes"], "gauge");

  EXPECT_EQ(v.at(R"(lattice_requests_total{endpoint="/v1/chat/completions",status="2xx"})"), 2);
  EXPECT_EQ(v.at(R"(lattice_requests_total{endpoint="/v1/chat/completions",status="5xx"})"), 0);
  EXPECT_EQ(v.at(R"(lattice_requests_total{endpoint="/v1/completions",status="5xx"})"), 1);
  EXPECT_EQ(v.at(R"(lattice_requests_total{endpoint="other",status="4xx"})"), 1);
  EXPECT_FALSE(v.count(R"(lattice_requests_total{endpoint="other",status="1xx"})"));
  EXPECT_EQ(v.at("lattice_prompt_tokens_total"), 12);
  EXPECT_EQ(v.at("lattice_prompt_tokens_cached_total"), 4);
  EXPECT_EQ(v.at("lattice_generated_tokens_total"), 5);
  EXPECT_EQ(v.at("lattice_requests_in_flight"), 2);
  EXPECT_EQ(v.at("lattice_queue_depth"), 1);
  EXPECT_EQ(v.at("lattice_process_resident_memory_bytes"), static_cast<double>(snap.resident_bytes));

  EXPECT_EQ(v.at(R"(lattice_time_to_first_token_seconds_bucket{le="0.005"})"), 1);
  EXPECT_EQ(v.at(R"(lattice_time_to_first_token_seconds_bucket{le="0.01"})"), 2);
  EXPECT_EQ(v.at(R"(lattice_time_to_first_token_seconds_bucket{le="0.25"})"), 4);
  EXPECT_EQ(v.at(R"(lattice_time_to_first_token_seconds_bucket{le="60"})"), 4);
  EXPECT_NEAR(v.at("lattice_time_to_first_token_seconds_sum"), 100.413, 1e-6);
  EXPECT_EQ(v.at("lattice_inter_token_latency_seconds_count"), 1);

  // Both histograms: buckets never decrease, in increasing le, and +Inf is the count.
  for (const std::string h : {"lattice_time_to_first_token_seconds", "lattice_inter_token_latency_seconds"}) {
    double last_le = -1, last = 0;
    bool saw_inf = false;
    // The map orders series by text; the rendered order is walked instead.
    const std::string text = render_metrics(snap);
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      const std::string prefix = h + "_bucket{le=\"";
      if (line.rfind(prefix, 0) != 0) continue;
      const std::string le = line.substr(prefix.size(), line.find('"', prefix.size()) - prefix.size());
      const double count = std::stod(line.substr(line.rfind(' ') + 1));
      EXPECT_GE(count, last) << line;
      last = count;
      if (le == "+Inf") {
        saw_inf = true;
        EXPECT_EQ(count, v.at(h + "_count"));
      } else {
        EXPECT_FALSE(saw_inf) << "a bucket after +Inf: " << line;
        EXPECT_GT(std::stod(le), last_le) << line;
        last_le = std::stod(le);
      }
    }
    EXPECT_TRUE(saw_inf) << h;
  }
  EXPECT_EQ(v.at(R"(lattice_time_to_first_token_seconds_bucket{le="+Inf"})"), 5);
}

TEST(ServeMetrics, EveryRankAndTheRecoveriesAreShown) {
  Metrics::Snapshot s = Metrics().snapshot();
  s.world = 2;
  s.recoveries = 1;
  s.recovery_seconds_total = 0.25;
  RankReport a, b;
  a.first_rank = 0, a.resident_bytes = 1000, a.coll_bytes = 77, a.shard_bytes = 5;
  b.rank = 1, b.first_rank = 2, b.resident_bytes = 2000, b.coll_bytes = 88, b.coll_calls = 9;
  a.links = {{2, 300, 400}};
  b.links = {{0, 401, 299}};
  s.ranks = {a, b};
  const std::string text = render_metrics(s);
  for (const char* line : {"lattice_world_size 2\n", "lattice_recoveries_total 1\n", "lattice_recovery_seconds_total 0.25\n",
                           "lattice_rank_resident_memory_bytes{rank=\"0\"} 1000\n",
                           // labelled by the rank it started as: rank 2, now rank 1
                           "lattice_rank_resident_memory_bytes{rank=\"2\"} 2000\n",
                           "lattice_rank_collective_bytes_total{rank=\"2\"} 88\n",
                           "lattice_rank_collective_calls_total{rank=\"2\"} 9\n", "lattice_rank_shard_bytes{rank=\"0\"} 5\n",
                           "# TYPE lattice_rank_collective_bytes_total counter\n",
                           "lattice_link_sent_bytes_total{rank=\"0\",peer=\"2\"} 300\n",
                           "lattice_link_received_bytes_total{rank=\"0\",peer=\"2\"} 400\n",
                           "lattice_link_sent_bytes_total{rank=\"2\",peer=\"0\"} 401\n",
                           "# TYPE lattice_link_received_bytes_total counter\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
}

TEST(ServeMetrics, CountsFromManyThreadsAddUp) {
  Metrics m;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        m.count_request(MetricsEndpoint::kModels, 200);
        m.add_tokens(1, 2);
        m.inter_token().observe(0.002);
      }
    });
  for (auto& t : ts) t.join();
  const auto s = m.snapshot();
  EXPECT_EQ(s.requests[static_cast<size_t>(MetricsEndpoint::kModels)][1], 4000u);
  EXPECT_EQ(s.prompt_tokens, 4000u);
  EXPECT_EQ(s.generated_tokens, 8000u);
  uint64_t n = 0;
  for (uint64_t c : s.inter_token.counts) n += c;
  EXPECT_EQ(n, 4000u);
  EXPECT_NEAR(s.inter_token.sum, 8.0, 1e-6);
}

}  // namespace
}  // namespace lattice::serve
