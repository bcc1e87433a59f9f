// `lattice demo`: a local cluster of processes that exchange messages and print latency and
// bandwidth between every pair.
//
// The command runs itself as a local job of N ranks (cluster/launcher.h, pinned as `launch
// --bind auto` pins); it also runs as is under `lattice launch` (one rank per host, too).
// Every rank joins the cluster's control plane (control only: no fabric of the cluster's own)
// and swaps its endpoints' address blobs with an allgather; each rank then connects one
// endpoint to every other rank (a full mesh, connected in ascending peer order). Then each
// pair in turn measures, the same schedule on every rank: the lower rank drives, the higher
// rank serves (fabric_bench.h), the others idle, and an allgather hands the result to rank 0,
// which prints. Every step has a deadline; a rank that fails is named by the launcher.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "fabric_bench.h"
#include "lattice/cluster/cluster.h"
#include "lattice/cluster/launcher.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/fabric/fabric.h"

namespace lattice::cli {
namespace {

using nlohmann::json;

struct DemoArgs {
  int n = 4;
  std::string provider = "shm";
  std::string size = "1M";
  int iters = 1000;
  double bw_seconds = 0.05;
  bool json_out = false;
  double timeout_s = 30;
};

constexpr int kWindow = 8;
constexpr auto kStep = std::chrono::seconds(10);  // any one step (connect, one exchange with rank 0)

// One pair's measurement: generous, since spinning ranks on an oversubscribed machine can be
// descheduled for milliseconds per round trip.
std::chrono::microseconds pair_time(const DemoArgs& a) {
  return kStep + std::chrono::microseconds(200) * a.iters +
         std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(4 * a.bw_seconds));
}
Deadline pair_deadline(const DemoArgs& a) { return Deadline::after(pair_time(a)); }

// One rank's fabric state: an endpoint and a bench side per peer.
struct RankState {
  int rank = 0;
  int world = 0;
  std::unique_ptr<fabric::Provider> provider;
  BenchLayout layout;
  std::map<int, BenchEnd> ends;
  std::map<int, std::unique_ptr<BenchSide>> sides;

