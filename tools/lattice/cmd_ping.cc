// `lattice ping`: the first thing to run after cabling. Joins the cluster (from the launcher's
// environment; a plain process is a cluster of one), then measures every linked pair in turn
// (8-byte send latency, one way, and streaming send bandwidth) over the links the bootstrap
// made, and rank 0 prints the N x N matrices. Pairs run one at a time, separated by barriers,
// so measurements do not share the machine.
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "command.h"
#include "fabric_bench.h"
#include "lattice/cluster/cluster.h"
#include "lattice/core/log.h"
#include "lattice/crypto/secret.h"

namespace lattice::cli {
namespace {

using nlohmann::json;

struct PingArgs {
  std::string size = "1M";
  int iters = 500;
  double bw_seconds = 0.1;
  double timeout_s = 60;
  bool json_out = false;
  std::string secret_file;
};

constexpr int kWindow = 8;

std::string cell(double v, int prec) {
  if (v <= 0) return "-";
  char b[32];
  std::snprintf(b, sizeof(b), "%.*f", prec, v);
  return b;
}

void print_matrix(const char* title, int n, const std::vector<std::vector<double>>& m, int prec) {
  std::printf("%s\n%8s", title, "");
  for (int j = 0; j < n; ++j) std::printf("%10s", ("r" + std::to_string(j)).c_str());
  std::printf("\n");
  for (int i = 0; i < n; ++i) {
    std::printf("%8s", ("r" + std::to_string(i)).c_str());
    for (int j = 0; j < n; ++j) std::printf("%10s", i == j ? "-" : cell(m[i][j], prec).c_str());
    std::printf("\n");
  }
}

Status ping(const PingArgs& a, cluster::Cluster& c, size_t bw_bytes, json* result) {
  const int n = c.world_size(), me = c.rank();
  auto deadline = [&] { return Deadline::after(std::chrono::duration<double>(a.timeout_s)); };
  BenchLayout layout = BenchLayout::for_run(bw_bytes, kWindow, false);
  std::map<int, std::unique_ptr<fabric::MemoryRegion>> regions;
  json mine = json::object();
  for (int p = 0; p < n; ++p) {
    auto links = c.links(p);
    if (links.empty()) continue;
    LATTICE_ASSIGN_OR_RETURN(regions[p], links.front().provider->allocate_memory(layout.region_bytes(), fabric::kAllAccess));
    mine[std::to_string(p)] = {regions[p]->key(), regions[p]->size()};
  }
  LATTICE_ASSIGN_OR_RETURN(auto all, c.allgather(mine.dump(), deadline()));
  std::map<int, std::unique_ptr<BenchSide>> sides;
  for (auto& [p, region] : regions) {
    json theirs = json::parse(all[p], nullptr, false);
    std::string key = std::to_string(me);
    if (!theirs.is_object() || !theirs.contains(key) || !theirs[key].is_array() || theirs[key].size() != 2)
      return Corrupt("rank " + std::to_string(p) + " published no region for us", p);
    fabric::RemoteRegion rr{theirs[key][0].get<uint64_t>(), theirs[key][1].get<uint64_t>()};
    const auto& l = c.links(p).front();
    sides[p] = std::make_unique<BenchSide>(l.provider, l.endpoint, l.send_cq, region.get(), rr, layout, p);
    LATTICE_RETURN_IF_ERROR(sides[p]->start(deadline()));
  }
  // Receives are posted everywhere before anyone sends.
  LATTICE_RETURN_IF_ERROR(c.barrier(deadline()));
  json row = json::object();
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      LATTICE_RETURN_IF_ERROR(c.barrier(deadline()));
      if (me == i && sides.count(j)) {
        BenchSide& s = *sides[j];
        PhaseSpec lat;
        lat.op = BenchOp::kSend;
        lat.bytes = 8;
        lat.iters = a.iters;
        lat.warmup = std::max(10, a.iters / 10);
        lat.bandwidth = false;
        LATTICE_ASSIGN_OR_RETURN(PhaseResult rl, s.run_phase(lat, deadline()));
        PhaseSpec bw;
        bw.op = BenchOp::kSend;
        bw.bytes = bw_bytes;
        bw.warmup = kWindow;
        bw.window = kWindow;
        bw.bw_seconds = a.bw_seconds;
        bw.latency = false;
        LATTICE_ASSIGN_OR_RETURN(PhaseResult rb, s.run_phase(bw, deadline()));
        LATTICE_RETURN_IF_ERROR(s.stop_peer(deadline()));
        row[std::to_string(j)] = {{"lat_us", rl.lat_us_median}, {"bw_gbps", rb.bw_gbps}};
      } else if (me == j && sides.count(i)) {
        LATTICE_RETURN_IF_ERROR(sides[i]->serve(deadline()));
      }
    }
  }
  LATTICE_ASSIGN_OR_RETURN(auto rows, c.allgather(row.dump(), deadline()));
  for (auto& [p, s] : sides) (void)s->drain(Deadline::after(std::chrono::seconds(1)));
  // Everyone is done with the fabric before anyone tears it down.
  LATTICE_RETURN_IF_ERROR(c.barrier(deadline()));
  sides.clear();
  std::vector<std::vector<double>> lat(n, std::vector<double>(n, 0)), bw(n, std::vector<double>(n, 0));
  json pairs = json::array();
  for (int i = 0; i < n; ++i) {
    json r = json::parse(rows[i], nullptr, false);
    if (!r.is_object()) continue;
    for (auto& [k, v] : r.items()) {
      int j = std::atoi(k.c_str());
      if (j < 0 || j >= n || !v.is_object()) continue;
      lat[i][j] = lat[j][i] = v.value("lat_us", 0.0);
      bw[i][j] = bw[j][i] = v.value("bw_gbps", 0.0);
      pairs.push_back({{"a", i}, {"b", j}, {"lat_us", lat[i][j]}, {"bw_gbps", bw[i][j]}});
    }
  }
  *result = {{"world_size", n}, {"epoch", c.epoch()}, {"pairs", pairs}};
  if (me == 0 && !a.json_out) {
    std::string prov = c.providers().empty() ? "none" : std::string(c.providers().front()->name());
    std::printf("lattice ping: %d rank(s), epoch %llu, provider %s\n", n, static_cast<unsigned long long>(c.epoch()),
                prov.c_str());
    print_matrix("latency (us, one way, 8 B send, median):", n, lat, 2);
    char title[96];
    std::snprintf(title, sizeof(title), "bandwidth (GB/s, %zu B sends, window %d):", bw_bytes, kWindow);
    print_matrix(title, n, bw, 2);
    std::fflush(stdout);
  }
  return Status::Ok();
}

