// The verbs provider's endpoints: one QP each, the staged reliability protocol and RC one-sided
// operations; a progress thread per endpoint (provider.h has the overview, endpoint_impl.h the
// files their code is in).
#pragma once

#include <cstdint>
#include <memory>

#include "lattice/fabric/fabric.h"
#include "lattice/fabric/verbs/cq.h"
#include "lattice/fabric/verbs/provider.h"

namespace lattice::fabric::verbs {

// Counters of the reliability layer (tests read them through endpoint_stats()).
struct EndpointStats {
  uint64_t chunks_sent = 0, retransmits = 0, bad_crc = 0, duplicates = 0, gaps = 0, acks_sent = 0;
  uint64_t stale = 0;  // sealed sessions: replayed or reordered frames, dropped undelivered
  bool sealed = false;
};

Result<std::unique_ptr<Endpoint>> make_endpoint(std::shared_ptr<Device> dev, VerbsCompletionQueue* send_cq,
                                                VerbsCompletionQueue* recv_cq, const EndpointOptions& options);

// Test hook: the reliability counters of a verbs endpoint (nullopt-like zero for others).
EndpointStats endpoint_stats(const Endpoint* ep);

}  // namespace lattice::fabric::verbs
