// A machine as the simulator sees it: how fast it reads memory, how fast it multiplies, how
// much memory it has, what it draws at load, whether it throttles when the load lasts. Presets
// for the Macs people cluster (machine_presets.cc, sources cited there), or a machine file
// written by `lattice sim --calibrate` (measured here; JSON, see docs/SIM.md).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/core/status.h"

namespace lattice::sim {

// A link measured by `sim --calibrate` on this machine (loopback between two processes).
struct MeasuredLink {
  double latency_us = 0;  // one way, small messages
  double gbytes_s = 0;    // large messages, GB/s (1e9 bytes)
  // A small all-reduce (8 KiB of f32) among K rank processes of this machine over this
  // provider, back to back (`lattice bench coll --procs -n K`), microseconds a call: what ranks
  // sharing the machine pay a collective beyond the wire (their turns on shared cores, the
  // provider's software), which a ping-pong does not show. Keyed by K; empty when not measured.
  std::map<int, double> allreduce_us;
  // Ranks of this machine in lockstep over this provider (tensor parallel, decode's kernel
  // between all-reduces, `bench coll --work`) against the same over shm: the shm step over this
  // one's (each less its back-to-back call while the ranks have cores of their own), a
  // fraction keyed by rank count (2 to 2x cores, at least 4, at most 8). For ranks joined by
  // this provider the simulator charges (1 / it - 1) x their work at its quiet pace (no other
  // core busy: what the provider adds takes the cores' time, not the memory they contend for)
  // beside Machine::lockstep_scaling's charge (beyond the cores, its figure for the cores).
  // Measured for loopback tcp on cores of their own (a call between kernels costs it more than
  // back to back, which shm's figure does not carry); machine files from before session 38 carry
  // one for the emulated verbs device too, whose pace line (lockstep_over_shm_us below) the
  // calibration writes instead.
  std::map<int, double> lockstep_scaling;
  // tcp only: the CPU the link emulator's relays (fabric/tcp/link_emu.h) take for the 8 KiB
  // all-reduce above over tcp?latency_us=50&gbytes_s=1, summed over the K ranks' relays,
  // microseconds a call (`bench coll --json`: emulator_cpu_us_per_call). A cable takes no CPU;
  // the relay, 30-50 us a message on session 20's host, does. Where ranks in lockstep hold every
  // core it is theirs: the simulator charges it to ranks on emulated tcp links beyond the cores.
  // Keyed by K; empty when not measured.
  std::map<int, double> emulator_cpu_us;
  // Pipeline stages of this machine over this provider (one stage computes while the others wait
  // on the provider, as a pipeline decodes) against the same over shm: the shm step's pace over
  // this one's (`bench coll --op chain --work`: the buffer through the K ranks with decode's
  // kernel at each, then the last rank's token broadcast), a fraction keyed by rank count (2 to
  // 2x cores, at least 4, at most 8). The simulator charges each stage's work (1 / this - 1)
  // more as synchronisation. Measured for the emulated verbs device, whose waiting stages' polls
  // and progress threads share the cores. Empty when not measured.
  std::map<int, double> pipeline_scaling;
  // allreduce_us's call at 256 KiB (a prefill step's hidden state: 32 rows of 2048 f32), where the
  // provider's own copies of every byte show (loopback tcp: the kernel's copies and its receive
  // path on the cores the ranks compute on, which the one-way stream's GB/s spreads over both).
  // The simulator takes the cost beyond the wire linearly in bytes between the two sizes (and
  // beyond, at the same slope). Keyed by K; empty when not measured.
  std::map<int, double> allreduce_256k_us;
  // Ranks of this machine in lockstep over this provider with prefill's kernel between 45 256 KiB
  // all-reduces and no warm-up (`bench coll --work 2M|8M --work-tokens 32`: a 32-token prefill
  // step's hidden state between a layer's shares of weights, a run's first large calls), against
  // the same over shm: how much longer a step is, the mean of the two sizes, microseconds keyed
  // by K; 0 when no longer. Measured for the emulated verbs device: its progress threads move
  // every byte on the cores the ranks compute on. A large call's cost does not follow the work
  // between calls the way decode's figure, a share of it, does (a 4 times larger kernel: the
  // step's excess about the same, or smaller; docs/SIM.md, sessions 34 and 37), so the simulator
  // charges a collective of the provider this in place of the share: beyond its wire model, with
  // shm's 256 KiB call (allreduce_256k_us) part of the step, linearly in bytes above 8 KiB (and
  // beyond 256 KiB at the same slope), the share fading out over the same bytes. Empty when not
  // measured.
  std::map<int, double> lockstep_256k_over_shm_us;
  // Ranks of this machine in lockstep over this provider with decode's kernel between 8 KiB
  // all-reduces (`bench coll --work 2M|8M`, the runs of lockstep_scaling), against the same over
  // shm: how much longer the provider's pace is than shm's, a straight line through the two
  // kernels' figures (the median of the starts' walls, each size): this much a call at no work
  // (lockstep_over_shm_us) and this much more per microsecond of shm's step
  // (lockstep_over_shm_slope), keyed by rank count. Beyond the cores the step is its core's
  // turns. The device's cost is mostly the call's (4 ranks on 2 cores: 0.43 ms more at a 0.36 ms
  // step, 0.67 ms at 1.32; 2 ranks 60 us at 0.18, 167 at 0.71; docs/SIM.md, session 38), which a
  // share of the work (lockstep_scaling) does not follow. The simulator charges it in place of
  // that share. Measured for the emulated verbs device; empty when not measured.
  std::map<int, double> lockstep_over_shm_us;
  std::map<int, double> lockstep_over_shm_slope;
};

struct Machine {
  std::string name;    // "m3-ultra" or the file's name
  std::string source;  // where the figures come from
  double mem_bw_gbs = 0;       // memory read bandwidth, all of the chip, GB/s
  double core_bw_gbs = 0;      // one thread's read bandwidth (CPU engines; 0: not limited per thread)
  int cores = 0;               // cores a CPU engine can use (0: not a CPU engine's limit)
  double compute_tflops = 0;   // dense matrix throughput the engine can use (TFLOP/s)
  double memory_gb = 0;        // memory size (GiB, as Apple sells it)
  // Fraction of mem_bw_gbs an engine reaches in decode, calibrated from a one-node figure (0: the
  // engine profile's default).
  double decode_efficiency = 0;
  // Fraction of compute_tflops an engine reaches in prefill, calibrated from a one-node prefill
  // figure (`sim --calibrate -m`; 0: the engine profile's default).
  double prefill_efficiency = 0;
  // What each core's decode kernel keeps of its rate alone when every core runs it at once
  // (`sim --calibrate`: shared execution units, caches and memory the streaming test does not
  // show); 1 when not measured.
  double kernel_scaling = 1;
  // The same for prefill's compute-bound kernel (the engine's quantized matmul over a prompt's
  // rows): what each core keeps of its rate alone when every core runs it at once (`sim
  // --calibrate`: the matmul on one thread and on every core; 1 when not measured).
  double compute_scaling = 1;
  // The work each tensor-parallel rank does on a layer's whole hidden state, whatever its slice
  // (RMSNorm, the activations' 8-bit quantization and the residual add, before attention and
  // before the FFN), on one thread: nanoseconds an element of the hidden state a layer (`sim
  // --calibrate`: the engine's own kernels). The simulator charges it to every rank whole, in
  // the one-rank fit too, so that the fitted efficiencies no longer hold it and divide it by
  // the ranks. 0: not measured (folded into the efficiencies, as before).
  double replicated_ns = 0;
  // A mixture of experts' work every tensor-parallel rank does whole on each MoE layer (`sim
  // --calibrate`: the engine's kernels, one thread, 32 rows of 2048): the router's F32 matmul
  // over every expert, nanoseconds a multiply-add (rows x n_embd x n_expert), and for each expert
  // a row chose its gathered input, 8-bit quantized for the expert's matmuls, and the expert's
  // output added back, nanoseconds an element (rows x n_expert_used x n_embd). The simulator
  // charges both to every rank whole (expert parallel: the rows of its own experts), in the
  // one-rank fit too. 0: not measured (the router's work then counted with the weights).
  double moe_router_ns = 0;
  double moe_row_ns = 0;
  // What prefill's matmul keeps of its rate on one of K tensor-parallel slices of a layer (rows
  // for Q, K, V, gate and up; columns for the output and down projections) against the whole,
  // keyed by K (2..8; `sim --calibrate`, one thread). The simulator divides a tensor-parallel
  // rank's compute rate by it. Not measured: 1.
  std::map<int, double> slice_efficiency;
  // Ranks of this machine that meet at every collective (tensor and expert parallel, each rank on
  // cores of its own) wait at each for that segment's slowest rank, and which rank is slowest
  // changes from one segment to the next: keyed by rank count (2..cores, at most 8), the slower rank's mean
  // segment over the lockstep step less the collective (`sim --calibrate`: `bench coll --work`,
  // decode's kernel between all-reduces). The simulator charges each collective (1 / this - 1)
  // times the work before it as synchronisation; ranks beyond the cores, the figure for as many
  // ranks as cores (the cores meet at each collective). Not measured: none.
  std::map<int, double> lockstep_scaling;
  double power_load_w = 0;     // drawn while decoding
  double power_idle_w = 0;
  bool throttles = false;      // sustained load lowers its clocks (laptops)
  double sustained_factor = 1; // speed under sustained load, relative to a burst
  int tb5_ports = 0;           // Thunderbolt 5 ports usable for RDMA
  int tb5_controllers = 0;     // controllers behind them (ports beyond share one)
  // Measured by calibration: "shm", "tcp", and "verbs" (the emulated device between two processes
  // here: used only for ranks sharing this machine, never for a verbs cable).
  std::map<std::string, MeasuredLink> links;

