#include "lattice/cluster/bootstrap.h"

#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "lattice/cluster/control.h"
#include "lattice/cluster/control_schema.h"
#include "lattice/core/fd_io.h"
#include "lattice/core/log.h"

namespace lattice::cluster {

using nlohmann::json;

namespace {

// A connection still in its handshake: driven without blocking by the coordinator's loop so
// a silent or slow stranger cannot stall heartbeats.
struct Pending {
  int fd = -1;
  std::string name;
  std::optional<crypto::Handshake> hs;
  std::vector<uint8_t> in;
  Clock::time_point started;
};

struct Conn {
  std::unique_ptr<ControlChannel> ch;
  std::string name;       // what it said in hello (host name), or its address
  int rank = -1;          // rank in the current epoch; -1: not (yet) a member
  int origin = -1;        // the rank it claimed in its hello (its place in the topology file)
  bool hello = false;
  bool joiner = false;
  bool dead = false;
  Clock::time_point last_seen;
};

}  // namespace

struct Coordinator::Impl {
  CoordinatorOptions opt;
  int listen_fd = -1;
  int wake_fd = -1;
  uint16_t port = 0;
  std::thread thread;

  mutable std::mutex mu;  // guards the state read by stats()
  bool formed = false;
  uint64_t epoch = 0;
  int world = 0;
  int refused = 0;
  std::vector<Conn*> members;  // by rank in the current epoch (nullptr: not joined yet)
  std::vector<bool> dead;      // by rank
  std::vector<std::unique_ptr<Conn>> conns;
  std::vector<Pending> pending;
  std::map<uint64_t, std::map<int, json>> ag;  // seq -> rank -> data (current epoch)
  std::set<int> shrink_req;
  Clock::time_point last_hb_sent{};
  bool stop = false;

