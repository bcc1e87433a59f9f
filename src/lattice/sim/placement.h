// How the model is laid out over the simulated nodes, decided the way `lattice plan` decides it
// (engine/parallel/plan.cc): auto is tensor parallel while every node owns a KV head, else
// pipeline stages; tensor-parallel shares come from the engine's make_shard_layout and stages from
// pp_layers, both weighted by the nodes' memory, as plan_placement does. Expert parallel (ep), which
// plan does not choose yet, keeps attention tensor parallel and gives every node whole experts.
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
  engine::Range experts;                   // expert parallel: whole experts held
  double weight_bytes = 0, kv_bytes = 0, total_bytes = 0, memory_bytes = 0;
  std::string part;
};

struct Layout {
  Mode mode = Mode::kTensor;
  int tp = 1, pp = 1;
  std::string why;
  std::vector<NodeShare> nodes;  // by rank
  bool fits = true;
  double missing_bytes = 0;
};

// `memory_bytes` per node; n_ctx tokens of KV cache at `kv_elem_bytes` a value.
// `split_weights`: the shares' weights (plan uses the memory; empty: equal).
Result<Layout> place(const ModelShape& shape, const std::vector<double>& memory_bytes, Mode mode, uint32_t n_ctx,
                     double kv_elem_bytes, const std::vector<double>& split_weights);

}  // namespace lattice::sim
