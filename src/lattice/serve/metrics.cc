#include "lattice/serve/metrics.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>

namespace lattice::serve {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // NaN or a clock step back
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i]) ++i;  // le: the bound itself belongs to the bucket
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::llround(seconds * 1e9)), std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  s.counts.resize(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) s.counts[i] = counts_[i].load(std::memory_order_relaxed);
  s.sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

std::string_view endpoint_label(MetricsEndpoint e) {
  switch (e) {
    case MetricsEndpoint::kHealth: return "/health";
    case MetricsEndpoint::kMetrics: return "/metrics";
    case MetricsEndpoint::kModels: return "/v1/models";
    case MetricsEndpoint::kChat: return "/v1/chat/completions";
    case MetricsEndpoint::kCompletion: return "/v1/completions";
    default: return "other";
  }
}

namespace {
// Time to first token spans queueing and prefill (milliseconds to a minute); the gap between
// tokens is one decode step (a millisecond to a second on a loaded CPU).
std::vector<double> ttft_bounds() { return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}; }
std::vector<double> itl_bounds() { return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}; }
}  // namespace

Metrics::Metrics() : ttft_(ttft_bounds()), inter_token_(itl_bounds()) {}

void Metrics::count_request(MetricsEndpoint e, int status) {
  const int cls = status / 100 - 1;
  if (cls < 0 || cls > 4) return;  // not an HTTP status
  requests_[static_cast<size_t>(e)][static_cast<size_t>(cls)].fetch_add(1, std::memory_order_relaxed);
}

Metrics::Snapshot Metrics::snapshot() const {
  Snapshot s;
  for (size_t e = 0; e < requests_.size(); ++e)
    for (size_t c = 0; c < 5; ++c) s.requests[e][c] = requests_[e][c].load(std::memory_order_relaxed);
  s.prompt_tokens = prompt_tokens_.load(std::memory_order_relaxed);
  s.generated_tokens = generated_tokens_.load(std::memory_order_relaxed);
  s.cached_tokens = cached_tokens_.load(std::memory_order_relaxed);
  s.ttft = ttft_.snapshot();
  s.inter_token = inter_token_.snapshot();
  return s;
}

uint64_t resident_memory_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? resident * static_cast<uint64_t>(page) : 0;
}

namespace {

// Prometheus floats: shortest round-trip form; +Inf spelled as the format wants.
std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {  // whole numbers without an exponent: le="10"
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // Prefer a short form when it reads back the same.
  for (int prec = 1; prec < 17; ++prec) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", prec, v);
    if (std::strtod(shorter, nullptr) == v) return shorter;
  }
  return buf;
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, std::string_view name, std::string_view labels, uint64_t v) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  out += std::to_string(v);
  out += '\n';
}

void histogram(std::string& out, const std::string& name, std::string_view help, const Histogram::Snapshot& h) {
  family(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    const double le = i < h.bounds.size() ? h.bounds[i] : INFINITY;
    sample(out, name + "_bucket", "le=\"" + num(le) + "\"", cumulative);
  }
  out += name + "_sum " + num(h.sum) + "\n";
  sample(out, name + "_count", {}, cumulative);
}

}  // namespace

