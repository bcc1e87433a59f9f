// SentencePiece-style tokenizer on a small hand-built vocabulary; the expected ids are
// worked out by hand in the comments (merge by highest score, leftmost on ties, byte
// fallback as <0xXX>).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "lattice/engine/tokenizer/tokenizer.h"
#include "tokenizer_testlib.h"

namespace lattice::engine {
namespace {

constexpr TokenId kUnk = 0, kBos = 1, kEos = 2;
constexpr TokenId byte_id(int b) { return 3 + b; }  // <0x00> is id 3

// ids 259.. (normal pieces), scores as listed.
enum : TokenId {
  kSpace = 259,  // ▁
  kH, kE, kL, kO, kW, kR, kD,  // 260..266: single letters
  kSpaceH,   // 267 "▁h"   -5
  kEl,       // 268 "el"   -3
  kLl,       // 269 "ll"   -1
  kLo,       // 270 "lo"   -2
  kEll,      // 271 "ell"  -4
  kHell,     // 272 "hell" -6
  kSpaceW,   // 273 "▁w"   -1.5
  kOr,       // 274 "or"   -1.5
  kSpaceWor, // 275 "▁wor" -2.5
  kLd,       // 276 "ld"   -7
  kAa,       // 277 "aa"   -1
  kA,        // 278 "a"
  kUser,     // 279 "<user>" user-defined
  kCtl,      // 280 "<|ctl|>" control
  kEot,      // 281 "<|eot_id|>" (declared normal; forced to control)
};


Tokenizer make() {
  auto t = Tokenizer::create(test_vocab::hand_spm_spec());
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

std::vector<TokenId> ids(std::initializer_list<TokenId> l) { return l; }

TEST(TokenizerSpm, DefaultsFollowLlamaCpp) {
  Tokenizer t = make();
  EXPECT_EQ(t.kind(), Tokenizer::Kind::kSpm);
  EXPECT_EQ(t.bos(), kBos);
  EXPECT_EQ(t.eos(), kEos);
  EXPECT_EQ(t.unk(), kUnk);
  EXPECT_TRUE(t.add_bos());
  EXPECT_FALSE(t.add_eos());
  EXPECT_TRUE(t.add_space_prefix());
}

TEST(TokenizerSpm, MergesByHighestScore) {
  Tokenizer t = make();
  // "hello" -> "▁hello": symbols ▁ h e l l o. Pairs that are tokens: ▁h(-5) el(-3) ll(-1) lo(-2).
  // ll wins -> ▁ h e [ll] o; new pairs e+ll="ell"(-4), ll+o (none); el and lo are now stale.
  // ell(-4) beats ▁h(-5) -> ▁ h [ell] o; new h+ell="hell"(-6).
  // ▁h(-5) beats hell(-6) -> [▁h] [ell] o; "▁hell" is no token; hell is stale. Done.
  EXPECT_EQ(t.encode("hello"), ids({kBos, kSpaceH, kEll, kO}));
  EXPECT_EQ(t.encode("hello", {.add_special = false}), ids({kSpaceH, kEll, kO}));
  // " world" -> "▁▁world"? No: "world" -> "▁world": ▁ w o r l d. Pairs: ▁w(-1.5) or(-1.5) ld(-7).
  // Tie at -1.5: the leftmost (▁w) first -> [▁w] o r l d; ▁w+o none. Then or -> [▁w][or] l d;
  // new ▁w+or="▁wor"(-2.5), or+l none. ▁wor(-2.5) -> [▁wor] l d; then ld(-7) -> [▁wor][ld].
  EXPECT_EQ(t.encode("world", {.add_special = false}), ids({kSpaceWor, kLd}));
}

TEST(TokenizerSpm, LeftmostWinsTies) {
  Tokenizer t = make();
  // "aaa" -> "▁aaa": ▁ a a a; pairs aa(1,2) and aa(2,3) tie at -1: the left one merges first
  // -> ▁ [aa] a, and the right pair is stale. "▁" and "a" stay single.
  EXPECT_EQ(t.encode("aaa", {.add_special = false}), ids({kSpace, kAa, kA}));
  // "aaaa" -> ▁ [aa] [aa]
  EXPECT_EQ(t.encode("aaaa", {.add_special = false}), ids({kSpace, kAa, kAa}));
}

TEST(TokenizerSpm, ByteFallbackForUnknownCharacters) {
  Tokenizer t = make();
  // "é" is C3 A9 and no token: ▁ then <0xC3> <0xA9>.
  EXPECT_EQ(t.encode("\xC3\xA9", {.add_special = false}), ids({kSpace, byte_id(0xC3), byte_id(0xA9)}));
  // A newline has no piece either: <0x0A>.
  EXPECT_EQ(t.encode("h\n", {.add_special = false}), ids({kSpaceH, byte_id('\n')}));
  EXPECT_EQ(t.decode(ids({kSpace, byte_id(0xC3), byte_id(0xA9)})), "\xC3\xA9");
}

TEST(TokenizerSpm, InvalidUtf8IsCarriedAsBytes) {
  Tokenizer t = make();
  const std::string bad = "h\xFF\xC3(\x80";
  std::vector<TokenId> got = t.encode(bad, {.add_special = false});
  EXPECT_EQ(t.decode(got), bad);
}

TEST(TokenizerSpm, SpacesAreEscapedAndThePrefixIsAddedOnce) {
  Tokenizer t = make();
  // " hello" -> "▁▁hello": ▁ ▁ h e l l o -> ▁ [▁h] [ell] o (the first ▁ pairs with nothing).
  EXPECT_EQ(t.encode(" hello", {.add_special = false}), ids({kSpace, kSpaceH, kEll, kO}));
  // "hello world": the inner space becomes ▁ and starts "▁wor".
  EXPECT_EQ(t.encode("hello world", {.add_special = false}), ids({kSpaceH, kEll, kO, kSpaceWor, kLd}));
  EXPECT_EQ(t.encode("", {.add_special = false}), ids({}));
  EXPECT_EQ(t.encode(""), ids({kBos}));
}

TEST(TokenizerSpm, DecodeStripsThePrefixSpaceLikeLlamaCpp) {
  Tokenizer t = make();
  EXPECT_EQ(t.decode(ids({kSpaceH, kEll, kO})), "hello");
  // With a BOS first, llama.cpp keeps the space (the BOS took the "first token" slot).
  EXPECT_EQ(t.decode(ids({kBos, kSpaceH, kEll, kO})), " hello");
  EXPECT_EQ(t.decode(ids({kBos, kSpaceH, kEll, kO}), {.remove_special = false}), " hello");
  EXPECT_EQ(t.decode(ids({kBos, kSpaceH}), {.remove_special = false, .render_special = true}), "<s> h");
}

TEST(TokenizerSpm, SpecialTokensInText) {
  Tokenizer t = make();
  // User-defined tokens are always cut out; the text after them gets the space prefix again.
  EXPECT_EQ(t.encode("h<user>h", {.add_special = false}), ids({kSpaceH, kUser, kSpaceH}));
  // Control tokens only with parse_special.
  EXPECT_EQ(t.encode("<|ctl|>hello", {.add_special = false, .parse_special = true}),
            ids({kCtl, kSpaceH, kEll, kO}));
  std::vector<TokenId> plain = t.encode("<|ctl|>", {.add_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), kCtl), 0);
  EXPECT_EQ(t.decode(plain), "<|ctl|>");
  // Control tokens decode to nothing unless rendered.
  EXPECT_EQ(t.decode(ids({kCtl, kSpaceH})), " h");
  EXPECT_EQ(t.decode(ids({kCtl, kSpaceH}), {.render_special = true}), "<|ctl|> h");
}

TEST(TokenizerSpm, EndOfGeneration) {
  Tokenizer t = make();
  EXPECT_TRUE(t.is_eog(kEos));
  EXPECT_TRUE(t.is_eog(kEot));  // found by its text
  EXPECT_EQ(t.token_kind(kEot), TokenKind::kControl);
  EXPECT_EQ(t.eot(), kEot);
  EXPECT_FALSE(t.is_eog(kBos));
  EXPECT_FALSE(t.is_eog(kH));
}

TEST(TokenizerSpm, RoundTripsRandomText) {
  Tokenizer t = make();
  const std::vector<std::string> alphabet = {"h", "e", "l", "o", " ", "  ", "w", "r", "d", "a", "\n", "\t",
                                             "\xE4\xBD\xA0", "\xF0\x9F\x91\x8D", "e\xCC\x81", "7", "'"};
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    std::string s;
    const int len = static_cast<int>(rng() % 24);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    EXPECT_EQ(t.decode(t.encode(s, {.add_special = false})), s) << "text: '" << s << "'";
  }
}

TEST(TokenizerSpm, StreamDecoderHoldsSplitCharacters) {
  Tokenizer t = make();
  StreamDecoder d(t);
  EXPECT_EQ(d.push(kSpaceH), " h");
  EXPECT_EQ(d.push(byte_id(0xF0)), "");
  EXPECT_EQ(d.push(byte_id(0x9F)), "");
  EXPECT_EQ(d.push(byte_id(0x91)), "");
  EXPECT_EQ(d.push(byte_id(0x8D)), "\xF0\x9F\x91\x8D");
  EXPECT_EQ(d.push(byte_id(0xE4)), "");
  EXPECT_EQ(d.flush(), "\xE4");
}

TEST(TokenizerSpm, LongInputIsNotQuadratic) {
  Tokenizer t = make();
  std::string s(200000, 'a');
  std::vector<TokenId> got = t.encode(s, {.add_special = false});
  // ▁ then 100000 "aa".
  ASSERT_EQ(got.size(), 100001u);
  EXPECT_EQ(got[0], kSpace);
  EXPECT_EQ(got[1], kAa);
  EXPECT_EQ(got.back(), kAa);
}

TEST(TokenizerSpm, OutOfRangeIdsAreHarmless) {
  Tokenizer t = make();
  for (TokenId id : {-1, 282, 1 << 30}) {
    EXPECT_FALSE(t.valid(id));
    EXPECT_EQ(t.token_text(id), "");
    EXPECT_EQ(t.token_kind(id), TokenKind::kUndefined);
    EXPECT_EQ(t.token_to_piece(id, true), "");
    EXPECT_FALSE(t.is_eog(id));
  }
  // Invalid ids print nothing (the first one still takes the "strip the prefix space" turn).
  EXPECT_EQ(t.decode(ids({-5, kSpaceH, 99999, kEll, kO})), " hello");
  EXPECT_EQ(t.token_text(kEll), "ell");
}

TEST(TokenizerSpm, RejectsBadSpecs) {
  TokenizerSpec s = test_vocab::hand_spm_spec();
  s.bos_id = 100000;
  EXPECT_EQ(Tokenizer::create(s).status().code(), ErrorCode::kInvalidArgument);
  s = test_vocab::hand_spm_spec();
  s.tokens[kH] = "e";  // duplicate text
  EXPECT_EQ(Tokenizer::create(s).status().code(), ErrorCode::kInvalidArgument);
  s = test_vocab::hand_spm_spec();
  s.scores.pop_back();
  EXPECT_EQ(Tokenizer::create(s).status().code(), ErrorCode::kInvalidArgument);
  s = test_vocab::hand_spm_spec();
  s.token_types[kH] = 9;
  EXPECT_EQ(Tokenizer::create(s).status().code(), ErrorCode::kInvalidArgument);
  s = test_vocab::hand_spm_spec();
  s.tokens[byte_id(5)] = "<0xZZ>";
  EXPECT_EQ(Tokenizer::create(s).status().code(), ErrorCode::kInvalidArgument);
  s = test_vocab::hand_spm_spec();
  s.model = "bert";
  EXPECT_EQ(Tokenizer::create(s).status().code(), ErrorCode::kUnavailable);
  s = test_vocab::hand_spm_spec();
  s.tokens.clear();
  s.scores.clear();
  s.token_types.clear();
  EXPECT_EQ(Tokenizer::create(s).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace lattice::engine