int run_ping(const PingArgs& a) {
  auto bytes = parse_size(a.size, size_t{256} << 20);
  if (!bytes.ok() || *bytes == 0) {
    std::fprintf(stderr, "lattice ping: --size: %s\n",
                 bytes.ok() ? "must be at least 1 byte" : bytes.status().message().c_str());
    return 2;
  }
  if (!a.secret_file.empty()) {
    // A bad file is refused even where a single rank would not need it.
    if (auto s = crypto::load_secret_file(a.secret_file); !s.ok()) {
      std::fprintf(stderr, "lattice ping: %s\n", s.status().to_string().c_str());
      return 2;
    }
  }
  auto opts = cluster::cluster_options_from_env(a.secret_file);
  if (!opts.ok()) {
    std::fprintf(stderr, "lattice ping: %s\n", opts.status().to_string().c_str());
    return 2;
  }
  auto c = cluster::join_cluster(*opts, Deadline::after(std::chrono::duration<double>(a.timeout_s)));
  if (!c.ok()) {
    std::fprintf(stderr, "lattice ping: rank %d could not join: %s\n", opts->rank, c.status().to_string().c_str());
    return 1;
  }
  json result;
  Status s = ping(a, **c, *bytes, &result);
  if (!s.ok()) {
    std::fprintf(stderr, "lattice ping: rank %d: %s\n", (*c)->rank(), s.to_string().c_str());
    return 1;
  }
  if (a.json_out && (*c)->rank() == 0) std::printf("%s\n", result.dump(2).c_str());
  return 0;
}

const Registrar kPing{{"ping", "measure latency and bandwidth between every linked pair of the cluster",
                       [](CLI::App& app) -> std::function<int()> {
                         auto a = std::make_shared<PingArgs>();
                         app.add_option("--size", a->size, "bandwidth message size (K/M/G suffixes)")->capture_default_str();
                         app.add_option("--iters", a->iters, "latency round trips per pair")->capture_default_str();
                         app.add_option("--bw-seconds", a->bw_seconds, "bandwidth streaming time per pair")->capture_default_str();
                         app.add_option("--timeout", a->timeout_s, "seconds for joining and for each step")->capture_default_str();
                         app.add_flag("--json", a->json_out, "rank 0 prints JSON instead of the matrices");
                         app.add_option("--secret-file", a->secret_file,
                                        "cluster secret (lattice keygen); default: LATTICE_SECRET or LATTICE_SECRET_FILE, "
                                        "which lattice launch sets");
                         return [a] { return run_ping(*a); };
                       }}};

}  // namespace
}  // namespace lattice::cli
