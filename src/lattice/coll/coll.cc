// The public collectives: validate, make the call's one algorithm choice (choose.h), run it:
// a plan through the executor (comm.cc, pipeline.cc) or a landing-zone path (landing.cc, twoshot.cc).
#include "lattice/coll/coll.h"

#include "lattice/coll/choose.h"
#include "lattice/coll/plan/ring_route.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace lattice::coll {
namespace {

Deadline deadline_of(const CollOptions& o) { return o.deadline ? *o.deadline : Deadline::after(o.timeout); }

Status check_call(Communicator& comm, size_t count, int root) {
  if (root < 0 || root >= comm.world_size())
    return InvalidArgument("coll: root " + std::to_string(root) + " out of range for " +
                           std::to_string(comm.world_size()) + " ranks");
  if (count > (size_t{1} << 40)) return InvalidArgument("coll: count " + std::to_string(count) + " too large");
  return Status::Ok();
}

Status in_context(Status s, CollOp op) { return s.ok() ? s : s.with_context(std::string(to_string(op))); }

// Runs the plan of `algo` (already chosen) for one shape. A plan that cannot be built (an
// algorithm this shape does not allow) says so in plan::build's words.
Status run_plan(Communicator& comm, CollOp op, Algorithm algo, const void* in, void* out, size_t count, DType dtype,
                ReduceOp rop, int root, bool in_place, size_t chunk_bytes, Deadline deadline) {
  plan::Shape shape{op, comm.rank(), comm.world_size(), count, root, in_place};
  auto p = comm.plan_for(shape, algo);
  if (!p.ok()) return p.status();
  return in_context(comm.execute(**p, dtype, rop, in, out, chunk_bytes, deadline), op);
}

// The one choice of a call (choose.h), after the communicator caught up with the group's epoch.
Result<Choice> choose_for(Communicator& comm, CollOp op, size_t count, DType dtype, const CollOptions& o,
                          bool buffers_apart = true) {
  LATTICE_RETURN_IF_ERROR(comm.refresh());
  CallFacts facts = facts_of(comm, op, count, dtype_size(dtype), o.algo);
  facts.buffers_apart = buffers_apart;
  return choose(facts);
}

// The collectives whose only path is a plan: broadcast, reduce, barrier (and all_to_all on a
// full mesh).
Status run(Communicator& comm, CollOp op, const void* in, void* out, size_t count, DType dtype, ReduceOp rop,
           int root, bool in_place, const CollOptions& o) {
  LATTICE_RETURN_IF_ERROR(check_call(comm, count, root));
  LATTICE_ASSIGN_OR_RETURN(Choice c, choose_for(comm, op, count, dtype, o));
  return run_plan(comm, op, c.algo, in, out, count, dtype, rop, root, in_place, o.chunk_bytes, deadline_of(o));
}

Status need(const void* p, const char* what) {
  return p ? Status::Ok() : InvalidArgument(std::string("coll: ") + what + " is null");
}

}  // namespace

Algorithm resolve_algorithm(const Communicator& comm, CollOp op, size_t count, DType dtype, Algorithm requested) {
  Result<Choice> c = choose(facts_of(comm, op, count, dtype_size(dtype), requested));
  return c.ok() ? c->algo : requested;
}

Status all_reduce(Communicator& comm, const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                  const CollOptions& o) {
  if (count) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  LATTICE_RETURN_IF_ERROR(check_call(comm, count, 0));
  const bool in_place = in == nullptr || in == out;
  const void* src = in_place ? out : in;
  LATTICE_ASSIGN_OR_RETURN(Choice c, choose_for(comm, CollOp::kAllReduce, count, dtype, o));
  const Deadline deadline = deadline_of(o);
  Status s;
  switch (c.path) {
    case Path::kOneShotZone:
      return in_context(comm.all_reduce_rma(src, out, count, dtype, op, deadline), CollOp::kAllReduce);
    case Path::kTwoShotZone:
      return in_context(comm.twoshot(CollOp::kAllReduce, src, out, count, dtype, op, o.chunk_bytes, deadline),
                        CollOp::kAllReduce);
    case Path::kSlicedPlan: {
      // Consecutive all-reduces of the slices under one deadline for them all.
      const size_t es = dtype_size(dtype);
      const auto* from = static_cast<const std::byte*>(src);
      auto* to = static_cast<std::byte*>(out);
      for (size_t done = 0; done < count && s.ok(); done += c.slice_count) {
        const size_t n = std::min(c.slice_count, count - done);
        s = run_plan(comm, CollOp::kAllReduce, c.algo, from + done * es, to + done * es, n, dtype, op, 0, in_place,
                     o.chunk_bytes, deadline);
      }
      return s;
    }
    default:
      return run_plan(comm, CollOp::kAllReduce, c.algo, src, out, count, dtype, op, 0, in_place, o.chunk_bytes,
                      deadline);
  }
}

