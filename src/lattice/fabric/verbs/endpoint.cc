// The staged endpoint: reliable ordered messages over an unreliable (UC) or reliable (RC)
// queue pair, through frame-aligned staging slots. See verbs.h for the design; wire.h for the
// header every slot starts with.
#include <cstdlib>
#include <cstring>

#include "lattice/core/log.h"
#include "lattice/core/random.h"
#include "lattice/fabric/verbs/endpoint.h"
#include "lattice/fabric/verbs/seal.h"

namespace lattice::fabric::verbs {
namespace {

constexpr uint64_t kKindData = 1, kKindCtrl = 2, kKindRecv = 3, kKindRma = 4;
constexpr uint32_t kRmaSlots = 128;  // one-sided operations in flight (RC mode)
constexpr uint64_t wr_id(uint64_t kind, uint32_t index) { return (kind << 32) | index; }
constexpr uint32_t kSlotsTotal = kDataSlots + kCtrlSlots + kRecvSlots;
constexpr size_t kMaxPosted = 4096;          // fabric-level queue depth per direction
constexpr uint8_t kFlagDone = 16;            // kHello: the sender is connected (never answer it)
// Retransmission timeout: only a lost tail needs it (a gap is nacked at once). Generous, since
// on a loaded host the peer may not run for milliseconds; doubled per silent round.
constexpr auto kRto = std::chrono::milliseconds(40);
constexpr auto kRtoMax = std::chrono::milliseconds(320);
constexpr auto kHelloPeriod = std::chrono::milliseconds(5);

using Clock = std::chrono::steady_clock;

class VerbsEndpoint final : public Endpoint, public Progressable {
 public:
  VerbsEndpoint(std::shared_ptr<Device> dev, VerbsCompletionQueue* scq, VerbsCompletionQueue* rcq,
                const EndpointOptions& options)
      : dev_(std::move(dev)), api_(*dev_->api), scq_(scq), rcq_(rcq), opts_(options) {
    psn_ = static_cast<uint32_t>(lattice::secure_random_u64()) & 0xffffff;
    while (session_ == 0) session_ = static_cast<uint32_t>(lattice::secure_random_u64());
    auto hb = opts_.peer_timeout / 4;
    hb_interval_ = std::clamp<Clock::duration>(hb, std::chrono::milliseconds(2), std::chrono::milliseconds(500));
  }

