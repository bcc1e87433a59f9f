// Pre-tokenizers of byte-level BPE vocabularies: hand-written matchers equivalent to the
// regexes the Hugging Face tokenizers declare (and llama.cpp runs), e.g. Llama 3's
//
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
//   |\s*[\r\n]+|\s+(?!\S)|\s+
//
// A regex engine would be slower and std::regex cannot express \p{..}; each alternative
// below is a greedy scan over codepoint classes, tried in the regex's order, which is
// what leftmost-first alternation does. A pre-tokenizer is a sequence of such splitters;
// each one splits every piece left by the one before (pieces never merge again).
#include <string>
#include <vector>

#include "lattice/engine/tokenizer/pretokenize_split.h"
#include "lattice/engine/tokenizer/tokenizer.h"
#include "lattice/engine/tokenizer/unicode.h"

namespace lattice::engine {
namespace {

using pretok::each_piece;
using pretok::emit_with_gaps;
using pretok::split_runs;
using unicode::kCpLetter;
using unicode::kCpNumber;
using unicode::kCpPunctuation;
using unicode::kCpWhitespace;

using pretok::Cursor;
using pretok::Span;

uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

// 's 't 're 've 'm 'll 'd at pos; returns the match length or 0.
size_t match_contraction(const Cursor& c, size_t pos, bool ignore_case) {
  if (c.cp(pos) != '\'' || !c.in(pos + 1)) return 0;
  auto low = [&](size_t p) { return ignore_case ? ascii_lower(c.cp(p)) : c.cp(p); };
  const uint32_t a = low(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (!c.in(pos + 2)) return 0;
  const uint32_t b = low(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const std::vector<uint32_t>& cps, Span piece, std::vector<Span>& out) {
  Cursor c(cps, piece);
  size_t start = piece.begin;
  auto emit = [&](size_t end) {
    if (end > start) out.push_back({start, end});
    start = end;
  };
  size_t pos = piece.begin;
  while (pos < piece.end) {
    if (size_t n = match_contraction(c, pos, /*ignore_case=*/false)) {
      pos += n;
      emit(pos);
      continue;
    }
    const bool space = c.cp(pos) == ' ';
    const uint16_t f = space ? c.flags(pos + 1) : c.flags(pos);
    if (f & kCpLetter) {
      pos += space;
      while (c.flags(pos) & kCpLetter) ++pos;
      emit(pos);
      continue;
    }
    if (f & kCpNumber) {
      pos += space;
      while (c.flags(pos) & kCpNumber) ++pos;
      emit(pos);
      continue;
    }
    auto other = [](uint16_t fl) { return fl != 0 && !(fl & (kCpWhitespace | kCpLetter | kCpNumber)); };
    if (other(f)) {
      pos += space;
      while (other(c.flags(pos))) ++pos;
      emit(pos);
      continue;
    }
    size_t n_ws = 0;
    while (c.flags(pos + n_ws) & kCpWhitespace) ++n_ws;
    if (n_ws > 1 && c.in(pos + n_ws)) {  // \s+(?!\S): leave the last space to the next word
      pos += n_ws - 1;
      emit(pos);
      continue;
    }
    if (n_ws > 0) {
      pos += n_ws;
      emit(pos);
      continue;
    }
    emit(++pos);
  }
}

// Llama 3 (max_digits 3) and Qwen 2 (max_digits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}| ?[^\s\p{L}\p{N}]+[\r\n]*
// |\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const std::vector<uint32_t>& cps, Span piece, size_t max_digits, std::vector<Span>& out) {
  Cursor c(cps, piece);
  size_t start = piece.begin;
  auto emit = [&](size_t end) {
    if (end > start) out.push_back({start, end});
    start = end;
  };
  auto is_rn = [](uint32_t cp) { return cp == '\r' || cp == '\n'; };
  size_t pos = piece.begin;
  while (pos < piece.end) {
    if (size_t n = match_contraction(c, pos, /*ignore_case=*/true)) {
      pos += n;
      emit(pos);
      continue;
    }
    const uint32_t cp = c.cp(pos);
    const uint16_t f = c.flags(pos);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!is_rn(cp) && !(f & kCpNumber) && ((f & kCpLetter) || (c.flags(pos + 1) & kCpLetter))) {
      ++pos;
      while (c.flags(pos) & kCpLetter) ++pos;
      emit(pos);
      continue;
    }
    // \p{N}{1,max}
    if (f & kCpNumber) {
      size_t run = 0;
      while (c.flags(pos) & kCpNumber) {
        ++pos;
        if (++run == max_digits) {
          emit(pos);
          run = 0;
        }
      }
      emit(pos);
      continue;
    }
    // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    const bool space = cp == ' ';
    auto other = [](uint16_t fl) { return fl != 0 && !(fl & (kCpWhitespace | kCpLetter | kCpNumber)); };
    if (other(space ? c.flags(pos + 1) : f)) {
      pos += space;
      while (other(c.flags(pos))) ++pos;
      while (is_rn(c.cp(pos))) ++pos;
      emit(pos);
      continue;
    }
    size_t n_ws = 0;
    size_t end_rn = 0;  // one past the last \r or \n of the whitespace run
    while (c.flags(pos + n_ws) & kCpWhitespace) {
      if (is_rn(c.cp(pos + n_ws))) end_rn = pos + n_ws + 1;
      ++n_ws;
    }
    if (end_rn > 0) {  // \s*[\r\n]+
      pos = end_rn;
      emit(pos);
      continue;
    }
    if (n_ws > 1 && c.in(pos + n_ws)) {  // \s+(?!\S)
      pos += n_ws - 1;
      emit(pos);
      continue;
    }
    if (n_ws > 0) {  // \s+
      pos += n_ws;
      emit(pos);
      continue;
    }
    emit(++pos);
  }
}

// Regex "[0-9][0-9][0-9]": non-overlapping triples, leftovers stay in the gaps.
void split_digit_triples(const std::vector<uint32_t>& cps, Span piece, std::vector<Span>& out) {
  std::vector<Span> matches;
  auto digit = [&](size_t p) { return p < piece.end && cps[p] >= '0' && cps[p] <= '9'; };
  size_t pos = piece.begin;
  while (pos < piece.end) {
    if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
      matches.push_back({pos, pos + 3});
      pos += 3;
    } else {
      ++pos;
    }
  }
  emit_with_gaps(piece, matches, out);
}

}  // namespace

