#include "lattice/serve/lockstep.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "lattice/core/log.h"
#include "lattice/engine/parallel/recovery.h"
#include "lattice/serve/metrics.h"
#include "lattice/serve/rank_report.h"

namespace lattice::serve {

using nlohmann::json;
namespace par = engine::parallel;

namespace {

json request_json(const engine::GenerationRequest& r) {
  const engine::SamplerParams& s = r.sampler;
  return {{"prompt", r.prompt},
          {"n_predict", r.n_predict},
          {"eog", r.stop_at_eog},
          {"stop", r.stop},
          {"resume", r.resume_tokens},
          {"draws", r.resume_draws},
          {"sampler",
           {s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.frequency_penalty, s.presence_penalty,
            s.repeat_last_n, s.seed}}};
}

Result<engine::GenerationRequest> request_from(const json& j) {
  engine::GenerationRequest r;
  try {
    j.at("prompt").get_to(r.prompt);
    j.at("n_predict").get_to(r.n_predict);
    j.at("eog").get_to(r.stop_at_eog);
    j.at("stop").get_to(r.stop);
    j.at("resume").get_to(r.resume_tokens);
    j.at("draws").get_to(r.resume_draws);
    const json& s = j.at("sampler");
    if (!s.is_array() || s.size() != 9) return Corrupt("step message: the sampler is not 9 values");
    engine::SamplerParams& p = r.sampler;
    s[0].get_to(p.temperature), s[1].get_to(p.top_k), s[2].get_to(p.top_p), s[3].get_to(p.min_p);
    s[4].get_to(p.repeat_penalty), s[5].get_to(p.frequency_penalty), s[6].get_to(p.presence_penalty);
    s[7].get_to(p.repeat_last_n), s[8].get_to(p.seed);
  } catch (const json::exception& e) {
    return Corrupt(std::string("step message: a request is malformed: ") + e.what());
  }
  return r;
}

}  // namespace

std::string encode_step(const StepMessage& m) {
  json ops = json::array();
  for (const StepOp& op : m.ops) {
    if (op.kind == StepOp::Kind::kCancel) ops.push_back({{"cancel", op.gen_id}});
    else ops.push_back({{"submit", op.gen_id}, {"request", request_json(op.request)}});
  }
  return json{{"ops", ops}, {"step", m.step}, {"stop", m.stop}, {"report", m.report}}.dump();
}

Result<StepMessage> decode_step(const std::string& text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("ops") || !j["ops"].is_array() || !j.value("step", json()).is_boolean() ||
      !j.value("stop", json()).is_boolean())
    return Corrupt("step message: not an object with ops, step and stop");
  StepMessage m;
  m.step = j["step"].get<bool>();
  m.stop = j["stop"].get<bool>();
  m.report = j.value("report", false) == true;
  for (const json& o : j["ops"]) {
    StepOp op;
    if (o.is_object() && o.contains("cancel") && o["cancel"].is_number_integer()) {
      op.kind = StepOp::Kind::kCancel;
      op.gen_id = o["cancel"].get<int>();
    } else if (o.is_object() && o.contains("submit") && o["submit"].is_number_integer() && o.contains("request")) {
      op.gen_id = o["submit"].get<int>();
      LATTICE_ASSIGN_OR_RETURN(op.request, request_from(o["request"]));
    } else {
      return Corrupt("step message: an op is neither a submit nor a cancel");
    }
    m.ops.push_back(std::move(op));
  }
  return m;
}

Result<std::unique_ptr<ClusterEngine>> ClusterEngine::create(cluster::Cluster& c, const par::DistOptions& options,
                                                             const engine::Tokenizer& tokenizer,
                                                             const engine::GeneratorOptions& go) {
  std::unique_ptr<ClusterEngine> e(new ClusterEngine(c, tokenizer));
  e->opt_ = options;
  e->go_ = go;
  e->first_rank_ = c.rank();
  for (int r = 0; r < c.world_size(); ++r) e->members_.push_back(r);
  LATTICE_ASSIGN_OR_RETURN(e->comm_, coll::Communicator::create(c));
  LATTICE_ASSIGN_OR_RETURN(e->pl_, par::place(options, c, *e->comm_, {}, go.n_ctx));
  e->go_.n_ctx = e->n_ctx();
  e->go_.prefill_chunk = e->pl_->stepper().max_rows();
  return e;
}

