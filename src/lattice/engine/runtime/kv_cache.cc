#include "lattice/engine/runtime/kv_cache.h"

#include <cstdlib>
#include <cstring>
#include <string>

namespace lattice::engine {

void KvCache::FreeDeleter::operator()(float* p) const { std::free(p); }

Result<KvCache> KvCache::create(uint32_t n_layer, uint32_t n_kv_head, uint32_t head_dim, uint32_t n_ctx) {
  if (n_layer == 0 || n_kv_head == 0 || head_dim == 0 || n_ctx == 0)
    return InvalidArgument("kv cache: zero size (layers " + std::to_string(n_layer) + ", kv heads " +
                           std::to_string(n_kv_head) + ", head dim " + std::to_string(head_dim) + ", context " +
                           std::to_string(n_ctx) + ")");
  KvCache c;
  c.n_layer_ = n_layer;
  c.n_kv_head_ = n_kv_head;
  c.head_dim_ = head_dim;
  c.n_ctx_ = n_ctx;
  c.ctx_stride_ = (n_ctx + 15) / 16 * 16;
  c.n_elems_ = static_cast<size_t>(n_layer) * n_kv_head * head_dim * c.ctx_stride_;
  // Pages are touched only as positions are written, so resident memory follows the tokens
  // actually held; 64-byte alignment keeps vector loads whole.
  const size_t bytes = (c.n_elems_ * sizeof(float) + 63) / 64 * 64;
  c.k_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  c.v_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!c.k_ || !c.v_)
    return ResourceExhausted("kv cache: cannot allocate " + std::to_string(2 * bytes) + " bytes");
  // Attention reads keys in whole blocks of 16 positions, past the last one written: those
  // slots must hold finite numbers (their scores are computed, then ignored).
  std::memset(c.k_.get(), 0, bytes);
  return c;
}

Result<KvCache> KvCache::create_latent(uint32_t n_layer, uint32_t width, uint32_t n_ctx) {
  if (n_layer == 0 || width == 0 || n_ctx == 0)
    return InvalidArgument("kv cache: zero size (layers " + std::to_string(n_layer) + ", latent width " +
                           std::to_string(width) + ", context " + std::to_string(n_ctx) + ")");
  KvCache c;
  c.n_layer_ = n_layer;
  c.n_kv_head_ = 1;
  c.head_dim_ = width;
  c.n_ctx_ = n_ctx;
  c.ctx_stride_ = n_ctx;
  c.n_elems_ = static_cast<size_t>(n_layer) * width * n_ctx;
  const size_t bytes = (c.n_elems_ * sizeof(float) + 63) / 64 * 64;
  c.k_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!c.k_) return ResourceExhausted("kv cache: cannot allocate " + std::to_string(bytes) + " bytes");
  return c;
}

}  // namespace lattice::engine
