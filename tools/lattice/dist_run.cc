#include "dist_run.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/cluster/cluster.h"
#include "lattice/cluster/launcher.h"
#include "lattice/coll/coll.h"
#include "lattice/crypto/secret.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/model/arch.h"
#include "lattice/engine/model/hparams.h"
#include "lattice/engine/parallel/pp.h"
#include "lattice/engine/parallel/tp.h"
#include "lattice/engine/runtime/generate.h"
#include "lattice/engine/sampler/sampler.h"
#include "lattice/engine/tokenizer/from_gguf.h"

namespace lattice::cli {
namespace {

using Clock = std::chrono::steady_clock;

// "3,1" -> {3, 1}; empty on a bad list (the caller reports it).
std::vector<double> parse_split(const std::string& text, bool* ok) {
  std::vector<double> out;
  *ok = true;
  if (text.empty()) return out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v > 0) || v > 1e6) {
      *ok = false;
      return {};
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "lattice run: %s\n", msg.c_str());
  return 2;
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string self_exe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "/proc/self/exe";
  buf[n] = 0;
  return buf;
}

// Parent: start `nodes` copies of this command as ranks and wait for them.
int launch_local(const DistRunArgs& a) {
  if (a.nodes < 1 || a.nodes > 64) return fail("--nodes must be in 1..64");
  if (a.provider != "shm" && a.provider != "tcp") return fail("--provider must be shm or tcp");
  if (a.parallel != "tp" && a.parallel != "pp") return fail("--parallel must be tp or pp");
  bool split_ok = true;
  const auto split = parse_split(a.split, &split_ok);
  if (!split_ok || (!split.empty() && split.size() != static_cast<size_t>(a.nodes)))
    return fail("--split needs one positive share per rank (e.g. --nodes 2 --split 3,1)");
  auto port = cluster::pick_free_port();
  if (!port.ok()) return fail(port.status().to_string());
  const std::string exe = self_exe();
  // Every rank must sample with the same seed: resolve a random one here.
  const uint64_t seed = a.seed_set ? a.seed : static_cast<uint64_t>(std::random_device{}());
  std::vector<std::string> argv = {exe, "run", "-m", a.model, "-p", a.prompt, "-n", std::to_string(a.n_predict),
                                   "-t", std::to_string(a.threads), "--temp", std::to_string(a.temp),
                                   "--seed", std::to_string(seed), "--top-k", std::to_string(a.top_k),
                                   "--top-p", std::to_string(a.top_p), "--min-p", std::to_string(a.min_p),
                                   "--repeat-penalty", std::to_string(a.repeat_penalty), "--repeat-last-n",
                                   std::to_string(a.repeat_last_n), "--ctx", std::to_string(a.ctx)};
  argv.push_back("--parallel");
  argv.push_back(a.parallel);
  if (!a.split.empty()) {
    argv.push_back("--split");
    argv.push_back(a.split);
  }
  if (a.chat) argv.push_back("--chat");
  if (a.json) argv.push_back("--json");
  if (a.no_pack) argv.push_back("--no-pack");
  if (a.ignore_eos) argv.push_back("--ignore-eos");
  const std::string secret = crypto::ClusterSecret::generate().to_hex();
  cluster::LaunchOptions lo;
  lo.prefix = false;  // rank 0 writes the text; the others write only errors (which name their rank)
  for (int r = 0; r < a.nodes; ++r) {
    cluster::LaunchRank lr;
    lr.rank = r;
    lr.argv = argv;
    lr.env = {{"LATTICE_RANK", std::to_string(r)},
              {"LATTICE_WORLD_SIZE", std::to_string(a.nodes)},
              {"LATTICE_COORDINATOR", "127.0.0.1:" + std::to_string(*port)},
              {"LATTICE_PROVIDER", a.provider},
              {"LATTICE_SECRET", secret}};
    lo.ranks.push_back(std::move(lr));
  }
  auto code = cluster::run_ranks(lo);
  if (!code.ok()) return fail(code.status().to_string());
  return *code;
}

