// The matmul driver: validates and packs weights, quantizes activations once per call,
// splits the rows of every output into tasks, and runs them on the pool with the kernels
// of the active ISA.
#include "lattice/engine/quant/matmul.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "lattice/core/check.h"
#include "lattice/engine/quant/blocks.h"
#include "lattice/engine/quant/kernels.h"
#include "lattice/engine/quant/quantize.h"

namespace lattice::engine {

using namespace detail;

namespace {

Status validate(const WeightView& w) {
  if (!is_supported_weight_type(w.type))
    return InvalidArgument("matmul: unsupported weight type " + std::to_string(static_cast<uint32_t>(w.type)));
  auto rb = row_bytes(w.type, w.n_cols);
  if (!rb || w.n_cols == 0)
    return InvalidArgument("matmul: " + std::to_string(w.n_cols) + " columns is not a whole number of blocks");
  if (w.n_rows == 0) return InvalidArgument("matmul: a weight needs at least one row");
  if (w.data == nullptr) return InvalidArgument("matmul: null weight data");
  if (w.row_stride_bytes != 0 && w.row_stride_bytes < *rb)
    return InvalidArgument("matmul: row stride shorter than a row");
  return Status::Ok();
}

bool is_packable(TensorType t) {
  return t == TensorType::kQ4_0 || t == TensorType::kQ8_0 || t == TensorType::kQ4_K || t == TensorType::kQ5_K ||
         t == TensorType::kQ6_K;
}

// Rearranges one Q6_K row into lane `lane` of its packed group (layout in kernels.h).
void pack_q6_k_row(const BlockQ6_K* src, size_t nsb, uint8_t* group, size_t lane) {
  for (size_t s = 0; s < nsb; ++s) {
    const BlockQ6_K& blk = src[s];
    uint8_t q[kQKK];  // 0..63
    for (int e = 0; e < kQKK; ++e) {
      const int h = e / 128, r = e % 128, kq = r / 32, l = r % 32;
      const uint8_t lo = blk.ql[64 * h + 32 * (kq & 1) + l];
      q[e] = static_cast<uint8_t>((kq < 2 ? (lo & 15) : (lo >> 4)) | (((blk.qh[32 * h + l] >> (2 * kq)) & 3) << 4));
    }
    uint8_t* sb = group + s * kQ6KPackedBytes;
    for (int j = 0; j < 8; ++j) {
      const uint8_t* v = q + 32 * j;
      for (int i = 0; i < 4; ++i)
        for (int m = 0; m < 4; ++m)
          sb[j * 256 + i * 64 + lane * 4 + m] = static_cast<uint8_t>((v[4 * i + m] & 15) | ((v[16 + 4 * i + m] & 15) << 4));
      for (int p = 0; p < 2; ++p)
        for (int m = 0; m < 4; ++m)
          sb[2048 + j * 128 + p * 64 + lane * 4 + m] =
              static_cast<uint8_t>((v[4 * p + m] >> 4) | ((v[16 + 4 * p + m] >> 4) << 2) |
                                   ((v[4 * (p + 2) + m] >> 4) << 4) | ((v[16 + 4 * (p + 2) + m] >> 4) << 6));
    }
    for (int g = 0; g < 16; ++g) sb[3072 + g * 16 + lane] = static_cast<uint8_t>(blk.scales[g]);
    std::memcpy(sb + 3328 + 2 * lane, &blk.d, 2);
  }
}

// Rearranges one Q4_K / Q5_K row into lane `lane` of its packed group (layout in kernels.h).
template <int kBits, class Block>
void pack_k4_row(const Block* src, size_t nsb, uint8_t* group, size_t lane) {
  using L = K4Layout<kBits>;
  for (size_t s = 0; s < nsb; ++s) {
    const Block& blk = src[s];
    uint8_t* sb = group + s * L::kBytes;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k4_scale_min(blk.scales, j, &sc, &m);
      sb[L::kScales + j * 16 + lane] = static_cast<uint8_t>(sc);
      sb[L::kMins + (j / 2) * 32 + 2 * lane + (j % 2)] = static_cast<uint8_t>(m);
      // Sub-block j: GGUF keeps it in the low (j even) or high (j odd) nibbles of qs[32*(j/2)..],
      // and (Q5_K) its fifth bits as bit j of qh[0..31].
      uint8_t v[32];
      for (int e = 0; e < 32; ++e) {
        const uint8_t byte = blk.qs[32 * (j / 2) + e];
        v[e] = (j % 2) ? (byte >> 4) : (byte & 15);
        if constexpr (kBits == 5) v[e] = static_cast<uint8_t>(v[e] | (((blk.qh[e] >> j) & 1) << 4));
      }
      for (int i = 0; i < 4; ++i)
        for (int mm = 0; mm < 4; ++mm) {
          sb[j * 256 + i * 64 + lane * 4 + mm] = static_cast<uint8_t>((v[4 * i + mm] & 15) | ((v[16 + 4 * i + mm] & 15) << 4));
          if constexpr (kBits == 5)
            sb[L::kHighBits + j * 64 + lane * 4 + mm] |=
                static_cast<uint8_t>(((v[4 * i + mm] >> 4) << (2 * i)) | ((v[16 + 4 * i + mm] >> 4) << (2 * i + 1)));
        }
    }
    std::memcpy(sb + L::kD + 2 * lane, &blk.d, 2);
    std::memcpy(sb + L::kDmin + 2 * lane, &blk.dmin, 2);
  }
}

constexpr size_t kHugePage = size_t{2} << 20;

enum class ActKind { kF32, kQ8, kQ8K };
ActKind act_kind(TensorType t) {
  switch (t) {
    case TensorType::kQ4_0:
    case TensorType::kQ4_1:
    case TensorType::kQ5_0:
    case TensorType::kQ5_1:
    case TensorType::kIQ4_NL:
    case TensorType::kQ8_0: return ActKind::kQ8;
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
    case TensorType::kQ2_K:
    case TensorType::kQ3_K: return ActKind::kQ8K;
    default: return ActKind::kF32;
  }
}

RowDotFn row_dot(const KernelTable& k, TensorType t) {
  switch (t) {
    case TensorType::kF32: return k.dot_f32;
    case TensorType::kF16: return k.dot_f16;
    case TensorType::kBF16: return k.dot_bf16;
    case TensorType::kQ8_0: return k.dot_q8_0;
    case TensorType::kQ4_0: return k.dot_q4_0;
    case TensorType::kQ4_K: return k.dot_q4_k;
    case TensorType::kQ5_K: return k.dot_q5_k;
    case TensorType::kQ6_K: return k.dot_q6_k;
    case TensorType::kQ2_K: return k.dot_q2_k;
    case TensorType::kQ3_K: return k.dot_q3_k;
    case TensorType::kQ4_1: return k.dot_q4_1;
    case TensorType::kQ5_0: return k.dot_q5_0;
    case TensorType::kQ5_1: return k.dot_q5_1;
    case TensorType::kIQ4_NL: return k.dot_iq4_nl;
    default: return nullptr;
  }
}

// One unit of work: groups [a, b) of a packed output, or rows [a, b) of a raw one.
struct Task {
  uint32_t out;
  size_t a, b;
};

// Per calling thread, reused across calls so decode allocates nothing in steady state.
struct Scratch {
  std::vector<int8_t> q8, qk;
  std::vector<float> d8, dk;
  std::vector<int32_t> s8, off4, off8;
  std::vector<int16_t> bk;
  std::vector<Task> tasks;
};
thread_local Scratch t_scratch;

template <class T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

}  // namespace