Result<PreTokenizer> pre_tokenizer_from_name(std::string_view name) {
  static const std::pair<std::string_view, PreTokenizer> kNames[] = {
      {"", PreTokenizer::kDefault},           {"default", PreTokenizer::kDefault},
      {"gpt-2", PreTokenizer::kGpt2},         {"phi-2", PreTokenizer::kGpt2},
      {"roberta-bpe", PreTokenizer::kGpt2},   {"mpt", PreTokenizer::kGpt2},
      {"olmo", PreTokenizer::kGpt2},          {"jais", PreTokenizer::kGpt2},
      {"gigachat", PreTokenizer::kGpt2},      {"jina-es", PreTokenizer::kGpt2},
      {"jina-de", PreTokenizer::kGpt2},       {"jina-v1-en", PreTokenizer::kGpt2},
      {"jina-v2-es", PreTokenizer::kGpt2},    {"jina-v2-de", PreTokenizer::kGpt2},
      {"jina-v2-code", PreTokenizer::kGpt2},  {"starcoder", PreTokenizer::kStarcoder},
      {"refact", PreTokenizer::kStarcoder},   {"command-r", PreTokenizer::kStarcoder},
      {"smollm", PreTokenizer::kStarcoder},   {"codeshell", PreTokenizer::kStarcoder},
      {"exaone", PreTokenizer::kStarcoder},   {"minerva-7b", PreTokenizer::kStarcoder},
      {"llama3", PreTokenizer::kLlama3},      {"llama-v3", PreTokenizer::kLlama3},
      {"llama-bpe", PreTokenizer::kLlama3},   {"falcon3", PreTokenizer::kLlama3},
      {"dbrx", PreTokenizer::kLlama3},        {"smaug-bpe", PreTokenizer::kLlama3},
      {"chatglm-bpe", PreTokenizer::kLlama3}, {"qwen2", PreTokenizer::kQwen2},
      {"stablelm2", PreTokenizer::kQwen2},    {"megrez", PreTokenizer::kQwen2},
      {"deepseek-r1-qwen", PreTokenizer::kQwen2},
      {"deepseek-llm", PreTokenizer::kDeepseekLlm},
      {"deepseek-coder", PreTokenizer::kDeepseekCoder},
      {"deepseek-v3", PreTokenizer::kDeepseek3},
      {"hunyuan-dense", PreTokenizer::kDeepseek3},
      {"joyai-llm", PreTokenizer::kDeepseek3},
      {"kimi-k2", PreTokenizer::kKimiK2},
  };
  for (const auto& [n, p] : kNames) {
    if (n == name) return p;
  }
  return Unavailable("pre-tokenizer '" + std::string(name) +
                     "' is not implemented (supported: default, gpt-2 family, starcoder family, "
                     "llama3/llama-bpe, qwen2, deepseek-llm, deepseek-coder, deepseek-v3, kimi-k2)");
}

