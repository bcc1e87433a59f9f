// Pipeline parallelism: contiguous layer ranges per rank (stage), activations passed
// point to point over the Communicator (coll::send/recv), prefill cut into micro-batches so
// the stages overlap (stage s runs micro-batch m while stage s+1 runs m-1).
//
// Stage r of W holds layers pp_layers(...)[r] (a Model bound with that layer range and a
// tensor-parallel world of 1) and runs the one forward pass (runtime/forward.h) over them;
// the first stage embeds tokens, the last one holds the output norm and matrix. Every rank calls prefill/decode with the same tokens; the last stage picks
// the next token and broadcasts it, so all ranks agree. Logits are bit-identical to a
// single-node Session on the same file: every stage runs the same kernels on the same whole
// matrices, only on fewer layers (quantized matmuls do not depend on the batch split).
//
// Thread safety: one thread per rank, like the Communicator.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "lattice/engine/model/model.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/group.h"
#include "lattice/engine/runtime/session.h"
#include "lattice/engine/sampler/sampler.h"

namespace lattice::engine::parallel {

// Layer ranges per stage, proportional to `weights` (memory or speed of each node; empty:
// equal). Every stage gets at least one layer: kInvalidArgument if world > n_layer.
Result<std::vector<Range>> pp_layers(uint32_t n_layer, int world, std::span<const double> weights = {});

struct PpSessionOptions {
  SessionOptions session;     // n_batch is the micro-batch size of prefill
  uint32_t max_items = 1;     // sequences per step (as a Stepper)
  // Stage i runs on rank stage_order[i] (empty: rank i). On a ring of cables whose hosts are
  // not listed in cable order, the communicator's route makes consecutive stages neighbours.
  std::vector<int> stage_order;
};

// Also a Stepper (runtime/forward.h), so a Generator runs over a pipeline as over one node:
// a step runs each item's rows through the stages in micro-batches; choose() samples on the
// last stage and broadcasts the tokens and how many random draws each took.
class PpSession final : public Stepper {
 public:
  // `stage` must be bound to this rank's layer range (Shard::layer_begin/end) with a
  // tensor-parallel world of 1; `group` carries the activations between the stages.
  static Result<std::unique_ptr<PpSession>> create(const Model& stage, Group& group,
                                                   const PpSessionOptions& options = {});

  // One sequence (its own, made at create()).
  Status prefill(std::span<const int32_t> tokens);
  Status decode(int32_t token);
  // The greedy next token (chosen by the last stage, broadcast to all).
  Result<int32_t> argmax();
  // Samples on the last stage with `sampler` and broadcasts; every rank's sampler is kept in
  // step by the caller's accept().
  Result<int32_t> sample(Sampler& sampler);
  // The last token's logits on every rank (a broadcast of n_vocab floats from the last stage).
  Status gather_logits(std::vector<float>* out);
  uint32_t n_past() const { return seq_->n_past(); }
  uint32_t n_ctx() const { return forward_->options().n_ctx; }  // positions a sequence may hold

  // Stepper.
  Result<std::unique_ptr<Sequence>> new_sequence(uint32_t n_ctx) const override { return forward_->new_sequence(n_ctx); }
  Status step(std::span<const StepItem> items) override;
  Result<std::vector<int32_t>> choose(std::span<Sampler* const> samplers) override;
  uint32_t max_items() const override { return n_max_items_; }
  uint32_t max_rows() const override { return n_max_items_ * micro_; }
  const Model& model() const override { return *stage_; }

  // This rank's point-to-point and broadcast traffic (bytes it sent) and time waiting in them.
  const CollStats& coll_stats() const { return group_->stats(); }

 private:
  PpSession() = default;
  Status run_rows(Sequence& seq, const int32_t* tokens, uint32_t n);
  bool last() const { return stage_index_ == group_->size() - 1; }

  const Model* stage_ = nullptr;
  Group* group_ = nullptr;
  SoloGroup own_;  // the stage's layers run on this rank alone
  std::unique_ptr<Forward> forward_;
  std::unique_ptr<Sequence> seq_;
  std::vector<float> in_, out_;
  uint32_t micro_ = 0;
  size_t n_items_ = 0;               // items of the last step
  uint32_t n_max_items_ = 1;
  std::vector<float> logits_;        // the last stage: n_max_items_ x n_vocab
  int stage_index_ = 0;              // this rank's place in the pipeline
  int prev_ = -1, next_ = -1, last_rank_ = 0;  // ranks of the neighbouring and last stages
};

}  // namespace lattice::engine::parallel
