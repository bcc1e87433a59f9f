// `lattice bench fabric`: latency and bandwidth of one fabric provider between two processes,
// in the style of ib_send_lat / ib_write_bw. By default it runs itself as a local job of two
// ranks (cluster/launcher.h: pinned to CPUs of their own, as `launch --bind auto`); under a
// launcher (`lattice launch -n 2 -- lattice bench fabric ...`) rank 0 measures and rank 1
// serves; across two hosts run `--listen PORT` on one and `--peer HOST:PORT` on the other.
// Either way the two ranks meet through the cluster's control plane (authenticated with the
// cluster secret), which carries the config and the address blobs (allgather) and nothing
// else: the measured traffic runs on endpoints of their own. See fabric_bench.h for the method.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>
#include <thread>

#include <nlohmann/json.hpp>

#include "command.h"
#include "fabric_bench.h"
#include "lattice/cluster/cluster.h"
#include "lattice/cluster/launcher.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/crypto/secret.h"
#include "lattice/fabric/fabric.h"

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
  std::string secret_file;
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

// One step of the two-rank protocol over the control plane: both contribute, each gets the
// other's contribution (a rank that died makes it fail at once with kPeerLost).
Result<std::string> swap(cluster::Cluster& c, const std::string& mine, Deadline d) {
  LATTICE_ASSIGN_OR_RETURN(auto all, c.allgather(mine, d));
  return all[size_t(1 - c.rank())];
}

// Both sides: make the endpoint, swap address blobs, connect.
Result<BenchEnd> connect_pair(fabric::Provider& provider, const BenchLayout& layout, int window, cluster::Cluster& c,
                              fabric::RemoteRegion* peer_region, Deadline d) {
  const int peer = 1 - c.rank();
  LATTICE_ASSIGN_OR_RETURN(BenchEnd end, make_bench_end(provider, layout, window, peer));
  LATTICE_ASSIGN_OR_RETURN(std::string theirs, swap(c, encode_peer_info(end, provider.name()), d));
  LATTICE_ASSIGN_OR_RETURN(PeerInfo info, decode_peer_info(theirs, layout));
  if (info.provider != provider.name())
    return InvalidArgument("this side runs provider '" + std::string(provider.name()) + "', the peer '" +
                           info.provider + "'");
  LATTICE_RETURN_IF_ERROR(end.ep->connect(info.address, d).with_context("connect"));
  *peer_region = info.region;
  return end;
}

// The provider for this side: plain "tcp" on `tcp_host` (the address the peer reaches this host
// by; 0.0.0.0: the first interface that is up) with any port; a URI asking for secure=1 gets
// the cluster secret.
Result<std::unique_ptr<fabric::Provider>> make_side_provider(const Args& a, const std::string& tcp_host,
                                                             const std::optional<crypto::ClusterSecret>& secret,
                                                             bool busy_poll) {
  fabric::ProviderOptions po;
  po.busy_poll = busy_poll;
  const std::string uri = cluster::provider_uri(a.provider, tcp_host);
  if (secret && uri.find("secure=1") != std::string::npos) po.secret = secret->bytes();
  return fabric::make_provider(uri, po);
}

