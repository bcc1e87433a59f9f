#include "lattice/sim/des.h"

#include <algorithm>
#include <deque>

namespace lattice::sim {

namespace {
constexpr int kMaxControllers = 16;
}

Breakdown& Breakdown::operator+=(const Breakdown& o) {
  compute_us += o.compute_us;
  weights_us += o.weights_us;
  latency_us += o.latency_us;
  bandwidth_us += o.bandwidth_us;
  sync_us += o.sync_us;
  return *this;
}

Breakdown Breakdown::scaled(double f) const {
  return {compute_us * f, weights_us * f, latency_us * f, bandwidth_us * f, sync_us * f};
}

Des::Des(int world, std::vector<Cable> cables)
    : world_(world),
      cables_(std::move(cables)),
      stats_(cables_.size()),
      pair_cables_(world, std::vector<std::vector<int>>(world)),
      next_cable_(world, std::vector<int>(world, 0)),
      wire_ab_(cables_.size()),
      wire_ba_(cables_.size()),
      controller_free_(static_cast<size_t>(world) * kMaxControllers, 0),
      clock_(world, 0),
      worked_(world, 0),
      quiet_(world, 0),
      parts_(world) {
  for (size_t c = 0; c < cables_.size(); ++c) {
    pair_cables_[cables_[c].a][cables_[c].b].push_back(static_cast<int>(c));
    pair_cables_[cables_[c].b][cables_[c].a].push_back(static_cast<int>(c));
  }
}

bool Des::linked(int i, int j) const { return i != j && !pair_cables_[i][j].empty(); }

bool Des::full_mesh() const {
  for (int i = 0; i < world_; ++i)
    for (int j = i + 1; j < world_; ++j)
      if (!linked(i, j)) return false;
  return true;
}

double Des::now() const { return *std::max_element(clock_.begin(), clock_.end()); }

void Des::work(int r, double us, bool bandwidth_bound, double quiet_us) {
  clock_[r] += us;
  worked_[r] += us;
  quiet_[r] += quiet_us < 0 ? us : quiet_us;
  (bandwidth_bound ? parts_[r].weights_us : parts_[r].compute_us) += us;
}

double Des::take_work(int r, double* quiet_us) {
  const double w = worked_[r];
  if (quiet_us) *quiet_us = quiet_[r];
  worked_[r] = 0;
  quiet_[r] = 0;
  return w;
}

void Des::barrier() {
  const double t = now();
  for (int r = 0; r < world_; ++r) {
    parts_[r].sync_us += t - clock_[r];
    clock_[r] = t;
  }
}

void Des::wait(int r, double us) {
  clock_[r] += us;
  parts_[r].sync_us += us;
}

void Des::reset_counters() {
  std::fill(stats_.begin(), stats_.end(), CableStats{});
  std::fill(parts_.begin(), parts_.end(), Breakdown{});
}

double Des::Wire::reserve(double t, double us) {
  // The first interval that ends after t; walk on until a gap of `us` opens.
  auto it = std::lower_bound(busy.begin(), busy.end(), t, [](const auto& b, double x) { return b.second <= x; });
  double start = t;
  while (it != busy.end() && it->first < start + us) {
    start = std::max(start, it->second);
    ++it;
  }
  const double end = start + us;
  // Coalesce with the neighbours it touches (steady traffic stays one interval).
  const bool join_prev = it != busy.begin() && std::prev(it)->second >= start;
  const bool join_next = it != busy.end() && it->first <= end;
  if (join_prev && join_next) {
    std::prev(it)->second = it->second;
    busy.erase(it);
  } else if (join_prev) {
    std::prev(it)->second = end;
  } else if (join_next) {
    it->first = start;
  } else {
    busy.insert(it, {start, end});
  }
  return start;
}

void Des::Wire::forget_before(double t) {
  auto it = std::lower_bound(busy.begin(), busy.end(), t, [](const auto& b, double x) { return b.second <= x; });
  busy.erase(busy.begin(), it);
}

Result<Des::Delivery> Des::deliver(int from, int to, double bytes, double t) {
  const auto& cs = pair_cables_[from][to];
  if (cs.empty())
    return Unavailable("sim: ranks " + std::to_string(from) + " and " + std::to_string(to) +
                       " have no cable between them (the schedule needs one)");
  int& next = next_cable_[from][to];
  const int c = cs[static_cast<size_t>(next++) % cs.size()];
  const Cable& cable = cables_[c];
  const LinkModel& m = cable.model;
  const bool ab = cable.a == from;
  Wire& wire = ab ? wire_ab_[c] : wire_ba_[c];
  Wire& back = ab ? wire_ba_[c] : wire_ab_[c];
  if (wire.busy.size() + back.busy.size() > 256) {
    // Nothing is posted before the earliest clock again: keep the lists short.
    const double horizon = *std::min_element(clock_.begin(), clock_.end());
    wire.forget_before(horizon);
    back.forget_before(horizon);
  }
  const int ctl = ab ? cable.controller_a : cable.controller_b;
  double* ctl_free = ctl >= 0 && ctl < kMaxControllers ? &controller_free_[static_cast<size_t>(from) * kMaxControllers + ctl]
                                                        : nullptr;
  const double serial = m.wire_bytes(bytes) / (m.gbytes_s * 1e3);
  double start = ctl_free ? std::max(t, *ctl_free) : t;
  start = wire.reserve(start, serial);
  if (ctl_free) *ctl_free = std::max(*ctl_free, start + serial);
  (ab ? stats_[c].bytes_ab : stats_[c].bytes_ba) += bytes;
  stats_[c].busy_us += serial;
  Delivery d{start + serial + m.latency_us, m.latency_us, serial, 0};
  if (m.staged()) {
    // The receiver's ack after every ack_every slots, each a slot on the way back, sent when
    // the slot it answers has arrived; the message's end is acked by the next slot going back
    // (or, on an idle way back, later: off every path). The last slot is staged once the ack of
    // the slot `window` before it is back (fabric/verbs/chunk_tx.cc, pump_sends).
    const double n = m.slots(bytes), slot_us = m.slot_bytes / (m.gbytes_s * 1e3);
    const double every = std::max(1, m.ack_every), need = m.window > 0 ? n - m.window : 0;
    d.completes = t;
    for (double k = every; k <= n; k += every) {
      const double heard = start + k * slot_us + m.latency_us;
      const double sent = back.reserve(heard, slot_us);
      stats_[c].busy_us += slot_us;
      if (need > 0 && k >= need && d.completes == t) d.completes = sent + slot_us + m.latency_us;
    }
  }
  return d;
}

Status Des::send(int from, int to, double bytes) {
  if (from == to) return Status::Ok();
  const auto& cs = pair_cables_[from][to];
  if (cs.empty()) return Unavailable("sim: no cable between ranks " + std::to_string(from) + " and " + std::to_string(to));
  const double post = cables_[cs[0]].model.per_message_us;
  clock_[from] += post;
  parts_[from].sync_us += post;
  LATTICE_ASSIGN_OR_RETURN(Delivery d, deliver(from, to, bytes, clock_[from]));
  const double wait = std::max(0.0, d.arrival - clock_[to]);
  // What the receiver waits for: the wire first, then whatever the sender was still doing.
  const double lat = std::min(wait, d.latency), bw = std::min(wait - lat, d.serial);
  parts_[to].latency_us += lat;
  parts_[to].bandwidth_us += bw;
  parts_[to].sync_us += wait - lat - bw;
  clock_[to] = std::max(clock_[to], d.arrival);
  if (d.completes > clock_[from]) {
    // A staged send beyond the window completes when acks free its last slot (coll::send
    // waits for it).
    const double w = d.completes - clock_[from], l = std::min(w, d.latency);
    parts_[from].latency_us += l;
    parts_[from].bandwidth_us += w - l;
    clock_[from] = d.completes;
  }
  return Status::Ok();
}

Status Des::run(const std::vector<coll::plan::Plan>& plans, double elem_bytes, double sync_us, double reduce_gbs) {
  if (static_cast<int>(plans.size()) != world_) return InvalidArgument("sim: one plan per rank");
  for (int r = 0; r < world_; ++r) {
    clock_[r] += sync_us;
    parts_[r].sync_us += sync_us;
  }
  struct Arrival {
    double t, latency, serial;
  };
  // Messages in flight, matched in order per (from, to) pair as ordered endpoints match them:
  // the plans of different ranks need not line up step by step (a tree broadcast does not).
  std::vector<std::vector<std::deque<Arrival>>> inflight(world_, std::vector<std::deque<Arrival>>(world_));
  std::vector<size_t> next(world_, 0);
  std::vector<char> posted(world_, 0);
  std::vector<double> posted_at(world_, 0);
  std::vector<Arrival> completes(world_);  // when a rank's sends this step complete (staged links)
  for (;;) {
    bool progress = false, done = true;
    for (int r = 0; r < world_; ++r) {
      if (next[r] >= plans[r].steps.size()) continue;
      done = false;
      const auto& step = plans[r].steps[next[r]];
      if (!posted[r]) {
        double t = clock_[r];
        for (const auto& x : step.sends) {
          if (x.peer < 0 || x.peer >= world_ || x.peer == r)
            return InvalidArgument("sim: a plan sends to rank " + std::to_string(x.peer));
          const auto& cs = pair_cables_[r][x.peer];
          if (cs.empty())
            return Unavailable("sim: the schedule sends from rank " + std::to_string(r) + " to " + std::to_string(x.peer) +
                               ", which no cable joins");
          t += cables_[cs[0]].model.per_message_us;
          LATTICE_ASSIGN_OR_RETURN(Delivery d, deliver(r, x.peer, x.n * elem_bytes, t));
          inflight[r][x.peer].push_back({d.arrival, d.latency, d.serial});
          if (d.completes > completes[r].t) completes[r] = {d.completes, d.latency, d.serial};
        }
        posted[r] = 1;
        posted_at[r] = t;
        progress = true;
      }
      std::vector<size_t> need(world_, 0);
      for (const auto& x : step.recvs) {
        if (x.peer < 0 || x.peer >= world_) return InvalidArgument("sim: a plan receives from rank " + std::to_string(x.peer));
        ++need[x.peer];
      }
      bool ready = true;
      for (int p = 0; p < world_ && ready; ++p) ready = inflight[p][r].size() >= need[p];
      if (!ready) continue;
      const double start = clock_[r];
      // A step is done when its messages are: the receives arrived and the sends completed (on a
      // staged link when their last slots are staged).
      Arrival last{start, 0, 0};
      if (completes[r].t > last.t) last = completes[r];
      double reduce_bytes = 0;
      for (const auto& x : step.recvs) {
        const Arrival a = inflight[x.peer][r].front();
        inflight[x.peer][r].pop_front();
        if (a.t > last.t) last = a;
        if (x.reduce) reduce_bytes += x.n * elem_bytes;
      }
      for (const auto& l : step.after) reduce_bytes += l.n * elem_bytes;
      const double end = std::max(posted_at[r], last.t);
      const double wait = end - start;
      const double lat = std::min(wait, last.latency), bw = std::min(wait - lat, last.serial);
      parts_[r].latency_us += lat;
      parts_[r].bandwidth_us += bw;
      parts_[r].sync_us += wait - lat - bw;
      const double red = reduce_gbs > 0 ? 2 * reduce_bytes / (reduce_gbs * 1e3) : 0;
      parts_[r].compute_us += red;
      clock_[r] = end + red;
      ++next[r];
      posted[r] = 0;
      completes[r] = {};
      progress = true;
    }
    if (done) break;
    if (!progress) return Internal("sim: the ranks' schedules wait for messages nobody sends");
  }
  return Status::Ok();
}

}  // namespace lattice::sim