uint32_t ClusterEngine::n_ctx() const { return pl_->n_ctx(); }
uint32_t ClusterEngine::n_vocab() const { return pl_->model->hparams().n_vocab; }

Result<std::unique_ptr<engine::Generator>> ClusterEngine::generator() {
  if (!pl_) return Unavailable("serve: no placement (a recovery failed)");
  return engine::Generator::create(pl_->stepper(), tokenizer_, go_);
}

Status ClusterEngine::recover(const Status& cause) {
  const auto t0 = std::chrono::steady_clock::now();
  const int world_before = cluster_.world_size();
  if (pl_) {
    coll_bytes_before_ += pl_->coll_stats().bytes;
    coll_calls_before_ += pl_->coll_stats().calls;
  }
  link_bytes_before_ = link_bytes();  // the shrink replaces every endpoint
  pl_.reset();
  data_plane_ = false;  // after a recovery the next message comes on the control plane
  if (world_before <= 1) return Status(cause.code(), cause.message() + " (no survivors left to take the work)", cause.peer());
  // rank 0 schedules: its state is the truth, so the agreement carries nothing.
  LATTICE_ASSIGN_OR_RETURN(auto shrunk, par::shrink_and_agree(cluster_, members_, par::Progress{}, opt_.recovery_timeout));
  if (std::find(shrunk.lost.begin(), shrunk.lost.end(), 0) != shrunk.lost.end())
    return PeerLost("rank 0 (the server: it held the HTTP clients) is gone");
  members_ = shrunk.members;
  const auto t_place = std::chrono::steady_clock::now();
  LATTICE_ASSIGN_OR_RETURN(pl_, par::place(opt_, cluster_, *comm_, {}, go_.n_ctx));
  go_.prefill_chunk = pl_->stepper().max_rows();
  par::RecoveryEvent ev;
  ev.lost_ranks = shrunk.lost;
  ev.epoch = cluster_.epoch();
  ev.world_before = world_before;
  ev.world_after = cluster_.world_size();
  ev.shrink_ms = shrunk.shrink_ms;
  ev.place_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_place).count();
  ev.recover_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ev.cause = cause.to_string();
  LATTICE_LOG_WARN("serve: rank {}: lost rank(s) {}; the model is re-placed on {} rank(s) in {:.0f} ms", first_rank_,
                   json(ev.lost_ranks).dump(), ev.world_after, ev.recover_ms);
  const int64_t unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard lk(mu_);
  recoveries_.push_back({std::move(ev), unix_ms});
  return Status::Ok();
}

std::map<int, std::pair<uint64_t, uint64_t>> ClusterEngine::link_bytes() const {
  auto all = link_bytes_before_;
  for (int p = 0; p < cluster_.world_size(); ++p) {
    if (p == cluster_.rank() || size_t(p) >= members_.size()) continue;
    auto& [sent, received] = all[members_[size_t(p)]];
    for (const cluster::Link& l : cluster_.links(p)) {
      const fabric::LinkBytes b = l.endpoint->link_bytes();
      sent += b.sent, received += b.received;
    }
  }
  return all;
}

RankReport ClusterEngine::my_report() const {
  RankReport r;
  r.rank = cluster_.rank();
  r.first_rank = first_rank_;
  r.resident_bytes = resident_memory_bytes();
  r.coll_bytes = coll_bytes_before_;
  r.coll_calls = coll_calls_before_;
  r.host = host_.get();
  for (const auto& [peer, b] : link_bytes()) {
    RankReport::Link l;
    l.peer = peer, l.sent = b.first, l.received = b.second;
    if (auto f = link_figures_.find(peer); f != link_figures_.end())
      l.lat_us = f->second.lat_us, l.gbps = f->second.gbps, l.figures_from = f->second.from;
    r.links.push_back(std::move(l));
  }
  if (pl_) {
    r.coll_bytes += pl_->coll_stats().bytes;
    r.coll_calls += pl_->coll_stats().calls;
    fill_shard(*pl_->model, &r);
  }
  return r;
}

