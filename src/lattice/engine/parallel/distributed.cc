#include "lattice/engine/parallel/distributed.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>

#include "lattice/cluster/launcher.h"
#include "lattice/coll/coll.h"
#include "lattice/engine/parallel/recovery.h"

namespace lattice::engine::parallel {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// MemTotal of /proc/meminfo (stable over the run, unlike MemAvailable); 0 if unreadable.
uint64_t machine_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

// b - a, for the counters of one placement's Forward (same shapes).
void add_diff(ExpertLoad& sum, const ExpertLoad& a, const ExpertLoad& b) {
  if (sum.tokens.size() != b.tokens.size()) sum.tokens.assign(b.tokens.size(), 0);
  if (sum.rank_rows.size() != b.rank_rows.size()) sum.rank_rows.assign(b.rank_rows.size(), 0);
  for (size_t i = 0; i < b.tokens.size() && i < a.tokens.size(); ++i) sum.tokens[i] += b.tokens[i] - a.tokens[i];
  for (size_t i = 0; i < b.rank_rows.size() && i < a.rank_rows.size(); ++i)
    sum.rank_rows[i] += b.rank_rows[i] - a.rank_rows[i];
  sum.busiest_rows += b.busiest_rows - a.busiest_rows;
}

// Per rank: the experts it owns (ids, any layer) and the decode rows routed to each, summed
// over layers; plus the rows per rank and the balance.
nlohmann::json expert_load_json(const Model& m, const ExpertLoad& load) {
  const Hparams& hp = m.hparams();
  if (!hp.moe()) return nullptr;
  const uint32_t X = hp.n_expert;
  std::vector<uint64_t> per_expert(X, 0);
  for (size_t i = 0; i < load.tokens.size(); ++i) per_expert[i % X] += load.tokens[i];
  nlohmann::json ranks = nlohmann::json::array();
  const int W = m.expert_parallel() ? m.world() : 1;
  for (int r = 0; r < W; ++r) {
    nlohmann::json ids = nlohmann::json::array(), tokens = nlohmann::json::array();
    for (uint32_t e = 0; e < X; ++e) {
      uint64_t n = 0;
      bool owns = false;
      for (uint32_t l = m.layer_begin(); l < m.layer_end(); ++l)
        if (!m.expert_parallel() || m.expert_owner(l, e) == r) {
          owns = true;
          const size_t i = size_t{l - m.layer_begin()} * X + e;
          if (i < load.tokens.size()) n += load.tokens[i];
        }
      if (owns) ids.push_back(e), tokens.push_back(n);
    }
    nlohmann::json one = {{"rank", r}, {"experts", ids}, {"tokens", tokens}};
    if (m.expert_parallel() && static_cast<size_t>(r) < load.rank_rows.size()) one["rows"] = load.rank_rows[r];
    ranks.push_back(std::move(one));
  }
  return {{"mode", m.expert_parallel() ? "ep" : "tp"},
          {"n_expert", X},
          {"n_expert_used", hp.n_expert_used},
          {"tokens_per_expert", per_expert},
          {"per_rank", ranks},
          {"balance", m.expert_parallel() ? load.balance() : 1.0}};
}

// A placement's stepper with a clock around its forward steps: what a decoded token spends
// outside them (sampling, the generator's bookkeeping, the chosen token's agreement) is the
// decode time less this. The simulator keeps that part whole on every rank (docs/SIM.md).
class TimedStepper final : public Stepper {
 public:
  explicit TimedStepper(Stepper& s) : s_(s) {}
  Result<std::unique_ptr<Sequence>> new_sequence(uint32_t n_ctx) const override { return s_.new_sequence(n_ctx); }
  Status step(std::span<const StepItem> items) override {
    const auto t0 = Clock::now();
    Status st = s_.step(items);
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    return st;
  }
  Result<std::vector<int32_t>> choose(std::span<Sampler* const> samplers) override { return s_.choose(samplers); }
  uint32_t max_items() const override { return s_.max_items(); }
  uint32_t max_rows() const override { return s_.max_rows(); }
  const Model& model() const override { return s_.model(); }
  double seconds = 0;  // inside step()

