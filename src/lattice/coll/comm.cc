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

using fabric::Completion;
using fabric::LocalSlice;
using fabric::MemoryRegion;

using detail::decode;
using detail::Decoded;
using detail::kPeerBits;
using detail::kSeqMask;
using detail::work_id;

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
  if (landing_) retired_.push_back(std::make_unique<Staging>(Staging{nullptr, std::move(landing_)}));
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
  // More ranks than cores (assuming the worst: all ranks on this host) -> yield early.
  if (options_.spin_before_yield > 0) {
    spin_before_yield_ = uint32_t(options_.spin_before_yield);
  } else {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
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
    if (all == 1) peer_maps_ = std::move(maps);
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
  }
  while (done < writes) {
    Status r = reap();
    if (!r.ok()) return fail(r);
    if (done < writes && deadline.expired()) return fail(Timeout("coll: one-sided writes did not complete"));
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

// A peer whose mapped landing zone is gone let go of its communicator. Only a peer this rank
// still awaits something from is lost that way (as a posted write to the zone would fail with
// kAccessDenied): one that finished the call may leave before we read what it left us, and
// that stays readable through our mapping.
Status Communicator::zone_gone(int peer) const {
  if (size_t(peer) < peer_maps_.size() && peer_maps_[size_t(peer)] && !peer_maps_[size_t(peer)]->live())
    return PeerLost("coll: rank " + std::to_string(peer) + " lost: its landing zone is gone mid-call", peer);
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
