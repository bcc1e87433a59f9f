#include "lattice/sim/calibrate.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "lattice/engine/ops/ops.h"
#include "lattice/engine/ops/thread_pool.h"
#include "lattice/engine/quant/matmul.h"
#include "lattice/engine/quant/quantize.h"
#include "lattice/engine/quant/types.h"

namespace lattice::sim {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Sums [b, e) with four 256-bit accumulators where the CPU has AVX2 (what a streaming kernel
// does), else eight scalar ones.
__attribute__((target("avx2"))) uint64_t sum_avx2(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  uint64_t s = out[0] + out[1] + out[2] + out[3];
  for (; i < n; ++i) s += p[i];
  return s;
}

uint64_t sum_scalar(const uint64_t* p, size_t n) {
  uint64_t a[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) a[k] += p[i + k];
  for (; i < n; ++i) a[0] += p[i];
  uint64_t s = 0;
  for (uint64_t v : a) s += v;
  return s;
}

}  // namespace

Result<double> measure_read_gbs(int threads, size_t bytes, int reps) {
  if (threads < 1 || threads > 1024 || reps < 1 || bytes < (1u << 20))
    return InvalidArgument("calibrate: threads in 1..1024, reps >= 1, at least 1 MiB");
  const size_t n = bytes / sizeof(uint64_t);
  // 64-byte aligned (the AVX2 loads need 32).
  std::unique_ptr<uint64_t, void (*)(void*)> buf(static_cast<uint64_t*>(std::aligned_alloc(64, (n * 8 + 63) / 64 * 64)),
                                                 std::free);
  if (!buf) return ResourceExhausted("calibrate: cannot allocate " + std::to_string(bytes) + " bytes");
  for (size_t i = 0; i < n; ++i) buf.get()[i] = i * 0x9E3779B97F4A7C15ull;
  const bool avx2 = __builtin_cpu_supports("avx2");
  double best = 0;
  std::vector<uint64_t> sums(static_cast<size_t>(threads) * 8);
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        const size_t b = n * t / threads / 4 * 4, e = t + 1 == threads ? n : n * (t + 1) / threads / 4 * 4;
        const uint64_t* p = buf.get() + b;
        sums[static_cast<size_t>(t) * 8] = avx2 ? sum_avx2(p, e - b) : sum_scalar(p, e - b);
      });
    for (auto& th : ts) th.join();
    const double s = seconds_since(t0);
    best = std::max(best, double(n * sizeof(uint64_t)) / s / 1e9);
  }
  // Keep the sums alive so the reads are not optimised away.
  volatile uint64_t sink = 0;
  for (uint64_t v : sums) sink = sink + v;
  (void)sink;
  return best;
}

namespace {

// A random rows x cols Q4_0 weight, packed, and n_tok random activations.
struct MatmulCase {
  std::vector<uint8_t> q;
  std::vector<float> x, y;
  engine::Weight w;
};
Result<MatmulCase> matmul_case(size_t rows, size_t cols, size_t n_tok, uint32_t seed) {
  using engine::TensorType;
  MatmulCase c;
  const size_t row_bytes = engine::row_bytes(TensorType::kQ4_0, cols).value_or(0);
  c.q.resize(rows * row_bytes);
  std::vector<float> src(cols);
  c.x.resize(n_tok * cols);
  c.y.resize(n_tok * rows);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  for (size_t r = 0; r < rows; ++r) {
    for (float& v : src) v = nd(rng);
    LATTICE_RETURN_IF_ERROR(engine::quantize_row(TensorType::kQ4_0, src.data(), c.q.data() + r * row_bytes, cols));
  }
  for (float& v : c.x) v = nd(rng);
  LATTICE_ASSIGN_OR_RETURN(c.w, engine::Weight::pack({TensorType::kQ4_0, c.q.data(), rows, cols, 0}));
  return c;
}

// `workers` threads at once, as separate ranks: each runs `pass(t)` once to warm up, waits for
// the others, then `passes` times timed. Each worker's rate is `work_per_pass` (in the unit
// reported) a pass over its time; the best over `reps` starts of the workers' mean.
template <typename Pass>
double run_workers(int workers, int reps, int passes, double work_per_pass, Pass pass) {
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    std::atomic<int> ready{0};
    std::vector<double> rate(static_cast<size_t>(workers), 0);
    std::vector<std::thread> ts;
    for (int t = 0; t < workers; ++t)
      ts.emplace_back([&, t] {
        pass(t);  // warm up
        ready.fetch_add(1);
        while (ready.load() < workers) std::this_thread::yield();
        const auto t0 = Clock::now();
        for (int i = 0; i < passes; ++i) pass(t);
        rate[size_t(t)] = passes * work_per_pass / seconds_since(t0);
      });
    for (auto& th : ts) th.join();
    double mean = 0;
    for (double r : rate) mean += r / workers;
    best = std::max(best, mean);
  }
  return best;
}

