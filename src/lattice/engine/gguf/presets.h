// Shape-only presets: sparse GGUF files with the real metadata and tensor table of large
// models (DeepSeek-V3.1, Kimi K2 Thinking, Qwen3-235B-A22B) and no weights: the tensor data
// is a hole, so a "671 B parameter" file takes a few KB of disk. For planning (`lattice
// plan`, the simulator, Model size accounting); `lattice run` refuses them.
//
// The metadata and tensor names follow llama.cpp's converter (conversion/deepseek.py,
// qwen.py): deepseek2 with MLA split into attn_k_b / attn_v_b, merged 3-D expert tensors,
// exp_probs_b, shared experts, leading dense blocks. The vocabulary is given by
// {arch}.vocab_size and the embedding shapes only: no token list (a real file's tokenizer
// metadata is a few MB and is not needed to plan). The file carries kShapeOnlyKey = true.
#pragma once

#include <string>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/engine/gguf/make_model.h"

namespace lattice::engine {

inline constexpr const char* kShapeOnlyKey = "lattice.shape_only";

// "kimi-k2-thinking-q4", "deepseek-v3.1-q8", "qwen3-235b-a22b-q8" (the simulator's names).
std::vector<std::string> shape_only_presets();
// Writes the preset's sparse file; kInvalidArgument naming the presets for an unknown name.
Result<MadeModel> write_shape_only(const std::string& preset, const std::string& path);
// The writer (metadata and tensor table) a preset writes, for tests and tools.
Result<GgufWriter> shape_only_writer(const std::string& preset);

// kInvalidArgument when `file` is shape-only (it has no weights to run), naming the model.
Status check_has_weights(const GgufFile& file);

}  // namespace lattice::engine
