// Addresses of the tcp provider: the "HOST:PORT?opts" part of a tcp:// URI, and the blob an
// endpoint hands to its peer (Endpoint::local_address) to be carried out of band.
//
// Address blob, version 1, 36 bytes:
//   0  u8  blob version (1)
//   1  u8  family (4 or 6)
//   2  u16 port (little-endian)
//   4  u8  ip[16] (IPv4: first 4 bytes, rest zero)
//  20  u8  nonce[16] (random per endpoint: names the endpoint on its provider's listener)
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::fabric::tcp {

inline constexpr uint8_t kBlobVersion = 1;
inline constexpr size_t kBlobBytes = 36;
using Nonce = std::array<uint8_t, 16>;

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  int family() const { return storage.ss_family; }
};

struct EndpointAddress {
  uint8_t family = 4;  // 4 or 6
  uint16_t port = 0;
  std::array<uint8_t, 16> ip{};
  Nonce nonce{};

  std::vector<std::byte> encode() const;
  static Result<EndpointAddress> decode(std::span<const std::byte> blob);
  SockAddr sockaddr() const;
  std::string to_string() const;  // "127.0.0.1:4000" / "[::1]:4000"
  // Total order deciding who dials: the smaller address dials the larger one.
  friend bool operator<(const EndpointAddress& a, const EndpointAddress& b);
  friend bool operator==(const EndpointAddress& a, const EndpointAddress& b) = default;
};

// "?latency_us=L&gbytes_s=R" of a tcp URI: the link to emulate (link_emu.h).
struct LinkShape {
  double latency_us = 0;  // one way, added to every byte; 0: none
  double gbytes_s = 0;    // rate of each direction; 0: unlimited
  bool on() const { return latency_us > 0 || gbytes_s > 0; }
};

struct ListenSpec {
  SockAddr bind_addr;        // where to listen
  std::string host;          // as written in the URI
  bool busy_poll = false;    // "?busy_poll=1"
  bool secure = false;       // "?secure=1": seal traffic with the secret from LATTICE_SECRET[_FILE]
  LinkShape link;            // "?latency_us=L&gbytes_s=R": an emulated link (link_emu.h)
};

// Parses "HOST:PORT[?busy_poll=0|1][&secure=0|1][&latency_us=L][&gbytes_s=R]" (HOST: IPv4 literal, [IPv6] literal, or "localhost").
Result<ListenSpec> parse_listen_spec(std::string_view params);

// Converts a bound socket address into the ip/port/family advertised in blobs; a wildcard
// address (0.0.0.0 / ::) is replaced by the first non-loopback address of an up interface
// (loopback if there is none).
EndpointAddress advertised_address(const SockAddr& bound);

std::string sockaddr_to_string(const sockaddr* sa);

}  // namespace lattice::fabric::tcp
