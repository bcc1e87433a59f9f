// Interfaces and cable probes (net.h). An end's interface is the one holding its address
// (getifaddrs); up = IFF_UP, running = IFF_RUNNING (carrier), MTU from SIOCGIFMTU.
#include "lattice/doctor/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lattice/core/deadline.h"

namespace lattice::doctor::detail {
namespace {

// Numeric address, or a name resolved once (the resolver's own timeouts bound it).
bool resolve(const std::string& addr, uint16_t port, sockaddr_storage* out, socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string p = std::to_string(port);
  if (::getaddrinfo(addr.c_str(), p.c_str(), &hints, &res) != 0 || res == nullptr) return false;
  std::memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return true;
}

bool same_ip(const sockaddr* a, const sockaddr_storage& b) {
  if (a == nullptr || a->sa_family != b.ss_family) return false;
  if (a->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
  if (a->sa_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

bool in_subnet(const sockaddr* addr, const sockaddr* mask, const sockaddr_storage& want) {
  if (addr == nullptr || mask == nullptr || addr->sa_family != AF_INET || want.ss_family != AF_INET) return false;
  const uint32_t a = reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr;
  const uint32_t m = reinterpret_cast<const sockaddr_in*>(mask)->sin_addr.s_addr;
  const uint32_t w = reinterpret_cast<const sockaddr_in*>(&want)->sin_addr.s_addr;
  return (a & m) == (w & m);
}

// Portable to macOS (no SOCK_CLOEXEC / accept4 / pipe2 there).
void set_flags(int fd, bool nonblock) {
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  if (nonblock) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int interface_mtu(const std::string& ifname) {
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return 0;
  ifreq req{};
  std::snprintf(req.ifr_name, sizeof req.ifr_name, "%s", ifname.c_str());
  int mtu = ::ioctl(fd, SIOCGIFMTU, &req) == 0 ? req.ifr_mtu : 0;
  ::close(fd);
  return mtu;
}

}  // namespace

std::string host_of(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  const size_t colon = address.find(':');
  if (colon != std::string::npos && address.find(':', colon + 1) == std::string::npos) return address.substr(0, colon);
  return address;
}

void look_at_interface(CableEnd* end) {
  sockaddr_storage want{};
  socklen_t len = 0;
  if (end->addr.empty() || !resolve(end->addr, 0, &want, &len)) {
    end->error = "cannot resolve address '" + end->addr + "'";
    return;
  }
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    end->error = std::string("getifaddrs: ") + std::strerror(errno);
    return;
  }
  // The interface holding the address; else a loopback interface whose subnet holds it (Linux
  // answers for all of 127.0.0.0/8 on lo, which local topologies use for their hosts).
  ifaddrs* found = nullptr;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next)
    if (same_ip(i->ifa_addr, want)) found = i;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next)
    if ((i->ifa_flags & IFF_LOOPBACK) && in_subnet(i->ifa_addr, i->ifa_netmask, want)) found = i;
  if (found) {
    end->ifname = found->ifa_name;
    end->up = (found->ifa_flags & IFF_UP) != 0;
    end->running = (found->ifa_flags & IFF_RUNNING) != 0;
  }
  ::freeifaddrs(list);
  if (end->ifname.empty()) {
    end->error = "no interface of this host holds " + end->addr;
    return;
  }
  end->mtu = interface_mtu(end->ifname);
}

std::string fix_link_up(const std::string& ifname) {
#ifdef __APPLE__
  return "sudo ifconfig " + ifname + " up   (and check the cable)";
#else
  return "sudo ip link set dev " + ifname + " up   (and check the cable)";
#endif
}

std::string fix_mtu(const std::string& ifname, int mtu) {
#ifdef __APPLE__
  return "sudo ifconfig " + ifname + " mtu " + std::to_string(mtu);
#else
  return "sudo ip link set dev " + ifname + " mtu " + std::to_string(mtu);
#endif
}

ProbeListener::~ProbeListener() {
  if (wake_[1] >= 0) {
    char c = 1;
    [[maybe_unused]] auto n = ::write(wake_[1], &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : fds_) ::close(fd);
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

Result<uint16_t> ProbeListener::listen_on(const std::string& addr) {
  sockaddr_storage sa{};
  socklen_t len = 0;
  if (!resolve(addr, 0, &sa, &len)) return Unavailable("cannot resolve '" + addr + "'");
  int fd = ::socket(sa.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  set_flags(fd, true);  // accept never blocks the thread (a connection may vanish after poll)
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0 || ::listen(fd, 16) != 0) {
    Status st = ErrnoError("bind " + addr, errno);
    ::close(fd);
    return st;
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &blen);
  fds_.push_back(fd);
  const uint16_t port = bound.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port)
                                                   : ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  return port;
}

void ProbeListener::start() {
  if (::pipe(wake_) != 0) return;
  set_flags(wake_[0], false);
  set_flags(wake_[1], false);
  thread_ = std::thread([this] {
    std::vector<pollfd> pfds;
    for (int fd : fds_) pfds.push_back({fd, POLLIN, 0});
    pfds.push_back({wake_[0], POLLIN, 0});
    for (;;) {
      // Woken by the destructor; the 1 s bound only re-checks nothing (no busy loop).
      if (::poll(pfds.data(), pfds.size(), 1000) < 0 && errno != EINTR) return;
      if (pfds.back().revents != 0) return;
      for (size_t i = 0; i + 1 < pfds.size(); ++i)
        if (pfds[i].revents & POLLIN) {
          int c = ::accept(pfds[i].fd, nullptr, nullptr);
          if (c >= 0) ::close(c);
        }
    }
  });
}

Probe probe_cable(const CableEnd& mine, const std::string& peer_addr, uint16_t peer_port,
                  std::chrono::milliseconds timeout) {
  Probe p;
  p.link = mine.link;
  sockaddr_storage src{}, dst{};
  socklen_t slen = 0, dlen = 0;
  if (!resolve(mine.addr, 0, &src, &slen) || !resolve(peer_addr, peer_port, &dst, &dlen)) {
    p.error = "cannot resolve " + mine.addr + " or " + peer_addr;
    return p;
  }
  int fd = ::socket(dst.ss_family, SOCK_STREAM, 0);
  if (fd < 0) {
    p.error = std::string("socket: ") + std::strerror(errno);
    return p;
  }
  set_flags(fd, true);
  const auto t0 = std::chrono::steady_clock::now();
  const Deadline deadline = Deadline::after(timeout);
  // Bound to this end's address, so the connect leaves through this cable's interface.
  if (::bind(fd, reinterpret_cast<sockaddr*>(&src), slen) != 0) {
    p.error = "bind " + mine.addr + ": " + std::strerror(errno);
  } else if (::connect(fd, reinterpret_cast<sockaddr*>(&dst), dlen) == 0) {
    p.ok = true;
  } else if (errno != EINPROGRESS) {
    p.error = "connect " + peer_addr + ": " + std::strerror(errno);
  } else {
    pollfd pfd{fd, POLLOUT, 0};
    int n = 0;
    do n = ::poll(&pfd, 1, deadline.remaining_ms_for_poll());
    while (n < 0 && errno == EINTR && !deadline.expired());
    if (n <= 0) {
      p.error = "connect " + peer_addr + ": no answer within " + std::to_string(timeout.count()) + " ms";
    } else {
      int err = 0;
      socklen_t elen = sizeof err;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
      if (err == 0) p.ok = true;
      else p.error = "connect " + peer_addr + ": " + std::strerror(err);
    }
  }
  p.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  return p;
}

}  // namespace lattice::doctor::detail
