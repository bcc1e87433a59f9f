// Matmul micro-benchmarks on the 1.1B Llama shapes (dim 2048, ffn 5632, vocab 32000).
//
//  BM_Decode     : one token (matvec); bytes/s = weight bytes streamed. "cold" rotates through
//                  copies of the matrix totalling > 400 MB so the weights come from DRAM, as in
//                  a real decode (compare with DRAM read: ~24 GB/s 1 thread, ~33 GB/s 2).
//  BM_Prefill    : n_tok tokens; items/s = flops (2 * rows * cols * n_tok), i.e. FLOP/s.
//  BM_ModelDecode: every matrix of the 22-layer model once per iteration, q/k/v and gate/up
//                  fused, = the matmul part of one decoded token (items/s = tokens/s).
//  BM_ModelPrefill: same for a batch of n_tok tokens (items/s = tokens/s).
// Weight contents: one quantized random row repeated (the kernels' speed does not depend on
// the values). LATTICE_ISA=scalar|avx2|avx512 selects the kernels.
#include <benchmark/benchmark.h>
#include <immintrin.h>

// GCC 12 warns spuriously inside its own _mm512_reduce_* helpers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "lattice/engine/quant/matmul.h"
#include "lattice/engine/quant/quantize.h"

namespace lattice::engine {
namespace {

const TensorType kTypes[] = {TensorType::kQ4_0, TensorType::kQ8_0, TensorType::kQ4_K,
                             TensorType::kQ6_K, TensorType::kF16,  TensorType::kQ5_K};

ThreadPool& pool_for(size_t n) {
  static std::map<size_t, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[n];
  if (!p) p = std::make_unique<ThreadPool>(n);
  return *p;
}

std::vector<uint8_t> raw_matrix(TensorType type, size_t rows, size_t cols) {
  const size_t rb = *row_bytes(type, cols);
  std::vector<float> row(cols);
  std::mt19937 rng(42);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<uint8_t> bytes(rows * rb);
  for (size_t r = 0; r < std::min<size_t>(rows, 16); ++r) {
    for (auto& v : row) v = nd(rng);
    (void)quantize_row(type, row.data(), bytes.data() + r * rb, cols);
  }
  for (size_t r = 16; r < rows; ++r) std::copy_n(bytes.data() + (r % 16) * rb, rb, bytes.data() + r * rb);
  return bytes;
}

struct Copies {
  std::vector<uint8_t> raw;
  std::vector<Weight> w;
};

// Copies of a rows x cols matrix: one (hot) or enough to exceed 400 MB (cold).
Copies& copies(TensorType type, size_t rows, size_t cols, bool cold) {
  static std::map<std::tuple<int, size_t, size_t, bool>, Copies> cache;
  auto key = std::make_tuple(static_cast<int>(type), rows, cols, cold);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Copies& c = cache[key];
  const size_t rb = *row_bytes(type, cols);
  const size_t n = cold ? std::max<size_t>(2, (400u << 20) / (rows * rb) + 1) : 1;
  // Packed types own their copy; in-place types need their own raw bytes per copy.
  const bool packs = type == TensorType::kQ4_0 || type == TensorType::kQ8_0;
  c.raw = raw_matrix(type, rows, cols);
  if (!packs) c.raw.resize(n * rows * rb);
  for (size_t i = 0; i < n; ++i) {
    if (!packs && i > 0) std::copy_n(c.raw.data(), rows * rb, c.raw.data() + i * rows * rb);
    c.w.push_back(*Weight::pack({type, c.raw.data() + (packs ? 0 : i * rows * rb), rows, cols, 0}));
  }
  if (packs) c.raw = {};  // not needed once packed
  return c;
}

void BM_Decode(benchmark::State& st) {
  const auto type = kTypes[st.range(0)];
  const size_t rows = st.range(1), cols = st.range(2), threads = st.range(3);
  const bool cold = st.range(4) != 0;
  Copies& c = copies(type, rows, cols, cold);
  ThreadPool& pool = pool_for(threads);
  std::vector<float> x(cols, 0.5f), y(rows);
  size_t i = 0;
  for (auto _ : st) {
    matmul(c.w[i], x.data(), 1, y.data(), pool);
    if (++i == c.w.size()) i = 0;
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * c.w[0].bytes()));
  st.SetLabel(std::string(type_traits(static_cast<uint32_t>(type))->name) + (cold ? " cold" : " hot") + " " +
              std::string(isa_name(active_isa())));
}

void BM_Prefill(benchmark::State& st) {
  const auto type = kTypes[st.range(0)];
  const size_t rows = st.range(1), cols = st.range(2), threads = st.range(3), n_tok = st.range(4);
  Copies& c = copies(type, rows, cols, false);
  ThreadPool& pool = pool_for(threads);
  std::vector<float> x(n_tok * cols), y(n_tok * rows);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  for (auto _ : st) {
    matmul(c.w[0], x.data(), n_tok, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(static_cast<int64_t>(st.iterations() * 2 * rows * cols * n_tok));  // flops
  st.SetLabel(std::string(type_traits(static_cast<uint32_t>(type))->name) + " " + std::string(isa_name(active_isa())));
}

// The machine's streaming read bandwidth in the same run (a fair "DRAM speed" to compare the
// cold decode figures with, on a shared machine): sums 512 MB of int64 with 2 threads max.
__attribute__((target("avx512f"))) int64_t sum_stream(const int64_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i < n; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 24));
  }
  return _mm512_reduce_add_epi64(_mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
}
void BM_StreamRead(benchmark::State& st) {
  static std::vector<int64_t> buf((512u << 20) / 8, 1);
  ThreadPool& pool = pool_for(st.range(0));
  const size_t n = buf.size(), chunks = 64;
  std::vector<int64_t> sums(chunks);
  for (auto _ : st) {
    pool.parallel_for(chunks, [&](size_t c, size_t) { sums[c] = sum_stream(buf.data() + c * (n / chunks), n / chunks); });
    benchmark::DoNotOptimize(sums.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * n * 8));
}
BENCHMARK(BM_StreamRead)->Arg(1)->Arg(2)->ArgNames({"thr"})->UseRealTime();

void shapes_decode(benchmark::internal::Benchmark* b) {
  for (int t : {0, 1, 2, 3, 5, 4})
    for (auto [r, c] : {std::pair{5632, 2048}, {2048, 5632}, {32000, 2048}, {256, 2048}})
      for (int th : {1, 2})
        for (int cold : {0, 1}) b->Args({t, r, c, th, cold});
}
void shapes_prefill(benchmark::internal::Benchmark* b) {
  for (int t : {0, 1, 2, 3, 5, 4})
    for (auto [r, c] : {std::pair{5632, 2048}, {2048, 5632}})
      for (int th : {1, 2})
        for (int n : {64, 512}) b->Args({t, r, c, th, n});
}
BENCHMARK(BM_Decode)->Apply(shapes_decode)->ArgNames({"type", "rows", "cols", "thr", "cold"})->UseRealTime();
BENCHMARK(BM_Prefill)->Apply(shapes_prefill)->ArgNames({"type", "rows", "cols", "thr", "ntok"})->UseRealTime();

// Cost of one pool dispatch with trivial tasks (the floor under every matmul call).
void BM_Dispatch(benchmark::State& st) {
  ThreadPool& pool = pool_for(st.range(0));
  std::vector<int> v(64);
  for (auto _ : st) {
    pool.parallel_for(v.size(), [&](size_t i, size_t) { v[i] += 1; });
    benchmark::DoNotOptimize(v.data());
  }
}
BENCHMARK(BM_Dispatch)->Arg(1)->Arg(2)->ArgNames({"thr"})->UseRealTime();

// Load-time cost of Weight::pack (bytes/s of GGUF rows repacked).
void BM_Pack(benchmark::State& st) {
  const auto type = kTypes[st.range(0)];
  const size_t rows = 5632, cols = 2048;
  auto raw = raw_matrix(type, rows, cols);
  for (auto _ : st) {
    auto w = Weight::pack({type, raw.data(), rows, cols, 0});
    benchmark::DoNotOptimize(w.ok());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * raw.size()));
  st.SetLabel(std::string(type_traits(static_cast<uint32_t>(type))->name));
}
BENCHMARK(BM_Pack)->DenseRange(0, 3)->ArgNames({"type"})->UseRealTime();

