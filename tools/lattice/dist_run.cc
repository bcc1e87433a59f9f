#include "dist_run.h"
#include "demo_model.h"

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
#include "lattice/cluster/hostfile_job.h"
#include "lattice/cluster/launcher.h"
#include "lattice/coll/coll.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/engine/gguf/presets.h"
#include "lattice/engine/model/arch.h"
#include "lattice/engine/model/hparams.h"
#include "lattice/engine/parallel/auto_mode.h"
#include "lattice/engine/parallel/distributed.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/engine/sampler/sampler.h"
#include "lattice/engine/tokenizer/from_gguf.h"

namespace lattice::cli {
namespace {

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


// The environment variable that carries a local run's options to its ranks, as one JSON
// value (run_job_to_json / run_job_from_json), instead of flag by flag.
constexpr const char* kRunJobEnv = "LATTICE_RUN_JOB";

nlohmann::json run_job_to_json(const RunArgs& a) {
  return {{"model", a.model},         {"prompt", a.prompt},
          {"parallel", a.parallel},   {"split", a.split},
          {"n_predict", a.n_predict}, {"threads", a.threads},
          {"temp", a.temp},           {"seed", a.seed},
          {"seed_set", a.seed_set},   {"top_k", a.top_k},
          {"top_p", a.top_p},         {"min_p", a.min_p},
          {"repeat_penalty", a.repeat_penalty}, {"repeat_last_n", a.repeat_last_n},
          {"ctx", a.ctx},             {"chat", a.chat},
          {"json", a.json},           {"no_pack", a.no_pack},
          {"ignore_eos", a.ignore_eos}, {"recover", a.recover},
          {"inject_fault", a.inject_fault}, {"ep_replicate", a.ep_replicate},
          {"ep_prefill", a.ep_prefill}, {"ep_a2a_min_rows", a.ep_a2a_min_rows},
          {"batch", a.batch}};
}

// Every field must be present with the right type: the value comes from another process.
Result<RunArgs> run_job_from_json(const std::string& text) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return Corrupt(std::string(kRunJobEnv) + " is not a JSON object");
  RunArgs a;
  Status bad = Status::Ok();
  auto get = [&](const char* key, auto& out) {
    using T = std::decay_t<decltype(out)>;
    if (!bad.ok()) return;
    auto it = j.find(key);
    bool ok = it != j.end();
    if (ok) {
      if constexpr (std::is_same_v<T, bool>) ok = it->is_boolean();
      else if constexpr (std::is_same_v<T, std::string>) ok = it->is_string();
      else if constexpr (std::is_floating_point_v<T>) ok = it->is_number();
      else if constexpr (std::is_unsigned_v<T>) ok = it->is_number_unsigned();
      else ok = it->is_number_integer();
    }
    if (!ok) {
      bad = Corrupt(std::string(kRunJobEnv) + ": field '" + key + "' is missing or of the wrong type");
      return;
    }
    out = it->get<T>();
  };
  get("model", a.model), get("prompt", a.prompt), get("parallel", a.parallel), get("split", a.split);
  get("n_predict", a.n_predict), get("threads", a.threads), get("temp", a.temp), get("seed", a.seed);
  get("seed_set", a.seed_set), get("top_k", a.top_k), get("top_p", a.top_p), get("min_p", a.min_p);
  get("repeat_penalty", a.repeat_penalty), get("repeat_last_n", a.repeat_last_n), get("ctx", a.ctx);
  get("chat", a.chat), get("json", a.json), get("no_pack", a.no_pack), get("ignore_eos", a.ignore_eos);
  get("recover", a.recover), get("inject_fault", a.inject_fault), get("ep_replicate", a.ep_replicate);
  get("ep_prefill", a.ep_prefill), get("ep_a2a_min_rows", a.ep_a2a_min_rows), get("batch", a.batch);
  if (!bad.ok()) return bad;
  return a;
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

// Everything a rank would refuse, checked before any rank starts.
std::string check_args(const RunArgs& a, int world) {
  if (a.parallel != "tp" && a.parallel != "pp" && a.parallel != "ep" && a.parallel != "auto")
    return "--parallel must be tp, pp, ep or auto";
  if (a.ep_prefill != "auto" && a.ep_prefill != "reduce" && a.ep_prefill != "a2a")
    return "--ep-prefill must be auto, reduce or a2a";
  if (a.batch < 1 || a.batch > 65536) return "--prefill-batch must be in 1..65536";
  if (a.ep_a2a_min_rows < -1) return "--ep-a2a-min-rows must be >= 0";
  bool split_ok = true;
  const auto split = parse_split(a.split, &split_ok);
  if (!split_ok || (!split.empty() && world > 0 && split.size() != static_cast<size_t>(world)))
    return "--split needs one positive share per rank (e.g. --nodes 2 --split 3,1)";
  if (auto st = sampler_params(a).validate(); !st.ok()) return st.message();
  int fr, ft, fs;
  if (!parse_fault(a.inject_fault, &fr, &ft, &fs)) return "--inject-fault wants RANK@TOKEN[:kill|:stop], e.g. 2@5";
  if (!a.inject_fault.empty() && world > 0 && fr >= world)
    return "--inject-fault: rank " + std::to_string(fr) + " is not one of the " + std::to_string(world) + " ranks";
  if (a.ctx < 0) return "--ctx must be >= 0";
  if (!(a.ep_replicate >= 0 && a.ep_replicate <= 1)) return "--ep-replicate must be in [0, 1]";
  if (!(a.deadline_s >= 0 && a.deadline_s <= 1e7)) return "--deadline-s must be 0 (none) or a positive number of seconds";
  if (auto b = cluster::parse_bind(a.bind); !b.ok()) return b.status().message();
  return "";
}

// `auto`: plan's rule (parallel/auto_mode.h), from the file's header; every rank decides
// the same. A file it cannot read is left to the ranks' own error (tp meanwhile).
std::string resolve_parallel(const RunArgs& a, int world) {
  if (a.parallel != "auto") return a.parallel;
  auto file = engine::GgufFile::open(a.model);
  if (!file.ok()) return "tp";
  auto name = (*file)->metadata().get_string("general.architecture");
  const engine::ArchInfo* arch = name.ok() ? engine::find_arch(*name) : nullptr;
  if (!arch) return "tp";
  auto hp = engine::read_hparams((*file)->metadata(), *arch);
  if (!hp.ok()) return "tp";
  switch (engine::parallel::auto_mode(*hp, std::max(world, 1))) {
    case engine::parallel::ParallelMode::kExpert: return "ep";
    case engine::parallel::ParallelMode::kPipeline: return "pp";
    default: return "tp";
  }
}

// Parent: start `nodes` copies of this command as ranks and wait for them.
int launch_local(RunArgs a) {
  if (a.nodes < 1 || a.nodes > 64) return fail("--nodes must be in 1..64");
  if (!cluster::cluster_provider_ok(a.provider))
    return fail("--provider must be shm or tcp (emulated links: tcp?latency_us=L&gbytes_s=R, verbs-emu://apple-tb5?...)");
  if (std::string e = check_args(a, a.nodes); !e.empty()) return fail(e);
  a.parallel = resolve_parallel(a, a.nodes);
  // Every rank must sample with the same seed: resolve a random one here.
  if (!a.seed_set) a.seed = static_cast<uint64_t>(std::random_device{}()), a.seed_set = true;
  cluster::LocalJob job;
  job.world_size = a.nodes;
  job.argv = {cluster::self_exe(), "run"};
  job.provider = a.provider;
  // With recovery on, the launcher hosts the coordinator (the membership authority) itself,
  // so no rank is special: any of them, rank 0 included, can be lost and re-placed.
  job.host_coordinator = a.recover;
  job.env = {{kRunJobEnv, run_job_to_json(a).dump()}};
  job.launch.prefix = false;          // rank 0 writes the text; the others only errors (naming their rank)
  job.launch.keep_going = a.recover;  // survivors re-place the work; rank 0's status is the job's
  // Each rank on CPUs of its own when they fit, recovery or not: an unpinned pair of ranks
  // decodes 0.86x one process, a pinned pair 0.92x (docs/BENCHMARKS.md). A survivor keeps
  // its CPU; the lost rank's CPU stays idle (a rank runs -t threads, not more).
  // Beyond the CPUs the scheduler places the ranks unless --bind cores pins them round the
  // CPUs: 3 ranks on 2 cores then always share one core two to one.
  const cluster::Bind bind = *cluster::parse_bind(a.bind);
  job.bind = bind == cluster::Bind::kAuto ? cluster::bind_when_fits(a.nodes, a.threads) : bind;
  // A job deadline bounds the launcher's wait: ranks neither progressing nor exiting by then
  // (a stopped one, one cut off) are stopped and the run exits 124, as timeout(1) does.
  job.launch.deadline = std::chrono::milliseconds(static_cast<int64_t>(a.deadline_s * 1000));
  // The coordinator hosted here declares a silent rank dead after the same timeout the ranks
  // are given (LATTICE_FAILURE_TIMEOUT_MS): cluster::run_local_job takes it from the environment.
  auto code = cluster::run_local_job(std::move(job));
  if (!code.ok()) return fail(code.status().to_string());
  return *code;
}

// --discover: the same job, one rank per discovered host (cluster/hostfile_job.h).
int launch_discovered(RunArgs a) {
  if (std::string e = check_discover_flags(a.discover); !e.empty()) return fail(e);
  if (std::string e = check_args(a, a.discover.expect); !e.empty()) return fail(e);
  a.parallel = resolve_parallel(a, std::max(1, a.discover.expect));
  if (!a.seed_set) a.seed = static_cast<uint64_t>(std::random_device{}()), a.seed_set = true;
  cluster::HostfileJob job;
  job.argv = {cluster::self_exe(), "run"};
  job.env = {{kRunJobEnv, run_job_to_json(a).dump()}};
  job.launch.prefix = false;
  job.launch.keep_going = a.recover;
  auto code = run_on_discovered_hosts(a.discover, std::move(job), "run");
  if (!code.ok()) return fail(code.status().to_string());
  return *code;
}

// One rank: joins the cluster, and generation, recovery and the report are the engine's
// (engine::parallel::generate_distributed); this prints.
int run_rank(RunArgs a) {
  if (const char* job = std::getenv(kRunJobEnv); job && *job) {
    auto parsed = run_job_from_json(job);
    if (!parsed.ok()) return fail(parsed.status().to_string());
    a = std::move(*parsed);
  }
  auto opts = cluster::cluster_options_from_env();
  if (!opts.ok()) return fail(opts.status().to_string());
  const int rank0 = opts->rank;  // this process's rank in the first epoch: its name in logs
  auto rfail = [rank0](const std::string& m) {
    std::fprintf(stderr, "lattice run: rank %d: %s\n", rank0, m.c_str());
    return 1;
  };
  if (std::string e = check_args(a, opts->world_size); !e.empty()) return rfail(e);
  int fault_rank = -1, fault_token = -1, fault_sig = SIGKILL;
  (void)parse_fault(a.inject_fault, &fault_rank, &fault_token, &fault_sig);

  // The tokenizer and the prompt need only the file's metadata.
  std::optional<engine::Tokenizer> tok;
  {
    auto file = engine::GgufFile::open(a.model);
    if (!file.ok()) return rfail(file.status().to_string());
    if (Status st = engine::check_has_weights(**file); !st.ok()) return rfail(a.model + ": " + st.to_string());
    auto t = engine::tokenizer_from_gguf(**file);
    if (!t.ok()) return rfail("tokenizer: " + t.status().to_string());
    tok.emplace(std::move(*t));
  }
  engine::GenerateOptions go;
  go.prompt = a.prompt;
  go.chat = a.chat;
  engine::GenerationRequest req;
  req.prompt = engine::prompt_tokens(*tok, go);
  req.n_predict = static_cast<uint32_t>(std::max(a.n_predict, 0));
  req.stop_at_eog = !a.ignore_eos;
  req.sampler = sampler_params(a);
  if (req.prompt.empty()) return rfail("the prompt is empty (no tokens)");

  auto cl = cluster::join_cluster(*opts, Deadline::after(std::chrono::seconds(60)));
  if (!cl.ok()) return rfail("could not join: " + cl.status().to_string());
  cluster::Cluster& c = **cl;

  engine::parallel::DistOptions d;
  d.model_path = a.model;
  a.parallel = resolve_parallel(a, c.world_size());
  d.parallel = a.parallel == "pp"   ? engine::parallel::Parallelism::kPipeline
               : a.parallel == "ep" ? engine::parallel::Parallelism::kExpert
                                    : engine::parallel::Parallelism::kTensor;
  bool split_ok = true;
  d.split = parse_split(a.split, &split_ok);
  d.n_threads = static_cast<uint32_t>(std::max(1, a.threads));
  d.n_ctx = a.ctx > 0 ? static_cast<uint32_t>(a.ctx) : 0;
  d.pack = !a.no_pack;
  d.recover = a.recover;
  d.expert_spare = a.ep_replicate;
  d.n_batch = static_cast<uint32_t>(a.batch);
  d.ep_prefill = a.ep_prefill == "a2a"      ? engine::EpPrefill::kAllToAll
                 : a.ep_prefill == "reduce" ? engine::EpPrefill::kReduce
                                            : engine::EpPrefill::kAuto;
  if (a.ep_a2a_min_rows >= 0) d.a2a_min_rows = static_cast<uint32_t>(a.ep_a2a_min_rows);

  engine::parallel::DistHooks hooks;
  if (!a.json) {
    hooks.on_text = [](std::string_view piece) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    };
  }
  hooks.before_token = [&](size_t n) {
    if (rank0 == fault_rank && static_cast<int>(n) == fault_token) {
      std::fprintf(stderr, "lattice run: rank %d: --inject-fault: %s myself at token %zu\n", rank0,
                   fault_sig == SIGKILL ? "killing (SIGKILL)" : "stopping (SIGSTOP)", n);
      std::fflush(stderr);
      ::raise(fault_sig);
    }
    return Status::Ok();
  };
  hooks.on_recovery = [&](const engine::parallel::RecoveryEvent& ev) {
    std::string lost;
    for (int m : ev.lost_ranks) lost += (lost.empty() ? "" : ",") + std::to_string(m);
    if (lost.empty())  // every rank answered when the survivors regrouped: a stall, not a loss
      std::fprintf(stderr,
                   "\nlattice run: a step failed at token %zu (%s) but every rank answered; re-formed on %d rank(s), "
                   "epoch %llu, in %.0f ms; continuing\n",
                   ev.at_token, ev.cause.c_str(), ev.world_after, static_cast<unsigned long long>(ev.epoch),
                   ev.recover_ms);
    else
      std::fprintf(stderr,
                   "\nlattice run: lost rank %s at token %zu (%s); re-placed the model on %d rank(s), epoch %llu, "
                   "in %.0f ms; continuing\n",
                   lost.c_str(), ev.at_token, ev.cause.c_str(), ev.world_after, static_cast<unsigned long long>(ev.epoch),
                   ev.recover_ms);
  };
  // The prompt, then the text as it is generated (to a terminal or a pipe alike), then the
  // report.
  if (c.rank() == 0 && !a.json) {
    std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
    std::fflush(stdout);
  }
  auto res = engine::parallel::generate_distributed(c, d, *tok, req, hooks);
  if (!res.ok()) return rfail(res.status().to_string());
  const engine::parallel::DistResult& R = *res;
  if (R.rank != 0) return 0;
  const double prefill_tok_s = R.gen.prefill_seconds > 0 ? R.gen.prompt_tokens.size() / R.gen.prefill_seconds : 0;
  const double decode_tok_s = R.decode_s > 0 ? R.steps / R.decode_s : 0;
  const bool pp = a.parallel == "pp";
  if (a.json) {
    nlohmann::json j;
    j["tokens"] = R.gen.tokens;
    j["text"] = R.gen.text;
    j["prompt_tokens"] = R.gen.prompt_tokens;
    j["n_prompt"] = R.gen.prompt_tokens.size();
    j["n_gen"] = R.gen.tokens.size();
    j["prefill_tok_s"] = prefill_tok_s;
    j["decode_tok_s"] = decode_tok_s;
    j["prefill_ms"] = R.gen.prefill_seconds * 1e3;
    j["decode_ms"] = R.decode_s * 1e3;
    nlohmann::json clock = nlohmann::json::array();
    for (double t : R.token_clock_s) clock.push_back(t * 1e3);
    j["token_clock_ms"] = clock;
    j["stop_reason"] = R.gen.stop_reason;
    j["threads"] = d.n_threads;
    j["nodes"] = R.world;
    j["nodes_at_start"] = R.world_at_start;
    j["epoch"] = R.epoch;
    nlohmann::json rec = nlohmann::json::array();
    for (const auto& ev : R.recoveries) rec.push_back(ev.to_json());
    j["recoveries"] = rec;
    j["parallel"] = a.parallel;
    j["provider"] = opts->provider;
    j["ranks"] = R.ranks;
    if (!R.expert_load.is_null()) j["expert_load"] = R.expert_load;
    if (!R.ep_prefill.is_null()) j["ep_prefill"] = R.ep_prefill;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr,
               "\nprompt: %zu tokens in %.1f ms, %.2f tok/s | generation: %zu tokens, %.2f tok/s "
               "(%d ranks x %u thread%s, %s parallel over %s, %s)\n",
               R.gen.prompt_tokens.size(), R.gen.prefill_seconds * 1e3, prefill_tok_s, R.gen.tokens.size(),
               decode_tok_s, R.world, d.n_threads, d.n_threads == 1 ? "" : "s", pp ? "pipeline" : a.parallel == "ep" ? "expert" : "tensor",
               opts->provider.c_str(), R.gen.stop_reason == "length" ? "stopped at -n" : R.gen.stop_reason.c_str());
  if (!R.recoveries.empty())
    std::fprintf(stderr, "recovered from %zu loss(es): started on %d ranks, finished on %d (epoch %llu)\n",
                 R.recoveries.size(), R.world_at_start, R.world, static_cast<unsigned long long>(R.epoch));
  for (const auto& r : R.ranks) {
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
  if (R.ep_prefill.is_object()) {
    const auto& p = R.ep_prefill;
    std::fprintf(stderr, "  prefill (expert parallel): %s path, %llu all-to-all step(s) of %llu rows, %llu reduce step(s) of %llu rows; rule %s\n",
                 p["path"].get<std::string>().c_str(), static_cast<unsigned long long>(p["a2a_steps"].get<uint64_t>()),
                 static_cast<unsigned long long>(p["a2a_rows"].get<uint64_t>()),
                 static_cast<unsigned long long>(p["reduce_steps"].get<uint64_t>()),
                 static_cast<unsigned long long>(p["reduce_rows"].get<uint64_t>()), p["rule"].get<std::string>().c_str());
  }
  if (R.expert_load.is_object() && R.expert_load["mode"] == "ep") {
    std::fprintf(stderr, "  experts (decode): balance %.3f (busiest rank's rows vs a perfect split)\n",
                 R.expert_load["balance"].get<double>());
    for (const auto& r : R.expert_load["per_rank"]) {
      std::string list;
      const auto& ids = r["experts"];
      const auto& tok = r["tokens"];
      for (size_t i = 0; i < ids.size(); ++i)
        list += (list.empty() ? "" : " ") + std::to_string(ids[i].get<int>()) + ":" + std::to_string(tok[i].get<uint64_t>());
      std::fprintf(stderr, "  rank %d: %zu experts, %llu rows | expert:tokens %s\n", r["rank"].get<int>(), ids.size(),
                   static_cast<unsigned long long>(r.value("rows", uint64_t{0})), list.c_str());
    }
  }
  return 0;
}

}  // namespace

engine::SamplerParams sampler_params(const RunArgs& a) {
  engine::SamplerParams sp;
  sp.temperature = a.temp;
  sp.top_k = a.top_k;
  sp.top_p = a.top_p;
  sp.min_p = a.min_p;
  sp.repeat_penalty = a.repeat_penalty;
  sp.repeat_last_n = a.repeat_last_n;
  sp.seed = a.seed_set ? a.seed : 0;  // the launcher passes a seed; under `lattice launch` give one
  return sp;
}

bool parse_inject_fault(const std::string& text, int* rank, int* at, int* sig) { return parse_fault(text, rank, at, sig); }

bool under_cluster_launcher() {
  auto env = cluster::RankEnv::from_env();
  return env.ok() && env->launched;
}

int run_distributed(RunArgs a) {
  if (a.threads <= 0) a.threads = 1;  // -t 0 (all cores) means one thread per rank here
  if (a.n_predict < 0) return fail("-n must be >= 0");
  if (a.threads < 1 || a.threads > 1024) return fail("-t must be in 1..1024 with --nodes (threads per rank)");
  if (under_cluster_launcher()) return run_rank(a);
  if (a.demo) {
    if (a.model.empty()) {
      std::string err;
      a.model = demo_model_path(&err);
      if (a.model.empty()) return fail(err);
      std::fprintf(stderr,
                   "lattice run: demo model %s\n"
                   "lattice run: a 1.4 M-parameter Llama that `lattice train` trained on the King James Bible\n"
                   "             (docs/TRAIN.md): expect its words and cadence, not sense; %d ranks split every layer\n",
                   a.model.c_str(), a.nodes == 0 ? 2 : a.nodes);
    }
    if (a.prompt.empty()) a.prompt = "And God said";
    if (a.nodes == 0) a.nodes = 2;
  }
  if (a.model.empty()) return fail("-m is required (or --demo)");
  if (a.prompt.empty()) return fail("the prompt (-p) is empty");
  if (!std::filesystem::exists(a.model)) return fail("no such model file: " + a.model);
  a.model = std::filesystem::absolute(a.model).string();
  if (a.discover.on) return launch_discovered(std::move(a));
  return launch_local(std::move(a));
}

}  // namespace lattice::cli
