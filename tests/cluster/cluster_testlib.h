// Helpers shared by the cluster tests and their separate-process peer (cluster_peer.cc).
#pragma once

#include <string>

#include "lattice/cluster/group.h"
#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::cluster::testing {

// Collective-free exchange: every rank posts one receive from and one send to every linked
// peer (a 64-byte message naming sender, receiver and epoch), waits for all of them, and
// checks each received message against what that peer must have sent. kCorrupt on a wrong
// payload, the endpoint's error (kPeerLost...) on a failed operation.
Status exchange_with_all(Group& g, Deadline deadline);

}  // namespace lattice::cluster::testing
