#include "lattice/core/fd_io.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <memory>
#include <thread>

namespace lattice {
namespace {

// Waits for `events` on fd until the deadline. Ok when any of them (or HUP/ERR, which the next
// read or write reports) is ready.
Status wait_for(int fd, short events, Deadline deadline, const char* what) {
  if (fd < 0) return InvalidArgument(std::string(what) + ": bad file descriptor " + std::to_string(fd));
  for (;;) {
    pollfd pfd{fd, events, 0};
    int rc = ::poll(&pfd, 1, deadline.remaining_ms_for_poll());
    if (rc < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(what, errno);
    }
    if (rc > 0) {
      if (pfd.revents & POLLNVAL)
        return InvalidArgument(std::string(what) + ": file descriptor " + std::to_string(fd) + " is not open");
      return Status::Ok();
    }
    // poll rounds the wait to milliseconds: only the deadline itself ends the wait.
    if (deadline.expired()) return Timeout(std::string(what) + ": deadline passed");
  }
}

Status lost_or_errno(const char* what, int err) {
  if (err == EPIPE || err == ECONNRESET)
    return PeerLost(std::string(what) + ": the peer closed the connection (" +
                    (err == EPIPE ? "broken pipe" : "connection reset") + ")");
  if (err == EBADF) return InvalidArgument(std::string(what) + ": file descriptor is not open");
  return ErrnoError(what, err);
}

// Blocks SIGPIPE on this thread around a write(2) to a non-socket, and swallows the one the
// write raised. A SIGPIPE that was already pending stays pending (a new one merges into it).
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    if (!was_pending_) pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeGuard() {
    if (was_pending_) return;
    if (raised_) {
      timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  void raised() { raised_ = true; }

 private:
  sigset_t pipe_{};
  sigset_t old_{};
  bool was_pending_ = false;
  bool raised_ = false;
};

}  // namespace

Status wait_readable(int fd, Deadline deadline) { return wait_for(fd, POLLIN, deadline, "wait for readable"); }
Status wait_writable(int fd, Deadline deadline) { return wait_for(fd, POLLOUT, deadline, "wait for writable"); }

Status write_all(int fd, const void* data, size_t n, Deadline deadline) {
  if (fd < 0) return InvalidArgument("write: bad file descriptor " + std::to_string(fd));
  const auto* p = static_cast<const char*>(data);
  bool is_socket = true;
  while (n > 0) {
    ssize_t w;
    if (is_socket) {
      w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0 && errno == ENOTSOCK) {
        is_socket = false;
        continue;
      }
    } else {
      // Not a socket: it may be a blocking pipe. POLLOUT on a pipe means room for PIPE_BUF bytes.
      LATTICE_RETURN_IF_ERROR(wait_for(fd, POLLOUT, deadline, "write"));
      SigpipeGuard guard;
      w = ::write(fd, p, std::min<size_t>(n, PIPE_BUF));
      if (w < 0 && errno == EPIPE) guard.raised();
    }
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w == 0 || errno == EAGAIN || errno == EWOULDBLOCK) {
      if (deadline.expired()) return Timeout("write: deadline passed (the peer is not reading)");
      LATTICE_RETURN_IF_ERROR(wait_for(fd, POLLOUT, deadline, "write"));
      continue;
    }
    return lost_or_errno("write", errno);
  }
  return Status::Ok();
}

Result<size_t> read_some(int fd, void* data, size_t n, Deadline deadline) {
  if (fd < 0) return InvalidArgument("read: bad file descriptor " + std::to_string(fd));
  if (n == 0) return size_t{0};
  bool is_socket = true;
  for (;;) {
    ssize_t r;
    if (is_socket) {
      r = ::recv(fd, data, n, MSG_DONTWAIT);
      if (r < 0 && errno == ENOTSOCK) {
        is_socket = false;
        continue;
      }
    } else {
      // A pipe or tty may be blocking: read only once poll says the read would not block.
      LATTICE_RETURN_IF_ERROR(wait_for(fd, POLLIN, deadline, "read"));
      r = ::read(fd, data, n);
    }
    if (r > 0) return static_cast<size_t>(r);
    if (r == 0) return PeerLost("read: the peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (deadline.expired()) return Timeout("read: deadline passed");
      LATTICE_RETURN_IF_ERROR(wait_for(fd, POLLIN, deadline, "read"));
      continue;
    }
    return lost_or_errno("read", errno);
  }
}