// One thread's work over `layers` layers' buffers, `pass(l)` each: warmed up once over all of
// them, then the best of `reps` passes, nanoseconds a layer.
template <typename Pass>
double best_ns_a_layer(size_t layers, int reps, Pass&& pass) {
  for (size_t l = 0; l < layers; ++l) pass(l);
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    for (size_t l = 0; l < layers; ++l) pass(l);
    best = std::min(best, seconds_since(t0) * 1e9 / double(layers));
  }
  return best;
}

}  // namespace

Result<double> measure_matmul_tflops(int threads, size_t rows, size_t cols, size_t n_tok, int reps) {
  if (threads < 1 || threads > 1024 || reps < 1 || rows == 0 || cols % 32 || n_tok == 0)
    return InvalidArgument("calibrate: matmul needs threads in 1..1024, cols a multiple of 32");
  LATTICE_ASSIGN_OR_RETURN(MatmulCase c, matmul_case(rows, cols, n_tok, 7));
  engine::ThreadPool pool(static_cast<size_t>(threads));
  engine::matmul(c.w, c.x.data(), n_tok, c.y.data(), pool);  // warm up
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    auto t0 = Clock::now();
    engine::matmul(c.w, c.x.data(), n_tok, c.y.data(), pool);
    best = std::max(best, 2.0 * rows * cols * n_tok / seconds_since(t0) / 1e12);
  }
  return best;
}

Result<double> measure_matmul_workers_tflops(int workers, size_t rows, size_t cols, size_t n_tok, int reps) {
  if (workers < 1 || workers > 1024 || reps < 1 || rows == 0 || cols % 32 || n_tok == 0)
    return InvalidArgument("calibrate: matmul needs workers in 1..1024, cols a multiple of 32");
  // Each worker its own weight and a pool of one: separate ranks, as decode's kernel is measured.
  std::vector<MatmulCase> cases;
  std::vector<std::unique_ptr<engine::ThreadPool>> pools;
  for (int t = 0; t < workers; ++t) {
    LATTICE_ASSIGN_OR_RETURN(MatmulCase c, matmul_case(rows, cols, n_tok, 7 + uint32_t(t)));
    cases.push_back(std::move(c));
    pools.push_back(std::make_unique<engine::ThreadPool>(1));
  }
  const double flops = 2.0 * rows * cols * n_tok;
  return run_workers(workers, reps, 3, flops / 1e12, [&](int t) {
    MatmulCase& c = cases[size_t(t)];
    engine::matmul(c.w, c.x.data(), n_tok, c.y.data(), *pools[size_t(t)]);
  });
}

