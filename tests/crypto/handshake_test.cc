#include "lattice/crypto/handshake.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace lattice::crypto {
namespace {

using Role = Handshake::Role;
using Msg = std::vector<uint8_t>;

struct Transcript {
  Msg m1, m2, m3;
};

HandshakeOptions opt(std::string context, bool insecure = false, std::vector<Cipher> ciphers = {}) {
  HandshakeOptions o;
  o.context = std::move(context);
  o.insecure = insecure;
  o.ciphers = std::move(ciphers);
  return o;
}

Handshake make(Role role, const ClusterSecret& s, HandshakeOptions o = {}) {
  if (o.context.empty()) o.context = "test link 0->1";
  auto h = Handshake::create(role, s, std::move(o));
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  return std::move(h).value();
}

// Runs a full exchange; returns the messages. Stops at the first failure.
Transcript run(Handshake& i, Handshake& r) {
  Transcript t;
  auto m1 = i.start();
  if (!m1.ok()) return t;
  t.m1 = *m1;
  EXPECT_EQ(r.next_message_bytes(), t.m1.size());
  auto m2 = r.on_message(t.m1);
  if (!m2.ok()) return t;
  t.m2 = *m2;
  EXPECT_EQ(i.next_message_bytes(), t.m2.size());
  auto m3 = i.on_message(t.m2);
  if (!m3.ok()) return t;
  t.m3 = *m3;
  EXPECT_EQ(r.next_message_bytes(), t.m3.size());
  auto end = r.on_message(t.m3);
  if (end.ok()) {
    EXPECT_TRUE(end->empty());
  }
  return t;
}

TEST(HandshakeTest, SameSecretGivesMatchingPerDirectionKeys) {
  auto secret = ClusterSecret::generate();
  auto i = make(Role::kInitiator, secret);
  auto r = make(Role::kResponder, secret);
  EXPECT_EQ(i.next_message_bytes(), 0u);
  EXPECT_EQ(r.next_message_bytes(), Handshake::kHelloBytes);
  auto t = run(i, r);
  ASSERT_TRUE(i.done());
  ASSERT_TRUE(r.done());
  EXPECT_EQ(t.m1.size(), 104u);
  EXPECT_EQ(t.m2.size(), 104u);
  EXPECT_EQ(t.m3.size(), 40u);
  EXPECT_EQ(i.next_message_bytes(), 0u);
  EXPECT_EQ(r.next_message_bytes(), 0u);
  auto si = i.session();
  auto sr = r.session();
  ASSERT_TRUE(si.ok() && sr.ok());
  EXPECT_EQ(si->keys.tx, sr->keys.rx);
  EXPECT_EQ(si->keys.rx, sr->keys.tx);
  EXPECT_NE(si->keys.tx, si->keys.rx) << "each direction needs its own key";
  EXPECT_EQ(si->session_id, sr->session_id);
  EXPECT_EQ(si->cipher, default_cipher());
  EXPECT_EQ(sr->cipher, default_cipher());
  EXPECT_FALSE(si->insecure);

  // The keys work as a pair of session ciphers, both ways.
  auto ci = SessionCipher::create(si->cipher, si->keys);
  auto cr = SessionCipher::create(sr->cipher, sr->keys);
  ASSERT_TRUE(ci.ok() && cr.ok());
  std::string hello = "hello from the initiator";
  std::vector<std::byte> buf(reinterpret_cast<const std::byte*>(hello.data()),
                             reinterpret_cast<const std::byte*>(hello.data()) + hello.size());
  Tag tag{};
  ASSERT_TRUE(ci->seal(buf, {}, tag).ok());
  ASSERT_TRUE(cr->open_next(buf, {}, tag).ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), buf.size()), hello);
  ASSERT_TRUE(cr->seal(buf, {}, tag).ok());
  ASSERT_TRUE(ci->open_next(buf, {}, tag).ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(buf.data()), buf.size()), hello);
}

TEST(HandshakeTest, EverySessionHasFreshKeys) {
  auto secret = ClusterSecret::generate();
  auto i1 = make(Role::kInitiator, secret), r1 = make(Role::kResponder, secret);
  auto i2 = make(Role::kInitiator, secret), r2 = make(Role::kResponder, secret);
  run(i1, r1);
  run(i2, r2);
  ASSERT_TRUE(r1.done() && r2.done());
  EXPECT_NE(i1.session()->keys.tx, i2.session()->keys.tx);
  EXPECT_NE(i1.session()->session_id, i2.session()->session_id);
}

