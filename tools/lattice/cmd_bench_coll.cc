// `lattice bench coll`: collective latency and bandwidth in the style of nccl-tests.
//
//   lattice bench coll --ranks 4 --provider shm --op all_reduce --min 8 --max 64M [--algo ring]
//                      [--dtype f32] [--redop sum] [--iters 100] [--check] [--json] [--procs]
//
// Ranks are threads of this process (each with its own provider, as separate processes would
// have), or with --procs separate processes of a local job (as `lattice launch` starts); under a launcher
// (LATTICE_WORLD_SIZE set) every process joins the cluster and runs one rank.
// Per size: untimed warm-up calls (`warmup` per round, rounds until --warmup-ms passed; the
// first size at least 200 ms), then `iters` calls each timed on every rank; an
// iteration's time is the slowest rank's (an all_reduce of the timings), and the reported
// time is the median over iterations. Bytes follow nccl-tests: the all_reduce/broadcast/
// reduce buffer, all_gather's output, reduce_scatter's input, all_to_all's buffer.
// algbw = bytes / time; busbw = algbw * the op's bus factor (all_reduce 2(n-1)/n, all_gather,
// reduce_scatter and all_to_all (n-1)/n, broadcast and reduce 1), comparable across ranks.
// --work BYTES: before every call each rank runs decode's kernel (a one-token Q4_0 matmul over its
// own weight, about BYTES of rows of a 256 MiB matrix in turn, one thread; --work-tokens N > 1:
// against N tokens at once, prefill's compute-bound matmul), as tensor-parallel
// ranks compute between their all-reduces; the call then also holds the wait for the last rank to
// arrive. The timed calls come in 8 rounds, each after every rank ran the kernel alone in turn.
// Each size then reports solo_us_mean (the kernel alone, mean over ranks), work_us_mean (the
// slowest rank's mean kernel time in lockstep), step_us_mean (the mean, over iterations, of
// the slowest rank's kernel + call): ranks that compute between collectives step at
// solo / (step - the call back to back) of their speed alone; and lockstep_wall_us_per_step (the
// slowest rank's wall clock over the lockstep iterations, per iteration): the ranks' pace. Beyond
// the cores the two part: ranks sharing a core interleave, so one rank's call completes only
// after its core-mate's next kernel, and each iteration's slowest step spans three kernels where
// the pace is two (docs/SIM.md, session 24).
// --op chain: not a collective but a pipeline's decode step, each iteration the buffer through
// ranks 0, 1, ..., W-1 (point to point), each rank running the --work kernel once it holds it,
// then the last rank's 4-byte broadcast (the chosen token); lockstep_wall_us_per_step is the
// pipeline's pace.
// Over an emulated tcp link (tcp?latency_us=L...), --json also reports emulator_cpu_us_per_call:
// the CPU its relays (fabric/tcp/link_emu.h) took over the timed calls, summed over the ranks,
// per call (with --work, the rounds' barriers too).
// Without --work, --json also reports time_us_per_call_wall: the slowest rank's wall clock over
// the timed calls, per call. The median is each iteration's slowest rank; beyond the cores a rank
// that runs ahead into its next call waits there for one off its core, which that counts and the
// calls' throughput does not (docs/SIM.md, session 21).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "lattice/cluster/cluster.h"
#include "lattice/cluster/group.h"
#include "lattice/cluster/launcher.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/coll/coll.h"
#include "lattice/coll/reference.h"
#include "lattice/core/size.h"
#include "lattice/fabric/tcp/link_emu.h"
#include "lattice/sim/calibrate.h"

