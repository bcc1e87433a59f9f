// `lattice serve`: an OpenAI-compatible HTTP server for a GGUF model on this node
// (serve/server.h). Flags only; the server lives in lattice_serve.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "command.h"
#include "discover_flags.h"
#include "dist_run.h"
#include "lattice/cluster/launcher.h"
#include "lattice/serve/server.h"

namespace lattice::cli {
namespace {

struct ServeArgs {
  std::string model, host = "127.0.0.1", api_key, api_key_file;
  int port = 8080, slots = 4, threads = 0, ctx = 0, queue = 256;
  int nodes = 0;                 // local ranks to start (0: one process, or a rank under a launcher)
  std::string provider = "shm";
  std::string parallel = "auto";  // over ranks: tp | pp | ep | auto (serve/server.h)
  int64_t max_body_mib = 8;
  DiscoverFlags discover;  // one rank per discovered host instead of --nodes local ranks
  bool no_prefix_cache = false;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "lattice serve: %s\n", msg.c_str());
  return 2;
}

// The key travels to the ranks in the environment (of our children only), not on their
// command lines, which every local user can read.
constexpr const char* kKeyEnv = "LATTICE_SERVE_API_KEY";

// `--nodes N`: N local rank processes of `lattice serve` (same flags), --parallel over them;
// rank 0 listens. The launcher hosts the coordinator, so a lost follower is survived.
int launch_ranks(const ServeArgs& a, const std::string& key) {
  if (a.provider != "shm" && a.provider != "tcp") return fail("--provider must be shm or tcp");
  std::vector<std::string> argv = {cluster::self_exe(), "serve", "-m", std::filesystem::absolute(a.model).string(), "--host", a.host,
              "--port", std::to_string(a.port), "--slots", std::to_string(a.slots), "-t",
              std::to_string(std::max(1, a.threads)), "--ctx", std::to_string(a.ctx), "--queue", std::to_string(a.queue),
              "--max-body-mib", std::to_string(a.max_body_mib), "--parallel", a.parallel};
  if (a.no_prefix_cache) argv.push_back("--no-prefix-cache");
  if (a.discover.on) {
    // The same ranks, one per discovered host (cluster/hostfile_job.h); rank 0 listens.
    cluster::HostfileJob job;
    job.argv = argv;
    job.failure_timeout_ms = 3000;
    if (!key.empty()) job.env = {{kKeyEnv, key}};
    job.launch.prefix = false;
    job.launch.keep_going = true;
    auto code = run_on_discovered_hosts(a.discover, std::move(job), "serve");
    if (!code.ok()) return fail(code.status().to_string());
    return *code;
  }
  cluster::LocalJob job;
  job.world_size = a.nodes;
  job.argv = argv;
  job.provider = a.provider;
  job.host_coordinator = true;
  // A server must not take a busy host's scheduling delays for a lost rank (each costs the
  // streams a re-placement): silence counts as death after 3 s, not the default 750 ms. A
  // killed rank is still noticed at once (its connections close).
  job.failure_timeout_ms = 3000;
  if (!key.empty()) job.env = {{kKeyEnv, key}};
  job.launch.prefix = false;     // rank 0's "listening on" line as it is
  job.launch.keep_going = true;  // the survivors of a lost follower go on; rank 0's status is the job's
  job.bind = cluster::bind_when_fits(a.nodes, a.threads);
  auto code = cluster::run_local_job(std::move(job));
  if (!code.ok()) return fail(code.status().to_string());
  return *code;
}

int serve(const ServeArgs& a) {
  if (a.model.empty()) return fail("-m is required");
  if (a.port < 0 || a.port > 65535) return fail("--port must be in 0..65535 (0: any free port)");
  if (a.slots < 1 || a.slots > 256) return fail("--slots must be in 1..256");
  if (a.threads < 0 || a.threads > 1024) return fail("-t must be in 1..1024 (0: all cores)");
  if (a.ctx < 0) return fail("--ctx must be >= 0");
  if (a.queue < 1 || a.queue > 1 << 16) return fail("--queue must be in 1..65536");
  if (a.max_body_mib < 1 || a.max_body_mib > 1024) return fail("--max-body-mib must be in 1..1024");
  if (!a.api_key.empty() && !a.api_key_file.empty()) return fail("give --api-key or --api-key-file, not both");
  if (a.nodes < 0 || a.nodes > 64) return fail("--nodes must be in 1..64");
  if (a.parallel != "tp" && a.parallel != "pp" && a.parallel != "ep" && a.parallel != "auto")
    return fail("--parallel must be tp, pp, ep or auto");
  const bool ranked = cli::under_cluster_launcher();
  if (ranked && a.nodes > 0) return fail("--nodes starts local ranks itself: not under a launcher");
  serve::ServeOptions o;
  o.host = a.host;
  o.port = static_cast<uint16_t>(a.port);
  o.slots = static_cast<uint32_t>(a.slots);
  o.threads = static_cast<uint32_t>(a.threads);
  o.n_ctx = static_cast<uint32_t>(a.ctx);
  o.max_queue = static_cast<uint32_t>(a.queue);
  o.prefix_cache = !a.no_prefix_cache;
  o.parallel = a.parallel;
  o.max_body_bytes = static_cast<size_t>(a.max_body_mib) << 20;
  o.api_key = a.api_key;
  if (!a.api_key_file.empty()) {
    std::ifstream f(a.api_key_file);
    if (!f) return fail("cannot read --api-key-file " + a.api_key_file);
    std::getline(f, o.api_key);
    while (!o.api_key.empty() && (o.api_key.back() == '\r' || o.api_key.back() == ' ')) o.api_key.pop_back();
    if (o.api_key.empty()) return fail("--api-key-file " + a.api_key_file + " holds no key on its first line");
  }
  if (const char* k = std::getenv(kKeyEnv); o.api_key.empty() && k && *k) o.api_key = k;
  if (a.discover.on && (a.nodes > 0 || ranked)) return fail("--discover finds the hosts: no --nodes, not under a launcher");
  if (std::string e = a.discover.on ? check_discover_flags(a.discover) : ""; !e.empty()) return fail(e);
  if (a.nodes > 1 || a.discover.on) return launch_ranks(a, o.api_key);
  const Status st = ranked ? serve::serve_rank(a.model, o) : serve::serve_until_signal(a.model, o);
  if (!st.ok()) return fail(st.to_string());
  return 0;
}

Registrar serve_cmd{{"serve", "an OpenAI-compatible HTTP server for a GGUF model, on this node or over ranks", [](CLI::App& app) {
                       auto a = std::make_shared<ServeArgs>();
                       app.add_option("-m,--model", a->model, "GGUF file (the first file of a split set)");
                       app.add_option("--host", a->host, "address to listen on (default loopback only)")->capture_default_str();
                       app.add_option("--port", a->port, "port (0: any free port, printed)")->capture_default_str();
                       app.add_option("--slots", a->slots, "requests decoded together")->capture_default_str();
                       app.add_option("-t,--threads", a->threads, "threads (0: all cores)")->capture_default_str();
                       app.add_option("--ctx", a->ctx, "positions per request, prompt + output (0: the model's, at most 4096)")
                           ->capture_default_str();
                       app.add_option("--queue", a->queue, "requests waiting behind the slots; past it 503")->capture_default_str();
                       app.add_option("--max-body-mib", a->max_body_mib, "largest request body (413 past it)")->capture_default_str();
                       app.add_flag("--no-prefix-cache", a->no_prefix_cache,
                                    "prefill every prompt whole (default: reuse a free slot's cached prefix)");
                       app.add_option("--nodes", a->nodes,
                                      "local ranks, --parallel over them (rank 0 listens; -t threads each); "
                                      "under `lattice launch` each process is a rank")
                           ->capture_default_str();
                       app.add_option("--parallel", a->parallel,
                                      "over ranks: tp (tensor), pp (pipeline), ep (experts over ranks, the rest tensor) "
                                      "or auto (ep for mixture-of-experts files, else tp while every rank owns a KV head, else pp)")
                           ->capture_default_str();
                       app.add_option("--provider", a->provider, "fabric between local ranks: shm or tcp")->capture_default_str();
                       add_discover_flags(app, a->discover, "--nodes");
                       add_discover_host_flags(app, a->discover);
                       app.add_option("--api-key", a->api_key, "require Authorization: Bearer KEY");
                       app.add_option("--api-key-file", a->api_key_file, "the key from the first line of a file");
                       return [a] { return serve(*a); };
                     }}};

}  // namespace
}  // namespace lattice::cli
