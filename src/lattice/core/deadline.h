// Deadline: the point in time a blocking call gives up. Every blocking call in lattice
// takes one; nothing waits forever. Cheap value type, thread-safe to copy.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace lattice {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

class Deadline {
 public:
  // Expires `d` from now.
  template <class Rep, class Period>
  static Deadline after(std::chrono::duration<Rep, Period> d) {
    return Deadline(Clock::now() + std::chrono::duration_cast<Clock::duration>(d));
  }
  static Deadline at(Clock::time_point t) { return Deadline(t); }
  // Already expired: a blocking call given this only tries once.
  static Deadline now() { return Deadline(Clock::now()); }
  // For the rare caller that truly has no bound (a daemon's main loop). Data paths never use it.
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  bool expired() const { return Clock::now() >= when_; }
  bool is_never() const { return when_ == Clock::time_point::max(); }
  Clock::time_point when() const { return when_; }

  // Time left, never negative.
  Clock::duration remaining() const {
    if (is_never()) return Clock::duration::max();
    auto left = when_ - Clock::now();
    return left < Clock::duration::zero() ? Clock::duration::zero() : left;
  }
  // Time left in whole milliseconds, for poll(2)/epoll_wait(2): -1 for never, rounded up.
  int remaining_ms_for_poll() const {
    if (is_never()) return -1;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(remaining()).count();
    return left > INT32_MAX ? INT32_MAX : static_cast<int>(left);
  }
  // The earlier of two deadlines.
  Deadline min(Deadline other) const { return when_ <= other.when_ ? *this : other; }

 private:
  explicit Deadline(Clock::time_point t) : when_(t) {}
  Clock::time_point when_;
};

// A failure detector's own stop. It checks a peer every `period`; this check came `gap` after
// the last. When the overrun (gap - period) passes max(timeout / 4, 250 ms) its process did not
// run (the whole job stopped and resumed, the machine asleep, a VM descheduled), and that overrun
// is not the peer's silence: the detector adds it to the peer's last sign of life. Shorter
// overruns (a loaded host's scheduling) count as usual, so a starved detector still detects.
inline Clock::duration unseen_stop(Clock::duration gap, Clock::duration period, Clock::duration timeout) {
  const Clock::duration over = gap - period;
  const Clock::duration floor = std::chrono::milliseconds(250);
  return over > std::max(timeout / 4, floor) ? over : Clock::duration::zero();
}

}  // namespace lattice
