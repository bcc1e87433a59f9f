// Plans: what each rank sends, receives and computes, step by step, as plain data. Built
// from (op, algorithm, rank, world size, count) alone, so they are unit-tested without a
// network, and executed by one generic executor (exec.h) on any provider.
//
// Units: offsets and counts are in ELEMENTS of the collective's dtype.
// Buffers: kIn (the caller's input), kOut (the caller's output), kTmp (scratch owned by the
// communicator, plan.tmp_elems long). When in_place, kIn and kOut are the same memory and
// plans avoid reading kIn after writing kOut.
// A step: post every send and receive (several messages per transfer when a transfer is
// longer than the chunk size), wait for all, then run `after` in order. Within a step no
// send reads memory that a receive of the same step writes. A receive either copies into
// its destination or (reduce = true) combines it: dst = op(dst, received).
// Both ends of a pair list their transfers to each other in the same order, so ordered,
// reliable endpoints match them without tags.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::coll {

// oneshot: everyone sends everything to everyone, one round. ring: reduce-scatter then
// all-gather around 0 -> 1 -> ... (2(w-1) steps). bidir: the same with half the buffer going
// each way round (both directions of every link busy). recursive: recursive doubling (whole
// buffer, log2 w steps). halving: Rabenseifner, reduce-scatter by recursive halving then
// all-gather by recursive doubling (log2 w steps, bandwidth-optimal volume). twoshot:
// reduce-scatter straight to each segment's owner, then all-gather straight from it (two
// rounds; one-sided through landing zones where the provider writes passively). tree:
// binomial tree (broadcast, reduce).
enum class Algorithm : uint8_t { kAuto, kOneShot, kRing, kRecursive, kTree, kTwoShot, kBidir, kHalving };
std::string_view to_string(Algorithm a);
Result<Algorithm> parse_algorithm(std::string_view s);

enum class CollOp : uint8_t {
  kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce, kAllToAll, kBarrier,
};
std::string_view to_string(CollOp op);
Result<CollOp> parse_coll_op(std::string_view s);

namespace plan {

enum class Buf : uint8_t { kIn, kOut, kTmp };

struct Ref {
  Buf buf = Buf::kOut;
  size_t off = 0;
};

struct Transfer {
  int peer = 0;
  Ref ref;          // send: source; receive: destination
  size_t n = 0;
  bool reduce = false;  // receive only: dst = op(dst, received)
};

struct Local {
  enum Kind : uint8_t { kCopy, kReduce } kind = kCopy;
  Ref dst, a, b;  // kCopy: dst = a; kReduce: dst = op(a, b)
  size_t n = 0;
};

struct Step {
  std::vector<Transfer> sends, recvs;
  std::vector<Local> after;
  // May start while the previous step (whose `after` is empty) is still in flight: the executor
  // then moves each chunk as soon as the memory it touches is ready (Communicator pipelining;
  // the ring plans set it). The result is the same as running the steps one after the other.
  bool overlap_prev = false;
};

struct Plan {
  Algorithm algo = Algorithm::kAuto;
  size_t tmp_elems = 0;
  std::vector<Step> steps;
};

// How many elements of each buffer (indexed by Buf) the plan touches: [0, extent).
struct Extents {
  size_t of[3] = {0, 0, 0};
};
Extents extents(const Plan& p);

struct Shape {
  CollOp op = CollOp::kAllReduce;
  int rank = 0;
  int world = 1;
  // all_reduce, broadcast, reduce: the buffer; all_gather: each rank's input; reduce_scatter:
  // each rank's output block; all_to_all: the block sent to each peer.
  size_t count = 0;
  int root = 0;
  bool in_place = false;
};

// Builds the plan for `algo` (never kAuto: see choose_algorithm). kInvalidArgument when the
// algorithm does not implement the op.
Result<Plan> build(const Shape& shape, Algorithm algo);

// The algorithm kAuto stands for, from the op, bytes per rank buffer, world size and whether
// the group has the landing-zone paths (passive one-sided writes on every link: shm, RDMA).
Algorithm choose_algorithm(CollOp op, size_t bytes, int world, bool rma_write);

// Which algorithms implement `op` (kAuto excluded).
std::vector<Algorithm> algorithms_for(CollOp op);
// Whether `algo` implements `op` at this world size (some need a power of two).
bool implements(CollOp op, Algorithm algo, int world);

// Segment k of n elements split into `parts` near-equal parts: [begin, begin + size).
struct Segment {
  size_t begin = 0, size = 0;
};
Segment segment(size_t n, int parts, int k);

}  // namespace plan
}  // namespace lattice::coll