Result<Weight> Weight::view(const WeightView& w) {
  LATTICE_RETURN_IF_ERROR(validate(w));
  Weight out;
  out.raw_ = w;
  if (out.raw_.row_stride_bytes == 0) out.raw_.row_stride_bytes = *row_bytes(w.type, w.n_cols);
  return out;
}

Result<Weight> Weight::pack(const WeightView& w) {
  LATTICE_RETURN_IF_ERROR(validate(w));
  // Q4_K has a fast packed tile only with AVX-512; elsewhere its GGUF rows are faster.
  if (!is_packable(w.type) ||
      (act_kind(w.type) == ActKind::kQ8K && active_isa() != Isa::kAvx512))
    return view(w);
  Weight out;
  out.raw_ = w;
  out.raw_.data = nullptr;
  const size_t stride = w.row_stride_bytes ? w.row_stride_bytes : *row_bytes(w.type, w.n_cols);
  out.raw_.row_stride_bytes = stride;
  const bool kquant = w.type == TensorType::kQ4_K || w.type == TensorType::kQ5_K || w.type == TensorType::kQ6_K;
  const size_t nb = w.n_cols / (kquant ? kQKK : kQK);
  const size_t n_groups = (w.n_rows + kPackRows - 1) / kPackRows;
  out.group_stride_ = packed_group_bytes(w.type, nb);
  const size_t total = n_groups * out.group_stride_;
  uint8_t* mem = nullptr;
  if (total >= kHugePage) {
    // Decode streams the weights once per token: 2 MB pages spare a TLB walk every 4 KB.
    const size_t size = (total + kHugePage - 1) / kHugePage * kHugePage;
    mem = static_cast<uint8_t*>(std::aligned_alloc(kHugePage, size));
    if (mem != nullptr) {
      (void)madvise(mem, size, MADV_HUGEPAGE);  // advisory: 4 KB pages work too
      out.packed_ = std::shared_ptr<uint8_t[]>(mem, [](uint8_t* p) { std::free(p); });
    }
  } else {
    mem = static_cast<uint8_t*>(::operator new[](total, std::align_val_t{64}, std::nothrow));
    if (mem != nullptr)
      out.packed_ = std::shared_ptr<uint8_t[]>(mem, [](uint8_t* p) { ::operator delete[](p, std::align_val_t{64}); });
  }
  if (mem == nullptr) return ResourceExhausted("matmul: cannot allocate " + std::to_string(total) + " bytes to pack a weight");
  std::memset(mem, 0, total);
  const bool q4 = w.type == TensorType::kQ4_0;
  const size_t bb = packed_block_bytes(w.type);
  for (size_t r = 0; r < w.n_rows; ++r) {
    const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * stride;
    uint8_t* group = mem + (r / kPackRows) * out.group_stride_;
    const size_t lane = r % kPackRows;
    if (w.type == TensorType::kQ4_K) {
      pack_k4_row<4>(reinterpret_cast<const BlockQ4_K*>(src), nb, group, lane);
      continue;
    }
    if (w.type == TensorType::kQ5_K) {
      pack_k4_row<5>(reinterpret_cast<const BlockQ5_K*>(src), nb, group, lane);
      continue;
    }
    if (w.type == TensorType::kQ6_K) {
      pack_q6_k_row(reinterpret_cast<const BlockQ6_K*>(src), nb, group, lane);
      continue;
    }
    auto* scales = reinterpret_cast<uint16_t*>(group + nb * bb);
    for (size_t b = 0; b < nb; ++b) {
      uint8_t* dst = group + b * bb + lane * 4;
      if (q4) {
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(src) + b;
        for (int i = 0; i < 4; ++i) std::memcpy(dst + i * 64, blk->qs + 4 * i, 4);
        std::memcpy(&scales[b * kPackRows + lane], &blk->d, 2);
      } else {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(src) + b;
        for (int i = 0; i < 8; ++i)
          for (int m = 0; m < 4; ++m) dst[i * 64 + m] = static_cast<uint8_t>(blk->qs[4 * i + m]) ^ 0x80;
        std::memcpy(&scales[b * kPackRows + lane], &blk->d, 2);
      }
    }
  }
  return out;
}

