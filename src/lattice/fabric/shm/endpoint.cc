// Endpoints of the shm provider: one ring per direction (each side writes only its own
// segment and reads the peer's read-only), rendezvous for large sends, one-sided operations
// as direct copies, sticky failure.
#include <poll.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "lattice/core/random.h"
#include "lattice/fabric/shm/endpoint.h"

namespace lattice::fabric::shm {

namespace {

template <class T>
T load_relaxed(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_relaxed);
}
template <class T>
T load_acquire(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_acquire);
}
template <class T>
void store_release(T& v, T x) {
  std::atomic_ref<T>(v).store(x, std::memory_order_release);
}

std::string str(uint64_t v) { return std::to_string(v); }

}  // namespace

ShmEndpoint::ShmEndpoint(ShmProvider* provider, ShmCq* send_cq, ShmCq* recv_cq, const EndpointOptions& options)
    : provider_(provider), send_cq_(send_cq), recv_cq_(recv_cq), options_(options) {
  if (options_.peer_timeout < kMinPeerTimeout) options_.peer_timeout = kMinPeerTimeout;
}

Status ShmEndpoint::init() {
  while (nonce_ == 0) nonce_ = secure_random_u64();
  LATTICE_ASSIGN_OR_RETURN(segment_, create_segment("lattice-shm-endpoint", kEndpointSegmentBytes));
  EndpointHeader* h = my_header();
  h->magic = kEndpointMagic;
  h->version = kVersion;
  h->slot_bytes = kSlotBytes;
  h->n_slots = kSlots;
  h->max_rndv = kMaxRndv;
  h->pid = provider_->pid();
  h->nonce = nonce_;
  send_cq_->attach(this);
  if (recv_cq_ != send_cq_) recv_cq_->attach(this);
  provider_->register_endpoint(this);
  return Status::Ok();
}

ShmEndpoint::~ShmEndpoint() {
  if (segment_.map == nullptr) return;  // init() failed before anything was attached
  provider_->unregister_endpoint(this);
  send_cq_->detach(this);
  if (recv_cq_ != send_cq_) recv_cq_->detach(this);
  {
    std::lock_guard lock(mu_);
    if (!failed_) {
      store_release(my_header()->state, static_cast<uint32_t>(kStateClosed));
      notify_peer();
      error_ = Cancelled("shm: endpoint destroyed");
      failed_ = true;
      flush_locked(error_);
    }
  }
  if (int fd = peer_pidfd_.load(); fd >= 0) close(fd);
  close_segment(segment_);
}

std::vector<std::byte> ShmEndpoint::local_address() const {
  AddressBlob b{};
  b.magic = kBlobMagic;
  b.version = kVersion;
  b.pid = provider_->pid();
  b.host_id = host_id();
  b.provider_fd = provider_->segment_fd();
  b.provider_ino = provider_->segment_ino();
  b.provider_nonce = provider_->nonce();
  b.endpoint_fd = segment_.fd;
  b.endpoint_ino = segment_.ino;
  b.endpoint_nonce = nonce_;
  return encode_blob(b);
}

