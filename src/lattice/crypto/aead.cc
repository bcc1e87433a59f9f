#include "lattice/crypto/aead.h"

#include <sodium.h>

#include <cstring>
#include <mutex>
#include <string>

#include "lattice/crypto/sodium.h"

namespace lattice::crypto {

static_assert(crypto_aead_aes256gcm_KEYBYTES == kKeyBytes && crypto_aead_chacha20poly1305_ietf_KEYBYTES == kKeyBytes);
static_assert(crypto_aead_aes256gcm_ABYTES == kTagBytes && crypto_aead_chacha20poly1305_ietf_ABYTES == kTagBytes);
static_assert(crypto_aead_aes256gcm_NPUBBYTES == kNonceBytes &&
              crypto_aead_chacha20poly1305_ietf_NPUBBYTES == kNonceBytes);

std::string_view to_string(Cipher c) {
  switch (c) {
    case Cipher::kAes256Gcm: return "aes256gcm";
    case Cipher::kChaCha20Poly1305: return "chacha20poly1305";
  }
  return "unknown";
}

Result<Cipher> parse_cipher(std::string_view name) {
  if (name == "aes256gcm" || name == "aes-256-gcm") return Cipher::kAes256Gcm;
  if (name == "chacha20poly1305" || name == "chacha20-poly1305") return Cipher::kChaCha20Poly1305;
  return InvalidArgument("unknown cipher '" + std::string(name) + "' (aes256gcm or chacha20poly1305)");
}

bool cipher_available(Cipher c) {
  if (!detail::ensure_sodium().ok()) return false;
  switch (c) {
    case Cipher::kAes256Gcm: return crypto_aead_aes256gcm_is_available() == 1;
    case Cipher::kChaCha20Poly1305: return true;
  }
  return false;
}

Cipher default_cipher() {
  return cipher_available(Cipher::kAes256Gcm) ? Cipher::kAes256Gcm : Cipher::kChaCha20Poly1305;
}

SessionKeys::~SessionKeys() {
  sodium_memzero(tx.data(), tx.size());
  sodium_memzero(rx.data(), rx.size());
}

struct SessionCipher::Impl {
  Cipher cipher;
  // AES: expanded key schedules, computed once (key expansion per frame would cost more
  // than sealing a 1 KiB frame). ChaCha has no schedule; the raw keys are used directly.
  crypto_aead_aes256gcm_state aes_tx;
  crypto_aead_aes256gcm_state aes_rx;
  Key tx_key;
  Key rx_key;
  uint64_t tx_seq = 0;
  uint64_t rx_seq = 0;
  std::atomic<bool> failed{false};
  mutable std::mutex failure_mu;
  Status failure;

  ~Impl() {
    sodium_memzero(&aes_tx, sizeof aes_tx);
    sodium_memzero(&aes_rx, sizeof aes_rx);
    sodium_memzero(tx_key.data(), tx_key.size());
    sodium_memzero(rx_key.data(), rx_key.size());
  }

  Status fail(Status s) {
    std::lock_guard lock(failure_mu);
    if (!failed.load(std::memory_order_relaxed)) {
      failure = std::move(s);
      failed.store(true, std::memory_order_release);
    }
    return failure;
  }
  Status sticky() const {
    std::lock_guard lock(failure_mu);
    return failure;
  }
};

namespace {
inline void make_nonce(uint64_t seq, uint8_t out[kNonceBytes]) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(seq >> (8 * i));
  std::memset(out + 8, 0, kNonceBytes - 8);
}
// libsodium's prototypes declare the message pointer nonnull even for empty messages.
inline uint8_t* bytes_or_dummy(std::span<std::byte> s, uint8_t* dummy) {
  return s.empty() ? dummy : reinterpret_cast<uint8_t*>(s.data());
}
}  // namespace

Result<SessionCipher> SessionCipher::create(Cipher cipher, const SessionKeys& keys) {
  LATTICE_RETURN_IF_ERROR(detail::ensure_sodium());
  if (!cipher_available(cipher))
    return Unavailable(std::string(to_string(cipher)) + " is not available on this CPU (needs AES-NI and PCLMUL)");
  auto impl = std::make_unique<Impl>();
  impl->cipher = cipher;
  impl->tx_key = keys.tx;
  impl->rx_key = keys.rx;
  if (cipher == Cipher::kAes256Gcm) {
    crypto_aead_aes256gcm_beforenm(&impl->aes_tx, keys.tx.data());
    crypto_aead_aes256gcm_beforenm(&impl->aes_rx, keys.rx.data());
  }
  return SessionCipher(std::move(impl));
}

