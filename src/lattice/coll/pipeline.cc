// Pipelined execution of a run of plan steps (plan::Step::overlap_prev, set by the ring plans):
// a chunk moves on as soon as it is reduced, not after its whole step.
//
// The run's transfers are split into chunk messages exactly as exchange() splits one step, and
// queued per peer lane in plan order across steps (so both ends still match messages by order
// on each lane). Two steps are in flight at most (a message of step s starts only once every
// message of step s - 2 is done), and a message waits only for the messages of step s - 1
// whose memory it touches:
//   a send reads its range: every overlapping receive of step s - 1 must have been applied;
//   a receive writes its range when it is applied (copied or reduced out of its staging slot,
//   which it holds until then): every overlapping send of step s - 1 must have been copied into
//   its slot, and every overlapping receive of step s - 1 applied first (a fixed order).
// On direct lanes (comm.cc) a send holds its range until it completes, and a plain receive
// writes its range from the moment it is posted: such a receive is posted only once its
// dependencies are met, and a receive depending on a direct send waits for its completion.
// A ring step sends what the previous step just reduced, chunk i after chunk i, so the ring's
// steps overlap chunk by chunk. Runs whose steps have overlapping ranges within one list, or
// local work between steps, are not pipelined (execute() checks).
#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "lattice/coll/comm.h"
#include "lattice/coll/comm_internal.h"