namespace {
// A data-plane message: its length and up to kInline bytes in one broadcast, the rest (rare:
// a long prompt) in a second one.
constexpr size_t kInlineWords = 63;
}  // namespace

Status ClusterEngine::broadcast(std::string* text) {
  std::vector<uint32_t> head(1 + kInlineWords, 0);
  const bool root = cluster_.rank() == 0;
  if (root) {
    head[0] = static_cast<uint32_t>(text->size());
    std::memcpy(head.data() + 1, text->data(), std::min(text->size(), kInlineWords * 4));
  }
  LATTICE_RETURN_IF_ERROR(pl_->group->broadcast32(head.data(), head.size(), 0));
  const size_t n = head[0];
  if (n > (64u << 20)) return Corrupt("step message: " + std::to_string(n) + " bytes");
  if (root) {
    if (n > kInlineWords * 4) {
      std::vector<uint32_t> rest((n - kInlineWords * 4 + 3) / 4, 0);
      std::memcpy(rest.data(), text->data() + kInlineWords * 4, n - kInlineWords * 4);
      LATTICE_RETURN_IF_ERROR(pl_->group->broadcast32(rest.data(), rest.size(), 0));
    }
    return Status::Ok();
  }
  text->assign(reinterpret_cast<const char*>(head.data() + 1), std::min(n, kInlineWords * 4));
  if (n > kInlineWords * 4) {
    std::vector<uint32_t> rest((n - kInlineWords * 4 + 3) / 4, 0);
    LATTICE_RETURN_IF_ERROR(pl_->group->broadcast32(rest.data(), rest.size(), 0));
    text->append(reinterpret_cast<const char*>(rest.data()), n - kInlineWords * 4);
  }
  return Status::Ok();
}

Status ClusterEngine::gather_reports(std::chrono::milliseconds timeout) {
  const RankReport me = my_report();
  LATTICE_ASSIGN_OR_RETURN(auto all, cluster_.allgather(encode_report(me), Deadline::after(timeout)));
  if (cluster_.rank() != 0) return Status::Ok();
  std::vector<RankReport> reports{me};
  for (size_t r = 1; r < all.size(); ++r) reports.push_back(decode_report(all[r], static_cast<int>(r)));
  std::lock_guard lk(mu_);
  set_reports(std::move(reports));
  return Status::Ok();
}

// Rank 0, under mu_: each link's and each rank's collective bytes/s since the reports before
// (the dashboard shows them; computed here, where the reports' times are known, not from the
// browser's polls, which may fall twice between two reports and read no change).
void ClusterEngine::set_reports(std::vector<RankReport> reports) {
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - reports_at_).count();
  for (RankReport& r : reports)
    for (const RankReport& old : reports_) {
      if (old.first_rank != r.first_rank || dt <= 0) continue;
      if (r.coll_bytes >= old.coll_bytes) r.coll_bytes_per_s = (r.coll_bytes - old.coll_bytes) / dt;
      for (RankReport::Link& l : r.links)
        for (const RankReport::Link& o : old.links)
          if (o.peer == l.peer && l.sent >= o.sent && l.received >= o.received)
            l.sent_per_s = (l.sent - o.sent) / dt, l.received_per_s = (l.received - o.received) / dt;
    }
  reports_ = std::move(reports);
  reports_at_ = now;
}

