// The control channel's frames: sealed with the session cipher, so a replayed, reordered or
// bit-flipped frame is rejected (kAuthFailed) and nothing it carried is delivered.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "lattice/cluster/control.h"
#include "lattice/core/fd_io.h"

namespace lattice::cluster {
namespace {

using nlohmann::json;

struct Pair {
  std::unique_ptr<ControlChannel> initiator, responder;
};

Pair handshaken_pair(bool insecure = false) {
  int sv[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  auto secret = crypto::ClusterSecret::from_bytes({7});
  auto resp = std::async(std::launch::async, [&] {
    return handshake_fd(sv[1], crypto::Handshake::Role::kResponder, secret, insecure, "initiator", Deadline::after(10s));
  });
  auto init = handshake_fd(sv[0], crypto::Handshake::Role::kInitiator, secret, insecure, "responder", Deadline::after(10s));
  auto r = resp.get();
  EXPECT_TRUE(init.ok()) << init.status().to_string();
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return {std::move(init).value(), std::move(r).value()};
}

TEST(ControlChannel, MessagesArriveInOrderAndEncrypted) {
  auto p = handshaken_pair();
  ASSERT_FALSE(p.initiator->insecure());
  auto frame = p.initiator->seal_frame(json{{"t", "hello"}, {"secret_word", "swordfish"}});
  ASSERT_TRUE(frame.ok());
  std::string raw(frame->begin(), frame->end());
  EXPECT_EQ(raw.find("swordfish"), std::string::npos) << "payload must not travel in clear";
  // seal_frame consumed sequence number 0: deliver that very frame, then two more.
  ASSERT_TRUE(write_all(p.initiator->fd(), frame->data(), frame->size(), Deadline::after(5s)).ok());
  ASSERT_TRUE(p.initiator->send(json{{"t", "a"}}, Deadline::after(5s)).ok());
  ASSERT_TRUE(p.initiator->send(json{{"t", "b"}}, Deadline::after(5s)).ok());
  auto m0 = p.responder->recv(Deadline::after(5s));
  ASSERT_TRUE(m0.ok()) << m0.status().to_string();
  EXPECT_EQ((*m0)["secret_word"], "swordfish");
  EXPECT_EQ((*p.responder->recv(Deadline::after(5s)))["t"], "a");
  EXPECT_EQ((*p.responder->recv(Deadline::after(5s)))["t"], "b");
}

TEST(ControlChannel, ReplayedFrameIsRejected) {
  auto p = handshaken_pair();
  auto frame = p.initiator->seal_frame(json{{"t", "ag"}, {"data", "x"}});
  ASSERT_TRUE(frame.ok());
  ASSERT_TRUE(write_all(p.initiator->fd(), frame->data(), frame->size(), Deadline::after(5s)).ok());
  ASSERT_TRUE(write_all(p.initiator->fd(), frame->data(), frame->size(), Deadline::after(5s)).ok());
  auto first = p.responder->recv(Deadline::after(5s));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto replay = p.responder->recv(Deadline::after(5s));
  ASSERT_FALSE(replay.ok());
  EXPECT_EQ(replay.status().code(), ErrorCode::kAuthFailed) << replay.status().to_string();
  // Sticky: a genuine frame after it is refused too.
  ASSERT_TRUE(p.initiator->send(json{{"t", "hb"}}, Deadline::after(5s)).ok());
  EXPECT_EQ(p.responder->recv(Deadline::after(1s)).status().code(), ErrorCode::kAuthFailed);
}

TEST(ControlChannel, BitFlipAnywhereIsRejected) {
  auto probe = handshaken_pair();
  auto f = probe.initiator->seal_frame(json{{"t", "view"}, {"lost", {1}}});
  ASSERT_TRUE(f.ok());
  const size_t n = f->size();
  // Flip one bit in the length, the ciphertext and the tag, each on a fresh session.
  for (size_t pos : {size_t{0}, size_t{kControlHeaderBytes + 3}, n - 1}) {
    auto p = handshaken_pair();
    auto frame = p.initiator->seal_frame(json{{"t", "view"}, {"lost", {1}}});
    ASSERT_TRUE(frame.ok());
    (*frame)[pos] ^= 0x10;
    ASSERT_TRUE(write_all(p.initiator->fd(), frame->data(), frame->size(), Deadline::after(5s)).ok());
    if (pos == 0) ::shutdown(p.initiator->fd(), SHUT_WR);  // a longer length would wait for more bytes
    auto m = p.responder->recv(Deadline::after(5s));
    ASSERT_FALSE(m.ok()) << "flip at byte " << pos << " was accepted";
    EXPECT_TRUE(m.status().code() == ErrorCode::kAuthFailed || m.status().code() == ErrorCode::kPeerLost)
        << pos << ": " << m.status().to_string();
  }
}

TEST(ControlChannel, OversizedLengthIsCorrupt) {
  auto p = handshaken_pair();
  uint8_t bad[4] = {0xff, 0xff, 0xff, 0x7f};
  ASSERT_TRUE(write_all(p.initiator->fd(), bad, 4, Deadline::after(5s)).ok());
  auto m = p.responder->recv(Deadline::after(5s));
  EXPECT_EQ(m.status().code(), ErrorCode::kCorrupt);
}

TEST(ControlChannel, InsecureSessionSendsPlainTextButStillFrames) {
  auto p = handshaken_pair(/*insecure=*/true);
  EXPECT_TRUE(p.initiator->insecure());
  auto f = p.initiator->seal_frame(json{{"t", "x"}});
  ASSERT_TRUE(f.ok());
  const size_t plain = json({{"t", "x"}}).dump().size();
  EXPECT_EQ(f->size(), kControlHeaderBytes + plain);
}

TEST(ControlAddress, SplitHostPort) {
  EXPECT_EQ(*split_host_port("10.0.0.1:99"), std::make_pair(std::string("10.0.0.1"), uint16_t{99}));
  EXPECT_EQ(*split_host_port("node1"), std::make_pair(std::string("node1"), kDefaultCoordinatorPort));
  EXPECT_EQ(*split_host_port("[::1]:5"), std::make_pair(std::string("::1"), uint16_t{5}));
  EXPECT_FALSE(split_host_port("host:99999").ok());
  EXPECT_FALSE(split_host_port(":5").ok());
}

}  // namespace
}  // namespace lattice::cluster
