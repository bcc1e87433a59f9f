// Token sampling over one row of logits, as llama.cpp's default chain does it:
//
//   repetition penalties -> top-k -> top-p -> min-p -> temperature -> seeded draw
//
// temperature <= 0 means greedy: the highest logit after the penalties (lowest id on ties).
// A disabled stage (top_k <= 0, top_p >= 1, min_p <= 0, penalty 1 / 0) costs nothing.
// The draw uses std::mt19937_64 seeded with `seed` and our own uniform mapping, so the
// same seed, logits and history give the same tokens on every platform.
//
// Not thread-safe: one Sampler per sequence. sample() allocates nothing after the first
// call with a given vocabulary size.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::engine {

struct SamplerParams {
  float temperature = 0.8f;
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;    // 1: off. logit > 0 is divided by it, logit < 0 multiplied
  float frequency_penalty = 0.0f; // subtracted once per occurrence in the window
  float presence_penalty = 0.0f;  // subtracted once if present in the window
  int32_t repeat_last_n = 64;     // window of past tokens the penalties look at; 0: off
  uint64_t seed = 0;

  // Rejects NaN and negative values where they make no sense.
  Status validate() const;
};

class Sampler {
 public:
  explicit Sampler(SamplerParams params);

  // Picks a token from logits (one per vocabulary entry). Does not record it: call
  // accept() with the token actually used (the runtime may force tokens, e.g. the prompt).
  // Empty logits -> kInvalidArgument.
  Result<int32_t> sample(std::span<const float> logits);
  // Adds a token to the penalty window.
  void accept(int32_t token);
  // Clears the history and reseeds.
  void reset();
  // Random draws made so far (at most one per sample(): none when greedy). A sampler made
  // with the same params, fed the same accept() calls and skip_draws(draws()) continues
  // exactly where this one is: how a recovered cluster agrees on the sampling state.
  uint64_t draws() const { return draws_; }
  void skip_draws(uint64_t n) {
    rng_.discard(n);
    draws_ += n;
  }

  const SamplerParams& params() const { return params_; }

  // The candidates that survived the filters of the last sample() with their probabilities
  // (after temperature), highest first; for tests and logprobs.
  const std::vector<std::pair<int32_t, float>>& last_candidates() const { return probs_; }

 private:
  void apply_penalties(std::vector<float>& logits) const;

  SamplerParams params_;
  std::mt19937_64 rng_;
  uint64_t draws_ = 0;
  std::deque<int32_t> history_;
  std::vector<float> work_;                        // logits after penalties
  std::vector<std::pair<int32_t, float>> cands_;  // (token, logit)
  std::vector<std::pair<int32_t, float>> probs_;  // (token, probability)
};

}  // namespace lattice::engine
