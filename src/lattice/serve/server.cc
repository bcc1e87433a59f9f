#include "lattice/serve/server.h"

#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "lattice/cluster/cluster.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/model/arch.h"
#include "lattice/engine/model/hparams.h"
#include "lattice/engine/parallel/distributed.h"
#include "lattice/engine/parallel/auto_mode.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "lattice/serve/dashboard.h"
#include "lattice/serve/engine_loop.h"
#include "lattice/serve/http_server.h"
#include "lattice/serve/lockstep.h"
#include "lattice/serve/metrics.h"
#include "lattice/serve/openai.h"
#include "lattice/serve/rank_report.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/core/log.h"

namespace lattice::serve {

struct Server::Impl {
  uint32_t n_vocab = 0;
  const engine::Model* model = nullptr;   // on one node
  const engine::Tokenizer* tokenizer = nullptr;
  ClusterEngine* cluster = nullptr;       // over N ranks (rank 0), else null
  std::unique_ptr<LeaderChannel> channel;  // over N ranks
  ServeOptions opt;
  uint32_t n_ctx = 0;
  int64_t created = 0;
  engine::SoloGroup group;
  Metrics metrics;  // before loop and http: both count into it until they are gone
  std::unique_ptr<engine::Forward> forward;
  std::unique_ptr<EngineLoop> loop;
  std::unique_ptr<HttpServer> http;
  // What health() reads, on the HTTP thread: `http` itself is assigned after HttpServer::start
  // has its thread answering, so the thread may not read the unique_ptr. Published once start
  // returns, withdrawn before the server is destroyed (its destructor joins that thread).
  std::atomic<const HttpServer*> http_live{nullptr};
  std::mt19937_64 rng{std::random_device{}()};  // the HTTP thread's only
  mutable HostReadings host;  // one node: this machine's readings

