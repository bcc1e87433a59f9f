// Distributed generation: one request over the ranks of a cluster, tensor- or pipeline-
// parallel, surviving the loss of ranks. Every rank calls generate_distributed() with the same
// options and request; it
//   1. maps this rank's shard of the model for the current membership (place()),
//   2. runs a Generator over it (prefill, decode, sampling: the same on every rank),
//   3. on a lost rank (kPeerLost / kTimeout in a collective) shrinks to the survivors, agrees
//      on the progress (recovery.h), re-places the model over them, re-prefills the prompt and
//      the tokens so far, and continues. At most world - 1 recoveries; a rank that cannot
//      rejoin the survivors is fenced (fails with kPeerLost) and must exit;
//   4. gathers every rank's report (shard, traffic and collective time per token).
// Text is handed to on_text on the rank that is rank 0 at the time (a new rank 0 takes over
// from the agreed tokens after a loss of the old one).
//
// Thread safety: the rank's thread; the Cluster is used by it alone for the call's duration.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lattice/cluster/cluster.h"
#include "lattice/coll/comm.h"
#include "lattice/core/status.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/parallel/comm_group.h"
#include "lattice/engine/parallel/pp.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/engine/tokenizer/tokenizer.h"

namespace lattice::engine::parallel {

// kExpert: mixture-of-experts layers expert-parallel (each expert whole on one rank, placed
// by the ranks' shares), everything else tensor-parallel; on a file without experts it is
// tensor parallel.
enum class Parallelism : uint8_t { kTensor, kPipeline, kExpert };

struct DistOptions {
  std::string model_path;
  Parallelism parallel = Parallelism::kTensor;
  // Share per first-epoch rank (empty: equal; expert parallel: each rank's memory, as
  // memory_bytes or the machine's total, gathered at the start).
  std::vector<double> split;
  uint64_t memory_bytes = 0;  // this rank's memory for expert placement (0: the machine's MemTotal)
  double expert_spare = 0;    // expert parallel: replicas of the others' experts (Shard::expert_spare)
  uint32_t n_threads = 1;     // per rank
  uint32_t n_ctx = 0;         // positions of the sequence (0: prompt + n_predict)
  uint32_t max_seqs = 1;      // sequences a step (tensor parallel)
  uint32_t n_batch = 64;      // rows a step (a prompt longer than that is prefilled in chunks)
  // Expert parallel: the path of a step (ForwardOptions::ep_prefill, a2a_min_rows).
  EpPrefill ep_prefill = EpPrefill::kAuto;
  uint32_t a2a_min_rows = ForwardOptions::kEpA2aMinRows;
  bool pack = true;
  bool recover = true;        // false: a lost rank fails the request
  std::chrono::milliseconds coll_timeout{30000};
  std::chrono::milliseconds recovery_timeout{30000};  // per shrink and per agreement
};

// This rank's shard of the model and the stepper over it, for the cluster's current epoch.
struct Placement {
  std::unique_ptr<Model> model;
  std::unique_ptr<CommGroup> group;
  std::unique_ptr<Forward> forward;  // tensor parallel
  std::unique_ptr<PpSession> pp;     // pipeline
  double load_s = 0;
  Stepper& stepper() { return forward ? static_cast<Stepper&>(*forward) : static_cast<Stepper&>(*pp); }
  uint32_t n_ctx() const { return forward ? forward->options().n_ctx : pp->n_ctx(); }
  const CollStats& coll_stats() const { return group->stats(); }
};

// Maps this rank's shard over the current members; `weights` are their shares (empty: equal).
Result<std::unique_ptr<Placement>> place(const DistOptions& options, cluster::Cluster& cluster,
                                         coll::Communicator& comm, std::vector<double> weights, uint32_t n_ctx);

struct RecoveryEvent {
  std::vector<int> lost_ranks;  // first-epoch ranks
  size_t at_token = 0;
  uint64_t epoch = 0;
  int world_before = 0, world_after = 0;
  double recover_ms = 0, shrink_ms = 0, place_ms = 0, prefill_ms = 0;
  std::string cause;
  nlohmann::json to_json() const;
};

struct DistHooks {
  // Text as it is generated, on the current rank 0 only.
  std::function<void(std::string_view)> on_text;
  // Before each token is chosen, with the number generated so far: a non-ok status makes this
  // rank leave at once with it (fault injection in tests; the CLI's --inject-fault kills).
  std::function<Status(size_t n_generated)> before_token;
  // After each recovery, on the new rank 0.
  std::function<void(const RecoveryEvent&)> on_recovery;
};

struct DistResult {
  GenerateResult gen;
  std::vector<RecoveryEvent> recoveries;
  int world_at_start = 0, world = 0;
  uint64_t epoch = 0;
  int rank = 0;                  // this rank, now
  double decode_s = 0;           // first chosen token to the last
  uint32_t steps = 0;            // decode steps in decode_s
  // When each token was chosen (the first one ending the prefill), on the steady clock
  // (CLOCK_MONOTONIC on Linux), seconds: inter-token times, and windows of a run lined up with
  // another process's clock (bench/sim_vs_real.py --interleave).
  std::vector<double> token_clock_s;
  double decode_step_s = 0;      // of decode_s, inside the stepper's forward steps (their collectives included; the
                                 // chosen token's gather is outside)
  ExpertLoad decode_load;        // mixture of experts: the decode steps' expert load (last placement)
  // The first prefill (the steps up to the first chosen token): inside the stepper's forward
  // steps, and in collectives during those steps (the chosen token's gather too, which is outside
  // the forward steps: a pipeline's first stage waits there for the last). Both 0 until it ends.
  double prefill_step_s = 0, prefill_coll_s = 0;
  nlohmann::json ranks;          // every rank's report, by current rank (on every rank)
  // Mixture of experts: tokens per expert (summed over layers) per rank that owns it, the
  // rows per rank and the balance of the decode steps (null for a dense model).
  nlohmann::json expert_load;
  // Expert parallel: the steps of the first prefill by path, and the rule that chose them
  // ({"mode", "a2a_min_rows", "a2a_steps", "a2a_rows", "reduce_steps", "reduce_rows", "path"};
  // null otherwise).
  nlohmann::json ep_prefill;
};

Result<DistResult> generate_distributed(cluster::Cluster& cluster, const DistOptions& options,
                                        const Tokenizer& tokenizer, GenerationRequest request,
                                        const DistHooks& hooks = {});

}  // namespace lattice::engine::parallel
