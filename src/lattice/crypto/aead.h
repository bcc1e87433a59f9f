// SessionCipher: authenticated encryption of one session's frames, in place.
//
// A session (one handshake, see handshake.h) gives each direction its own 32-byte key, so
// the two directions never share a (key, nonce) pair. Every frame sealed in a direction
// takes the next 64-bit sequence number, starting at 0; the 96-bit nonce is that number,
// little-endian, followed by four zero bytes. The receiver opens frames strictly in order:
// a frame whose sequence number is not the one it expects (replayed, reordered, dropped
// before) is refused, like a frame whose tag does not verify. Callers that ship frames
// over an ordered stream need not send the number at all (both ends count); callers on
// unordered links carry it in their header and pass it to open().
//
// Layout is up to the caller: seal() encrypts `data` where it lies and writes a detached
// 16-byte tag; `ad` (associated data, typically the frame header) is authenticated, not
// encrypted. No copies, no allocation per frame.
//
// Failure: open() returns kAuthFailed for any failure, wipes `data` (nothing unauthenticated
// reaches the caller) and the cipher stays failed: every later seal/open returns the same
// Status (errors are sticky, like on an endpoint).
//
// Thread safety: one thread may seal while another opens (the directions share nothing but
// the sticky failure flag, which is atomic); two concurrent seals, or two concurrent opens,
// are not allowed.
//
// Limits: a direction may seal at most kMaxFrames frames (then kResourceExhausted: start a
// new session), far below the 2^64 nonce space and AES-GCM's per-key data bounds at the
// rates we run; a frame holds at most kMaxFrameBytes.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "lattice/core/status.h"

namespace lattice::crypto {

enum class Cipher : uint8_t {
  kAes256Gcm = 1,         // needs AES-NI + PCLMUL (libsodium refuses otherwise); fastest here
  kChaCha20Poly1305 = 2,  // IETF variant, 96-bit nonce; constant-time everywhere
};

inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kTagBytes = 16;
inline constexpr size_t kNonceBytes = 12;
inline constexpr uint64_t kMaxFrames = uint64_t{1} << 48;
inline constexpr size_t kMaxFrameBytes = size_t{1} << 32;  // 4 GiB, below both ciphers' limits

// Who does the AEAD arithmetic. Both produce identical bytes (standard AES-256-GCM and
// ChaCha20-Poly1305 IETF); kAuto takes OpenSSL when built with it (faster here), else libsodium,
// except that with OpenSSL, AES-256-GCM frames of at most 1 KiB go through libsodium (its
// per-call cost is lower; see aead.cc). backend() reports kOpenSsl for such a session.
enum class AeadBackend : uint8_t { kAuto, kOpenSsl, kSodium };
std::string_view to_string(AeadBackend b);
bool backend_available(AeadBackend b);

using Key = std::array<uint8_t, kKeyBytes>;
using Tag = std::array<uint8_t, kTagBytes>;

std::string_view to_string(Cipher c);
Result<Cipher> parse_cipher(std::string_view name);  // "aes256gcm" | "chacha20poly1305"
bool cipher_available(Cipher c, AeadBackend backend = AeadBackend::kAuto);  // run-time check
// The cipher sessions prefer: AES-256-GCM where the CPU has AES-NI + PCLMUL (measured
// faster, see bench/aead_bench.cc), ChaCha20-Poly1305 otherwise.
Cipher default_cipher();

// The keys of one session as seen from one side: `tx` seals what this side sends, `rx`
// opens what it receives. The peer holds the same two keys swapped. Wiped on destruction.
struct SessionKeys {
  Key tx{};
  Key rx{};
  SessionKeys() = default;
  SessionKeys(const SessionKeys&) = default;
  SessionKeys& operator=(const SessionKeys&) = default;
  ~SessionKeys();
};

// One frame under a caller-chosen 96-bit nonce, through the same backend code a SessionCipher
// runs (so known-answer vectors such as RFC 8439's and NIST's GCM cases check what sessions
// use). Nothing here tracks nonces: a (key, nonce) pair must never seal twice.
// open_once() wipes `data` and returns kAuthFailed when the tag does not verify.
using Nonce = std::array<uint8_t, kNonceBytes>;
Status seal_once(Cipher cipher, AeadBackend backend, const Key& key, const Nonce& nonce,
                 std::span<const std::byte> ad, std::span<std::byte> data, Tag& tag);
Status open_once(Cipher cipher, AeadBackend backend, const Key& key, const Nonce& nonce,
                 std::span<const std::byte> ad, std::span<std::byte> data, const Tag& tag);

class SessionCipher {
 public:
  // kUnavailable if `cipher` is not usable on this CPU with that backend.
  static Result<SessionCipher> create(Cipher cipher, const SessionKeys& keys,
                                      AeadBackend backend = AeadBackend::kAuto);

