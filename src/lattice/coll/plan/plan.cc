// Plan builders, one small function per (op, algorithm); see plan.h for the model.
#include "lattice/coll/plan/plan.h"

#include <algorithm>
#include <string>

namespace lattice::coll {

std::string_view to_string(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kOneShot: return "oneshot";
    case Algorithm::kRing: return "ring";
    case Algorithm::kRecursive: return "recursive";
    case Algorithm::kTree: return "tree";
    case Algorithm::kTwoShot: return "twoshot";
    case Algorithm::kBidir: return "bidir";
    case Algorithm::kHalving: return "halving";
  }
  return "?";
}

Result<Algorithm> parse_algorithm(std::string_view s) {
  for (Algorithm a : {Algorithm::kAuto, Algorithm::kOneShot, Algorithm::kRing, Algorithm::kRecursive, Algorithm::kTree,
                      Algorithm::kTwoShot, Algorithm::kBidir, Algorithm::kHalving})
    if (to_string(a) == s) return a;
  return InvalidArgument("unknown algorithm '" + std::string(s) +
                         "' (auto, oneshot, twoshot, ring, bidir, recursive, halving, tree)");
}

std::string_view to_string(CollOp op) {
  switch (op) {
    case CollOp::kAllReduce: return "all_reduce";
    case CollOp::kAllGather: return "all_gather";
    case CollOp::kReduceScatter: return "reduce_scatter";
    case CollOp::kBroadcast: return "broadcast";
    case CollOp::kReduce: return "reduce";
    case CollOp::kAllToAll: return "all_to_all";
    case CollOp::kBarrier: return "barrier";
  }
  return "?";
}

Result<CollOp> parse_coll_op(std::string_view s) {
  for (CollOp op : {CollOp::kAllReduce, CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kBroadcast,
                    CollOp::kReduce, CollOp::kAllToAll, CollOp::kBarrier}) {
    std::string name(to_string(op)), dashed = name;
    for (char& c : dashed)
      if (c == '_') c = '-';
    std::string plain;
    for (char c : name)
      if (c != '_') plain += c;
    if (s == name || s == dashed || s == plain) return op;
  }
  return InvalidArgument("unknown collective '" + std::string(s) +
                         "' (all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, barrier)");
}

