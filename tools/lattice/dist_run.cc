#include "dist_run.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
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
  if (!a.recover) argv.push_back("--no-recover");
  if (!a.inject_fault.empty()) {
    argv.push_back("--inject-fault");
    argv.push_back(a.inject_fault);
  }
  const crypto::ClusterSecret cluster_secret = crypto::ClusterSecret::generate();
  const std::string secret = cluster_secret.to_hex();
  // With recovery on, the launcher hosts the coordinator (the membership authority) itself,
  // so no rank is special: any of them, rank 0 included, can be lost and re-placed. The
  // launcher outlives every rank anyway (they die with it).
  std::unique_ptr<cluster::Coordinator> coordinator;
  if (a.recover) {
    cluster::CoordinatorOptions co;
    co.listen = "127.0.0.1:" + std::to_string(*port);
    co.world_size = a.nodes;
    co.secret = cluster_secret;
    auto started = cluster::Coordinator::start(co);
    if (!started.ok()) return fail("coordinator: " + started.status().to_string());
    coordinator = std::move(*started);
  }
  cluster::LaunchOptions lo;
  lo.prefix = false;  // rank 0 writes the text; the others write only errors (which name their rank)
  lo.keep_going = a.recover;  // survivors re-place the work; rank 0's status is the job's
  for (int r = 0; r < a.nodes; ++r) {
    cluster::LaunchRank lr;
    lr.rank = r;
    lr.argv = argv;
    lr.env = {{"LATTICE_RANK", std::to_string(r)},
              {"LATTICE_WORLD_SIZE", std::to_string(a.nodes)},
              {"LATTICE_COORDINATOR", "127.0.0.1:" + std::to_string(*port)},
              {"LATTICE_PROVIDER", a.provider},
              {"LATTICE_SECRET", secret},
              {"LATTICE_EXTERNAL_COORDINATOR", a.recover ? "1" : "0"}};
    lo.ranks.push_back(std::move(lr));
  }
  auto code = cluster::run_ranks(lo);
  if (!code.ok()) return fail(code.status().to_string());
  return *code;
}

// This rank's shard of the model and its session (tensor or pipeline parallel), for the
// cluster's current membership.
struct Placement {
  std::unique_ptr<engine::parallel::TpModel> model;
  std::unique_ptr<engine::parallel::TpSession> tp;
  std::unique_ptr<engine::parallel::PpSession> pp;
  double load_s = 0;

  Status prefill(std::span<const int32_t> t) { return tp ? tp->prefill(t) : pp->prefill(t); }
  Status decode(int32_t t) { return tp ? tp->decode(t) : pp->decode(t); }
  Result<int32_t> sample(engine::Sampler& s) { return tp ? tp->sample(s) : pp->sample(s); }
  const engine::parallel::CollStats& coll_stats() const { return tp ? tp->coll_stats() : pp->coll_stats(); }
};

