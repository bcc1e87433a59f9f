// Helpers of the coll tests: the library's scalar reference (reference.h) under the test
// namespace, and a plan simulator (ranks' plans run against each other over in-memory FIFOs,
// no network).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "lattice/coll/coll.h"
#include "lattice/coll/reference.h"

namespace lattice::coll::test {

using namespace lattice::coll::reference;

// Calls the public collective `c.op` (root c.root) with these buffers.
Status run_op(Communicator& comm, const Case& c, DType t, ReduceOp op, const void* in, void* out,
              const CollOptions& o);

// Runs fn(rank) on one thread per rank (ranks as threads); returns each rank's status.
std::vector<Status> on_all(int world, const std::function<Status(int)>& fn);

// Runs case `c` on every rank (one thread each, rank r on comms[r]) with the reference's
// inputs and checks every rank's output against it: "" or the first failure (a rank's error
// or wrong output).
std::string run_and_check(const std::vector<Communicator*>& comms, const Case& c, DType t, ReduceOp op,
                          const CollOptions& o);

// Runs plans of all ranks in memory; "" or the failure (deadlock, size mismatch, wrong result).
std::string simulate(const Case& c, DType t, ReduceOp op, Algorithm algo, bool in_place);

}  // namespace lattice::coll::test
