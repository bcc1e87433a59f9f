// The discrete-event core: ranks with their own clocks, cables as resources that carry one
// message at a time in each direction, and collectives that run coll/plan's real schedule step by
// step. A step of a rank starts when its clock reaches it; its sends leave one after the other
// (each costs the sender its link's per-message time), queue behind earlier messages on the
// cable (and behind the other cables sharing its Thunderbolt controller), take the bytes'
// serialisation time and the link's latency; the step ends when every message it waits for has
// arrived (and, on staged links, every ack of its sends is back), then its local reductions run.
// Times are microseconds.
//
// Every rank's time is split into what it was doing: compute (arithmetic-bound work), weight
// reads (bandwidth-bound work), link latency, link bandwidth, and synchronisation (the engine's
// own cost per collective, posting messages, waiting for slower peers).
#pragma once

#include <string>
#include <vector>

#include "lattice/coll/plan/plan.h"
#include "lattice/core/status.h"
#include "lattice/sim/link.h"

namespace lattice::sim {

struct Breakdown {
  double compute_us = 0, weights_us = 0, latency_us = 0, bandwidth_us = 0, sync_us = 0;
  double total() const { return compute_us + weights_us + latency_us + bandwidth_us + sync_us; }
  Breakdown& operator+=(const Breakdown& o);
  Breakdown scaled(double f) const;
};

struct Cable {
  int a = 0, b = 0;  // ranks
  LinkModel model;
  int controller_a = -1, controller_b = -1;  // Thunderbolt controller at each end (-1: none)
};

struct CableStats {
  double bytes_ab = 0, bytes_ba = 0;  // bytes carried each way
  double busy_us = 0;                 // serialisation time, both ways
};

class Des {
 public:
  // world ranks; cables between them (several may join one pair: messages alternate).
  Des(int world, std::vector<Cable> cables);

  int world() const { return world_; }
  bool linked(int i, int j) const;
  bool full_mesh() const;
  const std::vector<Cable>& cables() const { return cables_; }
  const std::vector<CableStats>& cable_stats() const { return stats_; }
  double clock(int r) const { return clock_[r]; }
  double now() const;  // the latest clock
  const Breakdown& breakdown(int r) const { return parts_[r]; }

  // Rank r works for `us`, bandwidth-bound (weights) or arithmetic-bound (compute); `quiet_us`
  // is what that work would take with no other core busy (negative: `us`).
  void work(int r, double us, bool bandwidth_bound, double quiet_us = -1);
  // What rank r worked (work()) since the last take_work(r), which starts the count again; and
  // its quiet time over the same work.
  double take_work(int r, double* quiet_us = nullptr);
  // Every rank's clock advances to the latest one (the time they wait is synchronisation).
  void barrier();
  // Rank r spends `us` on synchronisation of its own (an engine's per-collective cost).
  void wait(int r, double us);
  // Runs `plans[r]` (one per rank, coll/plan's schedule of one collective) with `elem_bytes`
  // per element; `sync_us` is the engine's cost per rank before it starts; `reduce_gbs` the
  // speed of local reductions (bytes of input per second / 1e9).
  Status run(const std::vector<coll::plan::Plan>& plans, double elem_bytes, double sync_us, double reduce_gbs);
  // One message from `from` to `to` that `to` waits for (point to point, pipeline stages).
  Status send(int from, int to, double bytes);
  // Forgets traffic counters and parts (the clocks stay).
  void reset_counters();

 private:
  // Posts a message at time t on the sender's side; returns its arrival time and the cable's
  // latency and serialisation time, and on a staged link (link.h) when the send completes: its
  // last slot staged, which a message beyond the window waits for acks to free (0 elsewhere:
  // the send completes when it leaves).
  struct Delivery {
    double arrival = 0, latency = 0, serial = 0, completes = 0;
  };
  Result<Delivery> deliver(int from, int to, double bytes, double t);

  // One direction of a cable: when it is busy (sorted, disjoint). An ack is reserved at the
  // future time its data arrives, so a later reservation may take an earlier gap.
  struct Wire {
    std::vector<std::pair<double, double>> busy;
    // The earliest start >= t of `us` free on the wire, reserved.
    double reserve(double t, double us);
    // Forgets what ended before t (nothing is reserved earlier than every rank's clock).
    void forget_before(double t);
  };

  int world_;
  std::vector<Cable> cables_;
  std::vector<CableStats> stats_;
  std::vector<std::vector<std::vector<int>>> pair_cables_;  // [i][j] -> cable indices
  std::vector<std::vector<int>> next_cable_;                // round robin per pair
  std::vector<Wire> wire_ab_, wire_ba_;                     // each direction of each cable
  std::vector<double> controller_free_;                     // per (rank, controller) slot
  std::vector<double> clock_;
  std::vector<double> worked_;  // work() since take_work()
  std::vector<double> quiet_;   // and its quiet time
  std::vector<Breakdown> parts_;
};

}  // namespace lattice::sim
