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

// The dense vocabulary's non-ASCII characters (each also merges with every other one):
// CJK and kana, Hangul, full-width and CJK punctuation, U+3000 and NBSP, ZWJ, a combining
// mark, Latin/Greek/Cyrillic letters, an Arabic digit, an emoji, a Han character past the
// BMP, a control character, \t \r _ +: where the DeepSeek and Kimi splits differ.
inline constexpr const char* kDenseWideChars[] = {
    "\xE4\xBD\xA0", "\xE3\x81\x82", "\xE3\x82\xA2", "\xED\x95\x9C", "\xEF\xBC\x8C", "\xE3\x80\x82", "\xE2\x80\x9C",
    "\xE3\x80\x80", "\xC2\xA0",     "\xE2\x80\x8D", "\xCC\x81",     "\xC3\xA9",     "\xCE\xB1",     "\xD0\x96",
    "\xD9\xA3",     "\xF0\x9F\x91\x8D", "\xF0\xA0\x80\x80", "\x01", "\t", "\r", "_", "+"};
// A text that uses all of them next to each other and to ASCII.
inline constexpr const char* kDenseWideText =
    "\xE4\xBD\xA0\xE4\xBD\xA0\xE3\x81\x82\xE3\x82\xA2" "ab\xED\x95\x9C\xED\x95\x9C 12\xEF\xBC\x8C"
    "\xE3\x80\x82 \xE2\x80\x9C" "a\xE2\x80\x9C\xE3\x80\x80" "b\xC2\xA0\xC2\xA0X\xF0\x9F\x91\x8D\xE2"
    "\x80\x8D\xF0\x9F\x91\x8D e\xCC\x81\xCC\x81 \xC3\xA9\xCE\xB1\xD0\x96\xD9\xA3\xD9\xA3\xD9\xA3"
    "\xD9\xA3 \xF0\xA0\x80\x80\xE4\xBD\xA0\x01\x01" "a\t\tb\r\n_a +b __ ++\xE2\x80\x8D\xE2\x80\x8D"
    " a'S\xE4\xBD\xA0's";

}  // namespace lattice::engine::test_vocab