  ~Impl() {
    for (auto& p : pending)
      if (p.fd >= 0) ::close(p.fd);
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void send_to(Conn* c, const json& m) {
    if (!c || c->dead) return;
    Status s = c->ch->send(m, Deadline::after(200ms));
    if (!s.ok()) LATTICE_LOG_DEBUG("coordinator: send to {} failed: {}", c->name, s.to_string());
  }

  std::vector<int> alive_ranks() const {
    std::vector<int> a;
    for (int r = 0; r < world; ++r)
      if (!dead[r] && members[r]) a.push_back(r);
    return a;
  }

  void broadcast(const json& m) {
    for (int r = 0; r < world; ++r)
      if (members[r] && !dead[r]) send_to(members[r], m);
  }

  void refuse(Conn* c, const std::string& reason) {
    LATTICE_LOG_WARN("coordinator: refused {}: {}", c->name, reason);
    ++refused;
    send_to(c, json{{"t", "refused"}, {"reason", reason}});
    c->dead = true;
    c->ch->shutdown();
  }

  void send_plans() {
    json names = json::array(), origins = json::array();
    for (int r = 0; r < world; ++r) {
      names.push_back(members[r]->name);
      origins.push_back(members[r]->origin);
    }
    for (int r = 0; r < world; ++r)
      send_to(members[r], json{{"t", "plan"}, {"epoch", epoch}, {"rank", r}, {"world", world}, {"members", names},
                               {"origins", origins}});
    LATTICE_LOG_INFO("coordinator: epoch {} formed with {} ranks", epoch, world);
  }

  // A member of the current epoch is gone: everyone alive hears it, in the same words.
  void declare_dead(Conn* c, const std::string& reason) {
    if (c->dead) return;
    // Tell it why (a stopped process reads this when it resumes), then cut it off.
    send_to(c, json{{"t", "refused"}, {"reason", "declared dead: " + reason}});
    c->dead = true;
    c->ch->shutdown();
    if (!formed || c->rank < 0) {
      // Before formation (or a waiting joiner) nothing depends on it: free its slot.
      if (c->rank >= 0 && c->rank < world && members[c->rank] == c) members[c->rank] = nullptr;
      LATTICE_LOG_INFO("coordinator: {} left before joining: {}", c->name, reason);
      return;
    }
    int r = c->rank;
    dead[r] = true;
    if (reason == kLeftTheCluster)
      LATTICE_LOG_INFO("coordinator: rank {} ({}) left epoch {}", r, c->name, epoch);
    else
      LATTICE_LOG_WARN("coordinator: rank {} ({}) declared dead in epoch {}: {}", r, c->name, epoch, reason);
    json alive = alive_ranks();
    broadcast(json{{"t", "view"}, {"epoch", epoch}, {"lost", json::array({r})}, {"alive", alive},
                   {"reason", "rank " + std::to_string(r) + " (" + c->name + "): " + reason}});
    for (auto& [seq, parts] : ag)
      broadcast(json{{"t", "ag_fail"}, {"epoch", epoch}, {"seq", seq},
                     {"reason", "rank " + std::to_string(r) + " was lost: " + reason}});
    ag.clear();
    maybe_shrink();
  }

  void maybe_shrink() {
    if (!formed || shrink_req.empty()) return;
    auto alive = alive_ranks();
    for (int r : alive)
      if (!shrink_req.count(r)) return;
    // Survivors in old rank order, then joiners in arrival order.
    std::vector<Conn*> next;
    for (int r : alive) next.push_back(members[r]);
    for (auto& c : conns)
      if (c->joiner && !c->dead) next.push_back(c.get());
    ++epoch;
    world = static_cast<int>(next.size());
    members = next;
    dead.assign(world, false);
    for (int r = 0; r < world; ++r) {
      members[r]->rank = r;
      members[r]->joiner = false;
      members[r]->ch->set_peer(r);
    }
    shrink_req.clear();
    ag.clear();
    send_plans();
  }

  void on_message(Conn* c, const json& m) {
    const std::string t = m.value("t", "");
    if (t == "hb") return;
    if (t == "hello") {
      if (c->hello) return refuse(c, "second hello");
      c->hello = true;
      c->name = m.value("name", c->name) + " (" + c->ch->peer_name() + ")";
      int rank = m.value("rank", -1);
      int w = m.value("world", 0);
      bool rejoin = m.value("rejoin", false);
      c->origin = rank;
      if (formed || rejoin) {
        c->joiner = true;
        LATTICE_LOG_WARN("coordinator: {} asks to join; it enters at the next epoch (after shrink())", c->name);
        send_to(c, json{{"t", "wait"}});
        broadcast(json{{"t", "join_request"}, {"name", c->name}});
        return;
      }
      if (w != world) return refuse(c, "world size " + std::to_string(w) + " differs from the cluster's " + std::to_string(world));
      if (rank < 0 || rank >= world) return refuse(c, "rank " + std::to_string(rank) + " out of range");
      if (members[rank] && !members[rank]->dead)
        return refuse(c, "rank " + std::to_string(rank) + " already joined from " + members[rank]->name);
      members[rank] = c;
      c->rank = rank;
      c->ch->set_peer(rank);
      if (std::all_of(members.begin(), members.end(), [](Conn* x) { return x != nullptr; })) {
        formed = true;
        epoch = 0;
        send_plans();
      }
      return;
    }
    if (!formed || c->rank < 0) return;  // joiners only wait
    if (t == "ag") {
      uint64_t e = m.value("epoch", uint64_t{0}), seq = m.value("seq", uint64_t{0});
      if (e != epoch) {
        send_to(c, json{{"t", "ag_fail"}, {"epoch", e}, {"seq", seq}, {"reason", "stale epoch"}});
        return;
      }
      auto alive = alive_ranks();
      if (static_cast<int>(alive.size()) != world) {
        std::string lost;
        for (int r = 0; r < world; ++r)
          if (dead[r]) lost += (lost.empty() ? "" : ", ") + std::to_string(r);
        send_to(c, json{{"t", "ag_fail"}, {"epoch", e}, {"seq", seq}, {"reason", "rank(s) " + lost + " lost; shrink() first"}});
        return;
      }
      auto& parts = ag[seq];
      parts[c->rank] = m.contains("data") ? m["data"] : json();
      if (static_cast<int>(parts.size()) == world) {
        json data = json::array();
        for (auto& [r, d] : parts) data.push_back(d);
        broadcast(json{{"t", "ag_done"}, {"epoch", epoch}, {"seq", seq}, {"data", data}});
        ag.erase(seq);
      }
      return;
    }
    if (t == "shrink") {
      shrink_req.insert(c->rank);
      maybe_shrink();
      return;
    }
    if (t == "bye") {
      declare_dead(c, std::string(kLeftTheCluster));
      return;
    }
    LATTICE_LOG_DEBUG("coordinator: ignoring '{}' from {}", t, c->name);
  }

  // Pre-authentication state is bounded: at most max_pending connections in their
  // handshake (more wait in the kernel's backlog, unaccepted), and when accept() runs out of
  // descriptors or memory the listener is left alone for kAcceptBackoff (a readable listener
  // that cannot be accepted from would otherwise wake poll() at once, for ever).
  static constexpr size_t kMaxPendingHandshakes = 64;
  // Also at most a quarter of the process's descriptor limit, so strangers cannot starve the
  // rest of the process (the rank hosting us needs descriptors for its own links).
  size_t max_pending = kMaxPendingHandshakes;
  static constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
  Clock::time_point accept_paused_until{};
  Clock::time_point last_accept_warning{};

  bool accepting(Clock::time_point now) const {
    return pending.size() < max_pending && now >= accept_paused_until;
  }

  void accept_new() {
    while (pending.size() < max_pending) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          const auto now = Clock::now();
          accept_paused_until = now + kAcceptBackoff;
          if (now - last_accept_warning > std::chrono::seconds(10)) {
            last_accept_warning = now;
            LATTICE_LOG_WARN("coordinator: cannot accept connections ({}); retrying every {} ms ({} handshakes pending, "
                             "{} members)",
                             std::strerror(errno), kAcceptBackoff.count(), pending.size(), conns.size());
          }
        }
        return;
      }
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      crypto::HandshakeOptions ho;
      ho.context = kControlContext;
      ho.insecure = opt.insecure;
      auto hs = crypto::Handshake::create(crypto::Handshake::Role::kResponder, opt.secret, ho);
      if (!hs.ok()) {
        ::close(fd);
        continue;
      }
      Pending p;
      p.fd = fd;
      p.name = socket_name(fd, false);
      p.hs.emplace(std::move(hs).value());
      p.started = Clock::now();
      pending.push_back(std::move(p));
    }
  }

  // Returns false when the pending connection is finished (promoted or refused).
  bool drive_pending(Pending& p) {
    for (;;) {
      size_t want = p.hs->next_message_bytes();
      if (p.hs->done()) break;
      if (want == 0) return refuse_pending(p, AuthFailed("handshake stalled"));
      uint8_t buf[256];
      size_t need = want - p.in.size();
      ssize_t r = ::recv(p.fd, buf, std::min(need, sizeof(buf)), MSG_DONTWAIT);
      if (r == 0) return refuse_pending(p, PeerLost("closed during the handshake"));
      if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
        return refuse_pending(p, ErrnoError("read", errno));
      }
      p.in.insert(p.in.end(), buf, buf + r);
      if (p.in.size() < want) continue;
      auto out = p.hs->on_message(p.in);
      p.in.clear();
      if (!out.ok()) {
        auto reject = p.hs->take_reject();
        if (!reject.empty()) (void)write_all(p.fd, reject.data(), reject.size(), Deadline::after(100ms));
        return refuse_pending(p, out.status());
      }
      if (!out->empty() && !write_all(p.fd, out->data(), out->size(), Deadline::after(200ms)).ok())
        return refuse_pending(p, PeerLost("closed during the handshake"));
    }
    auto session = p.hs->session();
    if (!session.ok()) return refuse_pending(p, session.status());
    std::optional<crypto::SessionCipher> cipher;
    if (!session->insecure) {
      auto cph = crypto::SessionCipher::create(session->cipher, session->keys);
      if (!cph.ok()) return refuse_pending(p, cph.status());
      cipher.emplace(std::move(cph).value());
    }
    auto c = std::make_unique<Conn>();
    c->name = p.name;
    c->ch = std::make_unique<ControlChannel>(p.fd, std::move(cipher), Status::kNoPeer, p.name);
    c->last_seen = Clock::now();
    LATTICE_LOG_INFO("coordinator: {} authenticated (session {})", p.name, session->session_id_hex());
    p.fd = -1;
    conns.push_back(std::move(c));
    return false;
  }

  bool refuse_pending(Pending& p, const Status& why) {
    if (why.code() == ErrorCode::kAuthFailed)
      LATTICE_LOG_WARN("coordinator: refused {}: authentication failed ({}); it does not hold this cluster's secret "
                       "(ours has fingerprint {})",
                       p.name, why.message(), opt.secret.fingerprint());
    else
      LATTICE_LOG_WARN("coordinator: refused {}: {}", p.name, why.to_string());
    ++refused;
    ::close(p.fd);
    p.fd = -1;
    return false;
  }

  void loop() {
    Clock::time_point last_check{};  // the members' silence was last judged then
    while (true) {
      std::vector<pollfd> fds;
      fds.push_back({wake_fd, POLLIN, 0});
      const auto before = Clock::now();
      const bool listening = accepting(before);
      fds.push_back({listen_fd, static_cast<short>(listening ? POLLIN : 0), 0});
      for (auto& p : pending) fds.push_back({p.fd, POLLIN, 0});
      size_t conn_base = fds.size();
      // A dead connection (kept while the epoch refers to it) is shut down: its hang-up would
      // wake poll() at once, for ever, so it is left out (a negative fd is skipped).
      for (auto& c : conns) fds.push_back({c->dead ? -1 : c->ch->fd(), POLLIN, 0});
      int timeout_ms = static_cast<int>(std::max<int64_t>(1, opt.heartbeat_interval.count() / 2));
      if (!listening && accept_paused_until > before)
        timeout_ms = std::min<int>(timeout_ms, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(
                                                   accept_paused_until - before).count()));
      ::poll(fds.data(), fds.size(), std::max(timeout_ms, 1));
      std::lock_guard lock(mu);
      if (stop) return;
      if (listening && fds[1].revents) accept_new();
      auto now = Clock::now();
      // Handshakes in progress (fds for them are at [2, conn_base)).
      for (size_t i = 0; i < pending.size(); ++i) {
        auto& p = pending[i];
        bool ready = i + 2 < conn_base && fds[i + 2].revents;
        if (p.fd >= 0 && ready) drive_pending(p);
        if (p.fd >= 0 && now - p.started > opt.handshake_timeout)
          refuse_pending(p, Timeout("no complete handshake within " + std::to_string(opt.handshake_timeout.count()) + " ms"));
      }
      std::erase_if(pending, [](const Pending& p) { return p.fd < 0; });
      for (size_t i = 0; i < conns.size() && conn_base + i < fds.size(); ++i) {
        Conn* c = conns[i].get();
        if (c->dead || !fds[conn_base + i].revents) continue;
        for (;;) {
          auto m = c->ch->try_recv();
          if (!m.ok()) {
            Status s = m.status();
            std::string why = s.code() == ErrorCode::kPeerLost ? "connection closed (process died or link reset)"
                                                                 : s.message();
            declare_dead(c, why);
            break;
          }
          if (!*m) break;
          c->last_seen = Clock::now();
          if (Status bad = validate_from_member(**m); !bad.ok()) {
            // Authenticated, so another lattice version: it cannot take part.
            LATTICE_LOG_WARN("coordinator: refused a message from {}: {}", c->name, bad.message());
            if (c->hello && formed && c->rank >= 0)
              declare_dead(c, "sent a message the coordinator cannot read (" + bad.message() + ")");
            else
              refuse(c, bad.message());
            break;
          }
          on_message(c, **m);
          if (c->dead) break;
        }
      }
      now = Clock::now();
      // This thread did not run for a while (the whole job stopped and resumed, a laptop asleep,
      // a VM descheduled): the members' silence then is not theirs (unseen_stop, deadline.h).
      // The checks come every poll timeout.
      if (last_check != Clock::time_point{})
        if (auto unseen = unseen_stop(now - last_check, std::chrono::milliseconds(std::max(timeout_ms, 1)),
                                      opt.failure_timeout);
            unseen > Clock::duration::zero())
          for (auto& c : conns) c->last_seen += unseen;
      last_check = now;
      for (auto& c : conns) {
        if (c->dead) continue;
        auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - c->last_seen);
        if (silent > opt.failure_timeout)
          declare_dead(c.get(), "silent for " + std::to_string(silent.count()) + " ms (stopped, hung or link cut)");
      }
      if (now - last_hb_sent >= opt.heartbeat_interval) {
        last_hb_sent = now;
        for (auto& c : conns)
          if (!c->dead) send_to(c.get(), json{{"t", "hb"}});
      }
      // Dead connections are kept only while the current epoch refers to them.
      std::erase_if(conns, [&](const std::unique_ptr<Conn>& c) {
        if (!c->dead) return false;
        return std::find(members.begin(), members.end(), c.get()) == members.end();
      });
    }
  }
};

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Coordinator::~Coordinator() {
  {
    std::lock_guard lock(impl_->mu);
    impl_->stop = true;
  }
  uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof(one));
  if (impl_->thread.joinable()) impl_->thread.join();
}

