// Small hand-built vocabularies shared by the tokenizer tests. Their layouts (which id is
// which text) are spelled out, with the merges worked by hand, in tokenizer_spm_test.cc and
// tokenizer_bpe_test.cc; tokenizer_llamacpp_test.cc runs the same vocabularies through
// llama.cpp.
#pragma once

#include <string>

#include "lattice/engine/tokenizer/tokenizer.h"

namespace lattice::engine::test_vocab {

// "llama": <unk> <s> </s>, <0x00>..<0xFF>, then scored pieces, a user-defined <user>, a
// control <|ctl|>, and <|eot_id|> stored as normal (llama.cpp forces it to control).
TokenizerSpec hand_spm_spec();
// "gpt2" with pre-tokenizer `pre`: the 256 byte symbols, nine merges, control tokens
// <|begin_of_text|> <|eot_id|> <|im_start|> <|im_start|>x, user-defined <tool> and <|repo_name|>.
TokenizerSpec hand_bpe_spec(std::string pre);
// "gpt2" with a merge for every ordered pair of a few characters (letters, digits, space,
// newline, punctuation, an apostrophe): nearly every adjacent pair inside a word merges, so
// the ids show where the pre-tokenizer split the text.
TokenizerSpec dense_bpe_spec(std::string pre);

}  // namespace lattice::engine::test_vocab
