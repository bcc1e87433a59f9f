#include "lattice/fabric/verbs/seal.h"

#include <cstring>
#include <string>

#include "lattice/fabric/verbs/wire.h"

namespace lattice::fabric::verbs {
namespace {

constexpr uint32_t kLaneTransmission = 1;
constexpr uint32_t kLaneData = 2;

std::string hex(std::span<const std::byte> b) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (std::byte x : b) {
    out += kDigits[std::to_integer<uint8_t>(x) >> 4];
    out += kDigits[std::to_integer<uint8_t>(x) & 15];
  }
  return out;
}

// The header tag's associated data: the header with crc 0, the transmission number and the
// payload tag (the first 24 bytes of the seal block).
constexpr size_t kHeaderAd = sizeof(ChunkHeader) + 24;
void header_ad(const std::byte* slot, uint8_t out[kHeaderAd]) {
  std::memcpy(out, slot, kHeaderAd);
  std::memset(out + offsetof(ChunkHeader, crc), 0, sizeof(uint32_t));
}

// The payload tag's associated data: the header fields a chunk keeps across resends (magic,
// session, ack, credit and checksum zeroed).
ChunkHeader payload_ad(const std::byte* slot) {
  ChunkHeader h;
  std::memcpy(&h, slot, sizeof h);
  h.magic = h.session = 0;
  h.ack = h.credit_limit = 0;
  h.crc = 0;
  return h;
}

crypto::Tag tag_at(const std::byte* p) {
  crypto::Tag t;
  std::memcpy(t.data(), p, t.size());
  return t;
}

}  // namespace

Result<LinkSeal> LinkSeal::start(const crypto::ClusterSecret& secret, std::span<const std::byte> local_blob,
                                 std::span<const std::byte> peer_blob) {
  LinkSeal s;
  const int order = std::memcmp(local_blob.data(), peer_blob.data(), std::min(local_blob.size(), peer_blob.size()));
  if (order == 0) return InvalidArgument("verbs: endpoint cannot connect to itself");
  s.initiator_ = order < 0;
  crypto::HandshakeOptions ho;
  ho.context = "lattice verbs v1 " + (s.initiator_ ? hex(local_blob) + ">" + hex(peer_blob)
                                                   : hex(peer_blob) + ">" + hex(local_blob));
  auto role = s.initiator_ ? crypto::Handshake::Role::kInitiator : crypto::Handshake::Role::kResponder;
  LATTICE_ASSIGN_OR_RETURN(crypto::Handshake hs, crypto::Handshake::create(role, secret, ho));
  s.hs_.emplace(std::move(hs));
  if (s.initiator_) {
    LATTICE_ASSIGN_OR_RETURN(s.out_, s.hs_->start());
  }
  return s;
}

Result<LinkSeal> LinkSeal::with_session(bool initiator, const crypto::Session& session, crypto::AeadBackend backend) {
  LinkSeal s;
  s.initiator_ = initiator;
  LATTICE_ASSIGN_OR_RETURN(crypto::FrameCipher c, crypto::FrameCipher::create(session.cipher, session.keys, backend));
  s.cipher_.emplace(std::move(c));
  return s;
}

Status LinkSeal::on_handshake(std::span<const std::byte> msg, std::vector<uint8_t>* reject) {
  if (ready() || !hs_) return Status();  // a late copy of a message already taken
  const size_t want = hs_->next_message_bytes();
  if (want == 0) return Status();
  if (msg.size() != want) {
    // The responder expects M1 and then M3; a repeated M1 meanwhile is answered by the periodic
    // resend of M2. Anything else is not a message of this handshake.
    if (!initiator_ && answered_m1_ && msg.size() == crypto::Handshake::kHelloBytes) return Status();
    return AuthFailed("verbs: the peer sent a " + std::to_string(msg.size()) + "-byte handshake message, expected " +
                      std::to_string(want));
  }
  auto in = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(msg.data()), msg.size());
  auto reply = hs_->on_message(in);
  if (!reply.ok()) {
    if (reject) *reject = hs_->take_reject();
    return reply.status();
  }
  out_ = std::move(*reply);  // initiator: M3; responder: M2 (or nothing after M3)
  if (!initiator_ && !answered_m1_) {
    answered_m1_ = true;
    return Status();
  }
  LATTICE_ASSIGN_OR_RETURN(crypto::Session session, hs_->session());
  LATTICE_ASSIGN_OR_RETURN(crypto::FrameCipher c, crypto::FrameCipher::create(session.cipher, session.keys));
  cipher_.emplace(std::move(c));
  hs_.reset();
  return Status();
}

