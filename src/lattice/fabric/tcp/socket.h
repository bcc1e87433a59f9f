// Sockets of the tcp provider's connection set-up: dialing a peer's listener, the
// deadline-bounded exchanges (Hello, handshake) before a socket carries frames, and the options
// every data socket gets. Everything blocking takes a Deadline (core/fd_io.h underneath) and
// names the peer in its errors. The listener side (accepting, reading a stranger's Hello without
// blocking) is the provider's background thread: provider.cc. The listening socket and the
// epoll set of a background thread (the provider's, the link emulator's) are made here too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"
#include "lattice/fabric/tcp/address.h"

namespace lattice::fabric::tcp {

// "peer 3 at 10.0.0.2:4000" ("peer at ..." without a rank): how errors name a peer.
std::string describe_peer(const EndpointAddress& peer, int rank);

// A TCP connection to the peer's provider listener: non-blocking, close-on-exec. A refusal is
// retried every 10 ms until the deadline (the peer's provider may not be listening yet).
// kTimeout when nothing answered in time.
Result<int> dial_socket(const EndpointAddress& peer, Deadline deadline, const std::string& who, int rank);

// Writes / reads exactly n bytes of a set-up exchange, blocking until the deadline. Errors carry
// `who` and the peer's rank; a connection closed during the read is kPeerLost with the likely
// reason (the peer did not know our endpoint, or rejected our protocol version).
Status send_setup(int fd, const void* data, size_t n, Deadline deadline, const std::string& who, int rank);
Status read_setup(int fd, void* data, size_t n, Deadline deadline, const std::string& who, int rank);

// A connected socket's options for the data path (TCP_NODELAY).
void tune_socket(int fd);

// A non-blocking, close-on-exec listening socket bound to `bind` and the address it got (the
// port chosen when `bind`'s is 0). Errors name `who` ("tcp provider", "tcp link emulator").
struct Listener {
  int fd = -1;
  SockAddr bound;
};
Result<Listener> listen_socket(const SockAddr& bind, bool reuse_addr, const char* who);

// The epoll set of a background thread: an eventfd that other threads write to wake it (its
// events carry kWakeId) and the listening socket (kListenId). The caller owns and closes both.
inline constexpr uint64_t kWakeId = 0, kListenId = 1;
struct ListenLoop {
  int epoll_fd = -1;
  int wake_fd = -1;
};
Result<ListenLoop> listen_loop(int listen_fd, const char* who);
// Wakes the thread sleeping on `loop` (any thread).
void wake(const ListenLoop& loop);

}  // namespace lattice::fabric::tcp
