#include "lattice/train/optim.h"

#include <algorithm>
#include <cmath>

namespace lattice::train {

float lr_at(const AdamWOptions& o, uint64_t step) {
  if (step < o.warmup) return o.lr * static_cast<float>(step + 1) / static_cast<float>(o.warmup + 1);
  const uint64_t decay_steps = o.total_steps > o.warmup ? o.total_steps - o.warmup : 1;
  const double t = std::min(1.0, static_cast<double>(step - o.warmup) / static_cast<double>(decay_steps));
  const double min_lr = o.lr * o.min_lr_ratio;
  return static_cast<float>(min_lr + 0.5 * (o.lr - min_lr) * (1.0 + std::cos(M_PI * t)));
}

AdamW::AdamW(AdamWOptions options, const std::vector<ParamTensor>& tensors, size_t n_params)
    : o_(options), m_(n_params, 0.0f), v_(n_params, 0.0f) {
  for (const ParamTensor& t : tensors) ranges_.push_back({t.offset, t.offset + t.size(), t.is_matrix()});
}

namespace {
constexpr size_t kBlock = 16384;  // floats per pool task; the norm is summed block by block in order
}

AdamW::StepInfo AdamW::step(std::span<float> params, std::span<float> grads, uint64_t step,
                            engine::ThreadPool& pool) {
  const size_t n = params.size();
  const size_t n_blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> sq(n_blocks, 0.0);
  pool.parallel_for(n_blocks, [&](size_t b, size_t) {
    double s = 0;
    for (size_t i = b * kBlock; i < std::min(n, (b + 1) * kBlock); ++i) s += double(grads[i]) * grads[i];
    sq[b] = s;
  });
  double total = 0;
  for (double s : sq) total += s;
  StepInfo info;
  info.grad_norm = std::sqrt(total);
  info.lr = lr_at(o_, step);
  const float clip_scale =
      (o_.clip > 0 && info.grad_norm > o_.clip) ? static_cast<float>(o_.clip / info.grad_norm) : 1.0f;
  const double t = static_cast<double>(step + 1);
  const float bc1 = static_cast<float>(1.0 - std::pow(double(o_.beta1), t));
  const float bc2 = static_cast<float>(1.0 - std::pow(double(o_.beta2), t));
  const float lr = info.lr, b1 = o_.beta1, b2 = o_.beta2, eps = o_.eps;
  for (const Range& r : ranges_) {
    const float decay = r.decay ? 1.0f - lr * o_.weight_decay : 1.0f;
    const size_t len = r.end - r.begin, blocks = (len + kBlock - 1) / kBlock;
    pool.parallel_for(blocks, [&](size_t b, size_t) {
      const size_t i0 = r.begin + b * kBlock, i1 = std::min(r.end, i0 + kBlock);
      float* p = params.data();
      float* g = grads.data();
      float* m = m_.data();
      float* v = v_.data();
      for (size_t i = i0; i < i1; ++i) {
        const float gi = g[i] * clip_scale;
        g[i] = gi;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        const float mh = m[i] / bc1, vh = v[i] / bc2;
        p[i] = p[i] * decay - lr * mh / (std::sqrt(vh) + eps);
      }
    });
  }
  return info;
}

}  // namespace lattice::train