  std::optional<HttpReply> screen(const HttpRequest& head) const;
  size_t connections() const {
    const HttpServer* h = http_live.load(std::memory_order_acquire);
    return h ? h->n_connections() : 0;
  }
  void handle(HttpRequest req, std::shared_ptr<Responder> out);
  void complete(Endpoint endpoint, const std::string& body, std::shared_ptr<Responder> out);
  std::string health() const;
  std::string metrics_text() const;
  std::string status_json() const;
  RankReport solo_report(uint64_t resident) const;
  static Status finish_start(Impl& im, EngineLoop::MakeGenerator make);
};

namespace {

HttpReply error_reply(int status, std::string_view message, std::string_view code = {}) {
  return {status, "application/json", error_body(status, message, code)};
}

// Compares without an early exit, so the time taken says nothing about the key.
bool same_key(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

MetricsEndpoint endpoint_of(std::string_view target) {
  if (target == "/health") return MetricsEndpoint::kHealth;
  if (target == "/metrics") return MetricsEndpoint::kMetrics;
  if (target == "/v1/models") return MetricsEndpoint::kModels;
  if (target == "/v1/chat/completions") return MetricsEndpoint::kChat;
  if (target == "/v1/completions") return MetricsEndpoint::kCompletion;
  return MetricsEndpoint::kOther;  // a 404: not labelled by the client's path (unbounded)
}

// Counts a request's answer by its status when the answer starts. Dropped unanswered, the
// inner responder answers 500, and that is what is counted.
class CountingResponder final : public Responder {
 public:
  CountingResponder(std::shared_ptr<Responder> inner, Metrics* m, MetricsEndpoint e)
      : inner_(std::move(inner)), m_(m), e_(e) {}
  ~CountingResponder() override { count(500); }
  void reply(HttpReply r) override {
    count(r.status);
    inner_->reply(std::move(r));
  }
  void stream_begin(int status, std::string ct, std::string first) override {
    count(status);
    inner_->stream_begin(status, std::move(ct), std::move(first));
  }
  void stream_write(std::string data) override { inner_->stream_write(std::move(data)); }
  void stream_end() override { inner_->stream_end(); }
  void on_abort(std::function<void()> fn) override { inner_->on_abort(std::move(fn)); }

 private:
  void count(int status) {
    if (!counted_.exchange(true)) m_->count_request(e_, status);
  }
  std::shared_ptr<Responder> inner_;
  Metrics* m_;
  MetricsEndpoint e_;
  std::atomic<bool> counted_{false};
};

}  // namespace

std::optional<HttpReply> Server::Impl::screen(const HttpRequest& head) const {
  struct Route {
    const char* path;
    const char* method;
  };
  static constexpr Route kRoutes[] = {{"/", "GET"},
                                      {"/status", "GET"},
                                      {"/health", "GET"},
                                      {"/metrics", "GET"},
                                      {"/v1/models", "GET"},
                                      {"/v1/chat/completions", "POST"},
                                      {"/v1/completions", "POST"}};
  const Route* route = nullptr;
  for (const Route& r : kRoutes)
    if (head.target == r.path) route = &r;
  if (!route) return error_reply(404, "no such endpoint: " + head.target, "not_found");
  if (head.method != route->method)
    return error_reply(405, head.target + " takes " + route->method + ", not " + head.method, "method_not_allowed");
  // The API key, when one is set, guards everything but /health (a liveness probe that tells
  // nothing about the requests) and / (the dashboard's static page; its figures come from
  // /status, which needs the key). /metrics needs it too, as in llama-server: its counts
  // describe the traffic, so with a key set they are for the key's holders only; with no
  // key every endpoint, /metrics included, is open.
  if (!opt.api_key.empty() && head.target != "/health" && head.target != "/") {
    constexpr std::string_view kBearer = "Bearer ";
    std::string_view auth = head.authorization;
    if (auth.substr(0, kBearer.size()) != kBearer)
      return error_reply(401, "an API key is required (Authorization: Bearer KEY)", "invalid_api_key");
    if (!same_key(auth.substr(kBearer.size()), opt.api_key))
      return error_reply(401, "the API key is not valid", "invalid_api_key");
  }
  return std::nullopt;
}

std::string Server::Impl::health() const {
  const EngineLoop::Stats s = loop->stats();
  return nlohmann::json{{"status", "ok"},
                        {"model", opt.model_name},
                        {"slots", opt.slots},
                        {"n_ctx", n_ctx},
                        {"active", s.active},
                        {"queued", s.queued},
                        {"in_flight", s.in_flight},
                        {"requests_completed", s.completed},
                        {"requests_cancelled", s.cancelled},
                        {"requests_failed", s.failed},
                        {"tokens_generated", s.tokens_generated},
                        {"connections", connections()}}
      .dump();
}

// Reads only atomics and the engine loop's stats (its mutex is held for counter updates,
// never across a step), so a scrape does not wait for the engine.
std::string Server::Impl::metrics_text() const {
  Metrics::Snapshot s = metrics.snapshot();
  const EngineLoop::Stats st = loop->stats();
  s.in_flight = st.in_flight;
  s.queued = st.queued;
  s.resident_bytes = resident_memory_bytes();
  s.recoveries = st.recoveries;
  if (cluster) {
    s.ranks = cluster->reports();
    s.world = s.ranks.empty() ? 1 : s.ranks.size();
    for (const auto& r : cluster->recoveries()) s.recovery_seconds_total += r.event.recover_ms / 1e3;
  } else {
    s.ranks = {solo_report(s.resident_bytes)};
  }
  return render_metrics(s);
}

RankReport Server::Impl::solo_report(uint64_t resident) const {
  RankReport me;
  me.resident_bytes = resident;
  fill_shard(*model, &me);
  me.host = host.get();
  return me;
}

// What the dashboard polls: the engine's counts, the latency sums, every rank, the recoveries.
std::string Server::Impl::status_json() const {
  const EngineLoop::Stats st = loop->stats();
  const Metrics::Snapshot m = metrics.snapshot();
  auto count = [](const Histogram::Snapshot& h) {
    uint64_t n = 0;
    for (uint64_t c : h.counts) n += c;
    return n;
  };
  std::vector<RankReport> ranks = cluster ? cluster->reports() : std::vector<RankReport>{solo_report(resident_memory_bytes())};
  nlohmann::json jr = nlohmann::json::array();
  for (const RankReport& r : ranks) jr.push_back(rank_status_json(r));
  nlohmann::json rec = nlohmann::json::array();
  if (cluster)
    for (const Recovery& r : cluster->recoveries()) {
      nlohmann::json e = r.event.to_json();
      e["unix_ms"] = r.unix_ms;
      rec.push_back(std::move(e));
    }
  return nlohmann::json{{"model", opt.model_name},
                        {"world", ranks.size()},
                        {"slots", opt.slots},
                        {"active", st.active},
                        {"queued", st.queued},
                        {"in_flight", st.in_flight},
                        {"requests_completed", st.completed},
                        {"requests_cancelled", st.cancelled},
                        {"requests_failed", st.failed},
                        {"tokens_generated", st.tokens_generated + st.tokens_running},
                        {"tokens_per_second", st.tokens_per_second},
                        {"ttft_sum", m.ttft.sum},
                        {"ttft_count", count(m.ttft)},
                        {"itl_sum", m.inter_token.sum},
                        {"itl_count", count(m.inter_token)},
                        {"ranks", jr},
                        {"recoveries", rec}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Server::Impl::handle(HttpRequest req, std::shared_ptr<Responder> out) {
  out = std::make_shared<CountingResponder>(std::move(out), &metrics, endpoint_of(req.target));
  if (req.target == "/metrics") return out->reply({200, "text/plain; version=0.0.4; charset=utf-8", metrics_text()});
  if (req.target == "/health") return out->reply({200, "application/json", health()});
  if (req.target == "/") return out->reply({200, "text/html; charset=utf-8", std::string(dashboard_html())});
  if (req.target == "/status") return out->reply({200, "application/json", status_json()});
  if (req.target == "/v1/models") return out->reply({200, "application/json", models_body(opt.model_name, created)});
  complete(req.target == "/v1/chat/completions" ? Endpoint::kChat : Endpoint::kCompletion, req.body, std::move(out));
}

void Server::Impl::complete(Endpoint endpoint, const std::string& body, std::shared_ptr<Responder> out) {
  auto parsed = parse_request(endpoint, body);
  if (!parsed.ok()) return out->reply(error_reply(400, parsed.status().message()));
  CompletionRequest& cr = *parsed;
  if (!cr.seed_set) cr.sampler.seed = rng();
  auto gr = generation_request(cr, prompt_tokens(*tokenizer, cr), n_ctx);
  if (!gr.ok()) return out->reply(error_reply(400, gr.status().message(), "context_length_exceeded"));
  // Token ids given by the client are checked here, where the answer can still be a 400.
  for (int32_t t : gr->prompt)
    if (static_cast<uint32_t>(t) >= n_vocab)
      return out->reply(error_reply(400, "prompt token " + std::to_string(t) + " is outside the vocabulary"));

  auto meta = std::make_shared<ResponseMeta>();
  meta->endpoint = endpoint;
  char id[24];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(rng()));
  meta->id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::string(id);
  meta->created = static_cast<int64_t>(std::time(nullptr));
  meta->model = opt.model_name;
  meta->include_usage = cr.stream && cr.include_usage;

  JobSink sink;
  if (cr.stream) {
    sink.on_piece = [out, meta](std::string_view piece) { out->stream_write(sse_piece(*meta, piece)); };
    sink.on_done = [out, meta](Result<engine::GenerateResult> r) {
      if (r.ok()) {
        out->stream_write(sse_finish(*meta, finish_reason(r->stop_reason)));
        if (meta->include_usage) out->stream_write(sse_usage(*meta, r->prompt_tokens.size(), r->tokens.size(), r->cached_tokens));
      } else {
        out->stream_write(sse_error(r.status().message()));
      }
      out->stream_write(std::string(kSseDone));
      out->stream_end();
    };
  } else {
    sink.on_done = [out, meta](Result<engine::GenerateResult> r) {
      if (!r.ok()) {
        const int status = r.status().code() == ErrorCode::kInvalidArgument ? 400
                           : r.status().code() == ErrorCode::kCancelled ? 503
                                                                          : 500;
        return out->reply(error_reply(status, r.status().message()));
      }
      out->reply({200, "application/json",
                  completion_body(*meta, r->text, finish_reason(r->stop_reason), r->prompt_tokens.size(),
                                  r->tokens.size(), r->cached_tokens)});
    };
  }
  auto job = loop->submit(std::move(*gr), std::move(sink));
  if (!job.ok()) {
    // A full queue is the client's to retry (429, as OpenAI's rate limit: its client libraries
    // wait Retry-After and try again); a stopping server is unavailable (503).
    const bool full = job.status().code() == ErrorCode::kResourceExhausted;
    HttpReply r = error_reply(full ? 429 : 503, job.status().message(), full ? "rate_limit_exceeded" : "server_stopping");
    r.retry_after = "1";
    return out->reply(std::move(r));
  }
  // Pieces the engine made before this is carried out are held; the opening chunk goes first.
  if (cr.stream) out->stream_begin(200, "text/event-stream", sse_open(*meta));
  out->on_abort([loop = loop.get(), id = *job] { loop->cancel(id); });
}

namespace {
Status check_options(const ServeOptions& options) {
  if (options.slots == 0 || options.slots > 256) return InvalidArgument("serve: --slots must be in 1..256");
  if (options.threads > 1024) return InvalidArgument("serve: -t must be in 0..1024");
  if (options.max_queue == 0) return InvalidArgument("serve: the queue must hold at least one request");
  return Status::Ok();
}
}  // namespace

Result<std::unique_ptr<Server>> Server::start(const engine::Model& model, const engine::Tokenizer& tokenizer,
                                              const ServeOptions& options) {
  LATTICE_RETURN_IF_ERROR(check_options(options));
  std::unique_ptr<Server> s(new Server());
  s->impl_ = std::make_unique<Impl>();
  Impl& im = *s->impl_;
  im.n_vocab = model.hparams().n_vocab;
  im.model = &model;
  im.tokenizer = &tokenizer;
  im.opt = options;

  engine::ForwardOptions fo;
  fo.n_threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  fo.max_items = options.slots;
  fo.n_ctx = options.n_ctx;
  fo.n_batch = std::max<uint32_t>(256, options.slots);
  LATTICE_ASSIGN_OR_RETURN(im.forward, engine::Forward::create(model, im.group, fo));
  im.n_ctx = im.forward->options().n_ctx;
  engine::GeneratorOptions go;
  go.max_seqs = options.slots;
  go.n_ctx = im.n_ctx;
  go.prefill_chunk = im.forward->options().n_batch;
  go.max_queue = options.max_queue;
  go.prefix_cache = options.prefix_cache;
  LATTICE_RETURN_IF_ERROR(
      Impl::finish_start(im, [&im, go]() { return engine::Generator::create(*im.forward, *im.tokenizer, go); }));
  return s;
}

Result<std::unique_ptr<Server>> Server::start(ClusterEngine& engine, const engine::Tokenizer& tokenizer,
                                              const ServeOptions& options) {
  LATTICE_RETURN_IF_ERROR(check_options(options));
  if (engine.rank() != 0) return InvalidArgument("serve: only rank 0 serves");
  std::unique_ptr<Server> s(new Server());
  s->impl_ = std::make_unique<Impl>();
  Impl& im = *s->impl_;
  im.n_vocab = engine.n_vocab();
  im.tokenizer = &tokenizer;
  im.opt = options;
  im.cluster = &engine;
  im.n_ctx = engine.n_ctx();
  im.channel = std::make_unique<LeaderChannel>(engine);
  LATTICE_RETURN_IF_ERROR(Impl::finish_start(im, [&engine]() { return engine.generator(); }));
  return s;
}

Status Server::Impl::finish_start(Impl& im, EngineLoop::MakeGenerator make) {
  if (im.opt.model_name.empty()) im.opt.model_name = "lattice";
  im.created = static_cast<int64_t>(std::time(nullptr));
  EngineLoopOptions lo;
  lo.max_jobs = size_t{im.opt.slots} + im.opt.max_queue;
  lo.metrics = &im.metrics;
  lo.channel = im.channel.get();
  LATTICE_ASSIGN_OR_RETURN(im.loop, EngineLoop::start(std::move(make), lo));

  HttpOptions ho;
  ho.host = im.opt.host;
  ho.port = im.opt.port;
  ho.max_body_bytes = im.opt.max_body_bytes;
  ho.header_timeout = im.opt.header_timeout;
  HttpHandler h;
  h.screen = [&im](const HttpRequest& head) {
    auto refused = im.screen(head);
    if (refused) im.metrics.count_request(endpoint_of(head.target), refused->status);
    return refused;
  };
  h.handle = [&im](HttpRequest req, std::shared_ptr<Responder> out) { im.handle(std::move(req), std::move(out)); };
  h.error = [&im](int status, const std::string& message) {
    im.metrics.count_request(MetricsEndpoint::kOther, status);  // malformed HTTP: no endpoint to trust
    return error_reply(status, message);
  };
  LATTICE_ASSIGN_OR_RETURN(im.http, HttpServer::start(ho, std::move(h)));
  im.http_live.store(im.http.get(), std::memory_order_release);
  return Status::Ok();
}

Server::~Server() {
  if (!impl_) return;
  // The engine first: its jobs answer and drop their responders while the HTTP server runs.
  if (impl_->loop) impl_->loop->stop();
  impl_->http_live.store(nullptr, std::memory_order_release);
  impl_->http.reset();
  impl_->loop.reset();
}

uint16_t Server::port() const { return impl_->http->port(); }
const ServeOptions& Server::options() const { return impl_->opt; }

namespace {

// SIGINT/SIGTERM are taken by the calling thread alone (sigtimedwait in wait_for_signal): every
// thread started after this inherits the mask. SIGPIPE is ignored: a client gone mid-write is
// an error code. Thousands of idle connections need descriptors: the soft limit goes up to the
// hard one.
sigset_t prepare_process() {
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  return sigs;
}

void serve_until(std::unique_ptr<Server>& server, const ServeOptions& options, const sigset_t& sigs) {
  std::printf("listening on http://%s:%u\n", options.host.c_str(), static_cast<unsigned>(server->port()));
  std::fflush(stdout);
  for (;;) {
    const timespec second{1, 0};
    const int sig = sigtimedwait(&sigs, nullptr, &second);
    if (sig == SIGINT || sig == SIGTERM) break;
  }
  std::fprintf(stderr, "lattice serve: stopping\n");
  server.reset();
}

}  // namespace

Status serve_until_signal(const std::string& model_path, ServeOptions options) {
  const sigset_t sigs = prepare_process();
  auto model = engine::Model::load(model_path);
  if (!model.ok()) return model.status();
  (*model)->prefault();
  auto tok = engine::tokenizer_from_gguf((*model)->file());
  if (!tok.ok()) return InvalidArgument("tokenizer: " + tok.status().to_string());
  if (options.model_name.empty()) options.model_name = std::filesystem::path(model_path).filename().string();
  auto server = Server::start(**model, *tok, options);
  if (!server.ok()) return server.status();
  serve_until(*server, options, sigs);
  return Status::Ok();
}

namespace {

// --parallel over `world` ranks; every rank decides the same from the file's header.
Result<engine::parallel::Parallelism> parallelism(const engine::GgufFile& file, const std::string& name, int world,
                                                  std::string* why) {
  namespace par = engine::parallel;
  par::ParallelMode m;
  if (name == "tp") m = par::ParallelMode::kTensor;
  else if (name == "pp") m = par::ParallelMode::kPipeline;
  else if (name == "ep") m = par::ParallelMode::kExpert;
  else if (name == "auto") m = par::ParallelMode::kAuto;
  else return InvalidArgument("--parallel must be tp, pp, ep or auto, not '" + name + "'");
  if (m == par::ParallelMode::kAuto) {
    auto arch_name = file.metadata().get_string("general.architecture");
    const engine::ArchInfo* arch = arch_name.ok() ? engine::find_arch(*arch_name) : nullptr;
    if (!arch) return InvalidArgument("--parallel auto: the file's architecture is not one lattice runs");
    LATTICE_ASSIGN_OR_RETURN(auto hp, engine::read_hparams(file.metadata(), *arch));
    m = par::auto_mode(hp, world, why);
  }
  return m == par::ParallelMode::kPipeline ? par::Parallelism::kPipeline
         : m == par::ParallelMode::kExpert ? par::Parallelism::kExpert
                                           : par::Parallelism::kTensor;
}

// This rank's links to higher ranks: the topology file's figures when it has them for every
// linked pair (the same file on every rank, so every rank decides alike), else measured.
Result<std::map<int, LinkFigures>> link_figures(cluster::Cluster& c) {
  std::map<int, LinkFigures> out;
  auto env = cluster::RankEnv::from_env();
  if (env.ok() && !env->topology.empty()) {
    if (auto topo = topology_figures(env->topology); topo.ok()) {
      bool all = true;
      for (int a = 0; a < c.world_size(); ++a)
        for (int b = a + 1; b < c.world_size(); ++b) {
          if (!c.pair_linked(a, b)) continue;
          auto f = topo->find({a, b});
          if (f == topo->end()) all = false;
          else if (a == c.rank()) out[b] = f->second;
        }
      if (all) return out;
    }
  }
  const auto t0 = Clock::now();
  LATTICE_ASSIGN_OR_RETURN(out, probe_links(c, Deadline::after(std::chrono::seconds(20))));
  for (const auto& [peer, f] : out)
    LATTICE_LOG_INFO("serve: link {}-{}: {:.1f} us one way, {:.2f} Gbit/s", c.rank(), peer, f.lat_us, f.gbps);
  LATTICE_LOG_INFO("serve: rank {}: links measured in {:.0f} ms", c.rank(),
                   std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  return out;
}
}  // namespace

Status serve_rank(const std::string& model_path, ServeOptions options) {
  auto copts = cluster::cluster_options_from_env();
  if (!copts.ok()) return copts.status();
  const bool leader = copts->rank == 0;
  // Only rank 0 waits for a signal; a follower stops when rank 0 says so, and dies by the
  // launcher's SIGTERM like any other process.
  sigset_t sigs{};
  if (leader) sigs = prepare_process();
  std::optional<engine::Tokenizer> tok;
  engine::parallel::DistOptions d;
  {
    auto file = engine::GgufFile::open(model_path);
    if (!file.ok()) return file.status();
    auto t = engine::tokenizer_from_gguf(**file);
    if (!t.ok()) return InvalidArgument("tokenizer: " + t.status().to_string());
    tok.emplace(std::move(*t));
    std::string why;
    auto mode = parallelism(**file, options.parallel, copts->world_size, &why);
    if (!mode.ok()) return mode.status();
    d.parallel = *mode;
    if (leader && !why.empty()) std::fprintf(stderr, "lattice serve: %s\n", why.c_str());
  }
  auto cl = cluster::join_cluster(*copts, Deadline::after(std::chrono::seconds(60)));
  if (!cl.ok()) return cl.status().with_context("could not join the cluster");
  d.model_path = model_path;
  d.n_threads = options.threads > 0 ? options.threads : 1;
  d.n_ctx = options.n_ctx;
  d.max_seqs = options.slots;
  d.recover = true;
  engine::GeneratorOptions go;
  go.max_seqs = options.slots;
  go.n_ctx = options.n_ctx;
  go.max_queue = options.max_queue;
  go.prefix_cache = options.prefix_cache;  // every rank alike: they choose the same slots
  // The links' figures for the dashboard, before the collectives use the links.
  auto figures = link_figures(**cl);
  if (!figures.ok()) return figures.status().with_context("measuring the links");
  auto engine = ClusterEngine::create(**cl, d, *tok, go);
  if (!engine.ok()) return engine.status().with_context("placing the model");
  (*engine)->set_link_figures(std::move(*figures));
  if (!leader) return follow(**engine, std::chrono::seconds(30));
  if (options.model_name.empty()) options.model_name = std::filesystem::path(model_path).filename().string();
  auto server = Server::start(**engine, *tok, options);
  if (!server.ok()) return server.status();
  serve_until(*server, options, sigs);
  return Status::Ok();
}

}  // namespace lattice::serve
