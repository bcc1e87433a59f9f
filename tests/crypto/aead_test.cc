#include "lattice/crypto/aead.h"

#include <gtest/gtest.h>
#include <sodium.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace lattice::crypto {
namespace {

SessionKeys random_keys() {
  SessionKeys k;
  randombytes_buf(k.tx.data(), k.tx.size());
  randombytes_buf(k.rx.data(), k.rx.size());
  return k;
}
SessionKeys swapped(const SessionKeys& k) {
  SessionKeys s;
  s.tx = k.rx;
  s.rx = k.tx;
  return s;
}
std::vector<std::byte> pattern(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(seed + i * 131 + (i >> 8)));
  return v;
}
std::span<const std::byte> as_bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

struct Variant {
  Cipher cipher;
  AeadBackend backend;
};

void PrintTo(const Variant& v, std::ostream* os) {
  *os << to_string(v.cipher) << "/" << to_string(v.backend);
}

class AeadTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    ASSERT_EQ(sodium_init() >= 0, true);
    if (!cipher_available(cipher(), backend()))
      GTEST_SKIP() << to_string(cipher()) << " not available with " << to_string(backend());
    keys_ = random_keys();
    auto a = SessionCipher::create(cipher(), keys_, backend());
    auto b = SessionCipher::create(cipher(), swapped(keys_), backend());
    ASSERT_TRUE(a.ok() && b.ok());
    alice_.emplace(std::move(a).value());
    bob_.emplace(std::move(b).value());
  }
  Cipher cipher() const { return GetParam().cipher; }
  AeadBackend backend() const { return GetParam().backend; }
  SessionKeys keys_;
  std::optional<SessionCipher> alice_, bob_;
};

TEST_P(AeadTest, RoundTripInPlaceAtManySizes) {
  const std::string header = "frame-header";
  uint64_t expect_seq = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{1000}, size_t{4096},
                   size_t{65537}, size_t{1} << 20}) {
    auto plain = pattern(n, static_cast<uint8_t>(n));
    auto buf = plain;
    Tag tag{};
    auto seq = alice_->seal(buf, as_bytes(header), tag);
    ASSERT_TRUE(seq.ok()) << seq.status().to_string();
    EXPECT_EQ(*seq, expect_seq++);
    if (n >= 16) {
      EXPECT_NE(buf, plain) << "sealing must change the bytes in place";
    }
    ASSERT_TRUE(bob_->open(*seq, buf, as_bytes(header), tag).ok()) << n;
    EXPECT_EQ(buf, plain) << n;
  }
  EXPECT_EQ(alice_->next_tx_seq(), expect_seq);
  EXPECT_EQ(bob_->next_rx_seq(), expect_seq);
}

TEST_P(AeadTest, SealToOutOfPlaceMatchesInPlaceAndLeavesInputIntact) {
  // A second sender with the same keys seals in place: both must produce identical bytes.
  auto twin = SessionCipher::create(cipher(), keys_, backend());
  ASSERT_TRUE(twin.ok());
  const std::string header = "hdr";
  for (size_t n : {size_t{0}, size_t{17}, size_t{70000}}) {
    const auto plain = pattern(n, 9);
    std::vector<std::byte> out(n, std::byte{0});
    auto inplace = plain;
    Tag t1{}, t2{};
    auto s1 = alice_->seal_to(plain, out.data(), as_bytes(header), t1);
    auto s2 = twin->seal(inplace, as_bytes(header), t2);
    ASSERT_TRUE(s1.ok() && s2.ok());
    EXPECT_EQ(*s1, *s2);
    EXPECT_EQ(out, inplace) << n;
    EXPECT_EQ(t1, t2) << n;
    EXPECT_EQ(plain, pattern(n, 9));
    ASSERT_TRUE(bob_->open(*s1, out, as_bytes(header), t1).ok()) << n;
    EXPECT_EQ(out, plain) << n;
  }
}