SessionCipher::SessionCipher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SessionCipher::SessionCipher(SessionCipher&&) noexcept = default;
SessionCipher& SessionCipher::operator=(SessionCipher&&) noexcept = default;
SessionCipher::~SessionCipher() = default;

Cipher SessionCipher::cipher() const { return impl_->cipher; }
uint64_t SessionCipher::next_tx_seq() const { return impl_->tx_seq; }
uint64_t SessionCipher::next_rx_seq() const { return impl_->rx_seq; }
Status SessionCipher::failure() const { return impl_->sticky(); }

Result<uint64_t> SessionCipher::seal(std::span<std::byte> data, std::span<const std::byte> ad, Tag& tag) {
  Impl& s = *impl_;
  if (s.failed.load(std::memory_order_acquire)) [[unlikely]]
    return s.sticky();
  if (data.size() > kMaxFrameBytes) return InvalidArgument("frame of " + std::to_string(data.size()) + " bytes exceeds the 4 GiB AEAD limit");
  if (s.tx_seq >= kMaxFrames) return ResourceExhausted("session sealed 2^48 frames; start a new session");
  uint8_t nonce[kNonceBytes];
  make_nonce(s.tx_seq, nonce);
  uint8_t dummy = 0;
  uint8_t* p = bytes_or_dummy(data, &dummy);
  const auto* a = reinterpret_cast<const uint8_t*>(ad.data());
  unsigned long long tag_len = 0;
  int rc;
  if (s.cipher == Cipher::kAes256Gcm) {
    rc = crypto_aead_aes256gcm_encrypt_detached_afternm(p, tag.data(), &tag_len, p, data.size(), a, ad.size(),
                                                        nullptr, nonce, &s.aes_tx);
  } else {
    rc = crypto_aead_chacha20poly1305_ietf_encrypt_detached(p, tag.data(), &tag_len, p, data.size(), a, ad.size(),
                                                            nullptr, nonce, s.tx_key.data());
  }
  if (rc != 0) return s.fail(Internal("AEAD seal failed"));
  return s.tx_seq++;
}

Status SessionCipher::open(uint64_t seq, std::span<std::byte> data, std::span<const std::byte> ad, const Tag& tag) {
  Impl& s = *impl_;
  if (s.failed.load(std::memory_order_acquire)) [[unlikely]] {
    sodium_memzero(data.data(), data.size());
    return s.sticky();
  }
  if (seq != s.rx_seq) {
    sodium_memzero(data.data(), data.size());
    return s.fail(AuthFailed(std::string(seq < s.rx_seq ? "replayed" : "reordered or lost") + " frame: sequence number " +
                             std::to_string(seq) + ", expected " + std::to_string(s.rx_seq)));
  }
  if (data.size() > kMaxFrameBytes) {
    sodium_memzero(data.data(), data.size());
    return s.fail(AuthFailed("frame of " + std::to_string(data.size()) + " bytes exceeds the 4 GiB AEAD limit"));
  }
  uint8_t nonce[kNonceBytes];
  make_nonce(seq, nonce);
  uint8_t dummy = 0;
  uint8_t* p = bytes_or_dummy(data, &dummy);
  const auto* a = reinterpret_cast<const uint8_t*>(ad.data());
  int rc;
  if (s.cipher == Cipher::kAes256Gcm) {
    rc = crypto_aead_aes256gcm_decrypt_detached_afternm(p, nullptr, p, data.size(), tag.data(), a, ad.size(), nonce,
                                                        &s.aes_rx);
  } else {
    rc = crypto_aead_chacha20poly1305_ietf_decrypt_detached(p, nullptr, p, data.size(), tag.data(), a, ad.size(),
                                                            nonce, s.rx_key.data());
  }
  if (rc != 0) {
    sodium_memzero(data.data(), data.size());
    return s.fail(AuthFailed("frame " + std::to_string(seq) + " failed authentication (tampered, or keys differ)"));
  }
  ++s.rx_seq;
  return Status::Ok();
}

}  // namespace lattice::crypto