TEST(HandshakeTest, WrongSecretFailsOnBothSidesWithAuthFailed) {
  auto i = make(Role::kInitiator, ClusterSecret::generate());
  auto r = make(Role::kResponder, ClusterSecret::generate());
  auto m1 = i.start();
  ASSERT_TRUE(m1.ok());
  auto m2 = r.on_message(*m1);
  ASSERT_FALSE(m2.ok());
  EXPECT_EQ(m2.status().code(), ErrorCode::kAuthFailed);
  EXPECT_NE(m2.status().message().find("does not hold the cluster secret"), std::string::npos);
  EXPECT_FALSE(r.done());
  EXPECT_EQ(r.next_message_bytes(), 0u);
  EXPECT_EQ(r.session().status().code(), ErrorCode::kAuthFailed);
  auto reject = r.take_reject();
  ASSERT_EQ(reject.size(), Handshake::kReplyBytes);
  auto m3 = i.on_message(reject);
  ASSERT_FALSE(m3.ok());
  EXPECT_EQ(m3.status().code(), ErrorCode::kAuthFailed);
  EXPECT_NE(m3.status().message().find("cluster secret"), std::string::npos);
  EXPECT_FALSE(i.done());
  // Sticky: a later message changes nothing.
  EXPECT_EQ(r.on_message(*m1).status().code(), ErrorCode::kAuthFailed);
}

TEST(HandshakeTest, ResponderWithWrongSecretCannotFoolTheInitiator) {
  // A man in the middle holding another secret answers a genuine hello with his own reply
  // (he can build one only as a responder of his own cluster, for his own hello).
  auto secret = ClusterSecret::generate();
  auto mitm_secret = ClusterSecret::generate();
  auto victim = make(Role::kInitiator, secret);
  auto m1 = victim.start();
  ASSERT_TRUE(m1.ok());
  auto mitm_i = make(Role::kInitiator, mitm_secret);
  auto mitm_r = make(Role::kResponder, mitm_secret);
  auto fake_m1 = mitm_i.start();
  auto fake_m2 = mitm_r.on_message(*fake_m1);
  ASSERT_TRUE(fake_m2.ok());
  auto out = victim.on_message(*fake_m2);
  EXPECT_EQ(out.status().code(), ErrorCode::kAuthFailed);
}

TEST(HandshakeTest, DifferentContextIsRefused) {
  auto secret = ClusterSecret::generate();
  auto i = make(Role::kInitiator, secret, opt("tcp 0->1"));
  auto r = make(Role::kResponder, secret, opt("tcp 0->2"));
  run(i, r);
  EXPECT_FALSE(r.done());
  EXPECT_EQ(r.session().status().code(), ErrorCode::kAuthFailed);
}

TEST(HandshakeTest, ReplayedConfirmFailsAgainstAFreshResponder) {
  auto secret = ClusterSecret::generate();
  auto i = make(Role::kInitiator, secret), r = make(Role::kResponder, secret);
  auto old = run(i, r);
  ASSERT_TRUE(r.done());
  // The attacker replays the recorded M1 and M3 to a new responder.
  auto r2 = make(Role::kResponder, secret);
  auto m2 = r2.on_message(old.m1);
  ASSERT_TRUE(m2.ok()) << "a replayed hello earns a reply...";
  EXPECT_NE(*m2, old.m2) << "...with a fresh nonce and key";
  auto end = r2.on_message(old.m3);
  EXPECT_EQ(end.status().code(), ErrorCode::kAuthFailed) << "...but can never be confirmed";
  EXPECT_FALSE(r2.done());
}

TEST(HandshakeTest, ReplayedReplyFailsAgainstAFreshInitiator) {
  auto secret = ClusterSecret::generate();
  auto i = make(Role::kInitiator, secret), r = make(Role::kResponder, secret);
  auto old = run(i, r);
  auto i2 = make(Role::kInitiator, secret);
  ASSERT_TRUE(i2.start().ok());
  EXPECT_EQ(i2.on_message(old.m2).status().code(), ErrorCode::kAuthFailed);
  EXPECT_FALSE(i2.done());
}