Status LinkSeal::seal_payload(std::byte* slot, const std::byte* src) {
  if (!cipher_) return Internal("verbs: sealing before the handshake completed");
  const ChunkHeader ad = payload_ad(slot);
  crypto::Tag tag;
  LATTICE_RETURN_IF_ERROR(cipher_->seal_to(kLaneData, ad.seq, {src, ad.payload_bytes},
                                           slot + sizeof(ChunkHeader) + sizeof(SealBlock),
                                           std::as_bytes(std::span<const ChunkHeader>(&ad, 1)), tag));
  std::memcpy(slot + sizeof(ChunkHeader) + offsetof(SealBlock, payload_tag), tag.data(), tag.size());
  return Status();
}

Status LinkSeal::seal_header(std::byte* slot) {
  if (!cipher_) return Internal("verbs: sealing before the handshake completed");
  std::byte* block = slot + sizeof(ChunkHeader);
  const uint64_t nonce = tx_nonce_++;
  std::memcpy(block + offsetof(SealBlock, nonce), &nonce, sizeof nonce);
  std::memset(block + offsetof(SealBlock, reserved), 0, sizeof(uint64_t));
  uint8_t ad[kHeaderAd];
  header_ad(slot, ad);
  crypto::Tag tag;
  std::byte none{};
  LATTICE_RETURN_IF_ERROR(cipher_->seal_to(kLaneTransmission, nonce, {}, &none,
                                           std::as_bytes(std::span<const uint8_t>(ad, kHeaderAd)), tag));
  std::memcpy(block + offsetof(SealBlock, header_tag), tag.data(), tag.size());
  return Status();
}

Result<LinkSeal::Verdict> LinkSeal::open_header(const std::byte* slot) {
  if (!cipher_) return Internal("verbs: opening before the handshake completed");
  SealBlock b;
  std::memcpy(&b, slot + sizeof(ChunkHeader), sizeof b);
  if (b.nonce < rx_next_ || b.nonce == ~uint64_t{0}) return Verdict::kStale;
  if (b.reserved != 0) return AuthFailed("the seal block's reserved field is set (not covered by the tag: must be 0)");
  uint8_t ad[kHeaderAd];
  header_ad(slot, ad);
  std::byte none{};
  LATTICE_RETURN_IF_ERROR(cipher_->open_to(kLaneTransmission, b.nonce, {}, &none,
                                           std::as_bytes(std::span<const uint8_t>(ad, kHeaderAd)),
                                           tag_at(slot + sizeof(ChunkHeader) + offsetof(SealBlock, header_tag))));
  rx_next_ = b.nonce + 1;
  if (initiator_) out_.clear();  // the responder seals: it took M3
  return Verdict::kFresh;
}

Status LinkSeal::open_payload(const std::byte* slot, std::byte* dst) {
  if (!cipher_) return Internal("verbs: opening before the handshake completed");
  const ChunkHeader ad = payload_ad(slot);
  const std::byte* body = slot + sizeof(ChunkHeader) + sizeof(SealBlock);
  return cipher_->open_to(kLaneData, ad.seq, {body, ad.payload_bytes}, dst,
                          std::as_bytes(std::span<const ChunkHeader>(&ad, 1)),
                          tag_at(slot + sizeof(ChunkHeader) + offsetof(SealBlock, payload_tag)));
}

}  // namespace lattice::fabric::verbs
