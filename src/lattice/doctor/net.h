// Cable probes: a listener on this end's address of a cable, and a TCP connect from this end
// (bound to its address) to the peer's listener, with a deadline. A connect that completes
// proves the cable carries traffic both ways; nothing else is sent.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/doctor/checks.h"

namespace lattice::doctor::detail {

// Accepts (and closes) connections on each address it was given until destroyed.
class ProbeListener {
 public:
  ProbeListener() = default;
  ~ProbeListener();
  ProbeListener(const ProbeListener&) = delete;
  ProbeListener& operator=(const ProbeListener&) = delete;
  // Binds `addr`:0 and returns the port; kUnavailable / an errno error if it cannot.
  Result<uint16_t> listen_on(const std::string& addr);
  void start();  // the accept thread (call once, after every listen_on)

 private:
  std::vector<int> fds_;
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

Probe probe_cable(const CableEnd& mine, const std::string& peer_addr, uint16_t peer_port,
                  std::chrono::milliseconds timeout);

}  // namespace lattice::doctor::detail