// One rank.
int run_rank(const DistRunArgs& a) {
  auto opts = cluster::cluster_options_from_env();
  if (!opts.ok()) return fail(opts.status().to_string());
  const int rank = opts->rank;
  auto rfail = [rank](const std::string& m) {
    std::fprintf(stderr, "lattice run: rank %d: %s\n", rank, m.c_str());
    return 1;
  };
  engine::SamplerParams sp;
  sp.temperature = a.temp;
  sp.top_k = a.top_k;
  sp.top_p = a.top_p;
  sp.min_p = a.min_p;
  sp.repeat_penalty = a.repeat_penalty;
  sp.repeat_last_n = a.repeat_last_n;
  sp.seed = a.seed_set ? a.seed : 0;  // the launcher passes --seed; under `lattice launch` give one
  if (auto st = sp.validate(); !st.ok()) return rfail(st.message());

  auto cl = cluster::join_cluster(*opts, Deadline::after(std::chrono::seconds(60)));
  if (!cl.ok()) return rfail("could not join: " + cl.status().to_string());
  cluster::Cluster& c = **cl;
  auto comm = coll::Communicator::create(c);
  if (!comm.ok()) return rfail(comm.status().to_string());

  const auto t_load = Clock::now();
  engine::parallel::TpLoadOptions lo;
  lo.pack = !a.no_pack;
  const bool pp = a.parallel == "pp";
  bool split_ok = true;
  lo.weights = parse_split(a.split, &split_ok);
  if (!split_ok || (!lo.weights.empty() && lo.weights.size() != static_cast<size_t>(c.world_size())))
    return rfail("--split needs one positive share per rank");
  auto file = engine::GgufFile::open(a.model);
  if (!file.ok()) return rfail(file.status().to_string());
  if (pp) {
    // Stage ranges need the layer count: read from the header before binding.
    auto arch_name = (*file)->metadata().get_string("general.architecture");
    const engine::ArchInfo* arch = arch_name.ok() ? engine::find_arch(*arch_name) : nullptr;
    if (!arch) return rfail("unsupported or missing architecture");
    auto hp = engine::read_hparams((*file)->metadata(), *arch);
    if (!hp.ok()) return rfail(hp.status().to_string());
    auto ranges = engine::parallel::pp_layers(hp->n_layer, c.world_size(), lo.weights);
    if (!ranges.ok()) return rfail(ranges.status().to_string());
    lo.layer_begin = (*ranges)[c.rank()].begin;
    lo.layer_end = (*ranges)[c.rank()].end;
  }
  if (pp) lo.weights.clear();  // the stage's own TP world is 1
  auto model = pp ? engine::parallel::TpModel::bind(std::move(*file), 0, 1, lo)
                  : engine::parallel::TpModel::bind(std::move(*file), c.rank(), c.world_size(), lo);
  if (!model.ok()) return rfail(model.status().to_string());
  const double load_s = since(t_load);
  auto tok = engine::tokenizer_from_gguf((*model)->file());
  if (!tok.ok()) return rfail("tokenizer: " + tok.status().to_string());

  engine::GenerateOptions go;
  go.prompt = a.prompt;
  go.n_predict = static_cast<uint32_t>(a.n_predict);
  go.chat = a.chat;
  const std::vector<int32_t> prompt = engine::prompt_tokens(*tok, go);
  if (prompt.empty()) return rfail("the prompt is empty (no tokens)");
  engine::parallel::TpSessionOptions so;
  so.n_ctx = a.ctx > 0 ? static_cast<uint32_t>(a.ctx) : static_cast<uint32_t>(prompt.size() + go.n_predict);
  so.n_threads = static_cast<uint32_t>(std::max(1, a.threads));
  if (prompt.size() + go.n_predict > so.n_ctx) return rfail("prompt + -n exceed --ctx");
  // Both kinds of session behind one small interface.
  std::unique_ptr<engine::parallel::TpSession> tps;
  std::unique_ptr<engine::parallel::PpSession> pps;
  if (pp) {
    engine::parallel::PpSessionOptions po;
    po.session = so;
    po.session.n_batch = 32;  // micro-batches of the prefill
    auto s = engine::parallel::PpSession::create(**model, **comm, po);
    if (!s.ok()) return rfail(s.status().to_string());
    pps = std::move(*s);
  } else {
    auto s = engine::parallel::TpSession::create(**model, comm->get(), so);
    if (!s.ok()) return rfail(s.status().to_string());
    tps = std::move(*s);
  }
  struct Any {
    engine::parallel::TpSession* tp;
    engine::parallel::PpSession* pp;
    Status prefill(std::span<const int32_t> t) { return tp ? tp->prefill(t) : pp->prefill(t); }
    Status decode(int32_t t) { return tp ? tp->decode(t) : pp->decode(t); }
    Result<int32_t> sample(engine::Sampler& s) { return tp ? tp->sample(s) : pp->sample(s); }
    const engine::parallel::CollStats& coll_stats() const { return tp ? tp->coll_stats() : pp->coll_stats(); }
  } sess{tps.get(), pps.get()};

  engine::Sampler sampler(sp);
  for (int32_t t : prompt) sampler.accept(t);
  auto t0 = Clock::now();
  if (auto st = sess.prefill(prompt); !st.ok()) return rfail(st.to_string());
  const double prefill_s = since(t0);
  const engine::parallel::CollStats after_prefill = sess.coll_stats();
  std::vector<int32_t> out;
  std::string stop = "length";
  double decode_s = 0;
  Clock::time_point t_first = Clock::now();
  uint32_t steps = 0;
  std::string printed;
  for (int i = 0; i < a.n_predict; ++i) {
    auto t = sess.sample(sampler);
    if (!t.ok()) return rfail(t.status().to_string());
    // Decode time runs from the first chosen token to the last: decode and the choice of the
    // next token together (a pipeline's first stage only knows a step ended when the token
    // comes back).
    if (i == 0) t_first = Clock::now();
    else decode_s = since(t_first);
    sampler.accept(*t);
    if (!a.ignore_eos && tok->is_eog(*t)) {
      stop = "eog";
      break;
    }
    out.push_back(*t);
    if (rank == 0 && !a.json) {
      // Stream whole characters: print what the decoded text gained, minus a partial UTF-8 tail.
      std::string text = tok->decode(out);
      size_t end = text.size();
      size_t k = 0;
      while (k < 4 && k < end && (static_cast<unsigned char>(text[end - 1 - k]) & 0xC0) == 0x80) ++k;
      if (k < end && static_cast<unsigned char>(text[end - 1 - k]) >= 0xC0) {
        const unsigned char lead = static_cast<unsigned char>(text[end - 1 - k]);
        const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
        if (k + 1 < need) end -= k + 1;
      }
      if (end > printed.size() && text.compare(0, printed.size(), printed) == 0) {
        std::fwrite(text.data() + printed.size(), 1, end - printed.size(), stdout);
        std::fflush(stdout);
        printed = text.substr(0, end);
      }
    }
    if (i + 1 == a.n_predict) break;
    if (auto st = sess.decode(*t); !st.ok()) return rfail(st.to_string());
    ++steps;
  }
  const engine::parallel::CollStats& cs = sess.coll_stats();
  // Per decode token: this rank's collective payload and time.
  const double denom = std::max<uint32_t>(steps, 1);
  nlohmann::json mine = {{"rank", c.rank()},
                         {"layers", {(*model)->layer_begin(), (*model)->layer_end()}},
                         {"kv_heads", {(*model)->kv_heads().begin, (*model)->kv_heads().end}},
                         {"ff", {(*model)->ff().begin, (*model)->ff().end}},
                         {"vocab", {(*model)->vocab().begin, (*model)->vocab().end}},
                         {"shard_bytes", (*model)->shard_bytes()},
                         {"load_s", load_s},
                         {"bytes_sent_per_token", (cs.bytes - after_prefill.bytes) / denom},
                         {"coll_ms_per_token", (cs.seconds - after_prefill.seconds) * 1e3 / denom},
                         {"coll_calls_per_token", (cs.calls - after_prefill.calls) / denom},
                         {"decode_ms_per_token", decode_s * 1e3 / denom}};
  auto all = c.allgather(mine.dump(), Deadline::after(std::chrono::seconds(30)));
  if (!all.ok()) return rfail("report: " + all.status().to_string());
  if (rank != 0) return 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::string& r : *all) ranks.push_back(nlohmann::json::parse(r, nullptr, false));
  const double prefill_tok_s = prefill_s > 0 ? prompt.size() / prefill_s : 0;
  const double decode_tok_s = decode_s > 0 ? steps / decode_s : 0;
  if (a.json) {
    nlohmann::json j;
    j["tokens"] = out;
    j["text"] = tok->decode(out);
    j["prompt_tokens"] = prompt;
    j["n_prompt"] = prompt.size();
    j["n_gen"] = out.size();
    j["prefill_tok_s"] = prefill_tok_s;
    j["decode_tok_s"] = decode_tok_s;
    j["prefill_ms"] = prefill_s * 1e3;
    j["decode_ms"] = decode_s * 1e3;
    j["stop_reason"] = stop;
    j["threads"] = so.n_threads;
    j["nodes"] = c.world_size();
    j["parallel"] = a.parallel;
    j["provider"] = opts->provider;
    j["ranks"] = ranks;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("\n");
  std::fprintf(stderr,
               "\nprompt: %zu tokens in %.1f ms, %.2f tok/s | generation: %zu tokens, %.2f tok/s "
               "(%d ranks x %u threads, %s parallel over %s, %s)\n",
               prompt.size(), prefill_s * 1e3, prefill_tok_s, out.size(), decode_tok_s, c.world_size(), so.n_threads,
               pp ? "pipeline" : "tensor", opts->provider.c_str(), stop.c_str());
  for (const auto& r : ranks) {
    if (!r.is_object()) continue;
    std::fprintf(stderr,
                 "  rank %d: layers [%d,%d) kv heads [%d,%d) ffn [%d,%d) vocab [%d,%d), shard %.1f MiB | per token: %.0f B sent "
                 "(collective payload), %.3f ms in collectives (%.0f calls) of %.3f ms\n",
                 r["rank"].get<int>(), r["layers"][0].get<int>(), r["layers"][1].get<int>(), r["kv_heads"][0].get<int>(), r["kv_heads"][1].get<int>(), r["ff"][0].get<int>(),
                 r["ff"][1].get<int>(), r["vocab"][0].get<int>(), r["vocab"][1].get<int>(),
                 r["shard_bytes"].get<double>() / (1 << 20), r["bytes_sent_per_token"].get<double>(),
                 r["coll_ms_per_token"].get<double>(), r["coll_calls_per_token"].get<double>(),
                 r["decode_ms_per_token"].get<double>());
  }
  return 0;
}

}  // namespace

