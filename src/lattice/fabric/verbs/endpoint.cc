// The staged endpoint: reliable ordered messages over an unreliable (UC) or reliable (RC)
// queue pair, through frame-aligned staging slots. See verbs.h for the design; wire.h for the
// header every slot starts with; endpoint_impl.h for where the rest of its code is.
#include <cstdlib>
#include <cstring>

#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "lattice/core/log.h"
#include "lattice/core/random.h"
#include "lattice/fabric/verbs/endpoint_impl.h"

namespace lattice::fabric::verbs {
namespace detail {

VerbsEndpoint::VerbsEndpoint(std::shared_ptr<Device> dev, VerbsCompletionQueue* scq, VerbsCompletionQueue* rcq,
                             const EndpointOptions& options)
    : dev_(std::move(dev)), api_(*dev_->api), scq_(scq), rcq_(rcq), opts_(options), rx_(options.peer_rank) {
  psn_ = static_cast<uint32_t>(lattice::secure_random_u64()) & 0xffffff;
  while (session_ == 0) session_ = static_cast<uint32_t>(lattice::secure_random_u64());
  auto hb = opts_.peer_timeout / 4;
  hb_interval_ = std::clamp<Clock::duration>(hb, std::chrono::milliseconds(2), std::chrono::milliseconds(500));
}

Status VerbsEndpoint::init() {
  vcq_ = api_.create_cq(dev_->ctx, static_cast<int>(kSlotsTotal * 2), nullptr, nullptr, 0);
  if (vcq_ == nullptr) return ResourceExhausted("verbs: create_cq failed: " + std::string(std::strerror(errno)));
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = vcq_;
  a.qp_type = dev_->qp_type;
  a.cap.max_send_wr = kDataSlots + kCtrlSlots + kRmaSlots;
  a.cap.max_recv_wr = kRecvSlots;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  qp_ = api_.create_qp(dev_->pd, &a);
  if (qp_ == nullptr)
    return ResourceExhausted("verbs: create_qp on " + dev_->name + " failed (" + std::strerror(errno) +
                             "; the device allows " + std::to_string(dev_->max_qp) + " QPs)");
  staging_ = static_cast<std::byte*>(std::aligned_alloc(kFrameBytes, size_t{kSlotsTotal} * kSlotBytes));
  if (staging_ == nullptr) return ResourceExhausted("verbs: cannot allocate staging slots");
  std::memset(staging_, 0, size_t{kSlotsTotal} * kSlotBytes);
  // Some Apple releases reject LOCAL_WRITE-only registrations: fall back to no flags.
  mr_ = api_.reg_mr(dev_->pd, staging_, size_t{kSlotsTotal} * kSlotBytes, IBV_ACCESS_LOCAL_WRITE);
  if (mr_ == nullptr) mr_ = api_.reg_mr(dev_->pd, staging_, size_t{kSlotsTotal} * kSlotBytes, 0);
  if (mr_ == nullptr)
    return ResourceExhausted("verbs: reg_mr of the staging slots failed (" + std::string(std::strerror(errno)) +
                             "; Apple allows about 100 regions per device)");
  ibv_qp_attr qa{};
  qa.qp_state = IBV_QPS_INIT;
  qa.pkey_index = 0;
  qa.port_num = dev_->port;
  qa.qp_access_flags = 0;
  if (int rc = api_.modify_qp(qp_, &qa, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return IoError("verbs: QP to INIT failed: " + std::string(std::strerror(rc)));
  return Status();
}

VerbsEndpoint::~VerbsEndpoint() {
  // Out of the queues first: no poller may enter this endpoint any more.
  if (attached_) {
    scq_->detach(this);
    if (rcq_ != scq_) rcq_->detach(this);
  }
  {
    std::unique_lock lk(mu_);
    // Sends complete once staged (pump_sends): let the peer ack what is still on its way,
    // as a tcp socket's close leaves its sent bytes to the kernel, before the bye (which fails
    // its pending work). Bounded: a peer that stopped answering is not waited for.
    const auto drain_until = Clock::now() + std::min<Clock::duration>(opts_.peer_timeout, std::chrono::seconds(1));
    while (state_ == kConnected && acked_ < next_seq_ && Clock::now() < drain_until) {
      kick_locked();
      cv_.wait_for(lk, std::chrono::milliseconds(1));
    }
    if (state_ == kConnected) {
      // Tell the peer (it fails its pending work at once instead of after its timeout), then
      // give the progress thread a moment to push the bye out.
      bye_posted_ = send_ctrl(ChunkType::kBye, 0, Clock::now());
      kick_locked();  // its completion is polled by the progress thread
      auto until = Clock::now() + std::chrono::milliseconds(50);
      while (bye_posted_ && !bye_done_ && Clock::now() < until) cv_.wait_for(lk, std::chrono::milliseconds(1));
    }
    stop_ = true;
    flush_locked(Cancelled("verbs: endpoint destroyed"));
    kick_locked();
  }
  if (thread_.joinable()) thread_.join();
  // Destroy straight from RTS: moving a QP to ERR first can wedge an Apple port.
  if (qp_) api_.destroy_qp(qp_);
  if (mr_) api_.dereg_mr(mr_);
  if (vcq_) api_.destroy_cq(vcq_);
  std::free(staging_);
}

std::vector<std::byte> VerbsEndpoint::local_address() const {
  AddressBlob b{};
  b.mode = static_cast<uint8_t>(Mode::kStaged) | (dev_->secret ? kModeSealed : 0);
  b.port = dev_->port;
  std::memcpy(b.gid, dev_->gid.raw, 16);
  b.qpn = qp_->qp_num;
  b.psn = psn_;
  b.session = session_;
  b.slot_bytes = kSlotBytes;
  b.recv_slots = kRecvSlots;
  return encode_address(b);
}

Status VerbsEndpoint::connect(std::span<const std::byte> peer_address, Deadline deadline) {
  LATTICE_ASSIGN_OR_RETURN(AddressBlob peer, decode_address(peer_address));
  const bool peer_sealed = (peer.mode & kModeSealed) != 0;
  if (peer_sealed != dev_->secret.has_value())
    return InvalidArgument(dev_->secret ? "verbs: the peer runs plaintext (no cluster secret) but this endpoint "
                                          "requires encryption"
                                        : "verbs: the peer requires encryption (cluster secret) but this endpoint "
                                          "runs plaintext");
  std::unique_lock lk(mu_);
  if (state_ != kIdle) return InvalidArgument("verbs: endpoint already connected");
  peer_ = peer;
  if (dev_->secret) {
    auto seal = LinkSeal::start(*dev_->secret, local_address(), peer_address);
    if (!seal.ok()) return seal.status();
    seal_.emplace(std::move(*seal));
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.ah_attr.is_global = 1;
  std::memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev_->gid_index);
  a.ah_attr.grh.hop_limit = 1;  // no routing over Thunderbolt
  a.ah_attr.port_num = dev_->port;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  if (dev_->qp_type == IBV_QPT_RC) {
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  if (int rc = api_.modify_qp(qp_, &a, mask)) {
    fail_locked(
        IoError("verbs: QP to RTR against peer QPN " + std::to_string(peer.qpn) + " failed: " + std::strerror(rc),
                opts_.peer_rank));
    return error_;
  }
  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.sq_psn = psn_;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (dev_->qp_type == IBV_QPT_RC) {
    s.timeout = 14;
    s.retry_cnt = 7;
    s.rnr_retry = 7;
    s.max_rd_atomic = 1;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  }
  if (int rc = api_.modify_qp(qp_, &s, mask)) {
    fail_locked(IoError("verbs: QP to RTS failed: " + std::string(std::strerror(rc)), opts_.peer_rank));
    return error_;
  }
  // Receives only now, after RTS (Apple's rule).
  for (uint32_t i = 0; i < kRecvSlots; ++i) {
    if (!post_recv_slot(i)) return error_;
  }
  state_ = kConnecting;
  auto now = Clock::now();
  last_heard_ = last_sent_ = last_ack_progress_ = now;
  last_hello_ = now - kHelloPeriod;
  thread_ = std::thread([this] { run(); });
  scq_->attach(this);
  if (rcq_ != scq_) rcq_->attach(this);
  attached_ = true;
  kick_locked();
  while (state_ == kConnecting) {
    if (deadline.is_never()) {
      cv_.wait(lk);
    } else if (cv_.wait_until(lk, deadline.when()) == std::cv_status::timeout && state_ == kConnecting) {
      fail_locked(seal_ && !seal_->ready()
                      ? Timeout("verbs: the peer did not complete the crypto handshake before the deadline (is it "
                                "up, and does it hold the same cluster secret?)",
                                opts_.peer_rank)
                      : Timeout("verbs: peer did not answer the hello before the deadline", opts_.peer_rank));
    }
  }
  return state_ == kConnected ? Status() : error_;
}

Status VerbsEndpoint::post_send(LocalSlice src, WorkId id) {
  if (Status st = check_slice(src, "send"); !st.ok()) return st;
  std::lock_guard lk(mu_);
  if (Status st = can_post(); !st.ok()) return st;
  if (sends_.size() >= kMaxPosted) return ResourceExhausted("verbs: send queue full");
  sends_.push_back({src, id, 0, 0, false});
  posted_locked();
  return Status();
}

Status VerbsEndpoint::post_recv(LocalSlice dst, WorkId id) {
  if (Status st = check_slice(dst, "receive"); !st.ok()) return st;
  std::lock_guard lk(mu_);
  if (Status st = can_post(); !st.ok()) return st;
  if (recvs_.size() >= kMaxPosted) return ResourceExhausted("verbs: receive queue full");
  recvs_.push_back({dst, id});
  posted_locked();
  return Status();
}

Status VerbsEndpoint::post_write(LocalSlice src, RemoteSlice dst, WorkId id) {
  return post_rma(Opcode::kWrite, src, dst, 0, 0, id, false);
}

Status VerbsEndpoint::post_read(LocalSlice dst, RemoteSlice src, WorkId id) {
  return post_rma(Opcode::kRead, dst, src, 0, 0, id, false);
}

Status VerbsEndpoint::post_fetch_add(LocalSlice result, RemoteSlice target, uint64_t add, WorkId id) {
  return post_rma(Opcode::kFetchAdd, result, target, add, 0, id, false);
}

Status VerbsEndpoint::post_compare_swap(LocalSlice result, RemoteSlice target, uint64_t expected, uint64_t desired,
                                        WorkId id) {
  return post_rma(Opcode::kCompareSwap, result, target, expected, desired, id, false);
}

Status VerbsEndpoint::release_buffer(WorkId) {
  return Unavailable("verbs: release_buffer is not supported (posted memory is kept until completion)");
}

Result<std::unique_ptr<RemoteMapping>> VerbsEndpoint::map_remote(RemoteSlice, uint32_t) {
  return Unavailable("verbs: a peer's memory cannot be mapped across the link (post_write/post_read it)");
}

Status VerbsEndpoint::status() const {
  std::lock_guard lk(mu_);
  return state_ == kFailed ? error_ : Status();
}

void VerbsEndpoint::try_progress() {
  std::unique_lock lk(mu_, std::try_to_lock);
  if (!lk.owns_lock() || stop_) return;
  last_poll_ = Clock::now();
  step_locked(last_poll_);
}

void VerbsEndpoint::poller_leaving() {
  // Try-lock, as try_progress: the queue calls in with attached_mu_ held, and connect() takes
  // attached_mu_ under mu_. Busy: the thread looks again when the window ends.
  std::unique_lock lk(mu_, std::try_to_lock);
  if (!lk.owns_lock() || last_poll_ == Clock::time_point{}) return;
  last_poll_ = {};
  kick_locked();
}

EndpointStats VerbsEndpoint::stats() const {
  std::lock_guard lk(mu_);
  EndpointStats s = stats_;
  const ChunkReceiver::Counters& c = rx_.counters();
  s.bad_crc = c.bad_crc;
  s.duplicates = c.duplicates;
  s.gaps = c.gaps;
  s.stale = c.stale;
  s.sealed = seal_.has_value();
  return s;
}

Status VerbsEndpoint::check_slice(const LocalSlice& s, const char* what) {
  if (s.region == nullptr) return InvalidArgument(std::string("verbs: ") + what + " without a region");
  if (s.offset > s.region->size() || s.length > s.region->size() - s.offset)
    return InvalidArgument(std::string("verbs: ") + what + " slice out of its region's bounds");
  return Status();
}

Status VerbsEndpoint::can_post() const {
  if (state_ == kFailed) return error_;
  if (state_ != kConnected) return InvalidArgument("verbs: endpoint not connected");
  return Status();
}

void VerbsEndpoint::flush_locked(const Status& st) {
  for (auto& r : rma_) {
    if (r.used && !r.silent) scq_->push({r.id, r.op, st, 0, 0});
    r.used = false;
  }
  for (auto& s : sends_)
    if (!s.completed()) scq_->push({s.id, s.op, st, 0, 0});
  sends_.clear();
  for (auto& r : recvs_) rcq_->push({r.id, Opcode::kRecv, st, 0, 0});
  recvs_.clear();
  rx_.drop_message();
}

void VerbsEndpoint::fail_locked(Status st) {
  if (state_ == kFailed) return;
  bool was_connected = state_ == kConnected;
  LATTICE_LOG_DEBUG("verbs: endpoint to rank {} failed: {}", opts_.peer_rank, st.to_string());
  error_ = std::move(st);
  state_ = kFailed;
  if (was_connected && error_.code() != ErrorCode::kPeerLost) send_ctrl(ChunkType::kBye, 0, Clock::now());
  flush_locked(error_);
  kick_locked();
}

void VerbsEndpoint::run() {
#ifdef __linux__
  // The naps below are tens of microseconds; Linux's default timer slack (50 us) made each one
  // 70-120 us on session 14's host, late past a 50 us link's next message.
  ::prctl(PR_SET_TIMERSLACK, 1000UL);
  ::prctl(PR_SET_NAME, "lat-verbs-prog");  // as top -H and perf name it
#endif
  std::unique_lock lk(mu_);
  auto idle_since = Clock::now();
  while (!stop_) {
    auto now = Clock::now();
    if (step_locked(now)) {
      idle_since = now;
      lk.unlock();  // let posters in
      lk.lock();
      continue;
    }
    if (state_ == kConnected && now - last_poll_ < kPollerWindow) {
      // A poller is driving us on its own thread: stay out of its way, and look again when it
      // has been quiet for the window. Sleeping in the device instead, woken by every message
      // and post, took the pinned rank's core from its poller: a 2-rank 8 KiB all-reduce over
      // verbs-emu at 50 us one way took 260-273 us against 196-202 us (docs/SIM.md, session 18).
      cv_.wait_until(lk, last_poll_ + kPollerWindow);
      continue;
    }
    auto idle = now - idle_since;
    // A device that can wake us (the emulator's doorbell): sleep in it until a message, a
    // poster's kick or the next timer, so an idle link costs its core nothing. The naps
    // below took 7-8% of each pinned rank's core on a 2-core VM and its forward steps ran 14%
    // slower than over shm (docs/SIM.md, session 17).
    const bool can_block = api_.wait_cq != nullptr && !dev_->busy_poll;
    // Chunks in flight: their ack (and, mostly, the reply) is on its way, so keep looking
    // for a while rather than nap past it (a nap costs ~100 us; on a 50 us link it doubled
    // the one-way time). A device that wakes us needs no such watch.
    const bool awaiting = !can_block && acked_ < next_seq_ && idle < std::chrono::milliseconds(2);
    if (dev_->busy_poll || awaiting || (!can_block && idle < std::chrono::microseconds(50))) {
      lk.unlock();
      std::this_thread::yield();
      lk.lock();
      continue;
    }
    if (can_block) {
      auto wake = next_timer_locked(now);
      device_waiting_ = true;
      lk.unlock();
      api_.wait_cq(vcq_, std::chrono::duration_cast<std::chrono::nanoseconds>(wake - now).count());
      lk.lock();
      device_waiting_ = false;
      continue;
    }
    // Peer traffic has no wakeup (polled device): nap for bounded times.
    auto nap = idle < std::chrono::milliseconds(2)    ? std::chrono::microseconds(50)
               : idle < std::chrono::milliseconds(50) ? std::chrono::microseconds(200)
                                                      : std::chrono::microseconds(1000);
    cv_.wait_for(lk, nap);
  }
}

void VerbsEndpoint::posted_locked() {
  if (Clock::now() - last_poll_ >= kPollerWindow) kick_locked();
}

void VerbsEndpoint::kick_locked() {
  cv_.notify_all();
  if (device_waiting_) api_.wake_cq(vcq_);
}

Clock::time_point VerbsEndpoint::next_timer_locked(Clock::time_point now) const {
  auto t = now + std::chrono::milliseconds(10);
  auto at = [&t](Clock::time_point x) { t = std::min(t, x); };
  if (state_ == kConnecting) at(last_hello_ + kHelloPeriod);
  if (state_ == kConnected) {
    at(last_heard_ + opts_.peer_timeout);
    at(last_sent_ + hb_interval_);
    if (acked_ < next_seq_) at(std::max(last_ack_progress_, last_retransmit_) + rto_);
    if (rx_.nack_due()) at(last_nack_sent_ + std::chrono::milliseconds(1));
    if (rx_.tail_due()) at(tail_since_ + kTailAckDelay);
  }
  // A timer already due that the step did not act on (its test is strict): not a spin.
  return std::max(t, now + std::chrono::microseconds(50));
}

bool VerbsEndpoint::step_locked(Clock::time_point now) {
  if (state_ == kIdle) return false;
  if (state_ == kConnected && opts_.declared_lost && opts_.declared_lost->load(std::memory_order_acquire)) {
    fail_locked(PeerLost("verbs: the peer was declared lost by the cluster", opts_.peer_rank));
    return true;
  }
  bool work = false;
  ibv_wc wc[32];
  int n = api_.poll_cq(vcq_, 32, wc);
  if (n < 0) {
    fail_locked(IoError("verbs: poll_cq failed", opts_.peer_rank));
    return true;
  }
  for (int i = 0; i < n; ++i) handle_wc(wc[i], now);
  work = n > 0;
  if (rx_.tail_due() && tail_since_ == Clock::time_point{}) tail_since_ = now;
  if (state_ == kFailed) return work;
  work |= deliver_held(now);
  if (state_ == kConnecting) {
    if (now - last_hello_ >= kHelloPeriod) {
      bool sent = true;
      // Sealed: the handshake message due (M1, M2 or M3), and once the keys exist a sealed hello.
      if (seal_ && !seal_->outgoing().empty())
        sent = send_ctrl(ChunkType::kHello, kFlagHandshake, now, seal_->outgoing());
      if (!seal_ || seal_->ready()) sent = send_ctrl(ChunkType::kHello, heard_peer_ ? kFlagHeard : 0, now) && sent;
      if (sent) last_hello_ = now;
    }
    return work;
  }
  if (state_ != kConnected) return work;
  work |= pump_sends(now);
  // Go-back-N on silence: no ack progress for an RTO while chunks are outstanding.
  if (acked_ < next_seq_ && now - std::max(last_ack_progress_, last_retransmit_) > rto_) {
    rto_ = std::min<Clock::duration>(rto_ * 2, kRtoMax);
    go_back_n(now);
    work = true;
  }
  if (hello_due_ && send_ctrl(ChunkType::kHello, kFlagHeard | kFlagDone, now)) hello_due_ = false;
  bool window_opened = credit_limit() >= last_credit_sent_ + 8 ||
                       (last_credit_sent_ <= rx_.expected() && credit_limit() > rx_.expected());
  const bool nack_due = rx_.nack_due();
  // A message's end is acked by the next slot going back (pump_sends above), or on its own after
  // kTailAckDelay: a standalone ack slot took the wire from the peer's next message (a 2-rank
  // all-reduce step sent each way its data and an ack).
  const bool tail_ack_due = rx_.tail_due() && now - tail_since_ >= kTailAckDelay;
  if ((nack_due && now - last_nack_sent_ > std::chrono::milliseconds(1)) || rx_.ack_due() || tail_ack_due ||
      window_opened || now - last_sent_ > hb_interval_) {
    uint8_t flags = nack_due ? kFlagNack : 0;
    if (send_ctrl(ChunkType::kAck, flags, now)) {
      if (nack_due) last_nack_sent_ = now;
      rx_.ack_sent();
      work = true;
    }
  }
  // Stopped with its job and resumed, or the machine asleep: the time this process did not see
  // is not the peer's silence (unseen_stop, deadline.h). The progress loop comes every nap (1 ms
  // at most).
  if (last_liveness_check_ != Clock::time_point{})
    last_heard_ += unseen_stop(now - last_liveness_check_, std::chrono::milliseconds(1), opts_.peer_timeout);
  last_liveness_check_ = now;
  if (now - last_heard_ > opts_.peer_timeout) {
    fail_locked(PeerLost(
        "verbs: nothing heard from the peer for " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_).count()) + " ms",
        opts_.peer_rank));
    return true;
  }
  return work;
}

void VerbsEndpoint::handle_wc(const ibv_wc& wc, Clock::time_point now) {
  uint64_t kind = wc.wr_id >> 32;
  auto index = static_cast<uint32_t>(wc.wr_id & 0xffffffffu);
  if (kind == kKindRma) {
    if (index >= kRmaSlots || !rma_[index].used) return;  // flushed already
    RmaSlot r = rma_[index];
    rma_[index].used = false;
    if (wc.status == IBV_WC_SUCCESS) {
      if (!r.silent) scq_->push({r.id, r.op, Status(), r.bytes, 0});
      if (!r.silent) link_.count({r.id, r.op, Status(), r.bytes, 0});
      return;
    }
    std::string what =
        "verbs: " + std::string(to_string(r.op)) + " completed with '" + api_.wc_status_str(wc.status) + "'";
    Status st = wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_REM_INV_REQ_ERR
                    ? AccessDenied(what + " (key, rights or bounds refused by the target)", opts_.peer_rank)
                : wc.status == IBV_WC_RETRY_EXC_ERR ? PeerLost(what, opts_.peer_rank)
                                                    : IoError(what, opts_.peer_rank);
    if (!r.silent) scq_->push({r.id, r.op, st, 0, 0});
    fail_locked(st);
    return;
  }
  if (kind == kKindCtrl && index < kCtrlSlots) {
    ctrl_busy_[index] = false;
    if (static_cast<int>(index) == bye_slot_) bye_done_ = true;
  } else if (kind == kKindData && index < kDataSlots) {
    DataSlot& d = dslots_[index];
    d.in_flight = false;
    if (wc.status == IBV_WC_SUCCESS && d.repost && d.used && state_ == kConnected) {
      d.repost = false;
      if (post_slot(data_slot(index), wr_id(kKindData, index), now)) d.in_flight = true;
    }
  }
  if (wc.status != IBV_WC_SUCCESS) {
    // Every completion's status is checked: a failed send means the port or the peer is gone.
    std::string what = std::string("verbs: ") + (kind == kKindRecv ? "receive" : "send") + " completed with '" +
                       api_.wc_status_str(wc.status) + "'";
    if (wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_RNR_RETRY_EXC_ERR)
      fail_locked(PeerLost(what + " (port down or peer gone)", opts_.peer_rank));
    else if (wc.status == IBV_WC_LOC_LEN_ERR || wc.status == IBV_WC_REM_INV_REQ_ERR)
      fail_locked(Corrupt(what + " (frame counts of send and receive differ)", opts_.peer_rank));
    else
      fail_locked(IoError(what, opts_.peer_rank));
    return;
  }
  if (kind == kKindRecv && index < kRecvSlots) handle_recv(index, wc.byte_len, now);
}

void VerbsEndpoint::handle_recv(uint32_t j, uint32_t byte_len, Clock::time_point now) {
  LinkSeal* seal = seal_ ? &*seal_ : nullptr;
  ChunkReceiver::Admitted a = rx_.admit(recv_slot(j), byte_len, peer_.session, seal, state_ == kConnecting);
  switch (a.what) {
    case ChunkReceiver::Arrival::kDropped:
    case ChunkReceiver::Arrival::kEarly:
      post_recv_slot(j);
      return;
    case ChunkReceiver::Arrival::kFailed:
      post_recv_slot(j);
      if (!a.reject.empty()) send_ctrl(ChunkType::kHello, kFlagHandshake, now, a.reject);
      fail_locked(std::move(a.error));
      return;
    case ChunkReceiver::Arrival::kHandshake:
      post_recv_slot(j);
      last_heard_ = now;
      if (!seal->outgoing().empty() || seal->ready()) last_hello_ = Clock::time_point{};  // answer at once
      return;
    case ChunkReceiver::Arrival::kChunk:
      break;
  }
  const ChunkHeader& h = a.h;
  last_heard_ = now;
  auto type = static_cast<ChunkType>(h.type);
  if (state_ == kConnecting && (type == ChunkType::kData || type == ChunkType::kAck)) {
    heard_peer_ = true;
    set_connected();
  }
  if (state_ == kConnected || state_ == kConnecting) take_ack(h, now);
  switch (type) {
    case ChunkType::kData:
      if (rx_.take_data(h, j)) return;  // the slot is reposted once its payload is delivered
      break;
    case ChunkType::kHello:
      heard_peer_ = true;
      if (state_ == kConnecting && (h.flags & kFlagHeard))
        set_connected();
      else if (state_ == kConnected && !(h.flags & kFlagDone))
        hello_due_ = true;
      else if (state_ == kConnecting)
        last_hello_ = Clock::time_point{};  // answer at once
      break;
    case ChunkType::kBye:
      post_recv_slot(j);
      fail_locked(PeerLost("verbs: the peer closed its endpoint", opts_.peer_rank));
      return;
    case ChunkType::kAck:
      break;
    default:
      rx_.unknown_type();
      break;
  }
  post_recv_slot(j);
}

void VerbsEndpoint::set_connected() {
  if (state_ != kConnecting) return;
  state_ = kConnected;
  hello_due_ = true;  // our hello with "heard" may not have reached the peer yet
  kick_locked();
}

bool VerbsEndpoint::deliver_held(Clock::time_point now) {
  bool work = false;
  while (rx_.has_held() && state_ == kConnected) {
    if (!rx_.message_open() && recvs_.empty()) break;
    uint32_t j = rx_.front_slot();
    UserRecv& r = recvs_.front();
    auto d = rx_.deliver(recv_slot(j), r.dst.data(), r.dst.length, seal_ ? &*seal_ : nullptr);
    if (!d.ok()) {
      fail_locked(d.status());
      return true;
    }
    work = true;
    if (d->imm) {
      rcq_->push({r.id, Opcode::kRecvImm, Status(), 0, d->imm_value});
      recvs_.pop_front();
      post_recv_slot(j);
      continue;
    }
    // A failed repost fails the endpoint, which completes (and drops) every receive.
    if (!post_recv_slot(j)) return true;
    if (d->last) {
      Status st;
      size_t bytes = d->total;
      if (d->total > r.dst.length) {
        st = Truncated("verbs: message of " + std::to_string(d->total) + " bytes into a " +
                           std::to_string(r.dst.length) + "-byte receive",
                       opts_.peer_rank);
        bytes = r.dst.length;
      }
      link_.count({r.id, Opcode::kRecv, st, bytes, 0});
      rcq_->push({r.id, Opcode::kRecv, st, bytes, 0});
      recvs_.pop_front();
    }
  }
  (void)now;
  return work;
}

}  // namespace detail

using detail::VerbsEndpoint;

Result<std::unique_ptr<Endpoint>> make_endpoint(std::shared_ptr<Device> dev, VerbsCompletionQueue* send_cq,
                                                VerbsCompletionQueue* recv_cq, const EndpointOptions& options) {
  auto ep = std::make_unique<VerbsEndpoint>(std::move(dev), send_cq, recv_cq, options);
  if (Status st = ep->init(); !st.ok()) return st;
  return std::unique_ptr<Endpoint>(std::move(ep));
}

EndpointStats endpoint_stats(const Endpoint* ep) {
  auto* v = dynamic_cast<const VerbsEndpoint*>(ep);
  return v ? v->stats() : EndpointStats{};
}

}  // namespace lattice::fabric::verbs
