// `lattice run`'s options (one struct: the flags of cmd_run.cc fill it) and `lattice run --nodes N`:
// tensor-parallel generation over a cluster of ranks.
//
// Without a launcher around it, the command starts N local rank processes of itself (the
// launcher from cluster/, a fresh cluster secret, provider shm or tcp) and waits for them;
// under `lattice launch` (LATTICE_RANK in the environment) it is one rank: it joins the
// cluster, maps its shard of the model, and generates in lockstep with the others. Rank 0
// prints the text and the report (or --json: the single-node object plus per-rank traffic).
#pragma once

#include <cstdint>
#include <string>

#include "discover_flags.h"
#include "lattice/engine/sampler/sampler.h"

namespace lattice::cli {

struct RunArgs {
  std::string model, prompt;
  int nodes = 0;               // > 0: local ranks to start; 0: one process, or a rank under a launcher
  std::string provider = "shm";
  std::string parallel = "tp";  // tp | pp | ep | auto (ep for mixture-of-experts files, else tp)
  std::string split;            // "3,1": relative share of each rank (slower/smaller nodes less); empty: equal
  double ep_replicate = 0;      // ep: share of the other ranks' experts each rank also holds (0..1)
  // ep: how a step's rows reach the experts: auto (the measured rule), reduce or a2a
  // (engine::EpPrefill); with auto, the all-to-all path from this many rows a step (-1: the
  // engine's default, 0: never).
  std::string ep_prefill = "auto";
  int ep_a2a_min_rows = -1;
  int batch = 64;               // prompt rows a step
  double deadline_s = 0;        // the whole job (0: none); ranks still running then are stopped, exit 124
  // --nodes: pin the ranks to CPUs (cluster::parse_bind): auto (a block of CPUs each while they
  // fit, else unpinned), cores (beyond the CPUs too: rank r on CPU r mod CPUs), none.
  std::string bind = "auto";
  int n_predict = 128;
  int threads = 0;             // 0: all cores on one node, 1 per rank over ranks
  float temp = 0.8f;
  uint64_t seed = 0;
  bool seed_set = false;
  int top_k = 40;
  float top_p = 0.95f, min_p = 0.05f, repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  int ctx = 0;
  bool chat = false, json = false, no_pack = false, ignore_eos = false, demo = false;
  // A lost rank (killed, stopped, cut off) makes the survivors shrink the cluster, re-place
  // the model over themselves and finish the request; false: the run fails, naming the rank.
  bool recover = true;
  std::string inject_fault;  // "RANK@TOKEN": that rank SIGKILLs itself after TOKEN tokens (demos, tests)
  // --discover: find the hosts (cluster/discover_topology.h) and run one rank on each through
  // the remote template, instead of local ranks.
  DiscoverFlags discover;
};

// "RANK@N[:kill|:stop]" (empty: no fault) into the rank, the token or step N, and the signal
// (SIGKILL or SIGSTOP); false when malformed. `run` and `train` share it.
bool parse_inject_fault(const std::string& text, int* rank, int* at, int* sig);
// True when this process was started as a rank of a cluster of more than one.
bool under_cluster_launcher();
// The sampler the options ask for; the seed is 0 unless --seed was given (callers that may
// pick a random one do so).
engine::SamplerParams sampler_params(const RunArgs& a);
int run_distributed(RunArgs args);

}  // namespace lattice::cli
