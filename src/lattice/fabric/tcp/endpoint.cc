#include "lattice/fabric/tcp/endpoint.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "lattice/core/log.h"
#include "lattice/fabric/tcp/cq.h"
#include "lattice/fabric/tcp/provider.h"

namespace lattice::fabric::tcp {

namespace {

int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

long long to_ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

}  // namespace

Conn::Conn(TcpProvider* provider, TcpCompletionQueue* send_cq, TcpCompletionQueue* recv_cq,
           const EndpointOptions& options, EndpointAddress local, uint64_t id)
    : provider_(provider), send_cq_(send_cq), recv_cq_(recv_cq), options_(options), local_(local), id_(id) {}

Conn::~Conn() {
  if (fd_ >= 0) ::close(fd_);
  for (auto& in : incoming_) ::close(in.fd);
}

std::string Conn::peer_text() const {
  std::string s = "peer";
  if (options_.peer_rank != Status::kNoPeer) s += " " + std::to_string(options_.peer_rank);
  return s + " at " + peer_addr_text_;
}

Status Conn::status() const {
  std::lock_guard lock(mu_);
  return error_;
}

void Conn::close() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    fail(Cancelled("tcp endpoint closed"), false);
  }
  std::lock_guard lock(connect_mu_);
  connecting_done_ = true;
  for (auto& in : incoming_) ::close(in.fd);
  incoming_.clear();
  connect_cv_.notify_all();
}

// ---- posting --------------------------------------------------------------------------------

Status Conn::check_local(const LocalSlice& s, const char* what) const {
  if (s.region == nullptr) return InvalidArgument(std::string(what) + ": local slice has no region");
  if (s.offset > s.region->size() || s.length > s.region->size() - s.offset)
    return InvalidArgument(std::string(what) + ": local slice [" + std::to_string(s.offset) + ", +" +
                           std::to_string(s.length) + ") is outside its region of " +
                           std::to_string(s.region->size()) + " bytes");
  if (s.length > kMaxMessage)
    return InvalidArgument(std::string(what) + ": " + std::to_string(s.length) + " bytes exceeds max_msg " +
                           std::to_string(kMaxMessage));
  return Status::Ok();
}

Status Conn::check_postable() const {
  if (!error_.ok()) return error_;
  if (!connected_) return InvalidArgument("tcp endpoint is not connected yet");
  if (outstanding_send_side_ >= kMaxOutstanding)
    return ResourceExhausted("tcp endpoint: " + std::to_string(kMaxOutstanding) + " operations outstanding");
  return Status::Ok();
}

Status Conn::post_send(LocalSlice src, WorkId id) {
  LATTICE_RETURN_IF_ERROR(check_local(src, "post_send"));
  std::lock_guard lock(mu_);
  LATTICE_RETURN_IF_ERROR(check_postable());
  TxOp op;
  op.hdr = make_header(FrameType::kSend);
  op.hdr.payload_len = src.length;
  if (src.length <= kMaxInline) {
    if (src.length) std::memcpy(op.inline_data, src.data(), src.length);
    op.inline_len = src.length;
  } else {
    op.payload = src.data();
    op.payload_len = src.length;
  }
  op.completes = true;
  op.id = id;
  op.bytes = src.length;
  ++outstanding_send_side_;
  enqueue(std::move(op));
  return Status::Ok();
}

Status Conn::post_recv(LocalSlice dst, WorkId id) {
  LATTICE_RETURN_IF_ERROR(check_local(dst, "post_recv"));
  std::lock_guard lock(mu_);
  if (!error_.ok()) return error_;
  if (recvs_.size() >= kMaxOutstanding)
    return ResourceExhausted("tcp endpoint: " + std::to_string(kMaxOutstanding) + " receives posted");
  recvs_.push_back({id, dst.length ? dst.data() : nullptr, dst.length});
  match_unexpected();
  if (rx_ == Rx::kStalled) {
    // A message waited for this receive (or for buffer space): resume reading.
    Status s = begin_frame();
    if (!s.ok()) {
      fail(s, true);
    } else if (rx_ != Rx::kStalled) {
      progress_locked(Clock::now());
      arm_for_background();
    }
  }
  return Status::Ok();
}

