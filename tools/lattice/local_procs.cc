#include "local_procs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace lattice::cli {

// ---------------------------------------------------------------------------------------
// OobChannel

OobChannel::~OobChannel() { close(); }

OobChannel& OobChannel::operator=(OobChannel&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    peer_ = o.peer_;
    o.fd_ = -1;
  }
  return *this;
}

void OobChannel::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool OobChannel::readable() {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

Status OobChannel::write_all(const void* data, size_t n, Deadline deadline) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (deadline.expired()) return Timeout("out-of-band send timed out", peer_);
      pollfd pfd{fd_, POLLOUT, 0};
      ::poll(&pfd, 1, deadline.remaining_ms_for_poll());
      continue;
    }
    if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) return PeerLost("out-of-band channel closed by peer", peer_);
    return ErrnoError("out-of-band send", errno, peer_);
  }
  return Status::Ok();
}

Status OobChannel::read_all(void* data, size_t n, Deadline deadline) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pfd{fd_, POLLIN, 0};
    int r = ::poll(&pfd, 1, deadline.remaining_ms_for_poll());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("out-of-band poll", errno, peer_);
    if (r == 0) {
      if (deadline.expired()) return Timeout("out-of-band receive timed out", peer_);
      continue;
    }
    ssize_t got = ::recv(fd_, p, n, MSG_DONTWAIT);
    if (got > 0) {
      p += got;
      n -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return PeerLost("out-of-band channel closed by peer", peer_);
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    if (errno == ECONNRESET) return PeerLost("out-of-band channel reset by peer", peer_);
    return ErrnoError("out-of-band receive", errno, peer_);
  }
  return Status::Ok();
}

Status OobChannel::send(std::string_view message, Deadline deadline) {
  if (fd_ < 0) return Internal("out-of-band channel is closed");
  if (message.size() > kMaxOobMessage) return InvalidArgument("out-of-band message too long");
  uint8_t len[4];
  auto n = static_cast<uint32_t>(message.size());
  for (int i = 0; i < 4; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  LATTICE_RETURN_IF_ERROR(write_all(len, 4, deadline));
  return write_all(message.data(), message.size(), deadline);
}

Result<std::string> OobChannel::recv(Deadline deadline) {
  if (fd_ < 0) return Internal("out-of-band channel is closed");
  uint8_t len[4];
  LATTICE_RETURN_IF_ERROR(read_all(len, 4, deadline));
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(len[i]) << (8 * i);
  if (n > kMaxOobMessage)
    return Corrupt("out-of-band message of " + std::to_string(n) + " bytes exceeds the limit", peer_);
  std::string out(n, '\0');
  LATTICE_RETURN_IF_ERROR(read_all(out.data(), n, deadline));
  return out;
}

// ---------------------------------------------------------------------------------------
// TCP rendezvous

Result<OobChannel> oob_listen_accept(uint16_t port, Deadline deadline, std::string* peer_name) {
  int ls = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = ls >= 0;
  if (!v6) ls = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (ls < 0) return ErrnoError("rendezvous socket", errno);
  OobChannel guard(ls);  // closes the listener on every path
  int one = 1, zero = 0;
  ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    ::setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);  // accept IPv4 too
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(port);
    rc = ::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(port);
    rc = ::bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) return ErrnoError("rendezvous bind to port " + std::to_string(port), errno);
  if (::listen(ls, 1) != 0) return ErrnoError("rendezvous listen", errno);
  for (;;) {
    pollfd p{ls, POLLIN, 0};
    int r = ::poll(&p, 1, deadline.remaining_ms_for_poll());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoError("rendezvous poll", errno);
    if (r == 0) {
      if (deadline.expired()) return Timeout("no peer connected to port " + std::to_string(port) + " in time");
      continue;
    }
    sockaddr_storage ss{};
    socklen_t sl = sizeof ss;
    int fd = ::accept4(ls, reinterpret_cast<sockaddr*>(&ss), &sl, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)) continue;
    if (fd < 0) return ErrnoError("rendezvous accept", errno);
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (peer_name) {
      char host[NI_MAXHOST] = "?";
      ::getnameinfo(reinterpret_cast<sockaddr*>(&ss), sl, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
      *peer_name = host;
    }
    return OobChannel(fd);
  }
}

