// The one-sided landing zones: each rank's landing region (a zone per peer and parity for the
// one-shot all-reduce, then the two-shot area of twoshot.cc), the key exchange that sets them
// up on first use (mapping peers' zones where the provider can: ProviderCaps::map_remote), the
// reaping of write completions, and the one-shot all-reduce itself: each rank writes (or, with
// mapped zones, stores) its buffer into every peer's zone and raises a flag, then reduces all
// contributions locally in rank order: the same bits as the two-sided one-shot plan.
#include "lattice/coll/comm.h"
#include "lattice/coll/comm_internal.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "lattice/coll/plan/ring_route.h"
#include "lattice/core/log.h"

namespace lattice::coll {
namespace {

// Loads one byte of every page of [p, p + n): the mapping's page-table entries made now.
void prefault_read(const std::byte* p, size_t n) {
  constexpr size_t kPage = 4096;
  const volatile std::byte* v = p;
  for (size_t off = 0; off < n; off += kPage) (void)v[off];
}

}  // namespace

// Sends `mine` to every peer and receives theirs into (*theirs)[peer] (8 bytes each way, over
// the two-sided path), from the still unused flag word of `fresh`: direct lanes have no send
// slots.
Status Communicator::swap_words(MemoryRegion* fresh, uint64_t mine, std::vector<uint64_t>* theirs, Deadline deadline) {
  theirs->assign(size_t(world_), 0);
  seq_ = (seq_ + 1) & kSeqMask;
  std::memcpy(fresh->data() + flag_off_, &mine, 8);
  size_t pending = 0;
  for (int p = 0; p < world_; ++p) {
    if (p == rank()) continue;
    PeerState& ps = peers_[size_t(p)];
    LATTICE_RETURN_IF_ERROR(ps.ep->post_recv({ps.region, ps.recv_base, 8}, work_id(seq_, p, true, 0)));
    LATTICE_RETURN_IF_ERROR(ps.ep->post_send({fresh, flag_off_, 8}, work_id(seq_, p, false, 0)));
    pending += 2;
  }
  Completion comps[32];
  while (pending > 0) {
    Status err;
    size_t n = poll_all(comps, 32, &err);
    if (!err.ok()) return err;
    for (size_t i = 0; i < n; ++i) {
      Decoded d = decode(comps[i].id);
      if (d.seq != seq_ || d.peer >= world_) continue;
      --pending;
      if (d.recv) {
        if (comps[i].bytes != 8) return Corrupt("coll: rank " + std::to_string(d.peer) + " sent a bad setup word", d.peer);
        const PeerState& ps = peers_[size_t(d.peer)];
        std::memcpy(&(*theirs)[size_t(d.peer)], ps.region->data() + ps.recv_base, 8);
      }
    }
    if (n == 0 && deadline.expired()) return Timeout("coll: peers did not answer the landing-zone setup in time");
  }
  std::memset(fresh->data() + flag_off_, 0, 8);
  return Status::Ok();
}

// Swaps landing-zone keys with every peer, and maps their zones where the provider can.
Status Communicator::setup_rma(Deadline deadline) {
  fabric::Provider* prov = group_->links(rank() == 0 ? 1 : 0).front().provider;
  const size_t zone = (options_.rma_zone_bytes + 63) / 64 * 64;
  zone_stride_ = zone + 64;  // data, then the flag word on its own cache line
  src_off_ = size_t(world_) * 2 * zone_stride_;
  flag_off_ = src_off_ + zone;
  // Then the two-shot area (twoshot.cc), when enabled.
  ts_off_ = (flag_off_ + 64 + 4095) / 4096 * 4096;
  const size_t total = ts_off_ + twoshot_area_bytes();
  auto region = prov->allocate_memory(
      total, fabric::kLocalRead | fabric::kLocalWrite | fabric::kRemoteWrite | fabric::kRemoteRead);
  if (!region.ok()) return region.status();
  std::unique_ptr<MemoryRegion> landing = std::move(region).value();
  std::memset(landing->data(), 0, landing->size());
  // Landing keys first.
  LATTICE_RETURN_IF_ERROR(swap_words(landing.get(), landing->key(), &peer_keys_, deadline));
  // Then map every peer's landing region where the provider can (same layout everywhere),
  // and agree: the calls pull from peers' zones only if every rank mapped every peer (a
  // rank still posting writes would wait for data nobody writes).
  peer_maps_.clear();
  if (prov->caps().map_remote) {  // the same provider everywhere: every rank takes part
    std::vector<std::unique_ptr<fabric::RemoteMapping>> maps(static_cast<size_t>(world_));
    uint64_t all = options_.map_peers ? 1 : 0;
    for (int p = 0; p < world_ && all; ++p) {
      if (p == rank()) continue;
      auto m = peers_[size_t(p)].ep->map_remote({peer_keys_[size_t(p)], 0, landing->size()},
                                                fabric::kRemoteRead | fabric::kRemoteWrite);
      if (m.ok()) {
        maps[size_t(p)] = std::move(m).value();
      } else {
        all = 0;
      }
    }
    std::vector<uint64_t> theirs;
    LATTICE_RETURN_IF_ERROR(swap_words(landing.get(), all, &theirs, deadline));
    for (int p = 0; p < world_; ++p)
      if (p != rank()) all &= theirs[size_t(p)];
    if (all == 1) {
      // Each page of a peer's zones faults the first time this process touches it (about 10 us a
      // page on a PVM guest): touched now, at setup, not in the first request's prefill, whose
      // 64-row all-reduces reach a megabyte of every peer's zones at 4 ranks.
      for (const auto& m : maps)
        if (m) prefault_read(m->data(), m->size());
      peer_maps_ = std::move(maps);
    }
  }
  landing_ = std::move(landing);
  // The zones are fresh (zero flags) on every member: count calls from the start again. A
  // call that failed on some members only (the rest never got that far) left the counts apart.
  rma_seq_ = 0;
  return Status::Ok();
}

// Polls every queue once; a failed completion of the current call becomes *error.
size_t Communicator::poll_all(Completion* comps, size_t cap, Status* error) {
  size_t total = 0;
  for (fabric::CompletionQueue* cq : cqs_) {
    size_t n = cq->poll({comps + total, cap - total});
    for (size_t i = total; i < total + n; ++i) {
      const Completion& c = comps[i];
      if (c.status.ok() || !error->ok()) continue;
      Decoded d = decode(c.id);
      if (d.seq != seq_) continue;
      // One-sided writes: a landing zone that no longer exists at the target means its
      // communicator went away mid-collective, as a lost peer's does.
      *error = c.status.code() == ErrorCode::kAccessDenied
                   ? PeerLost("coll: rank " + std::to_string(d.peer) + " lost: " + c.status.message(), d.peer)
                   : detail::completion_error(c.status, d.peer);
    }
    total += n;
    if (total == cap) break;
  }
  return total;
}

// Common start of the one-sided paths: a new epoch rebuilds; the first call sets up the zones.
Status Communicator::rma_begin(Deadline deadline) {
  if (group_->epoch() != epoch_ || group_->world_size() != world_) LATTICE_RETURN_IF_ERROR(build());
  if (!broken_.ok()) return broken_;
  if (!rma_capable_) return Internal("coll: no one-sided path on this group");
  if (!landing_) {
    Status s = setup_rma(deadline);
    if (!s.ok()) return fail(s.with_context("coll: landing-zone setup"));
  }
  return Status::Ok();
}

Status Communicator::reap_writes(size_t* done) {
  Completion comps[32];
  Status err;
  size_t n = poll_all(comps, 32, &err);
  if (!err.ok()) return err;
  for (size_t i = 0; i < n; ++i)
    if (decode(comps[i].id).seq == seq_) ++*done;
  return Status::Ok();
}

Status Communicator::all_reduce_rma(const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                                    Deadline deadline) {
  LATTICE_RETURN_IF_ERROR(rma_begin(deadline));
  const size_t esize = dtype_size(dtype), bytes = count * esize;
  if (bytes > options_.rma_zone_bytes) return Internal("coll: buffer above the landing zone");
  if (bytes == 0) return Status::Ok();
  ++rma_seq_;
  seq_ = (seq_ + 1) & kSeqMask;
  const size_t parity = rma_seq_ & 1;
  std::byte* base = landing_->data();
  const bool mapped = !peer_maps_.empty();
  // Mapped peers (shm): each rank copies its contribution into its own zone of its own
  // landing region (zone (rank * 2 + parity): no peer writes there) and raises the flag; the
  // others read it in place. A byte crosses between cores once per reader, where pushing it
  // into each reader's zone costs the writer a line transfer per reader first. Otherwise:
  // copy into the source area and post a data and a flag write to every peer.
  std::byte* mine = base + (mapped ? (size_t(rank()) * 2 + parity) * zone_stride_ : src_off_);
  std::memcpy(mine, in, bytes);
  size_t writes = 0, done = 0;
  auto reap = [&] { return reap_writes(&done); };
  auto flag_of = [&](std::byte* zone) {
    return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(zone + zone_stride_ - 64));
  };
  // Where rank q's contribution to this call sits: zone (q * 2 + parity) of q's landing region
  // (mapped) or of mine (q wrote it there).
  auto zone_of = [&](int q) -> std::byte* {
    if (q == rank()) return mine;
    return (mapped ? peer_maps_[size_t(q)]->data() : base) + (size_t(q) * 2 + parity) * zone_stride_;
  };
  if (mapped) {
    flag_of(mine).store(rma_seq_, std::memory_order_release);  // after the data
  } else {
    std::memcpy(base + flag_off_, &rma_seq_, 8);
    // Write to the next ranks first so not everyone hits rank 0 at once.
    const uint64_t off = (uint64_t(rank()) * 2 + parity) * zone_stride_;
    for (int i = 1; i < world_; ++i) {
      const int p = (rank() + i) % world_;
      const uint64_t key = peer_keys_[size_t(p)];
      for (int part = 0; part < 2; ++part) {
        LocalSlice src = part == 0 ? LocalSlice{landing_.get(), src_off_, bytes} : LocalSlice{landing_.get(), flag_off_, 8};
        fabric::RemoteSlice dst{key, part == 0 ? off : off + (zone_stride_ - 64), src.length};
        Status s = post_write_retry(p, src, dst, work_id(seq_, p, false, part), deadline, &done);
        if (!s.ok()) return fail(s);
        ++writes;
      }
    }
  }
  // Wait for every peer's flag; poll the queues now and then (reaping our own write
  // completions, and noticing failed links).
  uint32_t idle = 0;
  for (int p = 0; p < world_; ++p) {
    if (p == rank()) continue;
    auto flag = flag_of(zone_of(p));
    while (flag.load(std::memory_order_acquire) != rma_seq_) {
      // Now and then only: the writes land without our help (rma_write_passive), and a
      // provider's poll may yield the core after a run of empty polls.
      if (!mapped && (idle & 63) == 63) {
        Status r = reap();
        if (!r.ok()) return fail(r);
      }
      if (mapped && (idle & 1023) == 1023) {
        // Gone, and its flag still not raised (read again after seeing it gone): never will be.
        Status z = zone_gone(p);
        if (!z.ok() && flag.load(std::memory_order_acquire) != rma_seq_) return fail(z);
      }
      Status s = after_empty_poll(&idle, deadline, [p] { return p; });
      if (!s.ok()) return fail(s);
    }
  }
  // Rank order; this rank's contribution from its copy (out may alias in).
  if (world_ == 1) {
    std::memmove(out, in, bytes);
  } else {
    const void* few[16];
    std::vector<const void*> many(world_ > 16 ? size_t(world_) : 0);
    const void** srcs = world_ > 16 ? many.data() : few;
    for (int q = 0; q < world_; ++q) srcs[q] = zone_of(q);
    reduce_ordered(dtype, op, out, srcs, size_t(world_), count);
    if (mapped)  // the peers' contributions came by loads, which no endpoint sees
      for (int q = 0; q < world_; ++q)
        if (q != rank()) peer_maps_[size_t(q)]->count_loaded(bytes);
  }
  while (done < writes) {
    Status r = reap();
    if (!r.ok()) return fail(r);
    if (done < writes && deadline.expired()) return fail(Timeout("coll: one-sided writes did not complete"));
  }
  return Status::Ok();
}

// A peer whose mapped landing zone is gone let go of its communicator. Only a peer this rank
// still awaits something from is lost that way (as a posted write to the zone would fail with
// kAccessDenied): one that finished the call may leave before we read what it left us, and
// that stays readable through our mapping.
Status Communicator::zone_gone(int peer) const {
  if (size_t(peer) < peer_maps_.size() && peer_maps_[size_t(peer)] && !peer_maps_[size_t(peer)]->live())
    return PeerLost("coll: rank " + std::to_string(peer) + " lost: its landing zone is gone mid-call", peer);
  return Status::Ok();
}

}  // namespace lattice::coll
