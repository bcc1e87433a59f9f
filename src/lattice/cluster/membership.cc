#include "lattice/cluster/membership.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "lattice/cluster/control_schema.h"
#include "lattice/core/log.h"

namespace lattice::cluster {

using nlohmann::json;

std::string_view to_string(EventKind k) {
  switch (k) {
    case EventKind::kPeerLost: return "peer-lost";
    case EventKind::kCoordinatorLost: return "coordinator-lost";
    case EventKind::kJoinRequest: return "join-request";
    case EventKind::kEvicted: return "evicted";
  }
  return "?";
}

std::string to_string(const MembershipEvent& e) {
  auto list = [](const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
  };
  return std::string(to_string(e.kind)) + " epoch " + std::to_string(e.epoch) + " ranks " + list(e.ranks) +
         " alive " + list(e.alive) + ": " + e.reason;
}

Result<std::unique_ptr<MemberLink>> MemberLink::connect(const std::string& coordinator,
                                                        const crypto::ClusterSecret& secret, bool insecure,
                                                        MembershipOptions options, const json& hello,
                                                        Callback internal, Callback user, Deadline deadline) {
  // Dial until the coordinator is up (it may start after us), then authenticate once.
  Status last;
  std::unique_ptr<ControlChannel> ch;
  auto backoff = 20ms;
  for (int attempt = 0;; ++attempt) {
    auto fd = dial_tcp(coordinator, deadline.min(Deadline::after(2s)));
    if (fd.ok()) {
      auto c = handshake_fd(*fd, crypto::Handshake::Role::kInitiator, secret, insecure, "coordinator " + coordinator,
                            deadline.min(Deadline::after(10s)));
      if (c.ok()) {
        ch = std::move(c).value();
        break;
      }
      Status s = c.status();
      if (s.code() == ErrorCode::kAuthFailed || s.code() == ErrorCode::kInvalidArgument ||
          s.code() == ErrorCode::kUnavailable) {
        LATTICE_LOG_ERROR("the coordinator at {} refused us: {} (our secret's fingerprint is {}; does it match the "
                          "cluster's?)",
                          coordinator, s.to_string(), secret.fingerprint());
        return s;
      }
      last = s;
    } else {
      last = fd.status();
    }
    if (deadline.expired())
      return Timeout("cannot reach the coordinator at " + coordinator + ": " + last.to_string());
    LATTICE_LOG_DEBUG("coordinator {} not reachable yet ({}); retrying", coordinator, last.to_string());
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
  if (insecure) LATTICE_LOG_WARN("INSECURE mode: control traffic to the coordinator is NOT encrypted");
  LATTICE_RETURN_IF_ERROR(ch->send(hello, deadline));
  auto link = std::unique_ptr<MemberLink>(new MemberLink());
  link->opt_ = options;
  link->local_ip_ = cluster::local_ip(ch->fd());
  link->ch_ = std::move(ch);
  link->internal_ = std::move(internal);
  link->user_ = std::move(user);
  link->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (link->wake_fd_ < 0) return ErrnoError("eventfd", errno);
  MemberLink* raw = link.get();
  link->thread_ = std::thread([raw] { raw->run(); });
  return link;
}

MemberLink::~MemberLink() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  if (wake_fd_ >= 0) {
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status MemberLink::status() const {
  std::lock_guard lock(mu_);
  return failed_;
}

Status MemberLink::send(const json& msg, Deadline deadline) {
  LATTICE_RETURN_IF_ERROR(status());
  return ch_->send(msg, deadline);
}

void MemberLink::pause(bool paused) {
  {
    std::lock_guard lock(mu_);
    paused_ = paused;
  }
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void MemberLink::close_now() { ch_->shutdown(); }

void MemberLink::fail(Status s) {
  std::lock_guard lock(mu_);
  if (failed_.ok()) failed_ = std::move(s);
  cv_.notify_all();
}

void MemberLink::raise(MembershipEvent e) {
  if (internal_) internal_(e);
  if (user_) user_(e);
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
  cv_.notify_all();
}

Result<json> MemberLink::wait_for(const std::vector<std::string>& types, Deadline deadline) {
  std::unique_lock lock(mu_);
  for (;;) {
    for (auto it = inbox_.begin(); it != inbox_.end(); ++it) {
      if (std::find(types.begin(), types.end(), (*it)["t"].get<std::string>()) != types.end()) {
        json m = std::move(*it);
        inbox_.erase(it);
        return m;
      }
    }
    if (!failed_.ok()) return failed_;
    if (deadline.expired()) return Timeout("no '" + types.front() + "' from the coordinator in time");
    cv_.wait_until(lock, deadline.is_never() ? Clock::now() + 1h : deadline.when());
  }
}

Result<MembershipEvent> MemberLink::next_event(Deadline deadline) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (!events_.empty()) {
      auto e = std::move(events_.front());
      events_.pop_front();
      return e;
    }
    if (deadline.expired()) return Timeout("no membership event");
    cv_.wait_until(lock, deadline.is_never() ? Clock::now() + 1h : deadline.when());
  }
}

void MemberLink::run() {
  auto last_rx = Clock::now();
  auto last_check = last_rx;  // the coordinator's silence was last judged then
  auto last_tx = Clock::time_point{};
  bool lost = false;
  auto lose = [&](EventKind kind, const std::string& reason) {
    lost = true;
    fail(PeerLost(reason));
    MembershipEvent e;
    e.kind = kind;
    e.reason = reason;
    e.detected_at = Clock::now();
    raise(std::move(e));
  };
  for (;;) {
    bool paused;
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
      paused = paused_;
    }
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    auto now = Clock::now();
    if (!lost && !paused && now - last_tx >= opt_.heartbeat_interval) {
      last_tx = now;
      Status s = ch_->send(json{{"t", "hb"}}, Deadline::after(opt_.heartbeat_interval));
      if (!s.ok() && s.code() != ErrorCode::kTimeout) lose(EventKind::kCoordinatorLost, "coordinator: " + s.to_string());
    }
    // Sleeps until the next heartbeat is due, a message arrives, or pause()/the destructor
    // rings wake_fd_. With nothing left to do (the link is lost, or paused) it sleeps until
    // rung: a lost link costs no CPU however long the application takes to notice.
    pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {ch_->fd(), static_cast<short>(lost || paused ? 0 : POLLIN), 0}};
    int ms = -1;
    if (!lost && !paused) {
      auto wait = opt_.heartbeat_interval - (Clock::now() - last_tx);
      ms = static_cast<int>(std::clamp<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(wait).count(), 1,
                                                opt_.heartbeat_interval.count()));
    }
    ::poll(fds, lost || paused ? 1 : 2, ms);
    if (fds[0].revents & POLLIN) {
      uint64_t drained;
      (void)!::read(wake_fd_, &drained, sizeof drained);
    }
    if (lost || paused) {
      if (paused) last_rx = last_check = Clock::now();  // a stopped process does not judge time it did not see
      continue;
    }
    for (;;) {
      auto m = ch_->try_recv();
      if (!m.ok()) {
        Status s = m.status();
        if (s.code() == ErrorCode::kPeerLost)
          lose(EventKind::kCoordinatorLost, "the coordinator closed the control connection (died, or dropped us)");
        else
          lose(EventKind::kEvicted, "control link failed: " + s.to_string());
        break;
      }
      if (!*m) break;
      last_rx = Clock::now();
      json& msg = **m;
      auto bad = validate_from_coordinator(msg);
      if (!bad.ok()) {
        // Authenticated, so another lattice version: nothing it says after this can be trusted.
        LATTICE_LOG_ERROR("membership: refused a message from the coordinator: {}", bad.message());
        lose(EventKind::kCoordinatorLost,
             "the coordinator sent a message this rank cannot read (another lattice version?): " + bad.message());
        break;
      }
      const std::string t = msg["t"].get<std::string>();
      if (t == "hb") continue;
      if (t == "view") {
        MembershipEvent e;
        e.kind = EventKind::kPeerLost;
        e.epoch = msg.value("epoch", uint64_t{0});
        for (auto& r : msg["lost"]) e.ranks.push_back(r.get<int>());
        for (auto& r : msg["alive"]) e.alive.push_back(r.get<int>());
        e.reason = msg.value("reason", "");
        e.detected_at = Clock::now();
        raise(std::move(e));
        continue;
      }
      if (t == "join_request") {
        MembershipEvent e;
        e.kind = EventKind::kJoinRequest;
        e.reason = msg.value("name", "a node") + " waits to join";
        e.detected_at = Clock::now();
        raise(std::move(e));
        continue;
      }
      const bool refused = t == "refused";
      const std::string reason = refused ? msg.value("reason", std::string("?")) : std::string();
      {
        std::lock_guard lock(mu_);
        inbox_.push_back(std::move(msg));
        cv_.notify_all();
      }
      // Refused after joining: the coordinator declared us dead (we were stopped or cut off)
      // and will never take us back. A refused hello is the joiner's to report (wait_for).
      if (refused) {
        lose(EventKind::kEvicted, "evicted by the coordinator: " + reason);
        break;
      }
    }
    // This thread did not run for a while (the job stopped and resumed, the machine asleep):
    // the coordinator's silence then is not the coordinator's (unseen_stop, deadline.h). Checks
    // come every heartbeat interval.
    const auto checked = Clock::now();
    last_rx += unseen_stop(checked - last_check, opt_.heartbeat_interval, opt_.failure_timeout);
    last_check = checked;
    if (!lost && Clock::now() - last_rx > opt_.failure_timeout) {
      auto ms_silent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_rx).count();
      lose(EventKind::kCoordinatorLost,
           "the coordinator has been silent for " + std::to_string(ms_silent) + " ms (died, stopped or link cut)");
    }
  }
}

}  // namespace lattice::cluster