size_t Weight::bytes() const {
  if (packed()) return (n_rows() + kPackRows - 1) / kPackRows * group_stride_;
  return n_rows() * *row_bytes(type(), n_cols());
}

void matmul(const Weight& w, const float* x, size_t n_tok, float* y, ThreadPool& pool) {
  MatmulOut o{&w, y, 0, w.n_rows(), w.n_rows()};
  matmul_multi({&o, 1}, x, n_tok, pool);
}

namespace {

// The activations in the forms the outputs' kernels read (8-bit blocks of 32 for Q4_0 / Q8_0,
// of 256 for K-quants), each once, into the calling thread's scratch.
void quantize_acts(std::span<const MatmulOut> outs, const float* x, size_t n_tok, ThreadPool& pool, Act& act8,
                   Act& actk) {
  const KernelTable& kt = active_kernels();
  const size_t k = outs[0].w->n_cols();
  bool need_q8 = false, need_q8k = false;
  for (const auto& o : outs) {
    LATTICE_CHECK(o.w != nullptr && o.w->n_cols() == k);
    const size_t r1 = o.r1 ? o.r1 : o.w->n_rows();
    LATTICE_CHECK(o.r0 < r1 && r1 <= o.w->n_rows());
    need_q8 |= act_kind(o.w->type()) == ActKind::kQ8;
    need_q8k |= act_kind(o.w->type()) == ActKind::kQ8K;
  }
  Scratch& sc = t_scratch;
  act8.k = actk.k = k;
  act8.f32 = actk.f32 = x;
  if (need_q8) {
    act8.q = grow(sc.q8, n_tok * k);
    act8.d = grow(sc.d8, n_tok * (k / kQK));
    act8.s = grow(sc.s8, n_tok * (k / kQK));
  }
  if (need_q8k) {
    actk.q = grow(sc.qk, n_tok * k);
    actk.d = grow(sc.dk, n_tok * (k / kQKK));
    actk.bsum = grow(sc.bk, n_tok * (k / 16));
  }
  if (need_q8 || need_q8k) {
    auto quantize_token = [&](size_t t, size_t) {
      if (need_q8)
        kt.quant_q8(x + t * k, k, sc.q8.data() + t * k, sc.d8.data() + t * (k / kQK), sc.s8.data() + t * (k / kQK));
      if (need_q8k)
        kt.quant_q8k(x + t * k, k, sc.qk.data() + t * k, sc.dk.data() + t * (k / kQKK), sc.bk.data() + t * (k / 16));
    };
    if (n_tok >= 8) pool.parallel_for(n_tok, quantize_token);
    else for (size_t t = 0; t < n_tok; ++t) quantize_token(t, 0);
  }
  if (need_q8) {
    const size_t n = n_tok * (k / kQK);
    int32_t* o4 = grow(sc.off4, n);
    int32_t* o8 = grow(sc.off8, n);
    for (size_t i = 0; i < n; ++i) {
      o4[i] = -8 * sc.s8[i];
      o8[i] = -128 * sc.s8[i];
    }
    act8.off4 = o4;
    act8.off8 = o8;
  }
}

}  // namespace

