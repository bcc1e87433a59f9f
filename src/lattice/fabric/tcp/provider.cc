#include "lattice/fabric/tcp/provider.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "lattice/core/log.h"
#include "lattice/core/random.h"
#include "lattice/fabric/providers.h"
#include "lattice/fabric/tcp/cq.h"
#include "lattice/fabric/tcp/endpoint.h"
#include "lattice/fabric/tcp/link_emu.h"
#include "lattice/fabric/tcp/socket.h"

namespace lattice::fabric::tcp {

namespace {
// How soon the background thread looks again at an endpoint it left to a caller. Not sooner:
// on a loaded 2-core machine every wake-up of this thread is a chance for the scheduler to
// switch a spinning caller out for a whole time slice (measured: waking every 1 ms turned a
// 4 us ping-pong median into 1 ms). The price: when a caller stops polling, one-sided requests
// that arrive meanwhile wait up to this long for the background thread to take over.
constexpr auto kRecheckActive = std::chrono::milliseconds(10);
constexpr auto kRecheckSleeper = std::chrono::milliseconds(20);
constexpr auto kMaxTick = std::chrono::seconds(1);
constexpr auto kMaxExtraSpin = std::chrono::milliseconds(1);
}  // namespace

Result<std::unique_ptr<TcpProvider>> TcpProvider::create(std::string_view params, const ProviderOptions& options) {
  LATTICE_ASSIGN_OR_RETURN(ListenSpec spec, parse_listen_spec(params));
  std::unique_ptr<TcpProvider> p(new TcpProvider());
  p->busy_poll_ = options.busy_poll || spec.busy_poll;
  if (options.secret) {
    p->secret_ = crypto::ClusterSecret::from_bytes(*options.secret);
  } else if (spec.secure) {
    auto secret = crypto::load_secret("");
    if (!secret.ok()) return secret.status().with_context("tcp URI asks for secure=1");
    p->secret_ = *secret;
  }
  p->caps_.max_msg = kMaxMessage;
  p->caps_.max_inline = kMaxInline;
  p->caps_.rma_write = p->caps_.rma_read = p->caps_.atomics = true;
  p->caps_.release_buffer = true;

  LATTICE_ASSIGN_OR_RETURN(Listener listener, listen_socket(spec.bind_addr, /*reuse_addr=*/true, "tcp provider"));
  p->listen_fd_ = listener.fd;
  p->listen_addr_ = advertised_address(listener.bound);
  if (spec.link.on()) {
    // An emulated link: peers dial the relay, which dials our listener (link_emu.h).
    LATTICE_ASSIGN_OR_RETURN(p->link_emu_, LinkEmulator::start(spec.bind_addr, p->listen_addr_.sockaddr(), spec.link));
    p->listen_addr_ = advertised_address(p->link_emu_->bound());
    // Waiters keep polling through the round trip the link adds (cq.h), up to a millisecond.
    const auto round_trip = std::chrono::nanoseconds(static_cast<int64_t>(spec.link.latency_us * 2e3));
    p->cq_spin_ += std::min<Clock::duration>(round_trip, kMaxExtraSpin);
  }
  LATTICE_ASSIGN_OR_RETURN(p->loop_, listen_loop(p->listen_fd_, "tcp provider"));
  TcpProvider* raw = p.get();
  p->thread_ = std::thread([raw] { raw->run(); });
  LATTICE_LOG_DEBUG("tcp provider listening on {}", p->listen_addr_.to_string());
  return p;
}

TcpProvider::~TcpProvider() {
  stop_.store(true);
  wake(loop_);
  if (thread_.joinable()) thread_.join();
  for (auto& [id, s] : strangers_) ::close(s.fd);
  active_.clear();
  for (int fd : {listen_fd_, loop_.epoll_fd, loop_.wake_fd})
    if (fd >= 0) ::close(fd);
}

Result<std::unique_ptr<MemoryRegion>> TcpProvider::allocate_memory(size_t n_bytes, uint32_t access) {
  constexpr size_t kPage = 4096;
  if (n_bytes > (size_t{1} << 46)) return InvalidArgument("allocate_memory: " + std::to_string(n_bytes) + " bytes");
  size_t rounded = std::max<size_t>(kPage, (n_bytes + kPage - 1) / kPage * kPage);
  void* mem = std::aligned_alloc(kPage, rounded);
  if (!mem) return ResourceExhausted("allocate_memory: out of memory for " + std::to_string(n_bytes) + " bytes");
  std::memset(mem, 0, rounded);
  return std::unique_ptr<MemoryRegion>(
      new TcpMemoryRegion(regions_, static_cast<std::byte*>(mem), n_bytes, access, mem));
}

Result<std::unique_ptr<MemoryRegion>> TcpProvider::register_memory(void* data, size_t n_bytes, uint32_t access) {
  if (data == nullptr && n_bytes > 0) return InvalidArgument("register_memory: null pointer");
  return std::unique_ptr<MemoryRegion>(
      new TcpMemoryRegion(regions_, static_cast<std::byte*>(data), n_bytes, access, nullptr));
}

Result<std::unique_ptr<CompletionQueue>> TcpProvider::create_cq(size_t depth) {
  LATTICE_ASSIGN_OR_RETURN(auto cq, TcpCompletionQueue::create(depth, busy_poll_, cq_spin_));
  return std::unique_ptr<CompletionQueue>(std::move(cq));
}

Result<std::unique_ptr<Endpoint>> TcpProvider::create_endpoint(CompletionQueue* send_cq, CompletionQueue* recv_cq,
                                                               const EndpointOptions& options) {
  auto* scq = dynamic_cast<TcpCompletionQueue*>(send_cq);
  auto* rcq = dynamic_cast<TcpCompletionQueue*>(recv_cq);
  if (!scq || !rcq) return InvalidArgument("create_endpoint: completion queues must come from this tcp provider");
  if (options.peer_timeout <= std::chrono::milliseconds(0))
    return InvalidArgument("create_endpoint: peer_timeout must be positive");
  EndpointAddress local = listen_addr_;
  secure_random_bytes(local.nonce.data(), local.nonce.size());
  std::shared_ptr<Conn> conn;
  {
    std::lock_guard lock(mu_);
    uint64_t id = next_id_++;
    conn = std::make_shared<Conn>(this, scq, rcq, options, local, id);
    conns_[id] = conn;
  }
  return std::unique_ptr<Endpoint>(new TcpEndpoint(this, conn, scq, rcq));
}

void TcpProvider::add_connected(const std::shared_ptr<Conn>& conn, int fd) {
  {
    std::lock_guard lock(mu_);
    active_[conn->id()] = conn;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.u64 = conn->id();
  ::epoll_ctl(loop_.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  wake(loop_);  // recompute the heartbeat tick
}

void TcpProvider::forget(const Conn* conn) {
  std::lock_guard lock(mu_);
  conns_.erase(conn->id());
  active_.erase(conn->id());
}

// ---- listener -------------------------------------------------------------------------------

void TcpProvider::accept_all() {
  for (;;) {
    SockAddr from;
    from.len = sizeof from.storage;
    int fd = ::accept4(listen_fd_, from.get(), &from.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) LATTICE_LOG_WARN("tcp listener: accept: {}", std::strerror(errno));
      return;
    }
    std::lock_guard lock(mu_);
    if (strangers_.size() >= kMaxStrangers) {
      auto oldest = std::min_element(strangers_.begin(), strangers_.end(), [](const auto& a, const auto& b) {
        return a.second.expires < b.second.expires;
      });
      drop_stranger(oldest->first, "too many connections waiting for their hello");
    }
    uint64_t id = next_id_++;
    Stranger s{fd, sockaddr_to_string(from.get()), Clock::now() + kHelloTimeout, {}, 0};
    strangers_.emplace(id, s);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u64 = id;
    ::epoll_ctl(loop_.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  }
}

void TcpProvider::drop_stranger(uint64_t id, const std::string& why) {
  auto it = strangers_.find(id);
  if (it == strangers_.end()) return;
  LATTICE_LOG_WARN("tcp listener on {}: dropping connection from {}: {}", listen_addr_.to_string(),
                   it->second.peer_text, why);
  ::epoll_ctl(loop_.epoll_fd, EPOLL_CTL_DEL, it->second.fd, nullptr);
  ::close(it->second.fd);
  strangers_.erase(it);
}

void TcpProvider::serve_stranger(uint64_t id) {
  auto it = strangers_.find(id);
  if (it == strangers_.end()) return;
  Stranger& s = it->second;
  auto* buf = reinterpret_cast<char*>(&s.hello);
  while (s.got < sizeof(Hello)) {
    ssize_t r = ::recv(s.fd, buf + s.got, sizeof(Hello) - s.got, MSG_DONTWAIT);
    if (r > 0) {
      s.got += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    drop_stranger(id, r == 0 ? "closed before completing its hello" : std::string("recv: ") + std::strerror(errno));
    return;
  }
  const Hello& h = s.hello;
  if (std::memcmp(h.magic, kHelloMagic, sizeof h.magic) != 0) {
    drop_stranger(id, "not a lattice tcp hello (bad magic)");
    return;
  }
  if (h.version != kWireVersion) {
    // Answer with our own hello so the dialer can report the mismatch clearly, then hang up.
    uint8_t zero[16] = {};
    Hello reply = make_hello(zero, h.from);
    (void)::send(s.fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT);
    drop_stranger(id, "speaks tcp protocol version " + std::to_string(h.version) + ", we speak " +
                          std::to_string(kWireVersion));
    return;
  }
  if (h.size != sizeof(Hello) || (h.flags & ~kHelloFlagSealed) != 0) {
    drop_stranger(id, "malformed hello (size " + std::to_string(h.size) + ", flags " + std::to_string(h.flags) + ")");
    return;
  }
  const bool sealed = secret_.has_value();
  if (((h.flags & kHelloFlagSealed) != 0) != sealed) {
    // Answer with our own hello so the dialer can report the mismatch clearly, then hang up.
    Hello reply = make_hello(h.to, h.from);
    reply.flags = sealed ? kHelloFlagSealed : 0;
    (void)::send(s.fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT);
    drop_stranger(id, sealed ? "it asks for plaintext, this provider requires encryption (cluster secret)"
                             : "it asks for encryption, this provider runs plaintext (no cluster secret)");
    return;
  }
  std::shared_ptr<Conn> target;
  for (auto& [cid, weak] : conns_) {
    auto c = weak.lock();
    if (c && std::memcmp(c->nonce().data(), h.to, 16) == 0) {
      target = std::move(c);
      break;
    }
  }
  if (!target) {
    drop_stranger(id, "its hello names no endpoint of this provider");
    return;
  }
  Hello reply = make_hello(target->nonce().data(), h.from);
  reply.flags = sealed ? kHelloFlagSealed : 0;
  ssize_t w = ::send(s.fd, &reply, sizeof reply, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w != static_cast<ssize_t>(sizeof reply)) {
    drop_stranger(id, "could not answer its hello");
    return;
  }
  int fd = s.fd;
  Nonce from;
  std::memcpy(from.data(), h.from, 16);
  std::string text = s.peer_text;
  ::epoll_ctl(loop_.epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  strangers_.erase(it);
  target->offer_incoming(fd, from, std::move(text));
}

// ---- background progress --------------------------------------------------------------------

Clock::time_point TcpProvider::housekeeping(Clock::time_point now) {
  std::vector<std::shared_ptr<Conn>> conns;
  Clock::duration tick = kMaxTick;
  {
    std::lock_guard lock(mu_);
    conns.reserve(active_.size());
    for (auto& [id, c] : active_) {
      conns.push_back(c);
      // Twice per heartbeat interval, so timer jitter never stretches the gap between two
      // heartbeats beyond peer_timeout / 2.
      tick = std::min(tick, c->heartbeat_interval() / 2);
    }
    std::vector<uint64_t> expired;
    for (auto& [id, s] : strangers_)
      if (s.expires <= now) expired.push_back(id);
    for (uint64_t id : expired)
      drop_stranger(id, "no valid hello within " + std::to_string(kHelloTimeout.count()) + " s");
  }
  for (auto& c : conns) c->tick();
  tick = std::max<Clock::duration>(tick, std::chrono::milliseconds(1));
  return now + tick;
}

namespace {
// The background thread takes an endpoint off its recheck list: progress it and re-arm its
// socket (callers may re-arm it too from now on). False: still busy, keep it parked.
bool unpark_and_progress(Conn& c, uint32_t events) {
  c.parked.store(false);
  if (c.progress_from_background(events)) return true;
  c.parked.store(true);
  return false;
}
}  // namespace

void TcpProvider::run() {
  ::prctl(PR_SET_NAME, "lat-tcp-prog");  // as top -H and perf name it
  constexpr int kMaxEvents = 64;
  epoll_event evs[kMaxEvents];
  Clock::time_point next_tick = housekeeping(Clock::now());
  while (!stop_.load()) {
    Clock::time_point wake_at = next_tick;
    for (auto& [id, when] : deferred_) wake_at = std::min(wake_at, when);
    {
      std::lock_guard lock(mu_);
      for (auto& [id, s] : strangers_) wake_at = std::min(wake_at, s.expires);
    }
    auto now = Clock::now();
    int timeout_ms =
        wake_at <= now ? 0 : static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count());
    int n = ::epoll_wait(loop_.epoll_fd, evs, kMaxEvents, timeout_ms);
    if (n < 0 && errno != EINTR) {
      LATTICE_LOG_ERROR("tcp provider: epoll_wait: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    now = Clock::now();
    for (int i = 0; i < n; ++i) {
      uint64_t id = evs[i].data.u64;
      if (id == kWakeId) {
        uint64_t v;
        (void)!::read(loop_.wake_fd, &v, sizeof v);
        next_tick = std::min(next_tick, now);
        continue;
      }
      if (id == kListenId) {
        accept_all();
        continue;
      }
      std::shared_ptr<Conn> c;
      {
        std::lock_guard lock(mu_);
        if (auto it = active_.find(id); it != active_.end()) {
          c = it->second;
        } else {
          serve_stranger(id);
          continue;
        }
      }
      if (c->caller_active()) {
        c->parked.store(true);
        deferred_.emplace_back(id, now + (c->sleepers.load() > 0 ? kRecheckSleeper : kRecheckActive));
      } else if (!unpark_and_progress(*c, evs[i].events)) {
        deferred_.emplace_back(id, now + kRecheckActive);
      }
    }
    // Endpoints left to a caller: take them back once the caller has gone quiet.
    for (auto it = deferred_.begin(); it != deferred_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      std::shared_ptr<Conn> c;
      {
        std::lock_guard lock(mu_);
        if (auto a = active_.find(it->first); a != active_.end()) c = a->second;
      }
      if (!c) {
        it = deferred_.erase(it);
      } else if (c->caller_active()) {
        it->second = now + (c->sleepers.load() > 0 ? kRecheckSleeper : kRecheckActive);
        ++it;
      } else if (unpark_and_progress(*c, 0)) {
        it = deferred_.erase(it);
      } else {
        it->second = now + kRecheckActive;
        ++it;
      }
    }
    if (now >= next_tick) next_tick = housekeeping(now);
  }
}

}  // namespace lattice::fabric::tcp

namespace lattice::fabric::detail {
Result<std::unique_ptr<Provider>> make_tcp_provider(std::string_view params, const ProviderOptions& options) {
  LATTICE_ASSIGN_OR_RETURN(auto p, tcp::TcpProvider::create(params, options));
  return std::unique_ptr<Provider>(std::move(p));
}
}  // namespace lattice::fabric::detail
