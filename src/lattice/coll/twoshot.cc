// The one-sided two-shot all-reduce (CommOptions::twoshot_chunk_bytes), for providers whose
// writes land without the target's CPU (ProviderCaps::rma_write_passive: shm, RDMA NICs).
// Its first half alone is the one-sided reduce_scatter, its second half the all_gather.
//
// Rank r owns segment r of the buffer (plan::segment). Each segment moves in chunks:
//   reduce-scatter  r writes chunk j of its segment q into rank q's RS slot for r, then a flag;
//   reduce          once every peer's chunk j of segment r landed, r combines them IN RANK ORDER
//                   (its own from its input) into a result slot: the same bits as every other
//                   all-reduce here, on every rank;
//   all-gather      r writes the result chunk into every peer's AG slot for r, then a flag, and
//                   copies it into its output; peers copy AG slots into their outputs.
// Copies per byte: the provider copies my input straight into the owner's landing slot (shm:
// a memcpy at post time; the caller's buffers are registered for the call, else the input is
// staged through a registered source slot first), the owner reduces straight from the
// landing slots into its output, and the all-gather is one write from the output plus one
// copy out at each peer: 3.5 passes over the buffer at 4 ranks where the two-sided ring makes
// 5.5 (copy in, then per step a copy into a slot, the provider's slot-to-slot copy and a copy
// or reduce out).
//
// Bounded zones: every (writer, reader, phase) has `depth` slots used round-robin by a chunk
// counter both ends keep in step over the communicator's life; a flag word per slot carries
// counter + 1 (so a stale flag from `depth` chunks ago never matches), and the reader writes
// back how many chunks it consumed (the writer's credit). A writer never has more than `depth`
// chunks unread at a reader. All progress is made by one loop that never blocks on a single
// peer, so the phases cannot wait on each other in a cycle.
//
// Failure: the loop checks the deadline and every link's sticky status every 1024 idle rounds
// and reaps write completions (a failed write names its peer), so a lost peer fails the call
// on every survivor, like the other paths; the communicator is then sticky-failed.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "lattice/coll/comm.h"
#include "lattice/coll/comm_internal.h"

namespace lattice::coll {

using detail::decode;
using detail::kSeqMask;
using detail::work_id;
using fabric::Completion;
using fabric::LocalSlice;
using fabric::RemoteSlice;

namespace {

// Offsets inside the two-shot area (relative to its start). W ranks, D slots, C bytes a slot;
// k is a lifetime chunk counter (its slot is k % D).
struct Layout {
  size_t C, D, W;
  size_t rs_zone(int p, uint64_t k) const { return (size_t(p) * D + k % D) * C; }
  size_t ag_zone(int p, uint64_t k) const { return W * D * C + (size_t(p) * D + k % D) * C; }
  size_t src(int q, uint64_t k) const { return 2 * W * D * C + (size_t(q) * D + k % D) * C; }
  size_t res(uint64_t k) const { return 3 * W * D * C + (k % D) * C; }
  // Words, each on its own cache line.
  size_t line(size_t i) const { return (3 * W + 1) * D * C + i * 64; }
  size_t rs_flag(int p, uint64_t k) const { return line(size_t(p) * D + k % D); }
  size_t ag_flag(int p, uint64_t k) const { return line(W * D + size_t(p) * D + k % D); }
  size_t rs_ack(int q) const { return line(2 * W * D + size_t(q)); }  // written by reader q
  size_t ag_ack(int q) const { return line(2 * W * D + W + size_t(q)); }
  size_t rs_flag_src(int q, uint64_t k) const { return line(2 * W * D + 2 * W + size_t(q) * D + k % D); }
  size_t ag_flag_src(int q, uint64_t k) const { return line(3 * W * D + 2 * W + size_t(q) * D + k % D); }
  size_t rs_ack_src(int p) const { return line(4 * W * D + 2 * W + size_t(p)); }
  size_t ag_ack_src(int p) const { return line(4 * W * D + 3 * W + size_t(p)); }
  size_t bytes() const { return line(4 * W * D + 4 * W); }
};

uint64_t load_word(const std::byte* p) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<std::byte*>(p)))
      .load(std::memory_order_acquire);
}
void store_word(std::byte* p, uint64_t v) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p)).store(v, std::memory_order_release);
}

}  // namespace