// The responder: gets the run's config, connects, serves until told to stop.
int run_responder(const Args& a, cluster::Cluster& c, const std::string& tcp_host,
                  const std::optional<crypto::ClusterSecret>& secret, Deadline run_deadline) {
  auto setup = Deadline::after(kSetupTimeout).min(run_deadline);
  auto cfg_text = swap(c, "", setup);
  if (!cfg_text.ok()) return fail(cfg_text.status(), "waiting for the initiator's config");
  nlohmann::json cfg = nlohmann::json::parse(*cfg_text, nullptr, false);
  if (cfg.is_discarded() || !cfg.is_object() || !cfg.contains("max_bytes") || !cfg["max_bytes"].is_number_unsigned() ||
      !cfg.contains("window") || !cfg["window"].is_number_integer() || !cfg.contains("check") ||
      !cfg["check"].is_boolean())
    return fail(Corrupt("bad config from the initiator"), "setup");
  RunConfig rc{cfg["max_bytes"].get<size_t>(), cfg["window"].get<int>(), cfg["check"].get<bool>()};
  if (rc.max_bytes == 0 || rc.max_bytes > (1ull << 30) || rc.window < 1 || rc.window > 1024)
    return fail(Corrupt("config out of range from the initiator"), "setup");
  const bool busy_poll =
      a.busy_poll || (cfg.contains("busy_poll") && cfg["busy_poll"].is_boolean() && cfg["busy_poll"].get<bool>());
  auto provider = make_side_provider(a, tcp_host, secret, busy_poll);
  if (!provider.ok()) return fail(provider.status(), "provider");
  const BenchLayout layout = BenchLayout::for_run(rc.max_bytes, rc.window, rc.check);
  fabric::RemoteRegion peer_region;
  auto end = connect_pair(**provider, layout, rc.window, c, &peer_region, setup);
  if (!end.ok()) return fail(end.status(), "setup");
  BenchSide side(provider->get(), end->ep.get(), end->cq.get(), end->region.get(), peer_region, layout, 1 - c.rank());
  if (Status st = side.start(setup); !st.ok()) return fail(st, "posting receives");
  if (auto st = swap(c, "ready", setup); !st.ok()) return fail(st.status(), "setup");
  if (Status st = side.serve(run_deadline); !st.ok()) return fail(st, "serving the initiator");
  // Keep the endpoint until both sides are done with it: torn down early, it could turn the
  // initiator's last message still in flight into a peer-lost error there.
  (void)swap(c, "done", Deadline::after(std::chrono::seconds(10)));
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

int run_initiator(const Args& a, const Sweep& sw, cluster::Cluster& c, const std::string& tcp_host,
                  const std::optional<crypto::ClusterSecret>& secret, Deadline run_deadline) {
  const size_t max_bytes = sw.sizes.back();
  auto setup = Deadline::after(kSetupTimeout).min(run_deadline);
  nlohmann::json cfg{{"max_bytes", max_bytes}, {"window", a.window}, {"check", a.check}, {"busy_poll", a.busy_poll}};
  if (auto st = swap(c, cfg.dump(), setup); !st.ok()) return fail(st.status(), "setup");
  auto provider = make_side_provider(a, tcp_host, secret, a.busy_poll);
  if (!provider.ok()) return fail(provider.status(), "provider");
  // Two-sided-only providers (Apple TB5 RDMA, the staged verbs path) say so in their caps.
  if ((sw.op == BenchOp::kWrite && !(*provider)->caps().rma_write) ||
      (sw.op == BenchOp::kRead && !(*provider)->caps().rma_read))
    return fail(Unavailable("provider '" + a.provider + "' has no one-sided " + std::string(to_string(sw.op)) +
                            " (caps say two-sided only); use --op send"),
                "provider");
  const BenchLayout layout = BenchLayout::for_run(max_bytes, a.window, a.check);
  fabric::RemoteRegion peer_region;
  auto end = connect_pair(**provider, layout, a.window, c, &peer_region, setup);
  if (!end.ok()) return fail(end.status(), "setup");
  BenchSide side(provider->get(), end->ep.get(), end->cq.get(), end->region.get(), peer_region, layout, 1 - c.rank());
  if (Status st = side.start(setup); !st.ok()) return fail(st, "posting receives");
  auto ready = swap(c, "ready", setup);
  if (!ready.ok()) return fail(ready.status(), "waiting for the peer to be ready");
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
    if (!r.ok()) return fail(r.status(), ("size " + std::to_string(bytes)).c_str());
    total_errors += r->check_errors;
    if (a.json) print_json(a, **provider, *r, s);
    else print_row(*r, s);
  }
  if (Status st = side.stop_peer(Deadline::after(std::chrono::seconds(10)).min(run_deadline)); !st.ok())
    return fail(st, "stopping the peer");
  if (auto done = swap(c, "done", Deadline::after(std::chrono::seconds(10))); !done.ok() || *done != "done")
    return fail(done.ok() ? Corrupt("peer did not say done") : done.status(), "stopping the peer");
  if (total_errors > 0) {
    std::fprintf(stderr, "lattice bench fabric: --check found %llu corrupted payloads\n",
                 static_cast<unsigned long long>(total_errors));
    return 1;
  }
  return 0;
}

