// Building blocks of the pre-tokenizers (pretokenize.cc, pretokenize_deepseek.cc): a text is
// an array of codepoints, a piece is a span of it, and every splitter turns one piece into
// consecutive pieces that cover it exactly. Internal to the tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lattice/engine/tokenizer/unicode.h"

namespace lattice::engine::pretok {

struct Span {
  size_t begin, end;
};

// A view of one piece of the codepoint array: outside the piece cp() is an impossible value
// and flags() is 0, as if the piece were the whole text (lookahead never crosses a piece
// boundary, as in llama.cpp).
class Cursor {
 public:
  Cursor(const std::vector<uint32_t>& cps, Span piece) : cps_(cps), piece_(piece) {}
  bool in(size_t pos) const { return pos >= piece_.begin && pos < piece_.end; }
  uint32_t cp(size_t pos) const { return in(pos) ? cps_[pos] : 0xFFFFFFFFu; }
  uint16_t flags(size_t pos) const { return in(pos) ? unicode::cp_flags(cps_[pos]) : 0; }

 private:
  const std::vector<uint32_t>& cps_;
  Span piece_;
};

// Splits a piece into the given matches and the gaps between them (each gap one piece).
inline void emit_with_gaps(Span piece, const std::vector<Span>& matches, std::vector<Span>& out) {
  size_t at = piece.begin;
  for (const Span& m : matches) {
    if (m.begin > at) out.push_back({at, m.begin});
    out.push_back(m);
    at = m.end;
  }
  if (at < piece.end) out.push_back({at, piece.end});
}

// What a regex split (Hugging Face's "Isolated" behaviour, llama.cpp's std::regex fallback)
// does: from left to right, `match(pos, end)` returns where a match starting at pos ends, or
// pos if none starts there; matched spans become pieces, and the unmatched text between two
// matches becomes one piece.
template <class Match>
void split_search(Span piece, Match match, std::vector<Span>& out) {
  std::vector<Span> matches;
  size_t pos = piece.begin;
  while (pos < piece.end) {
    const size_t end = match(pos, piece.end);
    if (end > pos) {
      matches.push_back({pos, end});
      pos = end;
    } else {
      ++pos;
    }
  }
  emit_with_gaps(piece, matches, out);
}

// Regex "[class]+" (max_run 0) or "[class]{1,max_run}": maximal runs of codepoints
// satisfying pred, each run cut into pieces of at most max_run.
template <class Pred>
void split_runs(const std::vector<uint32_t>& cps, Span piece, Pred pred, size_t max_run, std::vector<Span>& out) {
  split_search(
      piece,
      [&](size_t pos, size_t end) {
        size_t p = pos;
        while (p < end && pred(cps[p]) && (max_run == 0 || p - pos < max_run)) ++p;
        return p;
      },
      out);
}

template <class Fn>
std::vector<Span> each_piece(const std::vector<Span>& pieces, Fn fn) {
  std::vector<Span> out;
  out.reserve(pieces.size());
  for (const Span& p : pieces) fn(p, out);
  return out;
}

// The DeepSeek and Kimi pre-tokenizers (pretokenize_deepseek.cc): each rewrites `pieces`.
void pre_tokenize_deepseek_llm(const std::vector<uint32_t>& cps, std::vector<Span>& pieces);
void pre_tokenize_deepseek_coder(const std::vector<uint32_t>& cps, std::vector<Span>& pieces);
void pre_tokenize_deepseek3(const std::vector<uint32_t>& cps, std::vector<Span>& pieces);
void pre_tokenize_kimi_k2(const std::vector<uint32_t>& cps, std::vector<Span>& pieces);

}  // namespace lattice::engine::pretok