size_t Communicator::twoshot_area_bytes() {
  ts_rs_sent_.assign(size_t(world_), 0);
  ts_ag_recv_.assign(size_t(world_), 0);
  ts_rs_recv_ = ts_ag_sent_ = 0;
  if (options_.twoshot_chunk_bytes == 0) {
    ts_chunk_ = 0;
    ts_depth_ = 0;
    return 0;
  }
  ts_chunk_ = std::max<size_t>(64, (options_.twoshot_chunk_bytes + 63) / 64 * 64);
  ts_depth_ = std::clamp(options_.twoshot_depth, 1, 64);
  return Layout{ts_chunk_, size_t(ts_depth_), size_t(world_)}.bytes();
}

// post_write, retried while the send queue is full (reaping completions meanwhile).
Status Communicator::post_write_retry(int peer, LocalSlice src, RemoteSlice dst, fabric::WorkId id, Deadline deadline,
                                      size_t* done) {
  fabric::Endpoint* ep = peers_[size_t(peer)].ep;
  for (;;) {
    Status s = ep->post_write(src, dst, id);
    if (s.ok()) return s;
    // The peer's landing zone is gone (kAccessDenied: its key no longer exists) only when its
    // communicator went away mid-collective: it left, as a lost peer does.
    if (s.code() == ErrorCode::kPeerLost || s.code() == ErrorCode::kAccessDenied)
      return PeerLost("coll: rank " + std::to_string(peer) + " lost: " + s.message(), peer);
    if (s.code() != ErrorCode::kResourceExhausted)
      return s.with_context("coll: write to rank " + std::to_string(peer));
    LATTICE_RETURN_IF_ERROR(reap_writes(done));
    if (deadline.expired()) return Timeout("coll: write queue to rank " + std::to_string(peer) + " stayed full", peer);
  }
}

