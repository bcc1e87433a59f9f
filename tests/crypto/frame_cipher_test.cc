// FrameCipher (caller-numbered frames for lossy links, the verbs provider's) and SessionCipher's
// piecewise open (the tcp provider's large payloads). Oracles: SessionCipher's one-shot
// open of the same bytes, and libsodium's reference AES-256-GCM with the documented nonce.
#include <gtest/gtest.h>
#include <sodium.h>

#include <cstring>
#include <vector>

#include "lattice/crypto/aead.h"

namespace lattice::crypto {
namespace {

SessionKeys keys(bool swap) {
  SessionKeys k;
  for (size_t i = 0; i < k.tx.size(); ++i) k.tx[i] = static_cast<uint8_t>(3 * i + 1), k.rx[i] = static_cast<uint8_t>(7 * i);
  if (swap) std::swap(k.tx, k.rx);
  return k;
}
std::vector<std::byte> bytes(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(seed + i * 29 + (i >> 9)));
  return v;
}

TEST(FrameCipher, NonceIsNumberThenLaneAndMatchesTheReference) {
  ASSERT_GE(sodium_init(), 0);
  if (!cipher_available(Cipher::kAes256Gcm, AeadBackend::kSodium)) GTEST_SKIP() << "no AES-NI";
  auto tx = FrameCipher::create(Cipher::kAes256Gcm, keys(false));
  ASSERT_TRUE(tx.ok());
  auto plain = bytes(5000, 9), out = plain;
  std::byte ad[8] = {std::byte{1}};
  Tag tag;
  ASSERT_TRUE(tx->seal_to(2, 0x0102030405, plain, out.data(), ad, tag).ok());
  uint8_t nonce[12] = {0x05, 0x04, 0x03, 0x02, 0x01, 0, 0, 0, 2, 0, 0, 0};
  std::vector<uint8_t> ref(plain.size());
  uint8_t ref_tag[16];
  unsigned long long tl = 0;
  crypto_aead_aes256gcm_encrypt_detached(ref.data(), ref_tag, &tl, reinterpret_cast<const uint8_t*>(plain.data()),
                                         plain.size(), reinterpret_cast<const uint8_t*>(ad), sizeof ad, nullptr, nonce,
                                         keys(false).tx.data());
  EXPECT_EQ(std::memcmp(ref.data(), out.data(), ref.size()), 0);
  EXPECT_EQ(std::memcmp(ref_tag, tag.data(), 16), 0);
}

TEST(FrameCipher, OpensAnyOrderRefusesNonceReuseAndFailsStickyOnATamperedFrame) {
  auto tx = FrameCipher::create(default_cipher(), keys(false));
  auto rx = FrameCipher::create(default_cipher(), keys(true));
  ASSERT_TRUE(tx.ok() && rx.ok());
  std::vector<std::vector<std::byte>> sealed;
  std::vector<Tag> tags(3);
  for (uint64_t n = 0; n < 3; ++n) {
    sealed.push_back(bytes(2048, static_cast<uint8_t>(n)));
    ASSERT_TRUE(tx->seal_to(1, n, sealed[n], sealed[n].data(), {}, tags[n]).ok());
  }
  // Reuse of a number in the lane is refused; another lane may use it.
  auto again = bytes(16, 1);
  Tag t;
  EXPECT_EQ(tx->seal_to(1, 1, again, again.data(), {}, t).code(), ErrorCode::kInternal);
  EXPECT_TRUE(tx->seal_to(3, 1, again, again.data(), {}, t).ok());
  // Opening checks only the tag (replay rules are the caller's): any order works.
  for (uint64_t n : {2u, 0u, 1u}) {
    std::vector<std::byte> out(2048);
    ASSERT_TRUE(rx->open_to(1, n, sealed[n], out.data(), {}, tags[n]).ok());
    EXPECT_EQ(out, bytes(2048, static_cast<uint8_t>(n)));
  }
  // The wrong number (or lane) fails the tag; the cipher then stays failed and wipes its output.
  std::vector<std::byte> out(2048, std::byte{0x77});
  EXPECT_EQ(rx->open_to(2, 0, sealed[0], out.data(), {}, tags[0]).code(), ErrorCode::kAuthFailed);
  EXPECT_EQ(out, std::vector<std::byte>(2048, std::byte{0}));
  EXPECT_EQ(rx->open_to(1, 0, sealed[0], out.data(), {}, tags[0]).code(), ErrorCode::kAuthFailed);
}

TEST(SessionCipherStream, PiecewiseOpenEqualsOneShotAndATamperedPieceFailsAtTheEnd) {
  if (!backend_available(AeadBackend::kOpenSsl)) GTEST_SKIP() << "built without OpenSSL";
  for (Cipher c : {Cipher::kAes256Gcm, Cipher::kChaCha20Poly1305}) {
    if (!cipher_available(c)) continue;
    auto tx = SessionCipher::create(c, keys(false));
    auto rx = SessionCipher::create(c, keys(true));
    ASSERT_TRUE(tx.ok() && rx.ok());
    if (c == Cipher::kAes256Gcm && cipher_available(c, AeadBackend::kSodium)) {
      EXPECT_FALSE(rx->can_stream(1024)) << "small AES frames go through libsodium's one-shot";
    }
    for (bool tamper : {false, true}) {
      auto data = bytes((1 << 20) + 3, 5);
      std::byte ad[64] = {std::byte{9}};
      Tag tag;
      ASSERT_TRUE(tx->seal(data, ad, tag).ok());
      if (tamper) data[700000] ^= std::byte{1};
      ASSERT_TRUE(rx->can_stream(data.size()));
      ASSERT_TRUE(rx->open_begin(ad).ok());
      for (size_t off = 0; off < data.size(); off += 100003)
        ASSERT_TRUE(rx->open_update({data.data() + off, std::min<size_t>(100003, data.size() - off)}).ok());
      Status end = rx->open_end(tag);
      if (tamper) {
        EXPECT_EQ(end.code(), ErrorCode::kAuthFailed);
        EXPECT_EQ(rx->failure().code(), ErrorCode::kAuthFailed) << "sticky";
      } else {
        ASSERT_TRUE(end.ok()) << end.to_string();
        EXPECT_EQ(data, bytes((1 << 20) + 3, 5));
        EXPECT_EQ(rx->next_rx_seq(), 1u);
      }
    }
  }
}

}  // namespace
}  // namespace lattice::crypto
