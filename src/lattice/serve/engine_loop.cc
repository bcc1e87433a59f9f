#include "lattice/serve/engine_loop.h"

#include <algorithm>
#include <chrono>

#include "lattice/core/log.h"

namespace lattice::serve {

using namespace std::chrono_literals;

Result<std::unique_ptr<EngineLoop>> EngineLoop::start(MakeGenerator make, const EngineLoopOptions& options) {
  if (!make) return InvalidArgument("engine loop: no generator factory");
  if (options.max_jobs == 0) return InvalidArgument("engine loop: max_jobs must be at least 1");
  std::unique_ptr<EngineLoop> loop(new EngineLoop());
  loop->make_ = std::move(make);
  loop->opt_ = options;
  LATTICE_ASSIGN_OR_RETURN(loop->gen_, loop->make_());
  const auto& go = loop->gen_->options();
  if (options.max_jobs > static_cast<size_t>(go.max_seqs) + go.max_queue)
    return InvalidArgument("engine loop: max_jobs exceeds the generator's slots + queue");
  loop->thread_ = std::thread([p = loop.get()] { p->run(); });
  return loop;
}

void EngineLoop::stop() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<uint64_t> EngineLoop::submit(engine::GenerationRequest request, JobSink sink) {
  auto job = std::make_unique<Job>();
  job->id = next_id_.fetch_add(1);
  job->request = std::move(request);
  job->sink = std::move(sink);
  job->accepted = std::chrono::steady_clock::now();
  const uint64_t id = job->id;
  {
    std::lock_guard lk(mu_);
    if (stopping_) return Cancelled("the server is stopping");
    if (stats_.in_flight >= opt_.max_jobs)
      return ResourceExhausted("the server is busy: " + std::to_string(stats_.in_flight) +
                               " requests are running or waiting; try again later");
    ++stats_.in_flight;
    ++stats_.queued;
    incoming_.push_back(std::move(job));
  }
  cv_.notify_one();
  return id;
}

void EngineLoop::cancel(uint64_t job) {
  {
    std::lock_guard lk(mu_);
    cancels_.push_back(job);
  }
  cv_.notify_one();
}

EngineLoop::Stats EngineLoop::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

Status EngineLoop::submit_to_generator(Job& j, engine::GenerationRequest request) {
  Job* jp = &j;
  engine::GenerationRequest copy;
  if (opt_.channel) copy = request;  // for the followers, and resubmitted after a recovery
  auto id = gen_->submit(std::move(request), [jp, m = opt_.metrics](int, std::string_view piece) {
    if (m) {
      // Latencies are taken at the pieces of text handed out (a piece is one token's text,
      // except where a stop string or a split UTF-8 character holds some back).
      const auto now = std::chrono::steady_clock::now();
      const auto& from = jp->had_piece ? jp->last_piece : jp->accepted;
      (jp->had_piece ? m->inter_token() : m->ttft()).observe(std::chrono::duration<double>(now - from).count());
      jp->had_piece = true;
      jp->last_piece = now;
    }
    if (jp->sink.on_piece) jp->sink.on_piece(piece);
  });
  if (!id.ok()) return id.status();
  j.gen_id = *id;
  if (opt_.channel) ops_.push_back({StepOp::Kind::kSubmit, *id, std::move(copy)});
  return Status::Ok();
}

void EngineLoop::admit_new() {
  std::deque<std::unique_ptr<Job>> batch;
  {
    std::lock_guard lk(mu_);
    batch.swap(incoming_);
  }
  for (auto& job : batch) {
    Job* j = job.get();
    engine::GenerationRequest req = opt_.channel ? j->request : std::move(j->request);
    if (Status st = submit_to_generator(*j, std::move(req)); !st.ok()) {
      {
        std::lock_guard lk(mu_);
        --stats_.in_flight;
        ++stats_.failed;
      }
      if (j->sink.on_done) j->sink.on_done(st);
      continue;
    }
    // The Generator holds its own copy; over N ranks the request is kept for a recovery,
    // with the resume state of its progress then.
    if (!opt_.channel) j->request = {};
    running_.push_back(std::move(job));
  }
}

Status EngineLoop::exchange(bool step, bool stop) {
  if (!opt_.channel) return Status::Ok();
  Status st = opt_.channel->exchange(ops_, step, stop);
  ops_.clear();
  return st;
}

bool EngineLoop::recover(const Status& cause) {
  // Where every running request got (a failed step leaves them as before it).
  std::vector<engine::Generator::Progress> progress;
  for (auto& job : running_) {
    auto p = gen_->progress(job->gen_id);
    progress.push_back(p.ok() ? std::move(*p) : engine::Generator::Progress{});
  }
  gen_.reset();
  ops_.clear();
  LATTICE_LOG_WARN("serve: {}; re-placing the model over the surviving ranks ({} requests resume)", cause.to_string(),
                   running_.size());
  auto fresh = opt_.channel->recover(cause);
  if (!fresh.ok()) {
    LATTICE_LOG_ERROR("serve: recovery failed: {}", fresh.status().to_string());
    fail_all(fresh.status().with_context("a rank was lost and the survivors could not take over"));
    return false;
  }
  gen_ = std::move(*fresh);
  {
    std::lock_guard lk(mu_);
    ++stats_.recoveries;
  }
  // Every running request again, from its progress: the text of its tokens so far was handed
  // out before, so the stream goes on where it paused.
  std::vector<std::unique_ptr<Job>> jobs;
  jobs.swap(running_);
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = *jobs[i];
    Status st = j.cancelled ? Cancelled("cancelled") : Status::Ok();
    if (st.ok()) {
      engine::GenerationRequest req = j.request;
      req.resume_tokens = std::move(progress[i].tokens);
      req.resume_draws = progress[i].draws;
      st = submit_to_generator(j, std::move(req));
    }
    if (!st.ok()) {
      {
        std::lock_guard lk(mu_);
        --stats_.in_flight;
        ++(st.code() == ErrorCode::kCancelled ? stats_.cancelled : stats_.failed);
      }
      if (j.sink.on_done) j.sink.on_done(st);
      continue;
    }
    running_.push_back(std::move(jobs[i]));
  }
  return true;
}