Status Communicator::twoshot(CollOp op, const void* in_v, void* out_v, size_t count, DType dtype, ReduceOp rop,
                             size_t chunk_bytes, Deadline deadline) {
  LATTICE_RETURN_IF_ERROR(rma_begin(deadline));
  if (ts_chunk_ == 0) return Internal("coll: two-shot disabled on this communicator");
  if (op != CollOp::kAllReduce && op != CollOp::kReduceScatter && op != CollOp::kAllGather)
    return Internal("coll: no one-sided two-shot " + std::string(to_string(op)));
  // all_reduce: in[count] -> out[count], segment q = plan::segment(count, w, q).
  // reduce_scatter: in[w * count] -> out[count], segment q = block q of in (no all-gather).
  // all_gather: in[count] -> out[w * count], segment q = block q of out (no reduce-scatter).
  const bool rs_phase = op != CollOp::kAllGather, ag_phase = op != CollOp::kReduceScatter;
  const size_t esize = dtype_size(dtype);
  const auto* in = static_cast<const std::byte*>(in_v);
  auto* out = static_cast<std::byte*>(out_v);
  if (count == 0) return Status::Ok();
  const int r = rank(), w = world_;
  const size_t in_bytes = (op == CollOp::kReduceScatter ? size_t(w) : 1) * count * esize;
  const size_t out_bytes = (op == CollOp::kAllGather ? size_t(w) : 1) * count * esize;
  // Where segment r's element e (segment coordinates) sits in `out`, and (all_gather) in `in`.
  const size_t my_base = op == CollOp::kAllReduce ? 0 : size_t(r) * count;
  auto out_at = [&](size_t e) { return out + (op == CollOp::kReduceScatter ? e - my_base : e) * esize; };
  if (w == 1) {
    if (in != out) std::memmove(out, in, count * esize);
    return Status::Ok();
  }
  seq_ = (seq_ + 1) & kSeqMask;
  const Layout L{ts_chunk_, size_t(ts_depth_), size_t(w)};
  const uint64_t D = uint64_t(ts_depth_);
  size_t cb = chunk_bytes == 0 ? ts_chunk_ : std::min(chunk_bytes, ts_chunk_);
  const size_t ce = std::max<size_t>(1, cb / esize);  // elements per chunk
  std::byte* base = landing_->data() + ts_off_;
  fabric::MemoryRegion* reg = landing_.get();
  // Writes straight from the caller's buffers when the provider registers them (shm: a table
  // entry, no copy): the input is not staged, and out of place the owner reduces straight
  // into `out` (and all_reduce writes from there). When out overlaps in, the reduce goes
  // through a result slot (it must read the rank's own contribution before overwriting it).
  // Without registration, stage through the source and result slots.
  const auto in_addr = reinterpret_cast<uintptr_t>(in), out_addr = reinterpret_cast<uintptr_t>(out);
  const bool overlap = out_addr < in_addr + in_bytes && in_addr < out_addr + out_bytes;
  // Peers' areas mapped (stores_to_peers): every transfer is a plain copy into the peer's
  // area, a flag a release store; nothing to register, post or reap.
  const bool mapped = !peer_maps_.empty();
  fabric::Provider* prov = group_->links(r == 0 ? 1 : 0).front().provider;
  std::unique_ptr<fabric::MemoryRegion> in_reg, out_reg;
  if (!mapped) {
    if (auto ri = prov->register_memory(const_cast<std::byte*>(in), in_bytes, fabric::kLocalRead); ri.ok())
      in_reg = std::move(ri).value();
    if (op == CollOp::kAllReduce && !overlap && in_reg) {
      if (auto ro = prov->register_memory(out, out_bytes, fabric::kLocalRead | fabric::kLocalWrite); ro.ok())
        out_reg = std::move(ro).value();
    }
  }
  const bool direct_in = mapped || in_reg != nullptr;
  // all_reduce: reduce into out and write from there; reduce_scatter: reduce into out.
  const bool reduce_direct = op == CollOp::kAllReduce ? (mapped ? !overlap : out_reg != nullptr) : !overlap;

  // Segments and their chunk counts.
  std::vector<plan::Segment> seg(static_cast<size_t>(w));
  std::vector<size_t> m(static_cast<size_t>(w));
  for (int q = 0; q < w; ++q) {
    seg[size_t(q)] = op == CollOp::kAllReduce ? plan::segment(count, w, q) : plan::Segment{size_t(q) * count, count};
    m[size_t(q)] = (seg[size_t(q)].size + ce - 1) / ce;
  }
  auto chunk = [&](int q, size_t j, size_t* begin) {
    *begin = seg[size_t(q)].begin + j * ce;
    return std::min(ce, seg[size_t(q)].size - j * ce);
  };
  std::vector<size_t> rs_next(static_cast<size_t>(w), 0), ag_next(static_cast<size_t>(w), 0);
  size_t jr = 0;
  size_t posted = 0, done = 0;
  auto reap = [&] { return reap_writes(&done); };
  auto write_from = [&](int q, fabric::MemoryRegion* from, size_t src_off, size_t dst_off, size_t bytes) -> Status {
    ++posted;
    return post_write_retry(q, LocalSlice{from, src_off, bytes},
                            RemoteSlice{peer_keys_[size_t(q)], ts_off_ + dst_off, bytes}, work_id(seq_, q, false, 0),
                            deadline, &done);
  };
  auto write = [&](int q, size_t src_off, size_t dst_off, size_t bytes) {
    return write_from(q, reg, ts_off_ + src_off, dst_off, bytes);
  };
  // `bytes` from `src` (region `from` at `src_off` when posted) into q's area at `dst_off`.
  auto put = [&](int q, const std::byte* src, fabric::MemoryRegion* from, size_t src_off, size_t dst_off,
                 size_t bytes) -> Status {
    if (!mapped) return write_from(q, from, src_off, dst_off, bytes);
    std::memcpy(peer_maps_[size_t(q)]->data() + ts_off_ + dst_off, src, bytes);
    peer_maps_[size_t(q)]->count_stored(bytes);  // no endpoint sees a store
    return Status::Ok();
  };
  // A flag or credit word into q's area at `dst_off`, ordered after the puts before it (posted:
  // staged in my word at `src_off`; writes on one link land in order).
  auto put_word = [&](int q, size_t src_off, size_t dst_off, uint64_t v) -> Status {
    if (mapped) {
      store_word(peer_maps_[size_t(q)]->data() + ts_off_ + dst_off, v);
      return Status::Ok();
    }
    store_word(base + src_off, v);
    return write(q, src_off, dst_off, 8);
  };
  std::vector<const std::byte*> src(static_cast<size_t>(w));
  uint32_t idle = 0;
  for (;;) {
    bool progressed = false, finished = true;
    // 1. Reduce-scatter: my chunks of segment q into rank q's slots, while q has room.
    for (int i = 1; i < w && rs_phase; ++i) {
      const int q = (r + i) % w;
      while (rs_next[size_t(q)] < m[size_t(q)]) {
        const uint64_t k = ts_rs_sent_[size_t(q)];
        if (k - load_word(base + L.rs_ack(q)) >= D) break;
        size_t b;
        const size_t n = chunk(q, rs_next[size_t(q)], &b);
        Status s;
        if (direct_in) {
          s = put(q, in + b * esize, in_reg.get(), b * esize, L.rs_zone(r, k), n * esize);
        } else {
          std::memcpy(base + L.src(q, k), in + b * esize, n * esize);
          s = write(q, L.src(q, k), L.rs_zone(r, k), n * esize);
        }
        if (s.ok()) s = put_word(q, L.rs_flag_src(q, k), L.rs_flag(r, k), k + 1);  // after the data
        if (!s.ok()) return fail(s);
        ++ts_rs_sent_[size_t(q)];
        ++rs_next[size_t(q)];
        progressed = true;
      }
      if (rs_next[size_t(q)] < m[size_t(q)]) finished = false;
    }
    // 2. My segment's next chunks: once every contribution landed (reduce-scatter) and every
    // peer has an all-gather slot free, reduce in rank order (all_gather: take my input), then
    // hand the result to everyone.
    while (jr < m[size_t(r)]) {
      const uint64_t k = ts_rs_recv_, ka = ts_ag_sent_;
      bool ready = true;
      for (int p = 0; p < w && ready; ++p) {
        if (p == r) continue;
        if (rs_phase) ready = load_word(base + L.rs_flag(p, k)) == k + 1;
        if (ready && ag_phase) ready = ka - load_word(base + L.ag_ack(p)) < D;
      }
      if (!ready) break;
      size_t b;
      const size_t n = chunk(r, jr, &b);
      const std::byte* res;  // this chunk's result
      fabric::MemoryRegion* res_reg = reg;
      size_t res_off = ts_off_ + L.res(ka);
      if (rs_phase) {
        for (int q = 0; q < w; ++q) src[size_t(q)] = q == r ? in + b * esize : base + L.rs_zone(q, k);
        std::byte* dst = reduce_direct ? out_at(b) : base + L.res(ka);
        reduce_ordered(dtype, rop, dst, reinterpret_cast<const void* const*>(src.data()), size_t(w), n);
        if (reduce_direct) {
          res_reg = out_reg.get();
          res_off = b * esize;
        } else {
          std::memcpy(out_at(b), dst, n * esize);
        }
        res = dst;
        ++ts_rs_recv_;
      } else {
        // all_gather: my block, from my input.
        const std::byte* mine = in + (b - my_base) * esize;
        if (direct_in) {
          res_reg = in_reg.get();
          res_off = (b - my_base) * esize;
        } else {
          std::memcpy(base + L.res(ka), mine, n * esize);
        }
        if (out_at(b) != mine) std::memmove(out_at(b), mine, n * esize);
        res = mine;
      }
      for (int i = 1; i < w; ++i) {
        const int q = (r + i) % w;
        Status s;
        if (rs_phase) s = put_word(q, L.rs_ack_src(q), L.rs_ack(r), ts_rs_recv_);  // the RS slot is free again
        if (s.ok() && ag_phase) s = put(q, res, res_reg, res_off, L.ag_zone(r, ka), n * esize);
        if (s.ok() && ag_phase) s = put_word(q, L.ag_flag_src(q, ka), L.ag_flag(r, ka), ka + 1);
        if (!s.ok()) return fail(s);
      }
      if (ag_phase) ++ts_ag_sent_;
      ++jr;
      progressed = true;
    }
    if (jr < m[size_t(r)]) finished = false;
    // 3. All-gather: copy landed result chunks out, and give their slots back.
    for (int i = 1; i < w && ag_phase; ++i) {
      const int p = (r - i + w) % w;
      while (ag_next[size_t(p)] < m[size_t(p)]) {
        const uint64_t k = ts_ag_recv_[size_t(p)];
        if (load_word(base + L.ag_flag(p, k)) != k + 1) break;
        size_t b;
        const size_t n = chunk(p, ag_next[size_t(p)], &b);
        std::memcpy(out + b * esize, base + L.ag_zone(p, k), n * esize);
        ++ts_ag_recv_[size_t(p)];
        ++ag_next[size_t(p)];
        Status s = put_word(p, L.ag_ack_src(p), L.ag_ack(r), ts_ag_recv_[size_t(p)]);
        if (!s.ok()) return fail(s);
        progressed = true;
      }
      if (ag_next[size_t(p)] < m[size_t(p)]) finished = false;
    }
    if (finished) break;
    if (progressed) {
      idle = 0;
      if (posted - done >= 256) {
        Status s = reap();
        if (!s.ok()) return fail(s);
      }
      continue;
    }
    // Now and then only: the writes land without our help (rma_write_passive), and a
    // provider's poll may yield the core after a run of empty polls.
    if (!mapped && (idle & 63) == 63) {
      Status s = reap();
      if (!s.ok()) return fail(s);
    }
    if (mapped && (idle & 1023) == 1023) {
      // A peer whose zone is gone is lost if we still owe it chunks (it cannot have finished
      // without them) or still wait for one of its chunks (checked after seeing it gone).
      for (int p = 0; p < w; ++p) {
        if (p == r) continue;
        Status z = zone_gone(p);
        if (z.ok()) continue;
        const bool owe = (rs_phase && rs_next[size_t(p)] < m[size_t(p)]) || (ag_phase && jr < m[size_t(r)]);
        const bool want_rs = rs_phase && jr < m[size_t(r)] &&
                             load_word(base + L.rs_flag(p, ts_rs_recv_)) != ts_rs_recv_ + 1;
        const bool want_ag = ag_phase && ag_next[size_t(p)] < m[size_t(p)] &&
                             load_word(base + L.ag_flag(p, ts_ag_recv_[size_t(p)])) != ts_ag_recv_[size_t(p)] + 1;
        if (owe || want_rs || want_ag) return fail(z);
      }
    }
    Status s = after_empty_poll(&idle, deadline, [&] {
      for (int p = 0; p < w; ++p)
        if (p != r && (ag_next[size_t(p)] < m[size_t(p)] || rs_next[size_t(p)] < m[size_t(p)])) return p;
      return -1;
    });
    if (!s.ok()) return fail(s.code() == ErrorCode::kTimeout ? s.with_context("two-shot") : s);
  }
  // Every write's completion (the source slots are reused by the next call).
  while (done < posted) {
    Status s = reap();
    if (!s.ok()) return fail(s);
    if (done < posted && deadline.expired()) return fail(Timeout("coll: one-sided writes did not complete"));
  }
  return Status::Ok();
}

}  // namespace lattice::coll
