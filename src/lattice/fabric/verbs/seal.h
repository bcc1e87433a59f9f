// Sealed sessions of the verbs provider (seal.cc): the crypto handshake, run in-band over the
// staged protocol's hellos, and the sealing of every chunk (wire.h has the layout, SealBlock).
//
// Keys. The caller swaps the two address blobs out of band (in a cluster: its authenticated
// control plane); connect() has no other channel to the peer, so the handshake of
// crypto/handshake.h (M1, M2, M3, or a reject; mutual proof of the cluster secret, fresh
// X25519 keys, one key per direction) runs over the QP itself: in kHello chunks flagged
// kFlagHandshake whose payload is the message, unsealed (its MACs need no secrecy). The endpoint
// with the smaller address blob initiates; the context names both blobs (GID, QPN, PSN,
// session), binding the keys to this very pair of QPs. UC loses messages, so each side resends
// its latest one every hello period: the initiator M1 until M2 comes, then M3 until a sealed
// frame of the responder shows it took it; the responder answers M1 with M2 and waits for M3.
// A wrong secret fails both sides with kAuthFailed (the responder sends a reject; an initiator
// that never hears back times out saying the handshake did not complete).
//
// Replay and reordering, in a way that fits go-back-N. Every transmission takes the next
// lane-1 number of its direction (SealBlock::nonce): the receiver takes a frame only if its
// number is above every number it took before, so a replayed or reordered frame is dropped
// (counted as stale, never delivered) and go-back-N resends what was lost, under fresh
// numbers. A data payload is sealed once, under its data sequence number (lane 2), so a
// resent chunk carries the same ciphertext under a new header tag and the receiver's in-order
// rule (seq == expected) delivers it exactly once. A tag that fails (the checksum matched:
// not line noise) fails the endpoint with kAuthFailed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/crypto/aead.h"
#include "lattice/crypto/handshake.h"
#include "lattice/crypto/secret.h"

namespace lattice::fabric::verbs {

class LinkSeal {
 public:
  // `local_blob` and `peer_blob`: the two encoded address blobs (wire.h, AddressBlob).
  static Result<LinkSeal> start(const crypto::ClusterSecret& secret, std::span<const std::byte> local_blob,
                                std::span<const std::byte> peer_blob);

  // A session whose keys were agreed elsewhere (`session`, oriented for this side): ready at
  // once. For fuzz/verbs_chunk_fuzz.cc, which cannot afford a handshake per input and tries
  // both cipher backends.
  static Result<LinkSeal> with_session(bool initiator, const crypto::Session& session,
                                       crypto::AeadBackend backend = crypto::AeadBackend::kAuto);

  bool initiator() const { return initiator_; }
  bool ready() const { return cipher_.has_value(); }
  // The handshake message to (re)send with the next hello; empty when none is due.
  std::span<const uint8_t> outgoing() const { return out_; }
  // The payload of a kFlagHandshake hello. An error fails the link; *reject is then the
  // message to send the peer first (may be empty).
  Status on_handshake(std::span<const std::byte> msg, std::vector<uint8_t>* reject);

  // Sender, data chunks: the header is in the slot (flags with kFlagSealed, seq and
  // payload_bytes set); encrypts `src` into the slot's body and puts the payload tag in the
  // seal block. Once per chunk, not per transmission.
  Status seal_payload(std::byte* slot, const std::byte* src);
  // Sender, every transmission: once the header's ack fields are final, before the checksum.
  Status seal_header(std::byte* slot);

  // Receiver (the checksum matched): kFresh, or kStale for a replayed or reordered frame.
  enum class Verdict { kFresh, kStale };
  Result<Verdict> open_header(const std::byte* slot);
  // An accepted data chunk: decrypts its payload into `dst` (the slot's body itself, or memory
  // not overlapping it).
  Status open_payload(const std::byte* slot, std::byte* dst);

 private:
  bool initiator_ = false;
  std::optional<crypto::Handshake> hs_;
  std::vector<uint8_t> out_;
  bool answered_m1_ = false;
  std::optional<crypto::FrameCipher> cipher_;
  uint64_t tx_nonce_ = 0;
  uint64_t rx_next_ = 0;  // the smallest lane-1 number still acceptable
};

}  // namespace lattice::fabric::verbs
