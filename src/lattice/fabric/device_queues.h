// What the verbs provider does first on each RDMA device, tried for real and undone at once
// (for `lattice doctor`): a protection domain allocated, a completion queue and a queue pair
// (RC, else UC) created in it and moved to INIT on each ACTIVE port, then all destroyed. A
// call that fails is reported with its errno: a null protection domain is named, never used.
// Kept out of fabric.h so that the diagnostics do not rebuild every user of the fabric.
#pragma once

#include <string>
#include <vector>

namespace lattice::fabric {

struct DeviceQueues {
  std::string device;    // as list_devices() names it
  bool emulated = false;
  std::string error;     // the first call that failed: "ibv_alloc_pd returned no protection domain (...)"
  std::string done;      // when it worked: "pd, cq, uc qp INIT on port 2"
};

// The system's devices (if its verbs library loads), then the emulated ones if asked for. A
// device that cannot be opened or queried is left out (list_devices() reports it). Blocks
// only as long as the device calls do. Thread-safe.
std::vector<DeviceQueues> try_device_queues(bool include_emulated);

}  // namespace lattice::fabric
