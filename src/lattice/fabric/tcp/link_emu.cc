#include "lattice/fabric/tcp/link_emu.h"

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <mutex>
#include <vector>

#include "lattice/core/log.h"

namespace lattice::fabric::tcp {
namespace {

constexpr size_t kReadBytes = 64 * 1024;
constexpr int kConnectMs = 2000;
// A release closer than the timer's lateness estimate (plus this) is waited for by polling.
constexpr int64_t kSpinMarginNs = 5'000;
// The lateness estimate of a timed sleep: where it starts (measure_late(), else this), its bounds.
// It tracks the 90th percentile of the wake-ups' lateness (each
// wake-up moves it up 9 steps if later, down one if not), not their maximum: every release polls
// for as long as the estimate, and a maximum that one late wake-up set made the relays of 4 ranks
// on 2 cores poll 80 us a chunk (session 20: a quarter of both cores) where the median wake-up
// here is 24 us late and the 90th percentile 28. A release whose wake-up is later than the
// estimate goes out late by the difference (one in ten, a few microseconds).
constexpr int64_t kLateStartNs = 100'000, kLateMinNs = 5'000, kLateMaxNs = 200'000;
constexpr int64_t kLateStepNs = 250;
constexpr int kHopProbes = 33;

int64_t clock_ns(clockid_t id) {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}
int64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }

// CLOCK_REALTIME less CLOCK_MONOTONIC: the realtime read between two monotonic ones, the closest
// pair of three. One read of each clock after the other is off by whatever ran between them (a
// preemption under load: tens of microseconds, more than a loopback hop, which put a probe's
// arrival before its send).
int64_t realtime_less_monotonic_ns() {
  int64_t gap = INT64_MAX, offset = 0;
  for (int i = 0; i < 3; ++i) {
    const int64_t before = now_ns(), real = clock_ns(CLOCK_REALTIME), after = now_ns();
    if (after - before < gap) {
      gap = after - before;
      offset = real - (before + gap / 2);
    }
  }
  return offset;
}

// recv() that also says when the kernel queued the bytes on `fd` (SO_TIMESTAMPNS, the last
// segment read; CLOCK_REALTIME turned into CLOCK_MONOTONIC). Without a stamp, or with one that
// a clock step made implausible: now.
ssize_t recv_stamped(int fd, void* buf, size_t n, int64_t* arrived_ns) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
  iovec iov{buf, n};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  const ssize_t got = ::recvmsg(fd, &m, 0);
  const int64_t mono = now_ns();
  *arrived_ns = mono;
  if (got <= 0) return got;
  for (cmsghdr* h = CMSG_FIRSTHDR(&m); h != nullptr; h = CMSG_NXTHDR(&m, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_TIMESTAMPNS) continue;
    timespec ts;
    std::memcpy(&ts, CMSG_DATA(h), sizeof ts);
    const int64_t stamp = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec - realtime_less_monotonic_ns();
    if (stamp <= mono && stamp > mono - 1'000'000'000) *arrived_ns = stamp;
  }
  return got;
}

void stamp_arrivals(int fd) {
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
}

struct Chunk {
  int64_t due;
  std::vector<std::byte> data;
  // Found the wire idle: its release is a message's latency, polled for to the microsecond.
  // Otherwise it is part of a stream whose rate is set by the due times, not by how promptly
  // each is released, and a timed sleep (late by tens of microseconds) does.
  bool exact = false;
  size_t off = 0;
};

// Bytes read from fd[i] on their way to fd[1 - i].
struct Direction {
  std::deque<Chunk> q;
  size_t queued = 0;
  int64_t wire_free = 0;
  bool eof = false;       // fd[i] said EOF
  bool shut = false;      // fd[1 - i] was shut down for writing after the queue drained
  bool blocked = false;   // fd[1 - i] answered EAGAIN: wait for EPOLLOUT
};

struct Pair {
  int fd[2] = {-1, -1};
  Direction dir[2];
  uint32_t armed[2] = {0, 0};
};

// A non-blocking connection to `to` within kConnectMs (loopback or this host: fast).
int dial(const SockAddr& to) {
  int fd = ::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, to.get(), to.len) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  int err = 0;
  socklen_t len = sizeof err;
  if (::poll(&p, 1, kConnectMs) != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The relay's own hop: how long a loopback send() runs before the receiving socket has the bytes
// (its kernel stamp), the least of kHopProbes one-byte sends to itself through `listen_fd`
// (nothing else has its address yet). The least, not the median: a probe preempted on a loaded
// machine measures the scheduler, and releasing by that much early would cut into the setting.
// 0 when fewer than half the probes measured a hop (a send or poll failed).
int64_t measure_hop(int listen_fd, const SockAddr& self) {
  int tx = dial(self);
  if (tx < 0) return 0;
  pollfd lp{listen_fd, POLLIN, 0};
  int rx = ::poll(&lp, 1, kConnectMs) == 1 ? ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC) : -1;
  std::vector<int64_t> hops;
  if (rx >= 0) {
    tune_socket(tx);
    stamp_arrivals(rx);
    for (int i = 0; i < kHopProbes; ++i) {
      char byte = 1;
      const int64_t sent = now_ns();
      if (::send(tx, &byte, 1, MSG_NOSIGNAL) != 1) break;
      pollfd rp{rx, POLLIN, 0};
      int64_t arrived = 0;
      if (::poll(&rp, 1, kConnectMs) != 1 || recv_stamped(rx, &byte, 1, &arrived) != 1) break;
      // An arrival stamped before its send is a clock read gone wrong, not a hop: left out.
      if (arrived > sent) hops.push_back(arrived - sent);
    }
    ::close(rx);
  }
  ::close(tx);
  if (hops.size() < static_cast<size_t>(kHopProbes) / 2) return 0;
  return *std::min_element(hops.begin(), hops.end());
}

// How late a timed sleep of tens of microseconds returns on this thread: the 90th percentile of
// kHopProbes sleeps, kLateStartNs if they cannot be timed. The relay starts from it: with a link's
// latency below the estimate every release polls from the chunk's arrival and no timed sleep
// ever corrects it (session 20: a start of 100 us against a 50 us link kept every relay polling
// its whole delay).
int64_t measure_late() {
  std::vector<int64_t> late;
  for (int i = 0; i < kHopProbes; ++i) {
    const int64_t want = 20'000 + 1'000 * (i % 5), t0 = now_ns();
    timespec ts{0, static_cast<long>(want)};
    if (::clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr) != 0) return kLateStartNs;
    late.push_back(now_ns() - t0 - want);
  }
  std::sort(late.begin(), late.end());
  return std::clamp(late[late.size() * 9 / 10], kLateMinNs, kLateMaxNs);
}

