// Deadline-bounded reads, writes and connects on file descriptors: the one copy of the
// "loop until done, wait with poll, give up at the deadline" code that the control plane, the
// tcp provider's connection set-up and the launcher's out-of-band channels share.
//
// Contract, for every function here:
// - Blocks the calling thread until done or until `deadline`, never longer (poll(2) bounded by
//   the deadline's remaining time; a sleeping wait rounds up to the next millisecond). A deadline
//   that has already passed still tries once: what can be done without waiting is done.
// - Works on blocking and non-blocking descriptors alike, and never changes the descriptor's
//   flags. Sockets are read and written with MSG_DONTWAIT, so EAGAIN/EWOULDBLOCK only ever means
//   "wait for poll"; other descriptors (pipes, ttys) are polled before each read(2)/write(2),
//   and written at most PIPE_BUF bytes at a time so that a blocking pipe cannot block.
// - EINTR (from any of the calls) is retried; the deadline still holds.
// - SIGPIPE is never raised: sockets are written with send(MSG_NOSIGNAL); a write(2) to a
//   non-socket blocks SIGPIPE on the calling thread around the call and discards the signal a
//   broken pipe raised.
// - Errors: kTimeout at the deadline; kPeerLost when the other end has gone (EOF on a read,
//   EPIPE or ECONNRESET); kInvalidArgument for a bad descriptor (negative, or not open);
//   kIoError (with errno's text) for any other failure. Messages are short and generic
//   ("read: the peer closed the connection"); callers add who the peer is with
//   Status::with_context, or rebuild the Status with their peer rank.
// - Partial progress is not reported on failure: after an error the number of bytes already
//   moved is unknown to the caller and the stream should be treated as unusable.
// - Thread safety: these are free functions with no shared state; the usual rule for a
//   descriptor applies (one reader and one writer at a time).
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice {

// Writes exactly `n` bytes. kPeerLost on EPIPE/ECONNRESET, kTimeout at the deadline.
Status write_all(int fd, const void* data, size_t n, Deadline deadline);

// Reads exactly `n` bytes, assembling short reads. kPeerLost on EOF (also an EOF after some but
// not all of the bytes), kTimeout at the deadline.
Status read_all(int fd, void* data, size_t n, Deadline deadline);

// Reads what is there, waiting until at least one byte is: returns between 1 and `n` bytes
// (0 only when n == 0). EOF is kPeerLost (so 0 never means "closed"), kTimeout at the deadline.
Result<size_t> read_some(int fd, void* data, size_t n, Deadline deadline);

// Waits until a read (write) would not block: data, EOF or an error are all "readable", so the
// next read_some/read_all reports them. kTimeout at the deadline.
Status wait_readable(int fd, Deadline deadline);
Status wait_writable(int fd, Deadline deadline);

struct ConnectOptions {
  // Keep trying a refused (or reset) connect until the deadline, every `retry_interval`: for a
  // peer that may not be listening yet. Off: a refusal is returned at once (kIoError).
  bool retry_refused = false;
  Clock::duration retry_interval = std::chrono::milliseconds(10);
  // TCP_NODELAY on the connected socket (the control and data paths send small messages).
  bool no_delay = true;
};

// Resolves `host` (a name, an IPv4 or an IPv6 literal; not bracketed) and connects a TCP socket
// to `port` on the first address that answers, each attempt a non-blocking connect bounded by
// the deadline. Returns the connected socket, owned by the caller: non-blocking, close-on-exec,
// TCP_NODELAY unless options say otherwise. Errors: kInvalidArgument (empty host, port 0),
// kUnavailable (the name does not resolve), kTimeout (no answer before the deadline), kIoError
// (refused, unreachable: errno's text, from the last address tried).
Result<int> connect_tcp(const std::string& host, uint16_t port, Deadline deadline,
                        const ConnectOptions& options = {});

// The same for one socket address (AF_INET or AF_INET6), for callers that already hold one.
Result<int> connect_addr(const sockaddr* addr, socklen_t addr_len, Deadline deadline,
                         const ConnectOptions& options = {});

}  // namespace lattice
