// The probe protocol of discover_probe.h: the server's threads and the two client calls.
#include "lattice/cluster/discover_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>

#include "lattice/core/fd_io.h"
#include "lattice/core/log.h"
#include "lattice/crypto/aead.h"
#include "lattice/crypto/handshake.h"

namespace lattice::cluster {
namespace {

enum Op : uint8_t { kEcho = 1, kStream = 2, kProbe = 3, kBye = 4 };
struct Header {
  uint8_t op;
  uint8_t pad0;
  uint16_t pad1;
  uint32_t a;
  uint64_t b;
};
static_assert(sizeof(Header) == 16);
struct ProbeReply {
  uint8_t ok;
  uint8_t pad[7];
  double latency_us;
  double gbps;
  uint64_t bytes;
  uint32_t msg_len;
  uint32_t pad2;
};
static_assert(sizeof(ProbeReply) == 40);
// Hosts are little-endian everywhere lattice runs (x86-64, arm64); the header says so.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__);

constexpr uint32_t kMaxEcho = 65536;
constexpr uint32_t kMaxChunk = 1u << 20;
constexpr uint32_t kStreamChunk = 256u << 10;

// One connection after the handshake: every message is a sealed frame, u32 length (the AD) |
// ciphertext | 16-byte tag, so probes cost what lattice's encrypted links cost.
struct Channel {
  int fd = -1;
  std::optional<crypto::SessionCipher> cipher;
  std::vector<std::byte> buf;
  ~Channel() {
    if (fd >= 0) ::close(fd);
  }

