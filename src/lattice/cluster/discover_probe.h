// The link probe of discovery: every announcing node runs a ProbeServer (its port is the
// DNS-SD SRV port), and `lattice topo --discover` asks node A to measure its path to node B's
// address, as `ping` would: latency from small echoes, bandwidth from a timed stream.
//
// Wire (TCP). A connection first runs the join handshake (crypto/handshake.h) with context
// kProbeContext: only holders of the cluster secret get past it. Every message after it is one
// sealed frame (u32 length, the AEAD's associated data | ciphertext | 16-byte tag, with the
// session's cipher and sequence numbers), so a probe measures what lattice's encrypted links
// cost and nobody without the secret can forge a request or a figure. Messages, little-endian:
//   request header (16 bytes): u8 op | u8 0 | u16 0 | u32 a | u64 b
//   op 1 echo:   one frame of 1..65536 bytes follows; the server sends it back
//   op 2 stream: frames of at most 1 MiB follow, an empty one ends; the server answers
//                u64 bytes received
//   op 3 probe:  b = port | pings << 16 | stream ms << 32; a frame with the address (1..255
//                bytes) follows; the server probes it (probe_direct) and answers
//                u8 ok | 7 x 0 | f64 latency_us | f64 gbps | u64 bytes | u32 n | u32 0,
//                then a frame with the error message (empty when ok)
//   op 4 bye
//   op 5 verbs probe: as op 3, with two more frames after the address: the server's RDMA
//                device and the peer's; the server probes the peer over verbs
//                (probe_verbs_direct) and answers as for op 3
//   op 6 verbs serve: b = timeout ms; frames: this server's RDMA device, the initiator's
//                fabric endpoint address (at most 4096 bytes). The server opens the device
//                (verbs_device_uri, sealed with the cluster secret) and answers a reply as
//                op 3's (ok, or the error), then, when ok, a frame with its endpoint's address;
//                both connect. Then over verbs, each message u32 tag | payload: tag 4 (256
//                KiB, the warm-up) is sent back whole, tag 1 (64 bytes) is echoed back, tag 2
//                (256 KiB) is counted, tag 3 ends: the server acknowledges it over verbs (16
//                bytes: u32 3 | u32 0 | u64 bytes counted), then answers over TCP with a reply
//                whose `bytes` is what it counted (or the error)
// Every read and write has a deadline; a server connection idle for kProbeIdle is closed.
//
// Thread safety: ProbeServer runs its own threads; the free functions are independent calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"
#include "lattice/crypto/secret.h"

namespace lattice::cluster {

inline constexpr const char* kProbeContext = "lattice discover probe v1";
inline constexpr auto kProbeIdle = std::chrono::seconds(10);

struct ProbeOptions {
  int pings = 20;                                            // echoes of 64 bytes: latency is their median / 2
  Clock::duration stream_time = std::chrono::milliseconds(60);  // how long the bandwidth stream runs
  Clock::duration timeout = std::chrono::seconds(3);         // bound on one whole probe
};

struct ProbeResult {
  double latency_us = 0;  // one way: the median round trip / 2
  double gbps = 0;        // bytes streamed * 8 / (first byte sent .. receipt acknowledged)
  uint64_t bytes = 0;
};

class ProbeServer {
 public:
  // Listens on 0.0.0.0:`port` (0: any free port).
  static Result<std::unique_ptr<ProbeServer>> start(const crypto::ClusterSecret& secret, uint16_t port);
  ~ProbeServer();  // stops accepting, shuts open connections, joins every thread
  uint16_t port() const { return port_; }

 private:
  ProbeServer(const crypto::ClusterSecret& secret, int fd, uint16_t port);
  void accept_loop();
  void serve(int fd);

  crypto::ClusterSecret secret_;
  int listen_fd_;
  uint16_t port_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  struct Conn {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  void reap_finished();  // joins the connections that ended (a long-lived node serves many)
  std::vector<Conn> conns_;
  std::vector<int> open_fds_;
};

// Measures this process's path to the probe server at address:port.
Result<ProbeResult> probe_direct(const crypto::ClusterSecret& secret, const std::string& address, uint16_t port,
                                 const ProbeOptions& o);
// Asks the probe server at via:via_port to measure its path to address:port.
Result<ProbeResult> probe_between(const crypto::ClusterSecret& secret, const std::string& via, uint16_t via_port,
                                  const std::string& address, uint16_t port, const ProbeOptions& o);

// The same two over verbs: this process (or the server at via:via_port) opens its RDMA device
// `my_device` / `via_device`, the probe server at address:port opens `peer_device`, and the
// figures are those of the verbs link between the two (the TCP connection to address:port
// only sets it up and carries the count). Device names as topology files give them
// (verbs_device_uri: emu_tb5_0 and emu_rc_0 are the emulated devices). A device that does
// not open, a queue pair that does not connect, a lost message: kUnavailable (relayed) or the
// error itself, within o.timeout.
Result<ProbeResult> probe_verbs_direct(const crypto::ClusterSecret& secret, const std::string& address, uint16_t port,
                                       const std::string& my_device, const std::string& peer_device,
                                       const ProbeOptions& o);
Result<ProbeResult> probe_verbs_between(const crypto::ClusterSecret& secret, const std::string& via, uint16_t via_port,
                                        const std::string& address, uint16_t port, const std::string& via_device,
                                        const std::string& peer_device, const ProbeOptions& o);

}  // namespace lattice::cluster
