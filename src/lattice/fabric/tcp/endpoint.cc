#include "lattice/fabric/tcp/endpoint.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "lattice/core/fd_io.h"
#include "lattice/core/log.h"
#include "lattice/crypto/handshake.h"
#include "lattice/fabric/tcp/cq.h"
#include "lattice/fabric/tcp/provider.h"

namespace lattice::fabric::tcp {

namespace {

int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

long long to_ms(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The set-up exchanges (Hello, handshake) through core's deadline-bounded fd I/O, with the peer
// named in the error: "sending hello to peer 3 at ...: write: deadline passed".
Status about_peer(const Status& s, const std::string& what, int rank) {
  if (s.ok()) return s;
  return Status(s.code(), what + ": " + s.message(), rank);
}

Status send_setup(int fd, const void* data, size_t n, Deadline deadline, const std::string& who, int rank) {
  return about_peer(lattice::write_all(fd, data, n, deadline), "sending hello to " + who, rank);
}

Status read_setup(int fd, void* data, size_t n, Deadline deadline, const std::string& who, int rank) {
  Status s = lattice::read_all(fd, data, n, deadline);
  if (s.code() == ErrorCode::kPeerLost)
    return PeerLost(who + " closed the connection during the hello (unknown endpoint, or it rejected our "
                          "protocol version)",
                    rank);
  return about_peer(s, "waiting for the hello of " + who, rank);
}

std::string nonce_hex(const Nonce& n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : n) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

void tune_socket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

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

// ---- connection set-up ----------------------------------------------------------------------

Status Conn::connect(std::span<const std::byte> peer_address, Deadline deadline) {
  LATTICE_ASSIGN_OR_RETURN(EndpointAddress peer, EndpointAddress::decode(peer_address));
  {
    std::lock_guard lock(mu_);
    if (!error_.ok()) return error_;
    if (connected_) return InvalidArgument("tcp endpoint is already connected to " + peer_text());
    if (peer == local_) return InvalidArgument("tcp endpoint cannot connect to itself");
    peer_addr_text_ = peer.to_string();
  }
  int fd = -1;
  std::optional<crypto::SessionCipher> cipher;
  const bool sealed = provider_->secret().has_value();
  if (local_ < peer) {
    LATTICE_RETURN_IF_ERROR(dial(peer, deadline, &fd));
    if (sealed) {
      auto c = secure_handshake(fd, /*initiator=*/true, peer, deadline);
      if (!c.ok()) {
        ::close(fd);
        return c.status();
      }
      cipher.emplace(std::move(*c));
    }
  } else {
    Status last_refusal;
    for (;;) {
      Status s = accept_from(peer, deadline, &fd);
      if (!s.ok()) {
        // A peer that kept failing the handshake is the likelier story than a slow one.
        if (s.code() == ErrorCode::kTimeout && !last_refusal.ok()) return last_refusal;
        return s;
      }
      if (!sealed) break;
      auto c = secure_handshake(fd, /*initiator=*/false, peer, deadline);
      if (c.ok()) {
        cipher.emplace(std::move(*c));
        break;
      }
      // Whoever dialed with the right nonce failed to prove the secret: refuse it and keep
      // waiting for the real peer until the deadline.
      ::close(fd);
      last_refusal = c.status();
      LATTICE_LOG_WARN("tcp: refused a connection claiming to be {}: {}", peer.to_string(), c.status().to_string());
      bool closed;
      {
        std::lock_guard lock(mu_);
        closed = closed_;
      }
      if (closed) return Cancelled("tcp endpoint closed while connecting");
      std::lock_guard lock(connect_mu_);
      connecting_done_ = false;
    }
  }
  tune_socket(fd);
  {
    std::lock_guard lock(mu_);
    if (closed_) {
      ::close(fd);
      return Cancelled("tcp endpoint closed while connecting");
    }
    fd_ = fd;
    if (cipher) cipher_.emplace(std::move(*cipher));
    peer_ = peer;
    connected_ = true;
    staging_.resize(kStagingBytes);
    last_rx_ = last_tx_ = last_tx_progress_ = Clock::now();
    poll_fd_.store(fd);
  }
  provider_->add_connected(shared_from_this(), fd);
  LATTICE_LOG_DEBUG("tcp endpoint connected to {}", peer_text());
  return Status::Ok();
}

Status Conn::dial(const EndpointAddress& peer, Deadline deadline, int* out_fd) {
  const int rank = options_.peer_rank;
  const std::string who = "peer" + (rank == Status::kNoPeer ? std::string() : " " + std::to_string(rank)) +
                          " at " + peer.to_string();
  SockAddr sa = peer.sockaddr();
  ConnectOptions co;
  co.retry_refused = true;  // the peer's provider may not be listening yet: retry until the deadline
  co.retry_interval = std::chrono::milliseconds(10);
  co.no_delay = false;      // tune_socket() once the link is up
  Result<int> dialed = connect_addr(sa.get(), sa.len, deadline, co);
  if (!dialed.ok()) {
    if (dialed.status().code() == ErrorCode::kTimeout)
      return Timeout("connecting to " + who + ": no answer before the deadline", rank);
    return about_peer(dialed.status(), "connecting to " + who, rank);
  }
  const int fd = *dialed;
  const bool sealed = provider_->secret().has_value();
  Hello hello = make_hello(local_.nonce.data(), peer.nonce.data());
  hello.flags = sealed ? kHelloFlagSealed : 0;
  Status s = send_setup(fd, &hello, sizeof hello, deadline, who, rank);
  Hello reply{};
  if (s.ok()) s = read_setup(fd, &reply, sizeof reply, deadline, who, rank);
  if (s.ok()) {
    if (std::memcmp(reply.magic, kHelloMagic, sizeof reply.magic) != 0) {
      s = Corrupt(who + " did not answer with a lattice tcp hello (bad magic)", rank);
    } else if (reply.version != kWireVersion) {
      s = Corrupt(who + " speaks tcp protocol version " + std::to_string(reply.version) + ", we speak " +
                      std::to_string(kWireVersion),
                  rank);
    } else if (reply.size == sizeof(Hello) && reply.flags == (sealed ? 0u : kHelloFlagSealed)) {
      s = InvalidArgument(who + (sealed ? " runs plaintext (no cluster secret) but we require encryption"
                                        : " requires encryption (cluster secret) but we run plaintext"));
    } else if (reply.size != sizeof(Hello) || reply.flags != (sealed ? kHelloFlagSealed : 0u)) {
      s = Corrupt(who + " sent a malformed hello (size " + std::to_string(reply.size) + ", flags " +
                      std::to_string(reply.flags) + ")",
                  rank);
    } else if (std::memcmp(reply.from, peer.nonce.data(), 16) != 0 ||
               std::memcmp(reply.to, local_.nonce.data(), 16) != 0) {
      s = Corrupt(who + " answered for another endpoint (nonce mismatch)", rank);
    }
  }
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  *out_fd = fd;
  return Status::Ok();
}

Result<crypto::SessionCipher> Conn::secure_handshake(int fd, bool initiator, const EndpointAddress& peer,
                                                    Deadline deadline) {
  const int rank = options_.peer_rank;
  const std::string who = "peer" + (rank == Status::kNoPeer ? std::string() : " " + std::to_string(rank)) +
                          " at " + peer.to_string();
  crypto::HandshakeOptions ho;
  // Binds the session to this very link: the dialer's and the acceptor's endpoint nonces.
  ho.context = "lattice tcp v1 " + (initiator ? nonce_hex(local_.nonce) + ">" + nonce_hex(peer.nonce)
                                              : nonce_hex(peer.nonce) + ">" + nonce_hex(local_.nonce));
  auto role = initiator ? crypto::Handshake::Role::kInitiator : crypto::Handshake::Role::kResponder;
  LATTICE_ASSIGN_OR_RETURN(crypto::Handshake hs, crypto::Handshake::create(role, *provider_->secret(), ho));
  auto ctx = [&](const Status& st) {
    if (st.code() == ErrorCode::kAuthFailed)
      return AuthFailed("handshake with " + who + " failed (does it hold the same cluster secret?): " + st.message(),
                        rank);
    return st.with_context("handshake with " + who);
  };
  if (initiator) {
    LATTICE_ASSIGN_OR_RETURN(std::vector<uint8_t> m1, hs.start());
    LATTICE_RETURN_IF_ERROR(send_setup(fd, m1.data(), m1.size(), deadline, who, rank));
  }
  while (!hs.done()) {
    size_t n = hs.next_message_bytes();
    if (n == 0) return AuthFailed("handshake with " + who + " stalled", rank);
    std::vector<uint8_t> in(n);
    Status s = read_setup(fd, in.data(), n, deadline, who, rank);
    if (!s.ok()) {
      if (s.code() == ErrorCode::kPeerLost && initiator)
        return AuthFailed("handshake with " + who + ": it hung up (does it hold the same cluster secret?)", rank);
      return s;
    }
    auto out = hs.on_message(in);
    if (!out.ok()) {
      std::vector<uint8_t> reject = hs.take_reject();
      if (!reject.empty()) (void)lattice::write_all(fd, reject.data(), reject.size(), Deadline::now());  // best effort
      return ctx(out.status());
    }
    if (!out->empty()) LATTICE_RETURN_IF_ERROR(send_setup(fd, out->data(), out->size(), deadline, who, rank));
  }
  LATTICE_ASSIGN_OR_RETURN(crypto::Session session, hs.session());
  LATTICE_LOG_DEBUG("tcp: sealed session {} with {} ({})", session.session_id_hex(), who,
                    crypto::to_string(session.cipher));
  return crypto::SessionCipher::create(session.cipher, session.keys);
}

Status Conn::accept_from(const EndpointAddress& peer, Deadline deadline, int* out_fd) {
  std::unique_lock lock(connect_mu_);
  for (;;) {
    for (auto it = incoming_.begin(); it != incoming_.end();) {
      if (std::memcmp(it->from.data(), peer.nonce.data(), 16) == 0) {
        *out_fd = it->fd;
        incoming_.erase(it);
        connecting_done_ = true;
        for (auto& other : incoming_) ::close(other.fd);
        incoming_.clear();
        return Status::Ok();
      }
      LATTICE_LOG_WARN("tcp: dropping connection from {}: it is not the peer this endpoint connects to",
                       it->peer_text);
      ::close(it->fd);
      it = incoming_.erase(it);
    }
    if (deadline.expired()) {
      std::string who = "peer" +
                        (options_.peer_rank == Status::kNoPeer ? std::string() : " " + std::to_string(options_.peer_rank)) +
                        " at " + peer.to_string();
      return Timeout("waiting for " + who + " to connect: deadline passed", options_.peer_rank);
    }
    // Bounded slices: condition_variable::wait_until(time_point::max()) overflows in some libstdc++.
    connect_cv_.wait_for(lock, std::min<Clock::duration>(deadline.remaining(), std::chrono::milliseconds(100)));
  }
}

void Conn::offer_incoming(int fd, const Nonce& from, std::string peer_text) {
  std::lock_guard lock(connect_mu_);
  if (connecting_done_) {
    LATTICE_LOG_WARN("tcp: dropping connection from {}: endpoint already connected or closed", peer_text);
    ::close(fd);
    return;
  }
  incoming_.push_back({fd, from, std::move(peer_text)});
  connect_cv_.notify_all();
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
        rx_scratch_.resize(sink_len_);
        if (got) std::memcpy(rx_scratch_.data(), sink_ - got, got);
        sink_ = rx_scratch_.data() + got;
        sink_scratch_ = true;
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

// ---- transmit -------------------------------------------------------------------------------

void Conn::enqueue(TxOp&& op) {
  if (rx_ == Rx::kDead) {  // failed meanwhile: the operation completes with the sticky error
    if (op.completes) complete_send_side(op.id, Opcode::kSend, error_, 0);
    return;
  }
  if (op.is_response) ++queued_responses_;
  if (cipher_) {
    Status s = seal_op(op);
    if (!s.ok()) {
      tx_.push_back(std::move(op));
      fail(s, false);
      return;
    }
  }
  if (tx_.empty()) {
    // Fast path: straight to the kernel, no queueing.
    iovec iov[2];
    int n = 0;
    iov[n++] = {&op.hdr, sizeof(FrameHeader) + op.inline_len};
    if (op.payload_len) iov[n++] = {const_cast<std::byte*>(op.payload), std::min(op.payload_len, kMaxWriteBytes)};
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(n);
    ssize_t w;
    do {
      w = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (w < 0 && errno == EINTR);
    if (w >= 0) {
      last_tx_ = last_tx_progress_ = Clock::now();
      if (static_cast<size_t>(w) == op.total()) {
        if (op.completes) complete_send_side(op.id, Opcode::kSend, Status::Ok(), op.bytes);
        if (op.is_response) --queued_responses_;
        recycle(op);
        return;
      }
      op.done = static_cast<size_t>(w);
      if (op.done == sizeof(FrameHeader) + op.inline_len + std::min(op.payload_len, kMaxWriteBytes)) {
        // The socket took all we offered of a large payload: write the rest now, in rounds.
        tx_.push_back(std::move(op));
        flush_tx();
        if (want_write_.load()) arm_for_background();
        return;
      }
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      int e = errno;
      tx_.push_back(std::move(op));
      fail(PeerLost("connection to " + peer_text() + " failed while sending: " + std::strerror(e), options_.peer_rank),
           false);
      return;
    }
  }
  tx_.push_back(std::move(op));
  if (!want_write_.exchange(true)) arm_for_background();
}

Status Conn::seal_op(TxOp& op) {
  const size_t len = op.inline_len ? op.inline_len : op.payload_len;
  const std::byte* src = op.inline_len ? op.inline_data : op.payload;
  const size_t wire = kSealTagBytes + len + (len ? kSealTagBytes : 0);
  // Reuse a spare buffer: a fresh 1 MiB allocation per frame costs an mmap and page faults.
  for (auto it = seal_pool_.begin(); it != seal_pool_.end(); ++it) {
    if (it->second >= wire) {
      op.sealed = std::move(it->first);
      op.sealed_cap = it->second;
      seal_pool_.erase(it);
      break;
    }
  }
  if (!op.sealed) {
    op.sealed = std::make_unique_for_overwrite<std::byte[]>(wire);
    op.sealed_cap = wire;
  }
  op.hdr.flags = kFlagSealed;
  op.hdr.trailer_len = kSealTagBytes;
  op.hdr.seal_seq = cipher_->next_tx_seq();
  auto ad = std::as_bytes(std::span<const FrameHeader>(&op.hdr, 1));
  crypto::Tag tag;
  LATTICE_RETURN_IF_ERROR(cipher_->seal({}, ad, tag).status());
  std::memcpy(op.sealed.get(), tag.data(), kSealTagBytes);
  if (len) {
    std::byte* body = op.sealed.get() + kSealTagBytes;
    LATTICE_RETURN_IF_ERROR(cipher_->seal_to({src, len}, body, ad, tag).status());
    std::memcpy(body + len, tag.data(), kSealTagBytes);
  }
  op.inline_len = 0;
  op.payload = op.sealed.get();
  op.payload_len = wire;
  return Status::Ok();
}

void Conn::recycle(TxOp& op) {
  constexpr size_t kPoolMin = 4096, kPoolCount = 8;
  if (!op.sealed || op.sealed_cap < kPoolMin) return;
  if (seal_pool_.size() >= kPoolCount) {
    auto smallest = std::min_element(seal_pool_.begin(), seal_pool_.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
    if (smallest->second >= op.sealed_cap) return;
    seal_pool_.erase(smallest);
  }
  seal_pool_.emplace_back(std::move(op.sealed), op.sealed_cap);
}

void Conn::enqueue_response(FrameHeader h, const std::byte* payload, size_t len) {
  TxOp op;
  op.hdr = h;
  op.hdr.payload_len = len;
  if (len <= kMaxInline) {
    if (len) std::memcpy(op.inline_data, payload, len);
    op.inline_len = len;
  } else {
    op.payload = payload;
    op.payload_len = len;
  }
  op.is_response = true;
  enqueue(std::move(op));
}

void Conn::enqueue_heartbeat() {
  TxOp op;
  op.hdr = make_header(FrameType::kHeartbeat);
  enqueue(std::move(op));
}

void Conn::flush_tx() {
  while (!tx_.empty() && rx_ != Rx::kDead) {
    constexpr int kMaxIov = 64;
    iovec iov[kMaxIov];
    int n = 0;
    size_t want = 0;
    for (auto it = tx_.begin(); it != tx_.end() && n + 2 <= kMaxIov; ++it) {
      size_t head = sizeof(FrameHeader) + it->inline_len;
      size_t done = it->done;
      if (done < head) {
        iov[n++] = {reinterpret_cast<std::byte*>(&it->hdr) + done, head - done};
        want += head - done;
        done = 0;
      } else {
        done -= head;
      }
      if (it->payload_len > done) {
        // At most kMaxWriteBytes per call: the rest of a large payload goes in the next round.
        const size_t len = std::min(it->payload_len - done, kMaxWriteBytes - std::min(want, kMaxWriteBytes));
        if (len == 0) break;
        iov[n++] = {const_cast<std::byte*>(it->payload) + done, len};
        want += len;
        if (len < it->payload_len - done) break;  // never a later frame's bytes before this one's
      }
      if (want >= kMaxWriteBytes) break;
    }
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = ::sendmsg(fd_, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      fail(PeerLost("connection to " + peer_text() + " failed while sending: " + std::strerror(errno),
                    options_.peer_rank),
           false);
      return;
    }
    last_tx_ = last_tx_progress_ = Clock::now();
    size_t left = static_cast<size_t>(w);
    while (left > 0 || (!tx_.empty() && tx_.front().done == tx_.front().total())) {
      TxOp& op = tx_.front();
      size_t rest = op.total() - op.done;
      if (left < rest) {
        op.done += left;
        left = 0;
        break;
      }
      left -= rest;
      if (op.completes) complete_send_side(op.id, Opcode::kSend, Status::Ok(), op.bytes);
      if (op.is_response) --queued_responses_;
      recycle(op);
      tx_.pop_front();
    }
    if (static_cast<size_t>(w) < want) break;  // the socket is full
  }
  want_write_.store(!tx_.empty() && rx_ != Rx::kDead);
}

// ---- receive --------------------------------------------------------------------------------

void Conn::read_rx() {
  for (int round = 0; round < 64; ++round) {
    if (!parse_staged()) return;
    ssize_t r;
    if (rx_ == Rx::kPayload && stage_r_ == stage_w_ && sink_left_ >= kDirectReadMin) {
      // Large payload tail: straight into its destination, no staging copy.
      const size_t asked = sink_left_;
      r = ::recv(fd_, sink_, asked, MSG_DONTWAIT);
      if (r > 0) {
        sink_ += r;
        sink_left_ -= static_cast<uint64_t>(r);
        last_rx_ = Clock::now();
        if (sink_left_ == 0 && discard_left_ == 0) payload_done();
        if (static_cast<size_t>(r) < asked) return;  // drained: the next progress call reads on
        continue;
      }
    } else {
      if (stage_r_ == stage_w_) {
        stage_r_ = stage_w_ = 0;
      } else if (staging_.size() - stage_w_ < head_bytes()) {
        std::memmove(staging_.data(), staging_.data() + stage_r_, stage_w_ - stage_r_);
        stage_w_ -= stage_r_;
        stage_r_ = 0;
      }
      // After a large frame the next one is likely large too: stage only a little of it so
      // most of its payload is read in place rather than copied out of the staging buffer.
      const size_t asked =
          std::min(staging_.size() - stage_w_, last_frame_large_ ? kSmallStageRead : staging_.size());
      r = ::recv(fd_, staging_.data() + stage_w_, asked, MSG_DONTWAIT);
      if (r > 0) {
        stage_w_ += static_cast<size_t>(r);
        last_rx_ = Clock::now();
        // A short read drained the socket: parse and stop, saving a recv() that would only say
        // EAGAIN (a third of the per-message cost of a small ping-pong).
        if (static_cast<size_t>(r) < asked) {
          parse_staged();
          return;
        }
        continue;
      }
    }
    if (r == 0) {
      fail(PeerLost(peer_text() + " closed the connection", options_.peer_rank), false, /*clean_eof=*/true);
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      parse_staged();
      return;
    }
    // A reset or any other socket error means the peer is gone.
    fail(PeerLost("connection to " + peer_text() + " failed: " + std::strerror(errno), options_.peer_rank), false);
    return;
  }
}

bool Conn::parse_staged() {
  for (;;) {
    if (rx_ == Rx::kDead || rx_ == Rx::kStalled) return false;
    if (queued_responses_ >= kMaxQueuedResponses) return false;  // the peer is not reading: stop serving
    size_t avail = stage_w_ - stage_r_;
    if (rx_ == Rx::kHeader) {
      if (avail < head_bytes()) return true;
      std::memcpy(&cur_, staging_.data() + stage_r_, sizeof(FrameHeader));
      if (cipher_) {
        crypto::Tag tag;
        std::memcpy(tag.data(), staging_.data() + stage_r_ + sizeof(FrameHeader), kSealTagBytes);
        Status s = cipher_->open_next({}, std::as_bytes(std::span<const FrameHeader>(&cur_, 1)), tag);
        if (!s.ok()) {
          fail(AuthFailed(peer_text() + " sent a frame header that failed authentication (tampered, replayed or "
                                        "reordered): " + s.message(),
                          options_.peer_rank),
               true);
          return false;
        }
      }
      stage_r_ += head_bytes();
      Status s = begin_frame();
      if (!s.ok()) {
        fail(s, true);
        return false;
      }
      continue;
    }
    if (avail == 0) return true;
    if (rx_ == Rx::kTrailer) {
      if (avail < kSealTagBytes) return true;
      crypto::Tag tag;
      std::memcpy(tag.data(), staging_.data() + stage_r_, kSealTagBytes);
      stage_r_ += kSealTagBytes;
      std::byte* start = sink_ - sink_len_;
      Status s = cipher_->open_next({start, sink_len_}, std::as_bytes(std::span<const FrameHeader>(&cur_, 1)), tag);
      if (!s.ok()) {
        fail(AuthFailed(peer_text() + " sent a payload that failed authentication (tampered): " + s.message(),
                        options_.peer_rank),
             true);
        return false;
      }
      finish_frame();
      continue;
    }
    if (sink_left_ > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(avail, sink_left_));
      std::memcpy(sink_, staging_.data() + stage_r_, n);
      sink_ += n;
      sink_left_ -= n;
      stage_r_ += n;
      avail -= n;
    }
    if (sink_left_ == 0 && discard_left_ > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(avail, discard_left_));
      discard_left_ -= n;
      stage_r_ += n;
    }
    if (sink_left_ == 0 && discard_left_ == 0) payload_done();
  }
}

void Conn::payload_done() {
  if (cipher_ && cur_.payload_len > 0) {
    rx_ = Rx::kTrailer;
    return;
  }
  finish_frame();
}

Status Conn::check_access(uint64_t key, uint64_t offset, uint64_t len, uint32_t right, const char* what,
                          RegionInfo* out) {
  auto region = provider_->regions().find(key);
  if (!region)
    return AccessDenied(peer_text() + " asked to " + what + " region key " + hex(key) +
                            ", which is not registered here",
                        options_.peer_rank);
  if (!(region->access & right))
    return AccessDenied(peer_text() + " asked to " + what + " region key " + hex(key) +
                            ", which does not grant that right",
                        options_.peer_rank);
  if (offset > region->size || len > region->size - offset)
    return AccessDenied(peer_text() + " asked to " + what + " [" + std::to_string(offset) + ", +" +
                            std::to_string(len) + ") of region key " + hex(key) + ", which has " +
                            std::to_string(region->size) + " bytes",
                        options_.peer_rank);
  *out = *region;
  return Status::Ok();
}

Status Conn::begin_frame() {
  const FrameHeader& h = cur_;
  const int rank = options_.peer_rank;
  if (h.version != kWireVersion)
    return Corrupt(peer_text() + " sent a frame of protocol version " + std::to_string(h.version) +
                       ", we speak " + std::to_string(kWireVersion),
                   rank);
  if (cipher_) {
    if (h.flags != kFlagSealed || h.trailer_len != kSealTagBytes)
      return Corrupt(peer_text() + " sent an unsealed frame in a sealed session", rank);
  } else if (h.flags != 0 || h.trailer_len != 0 || h.seal_seq != 0)
    return Corrupt(peer_text() + " sent a frame with flags/trailer/seal fields set, which protocol version " +
                       std::to_string(kWireVersion) + " does not allow",
                   rank);
  auto no_payload = [&](const char* what) -> Status {
    if (h.payload_len != 0)
      return Corrupt(peer_text() + " sent a " + what + " frame with a " + std::to_string(h.payload_len) +
                         "-byte payload (must be empty)",
                     rank);
    return Status::Ok();
  };
  auto expect_response = [&](std::initializer_list<Opcode> ops, const char* what) -> Status {
    if (pending_.empty() || pending_.front().req_id != h.req_id ||
        std::find(ops.begin(), ops.end(), pending_.front().op) == ops.end())
      return Corrupt(peer_text() + " sent a " + what + " for request " + std::to_string(h.req_id) +
                         ", which is not the oldest outstanding request",
                     rank);
    return Status::Ok();
  };
  rx_ = Rx::kHeader;
  sink_ = nullptr;
  sink_left_ = discard_left_ = 0;
  sink_len_ = 0;
  sink_scratch_ = false;
  finish_ = Finish::kNone;
  switch (static_cast<FrameType>(h.type)) {
    case FrameType::kSend: {
      if (h.payload_len > kMaxMessage)
        return Corrupt(peer_text() + " sent a message of " + std::to_string(h.payload_len) +
                           " bytes, more than max_msg " + std::to_string(kMaxMessage),
                       rank);
      if (unexpected_.empty() && !recvs_.empty()) {
        const RecvOp& r = recvs_.front();
        sink_ = r.released ? nullptr : r.buf;
        sink_len_ = r.released ? 0 : static_cast<size_t>(std::min<uint64_t>(h.payload_len, r.cap));
        sink_left_ = sink_len_;
        discard_left_ = h.payload_len - sink_len_;
        if (cipher_ && discard_left_ > 0) {
          // The tag covers every byte: open the whole message aside, then copy what fits.
          rx_scratch_.resize(h.payload_len);
          sink_ = rx_scratch_.data();
          sink_len_ = sink_left_ = h.payload_len;
          discard_left_ = 0;
          sink_scratch_ = true;
        }
        finish_ = Finish::kRecvMsg;
      } else if (h.payload_len <= kMaxUnexpectedMsg && unexpected_bytes_ + h.payload_len <= kMaxUnexpectedBytes &&
                 unexpected_.size() < kMaxUnexpectedCount) {
        unexpected_buf_.assign(h.payload_len, std::byte{0});
        sink_ = unexpected_buf_.data();
        sink_len_ = sink_left_ = h.payload_len;
        finish_ = Finish::kUnexpectedMsg;
      } else {
        rx_ = Rx::kStalled;  // wait for a receive (backpressure on the socket)
        return Status::Ok();
      }
      rx_ = Rx::kPayload;
      break;
    }
    case FrameType::kWrite:
    case FrameType::kWriteImm: {
      bool imm = static_cast<FrameType>(h.type) == FrameType::kWriteImm;
      if (imm && !(unexpected_.empty() && !recvs_.empty()) && unexpected_.size() >= kMaxUnexpectedCount) {
        rx_ = Rx::kStalled;
        return Status::Ok();
      }
      RegionInfo r;
      LATTICE_RETURN_IF_ERROR(check_access(h.key, h.offset, h.payload_len, kRemoteWrite, "write", &r));
      sink_ = r.data + h.offset;
      sink_len_ = sink_left_ = h.payload_len;
      finish_ = imm ? Finish::kWriteImm : Finish::kWrite;
      rx_ = Rx::kPayload;
      break;
    }
    case FrameType::kReadReq: {
      LATTICE_RETURN_IF_ERROR(no_payload("read request"));
      RegionInfo r;
      LATTICE_RETURN_IF_ERROR(check_access(h.key, h.offset, h.arg0, kRemoteRead, "read", &r));
      FrameHeader resp = make_header(FrameType::kReadResp);
      resp.req_id = h.req_id;
      enqueue_response(resp, r.data + h.offset, h.arg0);
      return Status::Ok();
    }
    case FrameType::kFetchAdd:
    case FrameType::kCompareSwap: {
      LATTICE_RETURN_IF_ERROR(no_payload("atomic"));
      RegionInfo r;
      LATTICE_RETURN_IF_ERROR(check_access(h.key, h.offset, 8, kRemoteAtomic, "atomically update", &r));
      std::byte* p = r.data + h.offset;
      if (reinterpret_cast<uintptr_t>(p) % 8 != 0)
        return AccessDenied(peer_text() + " asked for an atomic at offset " + std::to_string(h.offset) +
                                ", which is not 8-byte aligned",
                            rank);
      std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(p));
      uint64_t old;
      if (static_cast<FrameType>(h.type) == FrameType::kFetchAdd) {
        old = word.fetch_add(h.arg0);
      } else {
        old = h.arg0;
        word.compare_exchange_strong(old, h.arg1);
      }
      FrameHeader resp = make_header(FrameType::kAtomicResp);
      resp.req_id = h.req_id;
      resp.arg0 = old;
      enqueue_response(resp, nullptr, 0);
      return Status::Ok();
    }
    case FrameType::kAck: {
      LATTICE_RETURN_IF_ERROR(no_payload("write ack"));
      LATTICE_RETURN_IF_ERROR(expect_response({Opcode::kWrite, Opcode::kWriteImm}, "write ack"));
      PendingOp op = pending_.front();
      pending_.pop_front();
      --outstanding_send_side_;
      complete_send_side(op.id, op.op, Status::Ok(), op.len);
      return Status::Ok();
    }
    case FrameType::kReadResp: {
      LATTICE_RETURN_IF_ERROR(expect_response({Opcode::kRead}, "read response"));
      if (h.payload_len != pending_.front().len)
        return Corrupt(peer_text() + " answered a " + std::to_string(pending_.front().len) + "-byte read with " +
                           std::to_string(h.payload_len) + " bytes",
                       rank);
      sink_ = pending_.front().local;
      sink_len_ = sink_left_ = h.payload_len;
      finish_ = Finish::kReadResp;
      rx_ = Rx::kPayload;
      break;
    }
    case FrameType::kAtomicResp: {
      LATTICE_RETURN_IF_ERROR(no_payload("atomic response"));
      LATTICE_RETURN_IF_ERROR(expect_response({Opcode::kFetchAdd, Opcode::kCompareSwap}, "atomic response"));
      PendingOp op = pending_.front();
      pending_.pop_front();
      --outstanding_send_side_;
      std::memcpy(op.local, &h.arg0, 8);
      complete_send_side(op.id, op.op, Status::Ok(), 8);
      return Status::Ok();
    }
    case FrameType::kHeartbeat:
      return no_payload("heartbeat");
    case FrameType::kError: {
      if (h.payload_len > kMaxErrorText)
        return Corrupt(peer_text() + " sent an error frame of " + std::to_string(h.payload_len) + " bytes", rank);
      unexpected_buf_.assign(h.payload_len, std::byte{0});
      sink_ = unexpected_buf_.data();
      sink_len_ = sink_left_ = h.payload_len;
      finish_ = Finish::kErrorText;
      rx_ = Rx::kPayload;
      break;
    }
    default:
      return Corrupt(peer_text() + " sent a frame of unknown type " + std::to_string(h.type), rank);
  }
  if (sink_left_ == 0 && discard_left_ == 0) payload_done();
  return Status::Ok();
}

void Conn::match_unexpected() {
  // Arrivals held back (no receive was posted when they began) meet receives in order. A
  // receive may be posted while a held-back message is still arriving, so this runs after each
  // arrival as well as after each post.
  while (!unexpected_.empty() && !recvs_.empty()) {
    Unexpected u = std::move(unexpected_.front());
    unexpected_.pop_front();
    RecvOp r = recvs_.front();
    recvs_.pop_front();
    unexpected_bytes_ -= u.data.size();
    if (u.is_imm) {
      complete_recv_side(r.id, Opcode::kRecvImm, Status::Ok(), 0, u.imm);
      continue;
    }
    if (r.released) {
      complete_recv_side(r.id, Opcode::kRecv, Cancelled("receive released before its message arrived"), 0, 0);
      continue;
    }
    size_t n = std::min(u.data.size(), r.cap);
    if (n > 0) std::memcpy(r.buf, u.data.data(), n);
    Status s = n < u.data.size() ? Truncated("message of " + std::to_string(u.data.size()) + " bytes truncated to the " +
                                                 std::to_string(r.cap) + "-byte receive buffer",
                                             options_.peer_rank)
                                 : Status::Ok();
    complete_recv_side(r.id, Opcode::kRecv, std::move(s), n, 0);
  }
}

void Conn::finish_frame() {
  last_frame_large_ = cur_.payload_len >= kDirectReadMin * 8;
  Finish what = finish_;
  rx_ = Rx::kHeader;
  finish_ = Finish::kNone;
  const int rank = options_.peer_rank;
  switch (what) {
    case Finish::kNone:
      break;
    case Finish::kRecvMsg: {
      RecvOp r = recvs_.front();
      recvs_.pop_front();
      if (r.released) {
        rx_scratch_ = {};
        sink_scratch_ = false;
        complete_recv_side(r.id, Opcode::kRecv, Cancelled("receive released before its message arrived"), 0, 0);
        break;
      }
      uint64_t full = cur_.payload_len;
      Status s = full > r.cap ? Truncated("message of " + std::to_string(full) + " bytes truncated to the " +
                                              std::to_string(r.cap) + "-byte receive buffer",
                                          rank)
                              : Status::Ok();
      size_t got = sink_len_;
      if (sink_scratch_) {
        got = std::min(sink_len_, r.cap);
        if (got) std::memcpy(r.buf, rx_scratch_.data(), got);
        rx_scratch_ = {};
        sink_scratch_ = false;
      }
      complete_recv_side(r.id, Opcode::kRecv, std::move(s), got, 0);
      break;
    }
    case Finish::kUnexpectedMsg:
      unexpected_bytes_ += unexpected_buf_.size();
      unexpected_.push_back({false, 0, std::move(unexpected_buf_)});
      unexpected_buf_ = {};
      match_unexpected();
      break;
    case Finish::kWrite:
    case Finish::kWriteImm: {
      FrameHeader ack = make_header(FrameType::kAck);
      ack.req_id = cur_.req_id;
      enqueue_response(ack, nullptr, 0);
      if (what == Finish::kWriteImm) {
        unexpected_.push_back({true, cur_.imm, {}});
        match_unexpected();
      }
      break;
    }
    case Finish::kReadResp: {
      PendingOp op = pending_.front();
      pending_.pop_front();
      --outstanding_send_side_;
      complete_send_side(op.id, Opcode::kRead, Status::Ok(), op.len);
      break;
    }
    case Finish::kErrorText: {
      std::string text(reinterpret_cast<const char*>(unexpected_buf_.data()), unexpected_buf_.size());
      for (char& c : text)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
      unexpected_buf_ = {};
      // The code is the peer's word: anything outside the known range becomes kCorrupt.
      const bool known = cur_.imm != 0 && cur_.imm <= static_cast<uint32_t>(ErrorCode::kInternal);
      ErrorCode code = known ? static_cast<ErrorCode>(cur_.imm) : ErrorCode::kCorrupt;
      fail(Status(code, peer_text() + " failed the connection: " + text, rank), false);
      break;
    }
  }
}

// ---- failure, completion, progress ----------------------------------------------------------

void Conn::complete_send_side(WorkId id, Opcode op, Status s, size_t bytes) {
  // A send is outstanding until it completes here (one-sided operations until their response
  // arrives, where they are counted off). Without this an endpoint took kMaxOutstanding sends
  // in its life and then refused every post: a long decode or bench run stalled until its
  // deadline.
  if (op == Opcode::kSend && outstanding_send_side_ > 0) --outstanding_send_side_;
  send_cq_->push(Completion{id, op, std::move(s), bytes, 0});
}

void Conn::complete_recv_side(WorkId id, Opcode op, Status s, size_t bytes, uint32_t imm) {
  recv_cq_->push(Completion{id, op, std::move(s), bytes, imm});
}

void Conn::fail(Status s, bool tell_peer, bool clean_eof) {
  if (!error_.ok()) return;
  error_ = s;
  failed_.store(true);
  poll_fd_.store(-1);
  // A peer closing its endpoint (EOF) is how every run ends: not worth a warning.
  if (clean_eof) {
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
      fail(PeerLost(peer_text() + " closed the connection", options_.peer_rank), false, /*clean_eof=*/true);
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