namespace plan {
namespace {

Ref in(size_t off = 0) { return {Buf::kIn, off}; }
Ref out(size_t off = 0) { return {Buf::kOut, off}; }
Ref tmp(size_t off = 0) { return {Buf::kTmp, off}; }
Local copy(Ref dst, Ref src, size_t n) { return {Local::kCopy, dst, src, {}, n}; }
Local combine(Ref dst, Ref a, Ref b, size_t n) { return {Local::kReduce, dst, a, b, n}; }
int mod(int a, int p) { return ((a % p) + p) % p; }
bool is_pow2(int p) { return p > 0 && (p & (p - 1)) == 0; }
int floor_pow2(int p) {
  int q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

// A step that only computes (used to stage data before the first transfer).
Step local_step(std::vector<Local> after) {
  Step s;
  s.after = std::move(after);
  return s;
}

// dst = src(0) op src(1) op ... op src(p-1), strictly in rank order (bit-identical everywhere).
void ordered_reduce(std::vector<Local>& after, Ref dst, const std::vector<Ref>& src, size_t n) {
  if (src.size() == 1) {
    after.push_back(copy(dst, src[0], n));
    return;
  }
  after.push_back(combine(dst, src[0], src[1], n));
  for (size_t q = 2; q < src.size(); ++q) after.push_back(combine(dst, dst, src[q], n));
}

// ---- all_reduce ----

Plan allreduce_oneshot(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int r = s.rank, w = s.world;
  p.tmp_elems = size_t(w) * n;
  Step st;
  for (int q = 0; q < w; ++q) {
    if (q == r) continue;
    st.sends.push_back({q, in(), n});
    st.recvs.push_back({q, tmp(size_t(q) * n), n});
  }
  if (s.in_place) st.after.push_back(copy(tmp(size_t(r) * n), in(), n));
  std::vector<Ref> src;
  for (int q = 0; q < w; ++q) src.push_back(q == r && !s.in_place ? in() : tmp(size_t(q) * n));
  if (w == 1 && s.in_place) {
    st.after.clear();
  } else {
    ordered_reduce(st.after, out(), src, n);
  }
  p.steps.push_back(std::move(st));
  return p;
}

// Reduce-scatter then all-gather around the ring 0 -> 1 -> ... -> w-1 -> 0, on `buf` split
// into w segments. After the reduce-scatter rank r owns segment r fully reduced.
void ring_reduce_scatter(Plan& p, int r, int w, Ref buf, size_t n, bool block_segments, size_t block) {
  const int right = mod(r + 1, w), left = mod(r - 1, w);
  auto seg = [&](int k) {
    Segment g = block_segments ? Segment{size_t(k) * block, block} : segment(n, w, k);
    return g;
  };
  for (int st = 0; st + 1 < w; ++st) {
    Step step;
    Segment a = seg(mod(r - st - 1, w)), b = seg(mod(r - st - 2, w));
    step.sends.push_back({right, {buf.buf, buf.off + a.begin}, a.size});
    step.recvs.push_back({left, {buf.buf, buf.off + b.begin}, b.size, true});
    step.overlap_prev = true;
    p.steps.push_back(std::move(step));
  }
}

void ring_all_gather(Plan& p, int r, int w, Ref buf, size_t n, bool block_segments, size_t block) {
  const int right = mod(r + 1, w), left = mod(r - 1, w);
  auto seg = [&](int k) { return block_segments ? Segment{size_t(k) * block, block} : segment(n, w, k); };
  for (int st = 0; st + 1 < w; ++st) {
    Step step;
    Segment a = seg(mod(r - st, w)), b = seg(mod(r - st - 1, w));
    step.sends.push_back({right, {buf.buf, buf.off + a.begin}, a.size});
    step.recvs.push_back({left, {buf.buf, buf.off + b.begin}, b.size});
    step.overlap_prev = true;
    p.steps.push_back(std::move(step));
  }
}

Plan allreduce_ring(const Shape& s) {
  Plan p;
  if (!s.in_place) p.steps.push_back(local_step({copy(out(), in(), s.count)}));
  ring_reduce_scatter(p, s.rank, s.world, out(), s.count, false, 0);
  ring_all_gather(p, s.rank, s.world, out(), s.count, false, 0);
  return p;
}

// Worlds that are not a power of two: ranks beyond the largest power of two p2 fold their
// buffer into partner r - p2 first, and get the result back from it at the end.
void fold_extra_ranks(Plan& p, int r, int p2, int extra, size_t n) {
  if (extra == 0) return;
  Step st;
  if (r >= p2) st.sends.push_back({r - p2, out(), n});
  if (r < extra) {
    st.recvs.push_back({r + p2, tmp(), n});
    st.after.push_back(combine(out(), out(), tmp(), n));
  }
  p.steps.push_back(std::move(st));
}

void unfold_extra_ranks(Plan& p, int r, int p2, int extra, size_t n) {
  if (extra == 0) return;
  Step st;
  if (r < extra) st.sends.push_back({r + p2, out(), n});
  if (r >= p2) st.recvs.push_back({r - p2, out(), n});
  p.steps.push_back(std::move(st));
}

Plan allreduce_recursive(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int r = s.rank, w = s.world, p2 = floor_pow2(w), extra = w - p2;
  p.tmp_elems = n;
  if (!s.in_place) p.steps.push_back(local_step({copy(out(), in(), n)}));
  fold_extra_ranks(p, r, p2, extra, n);
  if (r < p2) {
    for (int mask = 1; mask < p2; mask <<= 1) {
      Step st;
      int partner = r ^ mask;
      st.sends.push_back({partner, out(), n});
      st.recvs.push_back({partner, tmp(), n});
      // The lower rank's partial first: both partners compute the same bits.
      st.after.push_back(r < partner ? combine(out(), out(), tmp(), n) : combine(out(), tmp(), out(), n));
      p.steps.push_back(std::move(st));
    }
  }
  unfold_extra_ranks(p, r, p2, extra, n);
  return p;
}


// Two-shot: segment q of everyone's buffer goes straight to rank q, which reduces it in rank
// order (the same bits as one-shot); then rank q sends its reduced segment to everyone.
Plan allreduce_twoshot(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int r = s.rank, w = s.world;
  const Segment mine = segment(n, w, r);
  const size_t sz = mine.size;
  p.tmp_elems = size_t(w) * sz;
  Step rs;
  for (int i = 1; i < w; ++i) {
    const int q = mod(r + i, w), from = mod(r - i, w);
    const Segment g = segment(n, w, q);
    rs.sends.push_back({q, in(g.begin), g.size});
    rs.recvs.push_back({from, tmp(size_t(from) * sz), sz});
  }
  // My own contribution from tmp when in place: out's segment is written by the first combine.
  if (s.in_place) rs.after.push_back(copy(tmp(size_t(r) * sz), in(mine.begin), sz));
  std::vector<Ref> src;
  for (int q = 0; q < w; ++q) src.push_back(q == r && !s.in_place ? in(mine.begin) : tmp(size_t(q) * sz));
  if (!(w == 1 && s.in_place)) ordered_reduce(rs.after, out(mine.begin), src, sz);
  p.steps.push_back(std::move(rs));
  Step ag;
  for (int i = 1; i < w; ++i) {
    const int q = mod(r + i, w), from = mod(r - i, w);
    const Segment g = segment(n, w, from);
    ag.sends.push_back({q, out(mine.begin), sz});
    ag.recvs.push_back({from, out(g.begin), g.size});
  }
  if (!ag.sends.empty()) p.steps.push_back(std::move(ag));
  return p;
}

// One ring pass (reduce-scatter or all-gather) appended to steps[first..]: direction dir (+1:
// send to r + 1, -1: send to r - 1); ring position v = dir > 0 ? r : w - r, so "right" is
// v + 1 either way; seg(k) is the element range of ring segment k. After a reduce-scatter
// pass the rank at position v owns seg(v); an all-gather pass starts from that.
template <class SegFn>
void ring_pass(std::vector<Step>& steps, size_t first, int r, int w, int dir, Ref buf, bool reduce_scatter,
               SegFn seg) {
  const int v = dir > 0 ? r : mod(w - r, w);
  const int right = mod(r + dir, w), left = mod(r - dir, w);
  for (int st = 0; st + 1 < w; ++st) {
    if (steps.size() <= first + size_t(st)) steps.resize(first + size_t(st) + 1);
    Step& step = steps[first + size_t(st)];
    const int ks = reduce_scatter ? mod(v - st - 1, w) : mod(v - st, w);
    const int kr = reduce_scatter ? mod(v - st - 2, w) : mod(v - st - 1, w);
    Segment a = seg(ks), b = seg(kr);
    step.sends.push_back({right, {buf.buf, buf.off + a.begin}, a.size});
    step.recvs.push_back({left, {buf.buf, buf.off + b.begin}, b.size, reduce_scatter});
    step.overlap_prev = true;
  }
}

// Bidirectional ring: the first half of the buffer goes round 0 -> 1 -> ..., the second half
// the other way, in the same steps, so every link carries data both ways at once.
Plan allreduce_bidir(const Shape& s) {
  Plan p;
  const size_t n = s.count, na = n / 2 + n % 2, nb = n - na;
  const int r = s.rank, w = s.world;
  if (!s.in_place) p.steps.push_back(local_step({copy(out(), in(), n)}));
  auto seg_a = [&](int k) { return segment(na, w, k); };
  auto seg_b = [&](int k) {
    Segment g = segment(nb, w, k);
    return Segment{na + g.begin, g.size};
  };
  size_t first = p.steps.size();
  ring_pass(p.steps, first, r, w, +1, out(), true, seg_a);
  ring_pass(p.steps, first, r, w, -1, out(), true, seg_b);
  first = p.steps.size();
  ring_pass(p.steps, first, r, w, +1, out(), false, seg_a);
  ring_pass(p.steps, first, r, w, -1, out(), false, seg_b);
  return p;
}

// Recursive halving over [0, n) between the p2 = 2^k ranks v < p2: at each level the pair
// (v, v ^ mask) splits its current range; the lower rank keeps the lower half. The ranges
// each rank holds, level by level (ranges[0] is the whole buffer).
std::vector<Segment> halving_ranges(int v, int p2, size_t n, bool by_block, size_t block) {
  std::vector<Segment> ranges{{0, by_block ? size_t(p2) : n}};
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    Segment cur = ranges.back();
    size_t lo_size = by_block ? cur.size / 2 : cur.size / 2 + cur.size % 2;
    Segment lower{cur.begin, lo_size}, upper{cur.begin + lo_size, cur.size - lo_size};
    ranges.push_back((v & mask) ? upper : lower);
  }
  if (by_block)
    for (auto& g : ranges) g = {g.begin * block, g.size * block};
  return ranges;
}

// Rabenseifner all-reduce: fold the ranks beyond the largest power of two into their partner,
// reduce-scatter by recursive halving, all-gather by recursive doubling, unfold.
Plan allreduce_halving(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int r = s.rank, w = s.world, p2 = floor_pow2(w), extra = w - p2;
  p.tmp_elems = n;
  if (!s.in_place) p.steps.push_back(local_step({copy(out(), in(), n)}));
  fold_extra_ranks(p, r, p2, extra, n);
  if (r < p2) {
    const std::vector<Segment> ranges = halving_ranges(r, p2, n, false, 0);
    int level = 1;
    for (int mask = p2 / 2; mask >= 1; mask /= 2, ++level) {
      const int partner = r ^ mask;
      const Segment prev = ranges[size_t(level - 1)], keep = ranges[size_t(level)];
      const Segment give = keep.begin == prev.begin ? Segment{prev.begin + keep.size, prev.size - keep.size}
                                                    : Segment{prev.begin, prev.size - keep.size};
      Step st;
      st.sends.push_back({partner, out(give.begin), give.size});
      st.recvs.push_back({partner, tmp(keep.begin), keep.size});
      // The lower rank's partial first: a fixed order.
      st.after.push_back(r < partner ? combine(out(keep.begin), out(keep.begin), tmp(keep.begin), keep.size)
                                     : combine(out(keep.begin), tmp(keep.begin), out(keep.begin), keep.size));
      p.steps.push_back(std::move(st));
    }
    for (int mask = 1; mask < p2; mask *= 2) {
      --level;
      const int partner = r ^ mask;
      const Segment mine = ranges[size_t(level)];
      const Segment theirs = halving_ranges(partner, p2, n, false, 0)[size_t(level)];
      Step st;
      st.sends.push_back({partner, out(mine.begin), mine.size});
      st.recvs.push_back({partner, out(theirs.begin), theirs.size});
      p.steps.push_back(std::move(st));
    }
  }
  unfold_extra_ranks(p, r, p2, extra, n);
  return p;
}

// ---- all_gather: count elements per rank, out holds world * count ----

Plan allgather_oneshot(const Shape& s) {
  Plan p;
  const size_t c = s.count;
  Step st;
  for (int q = 0; q < s.world; ++q) {
    if (q == s.rank) continue;
    st.sends.push_back({q, s.in_place ? out(size_t(s.rank) * c) : in(), c});
    st.recvs.push_back({q, out(size_t(q) * c), c});
  }
  if (!s.in_place) st.after.push_back(copy(out(size_t(s.rank) * c), in(), c));
  p.steps.push_back(std::move(st));
  return p;
}

Plan allgather_ring(const Shape& s) {
  Plan p;
  const size_t c = s.count;
  if (!s.in_place) p.steps.push_back(local_step({copy(out(size_t(s.rank) * c), in(), c)}));
  ring_all_gather(p, s.rank, s.world, out(), c * s.world, true, c);
  return p;
}

Plan allgather_recursive(const Shape& s) {
  Plan p;
  const size_t c = s.count;
  const int r = s.rank;
  if (!s.in_place) p.steps.push_back(local_step({copy(out(size_t(r) * c), in(), c)}));
  for (int mask = 1; mask < s.world; mask <<= 1) {
    Step st;
    int partner = r ^ mask;
    size_t mine = size_t(r & ~(mask - 1)) * c, theirs = size_t(partner & ~(mask - 1)) * c;
    st.sends.push_back({partner, out(mine), size_t(mask) * c});
    st.recvs.push_back({partner, out(theirs), size_t(mask) * c});
    p.steps.push_back(std::move(st));
  }
  return p;
}


Plan allgather_bidir(const Shape& s) {
  Plan p;
  const size_t c = s.count, ca = c / 2 + c % 2;
  const int r = s.rank, w = s.world;
  if (!s.in_place) p.steps.push_back(local_step({copy(out(size_t(r) * c), in(), c)}));
  auto seg_a = [&](int k) { return Segment{size_t(k) * c, ca}; };
  auto seg_b = [&](int k) { return Segment{size_t(mod(w - k, w)) * c + ca, c - ca}; };
  const size_t first = p.steps.size();
  ring_pass(p.steps, first, r, w, +1, out(), false, seg_a);
  ring_pass(p.steps, first, r, w, -1, out(), false, seg_b);
  return p;
}

// ---- reduce_scatter: in holds world * count, out receives this rank's block ----

Plan reduce_scatter_oneshot(const Shape& s) {
  Plan p;
  const size_t c = s.count;
  const int r = s.rank, w = s.world;
  p.tmp_elems = size_t(w) * c;
  Step st;
  for (int q = 0; q < w; ++q) {
    if (q == r) continue;
    st.sends.push_back({q, in(size_t(q) * c), c});
    st.recvs.push_back({q, tmp(size_t(q) * c), c});
  }
  st.after.push_back(copy(tmp(size_t(r) * c), in(size_t(r) * c), c));
  std::vector<Ref> src;
  for (int q = 0; q < w; ++q) src.push_back(tmp(size_t(q) * c));
  ordered_reduce(st.after, out(), src, c);
  p.steps.push_back(std::move(st));
  return p;
}

Plan reduce_scatter_ring(const Shape& s) {
  Plan p;
  const size_t c = s.count, n = c * s.world;
  p.tmp_elems = n;
  p.steps.push_back(local_step({copy(tmp(), in(), n)}));
  // Blocks in the ring order that leaves rank r owning block r.
  ring_reduce_scatter(p, s.rank, s.world, tmp(), n, true, c);
  p.steps.push_back(local_step({copy(out(), tmp(size_t(s.rank) * c), c)}));
  return p;
}


// Recursive halving over blocks (power-of-two worlds): the lower rank of each pair keeps the
// lower half of the blocks, so rank r ends with block r.
Plan reduce_scatter_halving(const Shape& s) {
  Plan p;
  const size_t c = s.count, n = c * size_t(s.world);
  const int r = s.rank, w = s.world;
  p.tmp_elems = 2 * n;  // [0, n): the partial; [n, 2n): received halves
  p.steps.push_back(local_step({copy(tmp(), in(), n)}));
  const std::vector<Segment> ranges = halving_ranges(r, w, n, true, c);
  int level = 1;
  for (int mask = w / 2; mask >= 1; mask /= 2, ++level) {
    const int partner = r ^ mask;
    const Segment prev = ranges[size_t(level - 1)], keep = ranges[size_t(level)];
    const Segment give = keep.begin == prev.begin ? Segment{prev.begin + keep.size, prev.size - keep.size}
                                                  : Segment{prev.begin, prev.size - keep.size};
    Step st;
    st.sends.push_back({partner, tmp(give.begin), give.size});
    st.recvs.push_back({partner, tmp(n + keep.begin), keep.size});
    st.after.push_back(r < partner ? combine(tmp(keep.begin), tmp(keep.begin), tmp(n + keep.begin), keep.size)
                                   : combine(tmp(keep.begin), tmp(n + keep.begin), tmp(keep.begin), keep.size));
    p.steps.push_back(std::move(st));
  }
  p.steps.push_back(local_step({copy(out(), tmp(size_t(r) * c), c)}));
  return p;
}

// Bidirectional ring over blocks: the first half of every block goes one way, the rest the
// other; ring position v owns block r in both directions (seg maps positions to blocks).
Plan reduce_scatter_bidir(const Shape& s) {
  Plan p;
  const size_t c = s.count, n = c * size_t(s.world), ca = c / 2 + c % 2;
  const int r = s.rank, w = s.world;
  p.tmp_elems = n;
  p.steps.push_back(local_step({copy(tmp(), in(), n)}));
  auto seg_a = [&](int k) { return Segment{size_t(k) * c, ca}; };
  auto seg_b = [&](int k) { return Segment{size_t(mod(w - k, w)) * c + ca, c - ca}; };
  const size_t first = p.steps.size();
  ring_pass(p.steps, first, r, w, +1, tmp(), true, seg_a);
  ring_pass(p.steps, first, r, w, -1, tmp(), true, seg_b);
  p.steps.push_back(local_step({copy(out(), tmp(size_t(r) * c), c)}));
  return p;
}

// ---- broadcast: root's in (or out when in place) to everyone's out ----

Plan broadcast_oneshot(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  if (s.rank == s.root) {
    if (!s.in_place) p.steps.push_back(local_step({copy(out(), in(), n)}));
    Step st;
    for (int q = 0; q < s.world; ++q)
      if (q != s.root) st.sends.push_back({q, out(), n});
    p.steps.push_back(std::move(st));
  } else {
    Step st;
    st.recvs.push_back({s.root, out(), n});
    p.steps.push_back(std::move(st));
  }
  return p;
}

Plan broadcast_tree(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int w = s.world, vr = mod(s.rank - s.root, w);
  if (vr == 0 && !s.in_place) p.steps.push_back(local_step({copy(out(), in(), n)}));
  for (int k = 1; k < w; k <<= 1) {
    Step st;
    if (vr < k && vr + k < w) st.sends.push_back({mod(vr + k + s.root, w), out(), n});
    else if (vr >= k && vr < 2 * k) st.recvs.push_back({mod(vr - k + s.root, w), out(), n});
    if (!st.sends.empty() || !st.recvs.empty()) p.steps.push_back(std::move(st));
  }
  return p;
}

// ---- reduce: everyone's in, reduced, into root's out ----

Plan reduce_oneshot(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int r = s.rank, w = s.world;
  if (r != s.root) {
    Step st;
    st.sends.push_back({s.root, in(), n});
    p.steps.push_back(std::move(st));
    return p;
  }
  p.tmp_elems = size_t(w) * n;
  Step st;
  for (int q = 0; q < w; ++q)
    if (q != r) st.recvs.push_back({q, tmp(size_t(q) * n), n});
  st.after.push_back(copy(tmp(size_t(r) * n), in(), n));
  std::vector<Ref> src;
  for (int q = 0; q < w; ++q) src.push_back(tmp(size_t(q) * n));
  ordered_reduce(st.after, out(), src, n);
  p.steps.push_back(std::move(st));
  return p;
}

Plan reduce_tree(const Shape& s) {
  Plan p;
  const size_t n = s.count;
  const int w = s.world, vr = mod(s.rank - s.root, w);
  p.tmp_elems = 2 * n;  // [0, n): this rank's partial; [n, 2n): a child's partial
  p.steps.push_back(local_step({copy(tmp(), in(), n)}));
  for (int k = 1; k < w; k <<= 1) {
    Step st;
    if (vr % (2 * k) == k) {
      st.sends.push_back({mod(vr - k + s.root, w), tmp(), n});
      p.steps.push_back(std::move(st));
      break;  // handed its partial up: done
    }
    if (vr % (2 * k) == 0 && vr + k < w) {
      st.recvs.push_back({mod(vr + k + s.root, w), tmp(n), n});
      st.after.push_back(combine(tmp(), tmp(), tmp(n), n));
      p.steps.push_back(std::move(st));
    }
  }
  if (vr == 0) p.steps.push_back(local_step({copy(out(), tmp(), n)}));
  return p;
}

// ---- all_to_all: block q of in goes to rank q, block q of out comes from rank q ----

Plan alltoall_oneshot(const Shape& s) {
  Plan p;
  const size_t c = s.count;
  const int r = s.rank, w = s.world;
  Ref src = in();
  if (s.in_place) {
    p.tmp_elems = size_t(w) * c;
    p.steps.push_back(local_step({copy(tmp(), in(), size_t(w) * c)}));
    src = tmp();
  }
  Step st;
  // Start with the next rank so that not everyone sends to rank 0 first.
  for (int i = 1; i < w; ++i) {
    int q = mod(r + i, w), from = mod(r - i, w);
    st.sends.push_back({q, {src.buf, src.off + size_t(q) * c}, c});
    st.recvs.push_back({from, out(size_t(from) * c), c});
  }
  if (!s.in_place) st.after.push_back(copy(out(size_t(r) * c), {src.buf, src.off + size_t(r) * c}, c));
  p.steps.push_back(std::move(st));
  return p;
}

// ---- barrier: dissemination, one element per message, in tmp ----

Plan barrier_dissemination(const Shape& s) {
  Plan p;
  p.tmp_elems = 2;
  for (int k = 1; k < s.world; k <<= 1) {
    Step st;
    st.sends.push_back({mod(s.rank + k, s.world), tmp(0), 1});
    st.recvs.push_back({mod(s.rank - k, s.world), tmp(1), 1});
    p.steps.push_back(std::move(st));
  }
  return p;
}

}  // namespace

Segment segment(size_t n, int parts, int k) {
  size_t base = n / size_t(parts), rem = n % size_t(parts);
  size_t kk = size_t(k);
  return {kk * base + std::min(kk, rem), base + (kk < rem ? 1 : 0)};
}

std::vector<Algorithm> algorithms_for(CollOp op) {
  switch (op) {
    case CollOp::kAllReduce:
      return {Algorithm::kOneShot, Algorithm::kTwoShot, Algorithm::kRing, Algorithm::kBidir, Algorithm::kRecursive,
              Algorithm::kHalving};
    case CollOp::kAllGather:
      return {Algorithm::kOneShot, Algorithm::kTwoShot, Algorithm::kRing, Algorithm::kBidir, Algorithm::kRecursive};
    case CollOp::kReduceScatter:
      return {Algorithm::kOneShot, Algorithm::kTwoShot, Algorithm::kRing, Algorithm::kBidir, Algorithm::kHalving};
    case CollOp::kBroadcast: return {Algorithm::kOneShot, Algorithm::kTree};
    case CollOp::kReduce: return {Algorithm::kOneShot, Algorithm::kTree};
    case CollOp::kAllToAll: return {Algorithm::kOneShot};
    case CollOp::kBarrier: return {Algorithm::kRecursive};
  }
  return {};
}

bool implements(CollOp op, Algorithm algo, int world) {
  auto algs = algorithms_for(op);
  if (std::find(algs.begin(), algs.end(), algo) == algs.end()) return false;
  if (!is_pow2(world) && ((op == CollOp::kAllGather && algo == Algorithm::kRecursive) ||
                          (op == CollOp::kReduceScatter && algo == Algorithm::kHalving)))
    return false;
  return true;
}

Algorithm choose_algorithm(CollOp op, size_t bytes, int world, bool rma_write) {
  switch (op) {
    case CollOp::kAllReduce:
      // Measured over shm with peers' zones mapped (2 cores, bench/coll_vs_mpi.sh,
      // docs/BENCHMARKS.md): the one-sided one-shot wins up to 8 KiB at 4 ranks (9.8 vs 13.6 us
      // at 8 KiB) and ties there at 2; from 16 KiB to 16 MiB the one-sided two-shot wins (4
      // ranks: 13.2 vs 15.1 us at 16 KiB) against one-shot, ring, bidir and halving.
      if (rma_write) return bytes <= 8 * 1024 ? Algorithm::kOneShot : Algorithm::kTwoShot;
      // Two-sided (tcp, emulated verbs): one round while the data is small (at 2 ranks one-shot
      // and two-shot move the same bytes, one-shot in one round); beyond, the two-round
      // two-shot plan: at 4 ranks over tcp loopback (2 cores, load ~6, 3 alternating runs) it
      // was faster than the ring in 3 of 3 runs at 4 MiB and at or near the best of ring,
      // bidir and halving from 16 KiB to 1 MiB, where one-shot was 3-10x slower.
      // Small buffers on 4+ ranks: recursive doubling, log2(w) rounds of one message each
      // instead of w - 1 messages at once; over tcp every message costs syscalls and wake-ups
      // (4 ranks, tcp loopback, plaintext, 2 alternating runs: 47-58 us vs 62-70 us one-shot
      // from 8 B to 2 KiB, 52-78 vs 102-105 us at 16 KiB; two-shot wins again from 32 KiB).
      // Mid-size on power-of-two worlds: recursive halving then doubling, the same bytes as
      // two-shot in log2(w) rounds of one peer each instead of w - 1 peers at once (4 ranks,
      // tcp loopback, plaintext, direct lanes, 2 alternating runs: 74-79 vs 104-105 us at
      // 32 KiB, 145-160 vs 181-188 at 128 KiB, 667-710 vs 751-1014 at 512 KiB; from 1 MiB
      // two-shot's concurrent flows win: 1.2-1.4 vs 1.5-1.7 ms, at 2 MiB 2.5-2.9 vs 4.1-5.0).
      if (world <= 2) return bytes <= 256 * 1024 ? Algorithm::kOneShot : Algorithm::kTwoShot;
      if (bytes <= 16 * 1024) return world >= 4 ? Algorithm::kRecursive : Algorithm::kOneShot;
      if (bytes <= 512 * 1024 && (world & (world - 1)) == 0) return Algorithm::kHalving;
      return Algorithm::kTwoShot;
    case CollOp::kAllGather:
    case CollOp::kReduceScatter:
      // One-sided halves of the two-shot: at 4 ranks over shm best or tied with one-shot and
      // the ring from 1 KiB to 16 MiB (the whole buffer; noisy, docs/BENCHMARKS.md).
      if (rma_write) return Algorithm::kTwoShot;
      return bytes * size_t(world) <= 256 * 1024 ? Algorithm::kOneShot : Algorithm::kRing;
    case CollOp::kBroadcast:
    case CollOp::kReduce:
      return world <= 3 || bytes <= 4096 ? Algorithm::kOneShot : Algorithm::kTree;
    case CollOp::kAllToAll: return Algorithm::kOneShot;
    case CollOp::kBarrier: return Algorithm::kRecursive;
  }
  return Algorithm::kOneShot;
}

Extents extents(const Plan& p) {
  Extents e;
  auto see = [&](Ref r, size_t n) {
    if (n) e.of[size_t(r.buf)] = std::max(e.of[size_t(r.buf)], r.off + n);
  };
  for (const Step& st : p.steps) {
    for (const auto* list : {&st.sends, &st.recvs})
      for (const Transfer& t : *list) see(t.ref, t.n);
    for (const Local& l : st.after) {
      see(l.dst, l.n);
      see(l.a, l.n);
      if (l.kind == Local::kReduce) see(l.b, l.n);
    }
  }
  return e;
}

Result<Plan> build(const Shape& s, Algorithm algo) {
  if (s.world < 1 || s.rank < 0 || s.rank >= s.world) return InvalidArgument("plan: rank out of range");
  if (s.root < 0 || s.root >= s.world) return InvalidArgument("plan: root " + std::to_string(s.root) + " out of range");
  auto unsupported = [&] {
    return InvalidArgument("algorithm " + std::string(to_string(algo)) + " does not implement " +
                           std::string(to_string(s.op)));
  };
  Plan p;
  switch (s.op) {
    case CollOp::kAllReduce:
      if (algo == Algorithm::kOneShot) p = allreduce_oneshot(s);
      else if (algo == Algorithm::kTwoShot) p = allreduce_twoshot(s);
      else if (algo == Algorithm::kRing) p = allreduce_ring(s);
      else if (algo == Algorithm::kBidir) p = allreduce_bidir(s);
      else if (algo == Algorithm::kRecursive) p = allreduce_recursive(s);
      else if (algo == Algorithm::kHalving) p = allreduce_halving(s);
      else return unsupported();
      break;
    case CollOp::kAllGather:
      if (algo == Algorithm::kOneShot) p = allgather_oneshot(s);
      else if (algo == Algorithm::kRing) p = allgather_ring(s);
      else if (algo == Algorithm::kBidir) p = allgather_bidir(s);
      // Two-shot's all-gather half: straight from each owner, one round (one-sided on
      // passive-write groups: Communicator::twoshot).
      else if (algo == Algorithm::kTwoShot) p = allgather_oneshot(s);
      else if (algo == Algorithm::kRecursive) {
        if (!is_pow2(s.world)) return InvalidArgument("recursive all_gather needs a power-of-two world size");
        p = allgather_recursive(s);
      } else return unsupported();
      break;
    case CollOp::kReduceScatter:
      if (algo == Algorithm::kOneShot) p = reduce_scatter_oneshot(s);
      else if (algo == Algorithm::kRing) p = reduce_scatter_ring(s);
      else if (algo == Algorithm::kBidir) p = reduce_scatter_bidir(s);
      else if (algo == Algorithm::kTwoShot) p = reduce_scatter_oneshot(s);  // two-shot's first half
      else if (algo == Algorithm::kHalving) {
        if (!is_pow2(s.world)) return InvalidArgument("halving reduce_scatter needs a power-of-two world size");
        p = reduce_scatter_halving(s);
      } else return unsupported();
      break;
    case CollOp::kBroadcast:
      if (algo == Algorithm::kOneShot) p = broadcast_oneshot(s);
      else if (algo == Algorithm::kTree) p = broadcast_tree(s);
      else return unsupported();
      break;
    case CollOp::kReduce:
      if (algo == Algorithm::kOneShot) p = reduce_oneshot(s);
      else if (algo == Algorithm::kTree) p = reduce_tree(s);
      else return unsupported();
      break;
    case CollOp::kAllToAll:
      if (algo == Algorithm::kOneShot) p = alltoall_oneshot(s);
      else return unsupported();
      break;
    case CollOp::kBarrier:
      if (algo == Algorithm::kRecursive) p = barrier_dissemination(s);
      else return unsupported();
      break;
  }
  p.algo = algo;
  return p;
}

}  // namespace plan
}  // namespace lattice::coll
