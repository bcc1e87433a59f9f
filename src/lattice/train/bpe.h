// A byte-level BPE tokenizer trained on a corpus, in the layout llama.cpp reads as
// tokenizer.ggml.model "gpt2": the 256 byte symbols (GPT-2's byte-to-unicode map), one token
// per merge in merge order, then <|endoftext|> (control; BOS and EOS). Words come from the
// engine's pre-tokenizer named `pre` (default "qwen2": llama.cpp knows it, and decoding gives
// the text back exactly).
//
// Training is greedy and deterministic: repeatedly merge the most frequent adjacent pair of
// symbols over the corpus's words (ties: the smaller pair of ids), until the vocabulary is full
// or no pair occurs twice (then the vocabulary is smaller than asked).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/engine/tokenizer/tokenizer.h"

namespace lattice::train {

struct BpeVocab {
  std::string pre = "qwen2";
  std::vector<std::string> tokens;  // GPT-2 symbol strings
  std::vector<std::string> merges;  // "left right", rank = index
  uint32_t eos_id = 0;              // <|endoftext|>, also BOS

  // The tokenizer llama.cpp would build from these keys (what lattice run uses).
  Result<engine::Tokenizer> tokenizer() const;
};

// vocab_size >= 257 (the bytes and <|endoftext|>).
Result<BpeVocab> train_bpe(std::string_view corpus, uint32_t vocab_size, std::string pre = "qwen2");

}  // namespace lattice::train