TEST_P(AeadTest, MatchesLibsodiumReferenceWithCounterNonce) {
  // Independent oracle: libsodium's one-shot API with the raw key and the documented nonce
  // (sequence number little-endian, then four zero bytes).
  const std::string header = "hdr";
  for (uint64_t i = 0; i < 3; ++i) {
    auto plain = pattern(100, static_cast<uint8_t>(i));
    auto buf = plain;
    Tag tag{};
    ASSERT_TRUE(alice_->seal(buf, as_bytes(header), tag).ok());
    uint8_t nonce[kNonceBytes] = {};
    for (int b = 0; b < 8; ++b) nonce[b] = static_cast<uint8_t>(i >> (8 * b));
    std::vector<uint8_t> ref(plain.size());
    uint8_t ref_tag[kTagBytes];
    const auto* m = reinterpret_cast<const uint8_t*>(plain.data());
    const auto* ad = reinterpret_cast<const uint8_t*>(header.data());
    if (cipher() == Cipher::kAes256Gcm) {
      crypto_aead_aes256gcm_encrypt_detached(ref.data(), ref_tag, nullptr, m, plain.size(), ad, header.size(), nullptr,
                                             nonce, keys_.tx.data());
    } else {
      crypto_aead_chacha20poly1305_ietf_encrypt_detached(ref.data(), ref_tag, nullptr, m, plain.size(), ad,
                                                         header.size(), nullptr, nonce, keys_.tx.data());
    }
    EXPECT_EQ(std::memcmp(ref.data(), buf.data(), ref.size()), 0);
    EXPECT_EQ(std::memcmp(ref_tag, tag.data(), kTagBytes), 0);
  }
}

TEST_P(AeadTest, TamperedCiphertextIsRejectedWipedAndSticky) {
  const std::string header = "h";
  auto buf = pattern(300, 1);
  Tag tag{};
  auto seq = alice_->seal(buf, as_bytes(header), tag);
  ASSERT_TRUE(seq.ok());
  buf[123] ^= std::byte{0x01};
  Status st = bob_->open(*seq, buf, as_bytes(header), tag);
  EXPECT_EQ(st.code(), ErrorCode::kAuthFailed);
  for (auto b : buf) ASSERT_EQ(b, std::byte{0}) << "unauthenticated bytes must not reach the caller";
  // Sticky: even a genuine next frame is refused now.
  auto next = pattern(10, 2);
  auto seq2 = alice_->seal(next, as_bytes(header), tag);
  ASSERT_TRUE(seq2.ok());
  EXPECT_EQ(bob_->open(*seq2, next, as_bytes(header), tag).code(), ErrorCode::kAuthFailed);
  EXPECT_EQ(bob_->failure().code(), ErrorCode::kAuthFailed);
  Tag t2{};
  auto more = pattern(10, 3);
  EXPECT_EQ(bob_->seal(more, as_bytes(header), t2).status().code(), ErrorCode::kAuthFailed);
}