Status ShmEndpoint::connect(std::span<const std::byte> peer_address, Deadline deadline) {
  const int rank = options_.peer_rank;
  std::unique_lock lock(mu_);
  if (failed_) return error_;
  if (connected_) return InvalidArgument("shm: endpoint is already connected");
  auto blob = decode_blob(peer_address, rank);
  if (!blob.ok()) return fail_locked(blob.status(), false);
  const AddressBlob& b = *blob;
  auto seg = map_peer_segment(b.pid, b.endpoint_fd, b.endpoint_ino, 0, kEndpointSegmentBytes, false, rank);
  if (!seg.ok()) return fail_locked(seg.status().with_context("shm connect"), false);
  const auto* ph = reinterpret_cast<const EndpointHeader*>((*seg)->base());
  if (ph->magic != kEndpointMagic || ph->nonce != b.endpoint_nonce || ph->pid != b.pid)
    return fail_locked(Corrupt("shm connect: the peer's endpoint segment does not match its address", rank), false);
  if (ph->version != kVersion || ph->slot_bytes != kSlotBytes || ph->n_slots != kSlots || ph->max_rndv != kMaxRndv)
    return fail_locked(Corrupt("shm connect: the peer speaks protocol version " + str(ph->version) + " with " +
                                   str(ph->n_slots) + "x" + str(ph->slot_bytes) + " slots; this side version " +
                                   str(kVersion),
                               rank),
                       false);
  auto db = map_peer_segment(b.pid, b.provider_fd, b.provider_ino, 0, kPage, true, rank);
  if (!db.ok()) return fail_locked(db.status().with_context("shm connect"), false);
  auto dir = map_peer_segment(b.pid, b.provider_fd, b.provider_ino, kPage, kProviderSegmentBytes - kPage, false, rank);
  if (!dir.ok()) return fail_locked(dir.status().with_context("shm connect"), false);
  const auto* prov = reinterpret_cast<const ProviderHeader*>((*dir)->base());
  if (prov->magic != kProviderMagic || prov->version != kVersion || prov->nonce != b.provider_nonce ||
      prov->n_entries != kDirEntries)
    return fail_locked(Corrupt("shm connect: the peer's provider segment does not match its address", rank), false);
  if (b.pid != provider_->pid()) {
    int pfd = static_cast<int>(syscall(SYS_pidfd_open, b.pid, 0));
    if (pfd < 0 && errno == ESRCH)
      return fail_locked(PeerLost("shm connect: peer process " + str(b.pid) + " is gone", rank), false);
    // Without pidfds (old kernels) the heartbeat alone detects a dead peer.
    peer_pidfd_.store(pfd);
  }
  // Can we read the peer's memory with cross-memory attach? Yama's ptrace_scope=1 (common)
  // refuses it between siblings; then large sends from caller memory travel through the ring
  // instead of by rendezvous. The peer reads the answer from our header.
  if (provider_->cma_allowed()) {
    uint64_t probe = 0;
    iovec l{&probe, sizeof probe};
    iovec r{reinterpret_cast<void*>(prov->probe_addr), sizeof probe};
    if (process_vm_readv(b.pid, &l, 1, &r, 1, 0) == sizeof probe && probe == kProviderMagic)
      store_release(my_header()->cma_ok, uint32_t{1});
  }
  peer_pid_ = b.pid;
  peer_seg_ = std::move(*seg);
  peer_doorbell_ = std::move(*db);
  peer_dir_ = std::move(*dir);
  peer_heartbeat_ = load_acquire(prov->heartbeat);
  peer_seen_ = Clock::now();
  my_header()->peer_nonce = b.endpoint_nonce;
  connected_ = true;
  connected_hint_.store(true, std::memory_order_release);
  lock.unlock();
  provider_->poke_watchdog();
  (void)deadline;  // nothing to wait for: the peer reads our ring whenever it connects
  return Status::Ok();
}

Status ShmEndpoint::status() const {
  std::lock_guard lock(mu_);
  return failed_ ? error_ : Status::Ok();
}

// ---- Helpers ----

Status ShmEndpoint::check_usable_locked() const {
  if (failed_) return error_;
  if (!connected_) return InvalidArgument("shm: endpoint is not connected");
  return Status::Ok();
}

Result<ShmRegion*> ShmEndpoint::local_region(const LocalSlice& s, const char* what) const {
  if (s.region == nullptr) return InvalidArgument(std::string("shm: ") + what + ": slice without a region");
  auto* r = dynamic_cast<ShmRegion*>(s.region);
  if (r == nullptr || r->provider() != provider_)
    return InvalidArgument(std::string("shm: ") + what + ": the region was not registered with this provider");
  if (s.offset > r->size() || s.length > r->size() - s.offset)
    return InvalidArgument(std::string("shm: ") + what + ": slice [" + str(s.offset) + ", +" + str(s.length) +
                           ") is outside its " + str(r->size()) + "-byte region");
  return r;
}

Status ShmEndpoint::fail_locked(Status s, bool tell_peer) {
  if (failed_) return error_;
  error_ = std::move(s);
  failed_ = true;
  if (tell_peer && segment_.map) {
    my_header()->reason = static_cast<uint32_t>(error_.code());
    store_release(my_header()->state, static_cast<uint32_t>(kStateFailed));
    notify_peer();
  }
  flush_locked(error_);
  return error_;
}

