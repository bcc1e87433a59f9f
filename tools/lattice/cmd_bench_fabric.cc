// `lattice bench fabric`: latency and bandwidth of one fabric provider between two processes,
// in the style of ib_send_lat / ib_write_bw. By default it starts its peer itself (a child of
// this binary); across two hosts run `--listen PORT` on one and `--peer HOST:PORT` on the
// other (a tiny TCP rendezvous carries the address blobs). See fabric_bench.h for the method.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "command.h"
#include "fabric_bench.h"
#include "lattice/fabric/fabric.h"
#include "local_procs.h"

namespace lattice::cli {
namespace {

struct Args {
  std::string provider = "shm";
  std::string op = "send";
  std::string min = "8";
  std::string max = "4M";
  int factor = 2;
  int iters = 1000;
  int warmup = 100;
  int window = 32;  // deep enough to ride out a descheduled peer on a shared machine
  double bw_seconds = 0.2;
  std::string measure = "both";
  bool json = false;
  bool check = false;
  bool busy_poll = false;
  std::string peer;
  int listen_port = -1;
  double timeout_s = 300;
  int serve_fd = -1;  // hidden: we are the spawned responder; the channel is this fd
};

// What the initiator tells the responder before anything else (JSON over the channel).
struct RunConfig {
  size_t max_bytes = 0;
  int window = 16;
  bool check = false;
};

constexpr int kUsage = 2;
constexpr auto kSetupTimeout = std::chrono::seconds(20);

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "lattice bench fabric: %s\n", msg.c_str());
  return kUsage;
}
int fail(const Status& st, const char* what) {
  std::fprintf(stderr, "lattice bench fabric: %s: %s\n", what, st.to_string().c_str());
  return 1;
}

std::string hostname() {
  char h[256] = "?";
  ::gethostname(h, sizeof h - 1);
  return h;
}

// Both sides: make the endpoint, swap address blobs over `oob`, connect, post receives, and
// agree (over `oob`) that both are ready. The initiator sends its info second.
Result<BenchEnd> connect_pair(fabric::Provider& provider, const BenchLayout& layout, int window, OobChannel& oob,
                              bool initiator, int peer_rank, fabric::RemoteRegion* peer_region, Deadline d) {
  LATTICE_ASSIGN_OR_RETURN(BenchEnd end, make_bench_end(provider, layout, window, peer_rank));
  std::string mine = encode_peer_info(end, provider.name());
  std::string theirs;
  if (initiator) {
    LATTICE_ASSIGN_OR_RETURN(theirs, oob.recv(d));
    LATTICE_RETURN_IF_ERROR(oob.send(mine, d));
  } else {
    LATTICE_RETURN_IF_ERROR(oob.send(mine, d));
    LATTICE_ASSIGN_OR_RETURN(theirs, oob.recv(d));
  }
  LATTICE_ASSIGN_OR_RETURN(PeerInfo info, decode_peer_info(theirs, layout));
  if (info.provider != provider.name())
    return InvalidArgument("this side runs provider '" + std::string(provider.name()) + "', the peer '" +
                           info.provider + "'");
  LATTICE_RETURN_IF_ERROR(end.ep->connect(info.address, d).with_context("connect"));
  *peer_region = info.region;
  return end;
}

