// Membership, member side: one rank's authenticated control link to the coordinator, the
// heartbeat thread that keeps it alive, and the events that tell the application who died.
//
// Failure detector (decision, see docs/CLUSTER.md): a simple timeout, not phi-accrual. Each
// side sends a heartbeat every heartbeat_interval (default 100 ms) from a dedicated thread
// that sleeps in poll(); a side that hears nothing for failure_timeout (default 700 ms, 7
// missed beats) declares the other dead. A killed process is detected at once (EOF); a
// stopped one or a cut cable after failure_timeout. On a loaded 2-core machine a sleeping
// thread is woken within a few ms, far inside the 600 ms of slack, so there are no false
// alarms; phi-accrual adapts to jitter but needs a warm-up history and gains nothing at 7
// missed beats of margin.
//
// The coordinator decides (bootstrap.h) and broadcasts a view; every member turns it into a
// kPeerLost event here. If the coordinator itself dies or goes silent, the member raises
// kCoordinatorLost (every member does, independently, within failure_timeout).
//
// Thread safety: all public methods are thread-safe. The callback runs on the heartbeat
// thread: it must return quickly and must not call back into MemberLink's blocking methods.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/cluster/control.h"
#include "lattice/core/deadline.h"
#include "lattice/core/status.h"
#include "lattice/crypto/secret.h"

namespace lattice::cluster {

struct MembershipOptions {
  std::chrono::milliseconds heartbeat_interval{100};
  std::chrono::milliseconds failure_timeout{700};
};

enum class EventKind : uint8_t {
  kPeerLost,         // `ranks` (numbered in `epoch`) are dead; `alive` the survivors
  kCoordinatorLost,  // the coordinator died or went silent: the cluster cannot change any more
  kJoinRequest,      // a node waits to join; it enters at the next shrink()
  kEvicted,          // the coordinator dropped us (we were declared dead, e.g. after a stop)
};
std::string_view to_string(EventKind k);

struct MembershipEvent {
  EventKind kind = EventKind::kPeerLost;
  uint64_t epoch = 0;
  std::vector<int> ranks;
  std::vector<int> alive;
  std::string reason;
  Clock::time_point detected_at{};
};
std::string to_string(const MembershipEvent& e);

class MemberLink {
 public:
  using Callback = std::function<void(const MembershipEvent&)>;

  // Dials `coordinator` (retrying until `deadline` while it is not up), runs the handshake
  // (no retry if refused: a wrong secret fails at once with kAuthFailed), sends hello and
  // starts the heartbeat thread. `internal` runs before `user` for every event.
  static Result<std::unique_ptr<MemberLink>> connect(const std::string& coordinator, const crypto::ClusterSecret& secret,
                                                     bool insecure, MembershipOptions options,
                                                     const nlohmann::json& hello, Callback internal, Callback user,
                                                     Deadline deadline);
  ~MemberLink();

  Status send(const nlohmann::json& msg, Deadline deadline);
  // Waits for the next message whose "t" is one of `types` (others stay queued), or until
  // the deadline (kTimeout) or the link failed (its error).
  Result<nlohmann::json> wait_for(const std::vector<std::string>& types, Deadline deadline);
  // Application events, in order.
  Result<MembershipEvent> next_event(Deadline deadline);
  // The IP this host used to reach the coordinator (peers reach us there).
  const std::string& local_ip() const { return local_ip_; }
  // Ok while the coordinator is reachable.
  Status status() const;

  // Test hooks. pause(true) makes the link behave as a stopped process: no heartbeats sent,
  // nothing read. close_now() drops the connection as a killed process would.
  void pause(bool paused);
  void close_now();
  // How many times the heartbeat thread woke (tests: a lost or paused link sleeps).
  uint64_t wakeups() const { return wakeups_.load(std::memory_order_relaxed); }

 private:
  MemberLink() = default;
  void run();
  void raise(MembershipEvent e);
  void fail(Status s);

  MembershipOptions opt_;
  std::unique_ptr<ControlChannel> ch_;
  std::string local_ip_;
  Callback internal_, user_;
  std::thread thread_;
  int wake_fd_ = -1;
  std::atomic<uint64_t> wakeups_{0};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<nlohmann::json> inbox_;
  std::deque<MembershipEvent> events_;
  Status failed_;
  bool stop_ = false;
  bool paused_ = false;
};

}  // namespace lattice::cluster
