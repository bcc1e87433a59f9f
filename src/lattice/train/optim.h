// AdamW over the flat parameter buffer: f32 master weights and moments, decoupled weight
// decay on matrices only (not norms), gradient clipping by global norm, and the learning rate
// schedule: linear warmup from 0, then cosine decay to min_lr_ratio * lr at the last step.
//
// Thread safety: an AdamW is a plain value, used by one thread (it uses the pool given).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lattice/engine/ops/thread_pool.h"
#include "lattice/train/model.h"

namespace lattice::train {

struct AdamWOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;
  float clip = 1.0f;          // max global gradient norm (0: no clipping)
  uint64_t warmup = 0;        // steps
  uint64_t total_steps = 1;   // for the cosine
  float min_lr_ratio = 0.1f;
};

// The learning rate of step `step` (0-based).
float lr_at(const AdamWOptions& o, uint64_t step);

class AdamW {
 public:
  AdamW(AdamWOptions options, const std::vector<ParamTensor>& tensors, size_t n_params);

  struct StepInfo {
    float lr = 0;
    double grad_norm = 0;  // before clipping
  };
  // One update of `params` with `grads` (which may be scaled in place by the clipping) at
  // step `step` (0-based; the bias correction uses step + 1).
  StepInfo step(std::span<float> params, std::span<float> grads, uint64_t step, engine::ThreadPool& pool);

  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  const AdamWOptions& options() const { return o_; }

 private:
  AdamWOptions o_;
  std::vector<float> m_, v_;
  struct Range {
    size_t begin, end;
    bool decay;
  };
  std::vector<Range> ranges_;
};

}  // namespace lattice::train
