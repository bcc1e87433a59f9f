// The transmit half of the tcp endpoint's framing: frames (wire.h) queue in tx_ and leave by
// sendmsg() gathering header and payload straight from the caller's memory; sealed sessions seal
// each frame at enqueue time, out of place into a pooled buffer. All here: Conn::mu_ held.
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "lattice/core/log.h"
#include "lattice/fabric/tcp/endpoint.h"
#include "lattice/fabric/tcp/provider.h"

namespace lattice::fabric::tcp {

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

}  // namespace lattice::fabric::tcp
