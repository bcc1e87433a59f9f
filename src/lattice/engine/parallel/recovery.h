// Recovery after a lost rank: the survivors move to the next epoch together, agree on how far
// the generation got, and (the caller) re-place the model over themselves and re-prefill.
//
// Agreement on progress: every survivor reports the tokens it accepted and its sampler's
// random draws. The rank that got furthest wins (its tokens may already be printed); every
// other report must be a prefix of it, or the survivors disagree (kInternal: a bug).
//
// Fencing a minority: a rank that cannot complete the shrink within its deadline (it lost its
// links or the coordinator, or was evicted while stopped) does not retry: shrink_and_agree
// fails with kPeerLost naming what it lost, and the rank must stop (release what it holds and
// exit non-zero). A rank never loops on a loss without a bound.
//
// Thread safety: the rank's thread, like its Cluster.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "lattice/cluster/cluster.h"
#include "lattice/core/deadline.h"
#include "lattice/core/status.h"

namespace lattice::engine::parallel {

struct Progress {
  std::vector<int32_t> tokens;  // accepted so far (after the prompt)
  uint64_t draws = 0;           // the sampler's random draws
};

// Picks the furthest report; kInternal if one is not a prefix of it, kInvalidArgument for none.
Result<Progress> agree(const std::vector<Progress>& reports);

// "tokens" and "draws" as JSON text, and back (kCorrupt on anything malformed: the bytes come
// from another process).
std::string encode_progress(const Progress& p);
Result<Progress> decode_progress(const std::string& text);

struct Shrunk {
  Progress best;            // the agreed progress
  std::vector<int> lost;    // first-epoch ranks that are gone
  std::vector<int> members; // first-epoch ranks of the survivors, by new rank
  double shrink_ms = 0;
};

// Shrinks `cluster` to the survivors and agrees on progress, each within `timeout`.
// `members` are the first-epoch ranks of the members before the shrink, by rank.
Result<Shrunk> shrink_and_agree(cluster::Cluster& cluster, const std::vector<int>& members, const Progress& mine,
                                std::chrono::milliseconds timeout);

// A failure the survivors can recover from: a lost peer, or a collective that timed out or
// was cancelled waiting on one.
bool recoverable(const Status& s);

}  // namespace lattice::engine::parallel
