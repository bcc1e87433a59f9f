// Metrics: what `lattice serve` counts, and its rendering in the Prometheus text exposition
// format (version 0.0.4) for GET /metrics. Counters and histograms are lock-free atomics:
// the HTTP thread counts requests, the engine thread counts tokens and latencies, and a
// scrape reads them without waiting for either. render_metrics() is a plain function of a
// snapshot, tested without a server.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/host_stats.h"

namespace lattice::serve {

// A histogram with fixed upper bounds (seconds). observe() from any thread.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // strictly increasing, finite
  void observe(double seconds);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket, not cumulative; one more than bounds (the +Inf one)
    double sum = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<uint64_t> sum_ns_{0};
};

// Endpoints and status classes requests are counted by.
enum class MetricsEndpoint { kHealth, kMetrics, kModels, kChat, kCompletion, kOther, kCount };
std::string_view endpoint_label(MetricsEndpoint e);

// One rank's figures (over N ranks each rank reports them to rank 0 at every step: lockstep.h).
struct RankReport {
  int rank = 0;             // current rank
  int first_rank = 0;       // its rank when the cluster started
  uint64_t resident_bytes = 0;
  uint64_t coll_bytes = 0;  // payload this rank handed to collectives, over every placement
  uint64_t coll_calls = 0;
  double coll_bytes_per_s = 0;  // rank 0's view: coll_bytes since the reports before
  int layer_begin = 0, layer_end = 0;
  int kv_head_begin = 0, kv_head_end = 0;
  int head_begin = 0, head_end = 0;  // query heads
  // Mixture of experts (n_expert > 0): expert parallel, the experts of each layer this rank
  // owns (experts_owned of them); tensor parallel, columns [ff_begin, ff_end) of every expert.
  uint32_t n_expert = 0, experts_owned = 0;
  bool expert_parallel = false;
  int ff_begin = 0, ff_end = 0;
  uint64_t shard_bytes = 0;
  HostStats host;  // the machine this rank runs on (core/host_stats.h)
  // Bytes over this rank's link to each peer (the fabric's Endpoint::link_bytes(), over every
  // epoch), by the peer's first rank.
  struct Link {
    int peer = 0;
    uint64_t sent = 0, received = 0;
    double sent_per_s = 0, received_per_s = 0;  // rank 0's view: since the reports before
    // The link's figures as measured at start (serve/link_probe.h) or given by the topology
    // file; 0: not known. Reported by the lower-ranked end.
    double lat_us = 0, gbps = 0;
    std::string figures_from;  // "ping" or "topology"
  };
  std::vector<Link> links;
};

class Metrics {
 public:
  Metrics();
  // An answer's status (counted when it starts: the reply, or a stream's header).
  void count_request(MetricsEndpoint e, int status);
  // cached: of the prompt tokens, those the prefix cache held (not prefilled).
  void add_tokens(uint64_t prompt, uint64_t generated, uint64_t cached = 0) {
    prompt_tokens_.fetch_add(prompt, std::memory_order_relaxed);
    cached_tokens_.fetch_add(cached, std::memory_order_relaxed);
    generated_tokens_.fetch_add(generated, std::memory_order_relaxed);
  }
  Histogram& ttft() { return ttft_; }
  Histogram& inter_token() { return inter_token_; }

  struct Snapshot {
    // requests[endpoint][class]: class 0..4 is 1xx..5xx.
    std::array<std::array<uint64_t, 5>, static_cast<size_t>(MetricsEndpoint::kCount)> requests{};
    uint64_t prompt_tokens = 0, generated_tokens = 0, cached_tokens = 0;
    Histogram::Snapshot ttft, inter_token;
    uint64_t in_flight = 0, queued = 0;  // filled in by the caller (the engine loop's stats)
    uint64_t resident_bytes = 0;         // filled in by the caller (resident_memory_bytes())
    // Filled in by the caller over N ranks: each rank's report, the recoveries from lost ranks
    // and how long the last one paused the streams.
    std::vector<RankReport> ranks;
    uint64_t world = 1, recoveries = 0;
    double recovery_seconds_total = 0;
  };
  Snapshot snapshot() const;

 private:
  std::array<std::array<std::atomic<uint64_t>, 5>, static_cast<size_t>(MetricsEndpoint::kCount)> requests_{};
  std::atomic<uint64_t> prompt_tokens_{0}, generated_tokens_{0}, cached_tokens_{0};
  Histogram ttft_, inter_token_;
};

// The process's resident set in bytes (/proc/self/statm), 0 if it cannot be read.
uint64_t resident_memory_bytes();

// The Prometheus text format: # HELP and # TYPE for every family, names prefixed lattice_.
std::string render_metrics(const Metrics::Snapshot& s);

}  // namespace lattice::serve