Result<OobChannel> oob_connect(const std::string& host_port, Deadline deadline) {
  // HOST:PORT, [V6]:PORT
  std::string host, port;
  if (!host_port.empty() && host_port[0] == '[') {
    auto close = host_port.find(']');
    if (close == std::string::npos || close + 1 >= host_port.size() || host_port[close + 1] != ':')
      return InvalidArgument("--peer '" + host_port + "': expected HOST:PORT or [IPV6]:PORT");
    host = host_port.substr(1, close - 1);
    port = host_port.substr(close + 2);
  } else {
    auto colon = host_port.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return InvalidArgument("--peer '" + host_port + "': expected HOST:PORT");
    host = host_port.substr(0, colon);
    port = host_port.substr(colon + 1);
  }
  if (port.empty() || port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 ||
      std::stoi(port) == 0 || std::stoi(port) > 65535)
    return InvalidArgument("--peer '" + host_port + "': bad port '" + port + "'");
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int e = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); e != 0)
    return InvalidArgument("--peer '" + host_port + "': cannot resolve host: " + ::gai_strerror(e));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
  Status last = Timeout("could not reach " + host_port + " in time");
  // The server may not be up yet: retry until the deadline.
  while (!deadline.expired()) {
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
      int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return OobChannel(fd);
      }
      last = ErrnoError("connect to " + host_port, errno);
      ::close(fd);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last.code() == ErrorCode::kTimeout ? last : Timeout(last.message() + " (gave up at the deadline)");
}

// ---------------------------------------------------------------------------------------
// LocalProcs

LocalProcs::~LocalProcs() { kill_all(); }

Result<OobChannel*> LocalProcs::spawn(int rank, const std::vector<std::string>& args) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return ErrnoError("socketpair", errno);
  // Build argv before fork: the child may only call async-signal-safe functions.
  std::vector<std::string> storage;
  storage.reserve(args.size() + 1);
  storage.emplace_back("lattice");
  for (const auto& a : args) storage.push_back(a);
  std::vector<char*> argv;
  for (auto& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    return ErrnoError("fork", e);
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
    // dup2 clears FD_CLOEXEC on the new descriptor; when sv[1] already is kChildOobFd, do it by hand.
    if (sv[1] == kChildOobFd) {
      ::fcntl(kChildOobFd, F_SETFD, 0);
    } else if (::dup2(sv[1], kChildOobFd) < 0) {
      ::_exit(127);
    }
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  ::close(sv[1]);
  auto child = std::make_unique<Child>(Child{rank, pid, OobChannel(sv[0])});
  child->oob.set_peer(rank);
  children_.push_back(std::move(child));
  return &children_.back()->oob;
}

OobChannel* LocalProcs::channel(int rank) {
  for (auto& c : children_)
    if (c->rank == rank) return &c->oob;
  return nullptr;
}

std::string LocalProcs::describe(const Child& c) {
  const int s = c.wait_status;
  std::string who = "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ")";
  if (WIFEXITED(s)) return who + " exited with status " + std::to_string(WEXITSTATUS(s));
  if (WIFSIGNALED(s)) return who + " killed by signal " + std::to_string(WTERMSIG(s)) + " (" + strsignal(WTERMSIG(s)) + ")";
  return who + " ended with wait status " + std::to_string(s);
}

std::string LocalProcs::exit_reason(int rank) {
  for (auto& c : children_) {
    if (c->rank != rank) continue;
    if (!c->reaped) {
      int st = 0;
      pid_t r = ::waitpid(c->pid, &st, WNOHANG);
      if (r != c->pid) return {};
      c->reaped = true;
      c->wait_status = st;
    }
    return describe(*c);
  }
  return {};
}

Status LocalProcs::wait_all(Deadline deadline) {
  Status first;
  for (;;) {
    bool running = false;
    for (auto& c : children_) {
      if (c->reaped) continue;
      int st = 0;
      pid_t r = ::waitpid(c->pid, &st, WNOHANG);
      if (r == c->pid) {
        c->reaped = true;
        c->wait_status = st;
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && first.ok())
          first = Status(ErrorCode::kPeerLost, describe(*c), c->rank);
      } else {
        running = true;
      }
    }
    if (!running) return first;
    if (deadline.expired()) {
      for (auto& c : children_) {
        if (c->reaped) continue;
        if (first.ok())
          first = Timeout("rank " + std::to_string(c->rank) + " (pid " + std::to_string(c->pid) +
                              ") still running at the deadline; killed",
                          c->rank);
      }
      kill_all();
      return first;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void LocalProcs::kill_all() {
  for (auto& c : children_) {
    if (c->reaped) continue;
    ::kill(c->pid, SIGKILL);
    int st = 0;
    while (::waitpid(c->pid, &st, 0) < 0 && errno == EINTR) {
    }
    c->reaped = true;
    c->wait_status = st;
  }
}

}  // namespace lattice::cli
