// Group: a set of ranks that can talk, the thing collectives and the distributed engine run
// on. The cluster bootstrap (processes, hosts) and the in-process builder below (ranks as
// threads, for tests) both produce one, so the layers above never branch on how ranks met.
//
// A rank reaches a peer through one or more Links (several cables per pair are allowed);
// a pair without a link (a ring, a partial mesh) has none and software forwards. Each link
// names its provider and the completion queues its endpoint reports to, so a collective can
// register staging memory with the right provider and poll the right queues.
//
// Thread safety: a Group is used by one thread at a time (the rank's own thread), like the
// endpoints it holds. Ownership: the Group owns its providers, queues and endpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lattice/core/deadline.h"
#include "lattice/core/status.h"
#include "lattice/fabric/fabric.h"

namespace lattice::cluster {

struct Link {
  fabric::Endpoint* endpoint = nullptr;
  fabric::Provider* provider = nullptr;
  fabric::CompletionQueue* send_cq = nullptr;
  fabric::CompletionQueue* recv_cq = nullptr;
};

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Bumped by every membership change (shrink, rejoin); all members agree on it.
  virtual uint64_t epoch() const = 0;
  // The links to `peer` (empty for self or an unlinked pair). The first is the preferred one.
  virtual std::span<const Link> links(int peer) const = 0;
  // Convenience: the first link's endpoint, or nullptr.
  fabric::Endpoint* endpoint(int peer) const {
    auto l = links(peer);
    return l.empty() ? nullptr : l.front().endpoint;
  }
  // The providers this rank uses (one per kind of link), to register memory with.
  virtual std::span<fabric::Provider* const> providers() const = 0;
  // False once the group's membership declared `rank` dead (any rank, linked to this one or
  // not: on a ring, a collective waiting on a live neighbour must still learn that a rank two
  // hops away died). Groups without membership: true.
  virtual bool peer_alive(int rank) const {
    (void)rank;
    return true;
  }
  // Whether ranks a and b (any two, not only this rank's pairs) have a link: the whole graph,
  // the same on every rank, so collectives can agree on a route (a ring through a partial
  // mesh). The default knows only this rank's own pairs and assumes the others are linked.
  virtual bool pair_linked(int a, int b) const {
    if (a == b) return false;
    if (a == rank()) return !links(b).empty();
    if (b == rank()) return !links(a).empty();
    return true;
  }
};

// A Group for size 1: no peers, no links. Callers never branch on "am I distributed".
std::unique_ptr<Group> make_single_group();

// Ranks as threads in one process, full mesh over `provider_uri` ("shm", "tcp://127.0.0.1:0"):
// returns world_size groups, group i for rank i, connected within `deadline`. For tests and
// benchmarks; each group must then be used by one thread.
Result<std::vector<std::unique_ptr<Group>>> make_local_groups(int world_size, std::string_view provider_uri,
                                                              Deadline deadline,
                                                              const fabric::EndpointOptions& options = {});

}  // namespace lattice::cluster
