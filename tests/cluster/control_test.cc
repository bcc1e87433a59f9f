// The control channel's frames: sealed with the session cipher, so a replayed, reordered or
// bit-flipped frame is rejected (kAuthFailed) and nothing it carried is delivered.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "lattice/cluster/bootstrap.h"
#include "lattice/cluster/control.h"
#include "lattice/cluster/control_schema.h"
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

// Found by fuzz/control_fuzz.cc (corpus/control/regression-truncated-frame): a frame cut short
// by the peer hanging up was "not yet complete" forever, so recv() spun on the readable EOF
// until its deadline and then reported a timeout.
TEST(ControlChannel, PeerHangingUpMidFrameIsLostAtOnce) {
  for (size_t cut : {size_t{2}, size_t{9}}) {  // inside the length, inside the payload
    auto p = handshaken_pair(/*insecure=*/true);
    auto f = p.initiator->seal_frame(json{{"t", "hb"}});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(write_all(p.initiator->fd(), f->data(), cut, Deadline::after(5s)).ok());
    p.initiator->shutdown();
    auto start = std::chrono::steady_clock::now();
    auto m = p.responder->recv(Deadline::after(5s));
    EXPECT_EQ(m.status().code(), ErrorCode::kPeerLost) << m.status().to_string();
    EXPECT_NE(m.status().message().find("in the middle of a frame"), std::string::npos) << m.status().to_string();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  }
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

// ---- the protocol's schema (control_schema.h) ----

TEST(ControlSchema, WellFormedMessagesPass) {
  EXPECT_TRUE(validate_from_member(json{{"t", "hello"}, {"rank", 2}, {"world", 4}, {"rejoin", false}, {"name", "a"}}).ok());
  EXPECT_TRUE(validate_from_member(json{{"t", "ag"}, {"epoch", 0}, {"seq", 3}, {"data", "x"}}).ok());
  EXPECT_TRUE(validate_from_member(json{{"t", "hb"}, {"extra", 1}}).ok());
  EXPECT_TRUE(validate_from_member(json{{"t", "from_a_newer_version"}, {"x", json::array()}}).ok());
  EXPECT_TRUE(validate_from_coordinator(json{{"t", "plan"}, {"epoch", 1}, {"rank", 0}, {"world", 2},
                                             {"members", {"a", "b"}}, {"origins", {0, -1}}}).ok());
  EXPECT_TRUE(validate_from_coordinator(json{{"t", "view"}, {"epoch", 0}, {"lost", {1}}, {"alive", {0, 2}}}).ok());
}

TEST(ControlSchema, WrongTypesAndRangesAreRefusedNamingTheField) {
  struct Case {
    json msg;
    const char* field;
  };
  for (const Case& c : std::vector<Case>{
           {json{{"t", "hello"}, {"rank", "zero"}, {"world", 2}}, "rank"},
           {json{{"t", "hello"}, {"rank", 0}}, "world"},
           {json{{"t", "hello"}, {"rank", -1}, {"world", 2}}, "rank"},
           {json{{"t", "hello"}, {"rank", 0}, {"world", 1 << 20}}, "world"},
           {json{{"t", "hello"}, {"rank", 0}, {"world", 2}, {"name", 7}}, "name"},
           {json{{"t", "hello"}, {"rank", 0}, {"world", 2}, {"name", std::string(100000, 'n')}}, "name"},
           {json{{"t", "ag"}, {"epoch", -3}, {"seq", 0}, {"data", ""}}, "epoch"},
           {json{{"t", "ag"}, {"epoch", 0}, {"seq", 0}, {"data", json::object()}}, "data"},
           {json{{"t", "shrink"}, {"epoch", 1.5}}, "epoch"},
       }) {
    Status st = validate_from_member(c.msg);
    EXPECT_EQ(st.code(), ErrorCode::kCorrupt) << c.msg.dump().substr(0, 200);
    EXPECT_NE(st.message().find(std::string("'") + c.field + "'"), std::string::npos) << st.to_string().substr(0, 300);
  }
  EXPECT_FALSE(validate_from_member(json::array({1, 2})).ok());
  EXPECT_FALSE(validate_from_member(json{{"t", 5}}).ok());
  EXPECT_FALSE(validate_from_coordinator(json{{"t", "plan"}, {"epoch", 0}, {"rank", 3}, {"world", "2"}}).ok());
  EXPECT_FALSE(validate_from_coordinator(json{{"t", "view"}, {"epoch", 0}, {"lost", {"1"}}, {"alive", json::array()}}).ok());
  EXPECT_FALSE(validate_from_coordinator(json{{"t", "ag_done"}, {"epoch", 0}, {"seq", 0}, {"data", {1, 2}}}).ok());
}

// An authenticated connection to a live coordinator that speaks another version of the
// protocol: its hello is refused, the coordinator lives on and a proper member still joins.
TEST(ControlSchema, ACoordinatorRefusesAMalformedHelloAndCarriesOn) {
  CoordinatorOptions co;
  co.listen = "127.0.0.1:0";
  co.world_size = 1;
  co.secret = crypto::ClusterSecret::from_bytes({7});
  auto coordinator = Coordinator::start(co);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status().to_string();
  const std::string address = "127.0.0.1:" + std::to_string((*coordinator)->port());
  auto stranger = [&](const json& hello) {
    auto fd = dial_tcp(address, Deadline::after(10s));
    EXPECT_TRUE(fd.ok());
    auto ch = handshake_fd(*fd, crypto::Handshake::Role::kInitiator, co.secret, false, "coordinator", Deadline::after(10s));
    EXPECT_TRUE(ch.ok()) << ch.status().to_string();
    EXPECT_TRUE((*ch)->send(hello, Deadline::after(10s)).ok());
    for (;;) {  // the coordinator's heartbeats may come first
      auto reply = (*ch)->recv(Deadline::after(10s));
      if (!reply.ok()) return json{{"t", "none"}, {"reason", reply.status().to_string()}};
      if ((*reply)["t"] != "hb") return *reply;
    }
  };
  json r1 = stranger(json{{"t", "hello"}, {"rank", "zero"}, {"world", 1}});
  EXPECT_EQ(r1["t"], "refused") << r1.dump();
  EXPECT_NE(r1.value("reason", "").find("'rank'"), std::string::npos) << r1.dump();
  json r2 = stranger(json{{"t", "hello"}, {"rank", 0}, {"world", 1}, {"name", json::object()}});
  EXPECT_EQ(r2["t"], "refused") << r2.dump();
  EXPECT_EQ((*coordinator)->stats().refused, 2);
  EXPECT_FALSE((*coordinator)->stats().formed);
  json r3 = stranger(json{{"t", "hello"}, {"rank", 0}, {"world", 1}, {"name", "proper"}});
  EXPECT_EQ(r3["t"], "plan") << r3.dump();
  EXPECT_TRUE((*coordinator)->stats().formed);
}

}  // namespace
}  // namespace lattice::cluster