bool under_cluster_launcher() {
  const char* r = std::getenv("LATTICE_RANK");
  const char* w = std::getenv("LATTICE_WORLD_SIZE");
  return r && *r && w && *w;
}

std::string demo_model_path(std::string* error) {
  namespace fs = std::filesystem;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path dir = xdg && *xdg ? fs::path(xdg) / "lattice" : home && *home ? fs::path(home) / ".cache" / "lattice"
                                                                            : fs::temp_directory_path() / "lattice";
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path path = dir / "demo-llama-q8_0-d512-l4.gguf";
  if (fs::exists(path, ec)) return path.string();
  engine::MakeModelOptions o;
  o.arch = "llama";
  o.dim = 512;
  o.layers = 4;
  o.heads = 8;
  o.kv_heads = 4;
  o.ffn = 1408;
  o.vocab = 2048;
  o.type = "q8_0";
  o.pure = true;
  o.name = "lattice-demo";
  // Written under a temporary name and renamed: concurrent demos never see half a file.
  const fs::path tmp = dir / ("demo-" + std::to_string(::getpid()) + ".tmp.gguf");
  auto r = engine::make_model(o, tmp.string());
  if (!r.ok()) {
    *error = "demo model: " + r.status().to_string();
    return "";
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    *error = "demo model: " + ec.message();
    return "";
  }
  return path.string();
}

int run_distributed(DistRunArgs a) {
  if (a.n_predict < 0) return fail("-n must be >= 0");
  if (a.threads < 1 || a.threads > 1024) return fail("-t must be in 1..1024 with --nodes (threads per rank)");
  if (under_cluster_launcher()) return run_rank(a);
  if (a.demo) {
    if (a.model.empty()) {
      std::string err;
      a.model = demo_model_path(&err);
      if (a.model.empty()) return fail(err);
      std::fprintf(stderr, "lattice run: demo model %s\n", a.model.c_str());
    }
    if (a.prompt.empty()) a.prompt = "The cluster is one computer";
    if (a.nodes == 0) a.nodes = 2;
  }
  if (a.model.empty()) return fail("-m is required (or --demo)");
  if (a.prompt.empty()) return fail("the prompt (-p) is empty");
  if (!std::filesystem::exists(a.model)) return fail("no such model file: " + a.model);
  a.model = std::filesystem::absolute(a.model).string();
  return launch_local(a);
}

}  // namespace lattice::cli
