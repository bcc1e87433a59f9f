// The probe's wire (discover_probe.h documents it): the request header, the probe reply and
// one sealed TCP channel, shared by the TCP probe (discover_probe.cc) and the verbs probe
// (discover_probe_verbs.cc). Internal to the cluster layer.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include "lattice/cluster/discover_probe.h"
#include "lattice/core/deadline.h"
#include "lattice/core/fd_io.h"
#include "lattice/core/status.h"
#include "lattice/crypto/aead.h"
#include "lattice/crypto/secret.h"

namespace lattice::cluster::detail {

enum ProbeOp : uint8_t { kOpEcho = 1, kOpStream = 2, kOpProbe = 3, kOpBye = 4, kOpVerbsProbe = 5, kOpVerbsServe = 6 };
struct ProbeHeader {
  uint8_t op;
  uint8_t pad0;
  uint16_t pad1;
  uint32_t a;
  uint64_t b;
};
static_assert(sizeof(ProbeHeader) == 16);
struct ProbeReply {
  uint8_t ok;
  uint8_t pad[7];
  double latency_us;
  double gbps;
  uint64_t bytes;
  uint32_t msg_len;
  uint32_t pad2;
};
static_assert(sizeof(ProbeReply) == 40);
// Hosts are little-endian everywhere lattice runs (x86-64, arm64); the header says so.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);

inline constexpr size_t kMaxNameFrame = 255;    // an address or a device name
inline constexpr size_t kMaxBlobFrame = 4096;   // a fabric endpoint's address
inline constexpr size_t kMaxMessageFrame = 4096;

// One connection after the handshake: every message is a sealed frame, u32 length (the AD) |
// ciphertext | 16-byte tag, so probes cost what lattice's encrypted links cost.
struct ProbeChannel {
  int fd = -1;
  std::optional<crypto::SessionCipher> cipher;
  std::vector<std::byte> buf;
  ProbeChannel() = default;
  ProbeChannel(const ProbeChannel&) = delete;
  ProbeChannel& operator=(const ProbeChannel&) = delete;
  ~ProbeChannel() {
    if (fd >= 0) ::close(fd);
  }

  Status send(const void* data, size_t n, Deadline d) {
    uint32_t len = static_cast<uint32_t>(n);
    buf.resize(n);
    if (n) std::memcpy(buf.data(), data, n);
    crypto::Tag tag{};
    auto ad = std::as_bytes(std::span(&len, 1));
    LATTICE_RETURN_IF_ERROR(cipher->seal(buf, ad, tag).status());
    LATTICE_RETURN_IF_ERROR(write_all(fd, &len, sizeof len, d));
    if (n) LATTICE_RETURN_IF_ERROR(write_all(fd, buf.data(), n, d));
    return write_all(fd, tag.data(), tag.size(), d);
  }
  Status send_text(const std::string& s, Deadline d) { return send(s.data(), s.size(), d); }
  // Receives one frame of at most `max` bytes into buf; returns its size.
  Result<size_t> recv(size_t max, Deadline d) {
    uint32_t len = 0;
    LATTICE_RETURN_IF_ERROR(read_all(fd, &len, sizeof len, d));
    if (len > max) return Corrupt("probe frame of " + std::to_string(len) + " bytes (at most " + std::to_string(max) + ")");
    buf.resize(len);
    crypto::Tag tag{};
    if (len) LATTICE_RETURN_IF_ERROR(read_all(fd, buf.data(), len, d));
    LATTICE_RETURN_IF_ERROR(read_all(fd, tag.data(), tag.size(), d));
    LATTICE_RETURN_IF_ERROR(cipher->open_next(buf, std::as_bytes(std::span(&len, 1)), tag));
    return static_cast<size_t>(len);
  }
  Result<std::string> recv_text(size_t max, Deadline d) {
    LATTICE_ASSIGN_OR_RETURN(size_t n, recv(max, d));
    return std::string(reinterpret_cast<const char*>(buf.data()), n);
  }
  template <class T>
  Status recv_exact(T* out, Deadline d) {
    LATTICE_ASSIGN_OR_RETURN(size_t n, recv(sizeof(T), d));
    if (n != sizeof(T)) return Corrupt("probe message of " + std::to_string(n) + " bytes, expected " + std::to_string(sizeof(T)));
    std::memcpy(out, buf.data(), sizeof(T));
    return Status::Ok();
  }
};

// A ProbeReply and its message frame (empty when ok).
inline Status send_reply(ProbeChannel& ch, const ProbeReply& r, const std::string& msg, Deadline d) {
  ProbeReply rep = r;
  rep.msg_len = static_cast<uint32_t>(msg.size());
  LATTICE_RETURN_IF_ERROR(ch.send(&rep, sizeof rep, d));
  return ch.send(msg.data(), msg.size(), d);
}
inline Status send_failure(ProbeChannel& ch, const Status& why, Deadline d) {
  ProbeReply rep{};
  return send_reply(ch, rep, why.to_string().substr(0, 1000), d);
}
// Receives a ProbeReply and its message frame.
inline Status recv_reply(ProbeChannel& ch, ProbeReply* rep, std::string* msg, Deadline d) {
  LATTICE_RETURN_IF_ERROR(ch.recv_exact(rep, d));
  LATTICE_ASSIGN_OR_RETURN(*msg, ch.recv_text(kMaxMessageFrame, d));
  return Status::Ok();
}

// The verbs probe (discover_probe_verbs.cc). The initiator, on a channel dialed to the peer's
// probe server: opens `my_device`, asks the peer (op 6) to open `peer_device`, and measures
// the verbs link between them. The responder serves one op 6 whose header is `h`; it reports
// its own failures to the initiator over the channel, and returns a failure of the channel.
Result<ProbeResult> verbs_probe_initiator(ProbeChannel& ch, const crypto::ClusterSecret& secret,
                                          const std::string& my_device, const std::string& peer_device,
                                          const ProbeOptions& o, Deadline deadline);
Status verbs_probe_responder(ProbeChannel& ch, const crypto::ClusterSecret& secret, const ProbeHeader& h);

}  // namespace lattice::cluster::detail