void ShmEndpoint::flush_locked(const Status& s) {
  for (auto& e : sq_) {
    if (!e.done) {
      e.done = true;
      e.c.status = s;
      e.c.bytes = 0;
    }
  }
  release_sq_locked();
  tx_pending_.clear();
  rndv_wait_.clear();
  for (const RxOp& rx : rq_) recv_cq_->push(Completion{rx.id, Opcode::kRecv, s, 0, 0});
  rq_.clear();
  rx_active_ = false;
}

void ShmEndpoint::release_sq_locked() {
  while (!sq_.empty() && sq_.front().done) {
    link_->count(sq_.front().c);
    send_cq_->push(sq_.front().c);
    sq_.pop_front();
    ++sq_front_seq_;
  }
}

void ShmEndpoint::complete_now_locked(WorkId id, Opcode op, Status st, size_t bytes) {
  if (sq_.empty()) {
    Completion c{id, op, std::move(st), bytes, 0};
    link_->count(c);
    send_cq_->push(std::move(c));
    ++sq_front_seq_;
    return;
  }
  sq_.push_back(SqEntry{Completion{id, op, std::move(st), bytes, 0}, true});
}

uint64_t ShmEndpoint::add_sq_locked(WorkId id, Opcode op, size_t bytes) {
  uint64_t seq = sq_front_seq_ + sq_.size();
  sq_.push_back(SqEntry{Completion{id, op, Status::Ok(), bytes, 0}, false});
  return seq;
}

void ShmEndpoint::finish_sq_locked(uint64_t seq, Status st, size_t bytes) {
  if (seq < sq_front_seq_ || seq - sq_front_seq_ >= sq_.size()) return;
  SqEntry& e = sq_[seq - sq_front_seq_];
  e.done = true;
  e.c.status = std::move(st);
  e.c.bytes = bytes;
}

void ShmEndpoint::notify_peer() {
  if (!peer_doorbell_) return;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  auto* db = reinterpret_cast<DoorbellPage*>(peer_doorbell_->base());
  if (std::atomic_ref<uint32_t>(db->sleepers).load(std::memory_order_relaxed) != 0) wake_doorbell(db);
}

SlotHeader* ShmEndpoint::my_slot(uint64_t pos) const {
  return reinterpret_cast<SlotHeader*>(segment_.map->base() + kPage + (pos % kSlots) * kSlotBytes);
}

const SlotHeader* ShmEndpoint::peer_slot(uint64_t pos) const {
  return reinterpret_cast<const SlotHeader*>(peer_seg_->base() + kPage + (pos % kSlots) * kSlotBytes);
}

// ---- Transmit ----

bool ShmEndpoint::push_locked(TxOp& op) {
  auto ring_has_room = [&] {
    if (tx_head_ - tx_tail_ < kSlots) return true;
    uint64_t t = load_acquire(peer_header()->rx_consumed);
    if (t < tx_tail_ || t > tx_head_) {
      (void)fail_locked(Corrupt("shm: the peer reports consuming slot " + str(t) + " of a ring filled to " + str(tx_head_),
                          options_.peer_rank));
      return false;
    }
    tx_tail_ = t;
    return tx_head_ - tx_tail_ < kSlots;
  };
  auto publish = [&](SlotHeader* s) {
    store_release(s->seq, tx_head_ + 1);
    ++tx_head_;
  };
  switch (op.kind) {
    case kSlotEager: {
      const std::byte* src = op.staged.empty() ? op.region->data() + op.offset : op.staged.data();
      do {
        if (!ring_has_room()) return false;
        size_t frag = std::min(kSlotPayload, op.length - op.pushed);
        SlotHeader* s = my_slot(tx_head_);
        if (frag > 0) std::memcpy(reinterpret_cast<std::byte*>(s) + kSlotHeaderBytes, src + op.pushed, frag);
        s->type = kSlotEager;
        s->frag_bytes = static_cast<uint32_t>(frag);
        s->msg_bytes = op.length;
        s->imm = 0;
        s->flags = op.pushed == 0 ? uint32_t{kFirstFragment} : 0u;
        publish(s);
        op.pushed += frag;
      } while (op.pushed < op.length);
      return true;
    }
    case kSlotImm: {
      if (!ring_has_room()) return false;
      SlotHeader* s = my_slot(tx_head_);
      s->type = kSlotImm;
      s->frag_bytes = 0;
      s->msg_bytes = op.length;
      s->imm = op.imm;
      s->flags = 0;
      publish(s);
      return true;
    }
    case kSlotRndv: {
      if (rndv_sent_ - rndv_acked_ >= kMaxRndv || !ring_has_room()) return false;
      SlotHeader* s = my_slot(tx_head_);
      RndvPayload p{op.region->key(), op.offset, rndv_sent_};
      std::memcpy(reinterpret_cast<std::byte*>(s) + kSlotHeaderBytes, &p, sizeof p);
      s->type = kSlotRndv;
      s->frag_bytes = sizeof p;
      s->msg_bytes = op.length;
      s->imm = 0;
      s->flags = 0;
      ++rndv_sent_;
      rndv_wait_.push_back(op.sq_seq);
      publish(s);
      return true;
    }
  }
  return false;
}

