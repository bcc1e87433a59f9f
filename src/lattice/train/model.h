// The Llama block for training on CPU, f32: token embedding, per layer RMSNorm, attention with
// RoPE (llama's adjacent pairs) and a causal mask over grouped KV heads, RMSNorm, SwiGLU FFN,
// then RMSNorm, the output projection and the mean cross-entropy over next tokens.
//
// Parameters live in one flat f32 buffer (so the optimizer, the gradient all-reduce and the
// checkpoints see one array) described by a table of named tensors in GGUF order and naming
// (token_embd.weight, blk.N.attn_q.weight, ...). A matrix is row-major [n_out, n_in], as GGUF
// stores ne = {n_in, n_out}, so the file is the buffer.
//
// Thread safety: a Model is not thread-safe; it uses the pool it is given (one caller at a
// time). Every result is independent of the pool's thread count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/ops/thread_pool.h"

namespace lattice::train {

struct LlamaConfig {
  uint32_t vocab = 4096;
  uint32_t dim = 256;
  uint32_t layers = 4;
  uint32_t heads = 8;
  uint32_t kv_heads = 0;  // 0: heads
  uint32_t ffn = 768;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;

  uint32_t n_kv_heads() const { return kv_heads ? kv_heads : heads; }
  uint32_t head_dim() const { return dim / heads; }
  uint32_t kv_dim() const { return n_kv_heads() * head_dim(); }
  // kInvalidArgument naming the field when the shape is unusable.
  Status validate() const;
};

struct ParamTensor {
  std::string name;
  size_t offset = 0;  // into the flat buffer, floats
  size_t rows = 1, cols = 0;  // matrices: [rows = n_out, cols = n_in]; vectors: rows 1
  bool is_matrix() const { return rows > 1; }
  size_t size() const { return rows * cols; }
};

// The tensor table of a config, in the order llama.cpp's converters write them.
std::vector<ParamTensor> param_table(const LlamaConfig& c);
size_t param_count(const LlamaConfig& c);

// Weights as make-model draws them (normal, std 1/sqrt(fan_in); norms 1), deterministic in seed.
void init_params(const LlamaConfig& c, uint64_t seed, std::span<float> params);

// Backward's progress, for overlapping the gradient all-reduce with it (train.h, dp.h).
struct GradHooks {
  // After forward, before backward: the sum of the token losses.
  std::function<void(double loss_sum)> forward_done;
  // Gradient unit k of Model::grad_units() is final (k = 0, 1, ... in that order).
  std::function<void(size_t unit)> unit_done;
};

class Model {
 public:
  explicit Model(LlamaConfig config);

  const LlamaConfig& config() const { return config_; }
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t n_params() const { return n_params_; }

  // Forward and backward over `batch` sequences of `seq` tokens: inputs[b * seq + s] predicts
  // targets[b * seq + s]. Adds d(loss)/d(params) * grad_scale into `grads` (not zeroed here)
  // where loss is the sum of the token losses; grad_scale = 1 / (tokens in the global batch)
  // gives the mean. Returns the sum of the token losses (nats). Token ids must be < vocab.
  double forward_backward(std::span<const float> params, std::span<float> grads, std::span<const int32_t> inputs,
                          std::span<const int32_t> targets, size_t batch, size_t seq, float grad_scale,
                          engine::ThreadPool& pool);
  double forward_backward(std::span<const float> params, std::span<float> grads, std::span<const int32_t> inputs,
                          std::span<const int32_t> targets, size_t batch, size_t seq, float grad_scale,
                          engine::ThreadPool& pool, const GradHooks& hooks);
  // The float ranges [lo, hi) of the parameter buffer whose gradients backward finishes, in
  // the order it finishes them: output norm + output, then each layer from the last down,
  // then the embedding. Together they cover the buffer once.
  std::vector<std::pair<size_t, size_t>> grad_units() const;
  // Forward only: the sum of the token losses.
  double loss(std::span<const float> params, std::span<const int32_t> inputs, std::span<const int32_t> targets,
              size_t batch, size_t seq, engine::ThreadPool& pool);

 private:
  struct Layer;
  struct Acts;
  double forward(std::span<const float> params, std::span<const int32_t> inputs, std::span<const int32_t> targets,
                 size_t batch, size_t seq, bool keep_for_backward, engine::ThreadPool& pool);
  void backward(std::span<const float> params, std::span<float> grads, std::span<const int32_t> inputs,
                std::span<const int32_t> targets, size_t batch, size_t seq, float grad_scale, engine::ThreadPool& pool,
                const GradHooks& hooks);
  void ensure(size_t batch, size_t seq);

  LlamaConfig config_;
  std::vector<ParamTensor> tensors_;
  size_t n_params_ = 0;
  size_t batch_ = 0, seq_ = 0;
  std::vector<float> rope_;  // [seq][head_dim / 2] (cos, sin)
  // Activations kept for backward, allocated for the largest batch x seq seen.
  struct Buffers {
    std::vector<float> x, hn1, rs1, q, k, v, probs, att, x2, hn2, rs2, g, u, act;  // per layer
    std::vector<float> xf, hnf, rsf, logits;
    std::vector<float> dx, dx2, dh, datt, dq, dk, dv, dg, du, dact;  // backward scratch
  } buf_;
};

}  // namespace lattice::train