std::string render_metrics(const Metrics::Snapshot& s) {
  std::string out;
  family(out, "lattice_requests_total", "counter", "HTTP requests answered, by endpoint and status class.");
  static constexpr const char* kClass[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
  for (size_t e = 0; e < s.requests.size(); ++e)
    for (size_t c = 0; c < 5; ++c) {
      // Every endpoint's 2xx, 4xx and 5xx are always shown (a series that appears late
      // breaks rate()); 1xx and 3xx only once seen.
      if ((c == 0 || c == 2) && s.requests[e][c] == 0) continue;
      sample(out, "lattice_requests_total",
             "endpoint=\"" + std::string(endpoint_label(static_cast<MetricsEndpoint>(e))) + "\",status=\"" + kClass[c] + "\"",
             s.requests[e][c]);
    }
  family(out, "lattice_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  sample(out, "lattice_prompt_tokens_total", {}, s.prompt_tokens);
  family(out, "lattice_prompt_tokens_cached_total", "counter",
         "Prompt tokens of finished requests whose keys and values the prefix cache held (not prefilled).");
  sample(out, "lattice_prompt_tokens_cached_total", {}, s.cached_tokens);
  family(out, "lattice_generated_tokens_total", "counter", "Tokens generated for finished requests.");
  sample(out, "lattice_generated_tokens_total", {}, s.generated_tokens);
  histogram(out, "lattice_time_to_first_token_seconds", "From a request's acceptance to its first piece of text.", s.ttft);
  histogram(out, "lattice_inter_token_latency_seconds", "Between successive pieces of text of one request.", s.inter_token);
  family(out, "lattice_requests_in_flight", "gauge", "Requests accepted by the engine and not yet done.");
  sample(out, "lattice_requests_in_flight", {}, s.in_flight);
  family(out, "lattice_queue_depth", "gauge", "Requests waiting for a slot.");
  sample(out, "lattice_queue_depth", {}, s.queued);
  family(out, "lattice_process_resident_memory_bytes", "gauge", "Resident set size of the process.");
  sample(out, "lattice_process_resident_memory_bytes", {}, s.resident_bytes);
  family(out, "lattice_world_size", "gauge", "Ranks serving the model now.");
  sample(out, "lattice_world_size", {}, s.world);
  family(out, "lattice_recoveries_total", "counter", "Lost ranks the survivors re-placed the model after.");
  sample(out, "lattice_recoveries_total", {}, s.recoveries);
  family(out, "lattice_recovery_seconds_total", "counter", "Time the streams were paused by recoveries.");
  out += "lattice_recovery_seconds_total " + num(s.recovery_seconds_total) + "\n";
  if (!s.ranks.empty()) {
    // Labelled by the rank a process started as (stable across recoveries).
    auto per_rank = [&](const char* name, const char* type, const char* help, auto field) {
      family(out, name, type, help);
      for (const RankReport& r : s.ranks) sample(out, name, "rank=\"" + std::to_string(r.first_rank) + "\"", field(r));
    };
    per_rank("lattice_rank_resident_memory_bytes", "gauge", "Resident set size of each rank's process.",
             [](const RankReport& r) { return r.resident_bytes; });
    per_rank("lattice_rank_shard_bytes", "gauge", "Weight bytes of each rank's shard of the model.",
             [](const RankReport& r) { return r.shard_bytes; });
    per_rank("lattice_rank_collective_bytes_total", "counter",
             "Payload each rank handed to collectives (tensor parallel all-reduces and gathers) over its links.",
             [](const RankReport& r) { return r.coll_bytes; });
    per_rank("lattice_rank_collective_calls_total", "counter", "Collective calls of each rank.",
             [](const RankReport& r) { return r.coll_calls; });
    // Per link, as each end's fabric endpoint counted it (a one-sided write is counted by its
    // writer only, a read by its reader only: fabric.h LinkBytes).
    auto per_link = [&](const char* name, const char* help, bool sent) {
      family(out, name, "counter", help);
      for (const RankReport& r : s.ranks)
        for (const RankReport::Link& l : r.links)
          sample(out, name, "rank=\"" + std::to_string(r.first_rank) + "\",peer=\"" + std::to_string(l.peer) + "\"",
                 sent ? l.sent : l.received);
    };
    // The machine each rank runs on; a reading the OS does not give has no sample.
    auto per_host = [&](const char* name, const char* help, auto field) {
      family(out, name, "gauge", help);
      for (const RankReport& r : s.ranks)
        if (const std::optional<double> v = field(r.host))
          out += std::string(name) + "{rank=\"" + std::to_string(r.first_rank) + "\"} " + num(*v) + "\n";
    };
    auto as_double = [](const std::optional<uint64_t>& v) { return v ? std::optional<double>(double(*v)) : std::nullopt; };
    per_host("lattice_rank_host_memory_total_bytes", "Memory of the machine each rank runs on.",
             [&](const HostStats& h) { return as_double(h.mem_total); });
    per_host("lattice_rank_host_memory_available_bytes", "Memory available (free or reclaimable) on each rank's machine.",
             [&](const HostStats& h) { return as_double(h.mem_available); });
    per_host("lattice_rank_host_load1", "1-minute load average of each rank's machine.",
             [](const HostStats& h) { return h.load1; });
    per_host("lattice_rank_host_cpu_busy_ratio", "Busy share of every CPU of each rank's machine, over the last report.",
             [](const HostStats& h) { return h.cpu_busy; });
    per_host("lattice_rank_host_temperature_celsius", "The hottest sensor of each rank's machine (hwmon, thermal zones).",
             [](const HostStats& h) { return h.temp_c; });
    per_host("lattice_rank_host_power_watts", "Power of each rank's machine (RAPL packages, else hwmon).",
             [](const HostStats& h) { return h.power_w; });
    // Each link's figures from start (measured, or the topology file's), by its lower rank.
    auto link_figure = [&](const char* name, const char* help, double RankReport::Link::*field) {
      family(out, name, "gauge", help);
      for (const RankReport& r : s.ranks)
        for (const RankReport::Link& l : r.links)
          if (l.*field > 0)
            out += std::string(name) + "{rank=\"" + std::to_string(r.first_rank) + "\",peer=\"" + std::to_string(l.peer) +
                   "\",from=\"" + l.figures_from + "\"} " + num(l.*field) + "\n";
    };
    link_figure("lattice_link_latency_microseconds", "One-way latency of each link (8-byte sends).", &RankReport::Link::lat_us);
    link_figure("lattice_link_bandwidth_gbits", "Bandwidth of each link in Gbit/s (a stream of sends).", &RankReport::Link::gbps);
    per_link("lattice_link_sent_bytes_total", "Bytes each rank's endpoint sent to a peer over the fabric.", true);
    per_link("lattice_link_received_bytes_total", "Bytes each rank's endpoint received from a peer over the fabric.",
             false);
  }
  return out;
}

}  // namespace lattice::serve