void ShmEndpoint::push_pending_locked() {
  bool pushed = false;
  while (!tx_pending_.empty() && !failed_) {
    TxOp& op = tx_pending_.front();
    uint64_t before = tx_head_;
    bool all = push_locked(op);
    pushed |= tx_head_ != before;
    if (!all) break;
    if (op.kind != kSlotRndv) finish_sq_locked(op.sq_seq, Status::Ok(), op.length);
    tx_pending_.pop_front();
  }
  release_sq_locked();
  if (pushed) notify_peer();
}

void ShmEndpoint::progress_acks_locked() {
  if (rndv_acked_ == rndv_sent_) return;
  uint64_t n = load_acquire(peer_header()->rndv_acked);
  if (n < rndv_acked_ || n > rndv_sent_) {
    (void)fail_locked(Corrupt("shm: the peer acknowledges rendezvous " + str(n) + " of " + str(rndv_sent_) + " sent",
                        options_.peer_rank));
    return;
  }
  for (; rndv_acked_ < n; ++rndv_acked_) {
    const RndvAck& a = peer_header()->acks[rndv_acked_ % kMaxRndv];
    uint64_t bytes = load_relaxed(a.bytes);
    uint64_t code = load_relaxed(a.code);
    uint64_t seq = rndv_wait_.front();
    rndv_wait_.pop_front();
    size_t length = sq_[seq - sq_front_seq_].c.bytes;
    if (code == 0 && bytes == length) {
      finish_sq_locked(seq, Status::Ok(), length);
    } else if (code == 1 && bytes < length) {
      finish_sq_locked(seq,
                       Truncated("shm: the peer's receive buffer took " + str(bytes) + " of " + str(length) + " bytes",
                                 options_.peer_rank),
                       bytes);
    } else {
      (void)fail_locked(Corrupt("shm: malformed rendezvous ack from the peer", options_.peer_rank));
      return;
    }
  }
  release_sq_locked();
  if (!tx_pending_.empty()) push_pending_locked();
}

Status ShmEndpoint::post_send(LocalSlice src, WorkId id) {
  std::lock_guard lock(mu_);
  LATTICE_RETURN_IF_ERROR(check_usable_locked());
  LATTICE_ASSIGN_OR_RETURN(ShmRegion * r, local_region(src, "post_send"));
  if (src.length > kMaxMsg) return InvalidArgument("shm: post_send of " + str(src.length) + " bytes exceeds max_msg");
  if (sq_.size() >= kMaxQueued) return ResourceExhausted("shm: send queue full");
  // Rendezvous lets the receiver copy once from our memory: from a shared region always, from
  // caller memory only if it can attach to this process (it says so in its header).
  const bool rndv = src.length > kEagerMax && (r->shared() || load_acquire(peer_header()->cma_ok) == 1);
  TxOp op{rndv ? kSlotRndv : kSlotEager, id, Opcode::kSend, r, src.offset, src.length, 0, 0, 0, {}};
  if (op.kind == kSlotEager) {
    if (tx_pending_.empty()) {
      // Fast path: the message fits in the ring now and completes at once.
      uint64_t before = tx_head_;
      if (push_locked(op)) {
        complete_now_locked(id, Opcode::kSend, Status::Ok(), src.length);
        notify_peer();
        return Status::Ok();
      }
      if (failed_) return error_;
      if (tx_head_ != before) notify_peer();
    }
    // max_inline: a small queued send is copied now, so the caller may reuse its buffer.
    if (op.pushed == 0 && src.length <= kSlotPayload) op.staged.assign(src.data(), src.data() + src.length);
    op.sq_seq = add_sq_locked(id, Opcode::kSend, src.length);
    tx_pending_.push_back(std::move(op));
    update_hints_locked();
    return Status::Ok();
  }
  op.sq_seq = add_sq_locked(id, Opcode::kSend, src.length);
  tx_pending_.push_back(std::move(op));
  if (tx_pending_.size() == 1) push_pending_locked();
  update_hints_locked();
  return Status::Ok();
}

