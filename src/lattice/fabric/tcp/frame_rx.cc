// The receive half of the tcp endpoint's framing: bytes are staged and parsed into frames
// (wire.h), every field read from the peer is validated before use, payloads land in posted
// receives, target regions or read buffers, and sealed sessions open them once their tag is in.
// One-sided requests are applied here (target side). All here: Conn::mu_ held.
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <sodium.h>

#include "lattice/core/log.h"
#include "lattice/fabric/tcp/endpoint.h"
#include "lattice/fabric/tcp/provider.h"

namespace lattice::fabric::tcp {

namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

// ---- receive --------------------------------------------------------------------------------

void Conn::read_rx() {
  for (int round = 0; round < 64; ++round) {
    if (!parse_staged()) return;
    ssize_t r;
    if (rx_ == Rx::kPayload && stage_r_ == stage_w_ && sink_left_ >= kDirectReadMin) {
      // Large payload tail: straight into its destination, no staging copy.
      // Opening as it lands: pieces small enough to be decrypted while still in cache.
      const size_t asked = rx_stream_ ? std::min<uint64_t>(sink_left_, kStreamOpenPiece) : sink_left_;
      r = ::recv(fd_, sink_, asked, MSG_DONTWAIT);
      if (r > 0) {
        sink_ += r;
        sink_left_ -= static_cast<uint64_t>(r);
        last_rx_ = Clock::now();
        if (rx_stream_ && !open_landed()) return;
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
      fail(PeerLost(peer_text() + " closed the connection", options_.peer_rank), false, /*routine=*/true);
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
      Status s;
      if (rx_stream_) {
        rx_stream_ = false;
        s = cipher_->open_end(tag);
        if (!s.ok()) sodium_memzero(start, sink_len_);  // the pieces were decrypted unverified
      } else {
        s = cipher_->open_next({start, sink_len_}, std::as_bytes(std::span<const FrameHeader>(&cur_, 1)), tag);
      }
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
      if (rx_stream_ && !open_landed()) return false;
    }
    if (sink_left_ == 0 && discard_left_ > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(avail, discard_left_));
      discard_left_ -= n;
      stage_r_ += n;
    }
    if (sink_left_ == 0 && discard_left_ == 0) payload_done();
  }
}

void Conn::begin_stream_open() {
  rx_stream_ = false;
  if (!cipher_ || sink_len_ == 0 || discard_left_ != 0 || !cipher_->can_stream(sink_len_)) return;
  if (!cipher_->open_begin(std::as_bytes(std::span<const FrameHeader>(&cur_, 1))).ok()) return;  // failed: open_next says why
  rx_stream_ = true;
  rx_opened_ = sink_;
}

bool Conn::open_landed() {
  Status s = cipher_->open_update({rx_opened_, static_cast<size_t>(sink_ - rx_opened_)});
  rx_opened_ = sink_;
  if (s.ok()) return true;
  rx_stream_ = false;
  sodium_memzero(sink_ - (sink_len_ - sink_left_), sink_len_ - sink_left_);
  fail(AuthFailed(peer_text() + " sent a payload that could not be opened: " + s.message(), options_.peer_rank), true);
  return false;
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
  begin_stream_open();
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

}  // namespace lattice::fabric::tcp