uint16_t Coordinator::port() const { return impl_->port; }

CoordinatorStats Coordinator::stats() const {
  std::lock_guard lock(impl_->mu);
  CoordinatorStats s;
  s.formed = impl_->formed;
  s.epoch = impl_->epoch;
  s.world_size = impl_->world;
  s.alive = impl_->alive_ranks();
  s.refused = impl_->refused;
  for (auto& c : impl_->conns) s.joiners += c->joiner && !c->dead;
  return s;
}

Result<std::unique_ptr<Coordinator>> Coordinator::start(CoordinatorOptions options) {
  if (options.world_size < 1 || options.world_size > 1024)
    return InvalidArgument("coordinator: world size " + std::to_string(options.world_size) + " out of range");
  LATTICE_ASSIGN_OR_RETURN(auto hp, split_host_port(options.listen));
  auto impl = std::make_unique<Impl>();
  impl->opt = options;
  impl->world = options.world_size;
  impl->members.assign(impl->world, nullptr);
  impl->dead.assign(impl->world, false);
  if (rlimit lim{}; ::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    impl->max_pending = std::clamp<size_t>(size_t(lim.rlim_cur / 4), 4, Impl::kMaxPendingHandshakes);

  int fd = options.listen_fd;
  if (fd >= 0) {
    impl->listen_fd = fd;
    int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return ErrnoError("coordinator: adopted listener", errno);
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  } else {
    bool v6 = hp.first.find(':') != std::string::npos;
    fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoError("coordinator socket()", errno);
    impl->listen_fd = fd;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (v6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
      in6->sin6_family = AF_INET6;
      in6->sin6_port = htons(hp.second);
      if (::inet_pton(AF_INET6, hp.first.c_str(), &in6->sin6_addr) != 1)
        return InvalidArgument("coordinator: listen address '" + options.listen + "' is not an IP literal");
      len = sizeof(sockaddr_in6);
    } else {
      auto* in = reinterpret_cast<sockaddr_in*>(&ss);
      in->sin_family = AF_INET;
      in->sin_port = htons(hp.second);
      std::string host = hp.first == "localhost" ? "127.0.0.1" : hp.first;
      if (::inet_pton(AF_INET, host.c_str(), &in->sin_addr) != 1)
        return InvalidArgument("coordinator: listen address '" + options.listen + "' is not an IP literal");
      len = sizeof(sockaddr_in);
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) < 0)
      return ErrnoError("coordinator: bind " + options.listen, errno);
    if (::listen(fd, 128) < 0) return ErrnoError("coordinator: listen", errno);
  }
  std::string bound = socket_name(fd, true);
  impl->port = static_cast<uint16_t>(std::stoi(bound.substr(bound.rfind(':') + 1)));
  impl->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->wake_fd < 0) return ErrnoError("coordinator eventfd", errno);
  if (options.insecure)
    LATTICE_LOG_WARN("coordinator: INSECURE mode: joins are authenticated but control traffic is NOT encrypted");
  LATTICE_LOG_INFO("coordinator: listening on {} for {} ranks", bound, impl->world);
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->loop(); });
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

}  // namespace lattice::cluster