Status ShmEndpoint::post_recv(LocalSlice dst, WorkId id) {
  std::lock_guard lock(mu_);
  if (failed_) return error_;
  LATTICE_ASSIGN_OR_RETURN(ShmRegion * r, local_region(dst, "post_recv"));
  if (rq_.size() >= kMaxQueued) return ResourceExhausted("shm: receive queue full");
  rq_.push_back(RxOp{id, r, dst.offset, dst.length});
  return Status::Ok();
}

// ---- One-sided ----

Status ShmEndpoint::one_sided_locked(Opcode op, LocalSlice local, RemoteSlice remote, uint64_t a, uint64_t b,
                                     uint32_t imm, WorkId id) {
  LATTICE_RETURN_IF_ERROR(check_usable_locked());
  const char* what = op == Opcode::kWrite      ? "post_write"
                     : op == Opcode::kWriteImm ? "post_write_with_imm"
                     : op == Opcode::kRead     ? "post_read"
                     : op == Opcode::kFetchAdd ? "post_fetch_add"
                                               : "post_compare_swap";
  LATTICE_ASSIGN_OR_RETURN(ShmRegion * lr, local_region(local, what));
  const bool atomic = op == Opcode::kFetchAdd || op == Opcode::kCompareSwap;
  if (atomic) {
    if (local.length != 8) return InvalidArgument(std::string("shm: ") + what + ": the result slice must be 8 bytes");
    if (remote.length != 8 && remote.length != 0)
      return InvalidArgument(std::string("shm: ") + what + ": the remote word must be 8 bytes");
    remote.length = 8;
  } else if (remote.length != local.length) {
    return InvalidArgument(std::string("shm: ") + what + ": local length " + str(local.length) +
                           " differs from remote length " + str(remote.length));
  }
  if (local.length > kMaxMsg) return InvalidArgument(std::string("shm: ") + what + ": longer than max_msg");
  if (sq_.size() >= kMaxQueued) return ResourceExhausted("shm: send queue full");
  (void)lr;

  const uint32_t need = op == Opcode::kRead ? kRemoteRead : atomic ? kRemoteAtomic : kRemoteWrite;
  auto fail_op = [&](Status s) {
    // A bad remote access fails the endpoint (like an RC QP); the post itself succeeded and
    // its completion carries the error.
    uint64_t seq = add_sq_locked(id, op, 0);
    (void)seq;
    (void)fail_locked(std::move(s));
    return Status::Ok();
  };
  auto region = peer_region_locked(remote.key, remote.offset, remote.length, need, what);
  if (!region.ok()) return fail_op(region.status());
  PeerRegion* r = *region;
  if (atomic) {
    if (r->kind != kKindShm)
      return fail_op(AccessDenied(std::string("shm: ") + what +
                                      ": atomics need a region from allocate_memory; this one is caller-registered "
                                      "memory of the peer",
                                  options_.peer_rank));
    if (remote.offset % 8 != 0)
      return fail_op(AccessDenied(std::string("shm: ") + what + ": remote offset " + str(remote.offset) +
                                      " is not 8-byte aligned",
                                  options_.peer_rank));
    std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(r->map->base() + remote.offset));
    uint64_t old;
    if (op == Opcode::kFetchAdd) {
      old = word.fetch_add(a, std::memory_order_seq_cst);
    } else {
      old = a;
      word.compare_exchange_strong(old, b, std::memory_order_seq_cst);
    }
    std::memcpy(local.data(), &old, 8);
    complete_now_locked(id, op, Status::Ok(), 8);
    return Status::Ok();
  }
  Status s = remote_copy_locked(r, remote.offset, local.data(), local.length, op != Opcode::kRead);
  if (!s.ok()) return fail_op(s.with_context(what));
  if (op == Opcode::kWriteImm) {
    // The data has landed; the notice travels through the ring, ordered after earlier sends.
    TxOp t{kSlotImm, id, op, lr, local.offset, local.length, 0, 0, imm, {}};
    t.sq_seq = add_sq_locked(id, op, local.length);
    tx_pending_.push_back(std::move(t));
    if (tx_pending_.size() == 1) push_pending_locked();
    update_hints_locked();
    return Status::Ok();
  }
  complete_now_locked(id, op, Status::Ok(), local.length);
  return Status::Ok();
}