void quantize_activations(const Weight& w, const float* x, size_t n_tok, ThreadPool& pool) {
  if (n_tok == 0) return;
  const MatmulOut o{&w, nullptr};
  Act act8, actk;
  quantize_acts({&o, 1}, x, n_tok, pool, act8, actk);
}

void matmul_multi(std::span<const MatmulOut> outs, const float* x, size_t n_tok, ThreadPool& pool) {
  if (outs.empty() || n_tok == 0) return;
  for (const auto& o : outs) LATTICE_CHECK(o.y != nullptr);
  const size_t k = outs[0].w->n_cols();
  const KernelTable& kt = active_kernels();
  Scratch& sc = t_scratch;
  Act act8, actk;
  quantize_acts(outs, x, n_tok, pool, act8, actk);

  // Split rows into tasks. Decode wants enough tasks for dynamic balance but each big enough
  // to amortize the claim; prefill tasks keep one weight slice hot across all tokens.
  const size_t n_thr = pool.n_threads();
  std::vector<Task>& tasks = sc.tasks;
  tasks.clear();
  for (uint32_t oi = 0; oi < outs.size(); ++oi) {
    const MatmulOut& o = outs[oi];
    const size_t r0 = o.r0, r1 = o.r1 ? o.r1 : o.w->n_rows();
    if (o.w->packed()) {
      const size_t g0 = r0 / kPackRows, g1 = (r1 + kPackRows - 1) / kPackRows;
      const size_t per = n_tok == 1 ? (n_thr == 1 ? 16 : std::clamp<size_t>((g1 - g0) / (8 * n_thr), 1, 4))
                                    : std::clamp<size_t>((g1 - g0) / (4 * n_thr), 1, 8);
      for (size_t g = g0; g < g1; g += per) tasks.push_back({oi, g, std::min(g1, g + per)});
    } else {
      const size_t per = n_thr == 1 ? 256 : std::clamp<size_t>((r1 - r0) / (8 * n_thr), 1, n_tok == 1 ? 64 : 16);
      for (size_t r = r0; r < r1; r += per) tasks.push_back({oi, r, std::min(r1, r + per)});
    }
  }

  auto run_task = [&](size_t ti, size_t) {
    const Task& task = tasks[ti];
    const MatmulOut& o = outs[task.out];
    const Weight& w = *o.w;
    const size_t r0 = o.r0, r1 = o.r1 ? o.r1 : w.n_rows();
    const size_t ys = o.y_stride ? o.y_stride : r1 - r0;
    if (w.packed()) {
      const bool kq = act_kind(w.type()) == ActKind::kQ8K;
      const PackedTileFn tile = w.type() == TensorType::kQ4_0   ? kt.tile_q4_0
                                : w.type() == TensorType::kQ8_0 ? kt.tile_q8_0
                                : w.type() == TensorType::kQ4_K ? kt.tile_q4_k
                                : w.type() == TensorType::kQ5_K ? kt.tile_q5_k
                                                                : kt.tile_q6_k;
      const Act& a = kq ? actk : act8;
      const size_t nb = kq ? k / kQKK : k / kQK;
      alignas(64) float tmp[kMaxTileTokens * kPackRows];
      // Tokens in chunks whose activations stay in L2 while the task's groups cycle through
      // L1/L2; each tile then reuses a group's blocks for up to 8 tokens.
      constexpr size_t kTokChunk = 64;
      for (size_t tc = 0; tc < n_tok; tc += kTokChunk) {
        const size_t tc_end = std::min(n_tok, tc + kTokChunk);
        for (size_t g = task.a; g < task.b; ++g) {
          const uint8_t* gp = w.packed_data() + g * w.group_stride();
          const size_t ra = std::max(r0, g * kPackRows), rb = std::min(r1, (g + 1) * kPackRows);
          for (size_t t0 = tc; t0 < tc_end; t0 += kMaxTileTokens) {
            const size_t nt = std::min(kMaxTileTokens, tc_end - t0);
            tile(gp, nb, a, t0, nt, tmp);
            for (size_t i = 0; i < nt; ++i)
              std::memcpy(o.y + (t0 + i) * ys + (ra - r0), tmp + i * kPackRows + (ra - g * kPackRows),
                          (rb - ra) * sizeof(float));
          }
        }
      }
    } else {
      const RowDotFn dot = row_dot(kt, w.type());
      const Act& a = act_kind(w.type()) == ActKind::kQ8K ? actk : act8;
      const auto* base = static_cast<const uint8_t*>(w.raw().data);
      const size_t stride = w.raw().row_stride_bytes;
      const FloatTileFn ftile = w.type() == TensorType::kF32    ? kt.ftile_f32
                                : w.type() == TensorType::kF16  ? kt.ftile_f16
                                : w.type() == TensorType::kBF16 ? kt.ftile_bf16
                                                                : nullptr;
      if (ftile != nullptr && n_tok > 1) {
        // Float weights in prefill: 4 rows x 4 tokens per tile, tokens in L2-sized chunks.
        float tmp[16];
        constexpr size_t kTokChunk = 64;
        for (size_t tc = 0; tc < n_tok; tc += kTokChunk) {
          const size_t tc_end = std::min(n_tok, tc + kTokChunk);
          for (size_t r = task.a; r < task.b; r += 4) {
            const size_t nr = std::min<size_t>(4, task.b - r);
            for (size_t t0 = tc; t0 < tc_end; t0 += 4) {
              const size_t nt = std::min<size_t>(4, tc_end - t0);
              ftile(base + r * stride, stride, nr, a, t0, nt, tmp);
              for (size_t t = 0; t < nt; ++t)
                for (size_t i = 0; i < nr; ++i) o.y[(t0 + t) * ys + (r + i - r0)] = tmp[t * 4 + i];
            }
          }
        }
        return;
      }
      for (size_t r = task.a; r < task.b; ++r) {
        const void* row = base + r * stride;
        for (size_t t = 0; t < n_tok; ++t) o.y[t * ys + (r - r0)] = dot(row, a, t);
      }
    }
  };
  pool.parallel_for(tasks.size(), run_task);
}

}  // namespace lattice::engine
