// The trained model as a `llama` GGUF that lattice run / serve and llama.cpp load: the
// metadata make-model writes for that shape, F32 weights, and the trained byte-level BPE
// (tokenizer.ggml.model gpt2, its tokens and merges, the pre-tokenizer name).
#pragma once

#include <span>
#include <string>

#include "lattice/core/status.h"
#include "lattice/train/bpe.h"
#include "lattice/train/model.h"

namespace lattice::train {

struct ExportOptions {
  std::string name = "lattice-trained-llama";
  uint32_t context_length = 0;  // 0: the training sequence length
};

Status write_gguf(const std::string& path, const LlamaConfig& config, std::span<const float> params,
                  const BpeVocab& vocab, uint32_t seq, const ExportOptions& options = {});

}  // namespace lattice::train
