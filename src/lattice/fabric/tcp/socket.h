// Sockets of the tcp provider's connection set-up: dialing a peer's listener, the
// deadline-bounded exchanges (Hello, handshake) before a socket carries frames, and the options
// every data socket gets. Everything blocking takes a Deadline (core/fd_io.h underneath) and
// names the peer in its errors. The listener side (accepting, reading a stranger's Hello without
// blocking) is the provider's background thread: provider.cc.
#pragma once

#include <cstddef>
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

}  // namespace lattice::fabric::tcp