Result<StepMessage> ClusterEngine::exchange(const StepMessage* mine, std::chrono::milliseconds timeout) {
  if (!pl_) return Unavailable("serve: no placement (a recovery failed)");
  const bool root = cluster_.rank() == 0;
  StepMessage msg;
  if (data_plane_) {
    if (root) {
      msg = *mine;
      const auto now = std::chrono::steady_clock::now();
      msg.report = now - last_report_ >= std::chrono::seconds(1);
      if (msg.report) last_report_ = now;
    }
    std::string text = root ? encode_step(msg) : std::string();
    LATTICE_RETURN_IF_ERROR(broadcast(&text));
    if (!root) {
      LATTICE_ASSIGN_OR_RETURN(msg, decode_step(text));
    }
    if (msg.report) LATTICE_RETURN_IF_ERROR(gather_reports(timeout));
  } else {
    // rank 0's contribution is the message; the others' their report.
    const RankReport me = my_report();
    LATTICE_ASSIGN_OR_RETURN(auto all, cluster_.allgather(root ? encode_step(*mine) : encode_report(me),
                                                          Deadline::after(timeout)));
    if (all.empty()) return Corrupt("step exchange: no contributions");
    if (root) {
      msg = *mine;
      std::vector<RankReport> reports{me};
      for (size_t r = 1; r < all.size(); ++r) reports.push_back(decode_report(all[r], static_cast<int>(r)));
      std::lock_guard lk(mu_);
      set_reports(std::move(reports));
      last_report_ = std::chrono::steady_clock::now();
    } else {
      LATTICE_ASSIGN_OR_RETURN(msg, decode_step(all[0]));
    }
  }
  data_plane_ = msg.step && !msg.stop;
  return msg;
}

std::vector<RankReport> ClusterEngine::reports() const {
  std::lock_guard lk(mu_);
  return reports_;
}

std::vector<Recovery> ClusterEngine::recoveries() const {
  std::lock_guard lk(mu_);
  return recoveries_;
}

Status LeaderChannel::exchange(const std::vector<StepOp>& ops, bool step, bool stop) {
  StepMessage m{ops, step, stop};
  return engine_.exchange(&m, std::chrono::seconds(30)).status();
}

bool LeaderChannel::recoverable(const Status& failure) const { return par::recoverable(failure); }

Result<std::unique_ptr<engine::Generator>> LeaderChannel::recover(const Status& cause) {
  LATTICE_RETURN_IF_ERROR(engine_.recover(cause));
  return engine_.generator();
}

Status follow(ClusterEngine& e, std::chrono::milliseconds timeout) {
  LATTICE_ASSIGN_OR_RETURN(auto gen, e.generator());
  std::vector<int> ids;  // submitted, not yet taken
  auto recover = [&](const Status& st) -> Status {
    if (!par::recoverable(st)) return st;
    gen.reset();
    ids.clear();
    LATTICE_RETURN_IF_ERROR(e.recover(st));
    LATTICE_ASSIGN_OR_RETURN(gen, e.generator());
    return Status::Ok();
  };
  for (;;) {
    auto msg = e.exchange(nullptr, timeout);
    if (!msg.ok()) {
      LATTICE_RETURN_IF_ERROR(recover(msg.status()));
      continue;
    }
    if (msg->stop) return Status::Ok();
    for (StepOp& op : msg->ops) {
      if (op.kind == StepOp::Kind::kCancel) {
        gen->cancel(op.gen_id);
        continue;
      }
      auto id = gen->submit(std::move(op.request));
      if (!id.ok() || *id != op.gen_id)
        return Internal("serve: rank " + std::to_string(e.rank()) + " is out of step with rank 0 (request " +
                        std::to_string(op.gen_id) + ": " + (id.ok() ? "id " + std::to_string(*id) : id.status().to_string()) + ")");
      ids.push_back(*id);
    }
    if (msg->step) {
      if (Status st = gen->step(); !st.ok()) {
        LATTICE_RETURN_IF_ERROR(recover(st));
        continue;
      }
    }
    for (auto it = ids.begin(); it != ids.end();) {
      if (gen->finished(*it)) {
        (void)gen->take(*it);
        it = ids.erase(it);
      } else {
        ++it;
      }
    }
  }
}

}  // namespace lattice::serve