Result<double> measure_replicated_ns(size_t n_embd, size_t rows, int reps) {
  if (n_embd == 0 || n_embd % 32 || n_embd > (1u << 16) || rows == 0 || rows > 4096 || reps < 1)
    return InvalidArgument("calibrate: the replicated work needs n_embd a multiple of 32 (at most 65536), 1..4096 rows");
  const size_t n = n_embd * rows;
  // Enough layers' buffers to leave the caches (64 MiB, at least 4 layers), as a layer's weights
  // streamed between them do.
  const size_t layers = std::clamp<size_t>((size_t{64} << 20) / (n * 2 * sizeof(float)), 4, 256);
  std::vector<std::vector<float>> x(layers, std::vector<float>(n)), xb(layers, std::vector<float>(n));
  std::vector<float> w(n_embd, 1.0f);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  for (auto& v : x)
    for (float& e : v) e = nd(rng);
  // The matmuls' activations quantized as for a Q4_0 weight (its size does not matter).
  LATTICE_ASSIGN_OR_RETURN(MatmulCase c, matmul_case(64, n_embd, 1, 3));
  engine::ThreadPool pool(1);
  auto layer = [&](size_t l) {
    float* xl = x[l].data();
    float* bl = xb[l].data();
    for (int half = 0; half < 2; ++half) {  // attention, then the FFN
      for (size_t r = 0; r < rows; ++r) engine::ops::rmsnorm(bl + r * n_embd, xl + r * n_embd, w.data(), n_embd, 1e-5f);
      engine::quantize_activations(c.w, bl, rows, pool);
      for (size_t r = 0; r < rows; ++r) engine::ops::add(xl + r * n_embd, bl + r * n_embd, n_embd);
      for (float& e : std::span(xl, 8)) e *= 0.5f;  // keep the values from growing
    }
  };
  return best_ns_a_layer(layers, reps, layer) / double(n);
}

Result<MoeReplicated> measure_moe_replicated(size_t n_embd, size_t n_expert, size_t k_used, size_t rows, int reps) {
  if (n_embd == 0 || n_embd % 32 || n_embd > (1u << 16) || n_expert < 1 || n_expert > 1024 || k_used < 1 ||
      k_used > n_expert || rows == 0 || rows > 4096 || reps < 1)
    return InvalidArgument("calibrate: the MoE layer's whole work needs n_embd a multiple of 32 (at most 65536), "
                           "1..1024 experts, 1..experts used, 1..4096 rows");
  using engine::TensorType;
  const size_t n = n_embd * rows;
  const size_t layers = std::clamp<size_t>((size_t{64} << 20) / (n * (2 + k_used) * sizeof(float)), 4, 256);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0, 1);
  std::vector<std::vector<float>> router(layers, std::vector<float>(n_expert * n_embd));
  std::vector<std::vector<float>> x(layers, std::vector<float>(n)), acc(layers, std::vector<float>(n));
  std::vector<std::vector<float>> ye(layers, std::vector<float>(n * k_used));  // each chosen expert's output rows
  for (auto* set : {&router, &x, &ye})
    for (auto& v : *set)
      for (float& e : v) e = nd(rng);
  std::vector<engine::Weight> w(layers);
  for (size_t l = 0; l < layers; ++l) {
    LATTICE_ASSIGN_OR_RETURN(w[l], engine::Weight::view({TensorType::kF32, router[l].data(), n_expert, n_embd, 0}));
  }
  std::vector<float> logits(rows * n_expert), xe(rows * n_embd);
  // The experts' matmuls quantize their input as for a Q4_0 weight (its size does not matter).
  LATTICE_ASSIGN_OR_RETURN(MatmulCase q4, matmul_case(64, n_embd, 1, 3));
  engine::ThreadPool pool(1);
  // Each row picks k_used experts; each expert then takes the rows that chose it, as run_experts
  // does (rows spread evenly over the experts: the per-row work does not depend on how).
  std::vector<std::vector<uint32_t>> rows_of(n_expert);
  for (size_t r = 0; r < rows; ++r)
    for (size_t k = 0; k < k_used; ++k) rows_of[(r * k_used + k) % n_expert].push_back(uint32_t(r));
  auto route = [&](size_t l) { engine::matmul(w[l], x[l].data(), rows, logits.data(), pool); };
  auto experts = [&](size_t l) {
    size_t out = 0;
    std::memset(acc[l].data(), 0, n * sizeof(float));
    for (const auto& rs : rows_of) {
      if (rs.empty()) continue;
      for (size_t j = 0; j < rs.size(); ++j)
        std::memcpy(xe.data() + j * n_embd, x[l].data() + size_t{rs[j]} * n_embd, n_embd * sizeof(float));
      engine::quantize_activations(q4.w, xe.data(), rs.size(), pool);
      for (size_t j = 0; j < rs.size(); ++j, ++out)
        engine::ops::axpy(acc[l].data() + size_t{rs[j]} * n_embd, 0.125f, ye[l].data() + out * n_embd, n_embd);
    }
  };
  MoeReplicated m;
  m.router_ns = best_ns_a_layer(layers, reps, route) / double(rows * n_embd * n_expert);
  m.row_ns = best_ns_a_layer(layers, reps, experts) / double(rows * k_used * n_embd);
  return m;
}