  Status make_ends() {
    for (int p = 0; p < world; ++p) {
      if (p == rank) continue;
      LATTICE_ASSIGN_OR_RETURN(BenchEnd e, make_bench_end(*provider, layout, kWindow, p));
      ends.emplace(p, std::move(e));
    }
    return Status::Ok();
  }
  json infos() const {
    json j = json::object();
    for (const auto& [p, e] : ends) j[std::to_string(p)] = encode_peer_info(e, provider->name());
    return j;
  }
  // `theirs`: for each peer, that peer's info for its endpoint to us.
  Status connect_all(const json& theirs, Deadline d) {
    for (auto& [p, e] : ends) {  // std::map: ascending peer rank
      const std::string key = std::to_string(p);
      if (!theirs.contains(key) || !theirs[key].is_string()) return Corrupt("no address for rank " + key);
      LATTICE_ASSIGN_OR_RETURN(PeerInfo info, decode_peer_info(theirs[key].get<std::string>(), layout));
      LATTICE_RETURN_IF_ERROR(e.ep->connect(info.address, d).with_context("connect to rank " + key));
      sides.emplace(p, std::make_unique<BenchSide>(provider.get(), e.ep.get(), e.cq.get(), e.region.get(),
                                                   info.region, layout, p));
    }
    for (auto& [p, s] : sides) LATTICE_RETURN_IF_ERROR(s->start(d));
    return Status::Ok();
  }
  // An allgather over the control plane while this thread keeps every endpoint progressing
  // (providers that progress on the caller's thread need it to keep their links alive).
  Result<std::vector<std::string>> allgather(cluster::Cluster& c, const std::string& mine, Deadline d) {
    auto done = std::async(std::launch::async, [&c, &mine, d] { return c.allgather(mine, d); });
    Status progress_error;
    while (done.wait_for(std::chrono::microseconds(200)) != std::future_status::ready)
      for (auto& [p, s] : sides)
        if (Status st = s->progress(); !st.ok() && progress_error.ok()) progress_error = st;
    auto all = done.get();  // bounded by d
    if (!progress_error.ok()) return progress_error;
    return all;
  }
  // The lower rank of a pair: measure latency then bandwidth against `peer`.
  Result<json> measure(int peer, size_t bw_bytes, int iters, double bw_seconds, Deadline d) {
    BenchSide& s = *sides.at(peer);
    PhaseSpec lat;
    lat.op = BenchOp::kSend;
    lat.bytes = 8;
    lat.iters = iters;
    lat.warmup = std::max(10, iters / 10);
    lat.bandwidth = false;
    LATTICE_ASSIGN_OR_RETURN(PhaseResult rl, s.run_phase(lat, d));
    PhaseSpec bw;
    bw.op = BenchOp::kSend;
    bw.bytes = bw_bytes;
    bw.warmup = kWindow;
    bw.window = kWindow;
    bw.bw_seconds = bw_seconds;
    bw.latency = false;
    LATTICE_ASSIGN_OR_RETURN(PhaseResult rb, s.run_phase(bw, d));
    LATTICE_RETURN_IF_ERROR(s.stop_peer(d));
    return json{{"lat_us_median", rl.lat_us_median}, {"lat_us_min", rl.lat_us_min}, {"bw_gbps", rb.bw_gbps}};
  }
  void teardown() {
    for (auto& [p, s] : sides) (void)s->drain(Deadline::after(std::chrono::seconds(1)));
    sides.clear();
    ends.clear();
  }
};

std::string hostname() {
  char h[256] = "?";
  ::gethostname(h, sizeof h - 1);
  return h;
}

int fail(int rank, const Status& st) {
  std::fprintf(stderr, "lattice demo: rank %d: %s\n", rank, st.to_string().c_str());
  return 1;
}

void print_matrix(const char* title, const std::vector<std::vector<double>>& m, const char* fmt) {
  std::printf("\n%s\n%8s", title, "");
  for (size_t j = 0; j < m.size(); ++j) std::printf(" %8s", ("rank" + std::to_string(j)).c_str());
  std::printf("\n");
  for (size_t i = 0; i < m.size(); ++i) {
    std::printf("%8s", ("rank" + std::to_string(i)).c_str());
    for (size_t j = 0; j < m.size(); ++j) {
      if (i == j) std::printf(" %8s", "-");
      else std::printf(fmt, m[i][j]);
    }
    std::printf("\n");
  }
}

// One rank of the demo (every rank runs this; rank 0 prints).
int run_rank(const DemoArgs& a, size_t bw_bytes) {
  const auto t_start = Clock::now();
  auto opts = cluster::cluster_options_from_env();
  if (!opts.ok()) return fail(0, opts.status());
  opts->control_only = true;  // the endpoints measured are ours
  auto joined = cluster::join_cluster(*opts, Deadline::after(kStep));
  if (!joined.ok()) return fail(opts->rank, joined.status().with_context("joining the other ranks"));
  cluster::Cluster& c = **joined;
  const int n = c.world_size();
  if (n < 2) return fail(c.rank(), InvalidArgument("the demo needs at least 2 ranks"));
  // The whole run: --timeout, but at least the time all pairs may take.
  const auto all_pairs = pair_time(a) * (n * (n - 1) / 2);
  const Deadline run_deadline = Deadline::after(std::max<std::chrono::microseconds>(
      all_pairs, std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(a.timeout_s))));
  RankState rs;
  rs.rank = c.rank();
  rs.world = n;
  rs.layout = BenchLayout::for_run(bw_bytes, kWindow, false);
  auto prov = fabric::make_provider(cluster::provider_uri(a.provider, c.local_ip()));
  if (!prov.ok()) return fail(rs.rank, prov.status());
  rs.provider = std::move(*prov);
  if (Status st = rs.make_ends(); !st.ok()) return fail(rs.rank, st);