Status all_gather(Communicator& comm, const void* in, void* out, size_t count, DType dtype, const CollOptions& o) {
  if (count) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  LATTICE_RETURN_IF_ERROR(check_call(comm, count, 0));
  const std::byte* mine = static_cast<std::byte*>(out) + size_t(comm.rank()) * count * dtype_size(dtype);
  const bool in_place = in == nullptr || in == mine;
  const void* src = in_place ? mine : in;
  LATTICE_ASSIGN_OR_RETURN(Choice c, choose_for(comm, CollOp::kAllGather, count, dtype, o));
  if (c.path == Path::kTwoShotZone)
    return in_context(
        comm.twoshot(CollOp::kAllGather, src, out, count, dtype, ReduceOp::kSum, o.chunk_bytes, deadline_of(o)),
        CollOp::kAllGather);
  return run_plan(comm, CollOp::kAllGather, c.algo, src, out, count, dtype, ReduceOp::kSum, 0, in_place, o.chunk_bytes,
                  deadline_of(o));
}

Status reduce_scatter(Communicator& comm, const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                      const CollOptions& o) {
  if (count) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  LATTICE_RETURN_IF_ERROR(check_call(comm, count, 0));
  // Plans read all of `in` into scratch before writing `out`, so overlap is safe; null in
  // means the full input sits in out's place shifted back by rank * count.
  const size_t block = count * dtype_size(dtype);
  const void* src = in ? in : static_cast<std::byte*>(out) - size_t(comm.rank()) * block;
  // The one-sided path writes out chunk by chunk while it still sends from in: out must be
  // apart from in or exactly this rank's block of it.
  const auto in_addr = reinterpret_cast<uintptr_t>(src), out_addr = reinterpret_cast<uintptr_t>(out);
  const bool apart = out_addr + block <= in_addr || in_addr + size_t(comm.world_size()) * block <= out_addr ||
                     out_addr == in_addr + size_t(comm.rank()) * block;
  LATTICE_ASSIGN_OR_RETURN(Choice c, choose_for(comm, CollOp::kReduceScatter, count, dtype, o, apart));
  if (c.path == Path::kTwoShotZone)
    return in_context(comm.twoshot(CollOp::kReduceScatter, src, out, count, dtype, op, o.chunk_bytes, deadline_of(o)),
                      CollOp::kReduceScatter);
  return run_plan(comm, CollOp::kReduceScatter, c.algo, src, out, count, dtype, op, 0, true, o.chunk_bytes,
                  deadline_of(o));
}

Status broadcast(Communicator& comm, const void* in, void* out, size_t count, DType dtype, int root,
                 const CollOptions& o) {
  if (count) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  bool in_place = in == nullptr || in == out;
  return run(comm, CollOp::kBroadcast, in_place ? out : in, out, count, dtype, ReduceOp::kSum, root, in_place, o);
}

Status reduce(Communicator& comm, const void* in, void* out, size_t count, DType dtype, ReduceOp op, int root,
              const CollOptions& o) {
  if (count && comm.rank() == root) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  if (count) LATTICE_RETURN_IF_ERROR(need(in ? in : out, "in"));
  bool in_place = in == nullptr || in == out;
  return run(comm, CollOp::kReduce, in ? in : out, out, count, dtype, op, root, in_place, o);
}

Status all_to_all(Communicator& comm, const void* in, void* out, size_t count, DType dtype, const CollOptions& o) {
  if (count) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  LATTICE_RETURN_IF_ERROR(check_call(comm, count, 0));
  const bool in_place = in == nullptr || in == out;
  LATTICE_ASSIGN_OR_RETURN(Choice c, choose_for(comm, CollOp::kAllToAll, count, dtype, o));
  if (c.path == Path::kGatherAround) {
    // A partial mesh: every rank's whole input goes around the route (all_gather, its own
    // call with its own choice), then each rank keeps the blocks addressed to it.
    const int w = comm.world_size();
    const size_t es = dtype_size(dtype), row = size_t(w) * count * es;
    std::vector<std::byte> all(size_t(w) * row);
    CollOptions go = o;
    go.algo = Algorithm::kAuto;
    Status s = all_gather(comm, in_place ? out : in, all.data(), size_t(w) * count, dtype, go);
    if (!s.ok()) return s.with_context("all_to_all");
    for (int q = 0; q < w && count > 0; ++q)
      std::memcpy(static_cast<std::byte*>(out) + size_t(q) * count * es,
                  all.data() + size_t(q) * row + size_t(comm.rank()) * count * es, count * es);
    return Status::Ok();
  }
  return run_plan(comm, CollOp::kAllToAll, c.algo, in_place ? out : in, out, count, dtype, ReduceOp::kSum, 0,
                  in_place, o.chunk_bytes, deadline_of(o));
}

