// Shared helpers of the model tests: tiny generated models held in memory, and a plain
// double-precision reference forward pass written from the architectures' definitions
// (independent of the runtime's code: no ops.h, no matmul, weights dequantized once).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/model/model.h"

namespace lattice::engine::testing {

// A model made by plan_model and parsed from memory (the bytes live as long as this).
struct MemModel {
  std::vector<std::byte> bytes;
  std::unique_ptr<Model> model;
};
// Fails the current test (and returns null model) on error.
MemModel make_mem_model(const MakeModelOptions& options, const LoadOptions& load = {});

// The reference: every layer's hidden states and every position's logits.
struct RefOutput {
  std::vector<std::vector<double>> hidden;  // [layer][pos * n_embd + i]
  std::vector<double> logits;               // [pos * n_vocab + v]
};
RefOutput reference_forward(const Model& model, std::span<const int32_t> tokens);

// The small mixtures of experts the model and parallel tests share (F32 unless `type`; tests
// adjust seeds, vocabularies and layers). qwen3moe / Mixtral (llama with ffn_*_exps): 2 layers,
// dim 256, 4 heads and 2 KV heads, 8 experts of which 2 a token. deepseek2: 3 layers, 4 heads,
// q lora 64, kv lora 64, rope 16, nope 32, v 32, 8 experts of 128 in 4 groups (2 used), one
// shared expert, one leading dense block, YaRN factor 4.
MakeModelOptions small_moe_options(const std::string& arch, const std::string& type = "f32");
MakeModelOptions small_deepseek2_options(const std::string& type = "f32");

// The golden models (tests/engine/golden_greedy.json): their make-model options, prompt and
// number of greedy steps, shared by the golden test and its llama.cpp cross-check.
MakeModelOptions golden_model_options(const std::string& arch, const std::string& type);
std::vector<int32_t> golden_prompt();
inline constexpr int kGoldenSteps = 24;
inline const std::string kGoldenPath = std::string(LATTICE_SOURCE_DIR) + "/tests/engine/golden_greedy.json";

// Writes the deepseek2 file of tests/engine/deepseek2_gguf_py.py (llama.cpp's gguf-py, a file
// lattice did not write) to `path`: gguf-py from scripts/gguf_py.sh, or from a PYTHONPATH that
// already holds it. On failure, kUnavailable with the script's output.
Status write_gguf_py_deepseek2(const std::string& path);

// Cosine similarity and normalized mean squared error of two vectors.
double cosine(std::span<const double> a, std::span<const float> b);
double nmse(std::span<const double> ref, std::span<const float> got);

}  // namespace lattice::engine::testing