// The live emulators of this process, and the CPU time of those that stopped.
std::mutex g_emulators_mu;
std::vector<const LinkEmulator*> g_emulators;
int64_t g_stopped_cpu_ns = 0;

int64_t thread_cpu_ns(clockid_t id) {
  timespec ts{};
  if (::clock_gettime(id, &ts) != 0) return 0;
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

int64_t link_emulators_cpu_ns() {
  std::lock_guard lk(g_emulators_mu);
  int64_t ns = g_stopped_cpu_ns;
  for (const LinkEmulator* e : g_emulators)
    if (e->has_cpu_clock_) ns += thread_cpu_ns(e->cpu_clock_);
  return ns;
}

Result<bool> parse_link_option(std::string_view kv, LinkShape* shape) {
  const bool lat = kv.starts_with("latency_us="), rate = kv.starts_with("gbytes_s=");
  if (!lat && !rate) return false;
  std::string_view val = kv.substr(kv.find('=') + 1);
  double v = 0;
  auto [p, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
  if (ec != std::errc() || p != val.data() + val.size() || !(v > 0) || (lat ? v > 1e6 : v < 1e-6 || v > 1e4))
    return InvalidArgument("tcp URI: bad value in '" + std::string(kv) +
                           "' (latency_us: 0 < L <= 1e6; gbytes_s: 1e-6 <= R <= 1e4)");
  (lat ? shape->latency_us : shape->gbytes_s) = v;
  return true;
}

Result<std::unique_ptr<LinkEmulator>> LinkEmulator::start(const SockAddr& bind, const SockAddr& target,
                                                          LinkShape shape) {
  std::unique_ptr<LinkEmulator> e(new LinkEmulator());
  e->shape_ = shape;
  e->target_ = target;
  SockAddr b = bind;
  auto* in = reinterpret_cast<sockaddr_in*>(&b.storage);
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&b.storage);
  (b.family() == AF_INET ? in->sin_port : in6->sin6_port) = 0;  // the relay's own port
  LATTICE_ASSIGN_OR_RETURN(Listener listener, listen_socket(b, /*reuse_addr=*/false, "tcp link emulator"));
  e->listen_fd_ = listener.fd;
  e->bound_ = listener.bound;
  e->hop_ns_ = measure_hop(e->listen_fd_, e->bound_);
  LATTICE_ASSIGN_OR_RETURN(e->loop_, listen_loop(e->listen_fd_, "tcp link emulator"));
  LinkEmulator* raw = e.get();
  e->thread_ = std::thread([raw] { raw->run(); });
  e->has_cpu_clock_ = ::pthread_getcpuclockid(e->thread_.native_handle(), &e->cpu_clock_) == 0;
  {
    std::lock_guard lk(g_emulators_mu);
    g_emulators.push_back(raw);
  }
  LATTICE_LOG_DEBUG("tcp link emulator on {} -> {}: {} us, {} GB/s, own hop {:.1f} us",
                    sockaddr_to_string(e->bound_.get()), sockaddr_to_string(target.get()), shape.latency_us,
                    shape.gbytes_s, static_cast<double>(e->hop_ns_) / 1e3);
  return e;
}

LinkEmulator::~LinkEmulator() {
  stop_ = true;
  wake(loop_);
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, loop_.epoll_fd, loop_.wake_fd})
    if (fd >= 0) ::close(fd);
}

