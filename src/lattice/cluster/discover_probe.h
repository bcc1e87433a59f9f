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

}  // namespace lattice::cluster
