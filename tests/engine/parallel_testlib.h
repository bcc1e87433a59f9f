// Shared helpers of the parallel tests (parallel_*_test.cc): a temporary directory of model
// files made once per test program, ranks as threads over real links (make_local_groups),
// shard options, the single node's greedy tokens to compare with, and `lattice` as a process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/parallel/comm_group.h"
#include "lattice/engine/runtime/session.h"

namespace lattice::engine::testing {

// <temp>/<prefix>-<pid>, made at construction and removed with everything in it at
// destruction (a static object: when the test program ends).
class TempDir {
 public:
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return dir_; }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

// `path`, made by make_model(o) unless it exists already (a failure fails the test).
std::string cached_model(const std::string& path, const MakeModelOptions& o);

// Rank `rank`'s shard of `world` (weights: relative shares; empty: equal).
LoadOptions shard_of(int rank, int world, std::vector<double> weights = {}, bool expert_parallel = false);

// fn(rank) on `world` threads at once; every rank's status.
std::vector<Status> on_threads(int world, const std::function<Status(int rank)>& fn);
// Ranks as threads over real links: make_local_groups(world, uri), then on each rank's own
// thread its communicator (creation may exchange with the peers) and fn(rank, group). When
// the links cannot be made, every rank's status is that error.
std::vector<Status> on_local_ranks(int world, const std::string& uri,
                                   const std::function<Status(int rank, parallel::CommGroup& group)>& fn);

// Greedy tokens: prefill `prompt`, then n times argmax and decode (fewer after a failure,
// which fails the test).
std::vector<int32_t> greedy(Session& s, std::span<const int32_t> prompt, int n);
// The same on the whole model at `path`, on one node.
std::vector<int32_t> single_node_greedy(const std::string& path, std::span<const int32_t> prompt, int n,
                                        uint32_t n_ctx = 64);

// One node's greedy tokens and the logits before each of them.
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
Trace single_node_trace(const std::string& path, std::span<const int32_t> prompt, int steps, uint32_t n_ctx);
int32_t argmax_of(std::span<const float> v);

// build/lattice ARGS through the shell (`env` in front, e.g. "XDG_CACHE_HOME=/x"): its exit
// code (-1 when it did not exit) and stdout, stderr too when keep_err.
struct Ran {
  int exit_code = -1;
  std::string out;
};
std::string lattice_bin();
Ran run_lattice(const std::string& args, bool keep_err = false, const std::string& env = "");

}  // namespace lattice::engine::testing