 private:
  Stepper& s_;
};
}  // namespace

nlohmann::json RecoveryEvent::to_json() const {
  return {{"lost_ranks", lost_ranks}, {"at_token", at_token},   {"epoch", epoch},
          {"world_before", world_before}, {"world_after", world_after}, {"recover_ms", recover_ms},
          {"shrink_ms", shrink_ms},   {"place_ms", place_ms},     {"prefill_ms", prefill_ms},
          {"cause", cause}};
}

Result<std::unique_ptr<Placement>> place(const DistOptions& a, cluster::Cluster& c, coll::Communicator& comm,
                                         std::vector<double> weights, uint32_t n_ctx) {
  auto pl = std::make_unique<Placement>();
  const auto t_load = Clock::now();
  const bool pp = a.parallel == Parallelism::kPipeline;
  LoadOptions lo;
  lo.pack = a.pack;
  LATTICE_ASSIGN_OR_RETURN(auto file, GgufFile::open(a.model_path));
  std::vector<int> stage_order;
  if (pp) {
    // Pipeline stages in the order of the collectives' route: on a ring of cables,
    // consecutive stages are then cable neighbours whatever the hosts' order in the file.
    LATTICE_RETURN_IF_ERROR(comm.refresh());
    if (!comm.full_mesh()) {
      if (comm.route().order.empty()) return Unavailable("pipeline: no route through every rank over the cables");
      stage_order = comm.route().order;
    } else {
      for (int r = 0; r < c.world_size(); ++r) stage_order.push_back(r);
    }
    const int stage = static_cast<int>(std::find(stage_order.begin(), stage_order.end(), c.rank()) - stage_order.begin());
    std::vector<double> stage_weights;
    if (!weights.empty())
      for (int r : stage_order) stage_weights.push_back(weights[static_cast<size_t>(r)]);
    // Stage ranges need the layer count: read from the header before binding.
    auto arch_name = file->metadata().get_string("general.architecture");
    const ArchInfo* arch = arch_name.ok() ? find_arch(*arch_name) : nullptr;
    if (!arch) return InvalidArgument("unsupported or missing architecture");
    LATTICE_ASSIGN_OR_RETURN(auto hp, read_hparams(file->metadata(), *arch));
    LATTICE_ASSIGN_OR_RETURN(auto ranges, pp_layers(hp.n_layer, c.world_size(), stage_weights));
    lo.shard.layer_begin = ranges[static_cast<size_t>(stage)].begin;
    lo.shard.layer_end = ranges[static_cast<size_t>(stage)].end;
  } else {
    lo.shard.rank = c.rank();
    lo.shard.world = c.world_size();
    lo.shard.weights = std::move(weights);
    // Expert parallel: the placement is a function of the shares and the world, so every
    // rank computes the same one, and after a loss the survivors re-place the lost rank's
    // experts among themselves from their own mappings of the file.
    lo.shard.expert_parallel = a.parallel == Parallelism::kExpert;
    lo.shard.expert_spare = a.expert_spare;
  }
  LATTICE_ASSIGN_OR_RETURN(pl->model, Model::bind(std::move(file), lo));
  pl->load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  pl->group = std::make_unique<CommGroup>(comm, a.coll_timeout);
  if (pp) {
    PpSessionOptions po;
    po.session.n_ctx = n_ctx;
    po.session.n_threads = a.n_threads;
    po.session.n_batch = 32;  // micro-batches of the prefill
    po.max_items = a.max_seqs;
    po.stage_order = stage_order;
    LATTICE_ASSIGN_OR_RETURN(pl->pp, PpSession::create(*pl->model, *pl->group, po));
  } else {
    ForwardOptions fo;
    fo.n_ctx = n_ctx;
    fo.n_threads = a.n_threads;
    fo.n_batch = std::max<uint32_t>(a.n_batch, 1);
    fo.ep_prefill = a.ep_prefill;
    fo.a2a_min_rows = a.a2a_min_rows;
    fo.max_items = a.max_seqs;
    LATTICE_ASSIGN_OR_RETURN(pl->forward, Forward::create(*pl->model, *pl->group, fo));
  }
  if (!pp && c.world_size() > 1) {
    // The one-sided paths' landing zones are set up by the first call that takes them (a key
    // exchange, every peer's zone mapped): here, not inside the first request's prefill (`run`,
    // `serve`, a re-placement after a loss). A pipeline's stages pass activations two-sided and
    // never take them. Outside the placement's counted collectives. A failure here (a lost
    // rank) shows again in the first step, which recovers from it.
    coll::CollOptions wo;
    wo.timeout = a.coll_timeout;
    float warm[8] = {}, summed[8];
    (void)coll::all_reduce(comm, warm, summed, 8, coll::DType::kF32, coll::ReduceOp::kSum, wo);
  }
  return pl;
}

