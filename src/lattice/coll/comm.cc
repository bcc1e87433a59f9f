// The communicator: its staging memory and lanes per epoch (build), the plan cache, and the
// checks every waiting loop makes (deadline, links, membership). The executor that runs plans
// is executor.cc (+ pipeline.cc); the one-sided landing zones are landing.cc (+ twoshot.cc);
// which of them a call takes is chosen once, in choose.cc.
#include "lattice/coll/comm.h"
#include "lattice/coll/comm_internal.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "lattice/cluster/rank_env.h"
#include "lattice/coll/plan/ring_route.h"
#include "lattice/core/log.h"

namespace lattice::coll {


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
  if (landing_) retired_.push_back(std::make_unique<Staging>(Staging{nullptr, std::move(landing_), false, {}}));
  peer_keys_.clear();
  peer_maps_.clear();  // nothing is in flight through them: every store happened at once
  for (CachedPlan& c : plans_) c.used = false;  // ranks and topology may have changed
  epoch_ = group_->epoch();
  world_ = group_->world_size();
  broken_ = Status::Ok();
  // Lane l of peer p (its l-th link; several cables per pair stripe) is peers_[p + world * l].
  peers_.assign(size_t(world_) * kMaxLanes, PeerState{});
  lanes_.assign(size_t(world_), 0);
  cqs_.clear();
  rma_write_ = world_ > 1;
  // More ranks than cores (assuming the worst: all ranks on this host) -> yield early. The
  // cores are the job's as its launcher saw them (LATTICE_LOCAL_CPUS: under taskset or a cpuset
  // fewer than the machine's; 2 ranks sharing one CPU of a 2-core machine spun through each
  // other's time slices at 5.8 tok/s where one rank alone ran 32), else the machine's.
  if (options_.spin_before_yield > 0) {
    spin_before_yield_ = uint32_t(options_.spin_before_yield);
  } else {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    if (auto local = cluster::env_int(cluster::env::kLocalCpus); local.ok() && local->has_value() && **local > 0)
      cores = unsigned(**local);
    // Measured at 4 ranks on 2 cores (f32 all-reduce, 8 B): yielding after the first empty
    // poll took tcp from ~120 us to ~45 us and shm from ~10 us to ~7 us; a tcp poll is a
    // recv() per link, so 32 empty polls cost more than the message itself.
    spin_before_yield_ = unsigned(world_) > cores ? 1 : ~0u;
  }
  if (world_ > (1 << kPeerBits)) return InvalidArgument("coll: world size above 4096");
  const int k = options_.slots_per_peer;
  // Group lanes by provider: one region per provider.
  std::map<fabric::Provider*, std::vector<int>> by_provider;
  std::vector<fabric::Provider*> first_link_providers;
  for (int p = 0; p < world_; ++p) {
    if (p == rank()) continue;
    auto links = group_->links(p);
    if (links.empty()) {
      // A partial mesh (a ring of cables): collectives route around a ring (plan/ring_route.h).
      rma_write_ = false;
      continue;
    }
    // The landing-zone paths use each pair's first link and spin on local memory: they need
    // writes that land without the target's CPU. (tcp lands writes on the target's thread
    // during its polls: at 4 ranks on 2 cores, flag spinning there cost milliseconds.)
    const cluster::Link& first = links.front();
    if (!first.provider->caps().rma_write || !first.provider->caps().rma_write_passive) rma_write_ = false;
    if (std::find(first_link_providers.begin(), first_link_providers.end(), first.provider) == first_link_providers.end())
      first_link_providers.push_back(first.provider);
    lanes_[size_t(p)] = int(std::min<size_t>(links.size(), kMaxLanes));
    for (int lane = 0; lane < lanes_[size_t(p)]; ++lane) {
      const cluster::Link& l = links[size_t(lane)];
      const int id = p + world_ * lane;
      by_provider[l.provider].push_back(id);
      peers_[size_t(id)].ep = l.endpoint;
      peers_[size_t(id)].cqs[0] = l.send_cq;
      peers_[size_t(id)].cqs[1] = l.recv_cq;
      for (auto* cq : {l.send_cq, l.recv_cq})
        if (std::find(cqs_.begin(), cqs_.end(), cq) == cqs_.end()) cqs_.push_back(cq);
    }
  }
  for (auto& [prov, peers] : by_provider) {
    auto st = std::make_unique<Staging>();
    st->provider = prov;
    // Direct lanes send from the caller's buffers (no send slots) and take larger messages:
    // over tcp each message costs a completion round and wake-ups (4 ranks, 2 MiB all-reduce:
    // 7.4 ms of CPU per call in 256 KiB messages, 5.3 ms in 1 MiB ones).
    const bool direct = st->direct = options_.zero_copy && prov->caps().release_buffer;
    const size_t chunk = direct ? std::max(options_.chunk_bytes, options_.direct_chunk_bytes) : options_.chunk_bytes;
    const int send_slots = direct ? 0 : k;
    size_t bytes = peers.size() * size_t(send_slots + k) * chunk;
    if (prov->caps().max_msg && prov->caps().max_msg < chunk)
      return InvalidArgument("coll: chunk_bytes above the provider's max_msg");
    auto region = prov->allocate_memory(bytes, fabric::kLocalRead | fabric::kLocalWrite | fabric::kRemoteWrite);
    if (!region.ok()) return region.status().with_context("coll: staging of " + std::to_string(bytes) + " bytes");
    st->region = std::move(region).value();
    size_t off = 0;
    for (int p : peers) {
      PeerState& ps = peers_[size_t(p)];
      ps.region = st->region.get();
      ps.staging = st.get();
      ps.direct = direct;
      ps.slot_bytes = chunk;
      ps.send_base = off;
      ps.recv_base = off + size_t(send_slots) * chunk;
      off += size_t(send_slots + k) * chunk;
      ps.recv_msg.assign(size_t(k), 0);
    }
    staging_.push_back(std::move(st));
  }
  // Landing zones are set up by the first one-sided all-reduce (collective there), so create()
  // itself never waits for peers.
  rma_capable_ = rma_write_ && first_link_providers.size() == 1 && (options_.rma_zone_bytes > 0 || options_.twoshot_chunk_bytes > 0);
  // The whole link graph (the same on every rank): a full mesh, or the ring to route on.
  full_mesh_ = true;
  for (int a = 0; a < world_ && full_mesh_; ++a)
    for (int b = a + 1; b < world_ && full_mesh_; ++b) full_mesh_ = group_->pair_linked(a, b);
  route_ = {};
  if (!full_mesh_) {
    route_ = plan::find_route(world_, [this](int a, int b) { return group_->pair_linked(a, b); });
    rma_capable_ = false;
  }
  return Status::Ok();
}

