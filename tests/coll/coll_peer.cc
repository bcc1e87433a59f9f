// One rank of the coll process tests: joins the cluster from the environment (LATTICE_RANK,
// LATTICE_WORLD_SIZE, LATTICE_COORDINATOR, LATTICE_PROVIDER, LATTICE_SECRET), then
//   coll_peer check ITERS   every op once plus ITERS all-reduces, checked; prints "ok"
//   coll_peer loop          all-reduces (small: one-shot; large: ring) until one fails; prints
//                           "running" after the first, then "error <code> peer <p>"; then
//                           shrinks the cluster, runs one checked all-reduce on the survivors
//                           and prints "shrunk <world> ok"
// Exit status: 0 on success, 3 on a collective error, 2 on setup errors.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lattice/cluster/cluster.h"
#include "lattice/coll/coll.h"
#include "lattice/coll/reference.h"

using namespace lattice;
using namespace lattice::coll;

namespace {

Status checked_all_reduce(Communicator& comm, size_t n, Algorithm algo) {
  reference::Case c{CollOp::kAllReduce, comm.world_size(), n, 0};
  auto in = reference::make_buffer(DType::kF32, n), out = reference::make_buffer(DType::kF32, n);
  reference::fill_case_input(c, DType::kF32, ReduceOp::kSum, comm.rank(), in.data());
  CollOptions o;
  o.algo = algo;
  o.timeout = std::chrono::seconds(30);
  LATTICE_RETURN_IF_ERROR(all_reduce(comm, in.data(), out.data(), n, DType::kF32, ReduceOp::kSum, o));
  std::string e = reference::check_output(c, DType::kF32, ReduceOp::kSum, comm.rank(), out.data());
  return e.empty() ? Status::Ok() : Corrupt(e);
}

Status check_every_op(Communicator& comm) {
  const CollOp ops[] = {CollOp::kAllGather, CollOp::kReduceScatter, CollOp::kBroadcast, CollOp::kReduce,
                        CollOp::kAllToAll};
  for (CollOp op : ops) {
    reference::Case c{op, comm.world_size(), 4097, comm.world_size() - 1};
    auto in = reference::make_buffer(DType::kBF16, reference::in_elems(c));
    auto out = reference::make_buffer(DType::kBF16, reference::out_elems(c));
    reference::fill_case_input(c, DType::kBF16, ReduceOp::kMax, comm.rank(), in.data());
    Status s;
    switch (op) {
      case CollOp::kAllGather: s = all_gather(comm, in.data(), out.data(), c.count, DType::kBF16); break;
      case CollOp::kReduceScatter: s = reduce_scatter(comm, in.data(), out.data(), c.count, DType::kBF16, ReduceOp::kMax); break;
      case CollOp::kBroadcast: s = broadcast(comm, in.data(), out.data(), c.count, DType::kBF16, c.root); break;
      case CollOp::kReduce: s = reduce(comm, in.data(), out.data(), c.count, DType::kBF16, ReduceOp::kMax, c.root); break;
      default: s = all_to_all(comm, in.data(), out.data(), c.count, DType::kBF16); break;
    }
    LATTICE_RETURN_IF_ERROR(s);
    std::string e = reference::check_output(c, DType::kBF16, ReduceOp::kMax, comm.rank(), out.data());
    if (!e.empty()) return Corrupt(std::string(to_string(op)) + ": " + e);
  }
  return barrier(comm);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string mode = argc > 1 ? argv[1] : "check";
  int iters = argc > 2 ? std::atoi(argv[2]) : 100;
  auto opts = cluster::cluster_options_from_env();
  if (!opts.ok()) {
    std::printf("setup %s\n", opts.status().to_string().c_str());
    return 2;
  }
  opts->peer_timeout = std::chrono::milliseconds(1000);
  auto cl = cluster::join_cluster(*opts, Deadline::after(std::chrono::seconds(60)));
  if (!cl.ok()) {
    std::printf("setup %s\n", cl.status().to_string().c_str());
    return 2;
  }
  auto comm = Communicator::create(**cl);
  if (!comm.ok()) {
    std::printf("setup %s\n", comm.status().to_string().c_str());
    return 2;
  }
  if (mode == "check") {
    Status s = check_every_op(**comm);
    for (int i = 0; s.ok() && i < iters; ++i)
      s = checked_all_reduce(**comm, i % 2 ? 1000 : 70001, i % 3 ? Algorithm::kAuto : Algorithm::kRecursive);
    if (!s.ok()) {
      std::printf("error %s\n", s.to_string().c_str());
      return 3;
    }
    (void)barrier(**comm);  // errors here only mean a faster rank already left
    std::printf("ok\n");
    return 0;
  }
  // loop
  Status s;
  for (long i = 0; i < 100000000L; ++i) {
    s = checked_all_reduce(**comm, i % 2 ? 1000 : 70001, Algorithm::kAuto);
    if (!s.ok()) break;
    if (i == 0) std::printf("running\n");
  }
  std::printf("error %s peer %d\n", std::string(to_string(s.code())).c_str(), s.peer());
  Status sh = (*cl)->shrink(Deadline::after(std::chrono::seconds(30)));
  if (!sh.ok()) {
    std::printf("shrink failed %s\n", sh.to_string().c_str());
    return 3;
  }
  Status again = checked_all_reduce(**comm, 1000, Algorithm::kAuto);
  if (again.ok()) again = checked_all_reduce(**comm, 70001, Algorithm::kAuto);
  std::printf("shrunk %d %s\n", (*cl)->world_size(), again.ok() ? "ok" : again.to_string().c_str());
  (void)barrier(**comm);
  return again.ok() ? 0 : 3;
}