namespace lattice::cli {
namespace {

using namespace lattice::coll;

struct Args {
  int ranks = 2;
  std::string provider = "shm";
  std::string op = "all_reduce";
  std::string min = "8";
  std::string max = "64M";
  int factor = 2;
  std::string algo = "auto";
  std::string dtype = "f32";
  std::string redop = "sum";
  int iters = 100;
  int warmup = 10;
  double warmup_ms = 20;
  std::string chunk = "256K";
  std::string direct_chunk = "1M";
  std::string slice = "1M";
  bool check = false;
  bool json = false;
  bool procs = false;
  bool insecure = false;
  std::string bind = "auto";
  double timeout_s = 120;
  int spin = 0;
  bool staged = false;
  std::string twoshot_chunk = "64K";
  int twoshot_depth = 4;
  std::string work = "0";
  int work_tokens = 1;
};

// Every size flag: the core parser, up to 1 GiB.
Result<size_t> parse_bytes(const std::string& s) { return parse_size(s, size_t{1} << 30); }

double bus_factor(CollOp op, int n) {
  switch (op) {
    case CollOp::kAllReduce: return n > 1 ? 2.0 * (n - 1) / n : 0;
    case CollOp::kAllGather:
    case CollOp::kReduceScatter:
    case CollOp::kAllToAll: return n > 1 ? double(n - 1) / n : 0;
    default: return 1;
  }
}

// Elements per rank block (reference::Case.count) for `bytes` in nccl-tests' convention.
size_t count_for(CollOp op, size_t bytes, size_t esize, int world) {
  size_t elems = bytes / esize;
  switch (op) {
    case CollOp::kAllGather:
    case CollOp::kReduceScatter:
    case CollOp::kAllToAll: return elems / size_t(world);
    default: return elems;
  }
}

struct Config {
  CollOp op;
  Algorithm algo;
  DType dtype;
  ReduceOp redop;
  size_t min, max, chunk;
  std::string provider;
  size_t twoshot_chunk;
  size_t direct_chunk;
  size_t slice;
  size_t work;
  int work_tokens = 1;  // the kernel's tokens: 1 is decode's matvec, more prefill's matmul
  bool chain = false;  // --op chain: a pipeline's decode step (chain_step) instead of a collective
};

Status call(Communicator& comm, const Config& c, const reference::Case& k, const void* in, void* out,
            const CollOptions& o) {
  switch (c.op) {
    case CollOp::kAllReduce: return all_reduce(comm, in, out, k.count, c.dtype, c.redop, o);
    case CollOp::kAllGather: return all_gather(comm, in, out, k.count, c.dtype, o);
    case CollOp::kReduceScatter: return reduce_scatter(comm, in, out, k.count, c.dtype, c.redop, o);
    case CollOp::kBroadcast: return broadcast(comm, in, out, k.count, c.dtype, 0, o);
    case CollOp::kReduce: return reduce(comm, in, out, k.count, c.dtype, c.redop, 0, o);
    case CollOp::kAllToAll: return all_to_all(comm, in, out, k.count, c.dtype, o);
    case CollOp::kBarrier: return barrier(comm, o);
  }
  return Internal("op");
}

// --op chain, one iteration: a pipeline's decode step. The buffer passes rank 0 -> 1 -> ... ->
// W-1 (each rank runs the kernel, if any, once it holds it, as a stage runs its layers), then the
// last rank broadcasts 4 bytes (the chosen token) to all. *work_us gains this rank's kernel time.
Status chain_step(Communicator& comm, const Config& c, const reference::Case& k, void* buf, sim::DecodeKernel* kernel,
                  double* work_us, const CollOptions& o) {
  const int world = comm.world_size(), rank = comm.rank();
  if (rank > 0) LATTICE_RETURN_IF_ERROR(recv(comm, buf, k.count, c.dtype, rank - 1, o));
  if (kernel) {
    const auto t0 = std::chrono::steady_clock::now();
    kernel->run();
    *work_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  if (rank + 1 < world) LATTICE_RETURN_IF_ERROR(send(comm, buf, k.count, c.dtype, rank + 1, o));
  int32_t token = rank == world - 1 ? 7 : 0;
  return broadcast(comm, &token, &token, 1, DType::kI32, world - 1, o);
}

// One rank's whole sweep; rank 0 prints.
Status run_rank(cluster::Group& g, const Args& a, const Config& c) {
  const int world = g.world_size(), rank = g.rank();
  CommOptions co;
  co.chunk_bytes = c.chunk;
  co.direct_chunk_bytes = c.direct_chunk;
  co.slice_bytes = c.slice;
  co.spin_before_yield = a.spin;
  co.zero_copy = !a.staged;
  co.twoshot_chunk_bytes = c.twoshot_chunk;
  co.twoshot_depth = a.twoshot_depth;
  LATTICE_ASSIGN_OR_RETURN(auto comm, Communicator::create(g, co));
  const size_t esize = dtype_size(c.dtype);
  std::unique_ptr<sim::DecodeKernel> kernel;
  if (c.work > 0) {
    // Rows of a 256 MiB weight in turn: a layer's weights come from memory, not the caches.
    LATTICE_ASSIGN_OR_RETURN(kernel, sim::DecodeKernel::make(c.work, size_t{256} << 20, size_t(c.work_tokens)));
  }
  const auto step_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(a.timeout_s));
  CollOptions o;
  o.algo = c.algo;
  o.timeout = step_timeout;
  CollOptions plain;  // for the bench's own bookkeeping collectives
  plain.timeout = step_timeout;
  if (rank == 0 && !a.json) {
    std::printf("# lattice bench coll: %s, %d ranks, provider %s, dtype %s, redop %s, algo %s\n",
                c.chain ? "chain (a pipeline's step: the buffer through the ranks, then the token's broadcast)"
                        : std::string(to_string(c.op)).c_str(),
                world, c.provider.c_str(), std::string(to_string(c.dtype)).c_str(),
                std::string(to_string(c.redop)).c_str(), std::string(to_string(c.algo)).c_str());
    std::printf("%12s %12s %10s %12s %12s %12s %12s %8s\n", "size(B)", "count", "algo", "time(us)", "min(us)",
                "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  }
  for (size_t bytes = std::max(c.min, esize); bytes <= c.max; bytes = std::max(bytes + 1, bytes * size_t(a.factor))) {
    reference::Case k{c.op, world, count_for(c.op, bytes, esize, world), 0};
    if (k.count == 0 && c.op != CollOp::kBarrier) continue;
    std::vector<std::byte> in = reference::make_buffer(c.dtype, reference::in_elems(k));
    std::vector<std::byte> out = reference::make_buffer(c.dtype, reference::out_elems(k));
    reference::fill_case_input(k, c.dtype, c.redop, rank, in.data());
    const size_t real_bytes = c.op == CollOp::kBarrier ? 0 : std::max(reference::in_elems(k), reference::out_elems(k)) * esize;
    int iters = a.iters;
    if (real_bytes > (1u << 20)) iters = std::max(5, int(double(a.iters) * double(1u << 20) / double(real_bytes)));
    // Warm up by count and by time: `warmup` calls per round, rounds until every rank spent
    // warmup_ms (the first size of a run also pays for page faults, caches and the scheduler
    // settling after process start, so it gets at least 200 ms).
    const double warm_ms = bytes == std::max(c.min, esize) ? std::max(200.0, a.warmup_ms) : a.warmup_ms;
    for (auto w0 = Clock::now(); a.warmup > 0;) {
      for (int i = 0; i < a.warmup; ++i) {
        double unused = 0;
        if (c.chain) {
          LATTICE_RETURN_IF_ERROR(chain_step(*comm, c, k, in.data(), kernel.get(), &unused, o));
          continue;
        }
        if (kernel) kernel->run();
        LATTICE_RETURN_IF_ERROR(call(*comm, c, k, in.data(), out.data(), o));
      }
      int64_t more = std::chrono::duration<double, std::milli>(Clock::now() - w0).count() < warm_ms ? 1 : 0;
      LATTICE_RETURN_IF_ERROR(all_reduce(*comm, nullptr, &more, 1, DType::kI64, ReduceOp::kMax, plain));
      if (more == 0) break;
    }
    LATTICE_RETURN_IF_ERROR(barrier(*comm, plain));
    // With a kernel: kRounds rounds, each of every rank's kernel alone in turn (the others wait in
    // a barrier) and then all of them in lockstep (kernel + call), so that both are measured at
    // nearly the same moment on a host whose speed drifts.
    constexpr int kRounds = 8;
    const int per = kernel ? std::max(1, iters / kRounds) : iters;
    if (kernel) iters = per * kRounds;
    std::vector<double> t(static_cast<size_t>(iters)), step(kernel || c.chain ? t.size() : 0);
    // The CPU the tcp link emulators' relays of every rank took over the calls (0 without them).
    double emu_cpu_us = -static_cast<double>(fabric::tcp::link_emulators_cpu_ns()) / 1e3;
    double work_us = 0, solo[2] = {0, 0};  // this rank's kernel time in lockstep; alone: time, calls
    double lockstep_wall_us = 0;  // the lockstep loops' wall time (the ranks' pace, however they interleave)
    auto us_since = [](Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); };
    const auto loop_t0 = Clock::now();
    for (int round = 0, i = 0; round < (kernel ? kRounds : 1); ++round) {
      for (int s = 0; kernel && s < world; ++s) {
        LATTICE_RETURN_IF_ERROR(barrier(*comm, plain));
        for (int j = 0; rank == s && j < per; ++j) {
          const auto t0 = Clock::now();
          kernel->run();
          solo[0] += us_since(t0);
          solo[1] += 1;
        }
        LATTICE_RETURN_IF_ERROR(barrier(*comm, plain));
      }
      const auto lock_t0 = Clock::now();
      for (int j = 0; j < per; ++j, ++i) {
        const auto t0 = Clock::now();
        if (c.chain) {
          LATTICE_RETURN_IF_ERROR(chain_step(*comm, c, k, in.data(), kernel.get(), &work_us, o));
          t[size_t(i)] = step[size_t(i)] = us_since(t0);
          continue;
        }
        if (kernel) {
          kernel->run();
          const auto t1 = Clock::now();
          work_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
          LATTICE_RETURN_IF_ERROR(call(*comm, c, k, in.data(), out.data(), o));
          t[size_t(i)] = us_since(t1);
          step[size_t(i)] = us_since(t0);
          continue;
        }
        LATTICE_RETURN_IF_ERROR(call(*comm, c, k, in.data(), out.data(), o));
        t[size_t(i)] = us_since(t0);
      }
      lockstep_wall_us += us_since(lock_t0);
    }
    double wall_us = us_since(loop_t0);
    emu_cpu_us += static_cast<double>(fabric::tcp::link_emulators_cpu_ns()) / 1e3;
    LATTICE_RETURN_IF_ERROR(all_reduce(*comm, nullptr, &wall_us, 1, DType::kF64, ReduceOp::kMax, plain));
    LATTICE_RETURN_IF_ERROR(all_reduce(*comm, nullptr, &emu_cpu_us, 1, DType::kF64, ReduceOp::kSum, plain));
    // Each iteration costs what its slowest rank saw.
    LATTICE_RETURN_IF_ERROR(all_reduce(*comm, nullptr, t.data(), t.size(), DType::kF64, ReduceOp::kMax, plain));
    double step_mean = 0, solo_mean = 0;
    if (kernel) {
      LATTICE_RETURN_IF_ERROR(all_reduce(*comm, nullptr, step.data(), step.size(), DType::kF64, ReduceOp::kMax, plain));
      LATTICE_RETURN_IF_ERROR(all_reduce(*comm, nullptr, &work_us, 1, DType::kF64, ReduceOp::kMax, plain));
      LATTICE_RETURN_IF_ERROR(all_reduce(*comm, nullptr, &lockstep_wall_us, 1, DType::kF64, ReduceOp::kMax, plain));
      lockstep_wall_us /= iters;
      LATTICE_RETURN_IF_ERROR(all_reduce(*comm, nullptr, solo, 2, DType::kF64, ReduceOp::kSum, plain));
      work_us /= iters;
      solo_mean = solo[0] / std::max(1.0, solo[1]);
      for (double v : step) step_mean += v / iters;
    }
    int64_t wrong = -1;
    if (a.check) {
      std::fill(out.begin(), out.end(), std::byte{0});
      LATTICE_RETURN_IF_ERROR(call(*comm, c, k, in.data(), out.data(), o));
      std::string e = reference::check_output(k, c.dtype, c.redop, rank, out.data());
      wrong = e.empty() ? 0 : 1;
      if (!e.empty()) std::fprintf(stderr, "lattice bench coll: rank %d, %zu B: %s\n", rank, bytes, e.c_str());
      LATTICE_RETURN_IF_ERROR(all_reduce(*comm, nullptr, &wrong, 1, DType::kI64, ReduceOp::kSum, plain));
    }
    if (rank == 0) {
      std::vector<double> s = t;
      std::sort(s.begin(), s.end());
      double med = s[s.size() / 2], lo = s.front();
      size_t nbytes = real_bytes;
      double algbw = med > 0 ? double(nbytes) / (med * 1e3) : 0;  // GB/s
      double busbw = algbw * bus_factor(c.op, world);
      Algorithm used = resolve_algorithm(*comm, c.op, k.count, c.dtype, c.algo);
      if (a.json) {
        nlohmann::json j{{"op", c.chain ? std::string("chain") : std::string(to_string(c.op))}, {"ranks", world}, {"provider", c.provider},
                         {"algo", to_string(used)}, {"dtype", to_string(c.dtype)}, {"redop", to_string(c.redop)},
                         {"bytes", nbytes}, {"count", k.count}, {"iters", iters}, {"time_us_median", med},
                         {"time_us_min", lo}, {"algbw_gbps", algbw}, {"busbw_gbps", busbw}};
        if (a.check) j["wrong"] = wrong;
        if (emu_cpu_us > 0) j["emulator_cpu_us_per_call"] = emu_cpu_us / iters;
        if (!kernel) j["time_us_per_call_wall"] = wall_us / iters;
        if (kernel) {
          j["work_bytes"] = kernel->weight_bytes();
          j["work_tokens"] = c.work_tokens;
          j["work_us_mean"] = work_us;
          j["step_us_mean"] = step_mean;
          j["lockstep_wall_us_per_step"] = lockstep_wall_us;
          j["solo_us_mean"] = solo_mean;
        }
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%12zu %12zu %10s %12.2f %12.2f %12.3f %12.3f %8s\n", nbytes, k.count,
                    std::string(to_string(used)).c_str(), med, lo, algbw, busbw,
                    a.check ? std::to_string(wrong).c_str() : "n/a");
        if (kernel && c.chain)
          std::printf("%12s with %.0f B of decode kernel at each rank: kernel alone %.2f us, in the chain %.2f us, "
                      "pace %.2f us a step (means)\n", "", kernel->weight_bytes(), solo_mean, work_us, lockstep_wall_us);
        else if (kernel)
          std::printf("%12s with %.0f B of decode kernel first: kernel alone %.2f us, in lockstep %.2f us, kernel + call "
                      "%.2f us, pace %.2f us a step (means)\n", "", kernel->weight_bytes(), solo_mean, work_us, step_mean,
                      lockstep_wall_us);
      }
      std::fflush(stdout);
    }
    if (a.check && wrong != 0) return Corrupt(std::to_string(wrong) + " rank(s) got wrong results at " + std::to_string(bytes) + " B");
    if (c.op == CollOp::kBarrier) break;
  }
  // A last barrier before anyone exits: once it completes here, every rank finished its
  // useful receives, so an error now (a faster rank exiting while its final barrier message
  // is still in flight to us) is harmless and ignored.
  (void)barrier(*comm, plain);
  return Status::Ok();
}

// --procs: the same command once per rank, as processes of a local job (cluster/launcher.h).
int relaunch(const Args& a) {
  auto bind = cluster::parse_bind(a.bind);
  if (!bind.ok()) {
    std::fprintf(stderr, "lattice bench coll: %s\n", bind.status().message().c_str());
    return 2;
  }
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  for (std::string s; std::getline(f, s, '\0');) argv.push_back(s);
  cluster::LocalJob job;
  job.world_size = a.ranks;
  job.provider = a.provider;
  job.insecure = a.insecure;
  job.bind = *bind;
  job.argv = {cluster::self_exe()};
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i] == "--bind") {
      ++i;  // the job's option, not the ranks'
      continue;
    }
    if (argv[i] != "--procs" && argv[i] != "--insecure" && argv[i].rfind("--bind=", 0) != 0) job.argv.push_back(argv[i]);
  }
  if (a.insecure)
    std::fprintf(stderr, "lattice bench coll: WARNING: --insecure: ranks authenticate but do NOT encrypt their traffic\n");
  auto code = cluster::run_local_job(std::move(job));
  if (!code.ok()) {
    std::fprintf(stderr, "lattice bench coll: %s\n", code.status().to_string().c_str());
    return 1;
  }
  return *code;
}

