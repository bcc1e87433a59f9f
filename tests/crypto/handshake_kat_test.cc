// A known-answer test of the join handshake: one exchange with fixed secret, context and
// entropy, byte for byte against tests/crypto/handshake_kat.py, an independent implementation of
// the protocol that handshake.h documents (Python's hashlib and RFC 7748's X25519, no libsodium).
// A change to the wire format, a MAC's input or a key derivation fails here even when both ends
// of the C++ code change together, which the round-trip tests cannot see.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "lattice/crypto/handshake.h"

namespace lattice::crypto {
namespace {

// Output of `python3 tests/crypto/handshake_kat.py`.
constexpr const char* kM1 =
    "4c54485301010200111111111111111111111111111111111111111111111111"
    "11111111111111110faa684ed28867b97f4a6a2dee5df8ce974e76b7018e3f22"
    "a1c4cf2678570f203bd736c4703d079110105fefaa43911ef5e0d14d8f08d353"
    "c4bf62c7be05c52a";
constexpr const char* kM2 =
    "4c54485301020200333333333333333333333333333333333333333333333333"
    "3333333333333333ff2ee45601ec1b67310c7790404585ae697331eee1c1f8cf"
    "2419731c1fff3e6b867dd0af207bd38ebf7e8e90d1e117ef9114c5e50eddaf52"
    "20fbc59a55fbe609";
constexpr const char* kM3 =
    "4c544853010302000f8e4fd34681c92e0dd6a72c05a44024209cbd301ce342a2"
    "257c9733cf94fa53";
constexpr const char* kKeyI2R =
    "dcc6a7145ac12f33b61768940ffff6c00d93660072355e2add1c700d2970a77f";
constexpr const char* kKeyR2I =
    "4545f748b57c416ed0fb5a32494cc7722fb39fc2f6ce7b1424261953fc23e2be";
constexpr const char* kSessionId =
    "f5657a9ffd86aeabb16803dd837f6089";

std::vector<uint8_t> hex(std::string_view h) {
  std::vector<uint8_t> out;
  auto nib = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<uint8_t>(nib(h[i]) << 4 | nib(h[i + 1])));
  return out;
}

// Hands out 32 bytes of `nonce_byte`, then 32 of `secret_byte`: the nonce, then the ephemeral secret.
std::function<void(std::span<uint8_t>)> fixed_entropy(uint8_t nonce_byte, uint8_t secret_byte) {
  auto calls = std::make_shared<int>(0);
  return [=](std::span<uint8_t> out) { std::memset(out.data(), (*calls)++ == 0 ? nonce_byte : secret_byte, out.size()); };
}

HandshakeOptions options(uint8_t nonce_byte, uint8_t secret_byte) {
  HandshakeOptions o;
  o.context = "tcp data 0->1 epoch 3";
  o.ciphers = {Cipher::kChaCha20Poly1305};
  o.entropy = fixed_entropy(nonce_byte, secret_byte);
  return o;
}

TEST(HandshakeKat, MessagesAndKeysMatchTheIndependentImplementation) {
  ClusterSecret::Bytes bytes;
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i);
  const ClusterSecret secret = ClusterSecret::from_bytes(bytes);
  auto init = Handshake::create(Handshake::Role::kInitiator, secret, options(0x11, 0x22));
  auto resp = Handshake::create(Handshake::Role::kResponder, secret, options(0x33, 0x44));
  ASSERT_TRUE(init.ok() && resp.ok());

  auto m1 = init->start();
  ASSERT_TRUE(m1.ok());
  EXPECT_EQ(*m1, hex(kM1));
  auto m2 = resp->on_message(*m1);
  ASSERT_TRUE(m2.ok()) << m2.status().to_string();
  EXPECT_EQ(*m2, hex(kM2));
  auto m3 = init->on_message(*m2);
  ASSERT_TRUE(m3.ok()) << m3.status().to_string();
  EXPECT_EQ(*m3, hex(kM3));
  ASSERT_TRUE(resp->on_message(*m3).ok());

  auto si = init->session(), sr = resp->session();
  ASSERT_TRUE(si.ok() && sr.ok());
  auto key = [](const Key& k) { return std::vector<uint8_t>(k.begin(), k.end()); };
  EXPECT_EQ(key(si->keys.tx), hex(kKeyI2R));
  EXPECT_EQ(key(si->keys.rx), hex(kKeyR2I));
  EXPECT_EQ(key(sr->keys.tx), hex(kKeyR2I));
  EXPECT_EQ(key(sr->keys.rx), hex(kKeyI2R));
  EXPECT_EQ(std::vector<uint8_t>(si->session_id.begin(), si->session_id.end()), hex(kSessionId));
  EXPECT_EQ(si->session_id, sr->session_id);
  EXPECT_EQ(si->cipher, Cipher::kChaCha20Poly1305);
}

}  // namespace
}  // namespace lattice::crypto