Result<double> measure_slice_efficiency(int parts, size_t rows, size_t cols, size_t n_tok, int reps) {
  if (parts < 1 || parts > 64 || reps < 1 || rows % (64 * size_t(parts)) || cols % (32 * size_t(parts)) || n_tok == 0)
    return InvalidArgument("calibrate: a slice needs rows a multiple of 64 and cols of 32 per part, 1..64 parts");
  // One thread's rates: the whole's time over `parts` against the mean of the two slices' times
  // is the slices' harmonic mean rate over the whole's. The three take turns, call by call, so
  // that a slow stretch of the host (a VM's seconds) falls on all of them: one after the other,
  // a whole measured in such a stretch read its 2 slices at 1.15 x its rate (session 36).
  const size_t shapes[3][2] = {{rows, cols}, {rows / size_t(parts), cols}, {rows, cols / size_t(parts)}};
  std::vector<MatmulCase> cases;
  for (const auto& [r, c] : shapes) {
    LATTICE_ASSIGN_OR_RETURN(MatmulCase m, matmul_case(r, c, n_tok, 7));
    cases.push_back(std::move(m));
  }
  engine::ThreadPool pool(1);
  double best[3] = {0, 0, 0};  // TFLOP/s
  for (int round = -1; round < 3 * reps; ++round)  // the first round warms up
    for (size_t i = 0; i < 3; ++i) {
      MatmulCase& m = cases[i];
      const auto t0 = Clock::now();
      engine::matmul(m.w, m.x.data(), n_tok, m.y.data(), pool);
      if (round >= 0) best[i] = std::max(best[i], 2.0 * shapes[i][0] * shapes[i][1] * n_tok / seconds_since(t0) / 1e12);
    }
  return 2 / (1 / best[1] + 1 / best[2]) / best[0];
}

namespace {
constexpr size_t kKernelCols = 4096;
}  // namespace

