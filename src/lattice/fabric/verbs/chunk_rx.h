// The receive side of the verbs provider's staged protocol, apart from the queue pair
// (endpoint.cc posts the slots and hands every completed receive here): the checks a slot
// passes before anything in it is believed, a sealed session's admission (handshake hellos,
// header tags, replays), the in-order window of go-back-N, and the reassembly of accepted
// chunks into a user's receive. Nothing here posts, sends or locks, so
// fuzz/verbs_chunk_fuzz.cc drives this very code with crafted slots.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/fabric/verbs/seal.h"
#include "lattice/fabric/verbs/wire.h"

namespace lattice::fabric::verbs {

class ChunkReceiver {
 public:
  explicit ChunkReceiver(int peer_rank) : peer_rank_(peer_rank) {}

  struct Counters {
    uint64_t bad_crc = 0, duplicates = 0, gaps = 0, stale = 0;
  };

  // What became of a received slot. Every kind but kChunk is finished with here: the caller
  // reposts the slot (and, for kFailed, fails the link).
  enum class Arrival {
    kDropped,    // line noise, a stale session, or a replayed/reordered sealed frame: a nack is due
    kEarly,      // sealed, before this side has its keys (the peer resends)
    kHandshake,  // a handshake message was taken: hello at once if seal->outgoing() or ready()
    kFailed,     // the link fails with `error`; send `reject` (a handshake reject) first if any
    kChunk,      // intact and, when sealed, authentic: `h` is its header, for the protocol
  };
  struct Admitted {
    Arrival what = Arrival::kDropped;
    ChunkHeader h{};
    Status error;
    std::vector<uint8_t> reject;
  };
  // `slot`: kSlotBytes of a completed receive, `byte_len` bytes of it written. `seal`: the
  // session's seal (null when plaintext). `connecting`: the hellos are not done yet (only
  // changes which error a plaintext peer gets).
  Admitted admit(const std::byte* slot, uint32_t byte_len, uint32_t peer_session, LinkSeal* seal, bool connecting);

  // An admitted kData chunk (connected): true if it is the next in order and there is room, so
  // it is held (the caller keeps its slot until it is delivered); otherwise it counts as a
  // duplicate (an ack is due) or a gap (a nack is due) and the caller reposts the slot.
  bool take_data(const ChunkHeader& h, uint32_t slot_index);
  // An admitted chunk of no known type.
  void unknown_type() { counters_.bad_crc++; }

  bool has_held() const { return !held_.empty(); }
  uint32_t front_slot() const { return held_.front(); }
  size_t held() const { return held_.size(); }
  // A message is partly delivered into the front receive.
  bool message_open() const { return cur_.active; }
  struct Delivered {
    bool imm = false;   // a write-with-imm's immediate (`imm`), no payload: the receive completes
    bool last = false;  // the message is complete: `total` bytes (more than dst_len: truncated)
    uint32_t imm_value = 0;
    uint64_t total = 0;
  };
  // The oldest held chunk, in `slot`, into the front user receive (`dst`, `dst_len` bytes):
  // checks its place in the message, then opens (sealed) or copies its payload. On success the
  // chunk is no longer held (the caller reposts its slot). An error fails the link: kCorrupt (a
  // chunk out of place) or kAuthFailed (a payload that does not open).
  Result<Delivered> deliver(std::byte* slot, std::byte* dst, size_t dst_len, LinkSeal* seal);
  // The link failed: whatever message was open is gone with its receives.
  void drop_message() { cur_ = {}; }

  // Acknowledgement state, for the ack the endpoint sends.
  uint64_t expected() const { return expected_; }
  uint64_t credit_limit() const {
    size_t room = kRecvSlots - kRecvReserve;
    return expected_ + (held_.size() >= room ? 0 : room - held_.size());
  }
  // An ack slot is due now: kAckEveryChunks chunks since the last ack, a duplicate, or the end of
  // a write-with-imm (its sender completes the write at the ack).
  bool ack_due() const { return ack_due_; }
  // A message ended since the last ack: its sender completed the send when it staged the last
  // chunk, so the ack may wait (kTailAckDelay) for a chunk going back to carry it.
  bool tail_due() const { return tail_due_; }
  bool nack_due() const { return nack_due_; }
  // Every slot's header carries expected() as its ack: any slot sent answers what is due but a nack.
  void ack_carried() {
    ack_due_ = tail_due_ = false;
    accepted_since_ack_ = 0;
  }
  void ack_sent() {
    ack_carried();
    nack_due_ = false;
  }

  const Counters& counters() const { return counters_; }

 private:
  Admitted admit_sealed(const std::byte* slot, const ChunkHeader& h, LinkSeal* seal, bool connecting);

  int peer_rank_;
  uint64_t expected_ = 0;
  std::deque<uint32_t> held_;
  struct {
    bool active = false;
    uint64_t total = 0, got = 0;
  } cur_;
  uint64_t accepted_since_ack_ = 0;
  bool ack_due_ = false, tail_due_ = false, nack_due_ = false;
  Counters counters_;
};

}  // namespace lattice::fabric::verbs
