// Unicode helpers for the tokenizers: UTF-8 decoding that never fails, codepoint classes for
// the pre-tokenizer regexes, and GPT-2's byte <-> printable-codepoint mapping.
//
// The class table is generated (scripts/gen_unicode_table.py -> unicode_table.inc). All
// functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lattice::engine::unicode {

// Codepoint class bits. Exactly one of the first eight is set for every codepoint
// (general category L, N, Z, M, P, S, C, or unassigned); kCpWhitespace is the White_Space
// property, what `\s` matches.
inline constexpr uint16_t kCpUndefined = 1 << 0;
inline constexpr uint16_t kCpNumber = 1 << 1;      // \p{N}
inline constexpr uint16_t kCpLetter = 1 << 2;      // \p{L}
inline constexpr uint16_t kCpSeparator = 1 << 3;   // \p{Z}
inline constexpr uint16_t kCpMark = 1 << 4;        // \p{M}
inline constexpr uint16_t kCpPunctuation = 1 << 5; // \p{P}
inline constexpr uint16_t kCpSymbol = 1 << 6;      // \p{S}
inline constexpr uint16_t kCpControl = 1 << 7;     // \p{C} (assigned)
inline constexpr uint16_t kCpWhitespace = 1 << 8;  // \s

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Flags of one codepoint; codepoints past U+10FFFF are kCpUndefined.
uint16_t cp_flags(uint32_t cp);
inline bool is_letter(uint32_t cp) { return cp_flags(cp) & kCpLetter; }
inline bool is_number(uint32_t cp) { return cp_flags(cp) & kCpNumber; }
inline bool is_whitespace(uint32_t cp) { return cp_flags(cp) & kCpWhitespace; }

// Length of the UTF-8 sequence a lead byte announces (1 for continuation/invalid bytes, as
// the SentencePiece splitter wants it: every byte ends up in some symbol).
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes UTF-8; a byte that does not start a well-formed sequence (bad lead, missing or
// bad continuation, truncated at the end, or a value past U+10FFFF) becomes U+FFFD and
// decoding resumes at the next byte (llama.cpp does the same since it stopped throwing).
// Surrogates and overlong forms are not rejected: they decode to their value.
std::vector<uint32_t> decode_utf8(std::string_view text);

void append_utf8(std::string& out, uint32_t cp);
std::string encode_utf8(uint32_t cp);

// Number of bytes at the end of `s` that form an incomplete (but so far valid) UTF-8
// sequence: what a streaming decoder must hold back. 0 when `s` ends on a boundary.
size_t incomplete_utf8_tail(std::string_view s);

// GPT-2 byte-level mapping: each byte 0..255 to a printable codepoint (bytes that are
// printable Latin-1 map to themselves, the others to U+0100 upwards, in byte order).
uint32_t byte_to_cp(uint8_t b);
// Inverse; returns -1 for codepoints that are not the image of a byte.
int cp_to_byte(uint32_t cp);
// Encodes raw bytes as the byte-level "unicode" string (the form BPE vocabularies use).
std::string bytes_to_bpe_text(std::string_view bytes);
// Decodes a byte-level string back to raw bytes; false if a codepoint is not a byte image
// (then `out` holds the bytes decoded so far and the unmapped codepoints' UTF-8).
bool bpe_text_to_bytes(std::string_view text, std::string& out);

const char* unicode_version();

}  // namespace lattice::engine::unicode