  // Every rank's address blobs; each takes the ones meant for it.
  auto infos = rs.allgather(c, rs.infos().dump(), Deadline::after(kStep));
  if (!infos.ok()) return fail(rs.rank, infos.status().with_context("swapping addresses"));
  json for_me = json::object();
  for (int p = 0; p < n; ++p) {
    if (p == rs.rank) continue;
    json theirs = json::parse((*infos)[size_t(p)], nullptr, false);
    const std::string key = std::to_string(rs.rank);
    if (theirs.is_object() && theirs.contains(key)) for_me[std::to_string(p)] = theirs[key];
  }
  if (Status st = rs.connect_all(for_me, Deadline::after(kStep)); !st.ok()) return fail(rs.rank, st);
  if (auto st = rs.allgather(c, "connected", Deadline::after(kStep)); !st.ok())
    return fail(rs.rank, st.status().with_context("waiting for every rank to connect"));
  const double connect_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_start).count();

  // The same schedule on every rank: pair (i, j), i < j, in order; i measures, j serves.
  // An idle rank waits while the others measure, up to one pair's time per step.
  std::vector<std::vector<double>> lat(size_t(n), std::vector<double>(size_t(n), 0));
  auto bw = lat;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      std::string mine;
      if (rs.rank == i) {
        auto r = rs.measure(j, bw_bytes, a.iters, a.bw_seconds, pair_deadline(a));
        if (!r.ok()) return fail(rs.rank, r.status().with_context("measuring rank " + std::to_string(j)));
        mine = r->dump();
      } else if (rs.rank == j) {
        if (Status st = rs.sides.at(i)->serve(pair_deadline(a)); !st.ok())
          return fail(rs.rank, st.with_context("serving rank " + std::to_string(i)));
      }
      auto all = rs.allgather(c, mine, pair_deadline(a).min(run_deadline));
      if (!all.ok())
        return fail(rs.rank, all.status().with_context("pair " + std::to_string(i) + "-" + std::to_string(j)));
      json result = json::parse((*all)[size_t(i)], nullptr, false);
      if (!result.is_object() || !result.contains("lat_us_median") || !result["lat_us_median"].is_number() ||
          !result.contains("bw_gbps") || !result["bw_gbps"].is_number())
        return fail(rs.rank, Corrupt("malformed result from rank " + std::to_string(i)));
      lat[i][j] = lat[j][i] = result["lat_us_median"].get<double>();
      bw[i][j] = bw[j][i] = result["bw_gbps"].get<double>();
    }
  }
  // Nobody tears its endpoints down while another may still poll them: every rank first leaves
  // the last step, in an allgather that does not poll (a rank that already left it may be
  // closing its endpoints, which a poll here would report as the peer gone).
  if (auto st = c.allgather("bye", Deadline::after(kStep)); !st.ok()) return fail(rs.rank, st.status());
  rs.teardown();
  if (rs.rank != 0) return 0;
  const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();

  if (a.json_out) {
    std::printf("%s\n", json{{"provider", rs.provider->name()},
                             {"host", hostname()},
                             {"ranks", n},
                             {"lat_us_median", lat},
                             {"bw_gbps", bw},
                             {"bw_bytes", bw_bytes},
                             {"seconds", total_s}}
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf("lattice demo: %d ranks (processes) on host %s, fabric provider %s\n", n, hostname().c_str(),
              std::string(rs.provider->name()).c_str());
  std::printf("full mesh of %d endpoint pairs connected in %.0f ms\n", n * (n - 1) / 2, connect_ms);
  print_matrix(("one-way latency, 8-byte send/recv ping-pong, median of " + std::to_string(a.iters) + ", us:").c_str(),
               lat, " %8.2f");
  print_matrix(("bandwidth, " + format_size(bw_bytes) + "B send/recv, window " + std::to_string(kWindow) +
                ", GB/s (1e9 bytes/s):")
                   .c_str(),
               bw, " %8.2f");
  std::printf("\ndone in %.2f s\n", total_s);
  return 0;
}

// Not under a launcher: this command again as a local job of n ranks.
int launch(const DemoArgs& a) {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string s; std::getline(f, s, '\0');) argv.push_back(s);
  cluster::LocalJob job;
  job.world_size = a.n;
  job.argv = {cluster::self_exe()};
  job.argv.insert(job.argv.end(), argv.begin() + std::min<size_t>(1, argv.size()), argv.end());
  job.launch.prefix = false;  // rank 0 prints the matrices; errors name their rank
  auto code = cluster::run_local_job(std::move(job));
  if (!code.ok()) return fail(0, code.status().with_context("starting the ranks"));
  return *code;
}

int run(const DemoArgs& a) {
  if (a.n < 2 || a.n > 16) {
    std::fprintf(stderr, "lattice demo: -n must be in 2..16\n");
    return 2;
  }
  auto size = parse_size(a.size, size_t{256} << 20);
  if (!size.ok() || *size < 8) {
    std::fprintf(stderr, "lattice demo: --size must be in 8..256M (e.g. 64K, 1M)%s%s\n", size.ok() ? "" : ": ",
                 size.ok() ? "" : size.status().message().c_str());
    return 2;
  }
  if (a.iters < 1 || a.iters > 1000000 || !(a.bw_seconds > 0 && a.bw_seconds <= 10) ||
      !(a.timeout_s > 0 && a.timeout_s <= 3600)) {
    std::fprintf(stderr, "lattice demo: --iters in 1..1e6, --bw-time in (0, 10], --timeout in (0, 3600]\n");
    return 2;
  }
  auto env = cluster::RankEnv::from_env();
  if (!env.ok()) {
    std::fprintf(stderr, "lattice demo: %s\n", env.status().to_string().c_str());
    return 2;
  }
  return env->launched ? run_rank(a, *size) : launch(a);
}

Registrar demo_cmd{{"demo",
                    "start a local cluster of processes that exchange messages and print latency and bandwidth "
                    "between every pair",
                    [](CLI::App& app) {
                      auto a = std::make_shared<DemoArgs>();
                      app.add_option("-n,--ranks", a->n, "number of rank processes (2..16)")->capture_default_str();
                      app.add_option("--provider", a->provider, "fabric provider: shm, tcp (this host, any port) or a URI")
                          ->capture_default_str();
                      app.add_option("--size", a->size, "message size for the bandwidth figure")
                          ->capture_default_str();
                      app.add_option("--iters", a->iters, "latency ping-pongs per pair")->capture_default_str();
                      app.add_option("--bw-time", a->bw_seconds, "seconds of streaming per pair")
                          ->capture_default_str();
                      app.add_flag("--json", a->json_out, "print the matrices as one JSON object");
                      app.add_option("--timeout", a->timeout_s, "the run gives up after this many seconds (at least the time all pairs may take)")
                          ->capture_default_str();
                      return [a] { return run(*a); };
                    }}};

}  // namespace
}  // namespace lattice::cli