// The responder: gets the run's config, connects, serves until told to stop.
int run_responder(const Args& a, OobChannel& oob, Deadline run_deadline) {
  auto setup = Deadline::after(kSetupTimeout).min(run_deadline);
  auto cfg_text = oob.recv(setup);
  if (!cfg_text.ok()) return fail(cfg_text.status(), "waiting for the initiator's config");
  nlohmann::json cfg = nlohmann::json::parse(*cfg_text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object() || !cfg.contains("max_bytes") || !cfg["max_bytes"].is_number_unsigned() ||
      !cfg.contains("window") || !cfg["window"].is_number_integer() || !cfg.contains("check") ||
      !cfg["check"].is_boolean())
    return fail(Corrupt("bad config from the initiator"), "setup");
  RunConfig rc{cfg["max_bytes"].get<size_t>(), cfg["window"].get<int>(), cfg["check"].get<bool>()};
  if (rc.max_bytes == 0 || rc.max_bytes > (1ull << 30) || rc.window < 1 || rc.window > 1024)
    return fail(Corrupt("config out of range from the initiator"), "setup");
  fabric::ProviderOptions po;
  po.busy_poll = a.busy_poll || (cfg.contains("busy_poll") && cfg["busy_poll"].is_boolean() && cfg["busy_poll"].get<bool>());
  auto provider = fabric::make_provider(a.provider, po);
  if (!provider.ok()) {
    (void)oob.send(nlohmann::json{{"error", provider.status().to_string()}}.dump(), setup);
    return fail(provider.status(), "provider");
  }
  const BenchLayout layout = BenchLayout::for_run(rc.max_bytes, rc.window, rc.check);
  fabric::RemoteRegion peer_region;
  auto end = connect_pair(**provider, layout, rc.window, oob, false, 0, &peer_region, setup);
  if (!end.ok()) return fail(end.status(), "setup");
  BenchSide side(provider->get(), end->ep.get(), end->cq.get(), end->region.get(), peer_region, layout, 0);
  if (Status st = side.start(setup); !st.ok()) return fail(st, "posting receives");
  if (Status st = oob.send("ready", setup); !st.ok()) return fail(st, "setup");
  if (Status st = side.serve(run_deadline); !st.ok()) return fail(st, "serving the initiator");
  // Stay (and keep the endpoint) until the initiator has read our bye and lets us go: an
  // endpoint torn down early can turn the bye still in flight into a peer-lost error there.
  (void)oob.send("done", Deadline::after(std::chrono::seconds(2)));
  (void)oob.recv(Deadline::after(std::chrono::seconds(10)));  // "finish", or EOF when it exited
  return 0;
}

struct Sweep {
  BenchOp op;
  std::vector<size_t> sizes;
};

void print_header(const Args& a, const fabric::Provider& p, BenchOp op) {
  std::printf("# lattice bench fabric: provider %s (%s), op %s, host %s\n", std::string(p.name()).c_str(),
              a.provider.c_str(), std::string(to_string(op)).c_str(), hostname().c_str());
  std::printf("# latency: %s in us, median of per-iteration times, busy-polled CQ; provider busy_poll %s\n",
              op == BenchOp::kRead ? "post_read round trip" : "one way (round trip / 2)", a.busy_poll ? "on" : "off");
  std::printf("# bandwidth: GB/s = 1e9 bytes/s, window %d, %.2f s per size%s\n", a.window, a.bw_seconds,
              a.check ? ", payloads checked" : "");
  std::printf("%10s %8s %10s %10s %10s %10s %10s %10s\n", "#bytes", "iters", "lat_min", "lat_median", "lat_avg",
              "lat_p99", "bw_GB/s", "Mmsg/s");
}

void print_row(const PhaseResult& r, const PhaseSpec& s) {
  auto f = [](bool on, double v) {
    char b[32];
    if (on) std::snprintf(b, sizeof b, "%10.3f", v);
    else std::snprintf(b, sizeof b, "%10s", "-");
    return std::string(b);
  };
  std::printf("%10zu %8d %s %s %s %s %s %s\n", r.bytes, r.iters, f(s.latency, r.lat_us_min).c_str(),
              f(s.latency, r.lat_us_median).c_str(), f(s.latency, r.lat_us_avg).c_str(),
              f(s.latency, r.lat_us_p99).c_str(), f(s.bandwidth, r.bw_gbps).c_str(),
              f(s.bandwidth, r.bw_msgs_per_s / 1e6).c_str());
  std::fflush(stdout);
}

