// `lattice demo`: a local cluster of processes that exchange messages and print latency and
// bandwidth between every pair.
//
// This process is rank 0; it starts ranks 1..n-1 as children of the same binary. Out of band
// (a socketpair per child, star through rank 0) the ranks swap endpoint address blobs; each
// rank then connects one endpoint to every other rank (a full mesh, connected in ascending
// (low rank, high rank) order so no two ranks wait on each other in a cycle). Rank 0 then asks
// each pair in turn to measure: the lower rank drives, the higher rank serves (fabric_bench.h).
// Every step has a deadline; a child that fails is reported by rank and reason.
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "command.h"
#include "fabric_bench.h"
#include "lattice/fabric/fabric.h"
#include "local_procs.h"

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
  // hidden: a child rank
  int rank = -1;
  int rank_fd = -1;
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

std::string provider_uri(const std::string& p) {
  if (p == "tcp") return "tcp://127.0.0.1:0";
  return p;
}

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
  // Drives progress on every endpoint until `oob` has a message or the deadline passes.
  Status idle_until_readable(OobChannel& oob, Deadline d, const char* waiting_for) {
    while (!oob.readable()) {
      for (auto& [p, s] : sides) LATTICE_RETURN_IF_ERROR(s->progress());
      if (d.expired()) return Timeout(std::string("no ") + waiting_for + " in time");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return Status::Ok();
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

Result<json> recv_json(OobChannel& oob, Deadline d) {
  LATTICE_ASSIGN_OR_RETURN(std::string text, oob.recv(d));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Corrupt("out-of-band message is not a JSON object");
  if (j.contains("error") && j["error"].is_string()) return Internal(j["error"].get<std::string>());
  return j;
}

// A child rank: follows rank 0's instructions until told to quit.
int run_child(const DemoArgs& a, size_t bw_bytes) {
  OobChannel oob(a.rank_fd);
  oob.set_peer(0);
  // An idle rank waits while the other pairs measure: at least that long.
  const auto all_pairs = pair_time(a) * (a.n * (a.n - 1) / 2);
  const Deadline run_deadline = Deadline::after(
      std::max<std::chrono::microseconds>(all_pairs, std::chrono::duration_cast<std::chrono::microseconds>(
                                                         std::chrono::duration<double>(a.timeout_s))));
  auto report = [&](const Status& st) {
    (void)oob.send(json{{"error", st.to_string()}}.dump(), Deadline::after(std::chrono::seconds(1)));
    return fail(a.rank, st);
  };
  RankState rs;
  rs.rank = a.rank;
  rs.world = a.n;
  rs.layout = BenchLayout::for_run(bw_bytes, kWindow, false);
  auto prov = fabric::make_provider(provider_uri(a.provider));
  if (!prov.ok()) return report(prov.status());
  rs.provider = std::move(*prov);
  if (Status st = rs.make_ends(); !st.ok()) return report(st);
  if (Status st = oob.send(json{{"infos", rs.infos()}}.dump(), Deadline::after(kStep)); !st.ok()) return report(st);
  auto theirs = recv_json(oob, Deadline::after(kStep));
  if (!theirs.ok()) return report(theirs.status());
  if (!theirs->contains("infos")) return report(Corrupt("no infos from rank 0"));
  if (Status st = rs.connect_all((*theirs)["infos"], Deadline::after(kStep)); !st.ok()) return report(st);
  if (Status st = oob.send(json{{"connected", a.rank}}.dump(), Deadline::after(kStep)); !st.ok()) return report(st);
  for (;;) {
    if (Status st = rs.idle_until_readable(oob, run_deadline, "instruction from rank 0"); !st.ok()) return report(st);
    auto cmd = recv_json(oob, Deadline::after(kStep));
    if (!cmd.ok()) return report(cmd.status());
    const json& c = *cmd;
    if (c.contains("quit")) break;
    if (c.contains("serve") && c["serve"].is_number_integer()) {
      int peer = c["serve"].get<int>();
      if (!rs.sides.count(peer)) return report(Corrupt("serve: no such peer"));
      if (Status st = rs.sides.at(peer)->serve(pair_deadline(a)); !st.ok()) return report(st);
      if (Status st = oob.send(json{{"served", peer}}.dump(), Deadline::after(kStep)); !st.ok()) return report(st);
    } else if (c.contains("measure") && c["measure"].is_number_integer()) {
      int peer = c["measure"].get<int>();
      if (!rs.sides.count(peer)) return report(Corrupt("measure: no such peer"));
      auto r = rs.measure(peer, bw_bytes, a.iters, a.bw_seconds, pair_deadline(a));
      if (!r.ok()) return report(r.status().with_context("measuring rank " + std::to_string(peer)));
      if (Status st = oob.send(json{{"result", *r}}.dump(), Deadline::after(kStep)); !st.ok()) return report(st);
    } else {
      return report(Corrupt("unknown instruction from rank 0"));
    }
  }
  rs.teardown();
  (void)oob.send(json{{"bye", a.rank}}.dump(), Deadline::after(std::chrono::seconds(2)));
  return 0;
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

int run_root(const DemoArgs& a, size_t bw_bytes) {
  const auto t_start = Clock::now();
  const std::string uri = provider_uri(a.provider);
  RankState rs;
  rs.rank = 0;
  rs.world = a.n;
  rs.layout = BenchLayout::for_run(bw_bytes, kWindow, false);
  auto prov = fabric::make_provider(uri);
  if (!prov.ok()) return fail(0, prov.status());
  rs.provider = std::move(*prov);

  LocalProcs procs;
  // A step involving child `r` failed: say so, then how every child that already ended did
  // (the first to die is usually the cause; the others' own messages are on stderr too).
  auto child_failed = [&](int r, const Status& st) {
    std::fprintf(stderr, "lattice demo: failed at rank %d: %s\n", r, st.to_string().c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (int c = 1; c < a.n; ++c) {
      std::string why = procs.exit_reason(c);
      if (!why.empty()) std::fprintf(stderr, "lattice demo:   %s\n", why.c_str());
    }
    procs.kill_all();
    return 1;
  };
  for (int r = 1; r < a.n; ++r) {
    std::vector<std::string> args{"demo", "--provider", a.provider, "--size", a.size, "-n", std::to_string(a.n),
                                  "--iters", std::to_string(a.iters), "--bw-time", std::to_string(a.bw_seconds),
                                  "--timeout", std::to_string(a.timeout_s), "--rank", std::to_string(r),
                                  "--rank-fd", std::to_string(kChildOobFd)};
    auto ch = procs.spawn(r, args);
    if (!ch.ok()) return fail(0, ch.status().with_context("starting rank " + std::to_string(r)));
  }
  if (Status st = rs.make_ends(); !st.ok()) return fail(0, st);

  // Gather every rank's address blobs, then hand each rank the blobs meant for it.
  std::vector<json> infos(static_cast<size_t>(a.n));
  infos[0] = rs.infos();
  for (int r = 1; r < a.n; ++r) {
    auto m = recv_json(*procs.channel(r), Deadline::after(kStep));
    if (!m.ok()) return child_failed(r, m.status());
    if (!m->contains("infos") || !(*m)["infos"].is_object()) return child_failed(r, Corrupt("no address blobs"));
    infos[static_cast<size_t>(r)] = (*m)["infos"];
  }
  auto for_rank = [&](int r) {
    json j = json::object();
    for (int p = 0; p < a.n; ++p) {
      if (p == r) continue;
      const json& theirs = infos[static_cast<size_t>(p)];
      if (theirs.contains(std::to_string(r))) j[std::to_string(p)] = theirs[std::to_string(r)];
    }
    return j;
  };
  for (int r = 1; r < a.n; ++r) {
    if (Status st = procs.channel(r)->send(json{{"infos", for_rank(r)}}.dump(), Deadline::after(kStep)); !st.ok())
      return child_failed(r, st);
  }
  if (Status st = rs.connect_all(for_rank(0), Deadline::after(kStep)); !st.ok()) return fail(0, st);
  for (int r = 1; r < a.n; ++r) {
    auto m = recv_json(*procs.channel(r), Deadline::after(kStep));
    if (!m.ok()) return child_failed(r, m.status());
  }
  const double connect_ms = std::chrono::duration<double, std::milli>(Clock::now() - t_start).count();

  std::vector<std::vector<double>> lat(static_cast<size_t>(a.n), std::vector<double>(static_cast<size_t>(a.n), 0));
  auto bw = lat;
  for (int i = 0; i < a.n; ++i) {
    for (int j = i + 1; j < a.n; ++j) {
      if (Status st = procs.channel(j)->send(json{{"serve", i}}.dump(), Deadline::after(kStep)); !st.ok())
        return child_failed(j, st);
      json result;
      if (i == 0) {
        auto r = rs.measure(j, bw_bytes, a.iters, a.bw_seconds, pair_deadline(a));
        if (!r.ok()) return child_failed(j, r.status().with_context("rank 0 measuring rank " + std::to_string(j)));
        result = *r;
      } else {
        if (Status st = procs.channel(i)->send(json{{"measure", j}}.dump(), Deadline::after(kStep)); !st.ok())
          return child_failed(i, st);
        if (Status st = rs.idle_until_readable(*procs.channel(i), pair_deadline(a), "result"); !st.ok())
          return child_failed(i, st);
        auto m = recv_json(*procs.channel(i), Deadline::after(kStep));
        if (!m.ok()) return child_failed(i, m.status());
        if (!m->contains("result") || !(*m)["result"].is_object()) return child_failed(i, Corrupt("no result"));
        result = (*m)["result"];
      }
      auto served = recv_json(*procs.channel(j), Deadline::after(kStep));
      if (!served.ok()) return child_failed(j, served.status());
      if (!result.contains("lat_us_median") || !result["lat_us_median"].is_number() || !result.contains("bw_gbps") ||
          !result["bw_gbps"].is_number())
        return child_failed(i, Corrupt("malformed result"));
      lat[i][j] = lat[j][i] = result["lat_us_median"].get<double>();
      bw[i][j] = bw[j][i] = result["bw_gbps"].get<double>();
    }
  }
  for (int r = 1; r < a.n; ++r) (void)procs.channel(r)->send(json{{"quit", true}}.dump(), Deadline::after(kStep));
  for (int r = 1; r < a.n; ++r) {
    auto m = recv_json(*procs.channel(r), Deadline::after(kStep));
    if (!m.ok()) return child_failed(r, m.status());
  }
  rs.teardown();
  if (Status st = procs.wait_all(Deadline::after(kStep)); !st.ok()) {
    std::fprintf(stderr, "lattice demo: %s\n", st.to_string().c_str());
    return 1;
  }
  const double total_s = std::chrono::duration<double>(Clock::now() - t_start).count();

  if (a.json_out) {
    std::printf("%s\n", json{{"provider", rs.provider->name()},
                             {"host", hostname()},
                             {"ranks", a.n},
                             {"lat_us_median", lat},
                             {"bw_gbps", bw},
                             {"bw_bytes", bw_bytes},
                             {"seconds", total_s}}
                            .dump()
                            .c_str());
    return 0;
  }
  std::printf("lattice demo: %d ranks (processes) on host %s, fabric provider %s\n", a.n, hostname().c_str(),
              std::string(rs.provider->name()).c_str());
  std::printf("full mesh of %d endpoint pairs connected in %.0f ms\n", a.n * (a.n - 1) / 2, connect_ms);
  print_matrix(("one-way latency, 8-byte send/recv ping-pong, median of " + std::to_string(a.iters) + ", us:").c_str(),
               lat, " %8.2f");
  print_matrix(("bandwidth, " + format_size(bw_bytes) + "B send/recv, window " + std::to_string(kWindow) +
                ", GB/s (1e9 bytes/s):")
                   .c_str(),
               bw, " %8.2f");
  std::printf("\ndone in %.2f s\n", total_s);
  return 0;
}

int run(const DemoArgs& a) {
  if (a.n < 2 || a.n > 16) {
    std::fprintf(stderr, "lattice demo: -n must be in 2..16\n");
    return 2;
  }
  auto size = parse_size(a.size);
  if (!size.ok() || *size < 8 || *size > (256u << 20)) {
    std::fprintf(stderr, "lattice demo: --size must be in 8..256M (e.g. 64K, 1M)\n");
    return 2;
  }
  if (a.iters < 1 || a.iters > 1000000 || !(a.bw_seconds > 0 && a.bw_seconds <= 10) ||
      !(a.timeout_s > 0 && a.timeout_s <= 3600)) {
    std::fprintf(stderr, "lattice demo: --iters in 1..1e6, --bw-time in (0, 10], --timeout in (0, 3600]\n");
    return 2;
  }
  if (a.rank_fd >= 0) {
    if (a.rank < 1 || a.rank >= a.n) {
      std::fprintf(stderr, "lattice demo: bad --rank\n");
      return 2;
    }
    return run_child(a, *size);
  }
  return run_root(a, *size);
}

Registrar demo_cmd{{"demo",
                    "start a local cluster of processes that exchange messages and print latency and bandwidth "
                    "between every pair",
                    [](CLI::App& app) {
                      auto a = std::make_shared<DemoArgs>();
                      app.add_option("-n,--ranks", a->n, "number of rank processes (2..16)")->capture_default_str();
                      app.add_option("--provider", a->provider, "fabric provider: shm or tcp (or a URI)")
                          ->capture_default_str();
                      app.add_option("--size", a->size, "message size for the bandwidth figure")
                          ->capture_default_str();
                      app.add_option("--iters", a->iters, "latency ping-pongs per pair")->capture_default_str();
                      app.add_option("--bw-time", a->bw_seconds, "seconds of streaming per pair")
                          ->capture_default_str();
                      app.add_flag("--json", a->json_out, "print the matrices as one JSON object");
                      app.add_option("--timeout", a->timeout_s, "an idle rank gives up after this many seconds (at least the time all pairs may take)")
                          ->capture_default_str();
                      app.add_option("--rank", a->rank, "")->group("");
                      app.add_option("--rank-fd", a->rank_fd, "")->group("");
                      return [a] { return run(*a); };
                    }}};

}  // namespace
}  // namespace lattice::cli
