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
  if (top_p < 0.0f) return InvalidArgument("top_p must be >= 0");
  if (min_p > 1.0f) return InvalidArgument("min_p must be <= 1");
  return Status::Ok();
}

Sampler::Sampler(SamplerParams params) : params_(params), rng_(params.seed) {}

void Sampler::reset() {
  history_.clear();
  rng_.seed(params_.seed);
}

void Sampler::accept(int32_t token) {
  if (params_.repeat_last_n <= 0) return;
  history_.push_back(token);
  while (history_.size() > static_cast<size_t>(params_.repeat_last_n)) history_.pop_front();
}

void Sampler::apply_penalties(std::vector<Cand>& cands) const {
  const bool any = params_.repeat_penalty != 1.0f || params_.frequency_penalty != 0.0f ||
                   params_.presence_penalty != 0.0f;
  if (!any || history_.empty()) return;
  std::unordered_map<int32_t, int> counts;
  for (int32_t t : history_) ++counts[t];
  for (const auto& [token, count] : counts) {
    // cands is still indexed by token id here (penalties run first).
    if (token < 0 || static_cast<size_t>(token) >= cands.size()) continue;
    float& logit = cands[token].second;
    logit = logit <= 0.0f ? logit * params_.repeat_penalty : logit / params_.repeat_penalty;
    logit -= static_cast<float>(count) * params_.frequency_penalty + params_.presence_penalty;
  }
}

Result<int32_t> Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) return InvalidArgument("sample: empty logits");
  cands_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cands_[i] = {static_cast<int32_t>(i), logits[i]};
  apply_penalties(cands_);
  probs_.clear();

  if (params_.temperature <= 0.0f) {
    const Cand best = *std::min_element(cands_.begin(), cands_.end(), better);
    probs_.push_back({best.first, 1.0f});
    return best.first;
  }

  // top-k: partial selection, then only the survivors are sorted.
  size_t n = cands_.size();
  bool sorted = false;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < n) {
    n = static_cast<size_t>(params_.top_k);
    std::nth_element(cands_.begin(), cands_.begin() + (n - 1), cands_.end(), better);
    cands_.resize(n);
  }
  auto ensure_sorted = [&] {
    if (!sorted) std::sort(cands_.begin(), cands_.end(), better);
    sorted = true;
  };

  // top-p: the smallest prefix (by probability) whose mass reaches p; at least one token.
  if (params_.top_p < 1.0f) {
    ensure_sorted();
    const float max_logit = cands_[0].second;
    double total = 0.0;
    for (const Cand& c : cands_) total += std::exp(static_cast<double>(c.second - max_logit));
    double cum = 0.0;
    size_t keep = cands_.size();
    for (size_t i = 0; i < cands_.size(); ++i) {
      cum += std::exp(static_cast<double>(cands_[i].second - max_logit)) / total;
      if (cum >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
    cands_.resize(keep);
  }

  // min-p: keep p_i >= min_p * p_max, i.e. logit_i >= max_logit + log(min_p).
  if (params_.min_p > 0.0f) {
    float max_logit = cands_[0].second;
    if (!sorted) {
      for (const Cand& c : cands_) max_logit = std::max(max_logit, c.second);
    }
    const float threshold = max_logit + std::log(params_.min_p);
    cands_.erase(std::remove_if(cands_.begin(), cands_.end(), [&](const Cand& c) { return c.second < threshold; }),
                 cands_.end());
  }

  // Temperature, softmax, draw. Sorting the few survivors makes the draw independent of
  // the order nth_element happened to leave them in.
  ensure_sorted();
  if (!std::isfinite(cands_[0].second)) {  // all masked (-inf) or a +inf logit: no distribution
    probs_.push_back({cands_[0].first, 1.0f});
    return cands_[0].first;
  }
  const double inv_t = 1.0 / params_.temperature;
  const double max_logit = cands_[0].second;
  double total = 0.0;
  probs_.reserve(cands_.size());
  for (const Cand& c : cands_) {
    const double w = std::exp((c.second - max_logit) * inv_t);
    total += w;
    probs_.push_back({c.first, static_cast<float>(w)});
  }
  for (auto& p : probs_) p.second = static_cast<float>(p.second / total);

  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * total;  // uniform in [0, total)
  double cum = 0.0;
  for (const Cand& c : cands_) {
    cum += std::exp((c.second - max_logit) * inv_t);
    if (u < cum) return c.first;
  }
  return cands_.back().first;  // rounding left u at the very top
}

}  // namespace lattice::engine
