// `lattice sim --calibrate -o FILE [-m MODEL]`: this machine as a machine file. Read bandwidth
// (1 thread and all) and the engine's Q4_0 matmul throughput come from lattice/sim/calibrate;
// the fabric figures from `lattice bench fabric` over shm, tcp and the emulated verbs device (two
// processes of this binary) and `lattice bench coll --procs` (a small all-reduce among 2 to 2x
// cores rank processes, and with --work the same ranks in lockstep, decode's kernel between the
// calls, over shm and the emulated verbs device, with prefill's kernel between 256 KiB calls for
// the device's prefill step, and as a pipeline's stages (--op chain); over tcp through the link
// emulator, the CPU its relays take a call);
// with -m, the engine's decode efficiency from `lattice bench engine` on that model with one
// thread (tok/s x bytes read per token / one thread's read bandwidth) and its prefill efficiency:
// the fraction of the measured matmul throughput with which the simulator, on this machine, predicts
// the same bench's prefill of a 64-token prompt (sim::fit_prefill_efficiency).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "lattice/cluster/launcher.h"
#include "lattice/cluster/topology.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/sim/calibrate.h"
#include "lattice/sim/machine.h"
#include "lattice/sim/shape.h"
#include "lattice/sim/sim.h"
#include "sim_cli.h"

namespace lattice::cli {

Result<std::string> run_capture(const std::vector<std::string>& argv, double timeout_s) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return IoError("pipe failed");
  // The child's stderr goes to an unlinked file, whose end a failure quotes.
  char err_path[] = "/tmp/lattice-capture-XXXXXX";
  const int err_fd = ::mkstemp(err_path);
  if (err_fd >= 0) ::unlink(err_path);
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    if (err_fd >= 0) ::close(err_fd);
    return IoError("fork failed");
  }
  if (pid == 0) {
    ::dup2(fds[1], 1);
    const int err = err_fd >= 0 ? err_fd : ::open("/dev/null", O_WRONLY);
    if (err >= 0) ::dup2(err, 2);
    std::vector<char*> args;
    for (const auto& s : argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[4096];
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // The end of what the child said on stderr, its lines joined, for a failure's message.
  std::string said;
  if (err_fd >= 0) {
    struct stat st {};
    if (::fstat(err_fd, &st) == 0 && st.st_size > 0) {
      const off_t from = std::max<off_t>(0, st.st_size - 600);
      said.resize(static_cast<size_t>(st.st_size - from));
      const ssize_t n = ::pread(err_fd, said.data(), said.size(), from);
      said.resize(n > 0 ? static_cast<size_t>(n) : 0);
      while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
      std::replace(said.begin(), said.end(), '\n', '|');
      if (from > 0) said = "..." + said;
    }
    ::close(err_fd);
  }
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  const std::string tail = said.empty() ? "" : ": " + said;
  if (timed_out)
    return Timeout("'" + cmd + "': no result within " + std::to_string(static_cast<int>(timeout_s)) + " s" + tail);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return IoError("'" + cmd + "' failed (" +
                   (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                      : "signal " + std::to_string(WIFSIGNALED(status) ? WTERMSIG(status) : 0)) +
                   ")" + tail);
  return out;
}

namespace {

// One start of a bench of rank processes, and once more if it fails: a start can fail with the
// host (session 39: a calibration ended after ten minutes of starts on one bench that exited 1,
// and wrote nothing; the next, the same command, went through), and one start should not cost
// the rest. The failure is said on stderr; a second failure ends the calibration with both
// messages. Each try keeps its deadline.
Result<std::string> run_bench(const std::vector<std::string>& argv, double timeout_s) {
  auto out = run_capture(argv, timeout_s);
  if (out.ok()) return out;
  std::fprintf(stderr, "lattice sim --calibrate: %s; once more\n", out.status().to_string().c_str());
  auto again = run_capture(argv, timeout_s);
  if (again.ok()) return again;
  return Status(again.status().code(), again.status().message() + " (and before: " + out.status().message() + ")");
}

// One way latency (median, 8 B) and the best bandwidth at 64 KiB and above, from bench fabric's
// JSON lines.
Result<sim::MeasuredLink> measure_link(const std::string& provider, bool quick) {
  LATTICE_ASSIGN_OR_RETURN(std::string out, run_bench({cluster::self_exe(), "bench", "fabric", "--provider", provider,
                                                        "--op", "send", "--min", "8", "--max", quick ? "256K" : "4M",
                                                        "--json"},
                                                       120));
  sim::MeasuredLink m;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("bytes")) continue;
    const double bytes = j.value("bytes", 0.0);
    if (bytes == 8) m.latency_us = j.value("lat_us_median", 0.0);
    if (bytes >= 65536) m.gbytes_s = std::max(m.gbytes_s, j.value("bw_gbps", 0.0));
  }
  if (m.latency_us <= 0 || m.gbytes_s <= 0)
    return IoError("bench fabric --provider " + provider + " gave no 8 B latency or 64 KiB+ bandwidth");
  return m;
}