std::vector<std::string> pre_tokenize(PreTokenizer pre, std::string_view text) {
  const std::vector<uint32_t> cps = unicode::decode_utf8(text);
  std::vector<Span> pieces;
  if (!cps.empty()) pieces.push_back({0, cps.size()});
  auto gpt2 = [&](Span p, std::vector<Span>& out) { split_gpt2(cps, p, out); };
  auto number = [](uint32_t cp) { return unicode::is_number(cp); };
  switch (pre) {
    case PreTokenizer::kDefault: {
      auto punct = [](uint32_t cp) {
        return (unicode::cp_flags(cp) & kCpPunctuation) || cp == '$' || cp == '+' || cp == '<' || cp == '=' ||
               cp == '>' || cp == '^' || cp == '~' || cp == '|';
      };
      pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, punct, 0, out); });
      pieces = each_piece(pieces, gpt2);
      pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, number, 0, out); });
      pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_digit_triples(cps, p, out); });
      break;
    }
    case PreTokenizer::kGpt2:
      pieces = each_piece(pieces, gpt2);
      break;
    case PreTokenizer::kStarcoder:
      pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_runs(cps, p, number, 1, out); });
      pieces = each_piece(pieces, gpt2);
      break;
    case PreTokenizer::kLlama3:
      pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_llama3(cps, p, 3, out); });
      break;
    case PreTokenizer::kQwen2:
      pieces = each_piece(pieces, [&](Span p, std::vector<Span>& out) { split_llama3(cps, p, 1, out); });
      break;
    case PreTokenizer::kDeepseekLlm:
      pretok::pre_tokenize_deepseek_llm(cps, pieces);
      break;
    case PreTokenizer::kDeepseekCoder:
      pretok::pre_tokenize_deepseek_coder(cps, pieces);
      break;
    case PreTokenizer::kDeepseek3:
      pretok::pre_tokenize_deepseek3(cps, pieces);
      break;
    case PreTokenizer::kKimiK2:
      pretok::pre_tokenize_kimi_k2(cps, pieces);
      break;
  }
  std::vector<std::string> words;
  words.reserve(pieces.size());
  for (const Span& p : pieces) {
    std::string w;
    for (size_t i = p.begin; i < p.end; ++i) unicode::append_utf8(w, cps[i]);
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace lattice::engine