void print_json(const Args& a, const fabric::Provider& p, const PhaseResult& r, const PhaseSpec& s) {
  nlohmann::json j{{"provider", p.name()},
                   {"uri", a.provider},
                   {"op", to_string(s.op)},
                   {"bytes", r.bytes},
                   {"iters", r.iters},
                   {"lat_kind", s.op == BenchOp::kRead ? "round_trip" : "one_way"},
                   {"window", s.window},
                   {"busy_poll", a.busy_poll},
                   {"check", s.check},
                   {"check_errors", r.check_errors}};
  if (s.latency) {
    j["lat_us_min"] = r.lat_us_min;
    j["lat_us_median"] = r.lat_us_median;
    j["lat_us_avg"] = r.lat_us_avg;
    j["lat_us_p99"] = r.lat_us_p99;
    j["lat_us_max"] = r.lat_us_max;
  } else {
    for (const char* k : {"lat_us_min", "lat_us_median", "lat_us_avg", "lat_us_p99", "lat_us_max"}) j[k] = nullptr;
  }
  if (s.bandwidth) {
    j["bw_gbps"] = r.bw_gbps;
    j["bw_msgs_per_s"] = r.bw_msgs_per_s;
    j["bw_seconds"] = r.bw_seconds;
  } else {
    j["bw_gbps"] = nullptr;
  }
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

int run_initiator(const Args& a, const Sweep& sw, Deadline run_deadline) {
  fabric::ProviderOptions po;
  po.busy_poll = a.busy_poll;
  auto provider = fabric::make_provider(a.provider, po);
  if (!provider.ok()) return fail(provider.status(), "provider");
  // Two-sided-only providers (Apple TB5 RDMA, the staged verbs path) say so in their caps.
  if ((sw.op == BenchOp::kWrite && !(*provider)->caps().rma_write) ||
      (sw.op == BenchOp::kRead && !(*provider)->caps().rma_read))
    return fail(Unavailable("provider '" + a.provider + "' has no one-sided " + std::string(to_string(sw.op)) +
                            " (caps say two-sided only); use --op send"),
                "provider");
  const size_t max_bytes = sw.sizes.back();
  const BenchLayout layout = BenchLayout::for_run(max_bytes, a.window, a.check);
  auto setup = Deadline::after(kSetupTimeout).min(run_deadline);

  LocalProcs procs;
  OobChannel tcp_oob;
  OobChannel* oob = nullptr;
  if (!a.peer.empty()) {
    auto ch = oob_connect(a.peer, setup);
    if (!ch.ok()) return fail(ch.status(), "rendezvous");
    tcp_oob = std::move(*ch);
    oob = &tcp_oob;
  } else {
    std::vector<std::string> args{"bench", "fabric", "--provider", a.provider, "--serve-fd",
                                  std::to_string(kChildOobFd)};
    if (a.busy_poll) args.push_back("--busy-poll");
    auto ch = procs.spawn(1, args);
    if (!ch.ok()) return fail(ch.status(), "starting the peer process");
    oob = *ch;
  }
  oob->set_peer(1);
  // Explains a failure by the peer process's fate when it was a local child.
  auto peer_fate = [&](const Status& st) -> Status {
    if (a.peer.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::string why = procs.exit_reason(1);
      if (!why.empty()) return st.with_context("peer process " + why);
    }
    return st;
  };

  nlohmann::json cfg{{"max_bytes", max_bytes}, {"window", a.window}, {"check", a.check}, {"busy_poll", a.busy_poll}};
  if (Status st = oob->send(cfg.dump(), setup); !st.ok()) return fail(peer_fate(st), "setup");
  fabric::RemoteRegion peer_region;
  auto end = connect_pair(**provider, layout, a.window, *oob, true, 1, &peer_region, setup);
  if (!end.ok()) return fail(peer_fate(end.status()), "setup");
  BenchSide side(provider->get(), end->ep.get(), end->cq.get(), end->region.get(), peer_region, layout, 1);
  if (Status st = side.start(setup); !st.ok()) return fail(st, "posting receives");
  auto ready = oob->recv(setup);
  if (!ready.ok()) return fail(peer_fate(ready.status()), "waiting for the peer to be ready");
  if (*ready != "ready") return fail(Corrupt("peer said '" + ready->substr(0, 200) + "' instead of ready"), "setup");

  if (!a.json) print_header(a, **provider, sw.op);
  uint64_t total_errors = 0;
  for (size_t bytes : sw.sizes) {
    PhaseSpec s;
    s.op = sw.op;
    s.bytes = bytes;
    s.iters = scaled_iters(a.iters, bytes);
    s.warmup = std::max(1, scaled_iters(a.warmup, bytes));
    s.window = a.window;
    s.bw_seconds = a.bw_seconds;
    s.latency = a.measure != "bw";
    s.bandwidth = a.measure != "lat";
    s.check = a.check;
    auto r = side.run_phase(s, run_deadline);
    if (!r.ok()) return fail(peer_fate(r.status()), ("size " + std::to_string(bytes)).c_str());
    total_errors += r->check_errors;
    if (a.json) print_json(a, **provider, *r, s);
    else print_row(*r, s);
  }
  if (Status st = side.stop_peer(Deadline::after(std::chrono::seconds(10)).min(run_deadline)); !st.ok())
    return fail(peer_fate(st), "stopping the peer");
  if (auto done = oob->recv(Deadline::after(std::chrono::seconds(10))); !done.ok() || *done != "done")
    return fail(peer_fate(done.ok() ? Corrupt("peer did not say done") : done.status()), "stopping the peer");
  (void)oob->send("finish", Deadline::after(std::chrono::seconds(2)));
  if (a.peer.empty()) {
    if (Status st = procs.wait_all(Deadline::after(std::chrono::seconds(10))); !st.ok())
      return fail(st, "peer process");
  }
  if (total_errors > 0) {
    std::fprintf(stderr, "lattice bench fabric: --check found %llu corrupted payloads\n",
                 static_cast<unsigned long long>(total_errors));
    return 1;
  }
  return 0;
}

int run(const Args& a) {
  // Validate the flags first: exit 2 with a clear message.
  auto op = parse_bench_op(a.op);
  if (!op.ok()) return usage_error(op.status().message());
  auto mn = parse_size(a.min);
  if (!mn.ok()) return usage_error("--min: " + mn.status().message());
  auto mx = parse_size(a.max);
  if (!mx.ok()) return usage_error("--max: " + mx.status().message());
  if (*mn < 1) return usage_error("--min must be at least 1 byte");
  if (*mx < *mn) return usage_error("--max (" + a.max + ") is smaller than --min (" + a.min + ")");
  if (*mx > (1ull << 30)) return usage_error("--max is limited to 1G");
  if (a.factor < 2 || a.factor > 1024) return usage_error("-f/--factor must be in 2..1024");
  if (a.iters < 1 || a.iters > 100000000) return usage_error("--iters must be in 1..1e8");
  if (a.warmup < 0 || a.warmup > 100000000) return usage_error("--warmup must be in 0..1e8");
  if (a.window < 1 || a.window > 1024) return usage_error("--window must be in 1..1024");
  if (!(a.bw_seconds >= 0.001 && a.bw_seconds <= 600)) return usage_error("--bw-time must be in 0.001..600 seconds");
  if (a.measure != "lat" && a.measure != "bw" && a.measure != "both")
    return usage_error("--measure must be lat, bw or both");
  if (a.check) {
    const auto l = BenchLayout::for_run(*mx, a.window, true);
    if (l.region_bytes() > (size_t{1} << 30))
      return usage_error("--check keeps a buffer per outstanding operation: --window " + std::to_string(a.window) +
                         " at --max " + a.max + " needs " + std::to_string(l.region_bytes() >> 20) +
                         " MiB per side; lower --window or --max");
  }
  if (!a.peer.empty() && a.listen_port >= 0) return usage_error("--peer and --listen exclude each other");
  if (a.listen_port == 0 || a.listen_port > 65535) return usage_error("--listen needs a port in 1..65535");
  if (!(a.timeout_s > 0 && a.timeout_s <= 86400)) return usage_error("--timeout must be in (0, 86400] seconds");
  const Deadline run_deadline = Deadline::after(std::chrono::duration<double>(a.timeout_s));

  if (a.serve_fd >= 0) {
    OobChannel oob(a.serve_fd);
    oob.set_peer(0);
    return run_responder(a, oob, run_deadline);
  }
  if (a.listen_port > 0) {
    std::string who;
    std::fprintf(stderr, "lattice bench fabric: waiting for a peer on port %d\n", a.listen_port);
    auto ch = oob_listen_accept(static_cast<uint16_t>(a.listen_port), run_deadline, &who);
    if (!ch.ok()) return fail(ch.status(), "rendezvous");
    std::fprintf(stderr, "lattice bench fabric: peer %s connected\n", who.c_str());
    ch->set_peer(0);
    return run_responder(a, *ch, run_deadline);
  }
  Sweep sw{*op, {}};
  for (size_t b = *mn; b <= *mx; b *= static_cast<size_t>(a.factor)) {
    sw.sizes.push_back(b);
    if (b > (1ull << 30) / static_cast<size_t>(a.factor)) break;
  }
  return run_initiator(a, sw, run_deadline);
}

Registrar bench_fabric_cmd{{"bench fabric",
                            "latency and bandwidth of a fabric provider between two processes "
                            "(ib_send_lat / ib_write_bw style)",
                            [](CLI::App& app) {
                              auto a = std::make_shared<Args>();
                              app.add_option("--provider", a->provider,
                                             "provider URI: shm, tcp://127.0.0.1:0, ...")
                                  ->capture_default_str();
                              app.add_option("--op", a->op, "operation: send (send/recv), write, read")
                                  ->capture_default_str();
                              app.add_option("--min,-b", a->min, "smallest message size (8, 4K, 1M)")
                                  ->capture_default_str();
                              app.add_option("--max,-e", a->max, "largest message size")->capture_default_str();
                              app.add_option("-f,--factor", a->factor, "size multiplier between steps")
                                  ->capture_default_str();
                              app.add_option("--iters,-n", a->iters,
                                             "latency iterations per size (scaled down above 64 KiB, floor 20)")
                                  ->capture_default_str();
                              app.add_option("--warmup", a->warmup, "untimed iterations per size")
                                  ->capture_default_str();
                              app.add_option("--window,-w", a->window, "outstanding operations for bandwidth")
                                  ->capture_default_str();
                              app.add_option("--bw-time", a->bw_seconds, "seconds of streaming per size for bandwidth")
                                  ->capture_default_str();
                              app.add_option("--measure", a->measure, "lat, bw or both")->capture_default_str();
                              app.add_flag("--json", a->json,
                                           "one JSON object per size (provider, op, bytes, lat_us_min, "
                                           "lat_us_median, bw_gbps; GB/s = 1e9 bytes/s)");
                              app.add_flag("--check", a->check,
                                           "verify payloads on the receiving side (a distinct pattern per iteration)");
                              app.add_flag("--busy-poll", a->busy_poll,
                                           "ask the provider to spin instead of sleeping (its own threads too)");
                              app.add_option("--peer", a->peer, "initiator on two hosts: HOST:PORT of a --listen side");
                              app.add_option("--listen", a->listen_port, "responder on two hosts: wait on this TCP port");
                              app.add_option("--timeout", a->timeout_s, "give up after this many seconds")
                                  ->capture_default_str();
                              app.add_option("--serve-fd", a->serve_fd, "")->group("");  // hidden: spawned peer
                              app.footer(
                                  "Latency is one way (half the round trip) for send and write, the post_read round "
                                  "trip for read; min/median/avg/p99 of per-iteration times with a busy-polled "
                                  "completion queue. Bandwidth streams --window outstanding operations for --bw-time "
                                  "seconds per size; GB/s means 1e9 bytes per second.");
                              return [a] { return run(*a); };
                            }}};

}  // namespace
}  // namespace lattice::cli