Status ShmEndpoint::post_write(LocalSlice src, RemoteSlice dst, WorkId id) {
  std::lock_guard lock(mu_);
  return one_sided_locked(Opcode::kWrite, src, dst, 0, 0, 0, id);
}

Status ShmEndpoint::post_write_with_imm(LocalSlice src, RemoteSlice dst, uint32_t imm, WorkId id) {
  std::lock_guard lock(mu_);
  return one_sided_locked(Opcode::kWriteImm, src, dst, 0, 0, imm, id);
}

Status ShmEndpoint::post_read(LocalSlice dst, RemoteSlice src, WorkId id) {
  std::lock_guard lock(mu_);
  return one_sided_locked(Opcode::kRead, dst, src, 0, 0, 0, id);
}

Status ShmEndpoint::post_fetch_add(LocalSlice result, RemoteSlice target, uint64_t add, WorkId id) {
  std::lock_guard lock(mu_);
  return one_sided_locked(Opcode::kFetchAdd, result, target, add, 0, 0, id);
}

Status ShmEndpoint::post_compare_swap(LocalSlice result, RemoteSlice target, uint64_t expected, uint64_t desired,
                                      WorkId id) {
  std::lock_guard lock(mu_);
  return one_sided_locked(Opcode::kCompareSwap, result, target, expected, desired, 0, id);
}

// ---- Receive ----

Status ShmEndpoint::rx_rndv_locked(const SlotHeader& h, const std::byte* payload, RxOp& rx, size_t* copied) {
  RndvPayload p;
  std::memcpy(&p, payload, sizeof p);
  if (h.frag_bytes != sizeof p || h.msg_bytes > kMaxMsg || p.index != rx_rndv_next_)
    return Corrupt("shm: malformed rendezvous slot from the peer", options_.peer_rank);
  size_t n = std::min<uint64_t>(h.msg_bytes, rx.length);
  auto region = peer_region_locked(p.src_key, p.src_offset, h.msg_bytes, 0, "rendezvous receive");
  if (!region.ok()) return region.status();
  LATTICE_RETURN_IF_ERROR(
      remote_copy_locked(*region, p.src_offset, rx.region->data() + rx.offset, n, false).with_context("rendezvous"));
  RndvAck& ack = my_header()->acks[p.index % kMaxRndv];
  std::atomic_ref<uint64_t>(ack.bytes).store(n, std::memory_order_relaxed);
  std::atomic_ref<uint64_t>(ack.code).store(h.msg_bytes > rx.length ? 1 : 0, std::memory_order_relaxed);
  ++rx_rndv_next_;
  store_release(my_header()->rndv_acked, rx_rndv_next_);
  *copied = n;
  return Status::Ok();
}