namespace lattice::coll {

using detail::decode;
using detail::Decoded;
using detail::work_id;
using fabric::Completion;
using fabric::LocalSlice;

namespace {

struct PMsg {
  int step = 0;
  int lane = 0;  // peer + world * lane
  std::byte* ptr = nullptr;
  size_t bytes = 0;
  bool reduce = false;
  plan::Buf buf = plan::Buf::kOut;
  size_t off = 0;  // bytes into buf
  bool posted = false, done = false;  // send: copied into its slot / completed; receive: -, applied
  std::vector<uint32_t> dep_sends, dep_recvs;  // of the previous step: must be posted / applied
};

struct Range {
  uintptr_t begin, end;
  uint32_t idx;
};

// Messages of one step in address order; true when no two overlap.
bool sorted_disjoint(std::vector<Range>& r) {
  std::sort(r.begin(), r.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < r.size(); ++i)
    if (r[i].begin < r[i - 1].end) return false;
  return true;
}

// Indices of the ranges in `r` (sorted, disjoint) that overlap [b, e).
void overlapping(const std::vector<Range>& r, uintptr_t b, uintptr_t e, std::vector<uint32_t>* out) {
  auto it = std::lower_bound(r.begin(), r.end(), e, [](const Range& x, uintptr_t v) { return x.begin < v; });
  while (it != r.begin()) {
    --it;
    if (it->end <= b) break;
    out->push_back(it->idx);
  }
}

}  // namespace

bool Communicator::exchange_pipelined(const std::vector<const plan::Step*>& run, size_t esize, DType dtype,
                                      ReduceOp op, Deadline deadline, Status* result) {
  const int k = options_.slots_per_peer;
  const int nsteps = int(run.size());
  std::vector<PMsg> sends, recvs;
  std::vector<size_t> n_msgs(size_t(world_) * 2, 0);
  std::vector<std::vector<Range>> send_ranges(static_cast<size_t>(nsteps)), recv_ranges(static_cast<size_t>(nsteps));
  for (int s = 0; s < nsteps; ++s) {
    std::fill(n_msgs.begin(), n_msgs.end(), 0);  // lanes by message index within a step, as exchange()
    for (int dir = 0; dir < 2; ++dir) {
      for (const plan::Transfer& t : dir ? run[size_t(s)]->recvs : run[size_t(s)]->sends) {
        if (t.peer < 0 || t.peer >= world_ || t.peer == rank() || peers_[size_t(t.peer)].ep == nullptr) {
          *result = Internal("coll: plan names peer " + std::to_string(t.peer));
          return true;
        }
        const size_t lanes = size_t(lanes_[size_t(t.peer)]);
        std::byte* p = resolve(t.ref, esize);
        size_t off = t.ref.off * esize;
        for (size_t left = t.n * esize; left > 0;) {
          const size_t b = std::min(left, chunk_of_[size_t(t.peer)]);
          PMsg m;
          m.step = s;
          m.lane = int(size_t(t.peer) + size_t(world_) * (n_msgs[size_t(t.peer) * 2 + size_t(dir)]++ % lanes));
          m.ptr = p;
          m.bytes = b;
          m.reduce = t.reduce;
          m.buf = t.ref.buf;
          m.off = off;
          auto& list = dir ? recvs : sends;
          (dir ? recv_ranges : send_ranges)[size_t(s)].push_back(
              {reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + b, uint32_t(list.size())});
          list.push_back(std::move(m));
          p += b;
          off += b;
          left -= b;
        }
      }
    }
    if (!sorted_disjoint(send_ranges[size_t(s)]) || !sorted_disjoint(recv_ranges[size_t(s)])) return false;
  }
  for (auto* list : {&sends, &recvs})
    for (PMsg& m : *list) {
      if (m.step == 0) continue;
      const uintptr_t b = reinterpret_cast<uintptr_t>(m.ptr), e = b + m.bytes;
      overlapping(recv_ranges[size_t(m.step - 1)], b, e, &m.dep_recvs);
      if (list == &recvs) overlapping(send_ranges[size_t(m.step - 1)], b, e, &m.dep_sends);
    }

  // Per lane: FIFO of its messages, free slots, slot -> message.
  struct LaneQ {
    std::vector<uint32_t> send_q, recv_q;
    size_t next_send = 0, next_recv = 0;
    std::vector<int> free_send, free_recv;
    std::vector<uint32_t> send_of, recv_of;
  };
  std::vector<LaneQ> q(peers_.size());
  std::vector<int> active;
  for (int dir = 0; dir < 2; ++dir) {
    auto& list = dir ? recvs : sends;
    for (uint32_t i = 0; i < list.size(); ++i) {
      LaneQ& l = q[size_t(list[i].lane)];
      if (l.free_send.empty() && l.free_recv.empty()) {
        active.push_back(list[i].lane);
        for (int s = k - 1; s >= 0; --s) {
          l.free_send.push_back(s);
          l.free_recv.push_back(s);
        }
        l.send_of.assign(size_t(k), 0);
        l.recv_of.assign(size_t(k), 0);
      }
      (dir ? l.recv_q : l.send_q).push_back(i);
    }
  }
  std::vector<size_t> left(static_cast<size_t>(nsteps) + 2, 0);  // messages not done, per step
  for (const PMsg& m : sends) ++left[size_t(m.step)];
  for (const PMsg& m : recvs) ++left[size_t(m.step)];
  int low = 0;  // the oldest step with messages left
  auto advance = [&] {
    while (low < nsteps && left[size_t(low)] == 0) ++low;
  };
  advance();
  // A staged send is done with its memory once copied into its slot (posted); a direct one
  // only when it completed.
  auto ready = [&](const PMsg& m) {
    for (uint32_t d : m.dep_recvs)
      if (!recvs[d].done) return false;
    for (uint32_t d : m.dep_sends)
      if (!(peers_[size_t(sends[d].lane)].direct ? sends[d].done : sends[d].posted)) return false;
    return true;
  };
  // A direct receive (plain copy on a direct lane) writes its memory from the moment it is
  // posted: it is posted only once ready, and applying it moves nothing.
  auto direct_recv = [&](const PMsg& m) { return !m.reduce && peers_[size_t(m.lane)].direct; };
  std::vector<std::pair<uint32_t, int>> unapplied;  // (receive, slot) completed, waiting on their deps
  auto apply = [&](uint32_t idx, int slot) {
    PMsg& m = recvs[idx];
    const PeerState& ps = peers_[size_t(m.lane)];
    const std::byte* src = ps.region->data() + ps.recv_base + size_t(slot) * ps.slot_bytes;
    if (m.reduce) reduce(dtype, op, m.ptr, m.ptr, src, m.bytes / esize);
    else if (!ps.direct) std::memcpy(m.ptr, src, m.bytes);
    m.done = true;
    --left[size_t(m.step)];
    q[size_t(m.lane)].free_recv.push_back(slot);
  };
  auto finish = [&](Status s) {
    if (!s.ok()) release_posted(active);
    *result = s.ok() ? s : fail(s);
    return true;
  };

  std::vector<fabric::CompletionQueue*> step_cqs;
  queues_of(active, &step_cqs);
  Completion comps[32];
  uint32_t idle = 0;
  for (;;) {
    bool progressed = false;
    for (int id : active) {
      LaneQ& l = q[size_t(id)];
      PeerState& ps = peers_[size_t(id)];
      const int p = id % world_, slot0 = (id / world_) * k;
      while (l.next_recv < l.recv_q.size() && !l.free_recv.empty() && recvs[l.recv_q[l.next_recv]].step <= low + 1) {
        const int slot = l.free_recv.back();
        const uint32_t idx = l.recv_q[l.next_recv];
        const PMsg& m = recvs[idx];
        const bool direct = direct_recv(m);
        if (direct && !ready(m)) break;
        LocalSlice dst{ps.region, ps.recv_base + size_t(slot) * ps.slot_bytes, m.bytes};
        if (direct) dst = ps.user_slice(m.buf, m.off, m.bytes);
        Status s = ps.ep->post_recv(dst, work_id(seq_, p, true, slot0 + slot));
        if (s.code() == ErrorCode::kResourceExhausted) break;
        if (!s.ok()) return finish(s.with_context("coll: receive from rank " + std::to_string(p)));
        l.free_recv.pop_back();
        l.recv_of[size_t(slot)] = idx;
        ++l.next_recv;
        progressed = true;
      }
      while (l.next_send < l.send_q.size() && !l.free_send.empty()) {
        const uint32_t idx = l.send_q[l.next_send];
        PMsg& m = sends[idx];
        if (m.step > low + 1 || !ready(m)) break;
        const int slot = l.free_send.back();
        LocalSlice src{ps.region, ps.send_base + size_t(slot) * ps.slot_bytes, m.bytes};
        if (ps.direct) src = ps.user_slice(m.buf, m.off, m.bytes);
        else std::memcpy(src.data(), m.ptr, m.bytes);
        Status s = ps.ep->post_send(src, work_id(seq_, p, false, slot0 + slot));
        if (s.code() == ErrorCode::kResourceExhausted) break;
        if (!s.ok()) return finish(s.with_context("coll: send to rank " + std::to_string(p)));
        l.free_send.pop_back();
        l.send_of[size_t(slot)] = idx;
        m.posted = true;
        ++l.next_send;
        progressed = true;
      }
    }
    for (size_t i = 0; i < unapplied.size();) {
      if (ready(recvs[unapplied[i].first])) {
        apply(unapplied[i].first, unapplied[i].second);
        unapplied.erase(unapplied.begin() + long(i));
        progressed = true;
      } else {
        ++i;
      }
    }
    advance();
    if (low >= nsteps) return finish(Status::Ok());

    for (fabric::CompletionQueue* cq : step_cqs) {
      size_t n = cq->poll(comps);
      for (size_t i = 0; i < n; ++i) {
        const Completion& c = comps[i];
        Decoded d = decode(c.id);
        if (d.seq != seq_ || d.peer >= world_ || d.slot >= k * int(kMaxLanes)) continue;  // a leftover
        const int id = d.peer + world_ * (d.slot / k), slot = d.slot % k;
        if (!c.status.ok()) return finish(detail::completion_error(c.status, d.peer));
        progressed = true;
        LaneQ& l = q[size_t(id)];
        if (d.recv) {
          const uint32_t idx = l.recv_of[size_t(slot)];
          if (c.bytes != recvs[idx].bytes) return finish(detail::size_mismatch(d.peer, c.bytes, recvs[idx].bytes));
          if (ready(recvs[idx])) apply(idx, slot);
          else unapplied.emplace_back(idx, slot);
        } else {
          PMsg& m = sends[l.send_of[size_t(slot)]];
          m.done = true;
          --left[size_t(m.step)];
          l.free_send.push_back(slot);
        }
      }
    }
    if (progressed) {
      idle = 0;
      continue;
    }
    Status s = after_empty_poll(&idle, deadline, [&] {
      for (const PMsg& m : recvs)
        if (!m.done) return m.lane % world_;
      return -1;
    });
    if (!s.ok()) return finish(s);
  }
}

}  // namespace lattice::coll
