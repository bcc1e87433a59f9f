// The communicator's staging memory and the one executor every plan runs on.
//
// Data path of one step: every receive is posted into a dedicated per-peer staging slot, every
// send is copied into one, and the rank busy-polls its completion queues (poll, never wait:
// small all-reduces are a few microseconds) until all messages of the step are done. A
// received chunk is copied or reduced straight out of its slot, which is then re-posted for
// the next chunk from that peer. Every 1024 polls the deadline and every link's sticky status
// are checked, so a dead peer fails the collective on every survivor that has a link to it,
// even one that is only waiting on a live neighbour.
#include "lattice/coll/comm.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "lattice/core/log.h"

namespace lattice::coll {

using fabric::Completion;
using fabric::LocalSlice;
using fabric::MemoryRegion;

struct Communicator::Staging {
  fabric::Provider* provider = nullptr;
  std::unique_ptr<MemoryRegion> region;
};

struct Communicator::PeerState {
  fabric::Endpoint* ep = nullptr;
  MemoryRegion* region = nullptr;
  size_t send_base = 0, recv_base = 0;  // byte offsets of the peer's slots in `region`
  // Per step:
  struct Msg {
    std::byte* ptr;
    size_t bytes;
    bool reduce;
  };
  std::vector<Msg> sends, recvs;
  size_t next_send = 0, next_recv = 0, done_send = 0, done_recv = 0;
  std::vector<int> free_send, free_recv;  // slot indices
  std::vector<size_t> recv_msg;           // slot -> index in recvs
};

namespace {

// WorkId: collective sequence (40 bits) | peer (12) | direction (1) | slot (11).
constexpr int kSlotBits = 11, kPeerBits = 12;
fabric::WorkId work_id(uint64_t seq, int peer, bool recv, int slot) {
  return (seq << (kSlotBits + 1 + kPeerBits)) | (uint64_t(peer) << (kSlotBits + 1)) | (uint64_t(recv) << kSlotBits) |
         uint64_t(slot);
}
struct Decoded {
  uint64_t seq;
  int peer;
  bool recv;
  int slot;
};
Decoded decode(fabric::WorkId id) {
  return {id >> (kSlotBits + 1 + kPeerBits), int((id >> (kSlotBits + 1)) & ((1u << kPeerBits) - 1)),
          bool((id >> kSlotBits) & 1), int(id & ((1u << kSlotBits) - 1))};
}
constexpr uint64_t kSeqMask = (uint64_t{1} << 40) - 1;

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::create(cluster::Group& group, const CommOptions& options) {
  if (options.chunk_bytes < 64 || options.chunk_bytes > (size_t{1} << 30))
    return InvalidArgument("coll: chunk_bytes " + std::to_string(options.chunk_bytes) + " out of range 64 B .. 1 GiB");
  if (options.slots_per_peer < 1 || options.slots_per_peer > 64)
    return InvalidArgument("coll: slots_per_peer out of range 1..64");
  std::unique_ptr<Communicator> c(new Communicator());
  c->group_ = &group;
  c->options_ = options;
  LATTICE_RETURN_IF_ERROR(c->build());
  return c;
}

Communicator::~Communicator() = default;

Status Communicator::build() {
  // Regions of the previous epoch stay alive: cancelled receives may still name them.
  for (auto& s : staging_) retired_.push_back(std::move(s));
  staging_.clear();
  epoch_ = group_->epoch();
  world_ = group_->world_size();
  broken_ = Status::Ok();
  peers_.assign(size_t(world_), PeerState{});
  cqs_.clear();
  rma_write_ = world_ > 1;
  if (world_ > (1 << kPeerBits)) return InvalidArgument("coll: world size above 4096");
  const int k = options_.slots_per_peer;
  const size_t chunk = options_.chunk_bytes;
  // Group peers by provider: one region per provider.
  std::map<fabric::Provider*, std::vector<int>> by_provider;
  for (int p = 0; p < world_; ++p) {
    if (p == rank()) continue;
    auto links = group_->links(p);
    if (links.empty())
      return Unavailable("coll: rank " + std::to_string(rank()) + " has no link to rank " + std::to_string(p) +
                         " (collectives need a full mesh for now)");
    const cluster::Link& l = links.front();
    by_provider[l.provider].push_back(p);
    peers_[size_t(p)].ep = l.endpoint;
    if (!l.provider->caps().rma_write) rma_write_ = false;
    for (auto* cq : {l.send_cq, l.recv_cq})
      if (std::find(cqs_.begin(), cqs_.end(), cq) == cqs_.end()) cqs_.push_back(cq);
  }
  for (auto& [prov, peers] : by_provider) {
    auto st = std::make_unique<Staging>();
    st->provider = prov;
    size_t bytes = peers.size() * size_t(2 * k) * chunk;
    if (prov->caps().max_msg && prov->caps().max_msg < chunk)
      return InvalidArgument("coll: chunk_bytes above the provider's max_msg");
    auto region = prov->allocate_memory(bytes, fabric::kLocalRead | fabric::kLocalWrite | fabric::kRemoteWrite);
    if (!region.ok()) return region.status().with_context("coll: staging of " + std::to_string(bytes) + " bytes");
    st->region = std::move(region).value();
    size_t off = 0;
    for (int p : peers) {
      PeerState& ps = peers_[size_t(p)];
      ps.region = st->region.get();
      ps.send_base = off;
      ps.recv_base = off + size_t(k) * chunk;
      off += size_t(2 * k) * chunk;
      ps.recv_msg.assign(size_t(k), 0);
    }
    staging_.push_back(std::move(st));
  }
  return Status::Ok();
}

std::byte* Communicator::resolve(plan::Ref ref, size_t esize) const {
  std::byte* base = nullptr;
  switch (ref.buf) {
    case plan::Buf::kIn: base = const_cast<std::byte*>(in_); break;
    case plan::Buf::kOut: base = out_; break;
    case plan::Buf::kTmp: base = tmp_; break;
  }
  return base + ref.off * esize;
}

Status Communicator::fail(Status s) {
  broken_ = s;
  return s;
}

Status Communicator::check_links() {
  for (int p = 0; p < world_; ++p) {
    fabric::Endpoint* ep = peers_[size_t(p)].ep;
    if (ep == nullptr) continue;
    Status s = ep->status();
    if (!s.ok()) {
      if (s.code() == ErrorCode::kPeerLost || s.code() == ErrorCode::kCancelled)
        return PeerLost("coll: rank " + std::to_string(p) + " lost: " + s.message(), p);
      return Status(s.code(), "coll: link to rank " + std::to_string(p) + ": " + s.message(), p);
    }
  }
  return Status::Ok();
}

Status Communicator::execute(const plan::Plan& plan, DType dtype, ReduceOp op, const void* in, void* out,
                             size_t chunk_bytes, Deadline deadline) {
  if (group_->epoch() != epoch_ || group_->world_size() != world_) LATTICE_RETURN_IF_ERROR(build());
  if (!broken_.ok()) return broken_;
  const size_t esize = dtype_size(dtype);
  in_ = static_cast<const std::byte*>(in);
  out_ = static_cast<std::byte*>(out);
  size_t need = plan.tmp_elems * esize;
  if (need > tmp_bytes_) {
    tmp_storage_.reset(new std::byte[need]);
    tmp_bytes_ = need;
  }
  tmp_ = tmp_storage_.get();
  size_t chunk = chunk_bytes == 0 ? options_.chunk_bytes : std::min(chunk_bytes, options_.chunk_bytes);
  chunk = std::max<size_t>(esize, chunk / esize * esize);
  seq_ = (seq_ + 1) & kSeqMask;
  for (const plan::Step& step : plan.steps) {
    if (!step.sends.empty() || !step.recvs.empty())
      LATTICE_RETURN_IF_ERROR(exchange(step, esize, dtype, op, chunk, deadline));
    for (const plan::Local& l : step.after) {
      std::byte* d = resolve(l.dst, esize);
      const std::byte* a = resolve(l.a, esize);
      if (l.kind == plan::Local::kCopy) {
        if (d != a && l.n) std::memmove(d, a, l.n * esize);
      } else {
        reduce(dtype, op, d, a, resolve(l.b, esize), l.n);
      }
    }
  }
  return Status::Ok();
}

Status Communicator::exchange(const plan::Step& step, size_t esize, DType dtype, ReduceOp op, size_t chunk,
                              Deadline deadline) {
  const int k = options_.slots_per_peer;
  // Split transfers into messages per peer, in plan order.
  std::vector<int> active;
  std::vector<char> seen(size_t(world_), 0);
  auto add = [&](const plan::Transfer& t, bool recv) -> Status {
    if (t.peer < 0 || t.peer >= world_ || t.peer == rank() || peers_[size_t(t.peer)].ep == nullptr)
      return Internal("coll: plan names peer " + std::to_string(t.peer));
    PeerState& ps = peers_[size_t(t.peer)];
    if (!seen[size_t(t.peer)]) {
      seen[size_t(t.peer)] = 1;
      active.push_back(t.peer);
    }
    std::byte* p = resolve(t.ref, esize);
    size_t left = t.n * esize;
    auto& list = recv ? ps.recvs : ps.sends;
    while (left > 0) {
      size_t b = std::min(left, chunk);
      list.push_back({p, b, t.reduce});
      p += b;
      left -= b;
    }
    return Status::Ok();
  };
  for (const auto& t : step.sends) LATTICE_RETURN_IF_ERROR(add(t, false));
  for (const auto& t : step.recvs) LATTICE_RETURN_IF_ERROR(add(t, true));
  for (int p : active) {
    PeerState& ps = peers_[size_t(p)];
    ps.next_send = ps.next_recv = ps.done_send = ps.done_recv = 0;
    ps.free_send.clear();
    ps.free_recv.clear();
    for (int s = k - 1; s >= 0; --s) {
      ps.free_send.push_back(s);
      ps.free_recv.push_back(s);
    }
  }
  auto finish = [&](Status s) {
    for (int p : active) {
      peers_[size_t(p)].sends.clear();
      peers_[size_t(p)].recvs.clear();
    }
    return s.ok() ? s : fail(s);
  };

  const size_t slot_bytes = options_.chunk_bytes;
  Completion comps[32];
  uint32_t idle = 0;
  for (;;) {
    bool all_done = true;
    for (int p : active) {
      PeerState& ps = peers_[size_t(p)];
      // Receives first, so a peer's message finds its buffer.
      while (ps.next_recv < ps.recvs.size() && !ps.free_recv.empty()) {
        int slot = ps.free_recv.back();
        LocalSlice dst{ps.region, ps.recv_base + size_t(slot) * slot_bytes, ps.recvs[ps.next_recv].bytes};
        Status s = ps.ep->post_recv(dst, work_id(seq_, p, true, slot));
        if (s.code() == ErrorCode::kResourceExhausted) break;
        if (!s.ok()) return finish(s.with_context("coll: receive from rank " + std::to_string(p)));
        ps.free_recv.pop_back();
        ps.recv_msg[size_t(slot)] = ps.next_recv++;
      }
      while (ps.next_send < ps.sends.size() && !ps.free_send.empty()) {
        int slot = ps.free_send.back();
        const auto& m = ps.sends[ps.next_send];
        LocalSlice src{ps.region, ps.send_base + size_t(slot) * slot_bytes, m.bytes};
        std::memcpy(src.data(), m.ptr, m.bytes);
        Status s = ps.ep->post_send(src, work_id(seq_, p, false, slot));
        if (s.code() == ErrorCode::kResourceExhausted) break;
        if (!s.ok()) return finish(s.with_context("coll: send to rank " + std::to_string(p)));
        ps.free_send.pop_back();
        ++ps.next_send;
      }
      if (ps.done_send < ps.sends.size() || ps.done_recv < ps.recvs.size()) all_done = false;
    }
    if (all_done) return finish(Status::Ok());

    bool progressed = false;
    for (fabric::CompletionQueue* cq : cqs_) {
      size_t n = cq->poll(comps);
      for (size_t i = 0; i < n; ++i) {
        const Completion& c = comps[i];
        Decoded d = decode(c.id);
        if (d.seq != seq_ || d.peer >= world_ || d.slot >= k) continue;  // a leftover of a failed call
        PeerState& ps = peers_[size_t(d.peer)];
        if (!c.status.ok()) {
          Status s = c.status;
          if (s.code() == ErrorCode::kPeerLost || s.code() == ErrorCode::kCancelled)
            return finish(PeerLost("coll: rank " + std::to_string(d.peer) + " lost: " + s.message(), d.peer));
          return finish(s.with_context("coll: rank " + std::to_string(d.peer)));
        }
        progressed = true;
        if (d.recv) {
          const auto& m = ps.recvs[ps.recv_msg[size_t(d.slot)]];
          if (c.bytes != m.bytes)
            return finish(Corrupt("coll: rank " + std::to_string(d.peer) + " sent " + std::to_string(c.bytes) +
                                      " bytes where " + std::to_string(m.bytes) + " were expected (mismatched calls?)",
                                  d.peer));
          const std::byte* src = ps.region->data() + ps.recv_base + size_t(d.slot) * slot_bytes;
          if (m.reduce) reduce(dtype, op, m.ptr, m.ptr, src, m.bytes / esize);
          else std::memcpy(m.ptr, src, m.bytes);
          ps.free_recv.push_back(d.slot);
          ++ps.done_recv;
        } else {
          ps.free_send.push_back(d.slot);
          ++ps.done_send;
        }
      }
    }
    if (progressed) {
      idle = 0;
    } else if ((++idle & 1023) == 0) {
      if (deadline.expired()) {
        // Name a peer we still wait on, for the message.
        for (int p : active) {
          const PeerState& ps = peers_[size_t(p)];
          if (ps.done_recv < ps.recvs.size() || ps.done_send < ps.sends.size())
            return finish(Timeout("coll: deadline passed waiting on rank " + std::to_string(p), p));
        }
        return finish(Timeout("coll: deadline passed"));
      }
      Status s = check_links();
      if (!s.ok()) return finish(s);
    }
  }
}

}  // namespace lattice::coll