Status read_all(int fd, void* data, size_t n, Deadline deadline) {
  auto* p = static_cast<char*>(data);
  const size_t total = n;
  while (n > 0) {
    Result<size_t> got = read_some(fd, p, n, deadline);
    if (!got.ok()) {
      Status s = got.status();
      if (total != n && (s.code() == ErrorCode::kPeerLost || s.code() == ErrorCode::kTimeout))
        return Status(s.code(),
                      s.message() + " after " + std::to_string(total - n) + " of " + std::to_string(total) + " bytes",
                      s.peer());
      return s;
    }
    p += *got;
    n -= *got;
  }
  return Status::Ok();
}

namespace {

// One socket, one connect bounded by the deadline. Returns the fd, or -1 with *err set to the
// connect's errno (0 with *status set when the wait itself failed: timeout, bad fd).
int connect_once(const sockaddr* addr, socklen_t addr_len, Deadline deadline, bool no_delay, int* err,
                 Status* status) {
  *err = 0;
  int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *status = ErrnoError("connect: socket()", errno);
    return -1;
  }
  if (::connect(fd, addr, addr_len) < 0) {
    *err = errno;
    if (*err == EINPROGRESS || *err == EINTR) {
      // EINTR: the connect goes on asynchronously, exactly as for EINPROGRESS.
      Status s = wait_for(fd, POLLOUT, deadline, "connect");
      if (!s.ok()) {
        ::close(fd);
        *err = 0;
        *status = s.code() == ErrorCode::kTimeout ? Timeout("connect: no answer before the deadline") : s;
        return -1;
      }
      socklen_t len = sizeof *err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, err, &len) < 0) *err = errno;
    }
  }
  if (*err != 0) {
    ::close(fd);
    *status = ErrnoError("connect", *err);
    return -1;
  }
  if (no_delay) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

bool is_refusal(int err) { return err == ECONNREFUSED || err == ECONNRESET || err == EAGAIN; }

void sleep_before_retry(const ConnectOptions& options, Deadline deadline) {
  std::this_thread::sleep_for(std::min<Clock::duration>(options.retry_interval, deadline.remaining()));
}

}  // namespace

Result<int> connect_addr(const sockaddr* addr, socklen_t addr_len, Deadline deadline,
                         const ConnectOptions& options) {
  if (addr == nullptr || (addr->sa_family != AF_INET && addr->sa_family != AF_INET6))
    return InvalidArgument("connect: not an IPv4 or IPv6 address");
  for (;;) {
    int err = 0;
    Status status;
    int fd = connect_once(addr, addr_len, deadline, options.no_delay, &err, &status);
    if (fd >= 0) return fd;
    if (options.retry_refused && is_refusal(err) && !deadline.expired()) {
      // The peer may not be listening yet.
      sleep_before_retry(options, deadline);
      continue;
    }
    return status;
  }
}

Result<int> connect_tcp(const std::string& host, uint16_t port, Deadline deadline, const ConnectOptions& options) {
  const std::string where = "connect to " + host + ":" + std::to_string(port);
  if (host.empty()) return InvalidArgument("connect: empty host name");
  if (port == 0) return InvalidArgument(where + ": port 0");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return Unavailable(where + ": cannot resolve '" + host + "': " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  Status last = Unavailable(where + ": no IPv4 or IPv6 address for '" + host + "'");
  for (;;) {
    // A round over every address, so that one address that refuses does not hide another.
    bool any_refused = false;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
      int err = 0;
      Status status;
      int fd = connect_once(ai->ai_addr, ai->ai_addrlen, deadline, options.no_delay, &err, &status);
      if (fd >= 0) return fd;
      // "connect: ..." -> "connect to HOST:PORT: ..."
      const std::string& m = status.message();
      last = Status(status.code(), m.rfind("connect", 0) == 0 ? where + m.substr(7) : where + ": " + m);
      any_refused |= is_refusal(err);
      if (status.code() == ErrorCode::kTimeout) return last;
    }
    if (!(options.retry_refused && any_refused) || deadline.expired()) return last;
    sleep_before_retry(options, deadline);
  }
}

}  // namespace lattice
