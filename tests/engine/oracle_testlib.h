// Helpers of the tests that check lattice against what it did not write: llama.cpp as the
// oracle (tests/node/llamacpp_oracle.mjs through node-llama-cpp) and files written by
// llama.cpp's own tools (llama-quantize output in tests/data, gguf-py at test time).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lattice/engine/model/model.h"

namespace lattice::engine::testing {

// Why the llama.cpp oracle cannot run here ("" when it can): tests/node/node_modules or node
// missing. Callers skip through LATTICE_SKIP_OR_FAIL("oracle", why).
std::string oracle_missing();
// Runs `node llamacpp_oracle.mjs mode path toks n`; the parsed JSON, or null after adding a
// test failure naming the command and its output.
nlohmann::json llamacpp_oracle(const std::string& mode, const std::string& path, const std::vector<int32_t>& toks,
                               int n);

// A directory for PYTHONPATH holding llama.cpp's gguf-py (scripts/gguf_py.sh, extracted into
// the build tree), after checking that python3 can import it with numpy. "" and *why set when
// it cannot.
std::string gguf_py_path(std::string* why);
// Runs a shell command with a deadline (timeout(1)); its exit code, output in *out.
int run_command(const std::string& cmd, std::string* out, int timeout_s = 120);

// lattice's greedy continuation of `prompt` (one session, 2 threads).
std::vector<int32_t> greedy_tokens(const Model& model, const std::vector<int32_t>& prompt, int n);
// The prompt the cross-checks use: 12 ids spread over the vocabulary.
std::vector<int32_t> spread_prompt(uint32_t n_vocab);
// Both token lists detokenized with the file's tokenizer must agree on their first n_bytes
// (each must be that long). Prints how many leading tokens are identical.
void expect_same_text_prefix(const Model& model, const std::vector<int32_t>& ours, const std::vector<int32_t>& theirs,
                             size_t n_bytes, const std::string& label);

}  // namespace lattice::engine::testing
