// One inference sequence over a Model: its KV cache, scratch buffers and thread pool.
//
// prefill(tokens) runs the tokens through the model in batches (matrix-matrix products,
// up to n_batch tokens at a time) and appends them to the cache; decode(token) runs one
// token (matrix-vector products). Both leave the next-token logits of the last token in
// logits(). All buffers are allocated in create(): the decode loop allocates nothing.
//
// Thread safety: a Session is used by one thread at a time; it owns its ThreadPool. The
// Model must outlive the Session. Calls block until the forward pass finished (CPU work
// only, no I/O besides page faults on the model's mapping).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/runtime/kv_cache.h"
#include "lattice/engine/runtime/thread_pool.h"

namespace lattice::engine {

struct SessionOptions {
  uint32_t n_ctx = 0;      // positions the cache holds; 0: the model's training context, at most 4096
  uint32_t n_threads = 1;  // threads of the pool (counting the caller)
  uint32_t n_batch = 256;  // tokens per prefill step (bounds the scratch buffers)
};

class Session {
 public:
  // kInvalidArgument for zero threads/batch or a context above the model's n_ctx_train x 8;
  // kResourceExhausted if the buffers cannot be allocated.
  static Result<std::unique_ptr<Session>> create(const Model& model, const SessionOptions& options);
  ~Session();

  // Appends tokens; kInvalidArgument for an empty list, an id outside the vocabulary or a
  // context overflow (nothing is appended then). When all_logits is given it receives
  // tokens.size() x n_vocab logits (the prediction after each token).
  Status prefill(std::span<const int32_t> tokens, std::vector<float>* all_logits = nullptr);
  Status decode(int32_t token);

  // Logits predicting the token after the last one evaluated (n_vocab floats).
  std::span<const float> logits() const { return {last_logits_.data(), last_logits_.size()}; }
  uint32_t n_past() const { return n_past_; }
  uint32_t n_ctx() const { return cache_.n_ctx(); }
  void reset() { n_past_ = 0; }  // forget the sequence (the cache is overwritten)

  // Called after every layer with the hidden states of the tokens of the current step
  // (n_tokens x n_embd), for layer-by-layer tests. Empty by default (no cost).
  using LayerObserver = std::function<void(uint32_t layer, std::span<const float> hidden)>;
  void set_layer_observer(LayerObserver fn) { observer_ = std::move(fn); }

  const Model& model() const { return *model_; }
  ThreadPool& pool() { return *pool_; }
  size_t kv_cache_bytes() const { return cache_.n_bytes(); }
  size_t scratch_bytes() const;

 private:
  struct Impl;
  Session() = default;
  Status forward(const int32_t* tokens, uint32_t n, float* all_logits);

  const Model* model_ = nullptr;
  SessionOptions opt_;
  std::unique_ptr<ThreadPool> pool_;
  KvCache cache_;
  uint32_t n_past_ = 0;
  std::vector<float> last_logits_;
  std::unique_ptr<Impl> impl_;
  LayerObserver observer_;
};

}  // namespace lattice::engine