  SessionCipher(SessionCipher&&) noexcept;
  SessionCipher& operator=(SessionCipher&&) noexcept;
  ~SessionCipher();

  Cipher cipher() const;
  AeadBackend backend() const;  // the one actually used (never kAuto)

  // Encrypts `data` in place, writes its tag, returns the sequence number it used.
  Result<uint64_t> seal(std::span<std::byte> data, std::span<const std::byte> ad, Tag& tag);
  // As seal(), but reads the plaintext from `in` and writes the ciphertext (in.size() bytes)
  // to `out`, which is either in.data() or does not overlap it: saves a copy when the
  // plaintext must stay intact (a send from the caller's buffer).
  Result<uint64_t> seal_to(std::span<const std::byte> in, std::byte* out, std::span<const std::byte> ad, Tag& tag);
  // Decrypts `data` in place if `seq` is the next expected number and the tag verifies.
  Status open(uint64_t seq, std::span<std::byte> data, std::span<const std::byte> ad, const Tag& tag);
  // For ordered streams: open the next frame without a number on the wire.
  Status open_next(std::span<std::byte> data, std::span<const std::byte> ad, const Tag& tag) {
    return open(next_rx_seq(), data, ad, tag);
  }

  // Opening the next frame in pieces, for a payload that arrives over time: open_begin(ad),
  // then open_update() on each piece as it lands (decrypted where it lies, while it is still in
  // cache: no second pass over the frame), then open_end(tag), which verifies and takes the
  // sequence number. Until open_end succeeds the pieces hold unauthenticated plaintext: on any
  // failure the caller must wipe all of them (the cipher is failed for good, as with open()).
  // can_stream(n): whether a frame of n bytes can be opened so (OpenSSL, frames above 1 KiB).
  bool can_stream(size_t n) const;
  Status open_begin(std::span<const std::byte> ad);
  Status open_update(std::span<std::byte> piece);
  Status open_end(const Tag& tag);

  uint64_t next_tx_seq() const;
  uint64_t next_rx_seq() const;
  // The sticky failure, ok while healthy.
  Status failure() const;

 private:
  struct Impl;
  explicit SessionCipher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// FrameCipher: for links that may lose, duplicate or reorder frames, where the caller
// numbers frames itself (the verbs staged protocol: go-back-N resends a data chunk under
// its old number). Same keys and arithmetic as SessionCipher; the nonce is the caller's
// (lane, number): the 64-bit number little-endian, then the 32-bit lane little-endian. A
// caller gives each kind of number its own lane (e.g. 1: every transmission, 2: data
// sequence numbers).
//
// Sealing guards against nonce reuse: in each lane the numbers must strictly increase
// (else kInternal, a bug in the caller; nothing is written). Opening checks only the tag:
// which numbers are still acceptable (replay, reordering) is the caller's decision, since
// only it knows what go-back-N may legitimately resend. A failed open wipes its output,
// returns kAuthFailed and, like SessionCipher, leaves the cipher failed for good.
//
// Thread safety: one sealer and one opener may run at once; not two of either.
class FrameCipher {
 public:
  static constexpr uint32_t kLanes = 4;
  static Result<FrameCipher> create(Cipher cipher, const SessionKeys& keys, AeadBackend backend = AeadBackend::kAuto);

  FrameCipher(FrameCipher&&) noexcept;
  FrameCipher& operator=(FrameCipher&&) noexcept;
  ~FrameCipher();

  Cipher cipher() const;
  // Encrypts `in` into `out` (in.data() itself, or memory not overlapping it).
  Status seal_to(uint32_t lane, uint64_t number, std::span<const std::byte> in, std::byte* out,
                 std::span<const std::byte> ad, Tag& tag);
  // Decrypts `in` into `out` (in place or not overlapping) if the tag verifies.
  Status open_to(uint32_t lane, uint64_t number, std::span<const std::byte> in, std::byte* out,
                 std::span<const std::byte> ad, const Tag& tag);
  Status failure() const;

 private:
  struct Impl;
  explicit FrameCipher(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lattice::crypto