TEST_P(AeadTest, EveryTamperedTagBitIsRejected) {
  const std::string header = "h";
  for (size_t bit = 0; bit < kTagBytes * 8; bit += 7) {
    auto a = SessionCipher::create(cipher(), keys_, backend());
    auto b = SessionCipher::create(cipher(), swapped(keys_), backend());
    auto buf = pattern(64, 9);
    Tag tag{};
    ASSERT_TRUE(a->seal(buf, as_bytes(header), tag).ok());
    tag[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_EQ(b->open(0, buf, as_bytes(header), tag).code(), ErrorCode::kAuthFailed) << bit;
  }
}

TEST_P(AeadTest, TamperedHeaderIsRejected) {
  std::string header = "len=300 kind=data";
  auto buf = pattern(300, 1);
  Tag tag{};
  ASSERT_TRUE(alice_->seal(buf, as_bytes(header), tag).ok());
  header[4] = '9';
  EXPECT_EQ(bob_->open(0, buf, as_bytes(header), tag).code(), ErrorCode::kAuthFailed);
}

TEST_P(AeadTest, ReplayedFrameIsRejected) {
  const std::string header = "h";
  auto f0 = pattern(50, 1);
  Tag t0{};
  ASSERT_TRUE(alice_->seal(f0, as_bytes(header), t0).ok());
  auto copy = f0;
  ASSERT_TRUE(bob_->open(0, f0, as_bytes(header), t0).ok());
  // The very same bytes, again, under the number they were sealed with.
  Status st = bob_->open(0, copy, as_bytes(header), t0);
  EXPECT_EQ(st.code(), ErrorCode::kAuthFailed);
  EXPECT_NE(st.message().find("replayed"), std::string::npos);
}

TEST_P(AeadTest, ReplayUnderTheNextNumberFailsTheTag) {
  // An attacker relabelling an old frame with the expected number: the nonce differs, so
  // the tag fails.
  const std::string header = "h";
  auto f0 = pattern(50, 1);
  Tag t0{};
  ASSERT_TRUE(alice_->seal(f0, as_bytes(header), t0).ok());
  auto copy = f0;
  ASSERT_TRUE(bob_->open_next(f0, as_bytes(header), t0).ok());
  EXPECT_EQ(bob_->open_next(copy, as_bytes(header), t0).code(), ErrorCode::kAuthFailed);
}

TEST_P(AeadTest, ReorderedFramesAreRejected) {
  const std::string header = "h";
  auto f0 = pattern(50, 1), f1 = pattern(50, 2);
  Tag t0{}, t1{};
  ASSERT_TRUE(alice_->seal(f0, as_bytes(header), t0).ok());
  ASSERT_TRUE(alice_->seal(f1, as_bytes(header), t1).ok());
  Status st = bob_->open(1, f1, as_bytes(header), t1);
  EXPECT_EQ(st.code(), ErrorCode::kAuthFailed);
  EXPECT_NE(st.message().find("reordered"), std::string::npos);
  EXPECT_EQ(bob_->open(0, f0, as_bytes(header), t0).code(), ErrorCode::kAuthFailed);  // sticky
}

TEST_P(AeadTest, WrongKeyIsRejected) {
  const std::string header = "h";
  auto buf = pattern(128, 5);
  Tag tag{};
  ASSERT_TRUE(alice_->seal(buf, as_bytes(header), tag).ok());
  auto stranger = SessionCipher::create(cipher(), random_keys(), backend());
  ASSERT_TRUE(stranger.ok());
  EXPECT_EQ(stranger->open(0, buf, as_bytes(header), tag).code(), ErrorCode::kAuthFailed);
  // And the sender's own rx key (the other direction) must not open it either.
  auto same_dir = SessionCipher::create(cipher(), keys_, backend());
  auto buf2 = pattern(128, 5);
  auto a2 = SessionCipher::create(cipher(), keys_, backend());
  ASSERT_TRUE(a2->seal(buf2, as_bytes(header), tag).ok());
  EXPECT_EQ(same_dir->open(0, buf2, as_bytes(header), tag).code(), ErrorCode::kAuthFailed);
}

TEST_P(AeadTest, OneCipherSealsAndOpensOnTwoThreads) {
  // The documented concurrency: one thread seals on a cipher while another opens on it.
  constexpr int kFrames = 200;
  std::vector<std::vector<std::byte>> a2b(kFrames), b2a(kFrames);
  std::vector<Tag> ta(kFrames), tb(kFrames);
  const std::string header = "h";
  for (int i = 0; i < kFrames; ++i) {
    b2a[i] = pattern(77, static_cast<uint8_t>(i));
    ASSERT_TRUE(bob_->seal(b2a[i], as_bytes(header), tb[i]).ok());
  }
  std::thread sealer([&] {
    for (int i = 0; i < kFrames; ++i) {
      a2b[i] = pattern(333, static_cast<uint8_t>(i));
      ASSERT_TRUE(alice_->seal(a2b[i], as_bytes(header), ta[i]).ok());
    }
  });
  for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(alice_->open(i, b2a[i], as_bytes(header), tb[i]).ok());
  sealer.join();
  for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(bob_->open(i, a2b[i], as_bytes(header), ta[i]).ok());
  EXPECT_EQ(a2b[7], pattern(333, 7));
  EXPECT_EQ(b2a[9], pattern(77, 9));
}

INSTANTIATE_TEST_SUITE_P(Ciphers, AeadTest,
                         ::testing::Values(Variant{Cipher::kAes256Gcm, AeadBackend::kOpenSsl},
                                           Variant{Cipher::kChaCha20Poly1305, AeadBackend::kOpenSsl},
                                           Variant{Cipher::kAes256Gcm, AeadBackend::kSodium},
                                           Variant{Cipher::kChaCha20Poly1305, AeadBackend::kSodium}),
                         [](const auto& info) {
                           return std::string(to_string(info.param.cipher)) + "_" +
                                  (info.param.backend == AeadBackend::kOpenSsl ? "openssl" : "sodium");
                         });

// The two backends must be interchangeable: what one seals the other opens, both ways.
TEST(AeadCrossBackend, OpenSslAndLibsodiumInteroperate) {
  if (!backend_available(AeadBackend::kOpenSsl)) GTEST_SKIP() << "built without OpenSSL";
  for (Cipher c : {Cipher::kAes256Gcm, Cipher::kChaCha20Poly1305}) {
    if (!cipher_available(c, AeadBackend::kSodium)) continue;
    for (bool openssl_seals : {true, false}) {
      SessionKeys k = random_keys();
      auto sealer = SessionCipher::create(c, k, openssl_seals ? AeadBackend::kOpenSsl : AeadBackend::kSodium);
      auto opener = SessionCipher::create(c, swapped(k), openssl_seals ? AeadBackend::kSodium : AeadBackend::kOpenSsl);
      ASSERT_TRUE(sealer.ok() && opener.ok());
      const std::string header = "cross";
      for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, size_t{100003}}) {
        auto plain = pattern(n, static_cast<uint8_t>(n + 3));
        auto buf = plain;
        Tag tag{};
        auto seq = sealer->seal(buf, as_bytes(header), tag);
        ASSERT_TRUE(seq.ok());
        ASSERT_TRUE(opener->open(*seq, buf, as_bytes(header), tag).ok()) << to_string(c) << " n=" << n;
        EXPECT_EQ(buf, plain);
      }
    }
  }
}

