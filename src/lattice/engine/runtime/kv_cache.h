// The key/value cache of one sequence: for every layer and KV head, the keys and values of
// the positions seen so far, in f32.
//
// Layout: keys in blocks of 16 positions, transposed within a block:
// [layer][kv_head][position / 16][head_dim][position % 16] (n_ctx rounded up to 16), so
// the scores of one query against 16 positions are one vector accumulated over a
// contiguous 16 x head_dim tile; values [layer][kv_head][position][head_dim], so the
// weighted sum is an axpy per position. f32 rather than f16: at the contexts a single node
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
  // Multi-head latent attention: one row of `width` floats per layer and position (the
  // compressed latent, then the rope key), [layer][position][width], and no values.
  static Result<KvCache> create_latent(uint32_t n_layer, uint32_t width, uint32_t n_ctx);
  float* latent(uint32_t layer, uint32_t pos) {
    return k_.get() + (static_cast<size_t>(layer) * ctx_stride_ + pos) * head_dim_;
  }
  const float* latent(uint32_t layer, uint32_t pos) const {
    return k_.get() + (static_cast<size_t>(layer) * ctx_stride_ + pos) * head_dim_;
  }

  KvCache() = default;
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;

  // Component d of position p is keys_t(layer, kv_head)[(p / 16) * 16 * head_dim + d * 16 + p % 16].
  float* keys_t(uint32_t layer, uint32_t kv_head) { return k_.get() + head_offset(layer, kv_head); }
  const float* keys_t(uint32_t layer, uint32_t kv_head) const { return k_.get() + head_offset(layer, kv_head); }
  // Stores one position's key (head_dim values) into the transposed layout.
  void store_key(uint32_t layer, uint32_t kv_head, uint32_t pos, const float* k) {
    float* dst = keys_t(layer, kv_head) + static_cast<size_t>(pos / 16) * 16 * head_dim_ + pos % 16;
    for (uint32_t d = 0; d < head_dim_; ++d) dst[static_cast<size_t>(d) * 16] = k[d];
  }
  float* value(uint32_t layer, uint32_t kv_head, uint32_t pos) {
    return v_.get() + head_offset(layer, kv_head) + static_cast<size_t>(pos) * head_dim_;
  }
  const float* value(uint32_t layer, uint32_t kv_head, uint32_t pos) const {
    return v_.get() + head_offset(layer, kv_head) + static_cast<size_t>(pos) * head_dim_;
  }
  uint32_t ctx_stride() const { return ctx_stride_; }

  uint32_t n_ctx() const { return n_ctx_; }
  uint32_t head_dim() const { return head_dim_; }
  size_t n_bytes() const { return (v_ ? 2 : 1) * n_elems_ * sizeof(float); }

 private:
  size_t head_offset(uint32_t layer, uint32_t kv_head) const {
    return (static_cast<size_t>(layer) * n_kv_head_ + kv_head) * ctx_stride_ * head_dim_;
  }
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  std::unique_ptr<float, FreeDeleter> k_, v_;
  size_t n_elems_ = 0;
  uint32_t n_layer_ = 0, n_kv_head_ = 0, head_dim_ = 0, n_ctx_ = 0, ctx_stride_ = 0;
};

}  // namespace lattice::engine
