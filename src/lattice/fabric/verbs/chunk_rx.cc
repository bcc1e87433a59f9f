#include "lattice/fabric/verbs/chunk_rx.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace lattice::fabric::verbs {

ChunkReceiver::Admitted ChunkReceiver::admit(const std::byte* slot, uint32_t byte_len, uint32_t peer_session,
                                             LinkSeal* seal, bool connecting) {
  Admitted a;
  std::memcpy(&a.h, slot, sizeof a.h);
  const ChunkHeader& h = a.h;
  bool ok = byte_len == kSlotBytes && h.magic == kChunkMagic && h.session == peer_session &&
            h.payload_bytes <= chunk_capacity(h) && chunk_crc(slot) == h.crc;
  if (!ok) {
    // Corrupted on the wire (or a stale session): drop it, ask for a retransmission.
    counters_.bad_crc++;
    nack_due_ = true;
    return a;
  }
  return admit_sealed(slot, h, seal, connecting);
}

// Sealed sessions: handshake hellos, the header tag, replays.
ChunkReceiver::Admitted ChunkReceiver::admit_sealed(const std::byte* slot, const ChunkHeader& h, LinkSeal* seal,
                                                    bool connecting) {
  Admitted a;
  a.h = h;
  const bool sealed = (h.flags & kFlagSealed) != 0;
  const bool handshake = static_cast<ChunkType>(h.type) == ChunkType::kHello && (h.flags & kFlagHandshake);
  auto fail = [&a](Status st) {
    a.what = Arrival::kFailed;
    a.error = std::move(st);
    return std::move(a);
  };
  if (seal == nullptr) {
    if (!sealed && !handshake) {
      a.what = Arrival::kChunk;
      return a;
    }
    return fail(
        InvalidArgument("verbs: the peer requires encryption (cluster secret) but this endpoint runs plaintext"));
  }
  if (handshake && !sealed) {
    Status st = seal->on_handshake({slot + sizeof h, h.payload_bytes}, &a.reject);
    if (!st.ok()) {
      return fail(st.code() == ErrorCode::kAuthFailed
                      ? AuthFailed("verbs: the crypto handshake with the peer failed (does it hold the same cluster "
                                   "secret?): " +
                                       st.message(),
                                   peer_rank_)
                      : st.with_context("verbs: crypto handshake"));
    }
    a.reject.clear();
    a.what = Arrival::kHandshake;
    return a;
  }
  if (!sealed) {
    return fail(connecting ? InvalidArgument("verbs: the peer runs plaintext (no cluster secret) but this endpoint "
                                             "requires encryption")
                           : AuthFailed("verbs: the peer sent an unsealed frame in a sealed session", peer_rank_));
  }
  if (!seal->ready()) {  // the initiator's first sealed frames can pass its M3: it resends
    a.what = Arrival::kEarly;
    return a;
  }
  auto verdict = seal->open_header(slot);
  if (!verdict.ok()) {
    return fail(
        AuthFailed("verbs: a frame from the peer failed authentication (tampered on the wire; its checksum "
                   "matched, so not line noise): " +
                       verdict.status().message(),
                   peer_rank_));
  }
  if (*verdict == LinkSeal::Verdict::kStale) {  // replayed or reordered: never delivered
    counters_.stale++;
    nack_due_ = true;
    a.what = Arrival::kDropped;
    return a;
  }
  a.what = Arrival::kChunk;
  return a;
}

bool ChunkReceiver::take_data(const ChunkHeader& h, uint32_t slot_index) {
  if (h.seq == expected_ && held_.size() < kRecvSlots - kRecvReserve) {
    expected_++;
    held_.push_back(slot_index);
    if (++accepted_since_ack_ >= kAckEveryChunks || (h.flags & kFlagImm))
      ack_due_ = true;
    else if (h.flags & kFlagLast)
      tail_due_ = true;
    return true;
  }
  if (h.seq < expected_) {
    counters_.duplicates++;
    ack_due_ = true;
  } else {
    counters_.gaps++;
    nack_due_ = true;
  }
  return false;
}

Result<ChunkReceiver::Delivered> ChunkReceiver::deliver(std::byte* slot, std::byte* dst, size_t dst_len,
                                                        LinkSeal* seal) {
  ChunkHeader h;
  std::memcpy(&h, slot, sizeof h);
  const bool first = (h.flags & kFlagFirst) != 0;
  if (first != !cur_.active || h.offset != cur_.got || (cur_.active && h.msg_bytes != cur_.total) ||
      h.offset + h.payload_bytes > h.msg_bytes) {
    return Corrupt("verbs: chunk out of place in message (offset " + std::to_string(h.offset) + ")", peer_rank_);
  }
  auto open = [&](std::byte* out) -> Status {
    if (Status st = seal->open_payload(slot, out); !st.ok())
      return AuthFailed("verbs: a payload from the peer failed authentication (tampered on the wire): " + st.message(),
                        peer_rank_);
    return Status();
  };
  std::byte* body = slot + chunk_body_offset(h);
  Delivered d;
  if (first && (h.flags & kFlagImm)) {
    if (seal) LATTICE_RETURN_IF_ERROR(open(body));
    held_.pop_front();
    d.imm = true;
    d.imm_value = h.imm;
    return d;
  }
  if (first) cur_ = {true, h.msg_bytes, 0};
  if (seal) {
    // Decrypting from the slot into the receive is the copy (one pass); a chunk that does not
    // fit whole (a truncated message) is opened in its slot, then copied.
    const bool whole = h.offset + h.payload_bytes <= dst_len;
    LATTICE_RETURN_IF_ERROR(open(whole ? dst + h.offset : body));
    if (!whole && h.offset < dst_len)
      std::memcpy(dst + h.offset, body, std::min<uint64_t>(h.payload_bytes, dst_len - h.offset));
  } else if (h.offset < dst_len) {
    size_t n = std::min<uint64_t>(h.payload_bytes, dst_len - h.offset);
    std::memcpy(dst + h.offset, body, n);
  }
  cur_.got += h.payload_bytes;
  held_.pop_front();
  if (h.flags & kFlagLast) {
    d.last = true;
    d.total = cur_.total;
    cur_ = {};
  }
  return d;
}

}  // namespace lattice::fabric::verbs