void EngineLoop::reap_finished() {
  for (auto it = running_.begin(); it != running_.end();) {
    Job& j = **it;
    if (!gen_->finished(j.gen_id)) {
      ++it;
      continue;
    }
    auto r = gen_->take(j.gen_id);
    {
      std::lock_guard lk(mu_);
      --stats_.in_flight;
      if (!r.ok()) ++stats_.failed;
      else if (r->stop_reason == "cancelled") ++stats_.cancelled;
      else ++stats_.completed;
      if (r.ok()) stats_.tokens_generated += r->tokens.size();
    }
    if (opt_.metrics && r.ok()) opt_.metrics->add_tokens(r->prompt_tokens.size(), r->tokens.size(), r->cached_tokens);
    if (j.sink.on_done) j.sink.on_done(std::move(r));
    it = running_.erase(it);
  }
}

void EngineLoop::fail_all(const Status& st) {
  for (auto& job : running_) {
    {
      std::lock_guard lk(mu_);
      --stats_.in_flight;
      ++stats_.failed;
    }
    if (job->sink.on_done) job->sink.on_done(st);
  }
  running_.clear();
}

void EngineLoop::run() {
  for (;;) {
    std::vector<uint64_t> cancels;
    bool idle_timeout = false;
    {
      std::unique_lock lk(mu_);
      // Idle: wait for work, but never unboundedly (the stop flag is re-checked, and over N
      // ranks the followers get a tick).
      if (!gen_->busy() && incoming_.empty() && cancels_.empty() && !stopping_)
        idle_timeout = !cv_.wait_for(lk, opt_.idle_tick, [&] { return stopping_ || !incoming_.empty() || !cancels_.empty(); });
      if (stopping_) break;
      cancels.swap(cancels_);
    }
    admit_new();
    for (uint64_t id : cancels)
      for (auto& job : running_)
        if (job->id == id && !job->cancelled) {
          job->cancelled = true;
          gen_->cancel(job->gen_id);
          if (opt_.channel) ops_.push_back({StepOp::Kind::kCancel, job->gen_id, {}});
        }
    Status st = Status::Ok();
    if (gen_->busy()) {
      st = exchange(true, false);
      if (st.ok()) st = gen_->step();
    } else if (idle_timeout || !ops_.empty()) {
      st = exchange(false, false);
    }
    if (!st.ok()) {
      if (opt_.channel) {
        // Over N ranks the followers' Generators must stay the same as this one: a failure
        // no recovery can mend stops the loop.
        if (!opt_.channel->recoverable(st)) {
          LATTICE_LOG_ERROR("serve: a generation step failed: {}; stopping", st.to_string());
          fail_all(st);
        }
        if (!opt_.channel->recoverable(st) || !recover(st)) {
          std::lock_guard lk(mu_);
          stopping_ = true;
          break;
        }
      } else {
        // The caches are stale after a failed step: every running job fails and a fresh
        // Generator takes the next ones.
        LATTICE_LOG_ERROR("serve: a generation step failed: {}; failing {} requests", st.to_string(), running_.size());
        fail_all(st);
        gen_.reset();
        ops_.clear();
        auto fresh = make_();
        if (!fresh.ok()) {
          LATTICE_LOG_ERROR("serve: cannot rebuild the generator: {}", fresh.status().to_string());
          std::lock_guard lk(mu_);
          stopping_ = true;
          break;
        }
        gen_ = std::move(*fresh);
      }
    }
    reap_finished();
    uint64_t running_tokens = 0;
    for (const auto& job : running_)
      if (auto n = gen_->n_generated(job->gen_id); n.ok()) running_tokens += *n;
    std::lock_guard lk(mu_);
    stats_.tokens_running = running_tokens;
    const auto now = std::chrono::steady_clock::now();
    const uint64_t total = stats_.tokens_generated + running_tokens;
    if (rate_samples_.empty() || now - rate_samples_.back().first >= 250ms) rate_samples_.emplace_back(now, total);
    while (rate_samples_.size() > 1 && now - rate_samples_.front().first > 3s) rate_samples_.pop_front();
    const double span = std::chrono::duration<double>(now - rate_samples_.front().first).count();
    stats_.tokens_per_second = span > 0.2 ? (total - rate_samples_.front().second) / span : 0;
    stats_.active = gen_->n_active();
    stats_.queued = gen_->n_queued() + incoming_.size();
  }
  // The followers stop with the loop (best effort: they also give up when the ticks stop).
  if (opt_.channel) (void)exchange(false, true);
  // Stopping: whatever is left ends as cancelled.
  std::deque<std::unique_ptr<Job>> left;
  {
    std::lock_guard lk(mu_);
    left.swap(incoming_);
  }
  for (auto& job : running_) left.push_back(std::move(job));
  running_.clear();
  for (auto& job : left) {
    {
      std::lock_guard lk(mu_);
      --stats_.in_flight;
      ++stats_.cancelled;
    }
    if (job->sink.on_done) job->sink.on_done(Cancelled("the server is stopping"));
  }
}

}  // namespace lattice::serve
