// Synthetic tokenizer data for generated models: a small but working vocabulary trained by
// a deterministic BPE on an embedded English text, in the two layouts llama.cpp reads:
//
//   "llama" (SentencePiece): <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF> (type 6),
//       then pieces with "▁" (U+2581) word prefixes, scored so earlier merges win.
//   "gpt2" (byte-level BPE): the 256 byte symbols (GPT-2's byte-to-unicode map), merged
//       tokens with their merge list ("a b"), then special tokens at the end.
//
// Every vocab size from about 300 up works: past what the text supports, further tokens come
// from deterministic concatenations of existing ones (with merges for gpt2). Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::engine {

// llama.cpp's token types.
enum class TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

enum class ChatStyle { kLlama2, kLlama3, kChatML };

struct GeneratedVocab {
  std::string model;  // tokenizer.ggml.model: "llama" or "gpt2"
  std::string pre;    // tokenizer.ggml.pre ("" = do not write)
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;  // gpt2 only
  uint32_t bos_id = 0, eos_id = 0;
  std::optional<uint32_t> unk_id, pad_id;
  bool add_bos = false, add_eos = false;
  std::string chat_template;
};

// `model` is "llama" or "gpt2"; `style` picks the special tokens, pre-tokenizer name and chat
// template (kChatML: Qwen's <|im_start|>/<|im_end|>; kLlama3: <|begin_of_text|>...; kLlama2:
// [INST]). kInvalidArgument if the size cannot hold the fixed tokens.
Result<GeneratedVocab> generate_vocab(std::string_view model, ChatStyle style, uint32_t vocab_size);

// The smallest vocab size generate_vocab accepts for that model and style.
uint32_t min_vocab_size(std::string_view model, ChatStyle style);

// The embedded training text (English prose, digits, punctuation, newlines).
std::string_view vocab_training_text();

// GPT-2's byte-to-unicode map: the printable symbol (as UTF-8) standing for byte b.
std::string gpt2_byte_symbol(uint8_t b);

}  // namespace lattice::engine
