#include "lattice/coll/plan/ring_route.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace lattice::coll::plan {
namespace {

int mod(int a, int p) { return ((a % p) + p) % p; }

// Hamiltonian cycle by depth-first search from rank 0, with a budget of visited states so a
// pathological graph cannot stall a collective's set-up.
bool extend(std::vector<int>& path, std::vector<char>& used, int world, const std::function<bool(int, int)>& linked,
            long& budget) {
  if (--budget < 0) return false;
  if (static_cast<int>(path.size()) == world) return linked(path.back(), path.front());
  for (int next = 0; next < world; ++next) {
    if (used[size_t(next)] || !linked(path.back(), next)) continue;
    used[size_t(next)] = 1;
    path.push_back(next);
    if (extend(path, used, world, linked, budget)) return true;
    path.pop_back();
    used[size_t(next)] = 0;
  }
  return false;
}

Ref ref(Buf b, size_t off = 0) { return {b, off}; }

// Pipeline segments for a chain: enough to overlap the hops on large buffers, one on small.
int chain_segments(size_t n) { return n < 16384 ? 1 : int(std::min<size_t>(8, n / 8192)); }

Plan broadcast_chain(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int w = s.world, d = mod(s.rank - s.root, w), S = chain_segments(n);
  if (d == 0 && !s.in_place && n) {
    Step st;
    st.after.push_back({Local::kCopy, ref(Buf::kOut), ref(Buf::kIn), {}, n});
    p.steps.push_back(std::move(st));
  }
  const int next = mod(s.rank + 1, w), prev = mod(s.rank - 1, w);
  for (int t = 0; t + 2 < S + w; ++t) {
    Step st;
    if (d < w - 1 && t - d >= 0 && t - d < S) {
      Segment g = segment(n, S, t - d);
      st.sends.push_back({next, ref(Buf::kOut, g.begin), g.size});
    }
    if (d >= 1 && t - d + 1 >= 0 && t - d + 1 < S) {
      Segment g = segment(n, S, t - d + 1);
      st.recvs.push_back({prev, ref(Buf::kOut, g.begin), g.size});
    }
    if (!st.sends.empty() || !st.recvs.empty()) p.steps.push_back(std::move(st));
  }
  return p;
}

// Partial sums flow from the far end of the chain (distance w - 1 from the root) towards the
// root; every rank adds what it received to its own contribution: a fixed order.
Plan reduce_chain(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int w = s.world, d = mod(s.rank - s.root, w), e = w - 1 - d, S = chain_segments(n);
  const Buf acc = d == 0 ? Buf::kOut : Buf::kTmp;
  if (acc == Buf::kTmp) p.tmp_elems = n;
  if (n && !(d == 0 && s.in_place)) {
    Step st;
    st.after.push_back({Local::kCopy, ref(acc), ref(Buf::kIn), {}, n});
    p.steps.push_back(std::move(st));
  }
  const int toward_root = mod(s.rank - 1, w), farther = mod(s.rank + 1, w);
  for (int t = 0; t + 2 < S + w; ++t) {
    Step st;
    if (d >= 1 && t - e >= 0 && t - e < S) {
      Segment g = segment(n, S, t - e);
      st.sends.push_back({toward_root, ref(acc, g.begin), g.size});
    }
    if (e >= 1 && t - e + 1 >= 0 && t - e + 1 < S) {
      Segment g = segment(n, S, t - e + 1);
      st.recvs.push_back({farther, ref(acc, g.begin), g.size, true});
    }
    if (!st.sends.empty() || !st.recvs.empty()) p.steps.push_back(std::move(st));
  }
  return p;
}

// After hop k a rank has heard, transitively, from the k ranks before it.
Plan barrier_ring(const Shape& s) {
  Plan p;
  p.tmp_elems = 2;
  for (int k = 1; k < s.world; ++k) {
    Step st;
    st.sends.push_back({mod(s.rank + 1, s.world), ref(Buf::kTmp, 0), 1});
    st.recvs.push_back({mod(s.rank - 1, s.world), ref(Buf::kTmp, 1), 1});
    p.steps.push_back(std::move(st));
  }
  return p;
}

// Relabelling: peers are positions -> order[position]. Buffers laid out by rank (all_gather's
// output, reduce_scatter's input) are laid out by position in the plan: block u moves to block
// order[u]. A transfer must stay within one block (both ends cut messages the same way);
// local copies are split at block edges.
struct Relabel {
  const std::vector<int>& order;
  Buf remapped;  // the buffer laid out by rank, or kTmp when none (kTmp never is)
  bool any;
  size_t block;

