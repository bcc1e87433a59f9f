// Pipeline parallelism: contiguous layer ranges per rank (stage), activations passed
// point to point over the Communicator (coll::send/recv), prefill cut into micro-batches so
// the stages overlap (stage s runs micro-batch m while stage s+1 runs m-1).
//
// Stage r of W holds layers pp_layers(...)[r] (a TpModel bound with that layer range and a
// tensor-parallel world of 1); the first stage embeds tokens, the last one holds the output
// norm and matrix. Every rank calls prefill/decode with the same tokens; the last stage picks
// the next token and broadcasts it, so all ranks agree. Logits are bit-identical to a
// single-node Session on the same file: every stage runs the same kernels on the same whole
// matrices, only on fewer layers (quantized matmuls do not depend on the batch split).
//
// Thread safety: one thread per rank, like the Communicator.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "lattice/coll/comm.h"
#include "lattice/engine/parallel/tp.h"

namespace lattice::engine::parallel {

// Layer ranges per stage, proportional to `weights` (memory or speed of each node; empty:
// equal). Every stage gets at least one layer: kInvalidArgument if world > n_layer.
Result<std::vector<Range>> pp_layers(uint32_t n_layer, int world, std::span<const double> weights = {});

struct PpSessionOptions {
  TpSessionOptions session;   // n_batch is the micro-batch size of prefill
  // Stage i runs on rank stage_order[i] (empty: rank i). On a ring of cables whose hosts are
  // not listed in cable order, the communicator's route makes consecutive stages neighbours.
  std::vector<int> stage_order;
};

class PpSession {
 public:
  // `stage` must be bound to this rank's layer range (TpLoadOptions::layer_begin/end).
  static Result<std::unique_ptr<PpSession>> create(const TpModel& stage, coll::Communicator& comm,
                                                   const PpSessionOptions& options = {});

  Status prefill(std::span<const int32_t> tokens);
  Status decode(int32_t token);
  // The greedy next token (chosen by the last stage, broadcast to all).
  Result<int32_t> argmax();
  // Samples on the last stage with `sampler` and broadcasts; every rank's sampler is kept in
  // step by the caller's accept().
  Result<int32_t> sample(Sampler& sampler);
  // The last token's logits on every rank (a broadcast of n_vocab floats from the last stage).
  Status gather_logits(std::vector<float>* out);

  uint32_t n_past() const { return session_->n_past(); }
  // This rank's point-to-point and broadcast traffic (bytes it sent) and time waiting in them.
  const CollStats& coll_stats() const { return stats_; }

 private:
  PpSession() = default;
  Status step(const int32_t* tokens, uint32_t n);
  bool last() const { return stage_index_ == comm_->world_size() - 1; }

  const TpModel* stage_ = nullptr;
  coll::Communicator* comm_ = nullptr;
  std::unique_ptr<TpSession> session_;
  std::vector<float> in_, out_;
  uint32_t micro_ = 0;
  int stage_index_ = 0;              // this rank's place in the pipeline
  int prev_ = -1, next_ = -1, last_rank_ = 0;  // ranks of the neighbouring and last stages
  CollStats stats_;
};

}  // namespace lattice::engine::parallel