// ---- The whole model's matrices ----
struct Layer {
  Weight q, k, v, o, gate, up, down;
};
struct Model {
  std::vector<Layer> layers;
  Weight output;
  size_t bytes = 0;
};

Model& model(TensorType type) {
  static std::map<int, Model> cache;
  auto it = cache.find(static_cast<int>(type));
  if (it != cache.end()) return it->second;
  Model& m = cache[static_cast<int>(type)];
  const size_t dim = 2048, kv = 256, ffn = 5632, vocab = 32000, n_layers = 22;
  auto sq = raw_matrix(type, dim, dim), skv = raw_matrix(type, kv, dim), sup = raw_matrix(type, ffn, dim),
       sdown = raw_matrix(type, dim, ffn), sout = raw_matrix(type, vocab, dim);
  auto pk = [&](std::vector<uint8_t>& raw, size_t rows, size_t cols) {
    Weight w = *Weight::pack({type, raw.data(), rows, cols, 0});
    m.bytes += w.bytes();
    return w;
  };
  for (size_t l = 0; l < n_layers; ++l)
    m.layers.push_back({pk(sq, dim, dim), pk(skv, kv, dim), pk(skv, kv, dim), pk(sq, dim, dim), pk(sup, ffn, dim),
                        pk(sup, ffn, dim), pk(sdown, dim, ffn)});
  m.output = pk(sout, vocab, dim);
  return m;
}

