// The pre-tokenizers of the DeepSeek and Kimi vocabularies, split exactly as llama.cpp splits
// them (src/llama-vocab.cpp names the regexes, src/unicode.cpp runs them).
//
// DeepSeek's tokenizer.json files declare a sequence of regex splits. llama.cpp runs those
// with std::regex, over one of two stand-ins for the text, and we reproduce both here:
//   - "collapsed", for a regex that uses \p{..}: ASCII stays itself, any other codepoint
//     becomes one byte for its class: whitespace, N, L, P, M, S or "other" (Cc, Cf, Co, Cn,
//     ...). So [A-Za-z] never matches a non-ASCII letter and \s is ASCII whitespace or a
//     non-ASCII whitespace character.
//   - "wide", for a regex without \p{..}: the codepoints, but non-ASCII whitespace turned
//     into \v (so U+3000 is \s there and falls out of a range that contains it).
// Unmatched text between two matches stays one piece (the regex iterator's gaps).
//
// Kimi K2's regex (tokenization_kimi.py) is run by hand in llama.cpp, and not quite as
// written: any letter run that is not Han is a word (the upper/lower-case alternatives and
// \p{M} are not distinguished), and Han is a fixed list of CJK ideograph blocks. We split
// the same way, since llama.cpp is what these files are run with.
#include <cstdint>
#include <iterator>
#include <vector>

#include "lattice/engine/tokenizer/pretokenize_split.h"
#include "lattice/engine/tokenizer/unicode.h"

