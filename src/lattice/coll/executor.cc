// The communicator's staging memory and the one executor every plan runs on.
//
// Data path of one step: every receive is posted into a dedicated per-peer staging slot, every
// send is copied into one, and the rank busy-polls its completion queues (poll, never wait:
// small all-reduces are a few microseconds) until all messages of the step are done. A
// received chunk is copied or reduced straight out of its slot, which is then re-posted for
// the next chunk from that peer. On providers that can take posted memory back
// (ProviderCaps::release_buffer: tcp) a lane is direct: sends leave straight from the
// caller's buffers and plain receives land straight in them (registered for the call), only
// reducing receives use a slot; a failed call releases whatever is still posted before it
// returns, so the caller may free its buffers. Every 1024 polls the deadline and every link's
// sticky status are checked, so a dead peer fails the collective on every survivor that has a link to it,
// even one that is only waiting on a live neighbour.
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


Status Communicator::register_user(const plan::Plan& plan, size_t esize) {
  if (std::none_of(staging_.begin(), staging_.end(), [](const auto& st) { return st->direct; })) return Status::Ok();
  // How much of each buffer the plan touches (elements): known for cached plans.
  const CachedPlan* cached = nullptr;
  for (const CachedPlan& c : plans_)
    if (c.used && &c.plan == &plan) cached = &c;
  const plan::Extents e = cached ? cached->extents : plan::extents(plan);
  const size_t* ext = e.of;
  const std::byte* base[3] = {in_, out_, tmp_};
  for (const auto& st : staging_) {
    if (!st->direct) continue;
    for (size_t b = 0; b < 3; ++b) {
      if (ext[b] == 0 || base[b] == nullptr) continue;
      // Local access only: nothing remote ever addresses a caller's buffer.
      auto r = st->provider->register_memory(const_cast<std::byte*>(base[b]), ext[b] * esize,
                                             fabric::kLocalRead | fabric::kLocalWrite);
      if (!r.ok()) return r.status().with_context("coll: registering the caller's buffer");
      st->user[b] = std::move(r).value();
    }
  }
  return Status::Ok();
}

void Communicator::release_user() {
  for (auto& st : staging_)
    for (auto& u : st->user) u.reset();
}

void Communicator::queues_of(const std::vector<int>& lanes, std::vector<fabric::CompletionQueue*>* out) const {
  out->clear();
  for (int id : lanes)
    for (auto* cq : peers_[size_t(id)].cqs)
      if (std::find(out->begin(), out->end(), cq) == out->end()) out->push_back(cq);
}