int run(const Args& a) {
  auto bad = [](const std::string& m) {
    std::fprintf(stderr, "lattice bench coll: %s\n", m.c_str());
    return 2;
  };
  Config c;
  // chain: a pipeline's decode step (chain_step); its sizes count as a broadcast's.
  const bool chain = a.op == "chain";
  auto op = parse_coll_op(chain ? "broadcast" : a.op);
  if (!op.ok()) return bad(op.status().message() + " (or chain)");
  if (chain && a.check) return bad("--check verifies collectives, not --op chain");
  auto algo = parse_algorithm(a.algo);
  if (!algo.ok()) return bad(algo.status().message());
  auto dt = parse_dtype(a.dtype);
  if (!dt.ok()) return bad(dt.status().message());
  auto ro = parse_reduce_op(a.redop);
  if (!ro.ok()) return bad(ro.status().message());
  auto mn = parse_bytes(a.min), mx = parse_bytes(a.max), ch = parse_bytes(a.chunk), tc = parse_bytes(a.twoshot_chunk);
  if (!tc.ok()) return bad(tc.status().message());
  if (a.twoshot_depth < 1 || a.twoshot_depth > 64) return bad("--twoshot-depth must be 1..64");
  if (!mn.ok()) return bad(mn.status().message());
  if (!mx.ok()) return bad(mx.status().message());
  if (!ch.ok() || *ch < 64) return bad("--chunk must be at least 64 bytes");
  auto dc = parse_bytes(a.direct_chunk);
  if (!dc.ok() || *dc > (size_t{1} << 30)) return bad("--direct-chunk: a size up to 1G");
  auto sl = parse_bytes(a.slice);
  if (!sl.ok()) return bad("--slice: " + sl.status().message() + " (0: whole buffers)");
  if (a.factor < 2) return bad("--factor must be at least 2");
  if (a.iters < 1 || a.warmup < 0) return bad("--iters must be >= 1 and --warmup >= 0");
  // Rank processes take every word a cluster does, the emulated links too (a collective over
  // tcp?latency_us=50 is not a ping-pong); threads in one process, below, shm or plain tcp.
  if (!cluster::cluster_provider_ok(a.provider))
    return bad("--provider must be shm or tcp (with --procs also tcp?latency_us=L&gbytes_s=R, verbs-emu://apple-tb5?...)");
  auto wk = parse_bytes(a.work);
  if (!wk.ok()) return bad("--work: " + wk.status().message());
  if (*wk > 0 && *wk < 4096) return bad("--work: at least 4K (or 0: no kernel between calls)");
  if (a.work_tokens < 1 || a.work_tokens > 4096) return bad("--work-tokens: 1 to 4096");
  if (a.work_tokens > 1 && *wk == 0) return bad("--work-tokens: only with --work (the kernel it shapes)");
  c = Config{*op, *algo, *dt, *ro, *mn, *mx, *ch, a.provider, *tc, *dc, *sl, *wk, a.work_tokens, chain};
  if (c.algo != Algorithm::kAuto) {
    auto algs = plan::algorithms_for(c.op);
    if (std::find(algs.begin(), algs.end(), c.algo) == algs.end())
      return bad("algorithm " + a.algo + " does not implement " + a.op);
  }
  const Deadline setup = Deadline::after(std::chrono::duration<double>(a.timeout_s));
  if (std::getenv(cluster::env::kWorldSize) != nullptr) {
    auto opts = cluster::cluster_options_from_env();
    if (!opts.ok()) return bad(opts.status().to_string());
    c.provider = opts->provider;
    auto cl = cluster::join_cluster(*opts, setup);
    if (!cl.ok()) return bad("rank " + std::to_string(opts->rank) + " could not join: " + cl.status().to_string());
    Status s = run_rank(**cl, a, c);
    if (!s.ok()) {
      std::fprintf(stderr, "lattice bench coll: rank %d: %s\n", (*cl)->rank(), s.to_string().c_str());
      return 1;
    }
    return 0;
  }
  if (a.ranks < 1 || a.ranks > 64) return bad("--ranks must be 1..64");
  if (a.procs) return relaunch(a);
  if (a.provider != "shm" && a.provider != "tcp") return bad("--provider must be shm or tcp (emulated links need --procs)");
  std::string uri = a.provider == "shm" ? "shm" : "tcp://127.0.0.1:0";
  auto groups = cluster::make_local_groups(a.ranks, uri, setup);
  if (!groups.ok()) return bad(groups.status().to_string());
  std::vector<Status> st(static_cast<size_t>(a.ranks));
  std::vector<std::thread> th;
  for (int r = 0; r < a.ranks; ++r) th.emplace_back([&, r] { st[size_t(r)] = run_rank(*(*groups)[size_t(r)], a, c); });
  for (auto& t : th) t.join();
  int rc = 0;
  for (int r = 0; r < a.ranks; ++r)
    if (!st[size_t(r)].ok()) {
      std::fprintf(stderr, "lattice bench coll: rank %d: %s\n", r, st[size_t(r)].to_string().c_str());
      rc = 1;
    }
  return rc;
}