TEST(HandshakeTest, EveryModifiedByteOfEveryMessageFails) {
  auto secret = ClusterSecret::generate();
  auto base_i = make(Role::kInitiator, secret), base_r = make(Role::kResponder, secret);
  (void)run(base_i, base_r);
  for (int which = 0; which < 3; ++which) {
    size_t len = which == 2 ? Handshake::kConfirmBytes : Handshake::kHelloBytes;
    for (size_t pos = 0; pos < len; ++pos) {
      auto i = make(Role::kInitiator, secret), r = make(Role::kResponder, secret);
      auto m1 = *i.start();
      if (which == 0) m1[pos] ^= 0x20;
      auto m2 = r.on_message(m1);
      if (which == 0) {
        EXPECT_EQ(m2.status().code(), ErrorCode::kAuthFailed) << "M1 byte " << pos;
        continue;
      }
      ASSERT_TRUE(m2.ok());
      auto reply = *m2;
      if (which == 1) reply[pos] ^= 0x20;
      auto m3 = i.on_message(reply);
      if (which == 1) {
        EXPECT_EQ(m3.status().code(), ErrorCode::kAuthFailed) << "M2 byte " << pos;
        continue;
      }
      ASSERT_TRUE(m3.ok());
      auto confirm = *m3;
      confirm[pos] ^= 0x20;
      EXPECT_EQ(r.on_message(confirm).status().code(), ErrorCode::kAuthFailed) << "M3 byte " << pos;
      EXPECT_FALSE(r.done());
    }
  }
}

TEST(HandshakeTest, TruncatedAndOversizedMessagesFail) {
  auto secret = ClusterSecret::generate();
  auto i = make(Role::kInitiator, secret), r = make(Role::kResponder, secret);
  auto m1 = *i.start();
  m1.pop_back();
  EXPECT_EQ(r.on_message(m1).status().code(), ErrorCode::kAuthFailed);
  auto r2 = make(Role::kResponder, secret);
  m1.push_back(0);
  m1.push_back(0);
  EXPECT_EQ(r2.on_message(m1).status().code(), ErrorCode::kAuthFailed);
  EXPECT_EQ(r2.on_message({}).status().code(), ErrorCode::kAuthFailed);
}

TEST(HandshakeTest, InsecureNeedsBothSides) {
  auto secret = ClusterSecret::generate();
  {
    auto i = make(Role::kInitiator, secret, opt("x", true));
    auto r = make(Role::kResponder, secret, opt("x", true));
    run(i, r);
    ASSERT_TRUE(i.done() && r.done());
    EXPECT_TRUE(i.session()->insecure);
    EXPECT_TRUE(r.session()->insecure);
  }
  {
    auto i = make(Role::kInitiator, secret, opt("x", true));
    auto r = make(Role::kResponder, secret, opt("x", false));
    auto m2 = r.on_message(*i.start());
    EXPECT_EQ(m2.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(i.on_message(r.take_reject()).status().code(), ErrorCode::kInvalidArgument);
  }
}

TEST(HandshakeTest, CipherNegotiation) {
  auto secret = ClusterSecret::generate();
  {
    auto i = make(Role::kInitiator, secret, opt("x", false, {Cipher::kChaCha20Poly1305}));
    auto r = make(Role::kResponder, secret, opt("x"));
    run(i, r);
    ASSERT_TRUE(r.done());
    EXPECT_EQ(i.session()->cipher, Cipher::kChaCha20Poly1305);
    EXPECT_EQ(r.session()->cipher, Cipher::kChaCha20Poly1305);
  }
  if (cipher_available(Cipher::kAes256Gcm)) {
    auto i = make(Role::kInitiator, secret, opt("x", false, {Cipher::kChaCha20Poly1305}));
    auto r = make(Role::kResponder, secret, opt("x", false, {Cipher::kAes256Gcm}));
    auto m2 = r.on_message(*i.start());
    EXPECT_EQ(m2.status().code(), ErrorCode::kUnavailable);
    EXPECT_EQ(i.on_message(r.take_reject()).status().code(), ErrorCode::kUnavailable);
  }
}

TEST(HandshakeTest, MisuseIsAnErrorNotACrash) {
  auto secret = ClusterSecret::generate();
  auto r = make(Role::kResponder, secret);
  EXPECT_EQ(r.start().status().code(), ErrorCode::kInternal);
  auto i = make(Role::kInitiator, secret);
  EXPECT_EQ(i.on_message(std::vector<uint8_t>(104)).status().code(), ErrorCode::kInternal);
  auto i2 = make(Role::kInitiator, secret), r2 = make(Role::kResponder, secret);
  auto t = run(i2, r2);
  ASSERT_TRUE(r2.done());
  EXPECT_EQ(r2.on_message(t.m3).status().code(), ErrorCode::kAuthFailed);
  EXPECT_EQ(i2.session().status().code(), ErrorCode::kOk);
}

}  // namespace
}  // namespace lattice::crypto