Status all_to_allv(Communicator& comm, const void* in, std::span<const size_t> send_counts,
                   std::span<const size_t> send_offsets, void* out, std::span<const size_t> recv_counts,
                   std::span<const size_t> recv_offsets, DType dtype, const CollOptions& o) {
  const int w = comm.world_size(), r = comm.rank();
  for (auto [v, what] : {std::pair{send_counts, "send counts"}, std::pair{send_offsets, "send offsets"},
                         std::pair{recv_counts, "receive counts"}, std::pair{recv_offsets, "receive offsets"}})
    if (v.size() != size_t(w))
      return InvalidArgument(std::string("all_to_allv: ") + std::to_string(v.size()) + " " + what + " for " +
                             std::to_string(w) + " ranks");
  size_t total_in = 0, total_out = 0;
  for (int q = 0; q < w; ++q) {
    LATTICE_RETURN_IF_ERROR(check_call(comm, send_counts[q], 0));
    LATTICE_RETURN_IF_ERROR(check_call(comm, recv_counts[q], 0));
    total_in += send_counts[q], total_out += recv_counts[q];
  }
  if (send_counts[r] != recv_counts[r])
    return InvalidArgument("all_to_allv: rank " + std::to_string(r) + " sends itself " +
                           std::to_string(send_counts[r]) + " elements but receives " + std::to_string(recv_counts[r]));
  if (total_in) LATTICE_RETURN_IF_ERROR(need(in, "in"));
  if (total_out) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  LATTICE_RETURN_IF_ERROR(comm.refresh());
  if (w > 1 && !comm.full_mesh())
    return Unavailable("all_to_allv needs a link between every pair of ranks (this topology is a partial mesh)");
  // One step, in all_to_all's order (the next rank first, so that not everyone sends to rank
  // 0 first); empty transfers are left out on both ends alike; the own block is copied after.
  plan::Plan p;
  plan::Step st;
  for (int i = 1; i < w; ++i) {
    const int q = (r + i) % w, from = (r - i + w) % w;
    if (send_counts[q]) st.sends.push_back({q, {plan::Buf::kIn, send_offsets[q]}, send_counts[q]});
    if (recv_counts[from]) st.recvs.push_back({from, {plan::Buf::kOut, recv_offsets[from]}, recv_counts[from]});
  }
  if (send_counts[r])
    st.after.push_back({plan::Local::kCopy, {plan::Buf::kOut, recv_offsets[r]}, {plan::Buf::kIn, send_offsets[r]}, {},
                        send_counts[r]});
  p.algo = Algorithm::kOneShot;
  p.steps.push_back(std::move(st));
  Status s = comm.execute(p, dtype, ReduceOp::kSum, in, out, o.chunk_bytes, deadline_of(o));
  return s.ok() ? s : s.with_context("all_to_allv");
}

Status barrier(Communicator& comm, const CollOptions& o) {
  return run(comm, CollOp::kBarrier, nullptr, nullptr, 0, DType::kI32, ReduceOp::kSum, 0, false, o);
}

namespace {
Status point_to_point(Communicator& comm, const void* in, void* out, size_t count, DType dtype, int peer, bool is_send,
                      const CollOptions& o) {
  if (peer < 0 || peer >= comm.world_size() || peer == comm.rank())
    return InvalidArgument("coll: peer " + std::to_string(peer) + " is not another rank of the group");
  if (count) LATTICE_RETURN_IF_ERROR(need(is_send ? in : out, "buffer"));
  plan::Plan p;
  plan::Step st;
  plan::Transfer t{peer, {is_send ? plan::Buf::kIn : plan::Buf::kOut, 0}, count};
  (is_send ? st.sends : st.recvs).push_back(t);
  p.steps.push_back(std::move(st));
  Status s = comm.execute(p, dtype, ReduceOp::kSum, in, out, o.chunk_bytes, deadline_of(o));
  return s.ok() ? s : s.with_context(is_send ? "send" : "recv");
}
}  // namespace

Status send(Communicator& comm, const void* buf, size_t count, DType dtype, int peer, const CollOptions& o) {
  return point_to_point(comm, buf, nullptr, count, dtype, peer, true, o);
}

Status recv(Communicator& comm, void* buf, size_t count, DType dtype, int peer, const CollOptions& o) {
  return point_to_point(comm, nullptr, buf, count, dtype, peer, false, o);
}

}  // namespace lattice::coll