  // The read bandwidth `threads` threads of one process get when `sharers` processes share the
  // machine (each with its own threads).
  double read_gbs(int threads, int sharers) const;
  // How many cores' worth of time one of `sharers` processes of `threads` threads holds while they
  // all run in lockstep (tensor parallel ranks, a rank's threads): threads while they fit the
  // cores (or cores is unknown), else threads / the rounds the cores need to run every thread's
  // part once (3 ranks on 2 cores: two rounds, half a core each; the fluid share, 2/3, would
  // need the scheduler to slice parts shorter than its time slice).
  double cores_held(int threads, int sharers) const;
  // What an engine whose kernels stream at `efficiency` of a thread's read rate reaches in one of
  // `sharers` processes working at once: on a CPU (core_bw_gbs known) its threads' own rate for
  // the time they hold a core, capped by the memory's streaming rate (mem_bw_gbs, all threads)
  // shared among the processes; elsewhere (a GPU) `efficiency` of its share of mem_bw_gbs. The
  // threads' rate falls from alone to kernel_scaling as the busy cores go from one to all.
  double engine_read_gbs(int threads, int sharers, double efficiency) const;
  // slice_efficiency for `parts` slices: the figure for that many, else for the most below it
  // that was measured; 1 when none was.
  double slice_rate(int parts) const;
  // What each of `sharers` processes of `threads` threads working at once keeps of its compute
  // rate alone: falls from 1 to compute_scaling as the busy cores go from one to all.
  double compute_scale(int threads, int sharers) const { return busy_scale(compute_scaling, threads, sharers); }

 private:
  // 1 - (1 - fraction) (busy - 1) / (cores - 1), busy the cores the processes' threads occupy.
  double busy_scale(double fraction, int threads, int sharers) const;
};

Result<Machine> machine_preset(const std::string& name);
std::vector<std::string> machine_preset_names();
// A machine file (JSON). kInvalidArgument names the key that is wrong.
Result<Machine> machine_from_json(const nlohmann::json& j, const std::string& source);
Result<Machine> load_machine(const std::string& path);
nlohmann::json machine_to_json(const Machine& m);
// A preset name, or a path (relative paths against `base_dir`).
Result<Machine> resolve_machine(const std::string& name_or_path, const std::string& base_dir);

}  // namespace lattice::sim
