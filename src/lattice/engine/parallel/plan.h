// Placement: how a model is laid out over a set of nodes (tensor parallel, pipeline stages,
// expert parallel: each expert of a mixture-of-experts layer whole on one node, by memory),
// what each node holds and sends per token, and whether it fits at all. Computed from the
// GGUF tensor table (nothing is loaded) and the nodes' memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/model/hparams.h"
#include "lattice/engine/model/shard.h"
#include "lattice/engine/parallel/auto_mode.h"

namespace lattice::engine::parallel {


struct NodeSpec {
  std::string name;
  uint64_t memory_bytes = 0;  // usable for the model (weights + KV cache + scratch)
};

struct NodePlacement {
  std::string name;
  uint64_t weight_bytes = 0;   // weights this node maps and touches
  uint64_t kv_bytes = 0;       // KV cache at the planned context
  uint64_t total_bytes = 0;    // weights + KV + scratch
  uint64_t memory_bytes = 0;
  uint64_t sent_per_token = 0; // bytes this node sends per decoded token
  std::string part;            // "kv heads [0,2) ffn [0,2816) vocab [0,16000)" or "layers [0,11)"
  uint32_t experts = 0;        // expert parallel: experts this node owns in every MoE layer
  uint64_t expert_bytes = 0;   // of weight_bytes: its experts' weights
};

struct Placement {
  ParallelMode mode = ParallelMode::kTensor;
  int tp = 1, pp = 1;
  uint32_t n_ctx = 0;
  std::vector<NodePlacement> nodes;
  uint64_t model_bytes = 0;
  bool fits = true;
  uint64_t missing_bytes = 0;  // when !fits: memory short in total (or on the worst node)
  std::string why;             // one line: why this mode
};

// Expert parallel: per node, its experts whole (place_experts by memory), its share of the
// attention heads, of the dense FFNs (shared experts too) and of the vocabulary, the routers
// everywhere. Generic over architectures: tensors are told apart by name ("*_exps" experts,
// "ffn_gate_inp"/"exp_probs_b" routers, "attn_*", "ffn_*", norms).
Result<std::vector<NodePlacement>> plan_experts(const GgufFile& file, const Hparams& hp,
                                                const std::vector<NodeSpec>& nodes, uint32_t n_ctx);

// The weight bytes node i holds under a tensor-parallel layout, told apart by name: routers,
// norms and biases on every node, and for multi-head latent attention the latent projections
// (attn_q_a, attn_kv_a_mqa) too; other attention tensors by the node's heads, dense FFNs,
// shared experts and (tensor parallel, f_experts < 0) every expert by the node's columns;
// expert parallel: f_experts of the experts' bytes. The embedding counts only when tied (its
// rows are the output's); expert_bytes: of the total, the experts'.
struct WeightShare {
  double total = 0, expert_bytes = 0;
};
WeightShare node_weight_share(const GgufFile& file, const Hparams& hp, const ShardLayout& layout, int node,
                              double f_experts);
// KV cache of node i over n_layers layers at n_ctx: its KV heads' keys and values, or under
// multi-head latent attention the whole latent (every node keeps all of it).
uint64_t node_kv_bytes(const Hparams& hp, const ShardLayout& layout, int node, uint32_t n_ctx, uint32_t n_layers);

// kInvalidArgument for no nodes; the model's hyper-parameters must be readable.
Result<Placement> plan_placement(const GgufFile& file, const std::vector<NodeSpec>& nodes, ParallelMode mode,
                                 uint32_t n_ctx);

}  // namespace lattice::engine::parallel