  Status send(const void* data, size_t n, Deadline d) {
    uint32_t len = static_cast<uint32_t>(n);
    buf.resize(n);
    if (n) std::memcpy(buf.data(), data, n);
    crypto::Tag tag{};
    auto ad = std::as_bytes(std::span(&len, 1));
    LATTICE_RETURN_IF_ERROR(cipher->seal(buf, ad, tag).status());
    LATTICE_RETURN_IF_ERROR(write_all(fd, &len, sizeof len, d));
    if (n) LATTICE_RETURN_IF_ERROR(write_all(fd, buf.data(), n, d));
    return write_all(fd, tag.data(), tag.size(), d);
  }
  // Receives one frame of at most `max` bytes into buf; returns its size.
  Result<size_t> recv(size_t max, Deadline d) {
    uint32_t len = 0;
    LATTICE_RETURN_IF_ERROR(read_all(fd, &len, sizeof len, d));
    if (len > max) return Corrupt("probe frame of " + std::to_string(len) + " bytes (at most " + std::to_string(max) + ")");
    buf.resize(len);
    crypto::Tag tag{};
    if (len) LATTICE_RETURN_IF_ERROR(read_all(fd, buf.data(), len, d));
    LATTICE_RETURN_IF_ERROR(read_all(fd, tag.data(), tag.size(), d));
    LATTICE_RETURN_IF_ERROR(cipher->open_next(buf, std::as_bytes(std::span(&len, 1)), tag));
    return static_cast<size_t>(len);
  }
  template <class T>
  Status recv_exact(T* out, Deadline d) {
    LATTICE_ASSIGN_OR_RETURN(size_t n, recv(sizeof(T), d));
    if (n != sizeof(T)) return Corrupt("probe message of " + std::to_string(n) + " bytes, expected " + std::to_string(sizeof(T)));
    std::memcpy(out, buf.data(), sizeof(T));
    return Status::Ok();
  }
};

Status handshake(Channel& ch, crypto::Handshake::Role role, const crypto::ClusterSecret& secret, Deadline deadline) {
  const int fd = ch.fd;
  crypto::HandshakeOptions ho;
  ho.context = kProbeContext;
  LATTICE_ASSIGN_OR_RETURN(crypto::Handshake hs, crypto::Handshake::create(role, secret, ho));
  if (role == crypto::Handshake::Role::kInitiator) {
    LATTICE_ASSIGN_OR_RETURN(auto m1, hs.start());
    LATTICE_RETURN_IF_ERROR(write_all(fd, m1.data(), m1.size(), deadline));
  }
  while (!hs.done()) {
    size_t want = hs.next_message_bytes();
    if (want == 0) return AuthFailed("probe handshake stalled");
    std::vector<uint8_t> in(want);
    LATTICE_RETURN_IF_ERROR(read_all(fd, in.data(), in.size(), deadline));
    auto out = hs.on_message(in);
    if (!out.ok()) {
      auto reject = hs.take_reject();
      if (!reject.empty()) (void)write_all(fd, reject.data(), reject.size(), Deadline::after(std::chrono::milliseconds(200)));
      return out.status();
    }
    if (!out->empty()) LATTICE_RETURN_IF_ERROR(write_all(fd, out->data(), out->size(), deadline));
  }
  LATTICE_ASSIGN_OR_RETURN(crypto::Session session, hs.session());
  LATTICE_ASSIGN_OR_RETURN(auto cipher, crypto::SessionCipher::create(session.cipher, session.keys));
  ch.cipher.emplace(std::move(cipher));
  return Status::Ok();
}

Status dial(Channel& ch, const crypto::ClusterSecret& secret, const std::string& address, uint16_t port, Deadline deadline) {
  const std::string who = address + ":" + std::to_string(port);
  auto fd = connect_tcp(address, port, deadline);
  if (!fd.ok()) return fd.status().with_context("probe " + who);
  ch.fd = *fd;
  return handshake(ch, crypto::Handshake::Role::kInitiator, secret, deadline).with_context("probe handshake with " + who);
}

Result<ProbeResult> measure(Channel& ch, const ProbeOptions& o, Deadline deadline) {
  ProbeResult r;
  std::vector<double> rtts;
  uint8_t payload[64] = {};
  for (int i = 0; i < std::max(1, o.pings); ++i) {
    Header h{kEcho, 0, 0, sizeof payload, 0};
    auto t0 = Clock::now();
    LATTICE_RETURN_IF_ERROR(ch.send(&h, sizeof h, deadline));
    LATTICE_RETURN_IF_ERROR(ch.send(payload, sizeof payload, deadline));
    LATTICE_ASSIGN_OR_RETURN(size_t n, ch.recv(kMaxEcho, deadline));
    if (n != sizeof payload) return Corrupt("probe echo of " + std::to_string(n) + " bytes");
    rtts.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  std::nth_element(rtts.begin(), rtts.begin() + static_cast<long>(rtts.size() / 2), rtts.end());
  r.latency_us = rtts[rtts.size() / 2] / 2;

  std::vector<uint8_t> chunk(kStreamChunk, 0x5a);
  Header h{kStream, 0, 0, 0, 0};
  auto t0 = Clock::now();
  auto stop = t0 + o.stream_time;
  LATTICE_RETURN_IF_ERROR(ch.send(&h, sizeof h, deadline));
  uint64_t sent = 0;
  while (Clock::now() < stop) {
    LATTICE_RETURN_IF_ERROR(ch.send(chunk.data(), chunk.size(), deadline));
    sent += chunk.size();
  }
  LATTICE_RETURN_IF_ERROR(ch.send(nullptr, 0, deadline));
  uint64_t got = 0;
  LATTICE_RETURN_IF_ERROR(ch.recv_exact(&got, deadline));
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (got != sent) return Corrupt("probe stream: sent " + std::to_string(sent) + " bytes, the peer counted " + std::to_string(got));
  r.bytes = sent;
  r.gbps = secs > 0 ? static_cast<double>(sent) * 8 / secs / 1e9 : 0;
  return r;
}

ProbeOptions options_from(uint64_t b) {
  ProbeOptions o;
  o.pings = static_cast<int>((b >> 16) & 0xffff);
  o.stream_time = std::chrono::milliseconds(std::min<uint64_t>(b >> 32, 10000));
  return o;
}

}  // namespace

Result<std::unique_ptr<ProbeServer>> ProbeServer::start(const crypto::ClusterSecret& secret, uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("probe socket", errno);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 64) != 0) {
    int e = errno;
    ::close(fd);
    return ErrnoError("probe server: bind/listen on port " + std::to_string(port), e);
  }
  socklen_t len = sizeof sa;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return std::unique_ptr<ProbeServer>(new ProbeServer(secret, fd, ntohs(sa.sin_port)));
}

ProbeServer::ProbeServer(const crypto::ClusterSecret& secret, int fd, uint16_t port)
    : secret_(secret), listen_fd_(fd), port_(port) {
  acceptor_ = std::thread([this] { accept_loop(); });
}

ProbeServer::~ProbeServer() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listen_fd_);
  std::vector<Conn> conns;
  {
    std::lock_guard lk(mu_);
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // their reads end at once
    conns.swap(conns_);
  }
  for (auto& c : conns) c.thread.join();
}

void ProbeServer::reap_finished() {
  std::vector<Conn> finished;
  {
    std::lock_guard lk(mu_);
    auto mid = std::partition(conns_.begin(), conns_.end(), [](const Conn& c) { return !c.done->load(); });
    std::move(mid, conns_.end(), std::back_inserter(finished));
    conns_.erase(mid, conns_.end());
  }
  for (auto& c : finished) c.thread.join();
}

void ProbeServer::accept_loop() {
  constexpr size_t kMaxConns = 32;
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    reap_finished();
    if (::poll(&p, 1, 100) <= 0) continue;  // looks at stop_ every 100 ms
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::lock_guard lk(mu_);
    if (open_fds_.size() >= kMaxConns) {
      ::close(fd);
      continue;
    }
    open_fds_.push_back(fd);
    auto done = std::make_shared<std::atomic<bool>>(false);
    conns_.push_back({std::thread([this, fd, done] {
                        serve(fd);
                        done->store(true);
                      }),
                      done});
  }
}