  bool moves(const Ref& r) const { return any && r.buf == remapped; }
  Ref map(Ref r, size_t at) const {
    if (!moves(r)) return {r.buf, r.off + at};
    const size_t off = r.off + at, u = off / block;
    return {r.buf, size_t(order[u]) * block + off % block};
  }
};

Status relabel(Plan& p, const Relabel& rl) {
  for (Step& st : p.steps) {
    for (auto* list : {&st.sends, &st.recvs})
      for (Transfer& t : *list) {
        if (t.peer < 0 || size_t(t.peer) >= rl.order.size()) return Internal("ring route: bad position in a plan");
        if (rl.moves(t.ref) && t.n && (t.ref.off / rl.block != (t.ref.off + t.n - 1) / rl.block))
          return Internal("ring route: a transfer spans rank blocks");
        t.ref = rl.map(t.ref, 0);
        t.peer = rl.order[size_t(t.peer)];
      }
    std::vector<Local> after;
    for (const Local& l : st.after) {
      size_t at = 0;
      while (at < l.n) {
        size_t piece = l.n - at;
        for (const Ref* r : {&l.dst, &l.a, &l.b})
          if (rl.moves(*r) && (r != &l.b || l.kind == Local::kReduce))
            piece = std::min(piece, rl.block - (r->off + at) % rl.block);
        Local m = l;
        m.n = piece;
        m.dst = rl.map(l.dst, at);
        m.a = rl.map(l.a, at);
        if (l.kind == Local::kReduce) m.b = rl.map(l.b, at);
        after.push_back(m);
        at += piece;
      }
    }
    st.after = std::move(after);
  }
  return Status::Ok();
}

}  // namespace

std::vector<int> find_ring(int world, const std::function<bool(int, int)>& linked) {
  std::vector<int> identity(size_t(std::max(world, 0)));
  std::iota(identity.begin(), identity.end(), 0);
  if (world <= 2) {
    if (world == 2 && !linked(0, 1)) return {};
    return identity;
  }
  bool is_cycle = true;
  for (int i = 0; i < world && is_cycle; ++i) is_cycle = linked(i, (i + 1) % world);
  if (is_cycle) return identity;
  std::vector<int> path{0};
  std::vector<char> used(size_t(world), 0);
  used[0] = 1;
  long budget = 1'000'000;
  if (!extend(path, used, world, linked, budget)) return {};
  return path;
}

Result<Plan> build_on_ring(const Shape& shape, const std::vector<int>& order) {
  const int w = shape.world;
  if (static_cast<int>(order.size()) != w) return InvalidArgument("ring route: order has the wrong size");
  std::vector<int> pos(size_t(w), -1);
  for (int i = 0; i < w; ++i) {
    if (order[size_t(i)] < 0 || order[size_t(i)] >= w || pos[size_t(order[size_t(i)])] >= 0)
      return InvalidArgument("ring route: order is not a permutation");
    pos[size_t(order[size_t(i)])] = i;
  }
  if (shape.rank < 0 || shape.rank >= w || shape.root < 0 || shape.root >= w)
    return InvalidArgument("ring route: rank or root out of range");
  Shape v = shape;
  v.rank = pos[size_t(shape.rank)];
  v.root = pos[size_t(shape.root)];
  Plan p;
  Relabel rl{order, Buf::kTmp, false, std::max<size_t>(shape.count, 1)};
  switch (shape.op) {
    case CollOp::kAllReduce: {
      LATTICE_ASSIGN_OR_RETURN(p, build(v, Algorithm::kRing));
      break;
    }
    case CollOp::kAllGather: {
      LATTICE_ASSIGN_OR_RETURN(p, build(v, Algorithm::kRing));
      rl.remapped = Buf::kOut;
      rl.any = true;
      break;
    }
    case CollOp::kReduceScatter: {
      LATTICE_ASSIGN_OR_RETURN(p, build(v, Algorithm::kRing));
      rl.remapped = Buf::kIn;
      rl.any = true;
      break;
    }
    case CollOp::kBroadcast: p = broadcast_chain(v); break;
    case CollOp::kReduce: p = reduce_chain(v); break;
    case CollOp::kBarrier: p = barrier_ring(v); break;
    case CollOp::kAllToAll:
      return Unavailable("all_to_all needs a link between every pair of ranks (this topology is a partial mesh)");
  }
  LATTICE_RETURN_IF_ERROR(relabel(p, rl));
  p.algo = Algorithm::kRing;
  return p;
}

}  // namespace lattice::coll::plan
