#include "lattice/train/train.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "lattice/train/bpe.h"
#include "lattice/train/checkpoint.h"
#include "lattice/train/data.h"
#include "lattice/train/export.h"

namespace lattice::train {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

json config_json(const LlamaConfig& c) {
  return {{"vocab", c.vocab}, {"dim", c.dim}, {"layers", c.layers}, {"heads", c.heads},
          {"kv_heads", c.n_kv_heads()}, {"ffn", c.ffn}, {"rms_eps", c.rms_eps}, {"rope_theta", c.rope_theta}};
}

json header_json(const TrainOptions& o, const BpeVocab& vocab, uint64_t next_step, int world,
                 const std::vector<StepRecord>& history) {
  json h = {{"config", config_json(o.model)}, {"batch", o.batch}, {"seq", o.seq}, {"lr", o.lr},
            {"warmup", o.warmup}, {"weight_decay", o.weight_decay}, {"clip", o.clip}, {"seed", o.seed},
            {"val_fraction", o.val_fraction}, {"val_every", o.val_every}, {"val_windows", o.val_windows},
            {"steps", o.steps}, {"next_step", next_step}, {"world_size", world}, {"data", o.data},
            {"vocab", {{"pre", vocab.pre}, {"tokens", vocab.tokens}, {"merges", vocab.merges}, {"eos", vocab.eos_id}}}};
  json hist = json::array();
  for (const StepRecord& r : history) hist.push_back({r.step, r.loss, r.val_loss, r.lr});
  h["history"] = std::move(hist);
  return h;
}

// Restores what shaped the run from a checkpoint header; --steps and --data may be given anew.
Status apply_header(const json& h, TrainOptions& o, BpeVocab& vocab, uint64_t& next_step,
                    std::vector<StepRecord>& history) {
  try {
    const json& c = h.at("config");
    o.model.vocab = c.at("vocab");
    o.model.dim = c.at("dim");
    o.model.layers = c.at("layers");
    o.model.heads = c.at("heads");
    o.model.kv_heads = c.at("kv_heads");
    o.model.ffn = c.at("ffn");
    o.model.rms_eps = c.at("rms_eps");
    o.model.rope_theta = c.at("rope_theta");
    o.batch = h.at("batch");
    o.seq = h.at("seq");
    o.lr = h.at("lr");
    o.warmup = h.at("warmup");
    o.weight_decay = h.at("weight_decay");
    o.clip = h.at("clip");
    o.seed = h.at("seed");
    o.val_fraction = h.at("val_fraction");
    o.val_every = h.at("val_every");
    o.val_windows = h.at("val_windows");
    if (o.steps == 0) o.steps = h.at("steps");
    if (o.data.empty()) o.data = h.at("data").get<std::vector<std::string>>();
    next_step = h.at("next_step");
    const json& v = h.at("vocab");
    vocab.pre = v.at("pre");
    vocab.tokens = v.at("tokens").get<std::vector<std::string>>();
    vocab.merges = v.at("merges").get<std::vector<std::string>>();
    vocab.eos_id = v.at("eos");
    history.clear();
    for (const json& r : h.at("history")) history.push_back({r.at(0), r.at(1), r.at(2), r.at(3)});
  } catch (const json::exception& e) {
    return Corrupt(std::string("checkpoint header: ") + e.what());
  }
  return Status::Ok();
}

Status check_options(const TrainOptions& o) {
  if (o.batch == 0 || o.seq < 2) return InvalidArgument("--batch must be > 0 and --seq at least 2");
  if (!(o.lr > 0) || !std::isfinite(o.lr)) return InvalidArgument("--lr must be a positive number");
  if (!(o.val_fraction > 0 && o.val_fraction < 0.5)) return InvalidArgument("the validation fraction must be in (0, 0.5)");
  if (o.val_windows == 0) return InvalidArgument("--val-windows must be > 0");
  if (Status s = o.model.validate(); !s.ok()) return s;
  return Status::Ok();
}

}  // namespace

uint64_t hash_floats(std::span<const float> v) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto* b = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

