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
            bool closed, long& budget) {
  if (--budget < 0) return false;
  if (static_cast<int>(path.size()) == world) return !closed || linked(path.back(), path.front());
  for (int next = 0; next < world; ++next) {
    if (used[size_t(next)] || !linked(path.back(), next)) continue;
    used[size_t(next)] = 1;
    path.push_back(next);
    if (extend(path, used, world, linked, closed, budget)) return true;
    path.pop_back();
    used[size_t(next)] = 0;
  }
  return false;
}

Ref ref(Buf b, size_t off = 0) { return {b, off}; }

// Pipeline segments for a chain: enough to overlap the hops on large buffers, one on small.
int chain_segments(size_t n) { return n < 16384 ? 1 : int(std::min<size_t>(8, n / 8192)); }

Plan broadcast_chain(const Shape& s, int segments = 0) {
  Plan p;
  const size_t n = s.count;
  const int w = s.world, d = mod(s.rank - s.root, w), S = segments > 0 ? segments : chain_segments(n);
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
Plan reduce_chain(const Shape& s, bool acc_in_tmp = false) {
  Plan p;
  const size_t n = s.count;
  const int w = s.world, d = mod(s.rank - s.root, w), e = w - 1 - d, S = chain_segments(n);
  const Buf acc = d == 0 && !acc_in_tmp ? Buf::kOut : Buf::kTmp;
  if (acc == Buf::kTmp) p.tmp_elems = n;
  if (n && !(acc == Buf::kOut && s.in_place)) {
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

// ---- on a path: positions 0 .. w-1, only p <-> p+1 linked ----
// reduce_chain and broadcast_chain with the root at position 0 only use those edges.

void append(Plan& p, Plan q) {
  p.tmp_elems = std::max(p.tmp_elems, q.tmp_elems);
  for (Step& st : q.steps) p.steps.push_back(std::move(st));
}

Plan allreduce_path(const Shape& s) {
  Shape to0 = s;
  to0.root = 0;
  Plan p = reduce_chain(to0);
  Shape from0 = to0;
  from0.in_place = true;  // position 0 holds the result in out
  append(p, broadcast_chain(from0));
  return p;
}

// From the root towards both ends, the buffer in segments.
Plan broadcast_path(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int w = s.world, r = s.rank, d = r > s.root ? r - s.root : s.root - r, S = chain_segments(n);
  if (d == 0 && !s.in_place && n) {
    Step st;
    st.after.push_back({Local::kCopy, ref(Buf::kOut), ref(Buf::kIn), {}, n});
    p.steps.push_back(std::move(st));
  }
  std::vector<int> away;
  if (r >= s.root && r + 1 < w) away.push_back(r + 1);
  if (r <= s.root && r - 1 >= 0) away.push_back(r - 1);
  const int toward = r > s.root ? r - 1 : r + 1;
  const int reach = std::max(s.root, w - 1 - s.root);
  for (int t = 0; t + 1 < S + reach; ++t) {
    Step st;
    if (t - d >= 0 && t - d < S) {
      Segment g = segment(n, S, t - d);
      for (int a : away) st.sends.push_back({a, ref(Buf::kOut, g.begin), g.size});
    }
    if (d >= 1 && t - d + 1 >= 0 && t - d + 1 < S) {
      Segment g = segment(n, S, t - d + 1);
      st.recvs.push_back({toward, ref(Buf::kOut, g.begin), g.size});
    }
    if (!st.sends.empty() || !st.recvs.empty()) p.steps.push_back(std::move(st));
  }
  return p;
}

// Into position 0, then relayed hop by hop to the root (relays hold it in scratch).
Plan reduce_path(const Shape& s) {
  Shape to0 = s;
  to0.root = 0;
  const bool root0 = s.root == 0;
  Plan p = reduce_chain(to0, /*acc_in_tmp=*/!root0 && s.rank == 0);
  if (root0 || s.rank > s.root || !s.count) return p;
  p.tmp_elems = std::max(p.tmp_elems, s.count);
  Step st;
  if (s.rank > 0) st.recvs.push_back({s.rank - 1, ref(s.rank == s.root ? Buf::kOut : Buf::kTmp), s.count});
  p.steps.push_back(std::move(st));
  if (s.rank < s.root) {
    Step fwd;
    fwd.sends.push_back({s.rank + 1, ref(Buf::kTmp), s.count});
    p.steps.push_back(std::move(fwd));
  }
  return p;
}

Plan barrier_path(const Shape& s) {
  Plan p;
  p.tmp_elems = 2;
  const int r = s.rank, w = s.world;
  auto hop = [&](int from, int to) {
    Step st;
    if (from >= 0 && from < w) st.recvs.push_back({from, ref(Buf::kTmp, 1), 1});
    if (!st.recvs.empty()) p.steps.push_back(std::move(st));
    Step out;
    if (to >= 0 && to < w) out.sends.push_back({to, ref(Buf::kTmp, 0), 1});
    if (!out.sends.empty()) p.steps.push_back(std::move(out));
  };
  hop(r + 1, r - 1);  // in towards position 0
  hop(r - 1, r + 1);  // and back out
  return p;
}

// Block q travels q hops to position 0 (forwarded one hop per step), then every block goes
// back out along the path, block by block.
Plan allgather_path(const Shape& s) {
  Plan p;
  const size_t c = s.count;
  const int r = s.rank, w = s.world;
  if (!s.in_place && c) {
    Step st;
    st.after.push_back({Local::kCopy, ref(Buf::kOut, size_t(r) * c), ref(Buf::kIn), {}, c});
    p.steps.push_back(std::move(st));
  }
  for (int t = 0; t + 1 < w; ++t) {
    Step st;
    if (r >= 1 && r + t <= w - 1) st.sends.push_back({r - 1, ref(Buf::kOut, size_t(r + t) * c), c});
    if (r + 1 + t <= w - 1) st.recvs.push_back({r + 1, ref(Buf::kOut, size_t(r + 1 + t) * c), c});
    if (!st.sends.empty() || !st.recvs.empty()) p.steps.push_back(std::move(st));
  }
  Shape all = s;
  all.root = 0;
  all.count = c * size_t(w);
  all.in_place = true;
  append(p, broadcast_chain(all, w));  // w segments: exactly the blocks
  return p;
}

// Everything reduced into position 0 (in scratch), then block q travels out to position q:
// the farthest block leaves first, one hop per step.
Plan reduce_scatter_path(const Shape& s) {
  const size_t c = s.count;
  const int r = s.rank, w = s.world;
  Shape to0 = s;
  to0.root = 0;
  to0.count = c * size_t(w);
  to0.in_place = false;
  Plan p = reduce_chain(to0, /*acc_in_tmp=*/true);
  p.tmp_elems = std::max(p.tmp_elems, to0.count);
  for (int t = 0; t + 1 < w; ++t) {
    Step st;
    const int q_out = w - 1 + r - t, q_in = w + r - 2 - t;
    if (r + 1 < w && q_out >= r + 1 && q_out <= w - 1) st.sends.push_back({r + 1, ref(Buf::kTmp, size_t(q_out) * c), c});
    if (r >= 1 && q_in >= r && q_in <= w - 1) st.recvs.push_back({r - 1, ref(Buf::kTmp, size_t(q_in) * c), c});
    if (!st.sends.empty() || !st.recvs.empty()) p.steps.push_back(std::move(st));
  }
  if (c) {
    Step st;
    st.after.push_back({Local::kCopy, ref(Buf::kOut), ref(Buf::kTmp, size_t(r) * c), {}, c});
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
  if (!extend(path, used, world, linked, /*closed=*/true, budget)) return {};
  return path;
}

Route find_route(int world, const std::function<bool(int, int)>& linked) {
  Route r;
  r.order = find_ring(world, linked);
  if (!r.order.empty()) {
    r.cycle = world != 2 || linked(0, 1);
    return r;
  }
  // A Hamiltonian path, from any start (a chain's ends are its only starts).
  long budget = 1'000'000;
  for (int start = 0; start < world; ++start) {
    std::vector<int> path{start};
    std::vector<char> used(size_t(world), 0);
    used[size_t(start)] = 1;
    if (extend(path, used, world, linked, /*closed=*/false, budget)) return {path, false};
    if (budget < 0) break;
  }
  return {};
}

Result<Plan> build_on_route(const Shape& shape, const Route& route) {
  const std::vector<int>& order = route.order;
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
  const bool cycle = route.cycle || w <= 2;
  Plan p;
  Relabel rl{order, Buf::kTmp, false, std::max<size_t>(shape.count, 1)};
  switch (shape.op) {
    case CollOp::kAllReduce:
      if (cycle) {
        LATTICE_ASSIGN_OR_RETURN(p, build(v, Algorithm::kRing));
      } else {
        p = allreduce_path(v);
      }
      break;
    case CollOp::kAllGather:
      if (cycle) {
        LATTICE_ASSIGN_OR_RETURN(p, build(v, Algorithm::kRing));
      } else {
        p = allgather_path(v);
      }
      rl.remapped = Buf::kOut;
      rl.any = true;
      break;
    case CollOp::kReduceScatter:
      if (cycle) {
        LATTICE_ASSIGN_OR_RETURN(p, build(v, Algorithm::kRing));
      } else {
        p = reduce_scatter_path(v);
      }
      rl.remapped = Buf::kIn;
      rl.any = true;
      break;
    case CollOp::kBroadcast: p = cycle ? broadcast_chain(v) : broadcast_path(v); break;
    case CollOp::kReduce: p = cycle ? reduce_chain(v) : reduce_path(v); break;
    case CollOp::kBarrier: p = cycle ? barrier_ring(v) : barrier_path(v); break;
    case CollOp::kAllToAll:
      return Unavailable("all_to_all needs a link between every pair of ranks (this topology is a partial mesh)");
  }
  LATTICE_RETURN_IF_ERROR(relabel(p, rl));
  p.algo = Algorithm::kRing;
  return p;
}

}  // namespace lattice::coll::plan
