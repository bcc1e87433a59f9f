// One sequence over a Forward: the simple way to run a model, on one node or as one rank of
// N (every rank makes the same calls). prefill(tokens) runs the tokens through the model in
// steps of up to n_batch tokens and appends them to the cache; decode(token) runs one. Both
// leave the next-token logits of the last token in logits(). All buffers are allocated in
// create(): the decode loop allocates nothing.
//
// For several sequences in one step (batched decode, a server), use Forward directly, or
// Generator (generator.h), which schedules them.
//
// Thread safety: used by one thread at a time; it owns its Forward (and so its ThreadPool).
// The Model (and the Group) must outlive the Session. Calls block until the forward pass
// finished.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/group.h"

namespace lattice::engine {

struct SessionOptions {
  uint32_t n_ctx = 0;      // positions the cache holds; 0: the model's training context, at most 4096
  uint32_t n_threads = 1;  // threads of the pool (counting the caller)
  uint32_t n_batch = 256;  // tokens per prefill step (bounds the scratch buffers)
};

class Session {
 public:
  // One node: the model must be the whole model (or a shard of a world of 1).
  // kInvalidArgument for zero threads/batch or a context above the model's n_ctx_train x 8;
  // kResourceExhausted if the buffers cannot be allocated.
  static Result<std::unique_ptr<Session>> create(const Model& model, const SessionOptions& options);
  // One rank of `group` (its size and rank must be the shard's).
  static Result<std::unique_ptr<Session>> create(const Model& model, Group& group, const SessionOptions& options);
  ~Session();

  // Appends tokens; kInvalidArgument for an empty list, an id outside the vocabulary or a
  // context overflow (nothing is appended then). When all_logits is given it receives
  // tokens.size() x (local) n_vocab logits (the prediction after each token).
  Status prefill(std::span<const int32_t> tokens, std::vector<float>* all_logits = nullptr);
  Status decode(int32_t token);
  // One step of a pipeline stage over the shard's layer range, n <= n_batch rows: the input
  // is the tokens (first stage) or x_in (n x n_embd hidden states); a stage with the head
  // leaves the last token's logits, any other writes its hidden states to x_out.
  Status forward_stage(const int32_t* tokens, const float* x_in, uint32_t n, float* x_out);

  // Logits predicting the token after the last one evaluated: the whole vocabulary on one
  // node, this rank's slice (model().vocab()) on N.
  std::span<const float> logits() const { return forward_->logits(0); }
  std::span<const float> local_logits() const { return logits(); }
  // Collective: the full logits on every rank; the greedy or sampled next token, the same on
  // every rank (Forward::choose).
  Status gather_logits(std::vector<float>* out) { return forward_->gather_logits(0, out); }
  Result<int32_t> argmax() { return forward_->argmax(0); }
  Result<int32_t> sample(Sampler& sampler) { return forward_->sample(sampler, 0); }

  uint32_t n_past() const { return seq_->n_past(); }
  uint32_t n_ctx() const { return seq_->n_ctx(); }
  void reset() { seq_->reset(); }  // forget the sequence (the cache is overwritten)

  using LayerObserver = Forward::LayerObserver;
  void set_layer_observer(LayerObserver fn) { forward_->set_layer_observer(std::move(fn)); }

  const Model& model() const { return forward_->model(); }
  Forward& forward() { return *forward_; }
  Sequence& sequence() { return *seq_; }
  ThreadPool& pool() { return forward_->pool(); }
  const CollStats& coll_stats() const { return group_->stats(); }
  size_t kv_cache_bytes() const { return seq_->kv_bytes(); }
  size_t scratch_bytes() const { return forward_->scratch_bytes(); }

 private:
  Session() = default;
  std::unique_ptr<SoloGroup> own_group_;
  Group* group_ = nullptr;
  std::unique_ptr<Forward> forward_;
  std::unique_ptr<Sequence> seq_;
  uint32_t n_batch_ = 0;
};

}  // namespace lattice::engine