// The bench's ranks are pinned as the simulator places ranks (--bind cores: beyond the cores
// too, the i-th on core i mod the cores, as `run --bind cores` runs them), so what ranks beyond
// the cores cost is measured in the placement it is charged to.
// The JSON rows of `bench coll --procs --json` (each after the launcher's "[rank 0] ").
std::vector<nlohmann::json> coll_rows(const std::string& out) {
  std::vector<nlohmann::json> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    const size_t brace = line.find('{');
    if (brace == std::string::npos) continue;
    auto j = nlohmann::json::parse(line.substr(brace), nullptr, false);
    if (!j.is_discarded() && j.is_object()) rows.push_back(std::move(j));
  }
  return rows;
}

// A small all-reduce (8 KiB of f32) among `ranks` rank processes of this binary over `provider`,
// back to back: bench coll's median microseconds a call, and over an emulated tcp link the CPU
// its relays took a call (0 otherwise); with `large`, the same run's 256 KiB call too (a prefill
// step's, where the provider's copies of every byte show).
struct AllReduce {
  double us = 0, emulator_cpu_us = 0, large_us = 0;
};
Result<AllReduce> measure_allreduce(const std::string& provider, int ranks, bool quick, bool large = false) {
  LATTICE_ASSIGN_OR_RETURN(std::string out,
                           run_bench({cluster::self_exe(), "bench", "coll", "--procs", "--bind", "cores", "-n", std::to_string(ranks),
                                        "--provider", provider, "--op", "all_reduce", "-b", "8K", "-e",
                                        large ? "256K" : "8K", "-f", "32", "--iters", quick ? "100" : "300",
                                        "--timeout", "30", "--json"},
                                       90));
  AllReduce r;
  for (const auto& j : coll_rows(out)) {
    const double bytes = j.value("bytes", 0.0), us = j.value("time_us_median", 0.0);
    if (bytes == 8192 && us > 0) r = AllReduce{us, j.value("emulator_cpu_us_per_call", 0.0), r.large_us};
    if (bytes == 262144 && us > 0) r.large_us = us;
  }
  if (r.us <= 0 || (large && r.large_us <= 0))
    return IoError("bench coll --procs -n " + std::to_string(ranks) + " --provider " + provider + " gave no " +
                   (r.us <= 0 ? "8 KiB" : "256 KiB") + " all-reduce time");
  return r;
}

// `ranks` rank processes in lockstep over `provider`, decode's kernel over `work` bytes before every
// 8 KiB all-reduce (`bench coll --work`; LockstepRun below: with op "chain", a pipeline's decode
// step, the kernel at each rank in turn; with more tokens and bytes, prefill's kernel of that many
// tokens before calls of that size): the slowest rank's mean kernel time, the mean step (kernel + call), the
// steps' pace (the slowest rank's wall clock over them, per step) and the kernel alone (each rank
// in turn, the others waiting), microseconds.
struct Lockstep {
  double work_us = 0, step_us = 0, wall_us = 0, solo_us = 0;
};
// What a lockstep measurement runs beside its kernel: the collective, its calls a start (a
// quarter with --quick), their size, the kernel's tokens, and whether the bench warms up first.
struct LockstepRun {
  std::string op = "all_reduce";
  int iters = 1600;
  std::string bytes = "8K";
  int tokens = 1;
  bool warm = true;
};
Result<Lockstep> measure_lockstep(const std::string& provider, int ranks, const std::string& work, bool quick,
                                  const LockstepRun& run = {}) {
  std::vector<std::string> cmd = {cluster::self_exe(), "bench", "coll", "--procs", "--bind", "cores", "-n",
                                  std::to_string(ranks), "--provider", provider, "--op", run.op, "-b", run.bytes,
                                  "-e", run.bytes, "--iters", std::to_string(quick ? std::max(8, run.iters / 4) : run.iters),
                                  "--work", work, "--work-tokens", std::to_string(run.tokens), "--timeout", "30", "--json"};
  if (!run.warm) cmd.insert(cmd.end(), {"--warmup", "0", "--warmup-ms", "0"});
  LATTICE_ASSIGN_OR_RETURN(std::string out, run_bench(cmd, 120));
  for (const auto& j : coll_rows(out)) {
    Lockstep l{j.value("work_us_mean", 0.0), j.value("step_us_mean", 0.0), j.value("lockstep_wall_us_per_step", 0.0),
               j.value("solo_us_mean", 0.0)};
    if (l.work_us > 0 && l.step_us > 0 && l.wall_us > 0) return l;
  }
  return IoError("bench coll --procs -n " + std::to_string(ranks) + " --provider " + provider + " --op " + run.op +
                 " --work " + work + " gave no step time");
}

