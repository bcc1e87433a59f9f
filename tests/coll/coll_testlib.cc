#include "coll_testlib.h"

#include <cstring>
#include <deque>
#include <map>
#include <thread>

namespace lattice::coll::test {

std::vector<Status> on_all(int world, const std::function<Status(int)>& fn) {
  auto st = std::vector<Status>(size_t(world));
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r) th.emplace_back([&, r] { st[size_t(r)] = fn(r); });
  for (auto& t : th) t.join();
  return st;
}

std::string run_and_check(const std::vector<Communicator*>& comms, const Case& c, DType t, ReduceOp op,
                          const CollOptions& o) {
  const int world = static_cast<int>(comms.size());
  auto in = std::vector<std::vector<std::byte>>(size_t(world)), out = in;
  auto st = on_all(world, [&](int r) {
    in[size_t(r)] = make_buffer(t, in_elems(c));
    out[size_t(r)] = make_buffer(t, out_elems(c));
    fill_case_input(c, t, op, r, in[size_t(r)].data());
    return run_op(*comms[size_t(r)], c, t, op, in[size_t(r)].data(), out[size_t(r)].data(), o);
  });
  for (int r = 0; r < world; ++r)
    if (!st[size_t(r)].ok()) return "rank " + std::to_string(r) + ": " + st[size_t(r)].to_string();
  for (int r = 0; r < world; ++r) {
    std::string e = check_output(c, t, op, r, out[size_t(r)].data());
    if (!e.empty()) return "rank " + std::to_string(r) + ": " + e;
  }
  return "";
}

Status run_op(Communicator& comm, const Case& c, DType t, ReduceOp op, const void* in, void* out,
              const CollOptions& o) {
  switch (c.op) {
    case CollOp::kAllReduce: return all_reduce(comm, in, out, c.count, t, op, o);
    case CollOp::kAllGather: return all_gather(comm, in, out, c.count, t, o);
    case CollOp::kReduceScatter: return reduce_scatter(comm, in, out, c.count, t, op, o);
    case CollOp::kBroadcast: return broadcast(comm, in, out, c.count, t, c.root, o);
    case CollOp::kReduce: return reduce(comm, in, out, c.count, t, op, c.root, o);
    case CollOp::kAllToAll: return all_to_all(comm, in, out, c.count, t, o);
    case CollOp::kBarrier: return barrier(comm, o);
  }
  return Internal("unknown collective");
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