Result<const plan::Plan*> Communicator::plan_for(const plan::Shape& shape, Algorithm algo) {
  LATTICE_RETURN_IF_ERROR(refresh());
  auto same = [&](const CachedPlan& c) {
    return c.used && c.algo == algo && c.shape.op == shape.op && c.shape.rank == shape.rank &&
           c.shape.world == shape.world && c.shape.count == shape.count && c.shape.root == shape.root &&
           c.shape.in_place == shape.in_place;
  };
  for (const CachedPlan& c : plans_)
    if (same(c)) return &c.plan;
  Result<plan::Plan> p = plan::Plan{};
  if (full_mesh_) {
    p = plan::build(shape, algo);
  } else if (route_.order.empty()) {
    // A partial mesh: everything goes along a route through the linked pairs.
    return Unavailable(std::string("coll: ") + std::string(to_string(shape.op)) +
                       ": the topology has no ring or path through every rank over its links");
  } else if (algo != Algorithm::kRing) {
    return InvalidArgument("coll: algorithm " + std::string(to_string(algo)) +
                           " needs a full mesh; this topology only allows ring");
  } else {
    p = plan::build_on_route(shape, route_);
  }
  if (!p.ok()) return p.status();
  CachedPlan& c = plans_[plans_next_++ % kCachedPlans];
  c.shape = shape;
  c.algo = algo;
  c.plan = std::move(p).value();
  c.extents = plan::extents(c.plan);
  c.used = true;
  return &c.plan;
}

Status Communicator::fail(Status s) {
  broken_ = s;
  return s;
}

Status Communicator::check_links() {
  for (size_t id = 0; id < peers_.size(); ++id) {
    const int p = int(id % size_t(world_));
    // Every collective involves every rank: a member the group declared dead fails it even
    // when this rank has no link to it (a ring).
    if (id < size_t(world_) && p != rank() && !group_->peer_alive(p))
      return PeerLost("coll: rank " + std::to_string(p) + " was declared dead by the cluster", p);
    fabric::Endpoint* ep = peers_[id].ep;
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

// Oversubscribed hosts (more ranks than cores, as on a 2-core box with 4 ranks) need the peer
// a loop waits for to run: after_empty_poll gives the core away after a short spin. On an idle
// core sched_yield returns at once, so this costs little when the peer is running elsewhere.
// (Sleeping in poll() on the step's sockets instead, as OpenMPI does, was measured at 4 ranks
// over tcp: no less CPU per call and no faster, so the executors keep spinning.)
Status Communicator::idle_check(Deadline deadline, int waiting_on) {
  if (deadline.expired())
    return waiting_on >= 0 ? Timeout("coll: deadline passed waiting on rank " + std::to_string(waiting_on), waiting_on)
                           : Timeout("coll: deadline passed");
  return check_links();
}

}  // namespace lattice::coll
