// The crypto layer used the way the tcp provider will use it: the handshake driven over a
// stream socket by two threads, then frames `header | ciphertext | tag` sealed in place in
// the send buffer and opened in place in the receive buffer, the header as associated data.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "lattice/core/deadline.h"
#include "lattice/crypto/aead.h"
#include "lattice/crypto/handshake.h"

namespace lattice::crypto {
namespace {

Status write_all(int fd, const void* p, size_t n, Deadline d) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    pollfd pfd{fd, POLLOUT, 0};
    if (::poll(&pfd, 1, d.remaining_ms_for_poll()) <= 0) return Timeout("write");
    ssize_t k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k <= 0) return PeerLost("write");
    b += k;
    n -= static_cast<size_t>(k);
  }
  return Status::Ok();
}

Status read_all(int fd, void* p, size_t n, Deadline d) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, d.remaining_ms_for_poll()) <= 0) return Timeout("read");
    ssize_t k = ::recv(fd, b, n, 0);
    if (k <= 0) return PeerLost("read");
    b += k;
    n -= static_cast<size_t>(k);
  }
  return Status::Ok();
}

// Drives one side of the handshake over `fd` until done or failed.
Result<Session> handshake_over(int fd, Handshake& hs, bool initiator, Deadline d) {
  if (initiator) {
    auto m1 = hs.start();
    if (!m1.ok()) return m1.status();
    LATTICE_RETURN_IF_ERROR(write_all(fd, m1->data(), m1->size(), d));
  }
  while (!hs.done()) {
    std::vector<uint8_t> in(hs.next_message_bytes());
    if (in.empty()) return Internal("nothing expected but not done");
    LATTICE_RETURN_IF_ERROR(read_all(fd, in.data(), in.size(), d));
    auto out = hs.on_message(in);
    if (!out.ok()) {
      auto reject = hs.take_reject();
      if (!reject.empty()) (void)write_all(fd, reject.data(), reject.size(), d);
      return out.status();
    }
    if (!out->empty()) LATTICE_RETURN_IF_ERROR(write_all(fd, out->data(), out->size(), d));
  }
  return hs.session();
}

struct FrameHeader {  // little-endian on the wire; authenticated as AD
  uint32_t payload_bytes;
  uint32_t kind;
};
static_assert(sizeof(FrameHeader) == 8);

class SocketSessionTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  void TearDown() override {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  // Handshakes both ends on two threads; returns both sessions' results.
  std::pair<Result<Session>, Result<Session>> join(const ClusterSecret& si, const ClusterSecret& sr) {
    auto d = Deadline::after(std::chrono::seconds(30));
    Result<Session> ri = Internal("unset"), rr = Internal("unset");
    std::thread responder([&] {
      auto hs = Handshake::create(Handshake::Role::kResponder, sr, {.context = "socket test"});
      rr = handshake_over(fds_[1], *hs, false, d);
    });
    auto hs = Handshake::create(Handshake::Role::kInitiator, si, {.context = "socket test"});
    ri = handshake_over(fds_[0], *hs, true, d);
    responder.join();
    return {ri, rr};
  }
  int fds_[2];
};

TEST_F(SocketSessionTest, EncryptedFramesFlowAndATamperedOneFailsTheSession) {
  auto secret = ClusterSecret::generate();
  auto [si, sr] = join(secret, secret);
  ASSERT_TRUE(si.ok()) << si.status().to_string();
  ASSERT_TRUE(sr.ok()) << sr.status().to_string();
  auto tx = SessionCipher::create(si->cipher, si->keys);
  auto rx = SessionCipher::create(sr->cipher, sr->keys);
  ASSERT_TRUE(tx.ok() && rx.ok());
  auto d = Deadline::after(std::chrono::seconds(30));

  // Sender: the frame is built in its send buffer and sealed where it lies.
  auto send_frame = [&](size_t n, uint8_t fill, bool tamper) {
    std::vector<std::byte> buf(sizeof(FrameHeader) + n + kTagBytes);
    FrameHeader h{static_cast<uint32_t>(n), 7};
    std::memcpy(buf.data(), &h, sizeof h);
    std::memset(buf.data() + sizeof h, fill, n);
    std::span<std::byte> payload(buf.data() + sizeof h, n);
    Tag tag{};
    ASSERT_TRUE(tx->seal(payload, std::span(buf.data(), sizeof h), tag).ok());
    std::memcpy(buf.data() + sizeof h + n, tag.data(), kTagBytes);
    if (tamper) buf[sizeof h + n / 2] ^= std::byte{0x80};
    ASSERT_TRUE(write_all(fds_[0], buf.data(), buf.size(), d).ok());
  };
  // Receiver: reads into its receive buffer and opens in place.
  auto recv_frame = [&](std::vector<std::byte>& out) -> Status {
    FrameHeader h{};
    LATTICE_RETURN_IF_ERROR(read_all(fds_[1], &h, sizeof h, d));
    if (h.payload_bytes > (64u << 20)) return Corrupt("frame too large");
    out.resize(h.payload_bytes);
    Tag tag{};
    LATTICE_RETURN_IF_ERROR(read_all(fds_[1], out.data(), out.size(), d));
    LATTICE_RETURN_IF_ERROR(read_all(fds_[1], tag.data(), tag.size(), d));
    return rx->open_next(out, std::as_bytes(std::span(&h, 1)), tag);
  };

  std::vector<std::byte> got;
  for (size_t n : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
    std::thread s([&] { send_frame(n, static_cast<uint8_t>(n), false); });
    ASSERT_TRUE(recv_frame(got).ok());
    s.join();
    ASSERT_EQ(got.size(), n);
    EXPECT_EQ(got[n - 1], std::byte(static_cast<uint8_t>(n)));
  }
  std::thread s([&] { send_frame(4096, 0x11, true); });
  Status st = recv_frame(got);
  s.join();
  EXPECT_EQ(st.code(), ErrorCode::kAuthFailed);
  for (auto b : got) ASSERT_EQ(b, std::byte{0}) << "nothing from a tampered frame reaches the application";
  // The session is failed: even a genuine next frame is refused.
  std::thread s2([&] { send_frame(10, 0x22, false); });
  EXPECT_EQ(recv_frame(got).code(), ErrorCode::kAuthFailed);
  s2.join();
}

TEST_F(SocketSessionTest, NodeWithoutTheSecretIsRefusedOnBothEnds) {
  auto [si, sr] = join(ClusterSecret::generate(), ClusterSecret::generate());
  EXPECT_EQ(si.status().code(), ErrorCode::kAuthFailed) << si.status().to_string();
  EXPECT_EQ(sr.status().code(), ErrorCode::kAuthFailed) << sr.status().to_string();
}

}  // namespace
}  // namespace lattice::crypto
