#include "coll_testlib.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <map>

namespace lattice::coll::test {

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

std::string simulate(const Case& c, DType t, ReduceOp op, Algorithm algo, bool in_place) {
  const int w = c.world;
  const size_t es = dtype_size(t);
  struct RankSim {
    plan::Plan plan;
    std::vector<std::byte> in, out, tmp;
    size_t step = 0;
    bool sent = false;
  };
  auto ranks = std::vector<RankSim>(size_t(w));
  std::map<std::pair<int, int>, std::deque<std::vector<std::byte>>> wire;  // (from, to)
  for (int r = 0; r < w; ++r) {
    auto& rs = ranks[size_t(r)];
    bool ip = in_place && c.op != CollOp::kBarrier && c.op != CollOp::kReduceScatter;
    auto p = plan::build({c.op, r, w, c.count, c.root, ip}, algo);
    if (!p.ok()) return p.status().to_string();
    rs.plan = std::move(*p);
    rs.in = make_buffer(t, in_elems(c));
    rs.out = make_buffer(t, std::max(out_elems(c), in_elems(c)));
    rs.tmp = make_buffer(t, rs.plan.tmp_elems);
    fill_case_input(c, t, op, r, rs.in.data());
    if (ip) {
      // In place: the input sits where the plan expects it inside out.
      size_t off = c.op == CollOp::kAllGather ? size_t(r) * c.count * es : 0;
      std::memcpy(rs.out.data() + off, rs.in.data(), in_elems(c) * es);
      rs.in.clear();
    }
  }
  auto ptr = [&](RankSim& rs, plan::Ref ref, int r) -> std::byte* {
    switch (ref.buf) {
      case plan::Buf::kIn: {
        if (!rs.in.empty()) return rs.in.data() + ref.off * es;
        size_t base = c.op == CollOp::kAllGather ? size_t(r) * c.count * es : 0;
        return rs.out.data() + base + ref.off * es;
      }
      case plan::Buf::kOut: return rs.out.data() + ref.off * es;
      case plan::Buf::kTmp: return rs.tmp.data() + ref.off * es;
    }
    return nullptr;
  };
  for (int round = 0;; ++round) {
    bool progress = false, done = true;
    for (int r = 0; r < w; ++r) {
      auto& rs = ranks[size_t(r)];
      if (rs.step >= rs.plan.steps.size()) continue;
      done = false;
      const plan::Step& st = rs.plan.steps[rs.step];
      if (!rs.sent) {
        for (const auto& s : st.sends) {
          std::byte* p = ptr(rs, s.ref, r);
          wire[{r, s.peer}].emplace_back(p, p + s.n * es);
        }
        rs.sent = true;
        progress = true;
      }
      // All receives available?
      std::map<int, size_t> want;
      bool ready = true;
      for (const auto& rv : st.recvs)
        if (wire[{rv.peer, r}].size() < ++want[rv.peer]) ready = false;
      if (!ready) continue;
      for (const auto& rv : st.recvs) {
        auto msg = std::move(wire[{rv.peer, r}].front());
        wire[{rv.peer, r}].pop_front();
        if (msg.size() != rv.n * es)
          return "rank " + std::to_string(r) + " step " + std::to_string(rs.step) + ": message of " +
                 std::to_string(msg.size()) + " bytes from rank " + std::to_string(rv.peer) + ", expected " +
                 std::to_string(rv.n * es);
        std::byte* d = ptr(rs, rv.ref, r);
        if (rv.reduce) reduce(t, op, d, d, msg.data(), rv.n);
        else if (!msg.empty()) std::memcpy(d, msg.data(), msg.size());
      }
      for (const auto& l : st.after) {
        std::byte* d = ptr(rs, l.dst, r);
        if (l.kind == plan::Local::kCopy) {
          if (l.n) std::memmove(d, ptr(rs, l.a, r), l.n * es);
        } else {
          reduce(t, op, d, ptr(rs, l.a, r), ptr(rs, l.b, r), l.n);
        }
      }
      ++rs.step;
      rs.sent = false;
      progress = true;
    }
    if (done) break;
    if (!progress) return "deadlock in round " + std::to_string(round);
  }
  for (auto& [k, q] : wire)
    if (!q.empty()) return "rank " + std::to_string(k.first) + " left unreceived messages for " + std::to_string(k.second);
  for (int r = 0; r < w; ++r) {
    std::string e = check_output(c, t, op, r, ranks[size_t(r)].out.data());
    if (!e.empty()) return e;
  }
  return "";
}

}  // namespace lattice::coll::test
