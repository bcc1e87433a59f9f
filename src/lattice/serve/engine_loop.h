// EngineLoop: the one thread that owns a Generator. Other threads (the HTTP server's) hand it
// jobs through a bounded queue and get text pieces and the result back through callbacks;
// nothing but this thread ever touches the Generator. The thread takes new jobs and
// cancellations between steps and loops step() while there is work, so every running
// request shares the decode steps (continuous batching) and new prompts are prefilled in
// chunks between them.
//
// Thread safety: submit(), cancel() and stats() may be called from any thread. The sink's
// callbacks run on the engine thread, inside step(): they must be quick and must not call
// back into the EngineLoop's submit() (cancel() is fine). on_done is called exactly once
// per accepted job, also when the loop stops (with kCancelled).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/serve/metrics.h"

namespace lattice::serve {

struct JobSink {
  std::function<void(std::string_view piece)> on_piece;             // text as it is generated
  std::function<void(Result<engine::GenerateResult>)> on_done;      // the end (once)
};

// Serving over N ranks (lockstep.h): the followers make the same Generator calls as the
// engine thread, in the same order. The loop records its calls (successful submits, cancels)
// and hands them to the channel before each step; a failure the channel can recover from (a
// lost rank) re-places the model and resubmits every running request from where it got.
struct StepOp {
  enum class Kind : uint8_t { kSubmit, kCancel } kind = Kind::kSubmit;
  int gen_id = 0;                      // the id the Generator gave (submit) or is given (cancel)
  engine::GenerationRequest request;   // kSubmit only
};

class StepChannel {
 public:
  virtual ~StepChannel() = default;
  // Collective with the followers: the calls made since the last exchange, then whether a
  // step follows (false: a tick while idle, which also bounds the followers' waits) and
  // whether this is the last exchange (the loop stops).
  virtual Status exchange(const std::vector<StepOp>& ops, bool step, bool stop) = 0;
  virtual bool recoverable(const Status& failure) const = 0;
  // After a recoverable failure, with the old Generator already dropped: the survivors shrink
  // and re-place the model; a fresh Generator over the new placement.
  virtual Result<std::unique_ptr<engine::Generator>> recover(const Status& cause) = 0;
};

struct EngineLoopOptions {
  // Jobs accepted and not yet done (running + waiting); submit() refuses past it. The
  // Generator's own queue must hold at least max_jobs - slots.
  size_t max_jobs = 256 + 8;
  // Token counts and latencies are added here (from the engine thread) when set; it must
  // outlive the loop.
  Metrics* metrics = nullptr;
  // Multi-rank serving (see StepChannel); it must outlive the loop. Null on one node.
  StepChannel* channel = nullptr;
  // How often an idle loop ticks the channel (the followers wait at most a few of these).
  std::chrono::milliseconds idle_tick{500};
};

class EngineLoop {
 public:
  // Builds the Generator (on the calling thread) and starts the engine thread. The factory is
  // kept: after a failed step the loop fails every job and builds a fresh Generator.
  using MakeGenerator = std::function<Result<std::unique_ptr<engine::Generator>>()>;
  static Result<std::unique_ptr<EngineLoop>> start(MakeGenerator make, const EngineLoopOptions& options);
  // Stops the thread: jobs still queued or running end with kCancelled (their sinks are
  // then released). Blocks for at most one step. Later submits get kCancelled. Idempotent.
  void stop();
  ~EngineLoop() { stop(); }

  // Accepts a job; returns its id. kResourceExhausted when max_jobs are in flight (the
  // HTTP answer is 503), kCancelled after stop.
  Result<uint64_t> submit(engine::GenerationRequest request, JobSink sink);
  // Ends a job at the next step (its on_done then gets stop_reason "cancelled"). Unknown
  // or finished ids are ignored.
  void cancel(uint64_t job);

  struct Stats {
    size_t in_flight = 0;      // accepted, not done
    size_t active = 0;         // holding a slot
    size_t queued = 0;         // waiting for a slot (in the Generator or the hand-off)
    uint64_t completed = 0;    // ended by length, end-of-generation or a stop string
    uint64_t cancelled = 0;
    uint64_t failed = 0;       // refused by the Generator or lost to a failed step
    uint64_t tokens_generated = 0;
    uint64_t recoveries = 0;   // lost ranks the loop re-placed the model after
    uint64_t tokens_running = 0;  // generated so far by the requests still running (live rates)
    double tokens_per_second = 0;  // generated over the last few seconds
  };
  Stats stats() const;

 private:
  struct Job {
    uint64_t id = 0;
    engine::GenerationRequest request;
    JobSink sink;
    int gen_id = 0;  // the Generator's id once submitted there
    std::chrono::steady_clock::time_point accepted;    // at submit()
    std::chrono::steady_clock::time_point last_piece;  // engine thread only
    bool had_piece = false;                            // engine thread only
    bool cancelled = false;                            // engine thread only
  };
  EngineLoop() = default;
  void run();
  void admit_new();
  void reap_finished();
  void fail_all(const Status& st);
  Status submit_to_generator(Job& j, engine::GenerationRequest request);
  // Multi-rank: after a failed step or exchange the channel can recover from. False: it
  // could not (every job then failed).
  bool recover(const Status& cause);
  Status exchange(bool step, bool stop);

  MakeGenerator make_;
  EngineLoopOptions opt_;
  std::unique_ptr<engine::Generator> gen_;  // the engine thread's only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> incoming_;  // guarded by mu_
  std::vector<uint64_t> cancels_;              // guarded by mu_
  bool stopping_ = false;                      // guarded by mu_
  Stats stats_;                                // guarded by mu_ (in_flight counted at submit)

  std::vector<std::unique_ptr<Job>> running_;  // engine thread only: submitted to gen_
  std::vector<StepOp> ops_;                    // engine thread only: calls since the last exchange
  // Engine thread only: (time, tokens generated in all) about every 250 ms over the last 3 s.
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> rate_samples_;
  std::atomic<uint64_t> next_id_{1};
  std::thread thread_;
};

}  // namespace lattice::serve