void ProbeServer::serve(int fd) {
  Channel ch;
  ch.fd = fd;
  auto done = [&](const Status& s) {
    if (!s.ok() && s.code() != ErrorCode::kPeerLost) LATTICE_LOG_INFO("probe connection: {}", s.to_string());
    std::lock_guard lk(mu_);
    open_fds_.erase(std::find(open_fds_.begin(), open_fds_.end(), fd));
    ::close(fd);
    ch.fd = -1;
  };
  if (Status s = handshake(ch, crypto::Handshake::Role::kResponder, secret_, Deadline::after(std::chrono::seconds(2))); !s.ok())
    return done(s);
  for (;;) {
    Header h{};
    if (Status s = ch.recv_exact(&h, Deadline::after(kProbeIdle)); !s.ok()) return done(s);
    Deadline d = Deadline::after(kProbeIdle);
    switch (h.op) {
      case kEcho: {
        auto n = ch.recv(kMaxEcho, d);
        if (!n.ok()) return done(n.status());
        std::vector<std::byte> echo(ch.buf.begin(), ch.buf.end());
        if (Status s = ch.send(echo.data(), echo.size(), d); !s.ok()) return done(s);
        break;
      }
      case kStream: {
        uint64_t total = 0;
        for (;;) {
          auto n = ch.recv(kMaxChunk, d);
          if (!n.ok()) return done(n.status());
          if (*n == 0) break;
          total += *n;
        }
        if (Status s = ch.send(&total, sizeof total, d); !s.ok()) return done(s);
        break;
      }
      case kProbe: {
        auto n = ch.recv(255, d);
        if (!n.ok()) return done(n.status());
        if (*n == 0) return done(Corrupt("probe request without an address"));
        std::string addr(reinterpret_cast<const char*>(ch.buf.data()), *n);
        auto r = probe_direct(secret_, addr, static_cast<uint16_t>(h.b & 0xffff), options_from(h.b));
        ProbeReply rep{};
        std::string msg;
        if (r.ok()) {
          rep.ok = 1;
          rep.latency_us = r->latency_us;
          rep.gbps = r->gbps;
          rep.bytes = r->bytes;
        } else {
          msg = r.status().to_string().substr(0, 1000);
        }
        rep.msg_len = static_cast<uint32_t>(msg.size());
        Status s = ch.send(&rep, sizeof rep, d);
        if (s.ok()) s = ch.send(msg.data(), msg.size(), d);
        if (!s.ok()) return done(s);
        break;
      }
      case kBye: return done(Status::Ok());
      default: return done(Corrupt("unknown probe op " + std::to_string(h.op)));
    }
  }
}

Result<ProbeResult> probe_direct(const crypto::ClusterSecret& secret, const std::string& address, uint16_t port,
                                 const ProbeOptions& o) {
  Deadline deadline = Deadline::after(o.timeout);
  Channel ch;
  LATTICE_RETURN_IF_ERROR(dial(ch, secret, address, port, deadline));
  auto r = measure(ch, o, deadline);
  if (!r.ok()) return r.status().with_context("probe " + address + ":" + std::to_string(port));
  Header bye{kBye, 0, 0, 0, 0};
  (void)ch.send(&bye, sizeof bye, deadline);
  return r;
}

Result<ProbeResult> probe_between(const crypto::ClusterSecret& secret, const std::string& via, uint16_t via_port,
                                  const std::string& address, uint16_t port, const ProbeOptions& o) {
  if (address.empty() || address.size() > 255) return InvalidArgument("probe address '" + address + "'");
  // The remote probe has its own bound (o.timeout); ours covers it and the request around it.
  Deadline deadline = Deadline::after(o.timeout + std::chrono::seconds(2));
  Channel ch;
  LATTICE_RETURN_IF_ERROR(dial(ch, secret, via, via_port, deadline));
  uint64_t ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(o.stream_time).count());
  Header h{kProbe, 0, 0, static_cast<uint32_t>(address.size()),
           uint64_t{port} | (uint64_t{static_cast<uint16_t>(o.pings)} << 16) | (ms << 32)};
  LATTICE_RETURN_IF_ERROR(ch.send(&h, sizeof h, deadline));
  LATTICE_RETURN_IF_ERROR(ch.send(address.data(), address.size(), deadline));
  ProbeReply rep{};
  LATTICE_RETURN_IF_ERROR(ch.recv_exact(&rep, deadline));
  LATTICE_ASSIGN_OR_RETURN(size_t n, ch.recv(4096, deadline));
  std::string msg(reinterpret_cast<const char*>(ch.buf.data()), n);
  Header bye{kBye, 0, 0, 0, 0};
  (void)ch.send(&bye, sizeof bye, deadline);
  if (!rep.ok) return Unavailable(via + " could not probe " + address + ":" + std::to_string(port) + ": " + msg);
  return ProbeResult{rep.latency_us, rep.gbps, rep.bytes};
}

}  // namespace lattice::cluster
