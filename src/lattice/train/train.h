// The training loop: data, tokenizer, model, AdamW, validation, checkpoints and the GGUF at
// the end, on one process or as one rank of a data-parallel job (see GradGroup).
//
// Data parallel: every rank draws its share of each global batch (rows split evenly by rank),
// runs forward and backward, and the gradients (and loss sums) are summed over the group;
// every rank then applies the same AdamW update to the same weights, so weights stay
// identical. A GradGroup whose all-reduce fails with kPeerLost may recover (shrink); the loop
// then redoes the step on the survivors, with the rows re-split, and records the recovery.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/train/model.h"
#include "lattice/train/optim.h"

namespace lattice::train {

// Sums float arrays over the ranks of a job. The solo group (rank 0 of 1) does nothing.
class GradGroup {
 public:
  virtual ~GradGroup() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place, every rank gets the sum. kPeerLost when a rank is gone.
  virtual Status all_reduce_sum(std::span<float> data) = 0;
  // After kPeerLost: shrink to the survivors (rank and world_size change). Not every group can.
  virtual Status recover() { return Unavailable("this group cannot recover from a lost rank"); }
  // After recover(): every member continues from the furthest step any of them completed;
  // members behind receive that member's weights and optimizer moments, and next_step moves.
  virtual Status sync_state(uint64_t& next_step, std::span<float> params, std::span<float> m, std::span<float> v) {
    return Status::Ok();
  }
  // One step's reduction, overlapped with backward where the group can: reduce_begin() with
  // the step's buffer and its units (float ranges [lo, hi) in the order backward finishes
  // them; together they cover the buffer), unit_ready(k) once unit k is final, then
  // reduce_end() returns when every rank holds the sum (kPeerLost as all_reduce_sum). The
  // buffer must not be touched in between except to finish units. Units never reported are
  // reduced in reduce_end(). The default sums the whole buffer in reduce_end().
  virtual void reduce_begin(std::span<float> data, std::span<const std::pair<size_t, size_t>> units) {
    pending_ = data;
  }
  virtual void unit_ready(size_t unit) {}
  virtual Status reduce_end() { return all_reduce_sum(pending_); }
  // Profiling (TrainOptions::profile): returns once every rank entered it, between backward and
  // reduce_end(); kUnavailable where the group cannot (solo; a reduction in flight).
  virtual Status barrier() { return Unavailable("no barrier"); }
  // Growing at a step boundary. joiners_waiting(): how many nodes this rank saw asking to join
  // (summed over the ranks with the step's gradients, so every rank decides alike). grow():
  // every member calls it after the same step's update; the waiting nodes enter (the world
  // grows) and receive next_step, the weights and the optimizer moments (as sync_state). A
  // joining rank (joining() true) calls sync_state() before its first step instead.
  virtual float joiners_waiting() const { return 0; }
  virtual Status grow(uint64_t next_step, std::span<float> params, std::span<float> m, std::span<float> v) {
    return Unavailable("this group cannot grow");
  }
  virtual bool joining() const { return false; }
  // At the end: kInternal unless every rank holds weights with this hash (FNV-1a of the bits).
  virtual Status check_same(uint64_t weights_hash) { return Status::Ok(); }
  // Called at the start of every step; an error ends this rank's training with it (a fault
  // injected at a chosen step: tests, --inject-fault).
  virtual Status before_step(uint64_t step) { return Status::Ok(); }

 protected:
  std::span<float> pending_;
};

class SoloGroup final : public GradGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  Status all_reduce_sum(std::span<float>) override { return Status::Ok(); }
};

struct TrainOptions {
  std::vector<std::string> data;
  LlamaConfig model;            // model.vocab is the tokenizer's size too
  uint64_t steps = 0;           // 0: the checkpoint's when resuming, else 200
  uint32_t batch = 16;          // global batch, sequences
  uint32_t seq = 256;
  float lr = 1e-3f;
  uint64_t warmup = 20;
  float weight_decay = 0.1f;
  float clip = 1.0f;
  uint64_t seed = 1;
  unsigned threads = 0;         // 0: hardware concurrency
  double val_fraction = 0.05;
  uint64_t val_every = 50;      // 0: only at the end
  uint32_t val_windows = 16;
  std::string out;              // the GGUF ("" = none)
  std::string checkpoint;       // written every checkpoint_every steps and at the end ("" = none)
  uint64_t checkpoint_every = 0;
  std::string resume;           // a checkpoint to continue from
  std::string loss_csv, loss_svg;
  // Shares of the global batch by measured speed (rows a second of each rank's last steps,
  // exchanged in the step's reduction) instead of even shares. The result still equals the
  // one-rank run up to float reassociation, but the split depends on timing: --resume is then
  // no longer bit for bit.
  bool balance = false;
  bool profile = false;         // time each phase of a step (TrainReport::phase_ms); adds a barrier
  uint64_t stop_after = 0;      // > 0: stop (as if killed) once this many steps are done (tests)
  // After every step's update, with the weights (tests: identical on every rank).
  std::function<void(uint64_t step, std::span<const float> params)> on_step;
};

struct StepRecord {
  uint64_t step = 0;
  double loss = 0;
  double val_loss = -1;  // < 0: not measured at this step
  float lr = 0;
};

struct Recovery {
  uint64_t step = 0;
  int world_before = 0, world_after = 0;
  std::string reason;
  double recover_ms = 0;  // from the failed all-reduce to the survivors agreeing
};

struct Join {
  uint64_t step = 0;  // the first step with the grown world
  int world_before = 0, world_after = 0;
  double join_ms = 0;  // the shrink into the new epoch and the state broadcast
};

struct TrainReport {
  uint64_t steps = 0;
  double final_loss = 0, val_loss = 0;
  double samples_per_s = 0, tokens_per_s = 0;
  double seconds = 0;
  double step_ms_median = 0;  // forward, backward, all-reduce and update of one step (no validation)
  // Medians over steps (ms) of: forward + backward, the barrier before the reduction (the wait
  // for the slowest rank; -1 unless profiling without a reduction in flight), reduce_end()
  // (the all-reduce time backward did not hide) and the AdamW update.
  struct Phases {
    double compute = 0, wait = -1, reduce = 0, update = 0;
  } phase_ms;
  size_t n_params = 0;
  std::vector<StepRecord> history;
  std::vector<Recovery> recoveries;
  std::vector<Join> joins;
  std::vector<size_t> rows_by_rank;  // the last step's split of the global batch
  uint64_t start_step = 0;  // resumed or joined at
};

// FNV-1a over the bits of `v` (the weights every rank must agree on).
uint64_t hash_floats(std::span<const float> v);

struct Progress {
  uint64_t step = 0, steps = 0;
  double loss = 0, tokens_per_s = 0, eta_s = 0;
  double val_loss = -1;
  float lr = 0;
};

using ProgressFn = std::function<void(const Progress&)>;

Result<TrainReport> train(const TrainOptions& options, GradGroup& group, const ProgressFn& progress = {});

// The loss curve: CSV (step,loss,val_loss,lr) and an SVG line plot.
Status write_loss_csv(const std::string& path, const std::vector<StepRecord>& history);
Status write_loss_svg(const std::string& path, const std::vector<StepRecord>& history);

}  // namespace lattice::train
