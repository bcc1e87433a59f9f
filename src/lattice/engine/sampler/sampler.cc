#include "lattice/engine/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>

namespace lattice::engine {
namespace {

using Cand = std::pair<int32_t, float>;

// Higher logit first; the lower id wins a tie so every ordering (and greedy) is deterministic.
bool better(const Cand& a, const Cand& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); }

}  // namespace

Status SamplerParams::validate() const {
  auto bad = [](float v) { return std::isnan(v); };
  if (bad(temperature) || bad(top_p) || bad(min_p) || bad(repeat_penalty) || bad(frequency_penalty) ||
      bad(presence_penalty)) {
    return InvalidArgument("sampler parameters must not be NaN");
  }
  if (repeat_penalty <= 0.0f) return InvalidArgument("repeat_penalty must be > 0");
  if (repeat_last_n < 0) return InvalidArgument("repeat_last_n must be >= 0");
  if (temperature < 0.0f) return InvalidArgument("temperature must be >= 0 (0: greedy)");
  if (top_p < 0.0f || top_p > 1.0f) return InvalidArgument("top_p must be in [0, 1] (1: off)");
  if (min_p < 0.0f || min_p > 1.0f) return InvalidArgument("min_p must be in [0, 1] (0: off)");
  return Status::Ok();
}

Sampler::Sampler(SamplerParams params) : params_(params), rng_(params.seed) {}

void Sampler::reset() {
  history_.clear();
  rng_.seed(params_.seed);
  draws_ = 0;
}

void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n <= 0) return;
  history_.push_back(token);
  while (history_.size() > static_cast<size_t>(params_.repeat_last_n)) history_.pop_front();
}

void Sampler::apply_penalties(std::vector<float>& logits) const {
  const bool any = params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                   params_.presence_penalty != 0.0f;
  if (!any || history_.empty()) return;
  std::unordered_map<int32_t, int> counts;
  for (int32_t t : history_) ++counts[t];
  for (const auto& [token, count] : counts) {
    if (token < 0 || static_cast<size_t>(token) >= logits.size()) continue;
    float& logit = logits[token];
    logit = logit <= 0.0f ? logit * params_.repeat_penalty : logit / params_.repeat_penalty;
    logit -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
  }
}

Result<int32_t> Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) return InvalidArgument("sample: empty logits");
  // Penalties touch a few tokens, but on a copy: the caller's logits stay as they were.
  std::span<const float> view = logits;
  if (!history_.empty() && (params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                            params_.presence_penalty != 0.0f)) {
    work_.assign(logits.begin(), logits.end());
    apply_penalties(work_);
    view = work_;
  }
  probs_.clear();
  const size_t n_vocab = view.size();

  if (params_.temperature <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < n_vocab; ++i) {
      if (view[i] > view[best]) best = i;  // strict: the lowest id keeps a tie
    }
    probs_.push_back({static_cast<int32_t>(best), 1.0f});
    return static_cast<int32_t>(best);
  }

  // Candidates: the top-k by a bounded min-heap in one pass (most tokens are rejected by a
  // single comparison with the heap's worst), or everything when top-k is off.
  cands_.clear();
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n_vocab) {
    const size_t k = static_cast<size_t>(params_.top_k);
    cands_.reserve(k);
    auto worse_on_top = [](const Cand& a, const Cand& b) { return better(a, b); };
    for (size_t i = 0; i < n_vocab; ++i) {
      const Cand c{static_cast<int32_t>(i), view[i]};
      if (cands_.size() < k) {
        cands_.push_back(c);
        std::push_heap(cands_.begin(), cands_.end(), worse_on_top);
      } else if (better(c, cands_.front())) {
        std::pop_heap(cands_.begin(), cands_.end(), worse_on_top);
        cands_.back() = c;
        std::push_heap(cands_.begin(), cands_.end(), worse_on_top);
      }
    }
  } else {
    cands_.resize(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i) cands_[i] = {static_cast<int32_t>(i), view[i]};
  }
  float max_logit = -INFINITY;
  for (const Cand& c : cands_) max_logit = std::max(max_logit, c.second);
  if (!std::isfinite(max_logit)) {  // all masked (-inf) or a +inf logit: no distribution
    const Cand best = *std::min_element(cands_.begin(), cands_.end(), better);
    probs_.push_back({best.first, 1.0f});
    return best.first;
  }

  // top-p and min-p both keep a prefix of the candidates sorted by logit, so min-p can go
  // first as a linear filter (llama.cpp runs top-p first; the result is the same) as long
  // as top-p's probabilities are normalised over the candidates before min-p.
  double top_p_total = 0.0;
  const bool use_top_p = params_.top_p < 1.0f;
  if (use_top_p) {
    for (const Cand& c : cands_) top_p_total += std::exp(static_cast<double>(c.second - max_logit));
  }
  if (params_.min_p > 0.0f) {
    const float threshold = max_logit + std::log(params_.min_p);
    cands_.erase(std::remove_if(cands_.begin(), cands_.end(), [&](const Cand& c) { return c.second < threshold; }),
                 cands_.end());
  }
  if (use_top_p) {
    // Sort only as much as needed: the best m candidates, m growing until their mass reaches p.
    const double target = static_cast<double>(params_.top_p) * top_p_total;
    size_t m = std::min<size_t>(cands_.size(), 256);
    size_t keep = cands_.size();
    for (;;) {
      std::partial_sort(cands_.begin(), cands_.begin() + m, cands_.end(), better);
      double cum = 0.0;
      size_t i = 0;
      for (; i < m; ++i) {
        cum += std::exp(static_cast<double>(cands_[i].second - max_logit));
        if (cum >= target) break;
      }
      if (i < m) {
        keep = i + 1;
        break;
      }
      if (m == cands_.size()) break;  // everything is needed
      m = std::min(cands_.size(), m * 8);
    }
    cands_.resize(keep);
  }

  // Temperature, softmax, draw. Sorting the survivors makes the draw independent of the
  // order the selection happened to leave them in.
  std::sort(cands_.begin(), cands_.end(), better);
  const double inv_t = 1.0 / params_.temperature;
  double total = 0.0;
  probs_.reserve(cands_.size());
  for (const Cand& c : cands_) {
    const float w = static_cast<float>(std::exp((c.second - max_logit) * inv_t));
    total += w;  // the same float weights are summed again for the draw: no rounding gap
    probs_.push_back({c.first, w});
  }
  ++draws_;
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;  // uniform in [0, total)
  double cum = 0.0;
  int32_t chosen = cands_.back().first;  // if rounding leaves u at the very top
  for (const auto& [id, w] : probs_) {
    cum += w;
    if (u < cum) {
      chosen = id;
      break;
    }
  }
  for (auto& p : probs_) p.second = static_cast<float>(p.second / total);
  return chosen;
}

}  // namespace lattice::engine
