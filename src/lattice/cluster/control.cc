#include "lattice/cluster/control.h"

#include "lattice/core/fd_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lattice/core/log.h"

namespace lattice::cluster {

using nlohmann::json;

namespace {

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

}  // namespace

ControlChannel::ControlChannel(int fd, std::optional<crypto::SessionCipher> cipher, int peer,
                               std::string peer_name)
    : fd_(fd), cipher_(std::move(cipher)), peer_(peer), peer_name_(std::move(peer_name)) {}

ControlChannel::~ControlChannel() {
  if (fd_ >= 0) ::close(fd_);
}

void ControlChannel::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Status ControlChannel::fail(Status s) {
  if (failed_.ok()) failed_ = s;
  return failed_;
}

Result<std::vector<uint8_t>> ControlChannel::seal_frame(const json& msg) {
  std::string text = msg.dump();
  if (text.empty() || text.size() > kMaxControlPayload)
    return InvalidArgument("control message of " + std::to_string(text.size()) + " bytes");
  size_t tag_bytes = cipher_ ? crypto::kTagBytes : 0;
  std::vector<uint8_t> frame(kControlHeaderBytes + text.size() + tag_bytes);
  put_u32(frame.data(), static_cast<uint32_t>(text.size()));
  std::memcpy(frame.data() + kControlHeaderBytes, text.data(), text.size());
  if (cipher_) {
    crypto::Tag tag;
    auto payload = std::as_writable_bytes(std::span(frame.data() + kControlHeaderBytes, text.size()));
    auto ad = std::as_bytes(std::span(frame.data(), kControlHeaderBytes));
    LATTICE_ASSIGN_OR_RETURN(uint64_t seq, cipher_->seal(payload, ad, tag));
    (void)seq;
    std::memcpy(frame.data() + kControlHeaderBytes + text.size(), tag.data(), tag.size());
  }
  return frame;
}

Status ControlChannel::send(const json& msg, Deadline deadline) {
  std::lock_guard lock(send_mu_);
  LATTICE_ASSIGN_OR_RETURN(auto frame, seal_frame(msg));
  Status s = write_all(fd_, frame.data(), frame.size(), deadline);
  return s.ok() ? s : Status(s.code(), s.message(), peer());
}

Result<std::optional<json>> ControlChannel::try_recv() {
  if (!failed_.ok()) return failed_;
  // Drain the socket into the buffer (bounded: one frame plus some).
  bool eof = false;
  for (;;) {
    uint8_t buf[16384];
    ssize_t r = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) {
      inbuf_.insert(inbuf_.end(), buf, buf + r);
      if (inbuf_.size() > 4 * kMaxControlPayload) break;
      continue;
    }
    if (r == 0) {
      if (inbuf_.empty()) return fail(PeerLost("control connection closed by " + peer_name_, peer()));
      eof = true;
      break;  // deliver what is buffered first; the next call sees EOF again
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return fail(PeerLost("control connection to " + peer_name_ + ": " + std::strerror(errno), peer()));
  }
  // A peer that hung up in the middle of a frame sends no more of it: lost, not "not yet"
  // (else a reader spins on the readable EOF until its deadline, then reports a timeout).
  auto truncated = [&] {
    return fail(PeerLost("control connection closed by " + peer_name_ + " in the middle of a frame (" +
                             std::to_string(inbuf_.size()) + " bytes of it arrived)",
                         peer()));
  };
  if (inbuf_.size() < kControlHeaderBytes) {
    if (eof) return truncated();
    return std::optional<json>{};
  }
  uint32_t len = get_u32(inbuf_.data());
  if (len == 0 || len > kMaxControlPayload)
    return fail(Corrupt("control frame from " + peer_name_ + " announces " + std::to_string(len) + " bytes", peer()));
  size_t tag_bytes = cipher_ ? crypto::kTagBytes : 0;
  size_t total = kControlHeaderBytes + len + tag_bytes;
  if (inbuf_.size() < total) {
    if (eof) return truncated();
    return std::optional<json>{};
  }
  if (cipher_) {
    crypto::Tag tag;
    std::memcpy(tag.data(), inbuf_.data() + kControlHeaderBytes + len, tag.size());
    auto payload = std::as_writable_bytes(std::span(inbuf_.data() + kControlHeaderBytes, len));
    auto ad = std::as_bytes(std::span(inbuf_.data(), kControlHeaderBytes));
    Status s = cipher_->open_next(payload, ad, tag);
    if (!s.ok())
      return fail(AuthFailed("control frame from " + peer_name_ + " failed authentication (tampered, replayed or reordered)", peer()));
  }
  std::string_view text(reinterpret_cast<const char*>(inbuf_.data() + kControlHeaderBytes), len);
  json msg = json::parse(text, nullptr, /*allow_exceptions=*/false);
  inbuf_.erase(inbuf_.begin(), inbuf_.begin() + static_cast<ptrdiff_t>(total));
  if (msg.is_discarded() || !msg.is_object() || !msg.contains("t") || !msg["t"].is_string())
    return fail(Corrupt("malformed control message from " + peer_name_, peer()));
  return std::optional<json>(std::move(msg));
}

Result<json> ControlChannel::recv(Deadline deadline) {
  for (;;) {
    LATTICE_ASSIGN_OR_RETURN(auto m, try_recv());
    if (m) return std::move(*m);
    if (deadline.expired()) return Timeout("no control message from " + peer_name_, peer());
    // Looks again at least every 100 ms (a timeout of the wait is not an error: the loop decides).
    (void)wait_readable(fd_, deadline.min(Deadline::after(std::chrono::milliseconds(100))));
  }
}

Result<std::unique_ptr<ControlChannel>> handshake_fd(int fd, crypto::Handshake::Role role,
                                                     const crypto::ClusterSecret& secret, bool insecure,
                                                     std::string peer_name, Deadline deadline) {
  crypto::HandshakeOptions ho;
  ho.context = kControlContext;
  ho.insecure = insecure;
  auto hs_or = crypto::Handshake::create(role, secret, ho);
  if (!hs_or.ok()) {
    ::close(fd);
    return hs_or.status();
  }
  crypto::Handshake hs = std::move(hs_or).value();
  auto run = [&]() -> Status {
    if (role == crypto::Handshake::Role::kInitiator) {
      LATTICE_ASSIGN_OR_RETURN(auto m1, hs.start());
      LATTICE_RETURN_IF_ERROR(write_all(fd, m1.data(), m1.size(), deadline));
    }
    while (!hs.done()) {
      size_t want = hs.next_message_bytes();
      if (want == 0) return AuthFailed("handshake stalled");
      std::vector<uint8_t> in(want);
      LATTICE_RETURN_IF_ERROR(read_all(fd, in.data(), in.size(), deadline));
      auto out = hs.on_message(in);
      if (!out.ok()) {
        auto reject = hs.take_reject();
        if (!reject.empty()) (void)write_all(fd, reject.data(), reject.size(), Deadline::after(200ms));
        return out.status();
      }
      if (!out->empty()) LATTICE_RETURN_IF_ERROR(write_all(fd, out->data(), out->size(), deadline));
    }
    return Status::Ok();
  };
  Status s = run();
  if (!s.ok()) {
    ::close(fd);
    return s.with_context("handshake with " + peer_name);
  }
  auto session = hs.session();
  if (!session.ok()) {
    ::close(fd);
    return session.status();
  }
  std::optional<crypto::SessionCipher> cipher;
  if (!session->insecure) {
    auto c = crypto::SessionCipher::create(session->cipher, session->keys);
    if (!c.ok()) {
      ::close(fd);
      return c.status();
    }
    cipher.emplace(std::move(c).value());
  }
  return std::make_unique<ControlChannel>(fd, std::move(cipher), Status::kNoPeer, std::move(peer_name));
}

Result<std::pair<std::string, uint16_t>> split_host_port(std::string_view address) {
  std::string host;
  std::string port_text;
  if (!address.empty() && address.front() == '[') {
    auto close = address.find(']');
    if (close == std::string_view::npos) return InvalidArgument("bad address '" + std::string(address) + "'");
    host = std::string(address.substr(1, close - 1));
    if (close + 1 < address.size()) {
      if (address[close + 1] != ':') return InvalidArgument("bad address '" + std::string(address) + "'");
      port_text = std::string(address.substr(close + 2));
    }
  } else {
    auto colon = address.rfind(':');
    if (colon != std::string_view::npos && address.find(':') == colon) {
      host = std::string(address.substr(0, colon));
      port_text = std::string(address.substr(colon + 1));
    } else {
      host = std::string(address);
    }
  }
  if (host.empty()) return InvalidArgument("address '" + std::string(address) + "' has no host");
  uint16_t port = kDefaultCoordinatorPort;
  if (!port_text.empty()) {
    char* end = nullptr;
    long v = std::strtol(port_text.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v > 65535)
      return InvalidArgument("address '" + std::string(address) + "' has a bad port");
    port = static_cast<uint16_t>(v);
  }
  return std::make_pair(host, port);
}

Result<int> dial_tcp(std::string_view address, Deadline deadline) {
  LATTICE_ASSIGN_OR_RETURN(auto hp, split_host_port(address));
  auto fd = connect_tcp(hp.first, hp.second, deadline);
  if (!fd.ok()) return fd.status().with_context("connect to " + std::string(address));
  return fd;
}

std::string socket_name(int fd, bool local) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  int r = local ? ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                : ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (r < 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "local";
}

std::string local_ip(int fd) {
  std::string name = socket_name(fd, true);
  if (name.empty() || name == "?" || name == "local") return "127.0.0.1";
  if (name.front() == '[') return name.substr(0, name.find(']') + 1);
  return name.substr(0, name.rfind(':'));
}

std::string to_hex(const std::vector<std::byte>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    auto v = static_cast<uint8_t>(b);
    s.push_back(digits[v >> 4]);
    s.push_back(digits[v & 15]);
  }
  return s;
}

Result<std::vector<std::byte>> from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return Corrupt("odd-length hex");
  auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::byte> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = nib(hex[2 * i]), lo = nib(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Corrupt("bad hex digit");
    out[i] = static_cast<std::byte>(hi << 4 | lo);
  }
  return out;
}

}  // namespace lattice::cluster
