// `lattice sim`: what a model does on a cluster. The hosts come from a topology file (the same
// files `plan` and `launch` read), each with a machine (a preset or a calibrated machine file) and
// cables with link models; the layout is the one lattice's planner chooses (placement.h); one
// decoded token and one prefill step then run through the discrete-event model (des.h), every
// collective following coll/plan's schedule as coll::choose would pick it.
//
// Plain computation: no I/O besides resolving machine files named by the topology.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/cluster/topology.h"
#include "lattice/core/status.h"
#include "lattice/sim/des.h"
#include "lattice/sim/engine_profile.h"
#include "lattice/sim/machine.h"
#include "lattice/sim/placement.h"
#include "lattice/sim/shape.h"

namespace lattice::sim {

struct SimOptions {
  Mode mode = Mode::kAuto;
  int hosts = 0;               // the first K hosts of the topology (0: all)
  uint32_t n_ctx = 4096;       // KV cache size per node
  uint32_t prompt = 512;       // prompt tokens: prefill and time to first token
  uint32_t batch = 1;          // sequences decoded together
  int threads = 1;             // threads per rank (CPU machines: bounds the read bandwidth)
  std::string engine = "lattice";
  bool sustained = false;      // apply the machines' sustained (thermal) factor
  std::string default_machine; // for hosts without "machine" (empty: an error names the host)
  std::string base_dir;        // where relative machine files are looked up
  double decode_efficiency = 0;  // > 0: overrides every machine's and the engine's figure
  double prefill_efficiency = 0; // > 0: the same for the fraction of compute prefill reaches
  // Per decode step, on every rank: the time outside the forward step (sampling, the generator),
  // which does not shrink with the ranks (measured on one rank: calibrate_one_node).
  double token_overhead_ms = 0;
  // One node runs the distributed path (`run --nodes 1`), whose prefill steps are as many rows as
  // several nodes' (the engine's prefill_batch), not the single-process engine's
  // (solo_prefill_batch). Set by calibrate_one_node from such a run.
  bool one_node_distributed = false;
};

struct NodeResult {
  std::string name, machine, part;
  NodeShare share;
  Breakdown token;             // one decoded token on this node
  double read_gbs = 0;         // bandwidth the engine reaches here
  double power_w = 0;          // at load
  bool throttles = false;
};

struct LinkResult {
  std::string a, b, medium;
  double latency_us = 0, gbytes_s = 0;
  double bytes_per_token_ab = 0, bytes_per_token_ba = 0;
  double busy_fraction = 0;    // share of a decoded token's time the cable is busy
};

struct SimResult {
  std::string model, engine, why;
  Mode mode = Mode::kTensor;
  int world = 1, tp = 1, pp = 1;
  std::string allreduce;       // the algorithm (and path) of the per-layer all-reduce
  // Ranks sharing one machine whose file measured their all-reduce (Machine::links[..]
  // .allreduce_us): that 8 KiB call, and what each collective costs beyond the wire model.
  double colocated_allreduce_us = 0, colocated_sync_us = 0;
  // And at 256 KiB (MeasuredLink::allreduce_256k_us): the measured call, and what the sync grows
  // by a KiB beyond 8 (a prefill step's larger calls); 0 when not measured.
  double colocated_allreduce_256k_us = 0, colocated_sync_us_per_kib = 0;
  // Ranks in lockstep on one machine (Machine::lockstep_scaling, times the provider's own
  // MeasuredLink::lockstep_scaling) keep about this of their speed: the rest is charged as
  // synchronisation at each collective (the provider's part on the work at its quiet pace).
  // 1: not charged.
  double lockstep_scaling = 1;
  // Ranks on one machine over the emulated verbs device: its 256 KiB step between prefill's
  // kernels this much longer than shm's (MeasuredLink::lockstep_256k_over_shm_us), charged
  // linearly in bytes above 8 KiB in place of the lockstep share (colocated_sync_us_per_kib;
  // colocated_allreduce_256k_us is then shm's call and this). 0: none or not measured.
  double lockstep_256k_over_shm_us = 0;
  // Ranks on one machine over the emulated verbs device: a call waits this (us) plus slope x the
  // step shm would take (MeasuredLink::lockstep_over_shm_us and _slope), in place of the
  // device's lockstep share. Negative: not charged.
  double lockstep_over_shm_us = -1, lockstep_over_shm_slope = 0;
  // Pipeline stages on one machine over a provider whose chain it measured against shm
  // (MeasuredLink::pipeline_scaling) keep this of their speed: the rest is charged as
  // synchronisation after each stage's work. 1: not charged.
  double pipeline_scaling = 1;
  // Ranks beyond one machine's cores over emulated tcp links: the relays' measured CPU an 8 KiB
  // all-reduce (MeasuredLink::emulator_cpu_us), and what each message of a collective holds
  // every rank for it. 0: not charged.
  double emulator_cpu_us = 0, emulator_us_per_msg = 0;
  // Ranks beyond a machine's cores (tensor or expert parallel), pinned round them as `run --bind
  // cores` does and taking turns on each: the most ranks on one core. 0: every rank on cores of
  // its own.
  int core_turns = 0;
  double decode_tok_s = 0, prefill_tok_s = 0, ttft_ms = 0, token_ms = 0;
  double model_bytes = 0, bytes_per_token = 0;
  double energy_j_per_token = 0;
  bool fits = true;
  double missing_bytes = 0;
  Breakdown token;             // the slowest node's token (where the time goes)
  std::vector<NodeResult> nodes;
  std::vector<LinkResult> links;
};

Result<SimResult> simulate(const ModelShape& shape, const cluster::Topology& topo, const SimOptions& options);

// The decode efficiency (shared by every node) with which `simulate` at `fit_hosts` hosts predicts
// `tok_s`: calibrating a model's engine on its smallest published node count. Bisection over
// (0, top]; kInvalidArgument when even `top` falls short.
Result<double> fit_decode_efficiency(const ModelShape& shape, const cluster::Topology& topo, SimOptions options,
                                     int fit_hosts, double tok_s, double top = 1.0);

// The prefill efficiency (fraction of compute_tflops, shared by every node) with which `simulate`
// at `fit_hosts` hosts predicts `tok_s` of prefill over options.prompt tokens: calibrating prefill
// on a measured one-node figure. kInvalidArgument when even 1.0 falls short (prefill bound by
// reads or links there).
Result<double> fit_prefill_efficiency(const ModelShape& shape, const cluster::Topology& topo, SimOptions options,
                                      int fit_hosts, double tok_s, double top = 1.0);

// The largest efficiency calibrate_one_node fits: a run can beat the machine file's figures when
// those were measured on a loaded machine, never by this much on a sound one.
constexpr double kMaxCalibratedEfficiency = 4.0;

// One node's measured figures of the model being predicted (`lattice bench engine --json` or
// `lattice run --json` on it).
struct OneNodeFigures {
  double decode_tok_s = 0;
  uint32_t decode_pos = 0;      // the cache's average length while it decoded
  double prefill_tok_s = 0;     // 0: not measured (prefill keeps the machine's or engine's figure)
  uint32_t prefill_tokens = 0;  // the prompt it prefilled
  int threads = 1;
  double outside_ms = 0;        // a decoded token's time outside the forward step (`run --json`'s ranks)
  bool distributed = false;     // a `run --nodes 1` report (SimOptions::one_node_distributed)
};

// The decode efficiency, then the prefill efficiency, with which the first host of `topo` alone
// reproduces `f` (fit_decode_efficiency, fit_prefill_efficiency at that host's position and
// prompt), written into the returned options with f.outside_ms as token_overhead_ms (set before the
// fit, so the efficiency is the forward step's alone): each model calibrated on its own one-node run, so
// larger node counts come from the link, schedule and placement models only.
Result<SimOptions> calibrate_one_node(const ModelShape& shape, const cluster::Topology& topo, SimOptions options,
                                      const OneNodeFigures& f);

nlohmann::json to_json(const SimResult& r);
std::string render_text(const SimResult& r);

}  // namespace lattice::sim
