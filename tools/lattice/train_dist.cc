#include "train_dist.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "dist_run.h"
#include "lattice/cluster/cluster.h"
#include "lattice/cluster/launcher.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/train/dp.h"

namespace lattice::cli {
namespace {

constexpr const char* kTrainJobEnv = "LATTICE_TRAIN_JOB";

nlohmann::json report_json(const train::TrainReport& r, const train::TrainOptions& o, int world) {
  nlohmann::json rec = nlohmann::json::array();
  for (const auto& ev : r.recoveries)
    rec.push_back({{"step", ev.step}, {"world_before", ev.world_before}, {"world_after", ev.world_after},
                   {"reason", ev.reason}, {"recover_ms", ev.recover_ms}});
  nlohmann::json joins = nlohmann::json::array();
  for (const auto& j : r.joins)
    joins.push_back({{"step", j.step}, {"world_before", j.world_before}, {"world_after", j.world_after},
                     {"join_ms", j.join_ms}});
  return {{"joins", joins}, {"rows_by_rank", r.rows_by_rank}, {"start_step", r.start_step}, {"steps", r.steps},         {"final_loss", r.final_loss},     {"val_loss", r.val_loss},
          {"samples_per_s", r.samples_per_s}, {"tokens_per_s", r.tokens_per_s}, {"seconds", r.seconds}, {"step_ms_median", r.step_ms_median},
          {"n_params", r.n_params},   {"world_size", world},            {"recoveries", rec},
          {"output", o.out},          {"checkpoint", o.checkpoint},
          {"phase_ms", {{"compute", r.phase_ms.compute}, {"wait", r.phase_ms.wait}, {"reduce", r.phase_ms.reduce},
                        {"update", r.phase_ms.update}}}};
}

int print_report(const TrainArgs& a, const train::TrainReport& r, int world) {
  if (a.json) {
    std::printf("%s\n", report_json(r, a.options, world).dump().c_str());
    return 0;
  }
  std::fprintf(stderr, "trained %llu steps: loss %.4f, validation loss %.4f, %.1f samples/s (%.0f tok/s) on %d rank(s)\n",
               static_cast<unsigned long long>(r.steps), r.final_loss, r.val_loss, r.samples_per_s, r.tokens_per_s,
               world);
  for (const auto& ev : r.recoveries)
    std::fprintf(stderr, "  recovered at step %llu: %d -> %d ranks (%s)\n", static_cast<unsigned long long>(ev.step),
                 ev.world_before, ev.world_after, ev.reason.c_str());
  if (!a.options.out.empty()) std::printf("%s\n", a.options.out.c_str());
  return 0;
}

// The job as the ranks get it: every option that shapes training (paths made absolute by the
// caller's working directory being inherited).
nlohmann::json job_to_json(const TrainArgs& a) {
  const train::TrainOptions& o = a.options;
  return {{"data", o.data}, {"vocab", o.model.vocab}, {"dim", o.model.dim}, {"layers", o.model.layers},
          {"heads", o.model.heads}, {"kv_heads", o.model.kv_heads}, {"ffn", o.model.ffn}, {"steps", o.steps},
          {"batch", o.batch}, {"seq", o.seq}, {"lr", o.lr}, {"warmup", o.warmup}, {"weight_decay", o.weight_decay},
          {"clip", o.clip}, {"seed", o.seed}, {"threads", o.threads}, {"val_every", o.val_every},
          {"val_windows", o.val_windows}, {"out", o.out}, {"checkpoint", o.checkpoint},
          {"checkpoint_every", o.checkpoint_every}, {"resume", o.resume}, {"loss_csv", o.loss_csv},
          {"loss_svg", o.loss_svg}, {"inject_fault", a.inject_fault}, {"json", a.json}, {"quiet", a.quiet},
          {"profile", o.profile}, {"no_overlap", a.no_overlap}, {"balance", o.balance}};
}

Status job_from_json(const std::string& text, TrainArgs& a) {
  try {
    const auto j = nlohmann::json::parse(text);
    train::TrainOptions& o = a.options;
    o.data = j.at("data").get<std::vector<std::string>>();
    o.model.vocab = j.at("vocab"), o.model.dim = j.at("dim"), o.model.layers = j.at("layers");
    o.model.heads = j.at("heads"), o.model.kv_heads = j.at("kv_heads"), o.model.ffn = j.at("ffn");
    o.steps = j.at("steps"), o.batch = j.at("batch"), o.seq = j.at("seq"), o.lr = j.at("lr");
    o.warmup = j.at("warmup"), o.weight_decay = j.at("weight_decay"), o.clip = j.at("clip"), o.seed = j.at("seed");
    o.threads = j.at("threads"), o.val_every = j.at("val_every"), o.val_windows = j.at("val_windows");
    o.out = j.at("out"), o.checkpoint = j.at("checkpoint"), o.checkpoint_every = j.at("checkpoint_every");
    o.resume = j.at("resume"), o.loss_csv = j.at("loss_csv"), o.loss_svg = j.at("loss_svg");
    a.inject_fault = j.at("inject_fault"), a.json = j.at("json"), a.quiet = j.at("quiet");
    o.profile = j.at("profile"), a.no_overlap = j.at("no_overlap"), o.balance = j.at("balance");
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string(kTrainJobEnv) + ": " + e.what());
  }
  return Status::Ok();
}

int fail(const std::string& m) {
  std::fprintf(stderr, "lattice train: %s\n", m.c_str());
  return 2;
}

int launch_local(const TrainArgs& a) {
  if (a.nodes < 1 || a.nodes > 64) return fail("--nodes must be in 1..64");
  if (a.provider != "shm" && a.provider != "tcp") return fail("--provider must be shm or tcp");
  int fr = -1, fs = -1, sig = 0;
  if (!parse_inject_fault(a.inject_fault, &fr, &fs, &sig)) return fail("--inject-fault wants RANK@STEP[:stop], e.g. 1@50");
  if (!a.inject_fault.empty() && fr >= a.nodes)
    return fail("--inject-fault: rank " + std::to_string(fr) + " is not one of the " + std::to_string(a.nodes) + " ranks");
  cluster::LocalJob job;
  job.world_size = a.nodes;
  job.argv = {cluster::self_exe(), "train"};
  job.provider = a.provider;
  job.host_coordinator = true;  // no rank is special: any can be lost
  job.env = {{kTrainJobEnv, job_to_json(a).dump()}};
  job.launch.prefix = false;
  job.launch.keep_going = true;  // survivors go on; rank 0's status is the job's
  job.bind = cluster::bind_when_fits(a.nodes, a.options.threads ? static_cast<int>(a.options.threads) : 1);
  auto code = cluster::run_local_job(std::move(job));
  if (!code.ok()) return fail(code.status().to_string());
  return *code;
}

int run_rank(TrainArgs a, const train::ProgressFn& progress) {
  if (const char* job = std::getenv(kTrainJobEnv); job && *job) {
    if (Status s = job_from_json(job, a); !s.ok()) return fail(s.to_string());
  }
  const train::ProgressFn none;
  const train::ProgressFn& shown = a.quiet ? none : progress;  // the job's -q (a rank's own argv has none)
  auto opts = cluster::cluster_options_from_env();
  if (!opts.ok()) return fail(opts.status().to_string());
  const int rank0 = opts->rank;
  auto rfail = [rank0](const std::string& m) {
    std::fprintf(stderr, "lattice train: rank %d: %s\n", rank0, m.c_str());
    return 1;
  };
  int fault_rank = -1, fault_step = -1, fault_sig = SIGKILL;
  (void)parse_inject_fault(a.inject_fault, &fault_rank, &fault_step, &fault_sig);
  if (a.options.threads == 0) a.options.threads = 1;  // one core a rank unless asked
  auto joins = train::ClusterGradGroup::watch_joins(*opts);
  // A node joining a running job enters at the members' next step boundary once it asks.
  auto cl = cluster::join_cluster(*opts, Deadline::after(std::chrono::seconds(opts->rejoin ? 300 : 60)));
  if (!cl.ok()) return rfail("could not join: " + cl.status().to_string());
  train::DpOptions dp;
  dp.overlap = !a.no_overlap;
  dp.joins = joins;
  dp.joining = opts->rejoin;
  auto group = train::ClusterGradGroup::create(**cl, dp);
  if (!group.ok()) return rfail(group.status().to_string());
  train::ClusterGradGroup& g = **group;
  g.set_before_step([&](uint64_t step) {
    if (rank0 == fault_rank && static_cast<int64_t>(step) == fault_step) {
      std::fprintf(stderr, "lattice train: rank %d: --inject-fault: %s myself at step %llu\n", rank0,
                   fault_sig == SIGKILL ? "killing (SIGKILL)" : "stopping (SIGSTOP)",
                   static_cast<unsigned long long>(step));
      std::fflush(stderr);
      ::raise(fault_sig);
    }
    return Status::Ok();
  });
  // Only the current rank 0 reports (ranks renumber after a loss).
  train::ProgressFn on_progress;
  if (shown) on_progress = [&](const train::Progress& p) { if (g.rank() == 0) shown(p); };
  auto r = train::train(a.options, g, on_progress);
  if (!r.ok()) return rfail(r.status().to_string());
  if (g.rank() != 0) return 0;
  return print_report(a, *r, g.world_size());
}

}  // namespace

int run_train(const TrainArgs& a, const train::ProgressFn& progress) {
  if (under_cluster_launcher()) return run_rank(a, progress);
  if (a.nodes > 1) return launch_local(a);
  if (!a.inject_fault.empty()) return fail("--inject-fault needs --nodes (a rank to lose)");
  train::SoloGroup solo;
  auto r = train::train(a.options, solo, progress);
  if (!r.ok()) {
    std::fprintf(stderr, "lattice train: %s\n", r.status().to_string().c_str());
    return 1;
  }
  return print_report(a, *r, 1);
}

}  // namespace lattice::cli
