// Tokenizer and sampler micro-benchmarks: encoding a ~1000-token prompt with the
// generator's vocabularies, and one sampling step over a 150k vocabulary.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <string>

#include "lattice/engine/gguf/vocab_gen.h"
#include "lattice/engine/sampler/sampler.h"
#include "lattice/engine/tokenizer/tokenizer.h"

namespace lattice::engine {
namespace {

Tokenizer make_tokenizer(const char* model, ChatStyle style, uint32_t vocab) {
  GeneratedVocab v = generate_vocab(model, style, vocab).value();
  TokenizerSpec s;
  s.model = v.model;
  s.pre = v.pre;
  s.tokens = v.tokens;
  s.scores = v.scores;
  s.token_types = v.token_types;
  s.merges = v.merges;
  s.bos_id = static_cast<TokenId>(v.bos_id);
  s.eos_id = static_cast<TokenId>(v.eos_id);
  return Tokenizer::create(std::move(s)).value();
}

// About 1000 tokens of prose at these vocabulary sizes.
std::string prompt() {
  std::string text(vocab_training_text());
  std::string p;
  while (p.size() < 4500) p += text;
  p.resize(4500);
  return p;
}

void BM_Encode(benchmark::State& state, const char* model, ChatStyle style) {
  const Tokenizer t = make_tokenizer(model, style, static_cast<uint32_t>(state.range(0)));
  const std::string p = prompt();
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = t.encode(p);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(n_tokens) * state.iterations(),
                                               benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_Encode, spm, "llama", ChatStyle::kLlama2)->Arg(3000)->Arg(32000)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Encode, bpe_llama3, "gpt2", ChatStyle::kLlama3)->Arg(4000)->Arg(32000)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Encode, bpe_qwen2, "gpt2", ChatStyle::kChatML)->Arg(4000)->Arg(32000)->Unit(benchmark::kMicrosecond);

void BM_Decode(benchmark::State& state) {
  const Tokenizer t = make_tokenizer("gpt2", ChatStyle::kLlama3, 4000);
  const auto ids = t.encode(prompt());
  for (auto _ : state) benchmark::DoNotOptimize(t.decode(ids));
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMicrosecond);

void BM_Sample(benchmark::State& state) {
  std::vector<float> logits(150000);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float& l : logits) l = nd(rng);
  SamplerParams p;  // defaults: penalties off, top-k 40, top-p 0.95, min-p 0.05, T 0.8
  p.top_k = static_cast<int32_t>(state.range(0));
  p.temperature = state.range(1) ? 0.8f : 0.0f;
  Sampler s(p);
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(logits).value());
}
BENCHMARK(BM_Sample)->ArgNames({"top_k", "temp"})->Args({40, 1})->Args({0, 1})->Args({40, 0})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace lattice::engine
BENCHMARK_MAIN();