namespace {

double median(std::vector<double>& v, double none) {
  if (v.empty()) return none;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

Result<TrainReport> train(const TrainOptions& in, GradGroup& group, const ProgressFn& progress) {
  TrainOptions o = in;
  BpeVocab vocab;
  uint64_t start = 0;
  TrainReport report;
  Checkpoint ck;
  const bool resumed = !o.resume.empty();
  if (resumed) {
    LATTICE_ASSIGN_OR_RETURN(ck, read_checkpoint(o.resume));
    LATTICE_RETURN_IF_ERROR(apply_header(ck.header, o, vocab, start, report.history));
  }
  if (o.steps == 0) o.steps = 200;
  LATTICE_RETURN_IF_ERROR(check_options(o));
  LATTICE_ASSIGN_OR_RETURN(std::string corpus, read_corpus(o.data));
  if (!resumed) {
    LATTICE_ASSIGN_OR_RETURN(vocab, train_bpe(corpus, o.model.vocab));
    o.model.vocab = static_cast<uint32_t>(vocab.tokens.size());  // a small corpus may fill fewer
  }
  if (vocab.tokens.size() != o.model.vocab) return Corrupt("checkpoint: the vocabulary does not match the model");
  LATTICE_ASSIGN_OR_RETURN(engine::Tokenizer tok, vocab.tokenizer());
  std::vector<engine::TokenId> ids = tok.encode(corpus, {.add_special = false});
  LATTICE_ASSIGN_OR_RETURN(TokenSplit split, split_tokens(std::vector<int32_t>(ids.begin(), ids.end()), o.val_fraction, o.seq));

  const unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  engine::ThreadPool pool(threads);
  Model model(o.model);
  const size_t n = model.n_params();
  report.n_params = n;
  std::vector<float> params(n);
  AdamWOptions ao;
  ao.lr = o.lr;
  ao.weight_decay = o.weight_decay;
  ao.clip = o.clip;
  ao.warmup = o.warmup;
  ao.total_steps = o.steps;
  AdamW opt(ao, model.tensors(), n);
  if (resumed) {
    if (ck.params.size() != n) return Corrupt("checkpoint: " + std::to_string(ck.params.size()) + " parameters, the model has " + std::to_string(n));
    params = std::move(ck.params);
    opt.m() = std::move(ck.m);
    opt.v() = std::move(ck.v);
  } else {
    init_params(o.model, o.seed, params);
  }
  // Gradients, the loss sum, the count of nodes waiting to join and each rank's speed (rows a
  // second; --balance): one reduction a step.
  constexpr size_t kSpeedSlots = 64;
  std::vector<float> buf(n + 2 + kSpeedSlots);
  std::vector<float> speed;  // by rank, smoothed; the same bits on every rank
  const std::span<float> grads(buf.data(), n);
  std::vector<std::pair<size_t, size_t>> units = model.grad_units();
  for (auto& u : units)
    if (u.second == n) u.second = buf.size();  // the sums go with the last layer (known before backward)
  if (group.joining()) {  // a node joining a running job: the members' step, weights and moments
    const auto t_join = Clock::now();
    uint64_t next = start;
    LATTICE_RETURN_IF_ERROR(group.sync_state(next, params, opt.m(), opt.v()).with_context("joining the job"));
    start = next;
    report.joins.push_back({start, 0, group.world_size(),
                            std::chrono::duration<double, std::milli>(Clock::now() - t_join).count()});
  }
  report.start_step = start;
  std::vector<int32_t> inputs, targets;
  const double global_tokens = double(o.batch) * o.seq;

  auto validate = [&]() {
    const size_t rows = std::max<size_t>(1, std::min<size_t>(o.batch, o.val_windows));
    std::vector<int32_t> vi(rows * o.seq), vt(rows * o.seq);
    double sum = 0;
    for (size_t w0 = 0; w0 < o.val_windows; w0 += rows) {
      const size_t r = std::min<size_t>(rows, o.val_windows - w0);
      for (size_t i = 0; i < r; ++i)
        validation_window(split.val, w0 + i, o.val_windows, o.seq, vi.data() + i * o.seq, vt.data() + i * o.seq);
      sum += model.loss(params, std::span(vi).first(r * o.seq), std::span(vt).first(r * o.seq), r, o.seq, pool);
    }
    return sum / (double(o.val_windows) * o.seq);
  };
  auto save = [&](uint64_t next_step) -> Status {
    if (o.checkpoint.empty() || group.rank() != 0) return Status::Ok();
    Checkpoint c{header_json(o, vocab, next_step, group.world_size(), report.history), params, opt.m(), opt.v()};
    return write_checkpoint(o.checkpoint, c);
  };

  const auto t0 = Clock::now();
  uint64_t done = 0;
  double last_val = -1;
  std::vector<double> step_ms;
  std::vector<size_t> last_starts;
  std::vector<double> phases[4];  // compute, wait, reduce, update
  auto ms = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  for (uint64_t step = start; step < o.steps; ++step) {
    if (o.stop_after && step - start >= o.stop_after) break;
    const auto t_ready = Clock::now();  // --balance counts all a rank does for the step
    LATTICE_RETURN_IF_ERROR(group.before_step(step));
    const auto t_step = Clock::now();
    bool skipped = false;  // a peer completed this step before a loss: its state was taken
    for (;;) {
      const int world = group.world_size(), rank = group.rank();
      const bool balance = o.balance && world > 1 && size_t(world) <= kSpeedSlots;
      if (speed.size() != size_t(world)) speed.assign(world, 0.0f);  // a new world: even shares until measured
      const std::vector<size_t> starts = row_starts(o.batch, world, balance ? speed : std::vector<float>{});
      const size_t r0 = starts[rank], r1 = starts[rank + 1];
      std::fill(buf.begin(), buf.end(), 0.0f);
      buf[n + 1] = group.joiners_waiting();
      group.reduce_begin(buf, units);
      const auto t_c = Clock::now();
      if (r1 > r0) {
        draw_batch(split.train, o.seed, step, r0, r1, o.seq, inputs, targets);
        const GradHooks hooks{[&](double loss_sum) { buf[n] = static_cast<float>(loss_sum); },
                              [&](size_t unit) { group.unit_ready(unit); }};
        model.forward_backward(params, grads, inputs, targets, r1 - r0, o.seq, static_cast<float>(1.0 / global_tokens),
                               pool, hooks);
      }
      const auto t_w = Clock::now();
      // This rank's speed: rows over the time from the step boundary to its contribution.
      if (balance && r1 > r0) buf[n + 2 + rank] = float((r1 - r0) / std::max(1e-6, ms(t_w - t_ready) / 1000.0));
      const bool waited = o.profile && group.barrier().ok();
      const auto t_r = Clock::now();
      Status st = group.reduce_end();
      if (st.ok()) {
        last_starts = starts;
        phases[0].push_back(ms(t_w - t_c));
        if (waited) phases[1].push_back(ms(t_r - t_w));
        phases[2].push_back(ms(Clock::now() - t_r));
        break;
      }
      if (st.code() != ErrorCode::kPeerLost) return st.with_context("step " + std::to_string(step));
      // Redo the step on the survivors: the same global batch, its rows split anew.
      const auto t_rec = Clock::now();
      Status rs = group.recover();
      if (!rs.ok()) return rs.with_context("recovering from " + st.to_string());
      uint64_t next = step;
      LATTICE_RETURN_IF_ERROR(group.sync_state(next, params, opt.m(), opt.v()));
      report.recoveries.push_back({step, world, group.world_size(), st.to_string(),
                                   std::chrono::duration<double, std::milli>(Clock::now() - t_rec).count()});
      if (next > step) {
        step = next - 1;  // the loop's ++step lands on `next`
        skipped = true;
        break;
      }
    }
    if (skipped) continue;
    if (o.balance && speed.size() == size_t(group.world_size()) && speed.size() <= kSpeedSlots) {
      for (size_t r = 0; r < speed.size(); ++r) {
        const float now = buf[n + 2 + r];
        if (now > 0) speed[r] = speed[r] > 0 ? 0.5f * speed[r] + 0.5f * now : now;
      }
    }

    const auto t_u = Clock::now();
    const AdamW::StepInfo info = opt.step(params, grads, step, pool);
    phases[3].push_back(ms(Clock::now() - t_u));
    step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t_step).count());
    StepRecord rec{step, buf[n] / global_tokens, -1, info.lr};
    const bool last = step + 1 == o.steps;
    if (last || (o.val_every && (step + 1) % o.val_every == 0)) rec.val_loss = last_val = validate();
    report.history.push_back(rec);
    ++done;
    if (o.on_step) o.on_step(step, params);
    if (buf[n + 1] > 0 && !last) {  // every rank saw the same sum: all grow after this step
      const auto t_join = Clock::now();
      const int before = group.world_size();
      LATTICE_RETURN_IF_ERROR(group.grow(step + 1, params, opt.m(), opt.v()).with_context("admitting a node"));
      report.joins.push_back({step + 1, before, group.world_size(),
                              std::chrono::duration<double, std::milli>(Clock::now() - t_join).count()});
    }
    if (o.checkpoint_every && (step + 1) % o.checkpoint_every == 0 && !last)
      LATTICE_RETURN_IF_ERROR(save(step + 1));
    if (progress) {
      const double el = std::chrono::duration<double>(Clock::now() - t0).count();
      progress({step + 1, o.steps, rec.loss, done * global_tokens / el, el / done * double(o.steps - step - 1),
                rec.val_loss, info.lr});
    }
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  report.steps = report.history.empty() ? 0 : report.history.back().step + 1;
  report.final_loss = report.history.empty() ? 0 : report.history.back().loss;
  report.val_loss = last_val >= 0 ? last_val : validate();
  report.samples_per_s = report.seconds > 0 ? done * double(o.batch) / report.seconds : 0;
  report.tokens_per_s = report.samples_per_s * o.seq;
  for (size_t r = 0; r + 1 < last_starts.size(); ++r) report.rows_by_rank.push_back(last_starts[r + 1] - last_starts[r]);
  report.step_ms_median = median(step_ms, 0);
  report.phase_ms = {median(phases[0], 0), median(phases[1], -1), median(phases[2], 0), median(phases[3], 0)};
  if (o.stop_after && report.steps < o.steps) return report;  // "killed": nothing more is written
  LATTICE_RETURN_IF_ERROR(group.check_same(hash_floats(params)));
  LATTICE_RETURN_IF_ERROR(save(report.steps));
  if (group.rank() == 0) {
    if (!o.out.empty()) LATTICE_RETURN_IF_ERROR(write_gguf(o.out, o.model, params, vocab, o.seq));
    if (!o.loss_csv.empty()) LATTICE_RETURN_IF_ERROR(write_loss_csv(o.loss_csv, report.history));
    if (!o.loss_svg.empty()) LATTICE_RETURN_IF_ERROR(write_loss_svg(o.loss_svg, report.history));
  }
  return report;
}

}  // namespace lattice::train