Status Conn::release_buffer(WorkId id) {
  std::lock_guard lock(mu_);
  for (TxOp& op : tx_) {
    if (!op.completes || op.id != id) continue;
    // Sealed frames and inline payloads already live in the op; a copied payload is the op's.
    if (op.payload_len == 0 || op.sealed || op.released) return Status::Ok();
    op.released = std::make_unique_for_overwrite<std::byte[]>(op.payload_len);
    std::memcpy(op.released.get(), op.payload, op.payload_len);
    op.payload = op.released.get();
    return Status::Ok();
  }
  for (size_t i = 0; i < recvs_.size(); ++i) {
    RecvOp& r = recvs_[i];
    if (r.id != id || r.released) continue;
    r.released = true;
    // The front receive may be filling right now: the rest of its message goes elsewhere.
    if (i == 0 && finish_ == Finish::kRecvMsg && (rx_ == Rx::kPayload || rx_ == Rx::kTrailer) && !sink_scratch_) {
      if (cipher_) {
        // The tag covers every byte: the message is opened aside (and dropped), so what already
        // landed in the caller's buffer moves there too.
        const size_t got = sink_len_ - static_cast<size_t>(sink_left_);
        std::byte* old_start = sink_ - got;
        rx_scratch_.resize(sink_len_);
        if (got) std::memcpy(rx_scratch_.data(), old_start, got);
        sink_ = rx_scratch_.data() + got;
        sink_scratch_ = true;
        if (rx_stream_) {  // opening as it lands: carry on in the scratch copy, leave nothing unverified
          rx_opened_ = rx_scratch_.data() + (rx_opened_ - old_start);
          if (got) std::memset(old_start, 0, got);
        }
      } else {
        discard_left_ += sink_left_;
        sink_left_ = 0;
        sink_ = nullptr;
      }
    }
    return Status::Ok();
  }
  return Status::Ok();
}

Status Conn::post_write(LocalSlice src, RemoteSlice dst, uint32_t imm, bool with_imm, WorkId id) {
  LATTICE_RETURN_IF_ERROR(check_local(src, with_imm ? "post_write_with_imm" : "post_write"));
  if (dst.length != 0 && dst.length < src.length)
    return InvalidArgument("post_write: remote slice of " + std::to_string(dst.length) +
                           " bytes is shorter than the local slice of " + std::to_string(src.length));
  std::lock_guard lock(mu_);
  LATTICE_RETURN_IF_ERROR(check_postable());
  TxOp op;
  op.hdr = make_header(with_imm ? FrameType::kWriteImm : FrameType::kWrite);
  op.hdr.req_id = next_req_id_++;
  op.hdr.key = dst.key;
  op.hdr.offset = dst.offset;
  op.hdr.imm = imm;
  op.hdr.payload_len = src.length;
  if (src.length <= kMaxInline) {
    if (src.length) std::memcpy(op.inline_data, src.data(), src.length);
    op.inline_len = src.length;
  } else {
    op.payload = src.data();
    op.payload_len = src.length;
  }
  pending_.push_back({op.hdr.req_id, with_imm ? Opcode::kWriteImm : Opcode::kWrite, id, nullptr, src.length});
  ++outstanding_send_side_;
  enqueue(std::move(op));
  return Status::Ok();
}

Status Conn::post_read(LocalSlice dst, RemoteSlice src, WorkId id) {
  LATTICE_RETURN_IF_ERROR(check_local(dst, "post_read"));
  if (src.length != 0 && src.length < dst.length)
    return InvalidArgument("post_read: remote slice of " + std::to_string(src.length) +
                           " bytes is shorter than the local slice of " + std::to_string(dst.length));
  std::lock_guard lock(mu_);
  LATTICE_RETURN_IF_ERROR(check_postable());
  TxOp op;
  op.hdr = make_header(FrameType::kReadReq);
  op.hdr.req_id = next_req_id_++;
  op.hdr.key = src.key;
  op.hdr.offset = src.offset;
  op.hdr.arg0 = dst.length;
  pending_.push_back({op.hdr.req_id, Opcode::kRead, id, dst.length ? dst.data() : nullptr, dst.length});
  ++outstanding_send_side_;
  enqueue(std::move(op));
  return Status::Ok();
}

Status Conn::post_atomic(LocalSlice result, RemoteSlice target, FrameType type, uint64_t a, uint64_t b, WorkId id) {
  const char* what = type == FrameType::kFetchAdd ? "post_fetch_add" : "post_compare_swap";
  LATTICE_RETURN_IF_ERROR(check_local(result, what));
  if (result.length < 8) return InvalidArgument(std::string(what) + ": the result slice needs 8 bytes");
  if (target.offset % 8 != 0)
    return InvalidArgument(std::string(what) + ": remote offset " + std::to_string(target.offset) +
                           " is not 8-byte aligned");
  std::lock_guard lock(mu_);
  LATTICE_RETURN_IF_ERROR(check_postable());
  TxOp op;
  op.hdr = make_header(type);
  op.hdr.req_id = next_req_id_++;
  op.hdr.key = target.key;
  op.hdr.offset = target.offset;
  op.hdr.arg0 = a;
  op.hdr.arg1 = b;
  pending_.push_back({op.hdr.req_id, type == FrameType::kFetchAdd ? Opcode::kFetchAdd : Opcode::kCompareSwap, id,
                      result.data(), 8});
  ++outstanding_send_side_;
  enqueue(std::move(op));
  return Status::Ok();
}

