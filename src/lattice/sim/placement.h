// How the model is laid out over the simulated nodes, decided the way `lattice plan` decides it
// (engine/parallel/plan.cc): auto is expert parallel for a mixture of experts while every node
// owns an expert and a head (when the engine runs expert parallel), else tensor parallel while
// every node owns a KV head (MLA: a query head), else pipeline stages. Tensor-parallel shares come
// from the engine's make_shard_layout, stages from pp_layers and experts from place_experts, all
// weighted by the nodes' memory, as plan_placement does. MLA's latent projections are on every
// node under tensor and expert parallel (node_weight_share).
#pragma once

#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/model/shard.h"
#include "lattice/sim/shape.h"

namespace lattice::sim {

enum class Mode : uint8_t { kAuto, kTensor, kPipeline, kExpert };
std::string_view to_string(Mode m);
Result<Mode> parse_mode(std::string_view s);

struct NodeShare {
  double f_kv = 0, f_ff = 0, f_vocab = 0;  // tensor-parallel fractions (1 in pipeline mode)
  engine::Range layers;                    // layers this node computes
  uint32_t experts = 0;                    // expert parallel: whole experts held (of every MoE layer)
  double weight_bytes = 0, kv_bytes = 0, total_bytes = 0, memory_bytes = 0;
  std::string part;
};

struct Layout {
  Mode mode = Mode::kTensor;
  int tp = 1, pp = 1;
  std::string why;
  std::vector<NodeShare> nodes;  // by rank
  std::vector<int> expert_owner; // expert parallel: the rank of each expert (place_experts)
  bool fits = true;
  double missing_bytes = 0;
};

// What the engine does that changes the layout (EngineProfile carries it).
struct PlaceRules {
  bool auto_expert = true;      // auto picks expert parallel for MoE models (lattice's plan)
  bool replicate_output = false; // the output matrix whole on every node (exo: lm_head unsharded)
  bool mla_expanded_cache = false; // MLA's keys and values cached per head (mlx-lm), split by heads
};

// `memory_bytes` per node; n_ctx tokens of KV cache at `kv_elem_bytes` a value.
// `split_weights`: the shares' weights (plan uses the memory; empty: equal).
Result<Layout> place(const ModelShape& shape, const std::vector<double>& memory_bytes, Mode mode, uint32_t n_ctx,
                     double kv_elem_bytes, const std::vector<double>& split_weights, PlaceRules rules = {});

}  // namespace lattice::sim
