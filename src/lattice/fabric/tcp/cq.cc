#include "lattice/fabric/tcp/cq.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "lattice/fabric/tcp/endpoint.h"

namespace lattice::fabric::tcp {

namespace {
// A sleeper re-reads its endpoint list this often (endpoints may connect while it sleeps).
constexpr auto kMaxSleepSlice = std::chrono::milliseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

Result<std::unique_ptr<TcpCompletionQueue>> TcpCompletionQueue::create(size_t depth, bool busy_poll,
                                                                               Clock::duration spin) {
  if (depth == 0) return InvalidArgument("create_cq: depth must be > 0");
  int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0) return ErrnoError("eventfd", errno);
  return std::unique_ptr<TcpCompletionQueue>(new TcpCompletionQueue(efd, busy_poll, spin));
}

TcpCompletionQueue::~TcpCompletionQueue() { ::close(event_fd_); }

void TcpCompletionQueue::push(Completion c) {
  {
    std::lock_guard lock(mu_);
    q_.push_back(std::move(c));
    n_ready_.fetch_add(1, std::memory_order_release);
  }
  if (sleeping_.load()) {
    uint64_t one = 1;
    (void)!::write(event_fd_, &one, sizeof one);
  }
}

void TcpCompletionQueue::attach(std::shared_ptr<Conn> conn) {
  std::lock_guard lock(conns_mu_);
  conns_.push_back(std::move(conn));
}

void TcpCompletionQueue::detach(const Conn* conn) {
  std::lock_guard lock(conns_mu_);
  std::erase_if(conns_, [&](const std::shared_ptr<Conn>& c) { return c.get() == conn; });
}

size_t TcpCompletionQueue::pop(std::span<Completion> out) {
  if (n_ready_.load(std::memory_order_acquire) == 0 || out.empty()) return 0;
  std::lock_guard lock(mu_);
  size_t n = std::min(out.size(), q_.size());
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::move(q_.front());
    q_.pop_front();
  }
  n_ready_.fetch_sub(n, std::memory_order_relaxed);
  return n;
}

void TcpCompletionQueue::progress_attached() {
  std::lock_guard lock(conns_mu_);
  for (auto& c : conns_) c->progress_from_caller();
}

size_t TcpCompletionQueue::poll(std::span<Completion> out) {
  progress_attached();
  return pop(out);
}

void TcpCompletionQueue::sleep_once(Deadline deadline) {
  std::vector<pollfd> fds;
  std::vector<std::shared_ptr<Conn>> held;
  {
    std::lock_guard lock(conns_mu_);
    fds.reserve(conns_.size() + 1);
    held.reserve(conns_.size());
    for (auto& c : conns_) {
      short events = 0;
      int fd = c->poll_fd(&events);
      if (fd < 0) continue;
      c->sleepers.fetch_add(1);
      held.push_back(c);
      fds.push_back({fd, events, 0});
    }
  }
  fds.push_back({event_fd_, POLLIN, 0});
  sleeping_.store(true);
  if (n_ready_.load() == 0) {
    auto slice = std::min<Clock::duration>(deadline.remaining(), kMaxSleepSlice);
    int ms = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(slice).count());
    ::poll(fds.data(), fds.size(), ms);
  }
  sleeping_.store(false);
  uint64_t drained;
  (void)!::read(event_fd_, &drained, sizeof drained);
  for (auto& c : held) c->sleepers.fetch_sub(1);
}

Result<size_t> TcpCompletionQueue::wait(std::span<Completion> out, Deadline deadline) {
  if (out.empty()) return InvalidArgument("CompletionQueue::wait: empty output span");
  const auto spin_until = Clock::now() + spin_;
  for (;;) {
    if (size_t n = poll(out)) return n;
    if (deadline.expired()) return Timeout("no completion before the deadline");
    if (busy_poll_ || Clock::now() < spin_until) {
      cpu_relax();
      continue;
    }
    sleep_once(deadline);
  }
}

}  // namespace lattice::fabric::tcp
