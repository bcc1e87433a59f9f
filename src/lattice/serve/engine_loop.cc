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

void EngineLoop::admit_new() {
  std::deque<std::unique_ptr<Job>> batch;
  {
    std::lock_guard lk(mu_);
    batch.swap(incoming_);
  }
  for (auto& job : batch) {
    Job* j = job.get();
    auto id = gen_->submit(j->request, [j, m = opt_.metrics](int, std::string_view piece) {
      if (m) {
        // Latencies are taken at the pieces of text handed out (a piece is one token's text,
        // except where a stop string or a split UTF-8 character holds some back).
        const auto now = std::chrono::steady_clock::now();
        const auto& from = j->had_piece ? j->last_piece : j->accepted;
        (j->had_piece ? m->inter_token() : m->ttft()).observe(std::chrono::duration<double>(now - from).count());
        j->had_piece = true;
        j->last_piece = now;
      }
      if (j->sink.on_piece) j->sink.on_piece(piece);
    });
    if (!id.ok()) {
      {
        std::lock_guard lk(mu_);
        --stats_.in_flight;
        ++stats_.failed;
      }
      if (j->sink.on_done) j->sink.on_done(id.status());
      continue;
    }
    j->gen_id = *id;
    j->request = {};  // the Generator holds its own copy
    running_.push_back(std::move(job));
  }
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
    if (opt_.metrics && r.ok()) opt_.metrics->add_tokens(r->prompt_tokens.size(), r->tokens.size());
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
    {
      std::unique_lock lk(mu_);
      // Idle: wait for work, but never unboundedly (the stop flag is re-checked).
      if (!gen_->busy() && incoming_.empty() && cancels_.empty() && !stopping_) cv_.wait_for(lk, 200ms);
      if (stopping_) break;
      cancels.swap(cancels_);
    }
    admit_new();
    for (uint64_t id : cancels)
      for (auto& job : running_)
        if (job->id == id) gen_->cancel(job->gen_id);
    if (gen_->busy()) {
      if (Status st = gen_->step(); !st.ok()) {
        // The caches are stale after a failed step: every running job fails and a fresh
        // Generator takes the next ones.
        LATTICE_LOG_ERROR("serve: a generation step failed: {}; failing {} requests", st.to_string(), running_.size());
        fail_all(st);
        gen_.reset();
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
    std::lock_guard lk(mu_);
    stats_.active = gen_->n_active();
    stats_.queued = gen_->n_queued() + incoming_.size();
  }
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
