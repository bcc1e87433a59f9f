// The join handshake: mutual authentication bound to the cluster secret, and per-session,
// per-direction keys. A message-level state machine: it never touches a socket, so the tcp
// provider, the shm provider's join and the bootstrap store all drive the same code (read
// next_message_bytes() bytes, feed them to on_message(), send what it returns).
//
// Protocol (version 1). K = the 32-byte cluster secret, C = the caller's context string
// (both sides must pass the same one, e.g. "tcp data 0->1 epoch 3"; it is never sent),
// H = BLAKE2b-256, H_k = keyed BLAKE2b-256, KDF = crypto_kdf (BLAKE2b) of libsodium.
//
//   header (8 bytes) = "LTHS" | version 1 | type | cipher byte | flags byte
//
//   M1  initiator -> responder, 104 bytes: header(type 1, cipher byte = bitmask of the
//       ciphers the initiator accepts, flags bit 0 = wants --insecure) | Ni (32 random) |
//       Ei (32, ephemeral X25519 public key) | mac1 (32)
//       mac1 = H_{KDF(K,"lathello",1)}("m1" | len(C) | C | header | Ni | Ei)
//       The responder checks mac1 first: a node without K is refused before any key
//       agreement work, with a log line, and nothing in the cluster changes.
//   M2  responder -> initiator, 104 bytes: header(type 2, cipher byte = the chosen cipher,
//       flags = insecure agreed) | Nr | Er | mac2
//       T   = H("transcript" | len(C) | C | M1 | header2 | Nr | Er)
//       DH  = X25519(own ephemeral secret, peer's ephemeral public)  (all-zero refused)
//       M   = H_K("master" | DH | T)
//       KDF(M, "lathsv01", id): 1 key initiator->responder, 2 key responder->initiator,
//                               3 responder's confirm key, 4 initiator's, 5 session id
//       mac2 = H_{key3}("m2" | T)
//   M3  initiator -> responder, 40 bytes: header(type 3, cipher and flags echoed) | mac3
//       mac3 = H_{key4}("m3" | T | header3)
//   R   responder -> initiator instead of M2, 104 bytes: header(type 0x7f, cipher byte =
//       reason: 1 authentication, 2 no common cipher, 3 --insecure mismatch), zeros. It
//       is not authenticated (a man in the middle could forge it, as he could cut the
//       link): it only tells an honest initiator why it was refused.
//
// Why it holds:
//   - Only holders of K can produce mac1, mac2 or mac3, and each MAC covers both fresh
//     nonces and both ephemeral keys (through T), so a man in the middle without K can
//     neither join nor substitute his own ephemeral keys.
//   - Replay: the responder's Nr and Er are fresh each time, so an old M3 fails against a
//     new T; the initiator's Ni and Ei are fresh, so an old M2 fails. A replayed M1 earns
//     an M2 but can never be completed.
//   - Session keys need both DH (forward secrecy: K leaking later does not open recorded
//     sessions) and K; each direction has its own key; the context C binds a session to
//     its purpose so a handshake for one link cannot be spliced into another.
//   - Cipher choice and --insecure are covered by the MACs: no silent downgrade.
//   - The initiator is done once M2 verifies; it learns the responder accepted M3 only from
//     the first authenticated frame it receives (or the link closing), as in TLS.
//
// Errors: a failed handshake is failed for good (sticky). Authentication failures of any
// kind (bad MAC, malformed or unexpected message, a reject received) are kAuthFailed; a
// genuine, authenticated policy mismatch is kUnavailable (no common cipher) or
// kInvalidArgument (--insecure on one side only).
//
// Thread safety: none; one Handshake is driven by one thread. Wipes its secrets on destruction.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/crypto/aead.h"
#include "lattice/crypto/secret.h"

namespace lattice::crypto {

namespace wire {
inline constexpr uint8_t kMagic[4] = {'L', 'T', 'H', 'S'};
inline constexpr uint8_t kVersion = 1;
enum MsgType : uint8_t { kHello = 1, kReply = 2, kConfirm = 3, kReject = 0x7f };
enum RejectReason : uint8_t { kRejectAuth = 1, kRejectCipher = 2, kRejectInsecure = 3 };
inline constexpr uint8_t kFlagInsecure = 1;

struct Header {
  uint8_t magic[4];
  uint8_t version;
  uint8_t type;
  uint8_t cipher;  // M1: bitmask (1 << (Cipher - 1)); M2/M3: the chosen Cipher; R: reason
  uint8_t flags;
};
struct Hello {  // M1, and the layout of M2 and R
  Header header;
  uint8_t nonce[32];
  uint8_t ephemeral[32];
  uint8_t mac[32];
};
struct Confirm {  // M3
  Header header;
  uint8_t mac[32];
};
static_assert(sizeof(Header) == 8);
static_assert(sizeof(Hello) == 104);
static_assert(sizeof(Confirm) == 40);
}  // namespace wire

struct HandshakeOptions {
  std::string context{};        // bound into every MAC and key; must match on both sides
  bool insecure = false;        // agree to send plaintext after authenticating (both must ask)
  std::vector<Cipher> ciphers{};  // preference order; empty: default_cipher() first, then the other
  // Where this side's fresh bytes come from: its 32-byte nonce, then its 32-byte ephemeral
  // X25519 secret. Empty (always, outside known-answer tests): the OS CSPRNG through libsodium.
  std::function<void(std::span<uint8_t>)> entropy{};
};

// What a completed handshake yields.
struct Session {
  Cipher cipher = Cipher::kAes256Gcm;
  bool insecure = false;
  SessionKeys keys;                       // oriented for this side (tx = what we send)
  std::array<uint8_t, 16> session_id{};  // same on both sides; not secret (for logs)
  std::string session_id_hex() const;
};

class Handshake {
 public:
  enum class Role : uint8_t { kInitiator, kResponder };
  static constexpr size_t kHelloBytes = sizeof(wire::Hello);
  static constexpr size_t kReplyBytes = sizeof(wire::Hello);
  static constexpr size_t kConfirmBytes = sizeof(wire::Confirm);

  static Result<Handshake> create(Role role, const ClusterSecret& secret, HandshakeOptions options);

  Handshake(Handshake&&) noexcept;
  Handshake& operator=(Handshake&&) noexcept;
  ~Handshake();

  // Initiator: M1, to send first. Called once.
  Result<std::vector<uint8_t>> start();
  // Feeds the peer's next message; returns the message to send back (empty when none).
  Result<std::vector<uint8_t>> on_message(std::span<const uint8_t> msg);
  // The size of the next message to read from the peer; 0 when none is expected
  // (done, failed, or an initiator that has not started).
  size_t next_message_bytes() const;
  bool done() const;
  // After a failure on the responder: the reject message to send the peer (best effort,
  // then close). Empty if there is none to send.
  std::vector<uint8_t> take_reject();
  // After done(): the session; kInternal before.
  Result<Session> session() const;

 private:
  struct Impl;
  explicit Handshake(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lattice::crypto