std::string base_name(const std::string& p) { return std::filesystem::path(p).filename().string(); }

using sim::median_of;

// Starts a measurement may add to its first ones while their readings disagree
// (sim::another_start): a transient regime of the host is then outvoted.
constexpr int kMoreStarts = 6;

// What a measurement's log line adds when its starts disagreed and it took more of them.
std::string more_starts_note(const std::vector<double>& readings, size_t first) {
  if (readings.size() <= first) return "";
  std::string s = " [starts disagreed:";
  char part[32];
  for (double r : readings) {
    std::snprintf(part, sizeof part, " %.1f", r);
    s += part;
  }
  return s + " us; the median of " + std::to_string(readings.size()) + "]";
}

}  // namespace

Result<sim::OneNodeFigures> read_bench_figures(const std::string& path, const std::string& model) {
  std::ifstream f(path);
  if (!f) return NotFound("--calibrate-from: cannot read '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  sim::OneNodeFigures fig;
  if (j.is_object()) {
    // `lattice run --json`, one rank.
    if (j.value("nodes", 1) != 1) return InvalidArgument(path + ": a run of " + j["nodes"].dump() + " ranks, not one");
    const int n_prompt = j.value("n_prompt", 0), n_gen = j.value("n_gen", 0), t = j.value("threads", 0);
    if (!j.contains("decode_tok_s") || !j["decode_tok_s"].is_number() || n_gen < 2 || t < 1)
      return InvalidArgument(path + ": not `lattice run --json` output with a decode rate (n_gen >= 2) and threads");
    fig.decode_tok_s = j["decode_tok_s"].get<double>();
    fig.decode_pos = static_cast<uint32_t>(n_prompt + n_gen / 2);
    fig.threads = t;
    if (j.contains("prefill_tok_s") && j["prefill_tok_s"].is_number() && n_prompt > 0) {
      fig.prefill_tok_s = j["prefill_tok_s"].get<double>();
      fig.prefill_tokens = static_cast<uint32_t>(n_prompt);
    }
    if (fig.decode_tok_s <= 0) return InvalidArgument(path + ": the run decoded nothing");
    // `run --nodes 1` reports its forward steps' share of a token; what is left of the token is
    // kept whole on every rank of a prediction.
    if (j.contains("ranks") && j["ranks"].is_array() && j["ranks"].size() == 1 && j["ranks"][0].is_object()) {
      const auto& r = j["ranks"][0];
      const auto num = [&](const char* k) { return r.contains(k) && r[k].is_number() ? r[k].get<double>() : -1.0; };
      const double tok = num("decode_ms_per_token"), step = num("step_ms_per_token");
      if (tok > 0 && step > 0 && step <= tok) fig.outside_ms = tok - step;
      fig.distributed = true;
    }
    return fig;
  }
  if (j.is_discarded() || !j.is_array() || j.empty())
    return InvalidArgument(path + ": neither `lattice bench engine --json` nor `lattice run --json` output");
  fig.threads = 0;
  for (const auto& r : j) {
    if (!r.is_object()) return InvalidArgument(path + ": a row is not a JSON object");
    if (!model.empty() && r.contains("model_file") && r["model_file"].is_string() &&
        base_name(r["model_file"].get<std::string>()) != base_name(model))
      return InvalidArgument(path + ": its figures are of " + r["model_file"].get<std::string>() + ", not " + model);
    const int t = r.value("threads", 0);
    if (t < 1) return InvalidArgument(path + ": a row has no thread count");
    if (fig.threads && t != fig.threads)
      return InvalidArgument(path + ": rows of " + std::to_string(fig.threads) + " and " + std::to_string(t) +
                             " threads (give one thread count)");
    fig.threads = t;
    const int n_gen = r.value("n_gen", 0), n_prompt = r.value("n_prompt", 0);
    if (n_gen > 0 && r.value("batch", 1) == 1 && fig.decode_tok_s <= 0 && r["decode_tok_s"].is_number()) {
      // bench engine decodes from an empty cache: on average at half its tokens.
      fig.decode_tok_s = r["decode_tok_s"].get<double>();
      fig.decode_pos = static_cast<uint32_t>(n_gen / 2);
    } else if (n_prompt > 0 && fig.prefill_tok_s <= 0 && r["prefill_tok_s"].is_number()) {
      fig.prefill_tok_s = r["prefill_tok_s"].get<double>();
      fig.prefill_tokens = static_cast<uint32_t>(n_prompt);
    }
  }
  if (fig.decode_tok_s <= 0) return InvalidArgument(path + ": no decode row (bench engine -n N, one sequence)");
  return fig;
}

int run_calibrate(const CalibrateArgs& a) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "lattice sim --calibrate: %s\n", m.c_str());
    return 1;
  };
  if (a.out.empty()) return fail("give -o FILE (the machine file to write)");
  // Each measurement's line as it is done, through a pipe too (`| tee`, a bench script): the
  // calibration takes minutes, and a failure should leave the lines before it.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // What would end the calibration after its minutes of measuring is checked before them: the
  // folder the file goes to, and the model's shape (kept for the prefill fit at the end).
  {
    const auto dir = std::filesystem::absolute(a.out).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0)
      return fail("cannot write " + a.out + ": " + dir.string() + " is not a folder this user can write");
  }
  std::optional<sim::ModelShape> shape;
  if (!a.model.empty()) {
    auto file = engine::GgufFile::open(a.model);
    if (!file.ok()) return fail("-m: " + file.status().to_string());
    auto s = sim::shape_from_gguf(**file, a.model);
    if (!s.ok()) return fail("-m: " + s.status().to_string());
    shape = std::move(*s);
  }
  sim::Machine m;
  m.name = a.name;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.cores = cores;
  const size_t buf = a.quick ? (256u << 20) : (1u << 30);
  auto bw1 = sim::measure_read_gbs(1, buf, a.quick ? 3 : 5);
  if (!bw1.ok()) return fail(bw1.status().to_string());
  auto bwn = sim::measure_read_gbs(cores, buf, a.quick ? 3 : 5);
  if (!bwn.ok()) return fail(bwn.status().to_string());
  m.core_bw_gbs = *bw1;
  m.mem_bw_gbs = std::max(*bw1, *bwn);
  auto mm = sim::measure_matmul_tflops(cores, 2048, 2048, 64, a.quick ? 3 : 5);
  if (!mm.ok()) return fail(mm.status().to_string());
  m.compute_tflops = *mm;
  std::ifstream mi("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (mi >> key >> kb >> unit)
    if (key == "MemTotal:") m.memory_gb = double(kb) / (1 << 20);
  if (m.memory_gb <= 0) m.memory_gb = 1;
  std::printf("read bandwidth: %.1f GB/s (1 thread), %.1f GB/s (%d threads); Q4_0 matmul %.3f TFLOP/s\n", *bw1, *bwn,
              cores, *mm);
  if (cores > 1) {
    // Decode's kernel alone and on every core at once (each worker its own weight, as ranks).
    const size_t kb = a.quick ? (64u << 20) : (256u << 20);
    auto k1 = sim::measure_decode_kernel_gbs(1, kb, a.quick ? 2 : 3);
    if (!k1.ok()) return fail(k1.status().to_string());
    auto kn = sim::measure_decode_kernel_gbs(cores, kb, a.quick ? 2 : 3);
    if (!kn.ok()) return fail(kn.status().to_string());
    m.kernel_scaling = std::clamp(*kn / *k1, 0.05, 1.0);
    std::printf("decode kernel: %.1f GB/s alone, %.1f GB/s each with %d at once: scaling %.2f\n", *k1, *kn, cores,
                m.kernel_scaling);
    // Prefill's matmul alone and on every core at once, each worker its own weight as separate
    // ranks (tensor-parallel ranks prefill on every core at once; the one-rank fit runs alone).
    auto c1 = sim::measure_matmul_workers_tflops(1, 2048, 2048, 64, a.quick ? 2 : 3);
    if (!c1.ok()) return fail(c1.status().to_string());
    auto cn = sim::measure_matmul_workers_tflops(cores, 2048, 2048, 64, a.quick ? 2 : 3);
    if (!cn.ok()) return fail(cn.status().to_string());
    m.compute_scaling = std::clamp(*cn / *c1, 0.05, 1.0);
    std::printf("prefill matmul: %.3f TFLOP/s alone, %.3f each with %d at once: scaling %.2f\n", *c1, *cn, cores,
                m.compute_scaling);
  }
  // What every tensor-parallel rank does whole (the hidden state's norms, quantization and
  // residual adds, a prefill step's 64 rows of 2048), and prefill's matmul on a slice of a layer
  // against the whole (one thread, as -t 1 ranks), for 2 to 2x cores ranks (at least 4).
  auto rep = sim::measure_replicated_ns(2048, 64, a.quick ? 3 : 7);
  if (!rep.ok()) return fail(rep.status().to_string());
  m.replicated_ns = *rep;
  std::string slices;
  for (int k = 2; k <= std::min(8, std::max(4, 2 * cores)); ++k) {
    const size_t rows = (2048 + 64 * k - 1) / (64 * k) * (64 * k), cols = (2048 + 32 * k - 1) / (32 * k) * (32 * k);
    auto e = sim::measure_slice_efficiency(k, rows, cols, 64, a.quick ? 3 : 7);
    if (!e.ok()) return fail(e.status().to_string());
    m.slice_efficiency[k] = std::clamp(*e, 0.25, 4.0);
    char part[32];
    std::snprintf(part, sizeof part, " %d: %.3f", k, m.slice_efficiency[k]);
    slices += part;
  }
  std::printf("replicated work %.2f ns an element a layer; prefill matmul on 1/K of a layer, its rate over the whole's:%s\n",
              m.replicated_ns, slices.c_str());
  // A mixture of experts' layer adds the router and each chosen expert's gathered, quantized and
  // accumulated rows, also whole on every rank (the bench shape: 32 experts, 8 a row; 32 rows).
  auto moe = sim::measure_moe_replicated(2048, 32, 8, 32, a.quick ? 3 : 7);
  if (!moe.ok()) return fail(moe.status().to_string());
  m.moe_router_ns = moe->router_ns;
  m.moe_row_ns = moe->row_ns;
  std::printf("mixture of experts, whole on every rank: router %.3f ns a multiply-add, %.2f ns an element of a chosen "
              "expert's input\n",
              m.moe_router_ns, m.moe_row_ns);
  // The providers whose ranks can share this machine, by the key of the machine file: verbs
  // between two processes of one machine is the emulated device (a real NIC's figures are the
  // topology's business: link_for never takes these for a verbs cable).
  constexpr const char* kVerbsEmu = "verbs-emu://apple-tb5";
  const std::pair<const char*, const char*> providers[] = {{"shm", "shm"}, {"tcp", "tcp"}, {"verbs", kVerbsEmu}};
  for (const auto& [prov, word] : providers) {
    auto l = measure_link(word, a.quick);
    if (!l.ok()) return fail(l.status().to_string());
    m.links[prov] = *l;
    std::printf("%s: %.2f us one way, %.2f GB/s\n", word, l->latency_us, l->gbytes_s);
  }
  // Ranks sharing this machine, up to twice its cores (at least 4): what a collective among them
  // costs, turns on shared cores included, which no ping-pong shows.
  const int most_ranks = std::min(8, std::max(4, 2 * cores));
  for (const auto& [prov, word] : providers) {
    // The simulator adds a call's cost beyond the wire to ranks sharing the machine over shm and
    // tcp; for those, 256 KiB too (sim.cc, colocated_cost).
    const bool large = std::string(prov) != "verbs";
    std::string line = std::string(word) + (large ? ": 8 / 256 KiB all-reduce," : ": 8 KiB all-reduce,");
    for (int k = 2; k <= most_ranks; ++k) {
      // Beyond the cores the scheduler's placement of the ranks decides, and it differs from one
      // start to the next (4 ranks on 2 cores over shm: 17 or 30 us): the median of 3 starts.
      // Here and below, starts that disagree by more than 3 times take up to 6 more
      // (sim::another_start): 3 ranks over shm once read 1933 us, 10 us in the starts after.
      std::vector<double> small_runs, large_runs;
      const int first = k > cores && !a.quick ? 3 : 1;
      for (int i = 0; sim::another_start(i, first, a.quick ? 0 : kMoreStarts, {&small_runs, &large_runs}); ++i) {
        auto r = measure_allreduce(word, k, a.quick, large);
        if (!r.ok()) return fail(r.status().to_string());
        small_runs.push_back(r->us);
        large_runs.push_back(r->large_us);
      }
      const double us = median_of(small_runs);
      m.links[prov].allreduce_us[k] = us;
      char part[64];
      if (large) {
        m.links[prov].allreduce_256k_us[k] = median_of(large_runs);
        std::snprintf(part, sizeof part, " %.1f / %.1f us (%d ranks)", us, median_of(large_runs), k);
      } else {
        std::snprintf(part, sizeof part, " %.1f us (%d ranks)", us, k);
      }
      line += part + more_starts_note(small_runs, first) + (large ? more_starts_note(large_runs, first) : "");
    }
    std::printf("%s\n", line.c_str());
  }
  {
    // The tcp link emulator's relays (what the validation's emulated tcp links run through): the
    // CPU they take a call, the median of 3 starts (1 with --quick), at each rank count above.
    constexpr const char* kTcpEmu = "tcp?latency_us=50&gbytes_s=1";
    std::string line = std::string(kTcpEmu) + ": its relays' CPU an 8 KiB all-reduce,";
    for (int k = 2; k <= most_ranks; ++k) {
      std::vector<double> runs;
      const int first = a.quick ? 1 : 3;
      for (int i = 0; sim::another_start(i, first, a.quick ? 0 : kMoreStarts, {&runs}); ++i) {
        auto r = measure_allreduce(kTcpEmu, k, a.quick);
        if (!r.ok()) return fail(r.status().to_string());
        if (r->emulator_cpu_us <= 0) return fail(std::string("bench coll over ") + kTcpEmu + " reported no relay CPU");
        runs.push_back(r->emulator_cpu_us);
      }
      m.links["tcp"].emulator_cpu_us[k] = median_of(runs);
      char part[64];
      std::snprintf(part, sizeof part, " %.1f us (%d ranks)", m.links["tcp"].emulator_cpu_us[k], k);
      line += part + more_starts_note(runs, first);
    }
    std::printf("%s\n", line.c_str());
  }
  // Ranks in lockstep: each segment waits for its slowest rank. Decode's kernel over 2 and 8 MiB
  // between the calls (a 1.1B Llama's attention and FFN shares at 2 ranks); the median of 3
  // starts each (1 with --quick). Over shm, on cores of their own, up to the rank counts whose
  // back-to-back call was measured above (a machine of more cores than that stops there): the
  // slowest rank's kernel over the step less the call, the mean of the two sizes
  // (Machine::lockstep_scaling). Over loopback tcp too, on cores of their own only, against shm
  // the same way (MeasuredLink::lockstep_scaling): a call between kernels costs more than back
  // to back (16.6 us back to back, 38-70 us after the kernel at 2 ranks; docs/SIM.md, session
  // 28), which the shm figure does not carry. Beyond the cores tcp's back-to-back call already
  // over-charges the runs (session 19), so it has no figure there.
  //
  // Over the emulated verbs device, each start right after the shm one, up to the same counts as
  // the calls (beyond the cores too: the simulator's turns model stands for shm there, and this
  // for what the device adds; its progress threads share the ranks' cores): its pace over shm's,
  // each start's wall clock a step, the median of the starts at each size, a straight line
  // through the two sizes: its excess at no step (links.verbs.lockstep_over_shm_us) and its
  // growth a microsecond of shm's step (lockstep_over_shm_slope), which the simulator charges.
  // The excess is mostly the call's (4 ranks on 2 cores: 0.43 ms at a 0.36 ms step, 0.67 at
  // 1.32; 2 ranks 60 us at 0.18, 167 at 0.71; docs/SIM.md, session 38), which a share of the
  // step (the device's lockstep_scaling until session 38) does not follow.
  for (int k = 2; k <= most_ranks; ++k) {
    const bool own_cores = k <= cores;
    double sum = 0, sum_tcp = 0;
    const char* sizes[] = {"2M", "8M"};
    double pace[2] = {0, 0}, over[2] = {0, 0};  // shm's wall a step, the device's excess over it
    std::string notes;  // starts that disagreed, shm's walls and the device's
    // The calls are subtracted only where the ranks have cores of their own.
    const double call = own_cores ? m.links.at("shm").allreduce_us.at(k) : 0.0;
    const double call_tcp = own_cores ? m.links.at("tcp").allreduce_us.at(k) : 0.0;
    for (int z = 0; z < 2; ++z) {
      const char* w = sizes[z];
      std::vector<double> runs, runs_tcp, walls, walls_verbs, overs;
      const int first = a.quick ? 1 : 3;
      for (int i = 0; sim::another_start(i, first, a.quick ? 0 : kMoreStarts, {&walls, &walls_verbs}); ++i) {
        auto l = measure_lockstep("shm", k, w, a.quick);
        if (!l.ok()) return fail(l.status().to_string());
        auto v = measure_lockstep(kVerbsEmu, k, w, a.quick);
        if (!v.ok()) return fail(v.status().to_string());
        if (own_cores) {
          const double step = std::max(l->step_us - call, 1e-3);
          runs.push_back(std::clamp(l->work_us / step, 0.05, 1.0));
          auto t = measure_lockstep("tcp", k, w, a.quick);
          if (!t.ok()) return fail(t.status().to_string());
          runs_tcp.push_back(std::clamp(step / std::max(t->step_us - call_tcp, 1e-3), 0.05, 1.0));
        }
        walls.push_back(l->wall_us);
        walls_verbs.push_back(v->wall_us);
        overs.push_back(v->wall_us - l->wall_us);
      }
      notes += more_starts_note(walls, first) + more_starts_note(walls_verbs, first);
      pace[z] = median_of(walls);
      over[z] = median_of(overs);
      if (own_cores) {
        sum += median_of(runs);
        sum_tcp += median_of(runs_tcp);
      }
    }
    if (own_cores) {
      m.lockstep_scaling[k] = sum / std::size(sizes);
      m.links.at("tcp").lockstep_scaling[k] = sum_tcp / std::size(sizes);
    }
    // Through the two sizes' points, the slope not negative and the line not below 0 at no step.
    const double slope = pace[1] > pace[0] ? std::max(0.0, (over[1] - over[0]) / (pace[1] - pace[0])) : 0.0;
    m.links.at("verbs").lockstep_over_shm_slope[k] = slope;
    m.links.at("verbs").lockstep_over_shm_us[k] = std::max(0.0, over[0] - slope * pace[0]);
    char line[192];
    std::snprintf(line, sizeof line,
                  "its pace %.0f us longer than shm's %.0f us a step with a 2 MiB kernel, %.0f than %.0f with 8 MiB: "
                  "charged %.0f us + %.3f x shm's step a call",
                  over[0], pace[0], over[1], pace[1], m.links.at("verbs").lockstep_over_shm_us[k], slope);
    if (own_cores)
      std::printf("%d ranks in lockstep (decode kernel of 2 and 8 MiB between all-reduces): %.3f of the slower rank's "
                  "pace, over tcp %.3f; over the emulated verbs device %s%s\n",
                  k, m.lockstep_scaling[k], m.links.at("tcp").lockstep_scaling[k], line, notes.c_str());
    else
      std::printf("%d ranks in lockstep on %d cores: over the emulated verbs device %s%s\n", k, cores, line,
                  notes.c_str());
  }
  // A prefill step over the emulated verbs device: prefill's kernel (32 tokens a multiply) over 2
  // and 8 MiB between 45 all-reduces of 256 KiB (a 32-token step's hidden state through a
  // 22-layer model), with no warm-up: a run's prefill is its first large calls, and the device's
  // first 45 cost more than after a warm-up (3 ranks: a step 2.1-2.5 ms longer than shm's at 2
  // MiB, against 1.4-1.7; docs/SIM.md, session 34). Right after the same over shm, the median of
  // 5 starts each (1 with --quick), the mean of the two sizes: how much longer the device's step
  // is than shm's (MeasuredLink::lockstep_256k_over_shm_us). Its progress threads move every
  // byte on the ranks' cores, and what a large call costs does not follow the kernel between the
  // calls the way decode's figure, a share of it, does: 4 times the kernel left the excess about
  // the same or smaller (docs/SIM.md, sessions 34 and 37), and on one host the share alone read
  // 2-3 ms a step more than the device's whole excess. So this replaces the share on large calls.
  const LockstepRun first_calls{.iters = 45, .bytes = "256K", .tokens = 32, .warm = false};
  for (int k = 2; k <= most_ranks; ++k) {
    double sum = 0;
    std::string line;
    for (const char* w : {"2M", "8M"}) {
      std::vector<double> runs, steps, steps_verbs;
      const int first = a.quick ? 1 : 5;
      for (int i = 0; sim::another_start(i, first, a.quick ? 0 : kMoreStarts, {&steps, &steps_verbs}); ++i) {
        auto l = measure_lockstep("shm", k, w, a.quick, first_calls);
        if (!l.ok()) return fail(l.status().to_string());
        auto v = measure_lockstep(kVerbsEmu, k, w, a.quick, first_calls);
        if (!v.ok()) return fail(v.status().to_string());
        steps.push_back(l->step_us);
        steps_verbs.push_back(v->step_us);
        runs.push_back(v->step_us - l->step_us);
      }
      sum += median_of(runs);
      char part[64];
      std::snprintf(part, sizeof part, "%s %.0f us", line.empty() ? "" : ",", median_of(runs));
      line += std::string(part) + " (" + w + ")" + more_starts_note(steps, first) + more_starts_note(steps_verbs, first);
    }
    m.links.at("verbs").lockstep_256k_over_shm_us[k] = std::max(0.0, sum / 2);
    std::printf("%d ranks in lockstep between prefill's kernels, 256 KiB all-reduces: over the emulated verbs device a "
                "step longer than shm's by%s; charged %.0f us a large call in place of its lockstep share (none when shorter)\n",
                k, line.c_str(), m.links.at("verbs").lockstep_256k_over_shm_us[k]);
  }
  // Pipeline stages: one computes while the others wait on the provider. The emulated verbs
  // device's waiting stages poll it and its progress threads wake, on the cores the computing
  // stage runs on; over shm the waiting costs next to nothing. A chain of K rank processes with
  // decode's kernel over 128 MiB at each (a stage of a small model's decode, 6-8 ms here), over
  // shm and right after over the device, 5 such pairs (1 with --quick): the median of the shm
  // steps' pace over the device's (MeasuredLink::pipeline_scaling). One pair moves by up to 10%
  // with the host (session 24: 0.76-0.98 at 4 ranks), which is the size of the effect.
  const LockstepRun chain{.op = "chain", .iters = 16};
  for (int k = 2; k <= most_ranks; ++k) {
    std::vector<double> runs, walls, walls_verbs;
    const int first = a.quick ? 1 : 5;
    for (int i = 0; sim::another_start(i, first, a.quick ? 0 : kMoreStarts, {&walls, &walls_verbs}); ++i) {
      auto l = measure_lockstep("shm", k, "128M", a.quick, chain);
      if (!l.ok()) return fail(l.status().to_string());
      auto v = measure_lockstep(kVerbsEmu, k, "128M", a.quick, chain);
      if (!v.ok()) return fail(v.status().to_string());
      walls.push_back(l->wall_us);
      walls_verbs.push_back(v->wall_us);
      runs.push_back(std::clamp(l->wall_us / v->wall_us, 0.05, 1.0));
    }
    m.links.at("verbs").pipeline_scaling[k] = median_of(runs);
    std::printf("%d pipeline stages (decode kernel of 128 MiB at each): over the emulated verbs device %.3f of shm's pace%s\n",
                k, m.links.at("verbs").pipeline_scaling[k],
                (more_starts_note(walls, first) + more_starts_note(walls_verbs, first)).c_str());
  }
  std::string src = "lattice sim --calibrate";
  auto write = [&]() -> bool {
    std::ofstream f(a.out);
    f << sim::machine_to_json(m).dump(2) << "\n";
    return static_cast<bool>(f);
  };
  constexpr int kPrompt = 64;
  double prefill_tok_s = 0;
  if (!a.model.empty()) {
    auto out = run_capture({cluster::self_exe(), "bench", "engine", "-m", a.model, "-p", std::to_string(kPrompt), "-n",
                            "32", "-t", "1", "-r", a.quick ? "2" : "3", "--json"},
                           600);
    if (!out.ok()) return fail(out.status().to_string());
    auto j = nlohmann::json::parse(*out, nullptr, false);
    if (j.is_discarded() || !j.is_array() || j.empty()) return fail("bench engine printed no JSON rows");
    double tok_s = 0, bytes = 0;
    for (const auto& r : j) {
      if (!r.is_object()) continue;
      if (r.value("n_gen", 0) > 0 && r["decode_tok_s"].is_number()) {
        tok_s = r["decode_tok_s"].get<double>();
        bytes = r.value("weight_bytes_per_token", 0.0);
      } else if (r.value("n_prompt", 0) > 0 && r["prefill_tok_s"].is_number()) {
        prefill_tok_s = r["prefill_tok_s"].get<double>();
      }
    }
    if (tok_s <= 0 || bytes <= 0) return fail("bench engine gave no decode figure");
    if (prefill_tok_s <= 0) return fail("bench engine gave no prefill figure");
    m.decode_efficiency = std::min(1.0, tok_s * bytes / 1e9 / m.core_bw_gbs);
    std::printf("engine decode on %s, 1 thread: %.1f tok/s x %.1f MB a token = %.1f GB/s: efficiency %.2f\n",
                a.model.c_str(), tok_s, bytes / 1e6, tok_s * bytes / 1e9, m.decode_efficiency);
    src += " -m " + a.model;
  }
  m.source = src;
  if (!write()) return fail("cannot write " + a.out);
  if (prefill_tok_s > 0) {
    // The simulator's own prefill model on this machine (the file just written), one host, one
    // thread, fitted to the measured figure.
    const nlohmann::json tj = {{"version", 1},
                               {"hosts", {{{"name", "here"}, {"address", "127.0.0.1"},
                                           {"machine", std::filesystem::absolute(a.out).string()}}}}};
    auto topo = cluster::parse_topology(tj.dump(), "calibration");
    if (!topo.ok()) return fail(topo.status().to_string());
    sim::SimOptions o;
    o.prompt = kPrompt;
    o.threads = 1;
    o.decode_efficiency = m.decode_efficiency;
    auto e = sim::fit_prefill_efficiency(*shape, *topo, o, 1, prefill_tok_s);
    if (!e.ok()) return fail("prefill: " + e.status().to_string());
    m.prefill_efficiency = std::min(1.0, *e);
    std::printf("engine prefill of %d tokens, 1 thread: %.1f tok/s: efficiency %.2f of the matmul throughput\n", kPrompt,
                prefill_tok_s, m.prefill_efficiency);
    if (!write()) return fail("cannot write " + a.out);
  }
  std::printf("wrote %s\n", a.out.c_str());
  return 0;
}

}  // namespace lattice::cli