void Communicator::release_posted(const std::vector<int>& lanes) {
  const int k = options_.slots_per_peer;
  for (int id : lanes) {
    const PeerState& ps = peers_[size_t(id)];
    if (ps.ep == nullptr || !ps.staging->provider->caps().release_buffer) continue;
    const int p = id % world_, slot0 = (id / world_) * k;
    // Every slot id of this call: the outstanding ones let go, completed ones are no-ops.
    for (int slot = 0; slot < k; ++slot)
      for (bool recv : {false, true}) {
        Status s = ps.ep->release_buffer(work_id(seq_, p, recv, slot0 + slot));
        if (!s.ok()) LATTICE_LOG_WARN("coll: releasing a buffer posted to rank {}: {}", p, s.to_string());
      }
  }
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
  // Per peer: its lanes' slot size, or less if the call asks; whole elements.
  chunk_of_.assign(size_t(world_), 0);
  for (int p = 0; p < world_; ++p) {
    size_t c = 0;
    for (int lane = 0; lane < lanes_[size_t(p)]; ++lane) {
      const size_t s = peers_[size_t(p + world_ * lane)].slot_bytes;
      c = c == 0 ? s : std::min(c, s);
    }
    if (chunk_bytes != 0) c = std::min(c, chunk_bytes);
    chunk_of_[size_t(p)] = std::max<size_t>(esize, c / esize * esize);
  }
  seq_ = (seq_ + 1) & kSeqMask;
  struct Unregister {
    Communicator* c;
    ~Unregister() { c->release_user(); }
  } unregister{this};
  LATTICE_RETURN_IF_ERROR(register_user(plan, esize));
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const plan::Step* step = &plan.steps[i];
    bool exchanged = false;
    // A run of steps that may overlap (plan::Step::overlap_prev: the ring plans) is pipelined
    // (pipeline.cc), unless its messages overlap in ways the pipeline does not track.
    size_t j = i + 1;
    while (j < plan.steps.size() && plan.steps[j].overlap_prev && plan.steps[j - 1].after.empty()) ++j;
    if (j > i + 1) {
      std::vector<const plan::Step*> run;
      for (size_t x = i; x < j; ++x) run.push_back(&plan.steps[x]);
      Status r;
      if (exchange_pipelined(run, esize, dtype, op, deadline, &r)) {
        LATTICE_RETURN_IF_ERROR(r);
        i = j - 1;
        step = &plan.steps[i];
        exchanged = true;
      }
    }
    if (!exchanged && (!step->sends.empty() || !step->recvs.empty()))
      LATTICE_RETURN_IF_ERROR(exchange(*step, esize, dtype, op, deadline));
    for (const plan::Local& l : step->after) {
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

Status Communicator::exchange(const plan::Step& step, size_t esize, DType dtype, ReduceOp op, Deadline deadline) {
  const int k = options_.slots_per_peer;
  // Split transfers into messages per peer, in plan order; a pair with several links stripes
  // them round robin over its lanes (message i on lane i % lanes: both ends split the same
  // transfers the same way, and each lane is ordered, so they still match without tags).
  // `active` holds lane ids (peer + world * lane).
  // Scratch kept across calls (a decode step makes a few hundred of these a second).
  std::vector<int>& active = ex_active_;
  std::vector<char>& seen = ex_seen_;
  std::vector<size_t>& n_msgs = ex_msgs_;  // per peer and direction
  active.clear();
  seen.assign(peers_.size(), 0);
  n_msgs.assign(size_t(world_) * 2, 0);
  auto add = [&](const plan::Transfer& t, bool recv) -> Status {
    if (t.peer < 0 || t.peer >= world_ || t.peer == rank() || peers_[size_t(t.peer)].ep == nullptr)
      return Internal("coll: plan names peer " + std::to_string(t.peer));
    const size_t lanes = size_t(lanes_[size_t(t.peer)]);
    std::byte* p = resolve(t.ref, esize);
    size_t off = t.ref.off * esize;
    size_t left = t.n * esize;
    while (left > 0) {
      size_t b = std::min(left, chunk_of_[size_t(t.peer)]);
      const size_t id = size_t(t.peer) + size_t(world_) * (n_msgs[size_t(t.peer) * 2 + recv]++ % lanes);
      if (!seen[id]) {
        seen[id] = 1;
        active.push_back(int(id));
      }
      (recv ? peers_[id].recvs : peers_[id].sends).push_back({p, b, t.reduce, t.ref.buf, off});
      p += b;
      off += b;
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
    if (!s.ok()) release_posted(active);
    for (int p : active) {
      peers_[size_t(p)].sends.clear();
      peers_[size_t(p)].recvs.clear();
    }
    return s.ok() ? s : fail(s);
  };

  queues_of(active, &ex_cqs_);
  const std::vector<fabric::CompletionQueue*>& step_cqs = ex_cqs_;
  Completion comps[32];
  uint32_t idle = 0;
  for (;;) {
    bool all_done = true;
    for (int id : active) {
      PeerState& ps = peers_[size_t(id)];
      const int p = id % world_, lane_slot0 = (id / world_) * k;
      // Receives first, so a peer's message finds its buffer.
      while (ps.next_recv < ps.recvs.size() && !ps.free_recv.empty()) {
        int slot = ps.free_recv.back();
        const auto& m = ps.recvs[ps.next_recv];
        LocalSlice dst = ps.direct && !m.reduce ? ps.user_slice(m.buf, m.off, m.bytes)
                                                : LocalSlice{ps.region, ps.recv_base + size_t(slot) * ps.slot_bytes, m.bytes};
        Status s = ps.ep->post_recv(dst, work_id(seq_, p, true, lane_slot0 + slot));
        if (s.code() == ErrorCode::kResourceExhausted) break;
        if (!s.ok()) return finish(s.with_context("coll: receive from rank " + std::to_string(p)));
        ps.free_recv.pop_back();
        ps.recv_msg[size_t(slot)] = ps.next_recv++;
      }
      while (ps.next_send < ps.sends.size() && !ps.free_send.empty()) {
        int slot = ps.free_send.back();
        const auto& m = ps.sends[ps.next_send];
        LocalSlice src{ps.region, ps.send_base + size_t(slot) * ps.slot_bytes, m.bytes};
        if (ps.direct) src = ps.user_slice(m.buf, m.off, m.bytes);
        else std::memcpy(src.data(), m.ptr, m.bytes);
        Status s = ps.ep->post_send(src, work_id(seq_, p, false, lane_slot0 + slot));
        if (s.code() == ErrorCode::kResourceExhausted) break;
        if (!s.ok()) return finish(s.with_context("coll: send to rank " + std::to_string(p)));
        ps.free_send.pop_back();
        ++ps.next_send;
      }
      if (ps.done_send < ps.sends.size() || ps.done_recv < ps.recvs.size()) all_done = false;
    }
    if (all_done) return finish(Status::Ok());

    bool progressed = false;
    for (fabric::CompletionQueue* cq : step_cqs) {
      size_t n = cq->poll(comps);
      for (size_t i = 0; i < n; ++i) {
        const Completion& c = comps[i];
        Decoded d = decode(c.id);
        if (d.seq != seq_ || d.peer >= world_ || d.slot >= k * int(kMaxLanes)) continue;  // a leftover of a failed call
        PeerState& ps = peers_[size_t(d.peer + world_ * (d.slot / k))];
        d.slot %= k;
        if (!c.status.ok()) return finish(detail::completion_error(c.status, d.peer));
        progressed = true;
        if (d.recv) {
          const auto& m = ps.recvs[ps.recv_msg[size_t(d.slot)]];
          if (c.bytes != m.bytes) return finish(detail::size_mismatch(d.peer, c.bytes, m.bytes));
          const std::byte* src = ps.region->data() + ps.recv_base + size_t(d.slot) * ps.slot_bytes;
          if (m.reduce) reduce(dtype, op, m.ptr, m.ptr, src, m.bytes / esize);
          else if (!ps.direct) std::memcpy(m.ptr, src, m.bytes);
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
      continue;
    }
    Status s = after_empty_poll(&idle, deadline, [&] {
      for (int p : active) {
        const PeerState& ps = peers_[size_t(p)];
        if (ps.done_recv < ps.recvs.size() || ps.done_send < ps.sends.size()) return p % world_;
      }
      return -1;
    });
    if (s.code() == ErrorCode::kTimeout) {
      // Say how far each link got: a send never completing and a message never arriving
      // are different stories.
      std::string where;
      for (int p : active) {
        const PeerState& ps = peers_[size_t(p)];
        where += (where.empty() ? "" : "; ") + std::string("rank ") + std::to_string(p % world_) + ": sent " +
                 std::to_string(ps.done_send) + "/" + std::to_string(ps.sends.size()) + " (posted " +
                 std::to_string(ps.next_send) + "), received " + std::to_string(ps.done_recv) + "/" +
                 std::to_string(ps.recvs.size()) + " (posted " + std::to_string(ps.next_recv) + ")";
      }
      s = s.with_context("step messages: " + where);
    }
    if (!s.ok()) return finish(s);
  }
}

}  // namespace lattice::coll
