// The key/value cache of one sequence: for every layer and KV head, the keys and values of
// the positions seen so far, in f32.
//
// Layout: [layer][kv_head][position][head_dim], so one head's keys are contiguous and an
// attention head streams them in order. f32 rather than f16: at the contexts a single node
// serves here (a few thousand tokens) the cache is small next to the weights (a 1.1B Llama
// shape with 4 KV heads of 64 needs 45 KB a token), and it keeps attention exact and simple.
// Sized once from the context the caller needs; never grows. Not thread-safe for writers;
// distinct heads may be read and written from distinct threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "lattice/core/status.h"

namespace lattice::engine {

class KvCache {
 public:
  // Fails with kResourceExhausted if the allocation fails, kInvalidArgument on zero sizes.
  static Result<KvCache> create(uint32_t n_layer, uint32_t n_kv_head, uint32_t head_dim, uint32_t n_ctx);

  KvCache() = default;
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;

  float* key(uint32_t layer, uint32_t kv_head, uint32_t pos) { return k_.get() + offset(layer, kv_head, pos); }
  float* value(uint32_t layer, uint32_t kv_head, uint32_t pos) { return v_.get() + offset(layer, kv_head, pos); }
  const float* key(uint32_t layer, uint32_t kv_head, uint32_t pos) const { return k_.get() + offset(layer, kv_head, pos); }
  const float* value(uint32_t layer, uint32_t kv_head, uint32_t pos) const { return v_.get() + offset(layer, kv_head, pos); }

  uint32_t n_ctx() const { return n_ctx_; }
  uint32_t head_dim() const { return head_dim_; }
  size_t n_bytes() const { return 2 * n_elems_ * sizeof(float); }

 private:
  size_t offset(uint32_t layer, uint32_t kv_head, uint32_t pos) const {
    return ((static_cast<size_t>(layer) * n_kv_head_ + kv_head) * n_ctx_ + pos) * head_dim_;
  }
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, FreeDeleter> k_, v_;
  size_t n_elems_ = 0;
  uint32_t n_layer_ = 0, n_kv_head_ = 0, head_dim_ = 0, n_ctx_ = 0;
};

}  // namespace lattice::engine