namespace lattice::engine::pretok {
namespace {

using unicode::kCpLetter;
using unicode::kCpMark;
using unicode::kCpNumber;
using unicode::kCpPunctuation;
using unicode::kCpSymbol;
using unicode::kCpWhitespace;

// ---- the collapsed text -------------------------------------------------------------------

constexpr uint8_t kColOther = 0xD0, kColNumber = 0xD1, kColLetter = 0xD2, kColPunct = 0xD3, kColMark = 0xD4,
                  kColSymbol = 0xD5;

uint8_t collapse(uint32_t cp) {
  if (cp < 128) return static_cast<uint8_t>(cp);
  const uint16_t f = unicode::cp_flags(cp);
  if (f & kCpWhitespace) return 0x0B;
  if (f & kCpNumber) return kColNumber;
  if (f & kCpLetter) return kColLetter;
  if (f & kCpPunctuation) return kColPunct;
  if (f & kCpMark) return kColMark;
  if (f & kCpSymbol) return kColSymbol;
  return kColOther;
}

bool col_space(uint8_t c) { return c == ' ' || (c >= 0x09 && c <= 0x0D); }  // \s
bool ascii_letter(uint8_t c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool col_letter(uint8_t c) { return c == kColLetter || ascii_letter(c); }  // \p{L}
bool col_mark(uint8_t c) { return c == kColMark; }                         // \p{M}
// \p{P} and \p{S} of ASCII, as Unicode assigns them.
bool ascii_punct(uint8_t c) {
  return (c >= 0x21 && c <= 0x23) || (c >= 0x25 && c <= 0x2A) || (c >= 0x2C && c <= 0x2F) || c == 0x3A ||
         c == 0x3B || c == 0x3F || c == 0x40 || (c >= 0x5B && c <= 0x5D) || c == 0x5F || c == 0x7B || c == 0x7D;
}
bool ascii_symbol(uint8_t c) {
  return c == 0x24 || c == 0x2B || (c >= 0x3C && c <= 0x3E) || c == 0x5E || c == 0x60 || c == 0x7C || c == 0x7E;
}
bool col_punct(uint8_t c) { return c == kColPunct || ascii_punct(c); }    // \p{P}
bool col_symbol(uint8_t c) { return c == kColSymbol || ascii_symbol(c); } // \p{S}
bool is_rn(uint32_t c) { return c == '\r' || c == '\n'; }

std::vector<uint8_t> collapse_all(const std::vector<uint32_t>& cps) {
  std::vector<uint8_t> out(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) out[i] = collapse(cps[i]);
  return out;
}

// ---- the wide text --------------------------------------------------------------------------

uint32_t widen(uint32_t cp) { return (cp > 0x7F && unicode::is_whitespace(cp)) ? 0x0B : cp; }
bool wide_space(uint32_t w) { return w == ' ' || (w >= 0x09 && w <= 0x0D); }

struct Range {
  uint32_t first, last;
};
template <size_t N>
bool in_ranges(const Range (&ranges)[N], uint32_t w) {
  for (const Range& r : ranges) {
    if (w >= r.first && w <= r.last) return true;
  }
  return false;
}

// [一-龥ࠀ-一가-퟿]: DeepSeek LLM's and Coder's CJK (and everything from U+0800) run.
bool ds_cjk(uint32_t cp) {
  const uint32_t w = widen(cp);
  return (w >= 0x0800 && w <= 0x9FA5) || (w >= 0xAC00 && w <= 0xD7FF);
}

// DeepSeek LLM's letter class (cased letters of many scripts, not CJK), from its tokenizer.json.
constexpr Range kDsLetters[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},       {0xD8, 0xF6},
    {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},     {0x295, 0x2AF},     {0x370, 0x373},
    {0x376, 0x377},     {0x37B, 0x37D},     {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},
    {0x38C, 0x38C},     {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2102, 0x2102},   {0x2107, 0x2107},
    {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},
    {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},   {0xA722, 0xA76F},
    {0xA771, 0xA787},   {0xA78B, 0xA78E},   {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
// DeepSeek LLM's punctuation class: !-/ :-~ ！-／ ：-～ ‘-‟ 　-。
constexpr Range kDsPunct[] = {{0x21, 0x2F},     {0x3A, 0x7E},     {0xFF01, 0xFF0F},
                              {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002}};

// "\s?[class]+" over a per-position predicate: an optional \s, then a run of the class.
template <class Space, class Class>
size_t match_space_run(size_t pos, size_t end, Space space, Class cls) {
  size_t p = pos;
  if (space(p) && p + 1 < end && cls(p + 1)) ++p;
  if (!cls(p)) return pos;
  while (p < end && cls(p)) ++p;
  return p;
}

// "\s+$": the whitespace that ends the piece, on its own.
void split_trailing_space(const std::vector<uint32_t>& cps, Span piece, std::vector<Span>& out) {
  size_t t = piece.end;
  while (t > piece.begin && wide_space(widen(cps[t - 1]))) --t;
  if (t > piece.begin && t < piece.end) {
    out.push_back({piece.begin, t});
    out.push_back({t, piece.end});
  } else {
    out.push_back(piece);
  }
}

// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
// | ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+      (over the collapsed text)
size_t match_deepseek3(const std::vector<uint8_t>& c, size_t pos, size_t end) {
  auto at = [&](size_t p, auto pred) { return p < end && pred(c[p]); };
  auto letter_mark = [](uint8_t x) { return col_letter(x) || col_mark(x); };
  auto punct_symbol = [](uint8_t x) { return col_punct(x) || col_symbol(x); };
  const uint8_t x = c[pos];
  if ((ascii_punct(x) || ascii_symbol(x)) && at(pos + 1, ascii_letter)) {
    size_t p = pos + 1;
    while (at(p, ascii_letter)) ++p;
    return p;
  }
  const bool lead = !is_rn(x) && !col_letter(x) && !col_punct(x) && !col_symbol(x);
  if (letter_mark(x) || (lead && at(pos + 1, letter_mark))) {
    size_t p = letter_mark(x) ? pos : pos + 1;
    while (at(p, letter_mark)) ++p;
    return p;
  }
  if (size_t p = pos + (x == ' '); at(p, punct_symbol)) {
    while (at(p, punct_symbol)) ++p;
    while (p < end && is_rn(c[p])) ++p;
    return p;
  }
  size_t n_ws = 0, end_rn = 0;
  while (at(pos + n_ws, col_space)) {
    if (is_rn(c[pos + n_ws])) end_rn = pos + n_ws + 1;
    ++n_ws;
  }
  if (end_rn > 0) return end_rn;                     // \s*[\r\n]+
  if (n_ws == 0) return pos;                         // no match here
  if (pos + n_ws == end || n_ws == 1) return pos + n_ws;  // \s+(?!\S) at the end, or \s+
  return pos + n_ws - 1;                             // \s+(?!\S): the last space goes to the word
}

bool is_han(uint32_t cp) {
  static constexpr Range kHan[] = {{0x4E00, 0x9FFF},   {0x3400, 0x4DBF},   {0x20000, 0x2A6DF},
                                   {0x2A700, 0x2B73F}, {0x2B740, 0x2B81F}, {0x2B820, 0x2CEAF},
                                   {0x2CEB0, 0x2EBEF}, {0xF900, 0xFAFF},   {0x2F800, 0x2FA1F}};
  return cp >= 0x3400 && in_ranges(kHan, cp);
}

uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// [\p{Han}]+ | letters (not Han) with an optional lead and contraction | \p{N}{1,3}
// | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
void split_kimi_k2(const std::vector<uint32_t>& cps, Span piece, std::vector<Span>& out) {
  Cursor c(cps, piece);
  size_t start = piece.begin;
  auto emit = [&](size_t end) {
    if (end > start) out.push_back({start, end});
    start = end;
  };
  auto word_letter = [&](size_t p) { return (c.flags(p) & kCpLetter) && !is_han(c.cp(p)); };
  size_t pos = piece.begin;
  while (pos < piece.end) {
    const uint32_t cp = c.cp(pos);
    const uint16_t f = c.flags(pos);
    if (is_han(cp)) {
      while (is_han(c.cp(pos))) ++pos;
      emit(pos);
      continue;
    }
    const bool lead = !is_rn(cp) && !(f & (kCpLetter | kCpNumber));
    if (word_letter(pos) || (lead && word_letter(pos + 1))) {
      pos += lead;
      while (word_letter(pos)) ++pos;
      if (c.cp(pos) == '\'' && c.in(pos + 1)) {  // (?i:'s|'t|'re|'ve|'m|'ll|'d)?
        const uint32_t a = ascii_lower(c.cp(pos + 1));
        if (a == 's' || a == 't' || a == 'm' || a == 'd') {
          pos += 2;
        } else if (c.in(pos + 2)) {
          const uint32_t b = ascii_lower(c.cp(pos + 2));
          if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) pos += 3;
        }
      }
      emit(pos);
      continue;
    }
    if (f & kCpNumber) {  // \p{N}{1,3}
      size_t run = 0;
      while (c.flags(pos) & kCpNumber) {
        ++pos;
        if (++run == 3) {
          emit(pos);
          run = 0;
        }
      }
      emit(pos);
      continue;
    }
    auto other = [](uint16_t fl) { return fl != 0 && !(fl & (kCpWhitespace | kCpLetter | kCpNumber)); };
    if (other(cp == ' ' ? c.flags(pos + 1) : f)) {  //  ?[^\s\p{L}\p{N}]+[\r\n]*
      pos += cp == ' ';
      while (other(c.flags(pos))) ++pos;
      while (is_rn(c.cp(pos))) ++pos;
      emit(pos);
      continue;
    }
    size_t n_ws = 0, end_rn = 0;
    while (c.flags(pos + n_ws) & kCpWhitespace) {
      if (is_rn(c.cp(pos + n_ws))) end_rn = pos + n_ws + 1;
      ++n_ws;
    }
    if (end_rn > 0) {
      pos = end_rn;
    } else if (n_ws > 1 && c.in(pos + n_ws)) {
      pos += n_ws - 1;
    } else if (n_ws > 0) {
      pos += n_ws;
    } else {
      ++pos;
    }
    emit(pos);
  }
}

}  // namespace

// [\r\n] ; \s?[letters]+ ; \s?[punctuation]+ ; \s+$ ; [CJK]+ ; \p{N}+
void pre_tokenize_deepseek_llm(const std::vector<uint32_t>& cps, std::vector<Span>& pieces) {
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, is_rn, 1, out); });
  auto space = [&](size_t p) { return wide_space(widen(cps[p])); };
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) {
    auto letter = [&](size_t q) { return q < p.end && in_ranges(kDsLetters, widen(cps[q])); };
    split_search(p, [&](size_t pos, size_t end) { return match_space_run(pos, end, space, letter); }, out);
  });
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) {
    auto punct = [&](size_t q) { return q < p.end && in_ranges(kDsPunct, widen(cps[q])); };
    split_search(p, [&](size_t pos, size_t end) { return match_space_run(pos, end, space, punct); }, out);
  });
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_trailing_space(cps, p, out); });
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, ds_cjk, 0, out); });
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, unicode::is_number, 0, out); });
}