Result<std::unique_ptr<DecodeKernel>> DecodeKernel::make(size_t bytes, size_t total, size_t n_tok) {
  using engine::TensorType;
  if (bytes < 4096 || bytes > (size_t{64} << 30)) return InvalidArgument("calibrate: a decode kernel of 4 KiB to 64 GiB");
  if (n_tok < 1 || n_tok > 4096) return InvalidArgument("calibrate: a kernel of 1 to 4096 tokens");
  total = std::max(total, bytes);
  if (total > (size_t{64} << 30)) return InvalidArgument("calibrate: a decode kernel's weight of at most 64 GiB");
  const size_t row_bytes = engine::row_bytes(TensorType::kQ4_0, kKernelCols).value_or(0);
  constexpr size_t kGroup = 64;  // whole packing groups
  const size_t per_call = std::max<size_t>(kGroup, bytes / row_bytes / kGroup * kGroup);
  const size_t rows = std::max(per_call, total / row_bytes / per_call * per_call);
  // 64 random rows, repeated: the kernel's speed does not depend on the values.
  std::vector<uint8_t> distinct(kGroup * row_bytes);
  std::vector<float> src(kKernelCols);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0, 1);
  for (size_t r = 0; r < kGroup; ++r) {
    for (float& v : src) v = nd(rng);
    LATTICE_RETURN_IF_ERROR(
        engine::quantize_row(TensorType::kQ4_0, src.data(), distinct.data() + r * row_bytes, kKernelCols));
  }
  std::shared_ptr<std::vector<uint8_t>> q;
  try {
    q = std::make_shared<std::vector<uint8_t>>(rows * row_bytes);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("calibrate: cannot allocate a decode kernel of " + std::to_string(rows * row_bytes) + " bytes");
  }
  for (size_t r = 0; r < rows; r += kGroup) std::memcpy(q->data() + r * row_bytes, distinct.data(), distinct.size());
  std::unique_ptr<DecodeKernel> k(new DecodeKernel());
  k->q_ = std::move(q);
  k->rows_ = rows;
  k->rows_per_call_ = per_call;
  k->n_tok_ = n_tok;
  k->x_.resize(kKernelCols * n_tok);
  for (float& v : k->x_) v = nd(rng);
  return k->copy();
}

Result<std::unique_ptr<DecodeKernel>> DecodeKernel::copy() const {
  std::unique_ptr<DecodeKernel> k(new DecodeKernel());
  k->q_ = q_;
  k->rows_ = rows_;
  k->rows_per_call_ = rows_per_call_;
  k->n_tok_ = n_tok_;
  k->x_ = x_;
  k->y_.resize(rows_per_call_ * n_tok_);
  LATTICE_ASSIGN_OR_RETURN(k->weight_,
                           engine::Weight::pack({engine::TensorType::kQ4_0, q_->data(), rows_, kKernelCols, 0}));
  return k;
}

double DecodeKernel::weight_bytes() const { return double(weight_.bytes()) * double(rows_per_call_) / double(rows_); }

void DecodeKernel::run() {
  const engine::MatmulOut o{&weight_, y_.data(), next_, next_ + rows_per_call_, 0};
  engine::matmul_multi({&o, 1}, x_.data(), n_tok_, pool_);
  next_ = next_ + rows_per_call_ >= rows_ ? 0 : next_ + rows_per_call_;
}

Result<double> measure_decode_kernel_gbs(int workers, size_t bytes, int reps) {
  if (workers < 1 || workers > 1024 || reps < 1 || bytes < (1u << 20))
    return InvalidArgument("calibrate: workers in 1..1024, reps >= 1, at least 1 MiB");
  LATTICE_ASSIGN_OR_RETURN(auto first, DecodeKernel::make(bytes));
  // Each worker its own copy: separate ranks read separate memory.
  std::vector<std::unique_ptr<DecodeKernel>> k;
  k.push_back(std::move(first));
  for (int t = 1; t < workers; ++t) {
    LATTICE_ASSIGN_OR_RETURN(auto c, k[0]->copy());
    k.push_back(std::move(c));
  }
  return run_workers(workers, reps, 4, k[0]->weight_bytes() / 1e9, [&](int t) { k[size_t(t)]->run(); });
}

bool starts_disagree(const std::vector<double>& readings, double spread) {
  double lo = 0, hi = 0;
  for (double r : readings) {
    if (!(r > 0)) continue;
    lo = lo > 0 ? std::min(lo, r) : r;
    hi = std::max(hi, r);
  }
  return lo > 0 && hi > spread * lo;
}

bool another_start(int i, int n, int more, std::initializer_list<const std::vector<double>*> watched) {
  if (i < n) return true;
  if (i >= n + more) return false;
  for (const auto* v : watched)
    if (starts_disagree(*v)) return true;
  return false;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace lattice::sim
