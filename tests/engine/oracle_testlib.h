// Helpers of the tests that check lattice against what it did not write: llama.cpp as the
// oracle (tests/node/llamacpp_oracle.mjs through node-llama-cpp) and files written by
// llama.cpp's own tools (llama-quantize output in tests/data, gguf-py at test time).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/model/model.h"

namespace lattice::engine::testing {

// Why the llama.cpp oracle cannot run here ("" when it can): tests/node/node_modules or node
// missing. Callers skip through LATTICE_SKIP_OR_FAIL("oracle", why).
std::string oracle_missing();
// Runs `node llamacpp_oracle.mjs mode path toks n`; the parsed JSON, or null after adding a
// test failure naming the command and its output.
nlohmann::json llamacpp_oracle(const std::string& mode, const std::string& path, const std::vector<int32_t>& toks,
                               int n);

// llama.cpp's gguf-py: the PYTHONPATH directory scripts/gguf_py.sh extracts into the build
// tree, and a python3 that imports it with numpy. Empty (and *why set) when there is none.
struct GgufPy {
  std::string python, path;
  bool ok() const { return !python.empty(); }
  // The shell command that runs `script args` with it (script is quoted, args are not).
  std::string command(const std::string& script, const std::string& args) const;
};
GgufPy gguf_py(std::string* why);
// Runs a shell command with a deadline (timeout(1)); its exit code, output in *out.
int run_command(const std::string& cmd, std::string* out, int timeout_s = 120);

// lattice's greedy continuation of `prompt` (one session, 2 threads).
std::vector<int32_t> greedy_tokens(const Model& model, const std::vector<int32_t>& prompt, int n);
// The prompt the cross-checks use: 12 ids spread over the vocabulary.
std::vector<int32_t> spread_prompt(uint32_t n_vocab);
// Greedy continuations of `prompt` by lattice (ours) and llama.cpp (theirs), detokenized
// with the file's tokenizer, must agree on their first n_bytes (each must be that long), or
// part there only at a near-tie: at the first differing token, with the same history,
// llama.cpp's log-probabilities of its token and of lattice's differ by at most `tie` (both
// engines' values are printed). Prints how many leading tokens are identical.
void expect_same_text_prefix(const Model& model, const std::vector<int32_t>& prompt, const std::vector<int32_t>& ours,
                             const std::vector<int32_t>& theirs, size_t n_bytes, double tie, const std::string& label);

// Shorthands of the above: whether the oracle can run, llama.cpp's n greedy tokens after
// `prompt` (an error with the oracle's output); lattice's are greedy_tokens().
bool oracle_available();
Result<std::vector<int32_t>> oracle_greedy(const std::string& path, const std::vector<int32_t>& prompt, int n);

}  // namespace lattice::engine::testing