// [\r\n] ; \s?\p{L}+ ; \s?\p{P}+ ; [CJK]+ ; \p{N}
void pre_tokenize_deepseek_coder(const std::vector<uint32_t>& cps, std::vector<Span>& pieces) {
  const std::vector<uint8_t> col = collapse_all(cps);
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, is_rn, 1, out); });
  auto space = [&](size_t q) { return col_space(col[q]); };
  for (bool (*cls)(uint8_t) : {col_letter, col_punct}) {
    pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) {
      auto in_class = [&](size_t q) { return q < p.end && cls(col[q]); };
      split_search(p, [&](size_t pos, size_t end) { return match_space_run(pos, end, space, in_class); }, out);
    });
  }
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, ds_cjk, 0, out); });
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, unicode::is_number, 1, out); });
}

// \p{N}{1,3} ; [一-龥぀-ゟ゠-ヿ]+ ; the word regex above
void pre_tokenize_deepseek3(const std::vector<uint32_t>& cps, std::vector<Span>& pieces) {
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, unicode::is_number, 3, out); });
  auto kana_han = [](uint32_t cp) { return (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0x4E00 && cp <= 0x9FA5); };
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, kana_han, 0, out); });
  const std::vector<uint8_t> col = collapse_all(cps);
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) {
    split_search(p, [&](size_t pos, size_t end) { return match_deepseek3(col, pos, end); }, out);
  });
}

void pre_tokenize_kimi_k2(const std::vector<uint32_t>& cps, std::vector<Span>& pieces) {
  pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_kimi_k2(cps, p, out); });
}

}  // namespace lattice::engine::pretok
