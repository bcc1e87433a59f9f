// The figures of each link the dashboard draws: one-way latency and bandwidth, as `lattice
// ping` measures them (8-byte send ping-pongs; a timed stream of sends), over the cluster's
// own fabric links, once at serve start; or the topology file's (latency_us, gbps: `lattice
// topo --discover` writes them) when it gives both for every link.
//
// probe_links() is collective: every rank calls it, right after joining and before anything
// else uses the links (the collectives come after; it leaves no receive posted and no send
// outstanding). Pairs run one at a time between control-plane barriers, so measurements do not
// share the machine; each is short (kPings ping-pongs, about kStreamTime of stream). Every
// wait has the deadline given.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "lattice/cluster/cluster.h"
#include "lattice/core/deadline.h"
#include "lattice/core/status.h"
#include "lattice/serve/link_topology.h"

namespace lattice::serve {

// Round trips timed, after kLinkWarmup untimed ones: a link's first few dozen round trips run
// while the peer's progress thread still naps between polls (`lattice ping --iters 50` reads
// 529 us one way over shm where 500 read 0.37 us), so a short probe measured the naps.
inline constexpr int kLinkWarmup = 200;
inline constexpr int kLinkPings = 500;
inline constexpr auto kLinkStreamTime = std::chrono::milliseconds(50);

// This rank's links to higher-ranked peers, measured (by the peer's current rank).
Result<std::map<int, LinkFigures>> probe_links(cluster::Cluster& c, Deadline deadline);

}  // namespace lattice::serve