const Registrar kBenchColl{
    {"bench coll", "collective latency and bandwidth sweeps (nccl-tests style)", [](CLI::App& app) -> std::function<int()> {
       auto a = std::make_shared<Args>();
       app.add_option("--ranks,-n", a->ranks, "ranks (threads, or processes with --procs)")->capture_default_str();
       app.add_option("--provider", a->provider, "shm | tcp (with --procs also tcp?latency_us=L&gbytes_s=R, verbs-emu://...)")->capture_default_str();
       app.add_option("--op", a->op,
                      "all_reduce | all_gather | reduce_scatter | broadcast | reduce | all_to_all | barrier | chain "
                      "(a pipeline's decode step: the buffer through ranks 0..W-1, --work at each, the last "
                      "rank's 4-byte broadcast)")
           ->capture_default_str();
       app.add_option("--min,-b", a->min, "smallest size (bytes; K/M/G suffixes)")->capture_default_str();
       app.add_option("--max,-e", a->max, "largest size")->capture_default_str();
       app.add_option("--factor,-f", a->factor, "size multiplier per step")->capture_default_str();
       app.add_option("--algo", a->algo, "auto | oneshot | twoshot | ring | bidir | recursive | halving | tree")->capture_default_str();
       app.add_option("--dtype", a->dtype, "f32 | f16 | bf16 | f64 | i32 | i64")->capture_default_str();
       app.add_option("--redop", a->redop, "sum | max | min | prod")->capture_default_str();
       app.add_option("--iters", a->iters, "timed calls per size (fewer above 1 MiB)")->capture_default_str();
       app.add_option("--warmup", a->warmup, "untimed calls per warm-up round")->capture_default_str();
       app.add_option("--warmup-ms", a->warmup_ms, "warm-up rounds per size last at least this long (first size: 200 ms)")
           ->capture_default_str();
       app.add_option("--chunk", a->chunk, "staging slot size: the largest message")->capture_default_str();
       app.add_option("--direct-chunk", a->direct_chunk, "message size on direct (tcp) lanes, at least --chunk")
           ->capture_default_str();
       app.add_option("--slice", a->slice, "two-sided all_reduce: buffers above this run as slices of it (0: whole)")
           ->capture_default_str();
       app.add_option("--timeout", a->timeout_s, "seconds for setup and for each call")->capture_default_str();
       app.add_option("--twoshot-chunk", a->twoshot_chunk, "two-shot pipeline chunk (0: no one-sided two-shot)")
           ->capture_default_str();
       app.add_option("--twoshot-depth", a->twoshot_depth, "two-shot landing slots per peer and phase")->capture_default_str();
       app.add_option("--spin", a->spin, "empty polls before yielding the core (0: automatic)")->capture_default_str();
       app.add_option("--work", a->work, "decode kernel bytes each rank runs before every call (0: none)")
           ->capture_default_str();
       app.add_option("--work-tokens", a->work_tokens,
                      "tokens the --work kernel multiplies at once (1: decode's matvec; more: prefill's matmul)")
           ->capture_default_str();
       app.add_flag("--staged", a->staged, "two-sided transfers through the staging slots even on tcp (no direct transfers)");
       app.add_flag("--check", a->check, "verify every size's result against the scalar reference");
       app.add_flag("--json", a->json, "one JSON object per size");
       app.add_flag("--procs", a->procs, "one process per rank (through lattice launch)");
       app.add_option("--bind", a->bind, "with --procs: lattice launch's CPU pinning (auto | cores | none)")
           ->capture_default_str();
       app.add_flag("--insecure", a->insecure,
                    "with --procs: tcp traffic authenticated but not encrypted (as plaintext peers such as MPI run)");
       return [a] { return run(*a); };
     }}};

}  // namespace
}  // namespace lattice::cli