// Maps this rank's shard for the cluster's current membership: `weights` are the shares of
// the current members (empty: equal).
Result<std::unique_ptr<Placement>> place(const DistRunArgs& a, cluster::Cluster& c, coll::Communicator& comm,
                                         std::vector<double> weights, const engine::parallel::TpSessionOptions& so) {
  auto pl = std::make_unique<Placement>();
  const auto t_load = Clock::now();
  const bool pp = a.parallel == "pp";
  engine::parallel::TpLoadOptions lo;
  lo.pack = !a.no_pack;
  lo.weights = std::move(weights);
  LATTICE_ASSIGN_OR_RETURN(auto file, engine::GgufFile::open(a.model));
  // Pipeline stages in the order of the collectives' route: on a ring of cables, consecutive
  // stages are then cable neighbours whatever the hosts' order in the topology file.
  std::vector<int> stage_order;
  if (pp) {
    LATTICE_RETURN_IF_ERROR(comm.refresh());
    if (!comm.full_mesh()) {
      if (comm.route().order.empty()) return Unavailable("pipeline: no route through every rank over the cables");
      stage_order = comm.route().order;
    } else {
      for (int r = 0; r < c.world_size(); ++r) stage_order.push_back(r);
    }
    const int stage = static_cast<int>(std::find(stage_order.begin(), stage_order.end(), c.rank()) - stage_order.begin());
    std::vector<double> stage_weights;
    if (!lo.weights.empty())
      for (int r : stage_order) stage_weights.push_back(lo.weights[static_cast<size_t>(r)]);
    // Stage ranges need the layer count: read from the header before binding.
    auto arch_name = file->metadata().get_string("general.architecture");
    const engine::ArchInfo* arch = arch_name.ok() ? engine::find_arch(*arch_name) : nullptr;
    if (!arch) return InvalidArgument("unsupported or missing architecture");
    LATTICE_ASSIGN_OR_RETURN(auto hp, engine::read_hparams(file->metadata(), *arch));
    LATTICE_ASSIGN_OR_RETURN(auto ranges, engine::parallel::pp_layers(hp.n_layer, c.world_size(), stage_weights));
    lo.layer_begin = ranges[static_cast<size_t>(stage)].begin;
    lo.layer_end = ranges[static_cast<size_t>(stage)].end;
    lo.weights.clear();  // the stage's own TP world is 1
  }
  LATTICE_ASSIGN_OR_RETURN(pl->model, pp ? engine::parallel::TpModel::bind(std::move(file), 0, 1, lo)
                                         : engine::parallel::TpModel::bind(std::move(file), c.rank(), c.world_size(), lo));
  pl->load_s = since(t_load);
  if (pp) {
    engine::parallel::PpSessionOptions po;
    po.session = so;
    po.session.n_batch = 32;  // micro-batches of the prefill
    po.stage_order = stage_order;
    LATTICE_ASSIGN_OR_RETURN(pl->pp, engine::parallel::PpSession::create(*pl->model, comm, po));
  } else {
    LATTICE_ASSIGN_OR_RETURN(pl->tp, engine::parallel::TpSession::create(*pl->model, &comm, so));
  }
  return pl;
}

// A failure the survivors can recover from: a lost peer (or a collective that timed out
// waiting on one).
bool recoverable(const Status& s) {
  return s.code() == ErrorCode::kPeerLost || s.code() == ErrorCode::kTimeout || s.code() == ErrorCode::kCancelled;
}

// "2@5" -> rank 2 kills itself (SIGKILL) when it has generated 5 tokens; "2@5:stop" -> it
// stops itself (SIGSTOP: a hung node, found only by the heartbeats).
bool parse_fault(std::string text, int* rank, int* token, int* sig) {
  *sig = SIGKILL;
  if (text.empty()) return true;
  if (const size_t colon = text.find(':'); colon != std::string::npos) {
    const std::string how = text.substr(colon + 1);
    if (how == "stop") *sig = SIGSTOP;
    else if (how != "kill") return false;
    text.resize(colon);
  }
  const size_t at = text.find('@');
  if (at == std::string::npos) return false;
  char* end = nullptr;
  const long r = std::strtol(text.c_str(), &end, 10);
  if (end != text.c_str() + at || at == 0 || r < 0 || r > 4096) return false;
  const long t = std::strtol(text.c_str() + at + 1, &end, 10);
  if (end != text.c_str() + text.size() || at + 1 == text.size() || t < 0 || t > (1L << 30)) return false;
  *rank = static_cast<int>(r);
  *token = static_cast<int>(t);
  return true;
}