// ---- failure, completion, progress ----------------------------------------------------------

void Conn::complete_send_side(WorkId id, Opcode op, Status s, size_t bytes) {
  // A send is outstanding until it completes here (one-sided operations until their response
  // arrives, where they are counted off). Without this an endpoint took kMaxOutstanding sends
  // in its life and then refused every post: a long decode or bench run stalled until its
  // deadline.
  if (op == Opcode::kSend && outstanding_send_side_ > 0) --outstanding_send_side_;
  Completion c{id, op, std::move(s), bytes, 0};
  link_.count(c);
  send_cq_->push(std::move(c));
}

void Conn::complete_recv_side(WorkId id, Opcode op, Status s, size_t bytes, uint32_t imm) {
  Completion c{id, op, std::move(s), bytes, imm};
  link_.count(c);
  recv_cq_->push(std::move(c));
}

void Conn::fail(Status s, bool tell_peer, bool routine) {
  if (!error_.ok()) return;
  error_ = s;
  failed_.store(true);
  poll_fd_.store(-1);
  if (rx_stream_) {  // a payload half opened as it landed: its pieces were never verified
    rx_stream_ = false;
    std::memset(sink_ - (sink_len_ - sink_left_), 0, sink_len_ - sink_left_);
  }
  // A peer closing its endpoint (EOF) is how every run ends, and a loss the cluster declared is
  // the cluster's to report: neither is worth a warning here.
  if (routine) {
    LATTICE_LOG_INFO("tcp endpoint: {}", s.to_string());
  } else if (s.code() != ErrorCode::kCancelled) {
    LATTICE_LOG_WARN("tcp endpoint: {}", s.to_string());
  }
  if (fd_ >= 0) {
    if (tell_peer && cipher_) {
      // Sealed: only in sequence (nothing queued) and only while the cipher is healthy.
      if (tx_.empty() && cipher_->failure().ok()) {
        TxOp op;
        op.hdr = make_header(FrameType::kError);
        op.hdr.imm = static_cast<uint32_t>(s.code());
        std::string text = s.message().substr(0, kMaxErrorText);
        op.hdr.payload_len = text.size();
        op.payload = reinterpret_cast<const std::byte*>(text.data());
        op.payload_len = text.size();
        if (seal_op(op).ok()) {
          iovec iov[2] = {{&op.hdr, sizeof op.hdr}, {const_cast<std::byte*>(op.payload), op.payload_len}};
          msghdr m{};
          m.msg_iov = iov;
          m.msg_iovlen = 2;
          (void)::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
      }
    } else if (tell_peer && (tx_.empty() || tx_.front().done == 0)) {
      // Best effort, one non-blocking attempt: tell the peer why before hanging up.
      FrameHeader h = make_header(FrameType::kError);
      h.imm = static_cast<uint32_t>(s.code());
      std::string text = s.message().substr(0, kMaxErrorText);
      h.payload_len = text.size();
      iovec iov[2] = {{&h, sizeof h}, {text.data(), text.size()}};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = 2;
      (void)::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ::epoll_ctl(provider_->epoll_fd(), EPOLL_CTL_DEL, fd_, nullptr);
    // SHUT_WR sends our FIN after anything queued (the error frame); unread input is left alone
    // so the kernel does not answer with a reset that could overtake it.
    ::shutdown(fd_, SHUT_WR);
  }
  rx_ = Rx::kDead;
  want_write_.store(false);
  for (auto& op : tx_)
    if (op.completes) complete_send_side(op.id, Opcode::kSend, s, 0);
  tx_.clear();
  queued_responses_ = 0;
  for (auto& op : pending_) complete_send_side(op.id, op.op, s, 0);
  pending_.clear();
  for (auto& r : recvs_) complete_recv_side(r.id, Opcode::kRecv, s, 0, 0);
  recvs_.clear();
  unexpected_.clear();
  unexpected_bytes_ = 0;
  unexpected_buf_ = {};
  outstanding_send_side_ = 0;
}

void Conn::check_liveness(Clock::time_point now) {
  if (!connected_ || rx_ == Rx::kDead) return;
  // This process did not run for a while (stopped with its job and resumed, the machine asleep):
  // the peer's silence then is not the peer's (unseen_stop, deadline.h). Checks come every
  // heartbeat interval / 2 at most (the provider's tick).
  if (last_check_ != Clock::time_point{}) {
    const Clock::duration unseen = unseen_stop(now - last_check_, heartbeat_interval() / 2, options_.peer_timeout);
    last_rx_ += unseen;
    last_tx_progress_ += unseen;
  }
  last_check_ = now;
  const bool paused = rx_ == Rx::kStalled || queued_responses_ >= kMaxQueuedResponses;
  if (!paused && now - last_rx_ > options_.peer_timeout) {
    fail(PeerLost(peer_text() + " showed no sign of life for " + std::to_string(to_ms(now - last_rx_)) +
                      " ms (peer_timeout " + std::to_string(options_.peer_timeout.count()) + " ms)",
                  options_.peer_rank),
         false);
    return;
  }
  if (paused && !tx_.empty() && now - last_tx_progress_ > options_.peer_timeout) {
    fail(PeerLost(peer_text() + " read nothing for " + std::to_string(to_ms(now - last_tx_progress_)) + " ms",
                  options_.peer_rank),
         false);
    return;
  }
  if (tx_.empty() && now - last_tx_ >= heartbeat_interval()) enqueue_heartbeat();
}

void Conn::progress_locked(Clock::time_point now) {
  if (!connected_ || rx_ == Rx::kDead) return;
  if (options_.declared_lost && options_.declared_lost->load(std::memory_order_acquire)) {
    // The cluster logs the loss (or the rank's leaving) itself.
    fail(PeerLost(peer_text() + " was declared lost by the cluster", options_.peer_rank), /*tell_peer=*/true,
         /*routine=*/true);
    return;
  }
  if (!tx_.empty()) flush_tx();
  read_rx();
  if (!tx_.empty()) flush_tx();
  check_liveness(now);
  rx_paused_.store(rx_ == Rx::kStalled || queued_responses_ >= kMaxQueuedResponses, std::memory_order_relaxed);
}

void Conn::progress_from_caller() {
  auto now = Clock::now();
  last_caller_ns_.store(to_ns(now), std::memory_order_relaxed);
  if (failed_.load(std::memory_order_relaxed)) return;
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  progress_locked(now);
}

bool Conn::progress_from_background(uint32_t events) {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  progress_locked(Clock::now());
  if ((events & (EPOLLERR | EPOLLHUP)) && rx_ != Rx::kDead && rx_paused_.load()) {
    // Reading is paused, so the hang-up cannot be seen through recv(): peek at the socket.
    char c;
    ssize_t r = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      fail(PeerLost(peer_text() + " closed the connection", options_.peer_rank), false, /*routine=*/true);
    } else {
      return false;  // data still queued behind the stall: look again later, don't spin
    }
  }
  lock.unlock();
  rearm();
  return true;
}

void Conn::tick() {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (!lock.owns_lock()) return;
  progress_locked(Clock::now());
}

bool Conn::caller_active() const {
  if (sleepers.load(std::memory_order_relaxed) > 0) return true;
  int64_t last = last_caller_ns_.load(std::memory_order_relaxed);
  return to_ns(Clock::now()) - last < 2'000'000;
}

void Conn::rearm() {
  int fd = poll_fd_.load();
  if (fd < 0) return;
  epoll_event ev{};
  // While reading is paused, readiness for input would fire at once and forever: leave it out.
  ev.events = EPOLLONESHOT | (rx_paused_.load() ? 0u : EPOLLIN | EPOLLRDHUP) | (want_write_.load() ? EPOLLOUT : 0u);
  ev.data.u64 = id_;
  ::epoll_ctl(provider_->epoll_fd(), EPOLL_CTL_MOD, fd, &ev);
}

int Conn::poll_fd(short* events) const {
  // While reading is paused, pending input would wake a sleeper at once and forever: only
  // writability is worth waiting for then.
  const bool paused = rx_paused_.load(std::memory_order_relaxed);
  *events = static_cast<short>((paused ? 0 : POLLIN) | (want_write_.load(std::memory_order_relaxed) ? POLLOUT : 0));
  if (*events == 0) return -1;
  return poll_fd_.load(std::memory_order_relaxed);
}

// ---- TcpEndpoint ----------------------------------------------------------------------------

TcpEndpoint::TcpEndpoint(TcpProvider* provider, std::shared_ptr<Conn> conn, TcpCompletionQueue* send_cq,
                         TcpCompletionQueue* recv_cq)
    : provider_(provider), conn_(std::move(conn)), send_cq_(send_cq), recv_cq_(recv_cq) {
  send_cq_->attach(conn_);
  if (recv_cq_ != send_cq_) recv_cq_->attach(conn_);
}

TcpEndpoint::~TcpEndpoint() {
  conn_->close();
  provider_->forget(conn_.get());
  send_cq_->detach(conn_.get());
  if (recv_cq_ != send_cq_) recv_cq_->detach(conn_.get());
}

}  // namespace lattice::fabric::tcp
