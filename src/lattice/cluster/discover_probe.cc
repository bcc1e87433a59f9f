// The probe protocol of discover_probe.h: the server's threads and the two client calls.
#include "lattice/cluster/discover_probe.h"

#include "lattice/cluster/discover_probe_channel.h"

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

using detail::ProbeChannel;
using Channel = detail::ProbeChannel;
using Header = detail::ProbeHeader;
using detail::ProbeReply;
constexpr uint8_t kEcho = detail::kOpEcho, kStream = detail::kOpStream, kProbe = detail::kOpProbe,
                  kBye = detail::kOpBye, kVerbsProbe = detail::kOpVerbsProbe, kVerbsServe = detail::kOpVerbsServe;

constexpr uint32_t kMaxEcho = 65536;
constexpr uint32_t kMaxChunk = 1u << 20;
constexpr uint32_t kStreamChunk = 256u << 10;

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

uint64_t pack_options(uint16_t port, const ProbeOptions& o) {
  uint64_t ms = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(o.stream_time).count());
  return uint64_t{port} | (uint64_t{static_cast<uint16_t>(o.pings)} << 16) | (ms << 32);
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
      case kProbe:
      case kVerbsProbe: {
        auto addr = ch.recv_text(detail::kMaxNameFrame, d);
        if (!addr.ok()) return done(addr.status());
        if (addr->empty()) return done(Corrupt("probe request without an address"));
        std::string my_device, peer_device;
        if (h.op == kVerbsProbe) {
          auto m = ch.recv_text(detail::kMaxNameFrame, d);
          if (!m.ok()) return done(m.status());
          auto p = ch.recv_text(detail::kMaxNameFrame, d);
          if (!p.ok()) return done(p.status());
          my_device = *m, peer_device = *p;
        }
        const auto port = static_cast<uint16_t>(h.b & 0xffff);
        auto r = h.op == kProbe ? probe_direct(secret_, *addr, port, options_from(h.b))
                                : probe_verbs_direct(secret_, *addr, port, my_device, peer_device, options_from(h.b));
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
        if (Status s = detail::send_reply(ch, rep, msg, d); !s.ok()) return done(s);
        break;
      }
      case kVerbsServe:
        if (Status s = detail::verbs_probe_responder(ch, secret_, h); !s.ok()) return done(s);
        break;
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

namespace {

// Asks the server at via:via_port to run `op` (kProbe, kVerbsProbe) towards address:port.
Result<ProbeResult> probe_via(const crypto::ClusterSecret& secret, uint8_t op, const std::string& via, uint16_t via_port,
                              const std::string& address, uint16_t port, const std::vector<std::string>& devices,
                              const ProbeOptions& o) {
  if (address.empty() || address.size() > detail::kMaxNameFrame) return InvalidArgument("probe address '" + address + "'");
  for (const auto& dev : devices)
    if (dev.empty() || dev.size() > detail::kMaxNameFrame) return InvalidArgument("probe device '" + dev + "'");
  // The remote probe has its own bound (o.timeout); ours covers it and the request around it.
  Deadline deadline = Deadline::after(o.timeout + std::chrono::seconds(2));
  Channel ch;
  LATTICE_RETURN_IF_ERROR(dial(ch, secret, via, via_port, deadline));
  Header h{op, 0, 0, static_cast<uint32_t>(address.size()), pack_options(port, o)};
  LATTICE_RETURN_IF_ERROR(ch.send(&h, sizeof h, deadline));
  LATTICE_RETURN_IF_ERROR(ch.send_text(address, deadline));
  for (const auto& dev : devices) LATTICE_RETURN_IF_ERROR(ch.send_text(dev, deadline));
  ProbeReply rep{};
  std::string msg;
  LATTICE_RETURN_IF_ERROR(detail::recv_reply(ch, &rep, &msg, deadline));
  Header bye{kBye, 0, 0, 0, 0};
  (void)ch.send(&bye, sizeof bye, deadline);
  if (!rep.ok) return Unavailable(via + " could not probe " + address + ":" + std::to_string(port) + ": " + msg);
  return ProbeResult{rep.latency_us, rep.gbps, rep.bytes};
}

}  // namespace

Result<ProbeResult> probe_between(const crypto::ClusterSecret& secret, const std::string& via, uint16_t via_port,
                                  const std::string& address, uint16_t port, const ProbeOptions& o) {
  return probe_via(secret, kProbe, via, via_port, address, port, {}, o);
}

Result<ProbeResult> probe_verbs_direct(const crypto::ClusterSecret& secret, const std::string& address, uint16_t port,
                                       const std::string& my_device, const std::string& peer_device,
                                       const ProbeOptions& o) {
  Deadline deadline = Deadline::after(o.timeout);
  Channel ch;
  LATTICE_RETURN_IF_ERROR(dial(ch, secret, address, port, deadline));
  auto r = detail::verbs_probe_initiator(ch, secret, my_device, peer_device, o, deadline);
  if (!r.ok())
    return r.status().with_context("verbs probe " + my_device + " -> " + peer_device + " at " + address + ":" +
                                   std::to_string(port));
  Header bye{kBye, 0, 0, 0, 0};
  (void)ch.send(&bye, sizeof bye, deadline);
  return r;
}

Result<ProbeResult> probe_verbs_between(const crypto::ClusterSecret& secret, const std::string& via, uint16_t via_port,
                                        const std::string& address, uint16_t port, const std::string& via_device,
                                        const std::string& peer_device, const ProbeOptions& o) {
  return probe_via(secret, kVerbsProbe, via, via_port, address, port, {via_device, peer_device}, o);
}

}  // namespace lattice::cluster