// One rank.
int run_rank(const DistRunArgs& a) {
  auto opts = cluster::cluster_options_from_env();
  if (!opts.ok()) return fail(opts.status().to_string());
  const int rank0 = opts->rank;  // this process's rank in the first epoch: its name in logs
  auto rfail = [rank0](const std::string& m) {
    std::fprintf(stderr, "lattice run: rank %d: %s\n", rank0, m.c_str());
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
  int fault_rank = -1, fault_token = -1, fault_sig = SIGKILL;
  if (!parse_fault(a.inject_fault, &fault_rank, &fault_token, &fault_sig))
    return rfail("--inject-fault wants RANK@TOKEN[:kill|:stop], e.g. 2@5");

  auto cl = cluster::join_cluster(*opts, Deadline::after(std::chrono::seconds(60)));
  if (!cl.ok()) return rfail("could not join: " + cl.status().to_string());
  cluster::Cluster& c = **cl;
  const int world0 = c.world_size();
  auto comm = coll::Communicator::create(c);
  if (!comm.ok()) return rfail(comm.status().to_string());

  bool split_ok = true;
  const std::vector<double> weights0 = parse_split(a.split, &split_ok);
  if (!split_ok || (!weights0.empty() && weights0.size() != static_cast<size_t>(world0)))
    return rfail("--split needs one positive share per rank");
  // Original ranks of the current members, by current rank (shrink renumbers in this order).
  std::vector<int> members(static_cast<size_t>(world0));
  for (int r = 0; r < world0; ++r) members[static_cast<size_t>(r)] = r;
  auto shares = [&]() {
    std::vector<double> w;
    if (!weights0.empty())
      for (int m : members) w.push_back(weights0[static_cast<size_t>(m)]);
    return w;
  };

  // The tokenizer and the prompt need only the file's metadata.
  std::vector<int32_t> prompt;
  std::optional<engine::Tokenizer> tok;
  {
    auto file = engine::GgufFile::open(a.model);
    if (!file.ok()) return rfail(file.status().to_string());
    auto t = engine::tokenizer_from_gguf(**file);
    if (!t.ok()) return rfail("tokenizer: " + t.status().to_string());
    tok.emplace(std::move(*t));
  }
  engine::GenerateOptions go;
  go.prompt = a.prompt;
  go.n_predict = static_cast<uint32_t>(a.n_predict);
  go.chat = a.chat;
  prompt = engine::prompt_tokens(*tok, go);
  if (prompt.empty()) return rfail("the prompt is empty (no tokens)");
  engine::parallel::TpSessionOptions so;
  so.n_ctx = a.ctx > 0 ? static_cast<uint32_t>(a.ctx) : static_cast<uint32_t>(prompt.size() + go.n_predict);
  so.n_threads = static_cast<uint32_t>(std::max(1, a.threads));
  if (prompt.size() + go.n_predict > so.n_ctx) return rfail("prompt + -n exceed --ctx");

  auto placed = place(a, c, **comm, shares(), so);
  if (!placed.ok()) return rfail(placed.status().to_string());
  std::unique_ptr<Placement> sess = std::move(*placed);
  const double load_s = sess->load_s;

  auto sampler = std::make_unique<engine::Sampler>(sp);
  for (int32_t t : prompt) sampler->accept(t);
  std::vector<int32_t> out;
  std::string printed;
  // Streams whole characters: prints what the decoded text gained, minus a partial UTF-8 tail.
  auto emit = [&]() {
    if (c.rank() != 0 || a.json) return;
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
  };

  // After a peer loss: every survivor moves to the next epoch, they agree on the tokens
  // generated so far and the sampler's state (the rank that got furthest wins: its tokens may
  // already be printed), the shards are re-placed over the survivors, and the new session
  // re-reads the prompt and the generated tokens. Returns that prefill's status (it may fail
  // with another loss: the caller recovers again).
  nlohmann::json recoveries = nlohmann::json::array();
  auto recover = [&](const Status& cause) -> Status {
    const auto t_rec = Clock::now();
    const int old_world = c.world_size();
    sess.reset();
    LATTICE_RETURN_IF_ERROR(c.shrink(Deadline::after(std::chrono::seconds(30))).with_context("shrink"));
    const double shrink_ms = since(t_rec) * 1e3;
    // Every survivor's progress: the tokens it accepted and its sampler's draws. The furthest
    // wins (its tokens may already be printed); the others must hold a prefix of them.
    nlohmann::json mine = {{"tokens", out}, {"draws", sampler->draws()}};
    LATTICE_ASSIGN_OR_RETURN(auto all, c.allgather(mine.dump(), Deadline::after(std::chrono::seconds(30))));
    std::vector<std::vector<int32_t>> reports;
    std::vector<uint64_t> draws;
    for (const std::string& s : all) {
      auto j = nlohmann::json::parse(s, nullptr, false);
      if (!j.is_object() || !j.contains("tokens") || !j["tokens"].is_array() || !j.contains("draws") ||
          !j["draws"].is_number_unsigned())
        return Internal("a survivor sent a malformed progress report");
      std::vector<int32_t> toks;
      for (const auto& t : j["tokens"]) {
        if (!t.is_number_integer()) return Internal("a survivor sent a malformed progress report");
        toks.push_back(t.get<int32_t>());
      }
      reports.push_back(std::move(toks));
      draws.push_back(j["draws"].get<uint64_t>());
    }
    if (reports.empty()) return Internal("no progress reports after the shrink");
    size_t best = 0;
    for (size_t i = 1; i < reports.size(); ++i)
      if (reports[i].size() > reports[best].size()) best = i;
    for (const auto& t : reports)
      if (!std::equal(t.begin(), t.end(), reports[best].begin()))
        return Internal("survivors disagree on the tokens generated so far");
    const uint64_t best_draws = draws[best];
    // The members' first-epoch ranks, from the coordinator's plan.
    const std::vector<int> now_members = c.origins();
    std::vector<int> lost;
    for (int m : members)
      if (std::find(now_members.begin(), now_members.end(), m) == now_members.end()) lost.push_back(m);
    members = now_members;
    out = reports[best];
    sampler = std::make_unique<engine::Sampler>(sp);
    for (int32_t t : prompt) sampler->accept(t);
    for (int32_t t : out) sampler->accept(t);
    sampler->skip_draws(best_draws);
    const auto t_place = Clock::now();
    LATTICE_ASSIGN_OR_RETURN(sess, place(a, c, **comm, shares(), so));
    const double place_ms = since(t_place) * 1e3;
    std::vector<int32_t> context = prompt;
    context.insert(context.end(), out.begin(), out.end());
    const auto t_prefill = Clock::now();
    Status st = sess->prefill(context);
    const double prefill_ms = since(t_prefill) * 1e3;
    const double ms = since(t_rec) * 1e3;
    std::string lost_text;
    for (int m : lost) lost_text += (lost_text.empty() ? "" : ",") + std::to_string(m);
    recoveries.push_back({{"lost_ranks", lost},
                          {"at_token", out.size()},
                          {"epoch", c.epoch()},
                          {"world_before", old_world},
                          {"world_after", c.world_size()},
                          {"recover_ms", ms},
                          {"shrink_ms", shrink_ms},
                          {"place_ms", place_ms},
                          {"prefill_ms", prefill_ms},
                          {"cause", cause.to_string()}});
    // The first rank prints the text; if that was the lost one, the new first rank takes over
    // from the agreed tokens (the lost printer had shown at most those).
    if (c.rank() == 0 && rank0 != 0 && printed.empty() && !a.json) printed = tok->decode(out);
    if (c.rank() == 0)
      std::fprintf(stderr,
                   "\nlattice run: lost rank %s at token %zu (%s); re-placed the model on %d rank(s), epoch %llu, "
                   "in %.0f ms; continuing\n",
                   lost_text.empty() ? "?" : lost_text.c_str(), out.size(), cause.message().c_str(), c.world_size(),
                   static_cast<unsigned long long>(c.epoch()), ms);
    emit();
    return st;
  };

  auto t0 = Clock::now();
  Status st = sess->prefill(prompt);
  const double prefill_s = since(t0);
  engine::parallel::CollStats decode_cs;  // collectives of decode steps only, summed over placements
  std::string stop = "length";
  double decode_s = 0;
  Clock::time_point t_first = Clock::now();
  uint32_t steps = 0;
  for (;;) {
    if (!st.ok()) {
      if (!a.recover || !recoverable(st)) return rfail(st.to_string());
      if (static_cast<int>(recoveries.size()) >= world0 - 1 || c.world_size() <= 1)
        return rfail(st.to_string() + " (no survivors left to take the work over)");
      st = recover(st);
      if (!st.ok() && !recoverable(st)) return rfail("recovery failed: " + st.to_string());
      continue;
    }
    if (static_cast<int>(out.size()) >= a.n_predict) break;
    if (rank0 == fault_rank && static_cast<int>(out.size()) == fault_token) {
      std::fprintf(stderr, "lattice run: rank %d: --inject-fault: %s myself at token %zu\n", rank0,
                   fault_sig == SIGKILL ? "killing (SIGKILL)" : "stopping (SIGSTOP)", out.size());
      std::fflush(stderr);
      ::raise(fault_sig);
    }
    auto t = sess->sample(*sampler);
    if (!t.ok()) {
      st = t.status();
      continue;
    }
    // Decode time runs from the first chosen token to the last: decode and the choice of the
    // next token together (a pipeline's first stage only knows a step ended when the token
    // comes back).
    if (out.empty()) t_first = Clock::now();
    else decode_s = since(t_first);
    sampler->accept(*t);
    if (!a.ignore_eos && tok->is_eog(*t)) {
      stop = "eog";
      break;
    }
    out.push_back(*t);
    emit();
    if (static_cast<int>(out.size()) == a.n_predict) break;
    const engine::parallel::CollStats before = sess->coll_stats();
    st = sess->decode(*t);
    if (st.ok()) {
      const engine::parallel::CollStats& after = sess->coll_stats();
      decode_cs.calls += after.calls - before.calls;
      decode_cs.bytes += after.bytes - before.bytes;
      decode_cs.seconds += after.seconds - before.seconds;
      ++steps;
    }
  }
  // Per decode token: this rank's collective payload and time.
  const double denom = std::max<uint32_t>(steps, 1);
  nlohmann::json mine = {{"rank", c.rank()},
                         {"first_rank", rank0},
                         {"layers", {sess->model->layer_begin(), sess->model->layer_end()}},
                         {"kv_heads", {sess->model->kv_heads().begin, sess->model->kv_heads().end}},
                         {"ff", {sess->model->ff().begin, sess->model->ff().end}},
                         {"vocab", {sess->model->vocab().begin, sess->model->vocab().end}},
                         {"shard_bytes", sess->model->shard_bytes()},
                         {"load_s", load_s},
                         {"bytes_sent_per_token", decode_cs.bytes / denom},
                         {"coll_ms_per_token", decode_cs.seconds * 1e3 / denom},
                         {"coll_calls_per_token", decode_cs.calls / denom},
                         {"decode_ms_per_token", decode_s * 1e3 / denom}};
  auto all = c.allgather(mine.dump(), Deadline::after(std::chrono::seconds(30)));
  if (!all.ok()) return rfail("report: " + all.status().to_string());
  if (c.rank() != 0) return 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (const std::string& r : *all) ranks.push_back(nlohmann::json::parse(r, nullptr, false));
  const double prefill_tok_s = prefill_s > 0 ? prompt.size() / prefill_s : 0;
  const double decode_tok_s = decode_s > 0 ? steps / decode_s : 0;
  const bool pp = a.parallel == "pp";
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
    j["nodes_at_start"] = world0;
    j["epoch"] = c.epoch();
    j["recoveries"] = recoveries;
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
  if (!recoveries.empty())
    std::fprintf(stderr, "recovered from %zu loss(es): started on %d ranks, finished on %d (epoch %llu)\n",
                 recoveries.size(), world0, c.world_size(), static_cast<unsigned long long>(c.epoch()));
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
