// How a model is spread over nodes when the user says `auto`: one rule for plan, run, serve
// and sim (defined in plan.cc). Apart from plan.h because distributed.h's Placement (a
// rank's mapped shard) and plan.h's (the layout computed from a file) share a name.
#pragma once

#include <string>

#include "lattice/engine/model/hparams.h"

namespace lattice::engine::parallel {

enum class ParallelMode : uint8_t { kAuto, kTensor, kPipeline, kExpert };

// `auto`'s rule, for plan, run, serve and sim alike: expert parallel for a mixture of experts
// with 2..n_expert nodes that each own at least one head, else tensor parallel while every node
// owns a head (KV heads; query heads under multi-head latent attention), else pipeline. why:
// the one-line reason.
ParallelMode auto_mode(const Hparams& hp, int world, std::string* why = nullptr);


}  // namespace lattice::engine::parallel