Result<DistResult> generate_distributed(cluster::Cluster& c, const DistOptions& a, const Tokenizer& tok,
                                        GenerationRequest request, const DistHooks& hooks) {
  DistResult R;
  const int world0 = c.world_size();
  const int rank0 = c.rank();  // this rank in the first epoch: its name in reports
  R.world_at_start = world0;
  if (!a.split.empty() && a.split.size() != static_cast<size_t>(world0))
    return InvalidArgument("--split needs one positive share per rank");
  LATTICE_ASSIGN_OR_RETURN(auto comm, coll::Communicator::create(c));
  // First-epoch ranks of the current members, by current rank (shrink renumbers in order).
  std::vector<int> members(static_cast<size_t>(world0));
  for (int r = 0; r < world0; ++r) members[static_cast<size_t>(r)] = r;
  // Expert parallel without --split: every rank's memory is its share.
  std::vector<double> split = a.split;
  if (split.empty() && a.parallel == Parallelism::kExpert && world0 > 1) {
    const uint64_t mine = a.memory_bytes ? a.memory_bytes : machine_memory_bytes();
    auto all = c.allgather(std::to_string(mine), Deadline::after(a.recovery_timeout));
    if (!all.ok()) return all.status().with_context("expert parallel: gathering the ranks' memory");
    for (const std::string& m : *all) split.push_back(std::max(std::strtod(m.c_str(), nullptr), 1.0));
  }
  auto shares = [&] {
    std::vector<double> w;
    if (!split.empty())
      for (int m : members) w.push_back(split[static_cast<size_t>(m)]);
    return w;
  };
  const uint32_t n_ctx = a.n_ctx ? a.n_ctx : static_cast<uint32_t>(request.prompt.size() + request.n_predict);
  if (request.prompt.size() + request.n_predict > n_ctx) return InvalidArgument("prompt + -n exceed --ctx");

  LATTICE_ASSIGN_OR_RETURN(auto pl, place(a, c, *comm, shares(), n_ctx));
  const double load_s = pl->load_s;
  GeneratorOptions go;
  go.n_ctx = n_ctx;
  go.max_seqs = 1;
  go.prefill_chunk = pl->stepper().max_rows();
  auto on_piece = [&](int, std::string_view piece) {
    if (c.rank() == 0 && hooks.on_text) hooks.on_text(piece);
  };
  auto timed = std::make_unique<TimedStepper>(pl->stepper());
  LATTICE_ASSIGN_OR_RETURN(auto gen, Generator::create(*timed, tok, go));
  LATTICE_ASSIGN_OR_RETURN(int id, gen->submit(request, on_piece));

  CollStats decode_cs;  // collectives of decode steps only, summed over placements
  ExpertLoad load0;     // the expert load before a decode step
  double first_prefill_s = -1;
  if (c.world_size() > 1) {
    // The first step times the prompt's prefill: begin it once every rank has loaded its part.
    // Ranks finish loading seconds apart, and the first collective would otherwise charge the
    // last one's load to the prefill. A failure here (a lost rank) shows again in the step,
    // which recovers from it.
    coll::CollOptions bo;
    bo.timeout = a.coll_timeout;
    (void)coll::barrier(*comm, bo);
  }
  Clock::time_point t_start = Clock::now(), t_first{};
  bool have_first = false;
  for (;;) {
    if (gen->finished(id)) break;
    // Counts only: the tokens themselves are copied only when a recovery needs them.
    LATTICE_ASSIGN_OR_RETURN(const size_t before, gen->n_generated(id));
    if (hooks.before_token) LATTICE_RETURN_IF_ERROR(hooks.before_token(before));
    const CollStats cs0 = pl->coll_stats();
    const bool decoding = before > 0;
    if (decoding && pl->forward) load0 = pl->forward->expert_load();
    const double step_s0 = timed->seconds;
    const bool first_prefill = !decoding && first_prefill_s < 0;
    Status st = gen->step();
    if (st.ok()) {
      LATTICE_ASSIGN_OR_RETURN(const size_t after, gen->n_generated(id));
      if (after > before)
        R.token_clock_s.push_back(std::chrono::duration<double>(Clock::now().time_since_epoch()).count());
      if (!have_first && after > 0) {
        have_first = true;
        if (pl->forward && pl->model->expert_parallel() && c.world_size() > 1) {
          const EpPathStats& p = pl->forward->ep_paths();
          const uint32_t min_rows = pl->forward->options().a2a_min_rows;
          R.ep_prefill = {{"mode", to_string(a.ep_prefill)}, {"a2a_min_rows", min_rows},
                          {"rule", describe(a.ep_prefill, min_rows)},
                          {"a2a_steps", p.a2a_steps},        {"a2a_rows", p.a2a_rows},
                          {"reduce_steps", p.reduce_steps},  {"reduce_rows", p.reduce_rows},
                          {"path", p.a2a_steps == 0      ? "reduce"
                                   : p.reduce_steps == 0 ? "all-to-all"
                                                         : "mixed"}};
        }
        t_first = Clock::now();
        if (first_prefill_s < 0) first_prefill_s = std::chrono::duration<double>(t_first - t_start).count();
      } else if (have_first && after > before) {
        R.decode_s = std::chrono::duration<double>(Clock::now() - t_first).count();
      }
      if (first_prefill) {
        R.prefill_coll_s += pl->coll_stats().seconds - cs0.seconds;
        R.prefill_step_s += timed->seconds - step_s0;
      }
      if (decoding) {
        const CollStats& cs1 = pl->coll_stats();
        decode_cs.calls += cs1.calls - cs0.calls;
        decode_cs.bytes += cs1.bytes - cs0.bytes;
        decode_cs.seconds += cs1.seconds - cs0.seconds;
        R.decode_step_s += timed->seconds - step_s0;
        if (pl->forward) add_diff(R.decode_load, load0, pl->forward->expert_load());
        ++R.steps;
      }
      continue;
    }
    // A lost rank.
    if (!a.recover || !recoverable(st)) return st;
    if (static_cast<int>(R.recoveries.size()) >= world0 - 1 || c.world_size() <= 1)
      return Status(st.code(), st.message() + " (no survivors left to take the work over)", st.peer());
    const auto t_rec = Clock::now();
    const int old_world = c.world_size();
    // A failed step leaves the request as it was before it (Generator::step).
    LATTICE_ASSIGN_OR_RETURN(auto before_loss, gen->progress(id));
    Progress mine{std::move(before_loss.tokens), before_loss.draws};
    gen.reset();
    timed.reset();
    pl.reset();
    R.decode_load = {};  // the load is reported for the last placement (its owners)
    LATTICE_ASSIGN_OR_RETURN(auto shrunk, shrink_and_agree(c, members, mine, a.recovery_timeout));
    members = shrunk.members;
    const auto t_place = Clock::now();
    LATTICE_ASSIGN_OR_RETURN(pl, place(a, c, *comm, shares(), n_ctx));
    const double place_ms = ms_since(t_place);
    go.prefill_chunk = pl->stepper().max_rows();
    timed = std::make_unique<TimedStepper>(pl->stepper());
    LATTICE_ASSIGN_OR_RETURN(gen, Generator::create(*timed, tok, go));
    GenerationRequest resumed = request;
    resumed.resume_tokens = shrunk.best.tokens;
    resumed.resume_draws = shrunk.best.draws;
    LATTICE_ASSIGN_OR_RETURN(id, gen->submit(resumed, on_piece));
    // The re-prefill of the prompt and the agreed tokens (one step when they fit a step).
    const auto t_prefill = Clock::now();
    Status pst = gen->step();
    RecoveryEvent ev;
    ev.lost_ranks = shrunk.lost;
    ev.at_token = shrunk.best.tokens.size();
    ev.epoch = c.epoch();
    ev.world_before = old_world;
    ev.world_after = c.world_size();
    ev.shrink_ms = shrunk.shrink_ms;
    ev.place_ms = place_ms;
    ev.prefill_ms = ms_since(t_prefill);
    ev.recover_ms = ms_since(t_rec);
    ev.cause = st.to_string();
    R.recoveries.push_back(ev);
    if (c.rank() == 0 && hooks.on_recovery) hooks.on_recovery(ev);
    if (!pst.ok()) {
      if (!recoverable(pst)) return pst.with_context("recovery failed");
      continue;  // another loss during the re-prefill: the next step fails too and recovers
    }
  }
  LATTICE_ASSIGN_OR_RETURN(R.gen, gen->take(id));
  if (first_prefill_s >= 0) R.gen.prefill_seconds = first_prefill_s;
  R.world = c.world_size();
  R.epoch = c.epoch();
  R.rank = c.rank();

  // Per decode token: this rank's collective payload and time.
  const double denom = std::max<uint32_t>(R.steps, 1);
  const Model& m = pl->stepper().model();
  R.expert_load = expert_load_json(m, R.decode_load);
  nlohmann::json mine = {{"rank", c.rank()},
                         {"experts_per_layer", double(m.n_owned_experts()) / std::max<uint32_t>(m.n_local_layers(), 1)},
                         {"first_rank", rank0},
                         {"layers", {m.layer_begin(), m.layer_end()}},
                         {"kv_heads", {m.kv_heads().begin, m.kv_heads().end}},
                         {"heads", {m.heads().begin, m.heads().end}},
                         {"ff", {m.ff().begin, m.ff().end}},
                         {"vocab", {m.vocab().begin, m.vocab().end}},
                         {"shard_bytes", m.shard_bytes()},
                         // The CPUs this rank may run on (its launcher's --bind): where it ran.
                         {"cpus", cluster::usable_cpus()},
                         {"load_s", load_s},
                         {"bytes_sent_per_token", decode_cs.bytes / denom},
                         {"coll_ms_per_token", decode_cs.seconds * 1e3 / denom},
                         {"coll_calls_per_token", decode_cs.calls / denom},
                         {"decode_ms_per_token", R.decode_s * 1e3 / denom},
                         {"step_ms_per_token", R.decode_step_s * 1e3 / denom},
                         {"prefill_step_ms", R.prefill_step_s * 1e3},
                         {"prefill_coll_ms", R.prefill_coll_s * 1e3}};
  auto all = c.allgather(mine.dump(), Deadline::after(a.recovery_timeout));
  if (!all.ok()) return all.status().with_context("report");
  R.ranks = nlohmann::json::array();
  for (const std::string& r : *all) R.ranks.push_back(nlohmann::json::parse(r, nullptr, false));
  return R;
}

}  // namespace lattice::engine::parallel
