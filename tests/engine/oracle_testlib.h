// The llama.cpp oracle of the engine tests (tests/node/llamacpp_oracle.mjs through
// node-llama-cpp): greedy tokens of a GGUF file after a prompt of token ids, and the greedy
// tokens of lattice's Session for the same prompt, to compare.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/model/model.h"

namespace lattice::engine::testing {

// Whether tests/node has node-llama-cpp installed (the oracle can run).
bool oracle_available();
// llama.cpp's n greedy tokens after `prompt` (fed as ids, no BOS), or an error with the
// oracle's output.
Result<std::vector<int32_t>> oracle_greedy(const std::string& path, const std::vector<int32_t>& prompt, int n);
// lattice's n greedy tokens after `prompt` (one Session, context 64); fails the test on error.
std::vector<int32_t> session_greedy(const Model& m, const std::vector<int32_t>& prompt, int n);

}  // namespace lattice::engine::testing
