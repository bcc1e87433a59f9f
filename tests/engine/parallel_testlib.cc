#include "parallel_testlib.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "lattice/cluster/group.h"
#include "lattice/coll/comm.h"

namespace lattice::engine::testing {

namespace fs = std::filesystem;

TempDir::TempDir(const std::string& prefix)
    : dir_(fs::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()))) {
  fs::create_directories(dir_);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string cached_model(const std::string& path, const MakeModelOptions& o) {
  if (fs::exists(path)) return path;
  auto r = make_model(o, path);
  EXPECT_TRUE(r.ok()) << path << ": " << r.status().to_string();
  return path;
}

LoadOptions shard_of(int rank, int world, std::vector<double> weights, bool expert_parallel) {
  LoadOptions lo;
  lo.shard.rank = rank;
  lo.shard.world = world;
  lo.shard.weights = std::move(weights);
  lo.shard.expert_parallel = expert_parallel;
  return lo;
}

std::vector<Status> on_threads(int world, const std::function<Status(int)>& fn) {
  std::vector<Status> st(world);
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r) th.emplace_back([&, r] { st[r] = fn(r); });
  for (auto& t : th) t.join();
  return st;
}

std::vector<Status> on_local_ranks(int world, const std::string& uri,
                                   const std::function<Status(int, parallel::CommGroup&)>& fn) {
  auto g = cluster::make_local_groups(world, uri, Deadline::after(std::chrono::seconds(60)));
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return std::vector<Status>(world, g.status());
  return on_threads(world, [&](int r) -> Status {
    LATTICE_ASSIGN_OR_RETURN(auto comm, coll::Communicator::create(*(*g)[r]));
    parallel::CommGroup group(*comm);
    return fn(r, group);
  });
}

std::vector<int32_t> greedy(Session& s, std::span<const int32_t> prompt, int n) {
  std::vector<int32_t> out;
  const Status pre = s.prefill(prompt);
  EXPECT_TRUE(pre.ok()) << pre.to_string();
  if (!pre.ok()) return out;
  for (int i = 0; i < n; ++i) {
    auto t = s.argmax();
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (!t.ok()) return out;
    out.push_back(*t);
    const Status d = s.decode(*t);
    EXPECT_TRUE(d.ok()) << d.to_string();
    if (!d.ok()) return out;
  }
  return out;
}

std::vector<int32_t> single_node_greedy(const std::string& path, std::span<const int32_t> prompt, int n,
                                        uint32_t n_ctx) {
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return {};
  auto s = Session::create(**m, {.n_ctx = n_ctx});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? greedy(**s, prompt, n) : std::vector<int32_t>{};
}

int32_t argmax_of(std::span<const float> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  return best;
}

Trace single_node_trace(const std::string& path, std::span<const int32_t> prompt, int steps, uint32_t n_ctx) {
  Trace tr;
  auto m = Model::load(path);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return tr;
  auto s = Session::create(**m, {.n_ctx = n_ctx});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return tr;
  EXPECT_TRUE((*s)->prefill(prompt).ok());
  for (int i = 0; i < steps; ++i) {
    auto lg = (*s)->logits();
    tr.logits.emplace_back(lg.begin(), lg.end());
    tr.tokens.push_back(argmax_of(lg));
    EXPECT_TRUE((*s)->decode(tr.tokens.back()).ok());
  }
  return tr;
}

std::string lattice_bin() { return std::string(LATTICE_BINARY_DIR) + "/lattice"; }

Ran run_lattice(const std::string& args, bool keep_err, const std::string& env) {
  Ran r;
  const std::string cmd = env + (env.empty() ? "" : " ") + lattice_bin() + " " + args + (keep_err ? " 2>&1" : " 2>/dev/null");
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
    const int st = ::pclose(p);
    r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  return r;
}

}  // namespace lattice::engine::testing
