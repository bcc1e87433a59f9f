// What the simulator knows of the engine that runs on the nodes: how many bytes its activations
// and KV cache take, how close it gets to the machine's bandwidth and compute, what each
// collective costs it beyond the wire, and how its collectives are built. "lattice" is this
// repository's engine (its collectives follow coll/plan and coll::choose); "mlx" is MLX on the GPU
// with JACCL as exo runs it; "llamacpp-rpc" is llama.cpp's RPC layer split. Sources in the .cc.
#pragma once

#include <string>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::sim {

enum class CommStyle : uint8_t {
  kLattice,  // coll::choose over coll/plan's schedules (landing zones where every link is shm)
  kJaccl,    // MLX JACCL: on a full mesh one round to every peer at every size, else its ring
  kRpcStar,  // llama.cpp RPC: the client drives every server with request/response round trips
};

struct EngineProfile {
  std::string name, source;
  CommStyle comm = CommStyle::kLattice;
  double act_bytes = 4;          // bytes per activation element on the wire
  double kv_elem_bytes = 4;      // bytes per KV cache element
  double decode_efficiency = 0.8;   // fraction of the read bandwidth decode reaches (machine's figure wins)
  double compute_efficiency = 0.5;  // fraction of compute_tflops prefill reaches
  double sync_us = 0;            // per collective: the engine's own synchronisation (see sync_jitter)
  // sync_us is the mean of what the slower of two ranks spends (a 2-rank figure); each rank's own
  // cost per collective is drawn from an exponential distribution of mean sync_us / 1.5 (the
  // expected larger of two such draws is 1.5 times their mean), so W ranks wait for the largest
  // of W draws. false: every rank spends sync_us exactly.
  bool sync_jitter = false;
  int rpc_round_trips = 0;       // kRpcStar: request/response exchanges per server per token
  uint32_t prefill_batch = 256;  // rows per prefill step over several nodes (tensor, expert parallel)
  uint32_t solo_prefill_batch = 0;  // rows per prefill step on one node (0: prefill_batch)
  uint32_t pp_micro_batch = 0;      // rows per pipeline micro-batch of the prefill (0: prefill_batch)
  // Shares weighted by the nodes' memory (lattice's planner, llama.cpp's default tensor split)
  // rather than equal (MLX's sharded layers).
  bool split_by_memory = true;
  bool auto_expert = true;        // auto picks expert parallel for MoE models (lattice's plan rule)
  bool replicate_output = false;  // the output matrix whole on every node under tensor parallel
  bool mla_expanded_cache = false; // MLA's keys and values cached per head, not the latent
  // Its verbs links run lattice's staged protocol (whole 32 KiB slots and acks, link.h); MLX's
  // JACCL posts its own buffers.
  bool verbs_staged = false;
};

Result<EngineProfile> engine_profile(const std::string& name);
std::vector<std::string> engine_profile_names();

}  // namespace lattice::sim
