// The go-back-N sender of the staged endpoint (endpoint_impl.h): every slot goes out whole with
// the receiver's ack and credit and a checksum, sealed in a sealed session; data chunks wait in
// a window of kDataSlots until acked, and a nack or an RTO of silence resends them all.
#include <cstring>

#include "lattice/core/log.h"
#include "lattice/fabric/verbs/endpoint_impl.h"

namespace lattice::fabric::verbs::detail {

bool VerbsEndpoint::post_slot(std::byte* p, uint64_t id, Clock::time_point now) {
  ChunkHeader h;
  std::memcpy(&h, p, sizeof h);
  h.magic = kChunkMagic;
  h.session = session_;
  h.ack = rx_.expected();
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
  rx_.ack_carried();
  tail_since_ = {};
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

bool VerbsEndpoint::post_recv_slot(uint32_t i) {
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

bool VerbsEndpoint::send_ctrl(ChunkType type, uint8_t flags, Clock::time_point now, std::span<const uint8_t> body) {
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

void VerbsEndpoint::take_ack(const ChunkHeader& h, Clock::time_point now) {
  if (h.credit_limit > peer_credit_) peer_credit_ = h.credit_limit;
  if (h.ack > acked_ && h.ack <= next_seq_) {
    for (uint64_t s = acked_; s < h.ack; ++s) dslots_[s % kDataSlots].used = false;
    acked_ = h.ack;
    last_ack_progress_ = now;
    rto_ = kRto;
    while (!sends_.empty() && sends_.front().all_chunked && sends_.front().last_seq < acked_) {
      const UserSend& f = sends_.front();
      if (!f.completed()) complete_send(f);
      sends_.pop_front();
    }
  }
  if ((h.flags & kFlagNack) && acked_ < next_seq_ && now - last_retransmit_ > std::chrono::milliseconds(1))
    go_back_n(now);
}

void VerbsEndpoint::complete_send(const UserSend& f) {
  const size_t bytes = f.op == Opcode::kSend ? f.src.length : f.bytes;
  scq_->push({f.id, f.op, Status(), bytes, 0});
  link_.count({f.id, f.op, Status(), bytes, 0});
}

void VerbsEndpoint::go_back_n(Clock::time_point now) {
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

bool VerbsEndpoint::pump_sends(Clock::time_point now) {
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
        // Every byte is in the staging slots, which go-back-N resends from: the caller's
        // buffer is free, so its send completes now rather than a round trip later at the
        // ack (the destructor drains unacked chunks before its bye). A write-with-imm's
        // message completes the write, which only the ack confirms.
        if (s.completed()) complete_send(s);
      }
      next_seq_++;
      work = true;
    }
  }
  return work;
}

}  // namespace lattice::fabric::verbs::detail