void ShmEndpoint::progress_rx_locked() {
  const int rank = options_.peer_rank;
  bool acked = false;
  const uint64_t start = rx_next_;
  while (!failed_) {
    const SlotHeader* s = peer_slot(rx_next_);
    uint64_t seq = load_acquire(s->seq);
    if (seq != rx_next_ + 1) {
      // Not ready: the slot still holds the previous lap (or nothing yet on the first lap).
      if (seq != (rx_next_ >= kSlots ? rx_next_ + 1 - kSlots : 0))
        (void)fail_locked(Corrupt("shm: ring slot " + str(rx_next_) + " holds sequence " + str(seq), rank));
      break;
    }
    // Copy the header once and validate the copy: the peer's memory may change under us.
    SlotHeader h;
    h.type = load_relaxed(s->type);
    h.frag_bytes = load_relaxed(s->frag_bytes);
    h.msg_bytes = load_relaxed(s->msg_bytes);
    h.imm = load_relaxed(s->imm);
    h.flags = load_relaxed(s->flags);
    const std::byte* payload = reinterpret_cast<const std::byte*>(s) + kSlotHeaderBytes;
    if (h.type == kSlotEager) {
      if (h.frag_bytes > kSlotPayload || h.msg_bytes > kMaxMsg) {
        (void)fail_locked(Corrupt("shm: ring slot with " + str(h.frag_bytes) + "/" + str(h.msg_bytes) + " bytes", rank));
        break;
      }
      if (!rx_active_) {
        if (!(h.flags & kFirstFragment)) {
          (void)fail_locked(Corrupt("shm: message fragment without its start", rank));
          break;
        }
        if (rq_.empty()) break;  // no receive posted: the message waits in the ring
        rx_active_ = true;
        rx_msg_bytes_ = h.msg_bytes;
        rx_got_ = 0;
      } else if ((h.flags & kFirstFragment) || h.msg_bytes != rx_msg_bytes_) {
        (void)fail_locked(Corrupt("shm: interleaved message fragments", rank));
        break;
      }
      if (h.frag_bytes > rx_msg_bytes_ - rx_got_ || (h.frag_bytes == 0 && rx_msg_bytes_ != 0)) {
        (void)fail_locked(Corrupt("shm: fragment overruns its message", rank));
        break;
      }
      RxOp& rx = rq_.front();
      if (rx_got_ < rx.length) {
        size_t n = std::min<uint64_t>(h.frag_bytes, rx.length - rx_got_);
        std::memcpy(rx.region->data() + rx.offset + rx_got_, payload, n);
      }
      rx_got_ += h.frag_bytes;
      if (rx_got_ == rx_msg_bytes_) {
        Status st = rx_msg_bytes_ > rx.length
                        ? Truncated("shm: a " + str(rx_msg_bytes_) + "-byte message arrived for a " + str(rx.length) +
                                        "-byte receive buffer",
                                    rank)
                        : Status::Ok();
        Completion c{rx.id, Opcode::kRecv, std::move(st), std::min<size_t>(rx_msg_bytes_, rx.length), 0};
        link_->count(c);
        recv_cq_->push(std::move(c));
        rq_.pop_front();
        rx_active_ = false;
      }
    } else if (h.type == kSlotImm || h.type == kSlotRndv) {
      if (rx_active_) {
        (void)fail_locked(Corrupt("shm: a message interrupts another one's fragments", rank));
        break;
      }
      if (rq_.empty()) break;
      RxOp rx = rq_.front();
      if (h.type == kSlotImm) {
        if (h.msg_bytes > kMaxMsg) {
          (void)fail_locked(Corrupt("shm: write-with-imm notice of " + str(h.msg_bytes) + " bytes", rank));
          break;
        }
        rq_.pop_front();
        recv_cq_->push(Completion{rx.id, Opcode::kRecvImm, Status::Ok(), h.msg_bytes, h.imm});
      } else {
        size_t n = 0;
        Status st = rx_rndv_locked(h, payload, rx, &n);
        if (!st.ok()) {
          (void)fail_locked(st);
          break;
        }
        acked = true;
        rq_.pop_front();
        if (h.msg_bytes <= rx.length) link_->add_received(n);
        recv_cq_->push(Completion{rx.id, Opcode::kRecv,
                                  h.msg_bytes > rx.length
                                      ? Truncated("shm: a " + str(h.msg_bytes) + "-byte message arrived for a " +
                                                      str(rx.length) + "-byte receive buffer",
                                                  rank)
                                      : Status::Ok(),
                                  n, 0});
      }
    } else {
      (void)fail_locked(Corrupt("shm: ring slot of unknown type " + str(h.type), rank));
      break;
    }
    ++rx_next_;
  }
  if (rx_next_ != rx_published_) {
    store_release(my_header()->rx_consumed, rx_next_);
    rx_published_ = rx_next_;
  }
  // The peer may sleep waiting for ring room or a rendezvous ack (notify_peer rings only if
  // it sleeps).
  if (acked || rx_next_ != start) notify_peer();
}