void LinkEmulator::run() {
  ::prctl(PR_SET_TIMERSLACK, 1000UL);  // timers to the microsecond, not the default 50 us
  ::prctl(PR_SET_NAME, "lat-tcp-relay");  // as top -H and perf name it
  // A cable does not wait for a CPU. When the ranks hold every core (busy-polling their
  // completion queues), a relay woken by bytes or its timer waited for the running rank's time
  // slice to end (EEVDF: 1.5 ms on 2 cores): session 14 measured 8 B through a 50 us relay at a
  // median of 55 us but a mean of 104 us and a p99 of 1.4 ms, with both cores busy-polling. A
  // real-time relay preempts them at once; its polls are bounded (kLateMaxNs + kSpinMarginNs a
  // release). Without the privilege (CAP_SYS_NICE) it asks for the highest fair weight, else
  // runs as it is.
  sched_param sp{};
  sp.sched_priority = 1;
  if (::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &sp) == 0) {
    LATTICE_LOG_DEBUG("link emulator: relay thread runs SCHED_FIFO");
  } else if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), -20) != 0) {
    LATTICE_LOG_DEBUG("link emulator: relay thread at the default priority (no CAP_SYS_NICE)");
  }
  std::map<uint64_t, Pair> pairs;      // id -> pair; epoll data = id * 2 + side
  uint64_t next_id = 1;
  // From the kernel's stamp to the release: the setting less the relay's own hop.
  const int64_t delay_ns = std::max<int64_t>(0, static_cast<int64_t>(shape_.latency_us * 1000.0) - hop_ns_);
  int64_t late_ns = measure_late();  // how late a timed sleep returns, lately
  const int64_t late_start_ns = late_ns;
  // What the relay did, for its debug line at the end: chunks received, wake-ups, of them
  // polls (no timeout: waiting for a message's release), and the polls' time.
  uint64_t n_chunks = 0, n_wakes = 0, n_polls = 0;
  int64_t poll_ns = 0;

  auto close_pair = [&](uint64_t id) {
    Pair& p = pairs.at(id);
    for (int fd : p.fd) {
      ::epoll_ctl(loop_.epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
      ::close(fd);
    }
    pairs.erase(id);
  };
  // What each side must be woken for: reading while its direction has room, writing while the
  // other direction waits for room in the socket.
  auto rearm = [&](uint64_t id, Pair& p) {
    for (int s = 0; s < 2; ++s) {
      uint32_t want = 0;
      if (!p.dir[s].eof && p.dir[s].queued < kMaxQueued) want |= EPOLLIN;
      if (p.dir[1 - s].blocked) want |= EPOLLOUT;
      if (want == p.armed[s]) continue;
      epoll_event ev{};
      ev.events = want;
      ev.data.u64 = id * 2 + static_cast<uint64_t>(s);
      ::epoll_ctl(loop_.epoll_fd, EPOLL_CTL_MOD, p.fd[s], &ev);
      p.armed[s] = want;
    }
  };
  // Reads what side s has; false when the pair broke.
  std::vector<std::byte> scratch(kReadBytes);
  auto take = [&](Pair& p, int s) {
    Direction& d = p.dir[s];
    while (!d.eof && d.queued < kMaxQueued) {
      int64_t arrived = 0;
      ssize_t n = recv_stamped(p.fd[s], scratch.data(), scratch.size(), &arrived);
      if (n == 0) {
        d.eof = true;
        break;
      }
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      std::vector<std::byte> buf(scratch.begin(), scratch.begin() + n);
      const bool idle = d.q.empty() && arrived >= d.wire_free;
      const int64_t start = std::max(arrived, d.wire_free);
      d.wire_free = start + (shape_.gbytes_s > 0 ? static_cast<int64_t>(static_cast<double>(n) / shape_.gbytes_s) : 0);
      d.queued += static_cast<size_t>(n);
      d.q.push_back({d.wire_free + delay_ns, std::move(buf), idle});
      ++n_chunks;
    }
    return true;
  };
  // Writes side s's due bytes to the other side; false when the pair broke.
  auto give = [&](Pair& p, int s, int64_t t) {
    Direction& d = p.dir[s];
    d.blocked = false;
    while (!d.q.empty() && d.q.front().due <= t) {
      Chunk& c = d.q.front();
      ssize_t n = ::send(p.fd[1 - s], c.data.data() + c.off, c.data.size() - c.off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
          d.blocked = true;
          return true;
        }
        if (errno == EINTR) continue;
        return false;
      }
      c.off += static_cast<size_t>(n);
      d.queued -= static_cast<size_t>(n);
      if (c.off == c.data.size()) d.q.pop_front();
    }
    if (d.eof && d.q.empty() && !d.shut) {
      ::shutdown(p.fd[1 - s], SHUT_WR);
      d.shut = true;
    }
    return true;
  };

  std::vector<epoll_event> evs(64);
  while (!stop_) {
    // Sleep until the next release of a stream, or until shortly before that of a message and
    // poll up to it: a timed sleep returns late by tens of microseconds here, a poll by about one.
    int64_t next = INT64_MAX, next_exact = INT64_MAX;
    for (auto& [id, p] : pairs)
      for (auto& d : p.dir) {
        if (d.q.empty() || d.blocked) continue;
        next = std::min(next, d.q.front().due);
        if (d.q.front().exact) next_exact = std::min(next_exact, d.q.front().due);
      }
    const int64_t t0 = now_ns();
    int64_t wait_ns = 0, wake_at = -1;
    if (next == INT64_MAX) {
      wait_ns = 1'000'000'000;  // nothing queued: until an event
    } else if (next_exact == INT64_MAX || next_exact - t0 > late_ns + kSpinMarginNs) {
      wake_at = std::min(next, next_exact == INT64_MAX ? INT64_MAX : next_exact - late_ns - kSpinMarginNs);
      wait_ns = std::max<int64_t>(0, wake_at - t0);
    }
    timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000), static_cast<long>(wait_ns % 1'000'000'000)};
    int n = ::epoll_pwait2(loop_.epoll_fd, evs.data(), static_cast<int>(evs.size()), &ts, nullptr);
    if (n < 0) n = 0;  // EINTR
    ++n_wakes;
    if (next != INT64_MAX && wait_ns == 0) {
      ++n_polls;
      poll_ns += now_ns() - t0;
    }
    if (n == 0 && wake_at > t0) {
      const int64_t late = now_ns() - wake_at;
      late_ns = std::clamp(late_ns + (late > late_ns ? 9 * kLateStepNs : -kLateStepNs), kLateMinNs, kLateMaxNs);
    } else if (wait_ns == 0 && next_exact != INT64_MAX && late_ns + kSpinMarginNs >= delay_ns) {
      // An estimate at or above the link's own delay polls every release from its arrival, so
      // no timed sleep would ever correct it: it eases down (an eighth of a step a poll) until
      // releases sleep again and their wake-ups set it.
      late_ns = std::max(kLateMinNs, late_ns - kLateStepNs / 8);
    }
    std::vector<uint64_t> broken;
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = evs[i].data.u64;
      if (tag == kWakeId) continue;
      if (tag == kListenId) {
        while (true) {
          int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (c < 0) break;
          int t = dial(target_);
          if (t < 0) {
            LATTICE_LOG_WARN("tcp link emulator: cannot reach {}: dropping a connection",
                             sockaddr_to_string(target_.get()));
            ::close(c);
            continue;
          }
          tune_socket(c);
          tune_socket(t);
          stamp_arrivals(c);
          stamp_arrivals(t);
          const uint64_t id = next_id++;
          Pair& p = pairs[id];
          p.fd[0] = c;
          p.fd[1] = t;
          for (int s = 0; s < 2; ++s) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.u64 = id * 2 + static_cast<uint64_t>(s);
            ::epoll_ctl(loop_.epoll_fd, EPOLL_CTL_ADD, p.fd[s], &ev);
            p.armed[s] = EPOLLIN;
          }
        }
        continue;
      }
      const uint64_t id = tag / 2;
      const int s = static_cast<int>(tag % 2);
      auto it = pairs.find(id);
      if (it == pairs.end()) continue;
      Pair& p = it->second;
      if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
        if (!take(p, s)) broken.push_back(id);
      if (evs[i].events & EPOLLOUT) p.dir[1 - s].blocked = false;
    }
    const int64_t t = now_ns();
    for (auto& [id, p] : pairs) {
      if (std::find(broken.begin(), broken.end(), id) != broken.end()) continue;
      bool ok = true;
      for (int s = 0; s < 2 && ok; ++s)
        if (!p.dir[s].blocked) ok = give(p, s, t);
      if (!ok || (p.dir[0].shut && p.dir[1].shut)) broken.push_back(id);
      else rearm(id, p);
    }
    std::sort(broken.begin(), broken.end());
    broken.erase(std::unique(broken.begin(), broken.end()), broken.end());
    for (uint64_t id : broken) close_pair(id);
  }
  std::vector<uint64_t> ids;
  for (auto& [id, p] : pairs) ids.push_back(id);
  for (uint64_t id : ids) close_pair(id);
  {
    // Its CPU time stays counted once it is gone (read here: after the join the clock is no more).
    std::lock_guard lk(g_emulators_mu);
    g_stopped_cpu_ns += thread_cpu_ns(CLOCK_THREAD_CPUTIME_ID);
    std::erase(g_emulators, this);
  }
  LATTICE_LOG_DEBUG("tcp link emulator: {} chunks, {} wake-ups, {} polls for a release ({:.1f} ms), lateness {:.1f} us (at the start {:.1f})",
                    n_chunks, n_wakes, n_polls, static_cast<double>(poll_ns) / 1e6, static_cast<double>(late_ns) / 1e3,
                    static_cast<double>(late_start_ns) / 1e3);
}

}  // namespace lattice::fabric::tcp