  Status init() {
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

  ~VerbsEndpoint() override {
    // Out of the queues first: no poller may enter this endpoint any more.
    if (attached_) {
      scq_->detach(this);
      if (rcq_ != scq_) rcq_->detach(this);
    }
    {
      std::unique_lock lk(mu_);
      if (state_ == kConnected) {
        // Tell the peer (it fails its pending work at once instead of after its timeout), then
        // give the progress thread a moment to push the bye out.
        bye_posted_ = send_ctrl(ChunkType::kBye, 0, Clock::now());
        auto until = Clock::now() + std::chrono::milliseconds(50);
        while (bye_posted_ && !bye_done_ && Clock::now() < until) cv_.wait_for(lk, std::chrono::milliseconds(1));
      }
      stop_ = true;
      flush_locked(Cancelled("verbs: endpoint destroyed"));
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    // Destroy straight from RTS: moving a QP to ERR first can wedge an Apple port.
    if (qp_) api_.destroy_qp(qp_);
    if (mr_) api_.dereg_mr(mr_);
    if (vcq_) api_.destroy_cq(vcq_);
    std::free(staging_);
  }

  std::vector<std::byte> local_address() const override {
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

  Status connect(std::span<const std::byte> peer_address, Deadline deadline) override {
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
      fail_locked(IoError("verbs: QP to RTR against peer QPN " + std::to_string(peer.qpn) + " failed: " +
                          std::strerror(rc), opts_.peer_rank));
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
    cv_.notify_all();
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

  Status post_send(LocalSlice src, WorkId id) override {
    if (Status st = check_slice(src, "send"); !st.ok()) return st;
    std::lock_guard lk(mu_);
    if (Status st = can_post(); !st.ok()) return st;
    if (sends_.size() >= kMaxPosted) return ResourceExhausted("verbs: send queue full");
    sends_.push_back({src, id, 0, 0, false});
    cv_.notify_all();
    return Status();
  }

  Status post_recv(LocalSlice dst, WorkId id) override {
    if (Status st = check_slice(dst, "receive"); !st.ok()) return st;
    std::lock_guard lk(mu_);
    if (Status st = can_post(); !st.ok()) return st;
    if (recvs_.size() >= kMaxPosted) return ResourceExhausted("verbs: receive queue full");
    recvs_.push_back({dst, id});
    cv_.notify_all();
    return Status();
  }

  Status post_write(LocalSlice src, RemoteSlice dst, WorkId id) override {
    return post_rma(Opcode::kWrite, src, dst, 0, 0, id, false);
  }
  Status post_write_with_imm(LocalSlice src, RemoteSlice dst, uint32_t imm, WorkId id) override {
    if (!dev_->rma) return no_rma("write");
    std::lock_guard lk(mu_);
    // The write, then a sequenced zero-byte message carrying the immediate on the same QP:
    // the target sees the data before the immediate (in-order delivery).
    if (Status st = post_rma_locked(Opcode::kWrite, src, dst, 0, 0, id, true); !st.ok()) return st;
    UserSend u{LocalSlice{}, id, 0, 0, false};
    u.op = Opcode::kWriteImm;
    u.imm = imm;
    u.bytes = src.length;
    sends_.push_back(u);
    cv_.notify_all();
    return Status();
  }
  Status post_read(LocalSlice dst, RemoteSlice src, WorkId id) override {
    return post_rma(Opcode::kRead, dst, src, 0, 0, id, false);
  }
  Status post_fetch_add(LocalSlice result, RemoteSlice target, uint64_t add, WorkId id) override {
    return post_rma(Opcode::kFetchAdd, result, target, add, 0, id, false);
  }
  Status post_compare_swap(LocalSlice result, RemoteSlice target, uint64_t expected, uint64_t desired,
                           WorkId id) override {
    return post_rma(Opcode::kCompareSwap, result, target, expected, desired, id, false);
  }

  Status release_buffer(WorkId) override {
    return Unavailable("verbs: release_buffer is not supported (posted memory is kept until completion)");
  }
  Result<std::unique_ptr<RemoteMapping>> map_remote(RemoteSlice, uint32_t) override {
    return Unavailable("verbs: a peer's memory cannot be mapped across the link (post_write/post_read it)");
  }
  Status status() const override {
    std::lock_guard lk(mu_);
    return state_ == kFailed ? error_ : Status();
  }
  int peer_rank() const override { return opts_.peer_rank; }
  LinkBytes link_bytes() const override { return link_.get(); }

  void try_progress() override {
    std::unique_lock lk(mu_, std::try_to_lock);
    if (!lk.owns_lock() || stop_) return;
    if (step_locked(Clock::now())) caller_progress_ = true;
  }

  EndpointStats stats() const {
    std::lock_guard lk(mu_);
    EndpointStats s = stats_;
    s.sealed = seal_.has_value();
    return s;
  }

 private:
  enum State { kIdle, kConnecting, kConnected, kFailed };
  struct UserSend {
    LocalSlice src;
    WorkId id;
    uint64_t next_offset;
    uint64_t last_seq;
    bool all_chunked;
    Opcode op = Opcode::kSend;  // kWriteImm: the immediate's message after the write
    uint32_t imm = 0;
    size_t bytes = 0;  // kWriteImm: bytes written
  };
  struct RmaSlot {
    bool used = false;
    bool silent = false;  // the write half of a write-with-imm: its completion comes with the imm's ack
    WorkId id = 0;
    Opcode op = Opcode::kWrite;
    size_t bytes = 0;
  };
  struct UserRecv {
    LocalSlice dst;
    WorkId id;
  };
  struct DataSlot {
    uint64_t seq = 0;
    bool used = false;       // holds an unacked chunk
    bool in_flight = false;  // posted, its completion not yet polled
    bool repost = false;     // retransmit once the completion is back
  };

  static Status check_slice(const LocalSlice& s, const char* what) {
    if (s.region == nullptr) return InvalidArgument(std::string("verbs: ") + what + " without a region");
    if (s.offset > s.region->size() || s.length > s.region->size() - s.offset)
      return InvalidArgument(std::string("verbs: ") + what + " slice out of its region's bounds");
    return Status();
  }
  Status can_post() const {
    if (state_ == kFailed) return error_;
    if (state_ != kConnected) return InvalidArgument("verbs: endpoint not connected");
    return Status();
  }
  Status post_rma(Opcode op, LocalSlice local, RemoteSlice remote, uint64_t operand0, uint64_t operand1, WorkId id,
                  bool silent) {
    if (!dev_->rma) return no_rma(to_string(op).data());
    std::lock_guard lk(mu_);
    return post_rma_locked(op, local, remote, operand0, operand1, id, silent);
  }

  // Zero-copy: the local slice must be a region registered with this device; the remote one is
  // addressed by its rkey and an offset (zero-based regions); the target checks both.
  Status post_rma_locked(Opcode op, LocalSlice local, RemoteSlice remote, uint64_t operand0, uint64_t operand1,
                         WorkId id, bool silent) {
    if (Status st = check_slice(local, "one-sided operation"); !st.ok()) return st;
    if (Status st = can_post(); !st.ok()) return st;
    bool atomic = op == Opcode::kFetchAdd || op == Opcode::kCompareSwap;
    if (atomic && local.length != 8) return InvalidArgument("verbs: atomics need an 8-byte result slice");
    if (!atomic && remote.length != local.length)
      return InvalidArgument("verbs: local and remote lengths differ");
    if (local.length > dev_->max_msg)
      return InvalidArgument("verbs: one-sided operation of " + std::to_string(local.length) + " bytes exceeds " +
                             std::to_string(dev_->max_msg));
    auto* region = dynamic_cast<HeapRegion*>(local.region);
    if (local.length > 0 && (region == nullptr || region->mr() == nullptr))
      return InvalidArgument("verbs: the local slice of a one-sided operation must be memory of this provider");
    uint32_t slot_index = kRmaSlots;
    for (uint32_t i = 0; i < kRmaSlots; ++i)
      if (!rma_[i].used) {
        slot_index = i;
        break;
      }
    if (slot_index == kRmaSlots) return ResourceExhausted("verbs: too many one-sided operations in flight");
    ibv_sge sge{reinterpret_cast<uintptr_t>(local.data()), static_cast<uint32_t>(local.length),
                region && region->mr() ? region->mr()->lkey : 0};
    ibv_send_wr wr{};
    wr.wr_id = wr_id(kKindRma, slot_index);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    auto rkey = static_cast<uint32_t>(remote.key & 0xffffffffu);
    switch (op) {
      case Opcode::kWrite: wr.opcode = IBV_WR_RDMA_WRITE; break;
      case Opcode::kRead: wr.opcode = IBV_WR_RDMA_READ; break;
      case Opcode::kFetchAdd: wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; break;
      default: wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP; break;
    }
    if (atomic) {
      wr.wr.atomic.remote_addr = remote.offset;
      wr.wr.atomic.rkey = rkey;
      wr.wr.atomic.compare_add = operand0;
      wr.wr.atomic.swap = operand1;
    } else {
      wr.wr.rdma.remote_addr = remote.offset;
      wr.wr.rdma.rkey = rkey;
    }
    ibv_send_wr* bad = nullptr;
    if (int rc = api_.post_send(qp_, &wr, &bad))
      return ResourceExhausted("verbs: post of a one-sided operation failed: " + std::string(std::strerror(rc)));
    rma_[slot_index] = {true, silent, id, op, local.length};
    cv_.notify_all();
    return Status();
  }

  Status no_rma(const char* op) const {
    {
      std::lock_guard lk(mu_);
      if (state_ == kFailed) return error_;
    }
    if (dev_->secret && dev_->qp_type == IBV_QPT_RC)
      return Unavailable(std::string("verbs: one-sided ") + op + " is refused on a sealed link: the NIC places an RC " +
                         "write or read in memory without the target's CPU, so nothing there could authenticate or " +
                         "decrypt it. Use two-sided sends (caps.rma_write/rma_read/atomics are false when sealed, and " +
                         "the collectives take their two-sided algorithms), or run plaintext (--insecure) on a " +
                         "trusted link");
    return Unavailable(std::string("verbs: ") + op + " is not available on " + dev_->name +
                       " (two-sided staged path; caps.rma_write/rma_read/atomics are false)");
  }

  std::byte* slot(uint32_t global_index) const { return staging_ + size_t{global_index} * kSlotBytes; }
  std::byte* data_slot(uint32_t i) const { return slot(i); }
  std::byte* ctrl_slot(uint32_t i) const { return slot(kDataSlots + i); }
  std::byte* recv_slot(uint32_t i) const { return slot(kDataSlots + kCtrlSlots + i); }

  uint64_t credit_limit() const {
    size_t room = kRecvSlots - kRecvReserve;
    return expected_ + (held_.size() >= room ? 0 : room - held_.size());
  }

  // Fills in the ack fields and the checksum, then posts the whole slot (whole frames).
  bool post_slot(std::byte* p, uint64_t id, Clock::time_point now) {
    ChunkHeader h;
    std::memcpy(&h, p, sizeof h);
    h.magic = kChunkMagic;
    h.session = session_;
    h.ack = expected_;
    h.credit_limit = credit_limit();
    h.crc = 0;
    std::memcpy(p, &h, sizeof h);
    if (h.flags & kFlagSealed) {
      if (Status st = seal_->seal_header(p); !st.ok()) {
        fail_locked(st);
        return false;
      }
    }
    h.crc = chunk_crc(p);
    std::memcpy(p, &h, sizeof h);
    last_credit_sent_ = h.credit_limit;
    last_ack_sent_ = h.ack;
    last_sent_ = now;
    ibv_sge sge{reinterpret_cast<uintptr_t>(p), static_cast<uint32_t>(kSlotBytes), mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (int rc = api_.post_send(qp_, &wr, &bad)) {
      fail_locked(IoError("verbs: post_send failed: " + std::string(std::strerror(rc)), opts_.peer_rank));
      return false;
    }
    return true;
  }

  bool post_recv_slot(uint32_t i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(recv_slot(i)), static_cast<uint32_t>(kSlotBytes), mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id(kKindRecv, i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (int rc = api_.post_recv(qp_, &wr, &bad)) {
      fail_locked(IoError("verbs: post_recv failed: " + std::string(std::strerror(rc)), opts_.peer_rank));
      return false;
    }
    return true;
  }

  // A control chunk; sealed once the session has keys, except a handshake hello (its payload:
  // `body`, the handshake message).
  bool send_ctrl(ChunkType type, uint8_t flags, Clock::time_point now, std::span<const uint8_t> body = {}) {
    for (uint32_t i = 0; i < kCtrlSlots; ++i) {
      if (ctrl_busy_[i]) continue;
      ChunkHeader h{};
      h.type = static_cast<uint8_t>(type);
      h.flags = flags;
      if (seal_ && seal_->ready() && !(flags & kFlagHandshake)) h.flags |= kFlagSealed;
      h.payload_bytes = static_cast<uint32_t>(body.size());
      std::memcpy(ctrl_slot(i), &h, sizeof h);
      std::memset(ctrl_slot(i) + sizeof h, 0, sizeof(SealBlock));
      if (!body.empty()) std::memcpy(ctrl_slot(i) + chunk_body_offset(h), body.data(), body.size());
      if (!post_slot(ctrl_slot(i), wr_id(kKindCtrl, i), now)) return false;
      ctrl_busy_[i] = true;
      if (type == ChunkType::kAck) stats_.acks_sent++;
      if (type == ChunkType::kBye) bye_slot_ = static_cast<int>(i);
      return true;
    }
    return false;  // all control slots in flight: try again next round
  }

  void flush_locked(const Status& st) {
    for (auto& r : rma_) {
      if (r.used && !r.silent) scq_->push({r.id, r.op, st, 0, 0});
      r.used = false;
    }
    for (auto& s : sends_) scq_->push({s.id, s.op, st, 0, 0});
    sends_.clear();
    for (auto& r : recvs_) rcq_->push({r.id, Opcode::kRecv, st, 0, 0});
    recvs_.clear();
    cur_ = {};
  }

  void fail_locked(Status st) {
    if (state_ == kFailed) return;
    bool was_connected = state_ == kConnected;
    LATTICE_LOG_DEBUG("verbs: endpoint to rank {} failed: {}", opts_.peer_rank, st.to_string());
    error_ = std::move(st);
    state_ = kFailed;
    if (was_connected && error_.code() != ErrorCode::kPeerLost) send_ctrl(ChunkType::kBye, 0, Clock::now());
    flush_locked(error_);
    cv_.notify_all();
  }

  void run() {
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
      if (caller_progress_) {
        // A poller is driving us on its own thread: stay out of its way.
        caller_progress_ = false;
        cv_.wait_for(lk, std::chrono::microseconds(500));
        continue;
      }
      auto idle = now - idle_since;
      // Chunks in flight: their ack (and, mostly, the reply) is on its way, so keep looking
      // for a while rather than nap past it (a nap costs ~100 us; on a 50 us link it doubled
      // the one-way time).
      const bool awaiting = acked_ < next_seq_ && idle < std::chrono::milliseconds(2);
      if (dev_->busy_poll || awaiting || idle < std::chrono::microseconds(50)) {
        lk.unlock();
        std::this_thread::yield();
        lk.lock();
        continue;
      }
      // Peer traffic has no wakeup (polled device): nap for bounded times.
      auto nap = idle < std::chrono::milliseconds(2)    ? std::chrono::microseconds(50)
                 : idle < std::chrono::milliseconds(50) ? std::chrono::microseconds(200)
                                                        : std::chrono::microseconds(1000);
      cv_.wait_for(lk, nap);
    }
  }

  // One round of progress; true if anything happened.
  bool step_locked(Clock::time_point now) {
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
    if (state_ == kFailed) return work;
    work |= deliver_held(now);
    if (state_ == kConnecting) {
      if (now - last_hello_ >= kHelloPeriod) {
        bool sent = true;
        // Sealed: the handshake message due (M1, M2 or M3), and once the keys exist a sealed hello.
        if (seal_ && !seal_->outgoing().empty()) sent = send_ctrl(ChunkType::kHello, kFlagHandshake, now, seal_->outgoing());
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
    bool window_opened = credit_limit() >= last_credit_sent_ + 8 || (last_credit_sent_ <= expected_ && credit_limit() > expected_);
    if ((nack_due_ && now - last_nack_sent_ > std::chrono::milliseconds(1)) || ack_due_ || window_opened ||
        now - last_sent_ > hb_interval_) {
      uint8_t flags = nack_due_ ? kFlagNack : 0;
      if (send_ctrl(ChunkType::kAck, flags, now)) {
        if (nack_due_) last_nack_sent_ = now;
        ack_due_ = nack_due_ = false;
        accepted_since_ack_ = 0;
        work = true;
      }
    }
    if (now - last_heard_ > opts_.peer_timeout) {
      fail_locked(PeerLost("verbs: nothing heard from the peer for " +
                               std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_heard_).count()) +
                               " ms",
                           opts_.peer_rank));
      return true;
    }
    return work;
  }

  void handle_wc(const ibv_wc& wc, Clock::time_point now) {
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
      std::string what = "verbs: " + std::string(to_string(r.op)) + " completed with '" +
                         api_.wc_status_str(wc.status) + "'";
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

  void handle_recv(uint32_t j, uint32_t byte_len, Clock::time_point now) {
    ChunkHeader h;
    std::memcpy(&h, recv_slot(j), sizeof h);
    uint32_t crc = h.crc;
    h.crc = 0;
    h.crc = crc;
    bool ok = byte_len == kSlotBytes && h.magic == kChunkMagic && h.session == peer_.session &&
              h.payload_bytes <= chunk_capacity(h) && chunk_crc(recv_slot(j)) == crc;
    if (!ok) {
      // Corrupted on the wire (or a stale session): drop it, ask for a retransmission.
      stats_.bad_crc++;
      nack_due_ = true;
      post_recv_slot(j);
      return;
    }
    if (!admit_sealed(j, h, now)) return;
    last_heard_ = now;
    auto type = static_cast<ChunkType>(h.type);
    if (state_ == kConnecting && (type == ChunkType::kData || type == ChunkType::kAck)) {
      heard_peer_ = true;
      set_connected();
    }
    if (state_ == kConnected || state_ == kConnecting) take_ack(h, now);
    switch (type) {
      case ChunkType::kData:
        if (h.seq == expected_ && held_.size() < kRecvSlots - kRecvReserve) {
          expected_++;
          held_.push_back(j);
          if ((h.flags & kFlagLast) || ++accepted_since_ack_ >= 8) ack_due_ = true;
          return;  // the slot is reposted once its payload is delivered
        }
        if (h.seq < expected_) {
          stats_.duplicates++;
          ack_due_ = true;
        } else {
          stats_.gaps++;
          nack_due_ = true;
        }
        break;
      case ChunkType::kHello:
        heard_peer_ = true;
        if (state_ == kConnecting && (h.flags & kFlagHeard)) set_connected();
        else if (state_ == kConnected && !(h.flags & kFlagDone)) hello_due_ = true;
        else if (state_ == kConnecting) last_hello_ = Clock::time_point{};  // answer at once
        break;
      case ChunkType::kBye:
        post_recv_slot(j);
        fail_locked(PeerLost("verbs: the peer closed its endpoint", opts_.peer_rank));
        return;
      case ChunkType::kAck:
        break;
      default:
        stats_.bad_crc++;
        break;
    }
    post_recv_slot(j);
  }

  // Sealed sessions: handshake hellos, the header tag, replays. True when the chunk goes on
  // to the protocol; false when it was handled or dropped here (its slot reposted).
  bool admit_sealed(uint32_t j, const ChunkHeader& h, Clock::time_point now) {
    const bool sealed = (h.flags & kFlagSealed) != 0;
    const bool handshake = static_cast<ChunkType>(h.type) == ChunkType::kHello && (h.flags & kFlagHandshake);
    if (!seal_) {
      if (!sealed && !handshake) return true;
      post_recv_slot(j);
      fail_locked(InvalidArgument("verbs: the peer requires encryption (cluster secret) but this endpoint runs plaintext"));
      return false;
    }
    if (handshake && !sealed) {
      std::vector<uint8_t> reject;
      Status st = seal_->on_handshake({recv_slot(j) + sizeof h, h.payload_bytes}, &reject);
      post_recv_slot(j);
      if (!st.ok()) {
        if (!reject.empty()) send_ctrl(ChunkType::kHello, kFlagHandshake, now, reject);
        fail_locked(st.code() == ErrorCode::kAuthFailed
                        ? AuthFailed("verbs: the crypto handshake with the peer failed (does it hold the same cluster "
                                     "secret?): " + st.message(),
                                     opts_.peer_rank)
                        : st.with_context("verbs: crypto handshake"));
        return false;
      }
      last_heard_ = now;
      if (!seal_->outgoing().empty() || seal_->ready()) last_hello_ = Clock::time_point{};  // answer at once
      return false;
    }
    if (!sealed) {
      post_recv_slot(j);
      fail_locked(state_ == kConnecting
                      ? InvalidArgument("verbs: the peer runs plaintext (no cluster secret) but this endpoint requires "
                                        "encryption")
                      : AuthFailed("verbs: the peer sent an unsealed frame in a sealed session", opts_.peer_rank));
      return false;
    }
    if (!seal_->ready()) {  // the initiator's first sealed frames can pass its M3: it resends
      post_recv_slot(j);
      return false;
    }
    auto verdict = seal_->open_header(recv_slot(j));
    if (!verdict.ok()) {
      post_recv_slot(j);
      fail_locked(AuthFailed("verbs: a frame from the peer failed authentication (tampered on the wire; its checksum "
                             "matched, so not line noise): " + verdict.status().message(),
                             opts_.peer_rank));
      return false;
    }
    if (*verdict == LinkSeal::Verdict::kStale) {  // replayed or reordered: never delivered
      stats_.stale++;
      nack_due_ = true;
      post_recv_slot(j);
      return false;
    }
    return true;
  }

  // Opens a sealed data chunk's payload; on failure the endpoint fails with kAuthFailed.
  bool open_payload(uint32_t j, std::byte* dst) {
    if (Status st = seal_->open_payload(recv_slot(j), dst); !st.ok()) {
      fail_locked(AuthFailed("verbs: a payload from the peer failed authentication (tampered on the wire): " +
                                 st.message(),
                             opts_.peer_rank));
      return false;
    }
    return true;
  }

  void set_connected() {
    if (state_ != kConnecting) return;
    state_ = kConnected;
    hello_due_ = true;  // our hello with "heard" may not have reached the peer yet
    cv_.notify_all();
  }

  void take_ack(const ChunkHeader& h, Clock::time_point now) {
    if (h.credit_limit > peer_credit_) peer_credit_ = h.credit_limit;
    if (h.ack > acked_ && h.ack <= next_seq_) {
      for (uint64_t s = acked_; s < h.ack; ++s) dslots_[s % kDataSlots].used = false;
      acked_ = h.ack;
      last_ack_progress_ = now;
      rto_ = kRto;
      while (!sends_.empty() && sends_.front().all_chunked && sends_.front().last_seq < acked_) {
        const UserSend& f = sends_.front();
        scq_->push({f.id, f.op, Status(), f.op == Opcode::kSend ? f.src.length : f.bytes, 0});
        link_.count({f.id, f.op, Status(), f.op == Opcode::kSend ? f.src.length : f.bytes, 0});
        sends_.pop_front();
      }
    }
    if ((h.flags & kFlagNack) && acked_ < next_seq_ && now - last_retransmit_ > std::chrono::milliseconds(1))
      go_back_n(now);
  }

  void go_back_n(Clock::time_point now) {
    LATTICE_LOG_DEBUG("verbs: rank {} go-back-N from {} to {} (ack {} ms ago)", opts_.peer_rank, acked_, next_seq_,
                      std::chrono::duration_cast<std::chrono::milliseconds>(now - last_ack_progress_).count());
    for (uint64_t s = acked_; s < next_seq_; ++s) {
      uint32_t i = static_cast<uint32_t>(s % kDataSlots);
      DataSlot& d = dslots_[i];
      stats_.retransmits++;
      if (d.in_flight) {
        d.repost = true;
      } else if (post_slot(data_slot(i), wr_id(kKindData, i), now)) {
        d.in_flight = true;
      } else {
        return;
      }
    }
    last_retransmit_ = now;
  }

  bool pump_sends(Clock::time_point now) {
    bool work = false;
    for (auto& s : sends_) {
      if (s.all_chunked) continue;
      while (!s.all_chunked) {
        if (next_seq_ >= acked_ + kDataSlots || next_seq_ >= peer_credit_) return work;
        uint32_t i = static_cast<uint32_t>(next_seq_ % kDataSlots);
        DataSlot& d = dslots_[i];
        if (d.in_flight || d.used) return work;
        const bool sealed = seal_.has_value();
        uint64_t n = std::min<uint64_t>(sealed ? kSealedChunkPayload : kChunkPayload, s.src.length - s.next_offset);
        ChunkHeader h{};
        h.type = static_cast<uint8_t>(ChunkType::kData);
        h.flags = (s.next_offset == 0 ? kFlagFirst : 0) | (s.next_offset + n == s.src.length ? kFlagLast : 0) |
                  (s.op == Opcode::kWriteImm ? kFlagImm : 0) | (sealed ? kFlagSealed : 0);
        h.imm = s.imm;
        h.payload_bytes = static_cast<uint32_t>(n);
        h.seq = next_seq_;
        h.msg_bytes = s.src.length;
        h.offset = s.next_offset;
        std::memcpy(data_slot(i), &h, sizeof h);
        if (sealed) {
          // Encrypting from the user's buffer into the slot is the copy: one pass, not two.
          if (Status st = seal_->seal_payload(data_slot(i), s.src.data() + s.next_offset); !st.ok()) {
            fail_locked(st);
            return true;
          }
        } else if (n) {
          std::memcpy(data_slot(i) + sizeof h, s.src.data() + s.next_offset, n);
        }
        if (!post_slot(data_slot(i), wr_id(kKindData, i), now)) return true;
        d = {next_seq_, true, true, false};
        stats_.chunks_sent++;
        if (acked_ == next_seq_) last_ack_progress_ = now;  // the RTO runs from the first unacked chunk
        s.next_offset += n;
        if (h.flags & kFlagLast) {
          s.all_chunked = true;
          s.last_seq = next_seq_;
        }
        next_seq_++;
        work = true;
      }
    }
    return work;
  }

  // Copies accepted chunks, in order, into the posted user receives.
  bool deliver_held(Clock::time_point now) {
    bool work = false;
    while (!held_.empty() && state_ == kConnected) {
      if (!cur_.active && recvs_.empty()) break;
      uint32_t j = held_.front();
      ChunkHeader h;
      std::memcpy(&h, recv_slot(j), sizeof h);
      UserRecv& r = recvs_.front();
      bool first = (h.flags & kFlagFirst) != 0;
      if (first != !cur_.active || h.offset != cur_.got || (cur_.active && h.msg_bytes != cur_.total) ||
          h.offset + h.payload_bytes > h.msg_bytes) {
        fail_locked(Corrupt("verbs: chunk out of place in message (offset " + std::to_string(h.offset) + ")",
                            opts_.peer_rank));
        return true;
      }
      std::byte* body = recv_slot(j) + chunk_body_offset(h);
      if (first && (h.flags & kFlagImm)) {
        if (seal_ && !open_payload(j, body)) return true;
        rcq_->push({r.id, Opcode::kRecvImm, Status(), 0, h.imm});
        recvs_.pop_front();
        held_.pop_front();
        post_recv_slot(j);
        work = true;
        continue;
      }
      if (first) cur_ = {true, h.msg_bytes, 0};
      if (seal_) {
        // Decrypting from the slot into the receive is the copy (one pass); a chunk that does not
        // fit whole (a truncated message) is opened in its slot, then copied.
        const bool whole = h.offset + h.payload_bytes <= r.dst.length;
        if (!open_payload(j, whole ? r.dst.data() + h.offset : body)) return true;
        if (!whole && h.offset < r.dst.length)
          std::memcpy(r.dst.data() + h.offset, body, std::min<uint64_t>(h.payload_bytes, r.dst.length - h.offset));
      } else if (h.offset < r.dst.length) {
        size_t n = std::min<uint64_t>(h.payload_bytes, r.dst.length - h.offset);
        std::memcpy(r.dst.data() + h.offset, body, n);
      }
      cur_.got += h.payload_bytes;
      held_.pop_front();
      post_recv_slot(j);
      work = true;
      if (h.flags & kFlagLast) {
        Status st;
        size_t bytes = cur_.total;
        if (cur_.total > r.dst.length) {
          st = Truncated("verbs: message of " + std::to_string(cur_.total) + " bytes into a " +
                             std::to_string(r.dst.length) + "-byte receive",
                         opts_.peer_rank);
          bytes = r.dst.length;
        }
        link_.count({r.id, Opcode::kRecv, st, bytes, 0});
        rcq_->push({r.id, Opcode::kRecv, st, bytes, 0});
        recvs_.pop_front();
        cur_ = {};
      }
    }
    (void)now;
    return work;
  }

  std::shared_ptr<Device> dev_;
  const VerbsApi& api_;
  VerbsCompletionQueue* scq_;
  VerbsCompletionQueue* rcq_;
  const EndpointOptions opts_;
  LinkCounter link_;  // counted where a successful completion is handed out
  Clock::duration hb_interval_;
  Clock::duration rto_ = kRto;
  uint32_t psn_ = 0;
  uint32_t session_ = 0;
  ibv_cq* vcq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::byte* staging_ = nullptr;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool stop_ = false;
  bool attached_ = false;
  bool caller_progress_ = false;  // a poller progressed us: the progress thread may nap
  State state_ = kIdle;
  Status error_;
  AddressBlob peer_{};
  bool heard_peer_ = false, hello_due_ = false;
  bool bye_posted_ = false, bye_done_ = false;
  int bye_slot_ = -1;
  Clock::time_point last_heard_, last_sent_, last_ack_progress_, last_retransmit_, last_nack_sent_, last_hello_;
  // sender
  std::deque<UserSend> sends_;
  DataSlot dslots_[kDataSlots];
  bool ctrl_busy_[kCtrlSlots] = {};
  RmaSlot rma_[kRmaSlots];
  uint64_t next_seq_ = 0, acked_ = 0, peer_credit_ = kRecvSlots - kRecvReserve;
  // receiver
  uint64_t expected_ = 0;
  std::deque<uint32_t> held_;
  std::deque<UserRecv> recvs_;
  struct {
    bool active = false;
    uint64_t total = 0, got = 0;
  } cur_;
  uint64_t accepted_since_ack_ = 0, last_credit_sent_ = 0, last_ack_sent_ = 0;
  bool ack_due_ = false, nack_due_ = false;
  EndpointStats stats_;
  std::optional<LinkSeal> seal_;  // sealed sessions (the provider holds the cluster secret)
};

}  // namespace

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