// kAuto splits AES-256-GCM frames between libsodium (small) and OpenSSL (large): peers on
// either explicit backend must open everything it seals and vice versa, on both sides of the
// split, in one session (one nonce sequence across the two implementations).
TEST(AeadCrossBackend, AutoInteroperatesWithBothBackendsAcrossFrameSizes) {
  if (!cipher_available(Cipher::kAes256Gcm, AeadBackend::kSodium)) GTEST_SKIP() << "no AES-NI for libsodium";
  for (AeadBackend other : {AeadBackend::kOpenSsl, AeadBackend::kSodium}) {
    if (!backend_available(other)) continue;
    SessionKeys k = random_keys();
    auto a = SessionCipher::create(Cipher::kAes256Gcm, k, AeadBackend::kAuto);
    auto b = SessionCipher::create(Cipher::kAes256Gcm, swapped(k), other);
    ASSERT_TRUE(a.ok() && b.ok());
    const std::string header = "split";
    for (size_t n : {size_t{0}, size_t{8}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{4096}, size_t{8},
                     size_t{70001}, size_t{0}}) {
      for (bool auto_seals : {true, false}) {
        SessionCipher& sealer = auto_seals ? *a : *b;
        SessionCipher& opener = auto_seals ? *b : *a;
        auto plain = pattern(n, static_cast<uint8_t>(n + 11));
        auto buf = plain;
        Tag tag{};
        ASSERT_TRUE(sealer.seal(buf, as_bytes(header), tag).ok());
        if (n > 0) {
          EXPECT_NE(buf, plain) << n;
        }
        ASSERT_TRUE(opener.open_next(buf, as_bytes(header), tag).ok())
            << "n=" << n << " auto seals=" << auto_seals << " other=" << to_string(other);
        EXPECT_EQ(buf, plain);
      }
    }
    // A tampered small frame still fails (the libsodium half verifies tags too).
    auto buf = pattern(8, 1);
    Tag tag{};
    ASSERT_TRUE(a->seal(buf, as_bytes(header), tag).ok());
    buf[0] ^= std::byte{1};
    EXPECT_EQ(b->open_next(buf, as_bytes(header), tag).code(), ErrorCode::kAuthFailed);
  }
}

TEST(CipherNames, ParseAndDefault) {
  EXPECT_EQ(*parse_cipher("aes256gcm"), Cipher::kAes256Gcm);
  EXPECT_EQ(*parse_cipher("chacha20poly1305"), Cipher::kChaCha20Poly1305);
  EXPECT_EQ(parse_cipher("rot13").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(cipher_available(default_cipher()));
  EXPECT_TRUE(cipher_available(Cipher::kChaCha20Poly1305));
  auto c = SessionCipher::create(Cipher::kChaCha20Poly1305, SessionKeys{});
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->backend(), AeadBackend::kAuto);
}

}  // namespace
}  // namespace lattice::crypto
