// Pre-tokenizer splits against splits worked out by hand from the regexes (see the
// comment at the top of pretokenize.cc), plus the Unicode class table.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "lattice/engine/tokenizer/tokenizer.h"
#include "lattice/engine/tokenizer/unicode.h"

namespace lattice::engine {
namespace {

using Words = std::vector<std::string>;

Words llama3(std::string_view s) { return pre_tokenize(PreTokenizer::kLlama3, s); }
Words qwen2(std::string_view s) { return pre_tokenize(PreTokenizer::kQwen2, s); }
Words gpt2(std::string_view s) { return pre_tokenize(PreTokenizer::kGpt2, s); }

TEST(TokenizerUnicode, Classes) {
  using namespace unicode;
  EXPECT_TRUE(is_letter('a'));
  EXPECT_TRUE(is_letter(0x4F60));   // 你
  EXPECT_TRUE(is_letter(0xE9));     // é
  EXPECT_TRUE(is_letter(0x3042));   // あ
  EXPECT_FALSE(is_letter(0x301));   // combining acute: a mark
  EXPECT_TRUE(cp_flags(0x301) & kCpMark);
  EXPECT_TRUE(is_number('7'));
  EXPECT_TRUE(is_number(0x0663));   // Arabic-Indic three
  EXPECT_TRUE(is_number(0x2165));   // Roman numeral six (Nl)
  EXPECT_TRUE(is_number(0xBD));     // ½ (No)
  EXPECT_TRUE(is_whitespace(' '));
  EXPECT_TRUE(is_whitespace('\n'));
  EXPECT_TRUE(is_whitespace(0x0B));
  EXPECT_TRUE(is_whitespace(0x85));
  EXPECT_TRUE(is_whitespace(0xA0));
  EXPECT_TRUE(is_whitespace(0x3000));
  EXPECT_FALSE(is_whitespace(0x1C));  // not White_Space, though Python's str.isspace says so
  EXPECT_FALSE(is_whitespace(0x200B));  // zero width space is Cf
  EXPECT_TRUE(cp_flags('!') & kCpPunctuation);
  EXPECT_TRUE(cp_flags('$') & kCpSymbol);
  EXPECT_TRUE(cp_flags(0x1F44D) & kCpSymbol);  // 👍
  EXPECT_TRUE(cp_flags(0x378) & kCpUndefined);  // unassigned
  EXPECT_TRUE(cp_flags(0x110000) & kCpUndefined);
  EXPECT_TRUE(cp_flags(0xE000) & kCpControl);  // private use is C
}

TEST(TokenizerUnicode, DecodeNeverFails) {
  using unicode::decode_utf8;
  EXPECT_EQ(decode_utf8("a\xC3\xA9"), (std::vector<uint32_t>{'a', 0xE9}));
  EXPECT_EQ(decode_utf8("\xF0\x9F\x91\x8D"), (std::vector<uint32_t>{0x1F44D}));
  EXPECT_EQ(decode_utf8("\xFF"), (std::vector<uint32_t>{0xFFFD}));
  EXPECT_EQ(decode_utf8("\x80x"), (std::vector<uint32_t>{0xFFFD, 'x'}));
  EXPECT_EQ(decode_utf8("\xE4\xBD"), (std::vector<uint32_t>{0xFFFD, 0xFFFD}));
  EXPECT_EQ(decode_utf8("\xF7\xBF\xBF\xBF"), (std::vector<uint32_t>(4, 0xFFFD)));  // past U+10FFFF
  EXPECT_EQ(decode_utf8(std::string_view("\0", 1)), (std::vector<uint32_t>{0}));
  EXPECT_EQ(unicode::incomplete_utf8_tail("ab\xE4\xBD"), 2u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("ab\xE4\xBD\xA0"), 0u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("\xF0\x9F\x91"), 3u);
  EXPECT_EQ(unicode::incomplete_utf8_tail("a\x80"), 0u);  // a stray continuation never completes
}

TEST(TokenizerPreTokenize, Llama3Words) {
  EXPECT_EQ(llama3("Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(llama3(""), (Words{}));
  // Contractions, case-insensitive.
  EXPECT_EQ(llama3("I'm fine"), (Words{"I", "'m", " fine"}));
  EXPECT_EQ(llama3("I'M WE'LL they're"), (Words{"I", "'M", " WE", "'LL", " they", "'re"}));
  // One leading non-letter (not \r\n, not a digit) joins the letters after it.
  EXPECT_EQ(llama3("$hello\tworld"), (Words{"$hello", "\tworld"}));
  // Punctuation runs take a leading space and trailing newlines.
  EXPECT_EQ(llama3("Hello!!! How?"), (Words{"Hello", "!!!", " How", "?"}));
  EXPECT_EQ(llama3("ok.\n\nNext"), (Words{"ok", ".\n\n", "Next"}));
  EXPECT_EQ(llama3("x = (1+2)"), (Words{"x", " =", " (", "1", "+", "2", ")"}));
}

TEST(TokenizerPreTokenize, Llama3Digits) {
  // \p{N}{1,3}: groups of three from the left.
  EXPECT_EQ(llama3("1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(llama3("year 2024!"), (Words{"year", " ", "202", "4", "!"}));
  EXPECT_EQ(llama3("a12"), (Words{"a", "12"}));
  EXPECT_EQ(qwen2("1234"), (Words{"1", "2", "3", "4"}));
  EXPECT_EQ(gpt2("1234567 x"), (Words{"1234567", " x"}));
}

TEST(TokenizerPreTokenize, Llama3Whitespace) {
  // \s+(?!\S) leaves the last space of a run to the next word.
  EXPECT_EQ(llama3("abc  def"), (Words{"abc", " ", " def"}));
  EXPECT_EQ(llama3("a   "), (Words{"a", "   "}));
  EXPECT_EQ(llama3("  "), (Words{"  "}));
  // \s*[\r\n]+ ends at the last newline of the run.
  EXPECT_EQ(llama3("a\n\nb"), (Words{"a", "\n\n", "b"}));
  EXPECT_EQ(llama3("hello   \n  world"), (Words{"hello", "   \n", " ", " world"}));
  EXPECT_EQ(llama3("a \r\n b"), (Words{"a", " \r\n", " b"}));
  // Non-ASCII whitespace counts: NBSP and the ideographic space.
  EXPECT_EQ(llama3("a\xC2\xA0\xC2\xA0" "b"), (Words{"a", "\xC2\xA0", "\xC2\xA0" "b"}));
}

TEST(TokenizerPreTokenize, Llama3Unicode) {
  EXPECT_EQ(llama3("\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C"), (Words{"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C"}));
  EXPECT_EQ(llama3("hi\xE4\xBD\xA0"), (Words{"hi\xE4\xBD\xA0"}));
  // Emoji are symbols: a run of them is one word; " ok" stays with its space.
  EXPECT_EQ(llama3("\xF0\x9F\x91\x8D\xF0\x9F\x91\x8D ok"), (Words{"\xF0\x9F\x91\x8D\xF0\x9F\x91\x8D", " ok"}));
  // A combining mark is not a letter: it ends "e" and then leads the next letters.
  EXPECT_EQ(llama3("e\xCC\x81x"), (Words{"e", "\xCC\x81x"}));
  EXPECT_EQ(llama3("e\xCC\x81"), (Words{"e", "\xCC\x81"}));
  // Invalid bytes come back as U+FFFD (a symbol-like "other" character).
  EXPECT_EQ(llama3("a\xFF"), (Words{"a", "\xEF\xBF\xBD"}));
}

TEST(TokenizerPreTokenize, Gpt2Words) {
  // Contractions are case-sensitive here.
  EXPECT_EQ(gpt2("I'm I'M"), (Words{"I", "'m", " I", "'", "M"}));
  EXPECT_EQ(gpt2(" 123abc"), (Words{" 123", "abc"}));
  EXPECT_EQ(gpt2("Hello, world!!"), (Words{"Hello", ",", " world", "!!"}));
  EXPECT_EQ(gpt2("a  b"), (Words{"a", " ", " b"}));
  // No newline rule in GPT-2: \s+(?!\S) takes the first newline, \s+ the second.
  EXPECT_EQ(gpt2("a\n\nb"), (Words{"a", "\n", "\n", "b"}));
}

TEST(TokenizerPreTokenize, DefaultAndStarcoder) {
  // default: punctuation runs, then GPT-2, then digit runs, then digit triples.
  EXPECT_EQ(pre_tokenize(PreTokenizer::kDefault, "Hello, world 12345!"),
            (Words{"Hello", ",", " world", " ", "123", "45", "!"}));
  EXPECT_EQ(pre_tokenize(PreTokenizer::kStarcoder, "ab 123"), (Words{"ab", " ", "1", "2", "3"}));
}

TEST(TokenizerPreTokenize, Names) {
  EXPECT_EQ(*pre_tokenizer_from_name("llama-bpe"), PreTokenizer::kLlama3);
  EXPECT_EQ(*pre_tokenizer_from_name("qwen2"), PreTokenizer::kQwen2);
  EXPECT_EQ(*pre_tokenizer_from_name("gpt-2"), PreTokenizer::kGpt2);
  EXPECT_EQ(*pre_tokenizer_from_name(""), PreTokenizer::kDefault);
  EXPECT_EQ(*pre_tokenizer_from_name("deepseek-llm"), PreTokenizer::kDeepseekLlm);
  EXPECT_EQ(*pre_tokenizer_from_name("deepseek-coder"), PreTokenizer::kDeepseekCoder);
  EXPECT_EQ(*pre_tokenizer_from_name("deepseek-v3"), PreTokenizer::kDeepseek3);
  EXPECT_EQ(*pre_tokenizer_from_name("deepseek-r1-qwen"), PreTokenizer::kQwen2);
  EXPECT_EQ(*pre_tokenizer_from_name("kimi-k2"), PreTokenizer::kKimiK2);
  EXPECT_EQ(pre_tokenizer_from_name("tekken").status().code(), ErrorCode::kUnavailable);
}

// The words below are worked by hand from the regexes (pretokenize_deepseek.cc);
// tokenizer_llamacpp_test.cc checks the same splitters against llama.cpp.
TEST(TokenizerPreTokenize, DeepseekV3) {
  Words want = {"Hello", ",", " world", " ", "123", "45", "!"};
  EXPECT_EQ(pre_tokenize(PreTokenizer::kDeepseek3, "Hello, world 12345!"), want);
  // Kana and Han run together, apart from Latin letters; ".Net" after a space is " ." + "Net"
  // (the space-punctuation alternative starts first), but "'s" is one word.
  want = {"'s", " .", "Net", " ", "\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x81\x93\xE3\x82\x93", "abc"};
  EXPECT_EQ(pre_tokenize(PreTokenizer::kDeepseek3, "'s .Net \xE4\xBD\xA0\xE5\xA5\xBD\xE3\x81\x93\xE3\x82\x93" "abc"), want);
}

TEST(TokenizerPreTokenize, DeepseekLlmAndCoder) {
  Words want = {"Hello", ",", " world", " ", "123", "\n"};
  EXPECT_EQ(pre_tokenize(PreTokenizer::kDeepseekLlm, "Hello, world 123\n"), want);
  EXPECT_EQ(pre_tokenize(PreTokenizer::kDeepseekCoder, "ab 12"), (Words{"ab", " ", "1", "2"}));
}

TEST(TokenizerPreTokenize, KimiK2) {
  // Han apart from other letters, contractions kept on their word, digits in threes.
  const Words want = {"Hello", " ", "\xE4\xBD\xA0\xE5\xA5\xBD", "World's", " ", "123", "4"};
  EXPECT_EQ(pre_tokenize(PreTokenizer::kKimiK2, "Hello \xE4\xBD\xA0\xE5\xA5\xBDWorld's 1234"), want);
}

TEST(TokenizerPreTokenize, WordsConcatenateToTheText) {
  const std::string s = "It's 2024-01-05, 9:30\xC2\xA0pm!  \xE4\xBD\xA0\xE5\xA5\xBD\n\n\t'll x\xF0\x9F\x91\x8D ";
  for (PreTokenizer p : {PreTokenizer::kDefault, PreTokenizer::kGpt2, PreTokenizer::kStarcoder,
                         PreTokenizer::kLlama3, PreTokenizer::kQwen2, PreTokenizer::kDeepseekLlm,
                         PreTokenizer::kDeepseekCoder, PreTokenizer::kDeepseek3, PreTokenizer::kKimiK2}) {
    std::string joined;
    for (const auto& w : pre_tokenize(p, s)) {
      EXPECT_FALSE(w.empty());
      joined += w;
    }
    EXPECT_EQ(joined, s);
  }
}

}  // namespace
}  // namespace lattice::engine

namespace lattice::engine {
namespace {

// An independent oracle: the regexes themselves, run by std::regex on a "collapsed" text
// where every non-ASCII codepoint is replaced by one byte standing for its class (letter,
// number, whitespace, other) and \p{L} / \p{N} by bracket expressions that include that
// byte. This is how llama.cpp itself runs pre-tokenizer regexes it has no hand-written
// matcher for (Qwen 2's among them).
std::vector<std::string> regex_split(const std::string& pattern, std::string_view text) {
  const std::vector<uint32_t> cps = unicode::decode_utf8(text);
  std::string collapsed;
  for (uint32_t cp : cps) {
    if (cp < 128) collapsed.push_back(static_cast<char>(cp));
    else if (unicode::is_whitespace(cp)) collapsed.push_back('\x0B');
    else if (unicode::is_letter(cp)) collapsed.push_back('\xD2');
    else if (unicode::is_number(cp)) collapsed.push_back('\xD1');
    else collapsed.push_back('\xD0');
  }
  std::string re = pattern;
  auto replace = [&](const std::string& from, const std::string& in_class) {
    for (size_t at; (at = re.find(from)) != std::string::npos;) {
      // Inside [...] insert the members; outside, wrap them in brackets.
      const size_t open = re.rfind('[', at);
      const size_t close = re.rfind(']', at);
      const bool inside = open != std::string::npos && (close == std::string::npos || close < open);
      re.replace(at, from.size(), inside ? in_class : "[" + in_class + "]");
    }
  };
  replace("\\p{L}", "\xD2" "A-Za-z");
  replace("\\p{N}", "\xD1" "0-9");
  static std::map<std::string, std::regex> compiled;  // compiling is the slow part
  auto found = compiled.find(re);
  if (found == compiled.end()) found = compiled.emplace(re, std::regex(re)).first;
  const std::regex& expr = found->second;
  std::vector<std::string> words;
  size_t last = 0;
  auto emit = [&](size_t b, size_t e) {
    std::string w;
    for (size_t i = b; i < e; ++i) unicode::append_utf8(w, cps[i]);
    words.push_back(w);
  };
  for (auto it = std::cregex_iterator(collapsed.data(), collapsed.data() + collapsed.size(), expr);
       it != std::cregex_iterator(); ++it) {
    const size_t b = static_cast<size_t>(it->position()), e = b + static_cast<size_t>(it->length());
    if (b > last) emit(last, b);
    if (e > b) emit(b, e);
    last = e;
  }
  if (last < cps.size()) emit(last, cps.size());
  return words;
}

const char* const kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

TEST(TokenizerPreTokenize, MatchesTheRegexesOnRandomText) {
  const std::vector<std::string> alphabet = {
      "a", "Z", "q", "'", "s", "S", "t", "re", "LL", "d", "m", "ve", " ", " ", "  ", "\t", "\n", "\r", "\r\n",
      "0", "12", "345", "!", "?", ".", ",", "$", "(", ")", "-", "_", "\xC2\xA0", "\xE3\x80\x80",
      "\xE4\xBD\xA0", "\xC3\xA9", "\xD0\x96", "\xD9\xA3" /* Arabic 3 */, "\xE2\x85\xA5" /* Roman VI */,
      "\xF0\x9F\x91\x8D", "\xCC\x81" /* combining */, "\xE2\x80\x94" /* em dash */, "\xFF"};
  std::mt19937 rng(3);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 16);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(pre_tokenize(PreTokenizer::kLlama3, s), regex_split(kLlama3Regex, s)) << "llama3: '" << s << "'";
    ASSERT_EQ(pre_tokenize(PreTokenizer::kQwen2, s), regex_split(kQwen2Regex, s)) << "qwen2: '" << s << "'";
    ASSERT_EQ(pre_tokenize(PreTokenizer::kGpt2, s), regex_split(kGpt2Regex, s)) << "gpt2: '" << s << "'";
  }
}

}  // namespace
}  // namespace lattice::engine