bool ShmEndpoint::has_work() const {
  if (!connected_hint_.load(std::memory_order_acquire) || failed_.load(std::memory_order_relaxed)) return false;
  if (tx_work_hint_.load(std::memory_order_relaxed)) return true;
  uint64_t next = rx_next_hint_.load(std::memory_order_relaxed);
  uint64_t seq = load_acquire(peer_slot(next)->seq);
  return seq != (next >= kSlots ? next + 1 - kSlots : 0);  // ready, or corrupt: either way, look
}

void ShmEndpoint::progress(bool try_only) {
  std::unique_lock lock(mu_, std::defer_lock);
  if (options_.declared_lost && !failed_.load(std::memory_order_relaxed) &&
      options_.declared_lost->load(std::memory_order_acquire)) {
    lock.lock();
    if (!failed_ && connected_)
      (void)fail_locked(PeerLost("shm: peer process " + str(peer_pid_) + " was declared lost by the cluster", options_.peer_rank));
    return;
  }
  if (try_only) {
    if (!has_work() || !lock.try_lock()) return;
  } else {
    lock.lock();
  }
  if (failed_ || !connected_) return;
  progress_rx_locked();
  if (!failed_) progress_acks_locked();
  if (!failed_ && !tx_pending_.empty()) push_pending_locked();
  update_hints_locked();
}

// ---- Liveness (watchdog thread) ----

void ShmEndpoint::check_peer(Clock::time_point now, bool exited) {
  // Skip an endpoint busy in a long copy rather than stall the heartbeat of the whole
  // provider behind it; the next tick looks again.
  std::unique_lock lock(mu_, std::defer_lock);
  for (int i = 0; i < 1000 && !lock.try_lock(); ++i) std::this_thread::yield();
  if (!lock.owns_lock() || failed_ || !connected_) return;
  const int rank = options_.peer_rank;
  if (int fd = peer_pidfd_.load(); fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP))) exited = true;
    else exited = false;
  }
  if (exited) {
    (void)fail_locked(PeerLost("shm: peer process " + str(peer_pid_) + " exited", rank));
    return;
  }
  uint32_t state = load_acquire(peer_header()->state);
  if (state == kStateClosed) {
    (void)fail_locked(PeerLost("shm: the peer closed its endpoint", rank));
    return;
  }
  if (state == kStateFailed) {
    uint32_t reason = load_relaxed(peer_header()->reason);
    std::string why = reason <= static_cast<uint32_t>(ErrorCode::kInternal)
                          ? std::string(to_string(static_cast<ErrorCode>(reason)))
                          : "code " + str(reason);
    (void)fail_locked(PeerLost("shm: the peer's endpoint failed (" + why + ")", rank));
    return;
  }
  // Drop mappings of regions the peer deregistered, so their memory is freed on both sides.
  const DirEntry* entries = reinterpret_cast<const DirEntry*>(peer_dir_->base() + (kDirOffset - kPage));
  for (auto it = peer_regions_.begin(); it != peer_regions_.end();) {
    if (load_acquire(entries[it->second.slot].seq) != it->second.seq) {
      it = peer_regions_.erase(it);
    } else {
      ++it;
    }
  }
  const auto* prov = reinterpret_cast<const ProviderHeader*>(peer_dir_->base());
  uint64_t hb = load_acquire(prov->heartbeat);
  // Stopped with its job and resumed, or the machine asleep: the time this process did not see
  // is not the peer's silence (unseen_stop, deadline.h); its heartbeat gets that long again to
  // move. These checks come every watchdog tick.
  if (last_check_ != Clock::time_point{} && now > last_check_)
    peer_seen_ += unseen_stop(now - last_check_, kHeartbeatTick, options_.peer_timeout);
  last_check_ = std::max(last_check_, now);
  if (hb != peer_heartbeat_) {
    peer_heartbeat_ = hb;
    peer_seen_ = now;
  } else if (now - peer_seen_ > options_.peer_timeout) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - peer_seen_).count();
    (void)fail_locked(PeerLost("shm: no heartbeat from peer process " + str(peer_pid_) + " for " + str(ms) + " ms", rank));
  }
}

}  // namespace lattice::fabric::shm