// No peer given and not under a launcher: this command again as a local job of two ranks,
// each pinned to a CPU of its own when it can have one (as `launch --bind auto`).
int launch_pair(const Args& a) {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string s; std::getline(f, s, '\0');) argv.push_back(s);
  cluster::LocalJob job;
  job.world_size = 2;
  job.argv = {cluster::self_exe()};
  job.argv.insert(job.argv.end(), argv.begin() + std::min<size_t>(1, argv.size()), argv.end());
  job.secret_file = a.secret_file;
  job.launch.prefix = false;  // rank 0 prints the results; errors name their side
  auto code = cluster::run_local_job(std::move(job));
  if (!code.ok()) return fail(code.status(), "starting the peer process");
  return *code;
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
  Sweep sw{*op, {}};
  for (size_t b = *mn; b <= *mx; b *= static_cast<size_t>(a.factor)) {
    sw.sizes.push_back(b);
    if (b > (1ull << 30) / static_cast<size_t>(a.factor)) break;
  }
  auto renv = cluster::RankEnv::from_env();
  if (!renv.ok()) return usage_error(renv.status().to_string());
  const bool two_hosts = a.listen_port > 0 || !a.peer.empty();
  if (!two_hosts && !renv->launched) return launch_pair(a);

  cluster::ClusterOptions co;
  if (two_hosts) {
    auto secret = crypto::load_secret(a.secret_file);
    if (!secret.ok()) return usage_error(secret.status().message());
    co.world_size = 2;
    co.secret = *secret;
    co.name = hostname();
    if (a.listen_port > 0) {  // rank 0, hosting the coordinator on the port
      co.rank = 0;
      co.coordinator = "127.0.0.1:" + std::to_string(a.listen_port);
      std::fprintf(stderr, "lattice bench fabric: waiting for a peer on port %d\n", a.listen_port);
    } else {
      co.rank = 1;
      co.coordinator = a.peer;
    }
  } else {
    auto o = cluster::cluster_options_from_env(a.secret_file);
    if (!o.ok()) return fail(o.status(), "rank environment");
    if (o->world_size != 2)
      return usage_error("runs on 2 ranks, not " + std::to_string(o->world_size) + " (lattice launch -n 2 -- ...)");
    co = std::move(*o);
  }
  co.control_only = true;  // the measured endpoints are ours; the cluster only carries the setup
  const std::optional<crypto::ClusterSecret> secret = co.secret;
  const bool initiator = two_hosts ? a.listen_port < 0 : co.rank == 0;
  auto c = cluster::join_cluster(co, a.listen_port > 0 ? run_deadline : Deadline::after(kSetupTimeout).min(run_deadline));
  if (!c.ok()) return fail(c.status(), "meeting the peer");
  if (a.listen_port > 0) {
    const auto& names = (*c)->member_names();
    std::fprintf(stderr, "lattice bench fabric: peer %s connected\n", names.size() == 2 ? names[1].c_str() : "?");
  }
  // The --listen side dialed its own coordinator over loopback: its control connection does not
  // say which address the peer host reaches it by.
  const std::string tcp_host = a.listen_port > 0 ? "0.0.0.0" : (*c)->local_ip();
  return initiator ? run_initiator(a, sw, **c, tcp_host, secret, run_deadline)
                   : run_responder(a, **c, tcp_host, secret, run_deadline);
}

Registrar bench_fabric_cmd{{"bench fabric",
                            "latency and bandwidth of a fabric provider between two processes "
                            "(ib_send_lat / ib_write_bw style)",
                            [](CLI::App& app) {
                              auto a = std::make_shared<Args>();
                              app.add_option("--provider", a->provider,
                                             "provider: shm, tcp (this host, any port), or a URI: tcp://HOST:PORT, verbs, ...")
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
                              app.add_option("--secret-file", a->secret_file,
                                             "cluster secret (lattice keygen) that authenticates the two sides; "
                                             "default: LATTICE_SECRET or LATTICE_SECRET_FILE (--listen/--peer need "
                                             "one, local runs make a fresh one)");
                              app.footer(
                                  "Latency is one way (half the round trip) for send and write, the post_read round "
                                  "trip for read; min/median/avg/p99 of per-iteration times with a busy-polled "
                                  "completion queue. Bandwidth streams --window outstanding operations for --bw-time "
                                  "seconds per size; GB/s means 1e9 bytes per second.");
                              return [a] { return run(*a); };
                            }}};

}  // namespace
}  // namespace lattice::cli
