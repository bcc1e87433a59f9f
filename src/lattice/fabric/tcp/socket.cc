// The socket seam of the tcp endpoint: dialing, set-up I/O with deadlines, and the hand-over of
// sockets the provider's listener accepted (Conn::offer_incoming -> Conn::accept_from).
#include "lattice/fabric/tcp/socket.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "lattice/core/fd_io.h"
#include "lattice/core/log.h"
#include "lattice/fabric/tcp/endpoint.h"

namespace lattice::fabric::tcp {

namespace {

// The set-up exchanges (Hello, handshake) through core's deadline-bounded fd I/O, with the peer
// named in the error: "sending hello to peer 3 at ...: write: deadline passed".
Status about_peer(const Status& s, const std::string& what, int rank) {
  if (s.ok()) return s;
  return Status(s.code(), what + ": " + s.message(), rank);
}

}  // namespace

std::string describe_peer(const EndpointAddress& peer, int rank) {
  return "peer" + (rank == Status::kNoPeer ? std::string() : " " + std::to_string(rank)) + " at " + peer.to_string();
}

Result<int> dial_socket(const EndpointAddress& peer, Deadline deadline, const std::string& who, int rank) {
  SockAddr sa = peer.sockaddr();
  ConnectOptions co;
  co.retry_refused = true;  // the peer's provider may not be listening yet: retry until the deadline
  co.retry_interval = std::chrono::milliseconds(10);
  co.no_delay = false;      // tune_socket() once the link is up
  Result<int> dialed = connect_addr(sa.get(), sa.len, deadline, co);
  if (dialed.ok()) return dialed;
  if (dialed.status().code() == ErrorCode::kTimeout)
    return Timeout("connecting to " + who + ": no answer before the deadline", rank);
  return about_peer(dialed.status(), "connecting to " + who, rank);
}

Status send_setup(int fd, const void* data, size_t n, Deadline deadline, const std::string& who, int rank) {
  return about_peer(lattice::write_all(fd, data, n, deadline), "sending hello to " + who, rank);
}

Status read_setup(int fd, void* data, size_t n, Deadline deadline, const std::string& who, int rank) {
  Status s = lattice::read_all(fd, data, n, deadline);
  if (s.code() == ErrorCode::kPeerLost)
    return PeerLost(who + " closed the connection during the hello (unknown endpoint, or it rejected our "
                          "protocol version)",
                    rank);
  return about_peer(s, "waiting for the hello of " + who, rank);
}

void tune_socket(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Result<Listener> listen_socket(const SockAddr& bind, bool reuse_addr, const char* who) {
  Listener l;
  l.fd = ::socket(bind.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l.fd < 0) return ErrnoError(std::string(who) + ": socket()", errno);
  auto fail = [&](const std::string& what) {
    const int e = errno;
    ::close(l.fd);
    return ErrnoError(std::string(who) + ": " + what, e);
  };
  int one = 1;
  if (reuse_addr) ::setsockopt(l.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(l.fd, bind.get(), bind.len) < 0) return fail("bind to " + sockaddr_to_string(bind.get()));
  if (::listen(l.fd, 128) < 0) return fail("listen()");
  l.bound.len = sizeof l.bound.storage;
  if (::getsockname(l.fd, l.bound.get(), &l.bound.len) < 0) return fail("getsockname()");
  return l;
}

Result<ListenLoop> listen_loop(int listen_fd, const char* who) {
  ListenLoop loop;
  loop.epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (loop.epoll_fd < 0) return ErrnoError(std::string(who) + ": epoll_create1()", errno);
  loop.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (loop.wake_fd < 0) {
    const int e = errno;
    ::close(loop.epoll_fd);
    return ErrnoError(std::string(who) + ": eventfd()", e);
  }
  for (auto [fd, id] : {std::pair{loop.wake_fd, kWakeId}, std::pair{listen_fd, kListenId}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = id;
    if (::epoll_ctl(loop.epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
      const int e = errno;
      ::close(loop.epoll_fd);
      ::close(loop.wake_fd);
      return ErrnoError(std::string(who) + ": epoll_ctl()", e);
    }
  }
  return loop;
}

void wake(const ListenLoop& loop) {
  uint64_t one = 1;
  if (loop.wake_fd >= 0) (void)!::write(loop.wake_fd, &one, sizeof one);
}

// ---- sockets the listener hands over ---------------------------------------------------------

Status Conn::accept_from(const EndpointAddress& peer, Deadline deadline, int* out_fd) {
  std::unique_lock lock(connect_mu_);
  for (;;) {
    for (auto it = incoming_.begin(); it != incoming_.end();) {
      if (std::memcmp(it->from.data(), peer.nonce.data(), 16) == 0) {
        *out_fd = it->fd;
        incoming_.erase(it);
        connecting_done_ = true;
        for (auto& other : incoming_) ::close(other.fd);
        incoming_.clear();
        return Status::Ok();
      }
      LATTICE_LOG_WARN("tcp: dropping connection from {}: it is not the peer this endpoint connects to",
                       it->peer_text);
      ::close(it->fd);
      it = incoming_.erase(it);
    }
    if (deadline.expired()) {
      return Timeout("waiting for " + describe_peer(peer, options_.peer_rank) + " to connect: deadline passed", options_.peer_rank);
    }
    // Bounded slices: condition_variable::wait_until(time_point::max()) overflows in some libstdc++.
    connect_cv_.wait_for(lock, std::min<Clock::duration>(deadline.remaining(), std::chrono::milliseconds(100)));
  }
}

void Conn::offer_incoming(int fd, const Nonce& from, std::string peer_text) {
  std::lock_guard lock(connect_mu_);
  if (connecting_done_) {
    LATTICE_LOG_WARN("tcp: dropping connection from {}: endpoint already connected or closed", peer_text);
    ::close(fd);
    return;
  }
  incoming_.push_back({fd, from, std::move(peer_text)});
  connect_cv_.notify_all();
}

}  // namespace lattice::fabric::tcp
