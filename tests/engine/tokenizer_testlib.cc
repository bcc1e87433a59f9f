#include "tokenizer_testlib.h"


#include <cstdio>
#include <set>
#include <utility>
#include <vector>

#include "lattice/engine/tokenizer/unicode.h"

namespace lattice::engine::test_vocab {

TokenizerSpec hand_spm_spec() {
  TokenizerSpec s;
  s.model = "llama";
  auto add = [&](std::string text, float score, TokenKind kind) {
    s.tokens.push_back(std::move(text));
    s.scores.push_back(score);
    s.token_types.push_back(static_cast<int32_t>(kind));
  };
  add("<unk>", 0, TokenKind::kUnknown);
  add("<s>", 0, TokenKind::kControl);
  add("</s>", 0, TokenKind::kControl);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 0, TokenKind::kByte);
  }
  add("\xE2\x96\x81", -1000, TokenKind::kNormal);
  for (const char* c : {"h", "e", "l", "o", "w", "r", "d"}) add(c, -1000, TokenKind::kNormal);
  add("\xE2\x96\x81h", -5, TokenKind::kNormal);
  add("el", -3, TokenKind::kNormal);
  add("ll", -1, TokenKind::kNormal);
  add("lo", -2, TokenKind::kNormal);
  add("ell", -4, TokenKind::kNormal);
  add("hell", -6, TokenKind::kNormal);
  add("\xE2\x96\x81w", -1.5, TokenKind::kNormal);
  add("or", -1.5, TokenKind::kNormal);
  add("\xE2\x96\x81wor", -2.5, TokenKind::kNormal);
  add("ld", -7, TokenKind::kNormal);
  add("aa", -1, TokenKind::kNormal);
  add("a", -1000, TokenKind::kNormal);
  add("<user>", 0, TokenKind::kUserDefined);
  add("<|ctl|>", 0, TokenKind::kControl);
  add("<|eot_id|>", 0, TokenKind::kNormal);
  return s;
}

TokenizerSpec hand_bpe_spec(std::string pre) {
  TokenizerSpec s;
  s.model = "gpt2";
  s.pre = std::move(pre);
  for (int b = 0; b < 256; ++b) s.tokens.push_back(unicode::encode_utf8(unicode::byte_to_cp(static_cast<uint8_t>(b))));
  s.token_types.assign(256, 1);
  const std::string G = "\xC4\xA0";  // Ġ
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {G, "w"}, {"he", "ll"}, {"hell", "o"}, {"o", "r"}, {G + "w", "or"}, {"l", "d"},
      {G + "wor", "ld"}};
  for (const auto& [a, b] : merges) {
    s.merges.push_back(a + " " + b);
    s.tokens.push_back(a + b);
    s.token_types.push_back(1);
  }
  for (const char* sp : {"<|begin_of_text|>", "<|eot_id|>", "<|im_start|>", "<|im_start|>x"}) {
    s.tokens.push_back(sp);
    s.token_types.push_back(3);
  }
  s.tokens.push_back("<tool>");
  s.token_types.push_back(4);
  s.tokens.push_back("<|repo_name|>");
  s.token_types.push_back(4);
  s.bos_id = 256 + 9;  // <|begin_of_text|>, after the bytes and the nine merged tokens
  s.eos_id = 256 + 10;  // <|eot_id|>
  return s;
}

TokenizerSpec dense_bpe_spec(std::string pre) {
  TokenizerSpec s;
  s.model = "gpt2";
  s.pre = std::move(pre);
  for (int b = 0; b < 256; ++b) s.tokens.push_back(unicode::encode_utf8(unicode::byte_to_cp(static_cast<uint8_t>(b))));
  s.token_types.assign(256, 1);
  std::vector<std::string> chars;
  for (char x : std::string("ab XY12.,!'$\n")) chars.emplace_back(1, x);
  for (const char* w : kDenseWideChars) chars.emplace_back(w);
  std::set<std::string> have(s.tokens.begin(), s.tokens.end());
  auto merge = [&](const std::string& a, const std::string& b) {
    if (!have.insert(a + b).second) return;
    s.merges.push_back(a + " " + b);
    s.tokens.push_back(a + b);
    s.token_types.push_back(1);
  };
  // Each multi-byte character is built from its bytes, left to right.
  for (const std::string& c : chars) {
    for (size_t n = 2; n <= c.size(); ++n) {
      merge(unicode::bytes_to_bpe_text(c.substr(0, n - 1)), unicode::bytes_to_bpe_text(c.substr(n - 1, 1)));
    }
  }
  for (const std::string& x : chars) {
    for (const std::string& y : chars) merge(unicode::bytes_to_bpe_text(x), unicode::bytes_to_bpe_text(y));
  }
  s.tokens.push_back("<|endoftext|>");
  s.token_types.push_back(3);
  s.bos_id = static_cast<TokenId>(s.tokens.size() - 1);
  s.eos_id = s.bos_id;
  return s;
}

}  // namespace lattice::engine::test_vocab
