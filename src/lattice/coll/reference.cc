#include "lattice/coll/reference.h"

#include <cmath>
#include <cstring>

namespace lattice::coll::reference {

double value(ReduceOp op, int rank, size_t i) {
  if (op == ReduceOp::kProd) {
    static const double k[] = {1, 2, -1, 1, -2, 1, 1};
    return k[(size_t(rank) * 3 + i) % 7];
  }
  return double(int64_t((size_t(rank) * 7 + i * 3 + (i >> 5)) % 11) - 5);
}

std::vector<std::byte> make_buffer(DType t, size_t n) { return std::vector<std::byte>(n * dtype_size(t) + 8); }

void store(DType t, void* buf, size_t i, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(buf)[i] = float(v); break;
    case DType::kF64: static_cast<double*>(buf)[i] = v; break;
    case DType::kI32: static_cast<int32_t*>(buf)[i] = int32_t(v); break;
    case DType::kI64: static_cast<int64_t*>(buf)[i] = int64_t(v); break;
    case DType::kF16: static_cast<uint16_t*>(buf)[i] = f32_to_f16(float(v)); break;
    case DType::kBF16: static_cast<uint16_t*>(buf)[i] = f32_to_bf16(float(v)); break;
  }
}

double load(DType t, const void* buf, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(buf)[i];
    case DType::kF64: return static_cast<const double*>(buf)[i];
    case DType::kI32: return static_cast<const int32_t*>(buf)[i];
    case DType::kI64: return double(static_cast<const int64_t*>(buf)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(buf)[i]);
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(buf)[i]);
  }
  return 0;
}

void fill_input(DType t, ReduceOp op, int rank, void* buf, size_t n) {
  for (size_t i = 0; i < n; ++i) store(t, buf, i, value(op, rank, i));
}

double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMax: return std::max(a, b);
    case ReduceOp::kMin: return std::min(a, b);
  }
  return 0;
}

double reduced(ReduceOp op, int world, size_t i) {
  double acc = value(op, 0, i);
  for (int q = 1; q < world; ++q) acc = combine(op, acc, value(op, q, i));
  return acc;
}

size_t in_elems(const Case& c) {
  switch (c.op) {
    case CollOp::kReduceScatter:
    case CollOp::kAllToAll: return c.count * size_t(c.world);
    case CollOp::kBarrier: return 0;
    default: return c.count;
  }
}

size_t out_elems(const Case& c) {
  switch (c.op) {
    case CollOp::kAllGather:
    case CollOp::kAllToAll: return c.count * size_t(c.world);
    case CollOp::kBarrier: return 0;
    default: return c.count;
  }
}

void fill_case_input(const Case& c, DType t, ReduceOp op, int rank, void* in) {
  fill_input(t, op, rank, in, in_elems(c));
}

std::string check_output(const Case& c, DType t, ReduceOp op, int rank, const void* out) {
  const size_t n = out_elems(c);
  for (size_t j = 0; j < n; ++j) {
    double want = 0;
    switch (c.op) {
      case CollOp::kAllReduce: want = reduced(op, c.world, j); break;
      case CollOp::kReduce:
        if (rank != c.root) return "";
        want = reduced(op, c.world, j);
        break;
      case CollOp::kAllGather: want = value(op, int(j / c.count), j % c.count); break;
      case CollOp::kReduceScatter: want = reduced(op, c.world, size_t(rank) * c.count + j); break;
      case CollOp::kBroadcast: want = value(op, c.root, j); break;
      case CollOp::kAllToAll: want = value(op, int(j / c.count), size_t(rank) * c.count + j % c.count); break;
      case CollOp::kBarrier: break;
    }
    // The reference, rounded to the dtype (exact: small integers).
    std::vector<std::byte> cell = make_buffer(t, 1);
    store(t, cell.data(), 0, want);
    const size_t es = dtype_size(t);
    if (std::memcmp(cell.data(), static_cast<const std::byte*>(out) + j * es, es) != 0)
      return "rank " + std::to_string(rank) + " element " + std::to_string(j) + ": got " +
             std::to_string(load(t, out, j)) + ", want " + std::to_string(want);
  }
  return "";
}

}  // namespace lattice::coll::reference
