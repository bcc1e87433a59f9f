// Collectives: free functions on a Communicator (comm.h), each with an options struct.
//
//   all_reduce      in[count] from every rank, reduced, into out[count] on every rank
//   all_gather      in[count] from every rank into out[world * count], by rank
//   reduce_scatter  in[world * count] from every rank, reduced; rank r gets block r in out[count]
//   broadcast       root's in[count] into every rank's out[count] (in is read at root only)
//   reduce          in[count] from every rank, reduced, into root's out[count]
//   all_to_all      block q of in[world * count] goes to rank q; block q of out comes from q
//   all_to_allv     the same with a count and an offset per peer on each side (MoE dispatch)
//   barrier         returns once every rank entered it
//   send / recv     point to point, matched in call order per pair
//
// In place: pass in == out (all_gather: in == out + rank * count; reduce_scatter:
// out == in + rank * count; null `in` also means in place). count 0 is fine.
// Every rank must make the same calls in the same order with the same count, dtype, op,
// root, algorithm and chunk_bytes. Results are bit-identical on every rank and across runs:
// contributions are combined in an order fixed by the plan, never by arrival time.
//
// Blocking: each call busy-polls until done or the deadline; a dead peer makes the call fail
// with kPeerLost naming it, on every rank linked to it, well within the deadline. The
// communicator is then sticky-failed until the group's epoch changes (shrink).
#pragma once

#include <chrono>
#include <optional>
#include <span>

#include "lattice/coll/comm.h"
#include "lattice/coll/dtype.h"
#include "lattice/coll/plan/plan.h"

namespace lattice::coll {

struct CollOptions {
  Algorithm algo = Algorithm::kAuto;
  // When unset, the call gives up `timeout` after it starts.
  std::optional<Deadline> deadline;
  std::chrono::milliseconds timeout{60000};
  // Largest message (0: the communicator's staging slot). Smaller values split transfers
  // into more messages; every rank must pass the same value.
  size_t chunk_bytes = 0;
};

Status all_reduce(Communicator& comm, const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                  const CollOptions& options = {});
Status all_gather(Communicator& comm, const void* in, void* out, size_t count, DType dtype,
                  const CollOptions& options = {});
Status reduce_scatter(Communicator& comm, const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                      const CollOptions& options = {});
Status broadcast(Communicator& comm, const void* in, void* out, size_t count, DType dtype, int root,
                 const CollOptions& options = {});
Status reduce(Communicator& comm, const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root,
              const CollOptions& options = {});
Status all_to_all(Communicator& comm, const void* in, void* out, size_t count, DType dtype,
                  const CollOptions& options = {});
// Rank r sends send_counts[q] elements at in + send_offsets[q] to rank q and receives
// recv_counts[q] elements from q at out + recv_offsets[q] (offsets and counts in elements,
// one per rank, own rank included: a local copy). recv_counts[q] on r must be send_counts[r]
// on q (a mismatch fails the call, or the next one on that link, with a size mismatch). Each
// range of in must be apart from every range of out. Needs a full mesh (kUnavailable on a
// partial one).
Status all_to_allv(Communicator& comm, const void* in, std::span<const size_t> send_counts,
                   std::span<const size_t> send_offsets, void* out, std::span<const size_t> recv_counts,
                   std::span<const size_t> recv_offsets, DType dtype, const CollOptions& options = {});
Status barrier(Communicator& comm, const CollOptions& options = {});
Status send(Communicator& comm, const void* buf, size_t count, DType dtype, int peer, const CollOptions& options = {});
Status recv(Communicator& comm, void* buf, size_t count, DType dtype, int peer, const CollOptions& options = {});

// The algorithm a call with these arguments runs (resolves kAuto; a sliced all_reduce: its
// slices' algorithm). The whole choice, path included, is choose() in choose.h.
Algorithm resolve_algorithm(const Communicator& comm, CollOp op, size_t count, DType dtype, Algorithm requested);

}  // namespace lattice::coll
