#include "lattice/fabric/tcp/address.h"
#include "lattice/fabric/tcp/link_emu.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <charconv>
#include <cstring>
#include <tuple>

namespace lattice::fabric::tcp {

std::vector<std::byte> EndpointAddress::encode() const {
  std::vector<std::byte> out(kBlobBytes);
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  p[0] = kBlobVersion;
  p[1] = family;
  p[2] = static_cast<uint8_t>(port & 0xff);
  p[3] = static_cast<uint8_t>(port >> 8);
  std::memcpy(p + 4, ip.data(), 16);
  std::memcpy(p + 20, nonce.data(), 16);
  return out;
}

Result<EndpointAddress> EndpointAddress::decode(std::span<const std::byte> blob) {
  if (blob.size() != kBlobBytes)
    return InvalidArgument("tcp address blob has " + std::to_string(blob.size()) + " bytes, expected " +
                           std::to_string(kBlobBytes));
  const auto* p = reinterpret_cast<const uint8_t*>(blob.data());
  if (p[0] != kBlobVersion)
    return InvalidArgument("tcp address blob version " + std::to_string(p[0]) + " is not supported (want " +
                           std::to_string(kBlobVersion) + ")");
  EndpointAddress a;
  a.family = p[1];
  if (a.family != 4 && a.family != 6)
    return InvalidArgument("tcp address blob has unknown address family " + std::to_string(a.family));
  a.port = static_cast<uint16_t>(p[2] | (p[3] << 8));
  if (a.port == 0) return InvalidArgument("tcp address blob has port 0");
  std::memcpy(a.ip.data(), p + 4, 16);
  std::memcpy(a.nonce.data(), p + 20, 16);
  return a;
}

SockAddr EndpointAddress::sockaddr() const {
  SockAddr s;
  if (family == 4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&s.storage);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    std::memcpy(&in->sin_addr, ip.data(), 4);
    s.len = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&s.storage);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    std::memcpy(&in6->sin6_addr, ip.data(), 16);
    s.len = sizeof(sockaddr_in6);
  }
  return s;
}

std::string EndpointAddress::to_string() const { return sockaddr_to_string(sockaddr().get()); }

bool operator<(const EndpointAddress& a, const EndpointAddress& b) {
  return std::tie(a.family, a.ip, a.port, a.nonce) < std::tie(b.family, b.ip, b.port, b.nonce);
}

std::string sockaddr_to_string(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "<unknown address family " + std::to_string(sa->sa_family) + ">";
}

Result<ListenSpec> parse_listen_spec(std::string_view params) {
  ListenSpec spec;
  std::string_view hostport = params;
  if (auto q = params.find('?'); q != std::string_view::npos) {
    hostport = params.substr(0, q);
    std::string_view query = params.substr(q + 1);
    while (!query.empty()) {
      auto amp = query.find('&');
      std::string_view kv = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
      if (kv == "busy_poll=1" || kv == "busy_poll=true") {
        spec.busy_poll = true;
      } else if (kv == "busy_poll=0" || kv == "busy_poll=false") {
        spec.busy_poll = false;
      } else if (kv == "secure=1" || kv == "secure=true") {
        spec.secure = true;
      } else if (kv == "secure=0" || kv == "secure=false") {
        spec.secure = false;
      } else if (!kv.empty()) {
        LATTICE_ASSIGN_OR_RETURN(bool link, parse_link_option(kv, &spec.link));
        if (!link)
          return InvalidArgument("tcp URI: unknown option '" + std::string(kv) +
                                 "' (known: busy_poll=0|1, secure=0|1, latency_us=L, gbytes_s=R)");
      }
    }
  }
  std::string_view host, port_text;
  if (!hostport.empty() && hostport.front() == '[') {
    auto close = hostport.find(']');
    if (close == std::string_view::npos || close + 1 >= hostport.size() || hostport[close + 1] != ':')
      return InvalidArgument("tcp URI: expected [IPv6]:PORT, got '" + std::string(hostport) + "'");
    host = hostport.substr(1, close - 1);
    port_text = hostport.substr(close + 2);
  } else {
    auto colon = hostport.rfind(':');
    if (colon == std::string_view::npos)
      return InvalidArgument("tcp URI: expected HOST:PORT, got '" + std::string(hostport) + "'");
    host = hostport.substr(0, colon);
    port_text = hostport.substr(colon + 1);
  }
  unsigned port = 0;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || ptr != port_text.data() + port_text.size() || port > 65535 || port_text.empty())
    return InvalidArgument("tcp URI: bad port '" + std::string(port_text) + "'");
  spec.host = std::string(host);
  std::string h = host == "localhost" ? "127.0.0.1" : std::string(host);
  auto* in = reinterpret_cast<sockaddr_in*>(&spec.bind_addr.storage);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&spec.bind_addr.storage);
  if (inet_pton(AF_INET, h.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    spec.bind_addr.len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, h.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    spec.bind_addr.len = sizeof(sockaddr_in6);
  } else {
    return InvalidArgument("tcp URI: host '" + std::string(host) +
                           "' is not an IPv4 literal, a [IPv6] literal or localhost");
  }
  return spec;
}

EndpointAddress advertised_address(const SockAddr& bound) {
  EndpointAddress a;
  if (bound.family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&bound.storage);
    a.family = 4;
    a.port = ntohs(in->sin_port);
    in_addr addr = in->sin_addr;
    if (addr.s_addr == htonl(INADDR_ANY)) {
      addr.s_addr = htonl(INADDR_LOOPBACK);
      ifaddrs* ifs = nullptr;
      if (getifaddrs(&ifs) == 0) {
        for (ifaddrs* i = ifs; i; i = i->ifa_next) {
          if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
          if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
          addr = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
          break;
        }
        freeifaddrs(ifs);
      }
    }
    std::memcpy(a.ip.data(), &addr, 4);
  } else {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&bound.storage);
    a.family = 6;
    a.port = ntohs(in6->sin6_port);
    in6_addr addr = in6->sin6_addr;
    if (IN6_IS_ADDR_UNSPECIFIED(&addr)) {
      addr = in6addr_loopback;
      ifaddrs* ifs = nullptr;
      if (getifaddrs(&ifs) == 0) {
        for (ifaddrs* i = ifs; i; i = i->ifa_next) {
          if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET6) continue;
          if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
          const auto* cand = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
          if (IN6_IS_ADDR_LINKLOCAL(&cand->sin6_addr)) continue;  // needs a scope id we don't carry
          addr = cand->sin6_addr;
          break;
        }
        freeifaddrs(ifs);
      }
    }
    std::memcpy(a.ip.data(), &addr, 16);
  }
  return a;
}

}  // namespace lattice::fabric::tcp