void run_model(Model& m, size_t n_tok, ThreadPool& pool, std::vector<float>& x, std::vector<float>& big,
               std::vector<float>& y) {
  const size_t dim = 2048, kv = 256, ffn = 5632;
  for (Layer& l : m.layers) {
    float* q = big.data();
    float* k = q + n_tok * dim;
    float* v = k + n_tok * kv;
    const MatmulOut qkv[] = {{&l.q, q, 0, 0, 0}, {&l.k, k, 0, 0, 0}, {&l.v, v, 0, 0, 0}};
    matmul_multi(qkv, x.data(), n_tok, pool);
    matmul(l.o, q, n_tok, y.data(), pool);
    float* g = big.data();
    float* u = g + n_tok * ffn;
    const MatmulOut gu[] = {{&l.gate, g, 0, 0, 0}, {&l.up, u, 0, 0, 0}};
    matmul_multi(gu, y.data(), n_tok, pool);
    matmul(l.down, g, n_tok, y.data(), pool);
  }
  matmul(m.output, x.data(), std::min<size_t>(n_tok, 1), big.data(), pool);  // logits of the last token only
}

void BM_ModelDecode(benchmark::State& st) {
  const auto type = kTypes[st.range(0)];
  Model& m = model(type);
  ThreadPool& pool = pool_for(st.range(1));
  const size_t n_tok = st.range(2);
  std::vector<float> x(n_tok * 2048, 0.1f), big(n_tok * 5632 * 2 + 32000), y(n_tok * 2048);
  for (auto _ : st) run_model(m, n_tok, pool, x, big, y);
  st.SetItemsProcessed(static_cast<int64_t>(st.iterations() * n_tok));  // tokens
  st.counters["model_MB"] = static_cast<double>(m.bytes) / 1e6;
  st.SetLabel(std::string(type_traits(static_cast<uint32_t>(type))->name) + " " + std::string(isa_name(active_isa())));
}
BENCHMARK(BM_ModelDecode)
    ->ArgsProduct({{0, 1}, {1, 2}, {1}})
    ->ArgNames({"type", "thr", "ntok"})
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK(BM_ModelDecode)
    ->Name("BM_ModelPrefill")
    ->ArgsProduct({{0, 1}, {1, 2}, {64, 512}})
    ->ArgNames({"type", "thr", "ntok"})
    ->UseRealTime()
    ->Iterations(2);

}  // namespace
}  // namespace lattice::engine

BENCHMARK_MAIN();
