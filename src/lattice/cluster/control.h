// The control plane's wire: TCP connections between each rank and the coordinator, each
// opened by the crypto handshake (crypto/handshake.h, context kControlContext) and then
// carrying JSON messages in frames sealed with the session's SessionCipher.
//
// Frame (both directions):
//   0  u32 payload length, little-endian (1 .. kMaxControlPayload); authenticated as AD
//   4  payload: UTF-8 JSON, encrypted in place
//   .. tag[16]  (absent in --insecure sessions, whose payload is plain text)
// Sequence numbers are not sent: the stream is ordered and both ends count, so a replayed,
// dropped or reordered frame fails to open (kAuthFailed), as does a flipped bit anywhere.
// After any failure the channel is failed for good (sticky).
//
// Thread safety: send() may be called from several threads (serialised inside); receiving
// (try_recv / recv) is for one thread at a time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"
#include "lattice/crypto/aead.h"
#include "lattice/crypto/handshake.h"
#include "lattice/crypto/secret.h"

namespace lattice::cluster {

inline constexpr const char* kControlContext = "lattice control v1";
inline constexpr size_t kMaxControlPayload = size_t{1} << 20;
inline constexpr size_t kControlHeaderBytes = 4;
inline constexpr uint16_t kDefaultCoordinatorPort = 7470;
// The reason the coordinator gives a rank that said bye; the views it broadcasts end with it,
// and a cluster tells a rank's leaving (info) from its loss (a warning) by it.
inline constexpr std::string_view kLeftTheCluster = "left the cluster";

class ControlChannel {
 public:
  // Takes ownership of `fd` (a connected stream socket). `cipher` empty: insecure session.
  ControlChannel(int fd, std::optional<crypto::SessionCipher> cipher, int peer, std::string peer_name);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  int fd() const { return fd_; }
  int peer() const { return peer_.load(); }
  void set_peer(int rank) { peer_.store(rank); }
  const std::string& peer_name() const { return peer_name_; }
  bool insecure() const { return !cipher_.has_value(); }

  // Seals and writes one message; blocks at most until `deadline` (control messages are
  // small, so this normally returns at once).
  Status send(const nlohmann::json& msg, Deadline deadline);
  // Raw frame bytes as send() would write them (for tests that replay or tamper frames).
  Result<std::vector<uint8_t>> seal_frame(const nlohmann::json& msg);
  // Reads whatever the socket holds without blocking; returns a message once a whole frame
  // arrived, nullopt if none yet. kPeerLost on EOF, kAuthFailed on a frame that fails to
  // open, kCorrupt on a bad length or unparsable JSON.
  Result<std::optional<nlohmann::json>> try_recv();
  // Blocks until a message arrives or the deadline passes (kTimeout).
  Result<nlohmann::json> recv(Deadline deadline);
  // Shuts the socket down (the peer sees EOF at once); idempotent, thread-safe.
  void shutdown();

 private:
  Status fail(Status s);
  int fd_;
  std::optional<crypto::SessionCipher> cipher_;
  std::atomic<int> peer_;
  std::string peer_name_;
  std::mutex send_mu_;
  std::vector<uint8_t> inbuf_;
  Status failed_;
};

// Runs the handshake over `fd` (blocking, bounded by `deadline`) and returns the channel.
// The initiator is the rank dialing the coordinator. A refused handshake is kAuthFailed
// (wrong or missing secret) or kInvalidArgument (--insecure on one side only).
Result<std::unique_ptr<ControlChannel>> handshake_fd(int fd, crypto::Handshake::Role role,
                                                     const crypto::ClusterSecret& secret, bool insecure,
                                                     std::string peer_name, Deadline deadline);

// "host:port", "[v6]:port", or "host" (kDefaultCoordinatorPort) -> host and port.
Result<std::pair<std::string, uint16_t>> split_host_port(std::string_view address);
// Dials `address` once (resolving names) within the deadline; returns the connected fd.
Result<int> dial_tcp(std::string_view address, Deadline deadline);
// "ip:port" of a socket's local or remote end.
std::string socket_name(int fd, bool local);
// The local IP (no port) of a connected socket: the address peers reach this host by.
std::string local_ip(int fd);

std::string to_hex(const std::vector<std::byte>& bytes);
Result<std::vector<std::byte>> from_hex(std::string_view hex);

}  // namespace lattice::cluster
