// The public collectives: validate, resolve the algorithm, build the plan, execute it.
#include "lattice/coll/coll.h"

#include "lattice/coll/plan/ring_route.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace lattice::coll {
namespace {

Deadline deadline_of(const CollOptions& o) { return o.deadline ? *o.deadline : Deadline::after(o.timeout); }

Status run(Communicator& comm, CollOp op, const void* in, void* out, size_t count, DType dtype, ReduceOp rop,
           int root, bool in_place, const CollOptions& o) {
  if (root < 0 || root >= comm.world_size())
    return InvalidArgument("coll: root " + std::to_string(root) + " out of range for " +
                           std::to_string(comm.world_size()) + " ranks");
  if (count > (size_t{1} << 40)) return InvalidArgument("coll: count " + std::to_string(count) + " too large");
  LATTICE_RETURN_IF_ERROR(comm.refresh());
  plan::Shape shape{op, comm.rank(), comm.world_size(), count, root, in_place};
  Algorithm algo = resolve_algorithm(comm, op, count, dtype, o.algo);
  auto p = comm.plan_for(shape, algo);
  if (!p.ok()) return p.status();
  Status s = comm.execute(**p, dtype, rop, in, out, o.chunk_bytes, deadline_of(o));
  return s.ok() ? s : s.with_context(std::string(to_string(op)));
}

Status need(const void* p, const char* what) {
  return p ? Status::Ok() : InvalidArgument(std::string("coll: ") + what + " is null");
}

}  // namespace

Algorithm resolve_algorithm(const Communicator& comm, CollOp op, size_t count, DType dtype, Algorithm requested) {
  if (requested != Algorithm::kAuto) return requested;
  if (!comm.full_mesh()) return Algorithm::kRing;
  // The landing-zone paths count only where this communicator has them enabled.
  return plan::choose_algorithm(op, count * dtype_size(dtype), comm.world_size(), comm.twoshot_ready());
}

Status all_reduce(Communicator& comm, const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                  const CollOptions& o) {
  if (count) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  LATTICE_RETURN_IF_ERROR(comm.refresh());
  bool in_place = in == nullptr || in == out;
  const Algorithm algo = resolve_algorithm(comm, CollOp::kAllReduce, count, dtype, o.algo);
  // One-sided paths where every link writes passively; the plans (two-sided) elsewhere.
  if (algo == Algorithm::kOneShot && comm.rma_ready() && comm.rma_zone_bytes() > 0 &&
      count * dtype_size(dtype) <= comm.rma_zone_bytes()) {
    Status s = comm.all_reduce_rma(in_place ? out : in, out, count, dtype, op, deadline_of(o));
    return s.ok() ? s : s.with_context("all_reduce");
  }
  if (algo == Algorithm::kTwoShot && comm.twoshot_ready()) {
    Status s = comm.twoshot(CollOp::kAllReduce, in_place ? out : in, out, count, dtype, op, o.chunk_bytes,
                            deadline_of(o));
    return s.ok() ? s : s.with_context("all_reduce");
  }
  const auto* src = static_cast<const std::byte*>(in_place ? out : in);
  const size_t es = dtype_size(dtype), slice = comm.options().slice_bytes / es;
  if (slice == 0 || count <= slice) return run(comm, CollOp::kAllReduce, src, out, count, dtype, op, 0, in_place, o);
  // Near-equal slices (equal ones share one cached plan) under one deadline for them all.
  CollOptions so = o;
  so.deadline = deadline_of(o);
  auto* dst = static_cast<std::byte*>(out);
  const size_t parts = (count + slice - 1) / slice, per = (count + parts - 1) / parts;
  for (size_t done = 0; done < count; done += per) {
    const size_t n = std::min(per, count - done);
    LATTICE_RETURN_IF_ERROR(run(comm, CollOp::kAllReduce, src + done * es, dst + done * es, n, dtype, op, 0, in_place, so));
  }
  return Status::Ok();
}

Status all_gather(Communicator& comm, const void* in, void* out, size_t count, DType dtype, const CollOptions& o) {
  if (count) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  const std::byte* mine = static_cast<std::byte*>(out) + size_t(comm.rank()) * count * dtype_size(dtype);
  bool in_place = in == nullptr || in == mine;
  LATTICE_RETURN_IF_ERROR(comm.refresh());
  if (comm.full_mesh() && comm.twoshot_ready() &&
      resolve_algorithm(comm, CollOp::kAllGather, count, dtype, o.algo) == Algorithm::kTwoShot) {
    Status s = comm.twoshot(CollOp::kAllGather, in_place ? mine : in, out, count, dtype, ReduceOp::kSum, o.chunk_bytes,
                            deadline_of(o));
    return s.ok() ? s : s.with_context("all_gather");
  }
  return run(comm, CollOp::kAllGather, in_place ? mine : in, out, count, dtype, ReduceOp::kSum, 0, in_place, o);
}

Status reduce_scatter(Communicator& comm, const void* in, void* out, size_t count, DType dtype, ReduceOp op,
                      const CollOptions& o) {
  if (count) LATTICE_RETURN_IF_ERROR(need(out, "out"));
  // Plans read all of `in` into scratch before writing `out`, so overlap is safe; null in
  // means the full input sits in out's place shifted back by rank * count.
  const size_t block = count * dtype_size(dtype);
  const void* src = in ? in : static_cast<std::byte*>(out) - size_t(comm.rank()) * block;
  LATTICE_RETURN_IF_ERROR(comm.refresh());
  // The one-sided path writes out chunk by chunk while it still sends from in: out must be
  // apart from in or exactly this rank's block of it.
  const auto in_addr = reinterpret_cast<uintptr_t>(src), out_addr = reinterpret_cast<uintptr_t>(out);
  const bool apart = out_addr + block <= in_addr || in_addr + size_t(comm.world_size()) * block <= out_addr ||
                     out_addr == in_addr + size_t(comm.rank()) * block;
  if (apart && comm.full_mesh() && comm.twoshot_ready() &&
      resolve_algorithm(comm, CollOp::kReduceScatter, count, dtype, o.algo) == Algorithm::kTwoShot) {
    Status s = comm.twoshot(CollOp::kReduceScatter, src, out, count, dtype, op, o.chunk_bytes, deadline_of(o));
    return s.ok() ? s : s.with_context("reduce_scatter");
  }
  return run(comm, CollOp::kReduceScatter, src, out, count, dtype, op, 0, true, o);
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
  LATTICE_RETURN_IF_ERROR(comm.refresh());
  bool in_place = in == nullptr || in == out;
  const int w = comm.world_size();
  if (!comm.full_mesh() && w > 1) {
    // A partial mesh: every rank's whole input goes around the route (all_gather), then each
    // rank keeps the blocks addressed to it. w times the traffic of a direct exchange, which
    // MoE-sized token batches afford; a store-and-forward ring would do better.
    if (o.algo != Algorithm::kAuto && o.algo != Algorithm::kRing)
      return InvalidArgument("coll: algorithm " + std::string(to_string(o.algo)) +
                             " needs a full mesh; this topology only allows ring");
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
  return run(comm, CollOp::kAllToAll, in_place ? out : in, out, count, dtype, ReduceOp::kSum, 0, in_place, o);
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
