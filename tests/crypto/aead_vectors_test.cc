// Known-answer tests for the two AEADs, with vectors from their standards rather than from a
// library: RFC 8439 (ChaCha20-Poly1305, section 2.8.2 and appendix A.5) and the GCM
// specification's AES-256 test cases 13-16 (McGrew and Viega, "The Galois/Counter Mode of
// Operation", the cases NIST's GCM validation uses). Each runs through every backend this build
// has, by the same code a SessionCipher seals frames with (seal_once/open_once), and the
// all-zero-nonce cases also through a SessionCipher's first frame (its nonce for sequence 0).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lattice/crypto/aead.h"

namespace lattice::crypto {
namespace {

std::vector<std::byte> hex(std::string_view h) {
  std::vector<std::byte> out;
  auto nib = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  for (size_t i = 0; i + 1 < h.size(); i += 2) {
    while (h[i] == ' ') ++i;
    out.push_back(static_cast<std::byte>(nib(h[i]) << 4 | nib(h[i + 1])));
  }
  return out;
}
template <class A>
A fixed(std::string_view h) {
  auto v = hex(h);
  A a{};
  EXPECT_EQ(v.size(), a.size()) << h;
  for (size_t i = 0; i < a.size() && i < v.size(); ++i) a[i] = static_cast<uint8_t>(v[i]);
  return a;
}
std::vector<std::byte> ascii(std::string_view s) {
  auto* p = reinterpret_cast<const std::byte*>(s.data());
  return {p, p + s.size()};
}

struct Vector {
  const char* name;
  Cipher cipher;
  const char* key;
  const char* nonce;
  const char* ad;
  std::vector<std::byte> plaintext;
  std::string ciphertext;
  const char* tag;
};

std::vector<Vector> vectors() {
  const char* gcm_key = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308";
  const char* gcm_p =
      "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
      "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";
  const char* gcm_c =
      "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
      "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad";
  auto trunc = [](const char* h, size_t n_bytes) { return hex(std::string_view(h, 2 * n_bytes)); };
  return {
      {"rfc8439_2_8_2", Cipher::kChaCha20Poly1305,
       "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f", "070000004041424344454647",
       "50515253c0c1c2c3c4c5c6c7",
       ascii("Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, "
             "sunscreen would be it."),
       "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b"
       "1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc"
       "3ff4def08e4b7a9de576d26586cec64b6116",
       "1ae10b594f09e26a7e902ecbd0600691"},
      {"gcm_case13", Cipher::kAes256Gcm, "0000000000000000000000000000000000000000000000000000000000000000",
       "000000000000000000000000", "", {}, "", "530f8afbc74536b9a963b4f1c4cb738b"},
      {"gcm_case14", Cipher::kAes256Gcm, "0000000000000000000000000000000000000000000000000000000000000000",
       "000000000000000000000000", "", hex("00000000000000000000000000000000"), "cea7403d4d606b6e074ec5d3baf39d18",
       "d0d1c8a799996bf0265b98b5d48ab919"},
      {"gcm_case15", Cipher::kAes256Gcm, gcm_key, "cafebabefacedbaddecaf888", "", hex(gcm_p), gcm_c,
       "b094dac5d93471bdec1a502270e3cc6c"},
      {"gcm_case16", Cipher::kAes256Gcm, gcm_key, "cafebabefacedbaddecaf888",
       "feedfacedeadbeeffeedfacedeadbeefabaddad2", trunc(gcm_p, 60), std::string(gcm_c, 120),
       "76fc6ece0f4e1768cddf8853bb2d551b"},
  };
}

std::vector<AeadBackend> backends() {
  std::vector<AeadBackend> out;
  for (auto b : {AeadBackend::kSodium, AeadBackend::kOpenSsl, AeadBackend::kAuto})
    if (backend_available(b)) out.push_back(b);
  return out;
}

TEST(AeadVectors, EveryBackendSealsAndOpensTheStandardsVectors) {
  int checked = 0;
  for (const Vector& v : vectors()) {
    for (AeadBackend b : backends()) {
      SCOPED_TRACE(std::string(v.name) + " via " + std::string(to_string(b)));
      if (!cipher_available(v.cipher, b)) continue;  // AES-GCM needs AES-NI under libsodium
      Key key = fixed<Key>(v.key);
      Nonce nonce = fixed<Nonce>(v.nonce);
      auto ad = hex(v.ad);
      auto data = v.plaintext;
      Tag tag{};
      ASSERT_TRUE(seal_once(v.cipher, b, key, nonce, ad, data, tag).ok());
      EXPECT_EQ(data, hex(v.ciphertext));
      EXPECT_EQ(tag, fixed<Tag>(v.tag));
      ASSERT_TRUE(open_once(v.cipher, b, key, nonce, ad, data, tag).ok());
      EXPECT_EQ(data, v.plaintext);
      // One flipped ciphertext or tag bit: refused, and nothing decrypted is left behind.
      Tag bad = tag;
      bad[0] ^= 1;
      auto sealed = hex(v.ciphertext);
      EXPECT_EQ(open_once(v.cipher, b, key, nonce, ad, sealed, bad).code(), ErrorCode::kAuthFailed);
      for (std::byte x : sealed) EXPECT_EQ(x, std::byte{0});
      ++checked;
    }
  }
  EXPECT_GE(checked, 2) << "no vector ran: neither cipher is available";
}

TEST(AeadVectors, RfcAppendixA5DecryptsWithTheReceivedTag) {
  // RFC 8439 A.5: decryption of a received message (an Internet-Draft's opening words).
  Key key = fixed<Key>("1c9240a5eb55d38af333888604f6b5f0473917c1402b80099dca5cbc207075c0");
  Nonce nonce = fixed<Nonce>("000000000102030405060708");
  auto ad = hex("f33388860000000000004e91");
  auto data = hex(
      "64a0861575861af460f062c79be643bd5e805cfd345cf389f108670ac76c8cb24c6cfc18755d43eea09ee94e382d26b0"
      "bdb7b73c321b0100d4f03b7f355894cf332f830e710b97ce98c8a84abd0b948114ad176e008d33bd60f982b1ff37c855"
      "9797a06ef4f0ef61c186324e2b3506383606907b6a7c02b0f9f6157b53c867e4b9166c767b804d46a59b5216cde7a4e9"
      "9040c5a40433225ee282a1b0a06c523eaf4534d7f83fa1155b0047718cbc546a0d072b04b3564eea1b422273f548271a"
      "0bb2316053fa76991955ebd63159434ecebb4e466dae5a1073a6727627097a1049e617d91d361094fa68f0ff77987130"
      "305beaba2eda04df997b714d6c6f2c29a6ad5cb4022b02709b");
  Tag tag = fixed<Tag>("eead9d67890cbb22392336fea1851f38");
  for (AeadBackend b : backends()) {
    SCOPED_TRACE(std::string(to_string(b)));
    auto p = data;
    ASSERT_TRUE(open_once(Cipher::kChaCha20Poly1305, b, key, nonce, ad, p, tag).ok());
    std::string text(reinterpret_cast<const char*>(p.data()), p.size());
    EXPECT_EQ(text.substr(0, 36), "Internet-Drafts are draft documents ");
    EXPECT_EQ(text.size(), 265u);
    EXPECT_TRUE(text.ends_with("cite them other than as /\xe2\x80\x9cwork in progress./\xe2\x80\x9d")) << text;
  }
}

TEST(AeadVectors, ASessionsFirstFrameUsesTheAllZeroNonce) {
  // A SessionCipher's frame 0 is sealed under nonce 0^96: GCM cases 13 and 14 apply as they are.
  for (AeadBackend b : backends()) {
    if (!cipher_available(Cipher::kAes256Gcm, b)) continue;
    SCOPED_TRACE(std::string(to_string(b)));
    SessionKeys keys;  // both keys all zero
    auto cipher = SessionCipher::create(Cipher::kAes256Gcm, keys, b);
    ASSERT_TRUE(cipher.ok());
    auto data = hex("00000000000000000000000000000000");
    Tag tag{};
    auto seq = cipher->seal(data, {}, tag);
    ASSERT_TRUE(seq.ok());
    EXPECT_EQ(*seq, 0u);
    EXPECT_EQ(data, hex("cea7403d4d606b6e074ec5d3baf39d18"));
    EXPECT_EQ(tag, fixed<Tag>("d0d1c8a799996bf0265b98b5d48ab919"));
    ASSERT_TRUE(cipher->open_next(data, {}, tag).ok());
    EXPECT_EQ(data, hex("00000000000000000000000000000000"));
  }
}

}  // namespace
}  // namespace lattice::crypto
