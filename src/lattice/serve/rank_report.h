// A rank's report (metrics.h RankReport) from its model shard and its machine, its wire form
// (a follower sends it to rank 0: lockstep.h) and its JSON in GET /status. One place for all
// three, so the solo server and every rank of a cluster report the same fields.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "lattice/core/host_stats.h"
#include "lattice/engine/model/model.h"
#include "lattice/serve/metrics.h"

namespace lattice::serve {

// The shard's layers, heads and experts.
void fill_shard(const engine::Model& m, RankReport* r);

// The machine's readings, sampled at most once per `every` (reports and scrapes come more
// often; the rates are then over at least that long). Any thread.
class HostReadings {
 public:
  explicit HostReadings(std::chrono::milliseconds every = std::chrono::milliseconds(900), std::string root = "/")
      : every_(every), sampler_(std::move(root)) {}
  HostStats get();

 private:
  std::chrono::milliseconds every_;
  std::mutex mu_;
  HostSampler sampler_;
  HostStats last_;
  std::chrono::steady_clock::time_point at_{};
  bool have_ = false;
};

// The wire form; decode_report() takes what another process sent and keeps what it can read
// (a malformed report is the rank's figures unknown, not an error: they are for display).
std::string encode_report(const RankReport& r);
RankReport decode_report(const std::string& text, int rank);

// GET /status's entry for a rank (unknown readings are null).
nlohmann::json rank_status_json(const RankReport& r);

}  // namespace lattice::serve
