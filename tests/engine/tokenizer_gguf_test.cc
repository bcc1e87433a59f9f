// The tokenizer on the vocabularies our model generator writes (gguf/vocab_gen.h): read
// back from GGUF metadata, from a real file, and round-tripped over the generator's own
// training text and random text. These are the models later cross-checked against llama.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "lattice/engine/gguf/make_model.h"
#include "lattice/engine/gguf/vocab_gen.h"
#include "lattice/engine/tokenizer/chat_template.h"
#include "lattice/engine/tokenizer/from_gguf.h"

namespace lattice::engine {
namespace {

// The same keys make_model writes.
Metadata metadata_for(const GeneratedVocab& v) {
  Metadata md;
  md.set("tokenizer.ggml.model", v.model);
  if (!v.pre.empty()) md.set("tokenizer.ggml.pre", v.pre);
  md.set("tokenizer.ggml.tokens", v.tokens);
  md.set("tokenizer.ggml.scores", v.scores);
  md.set("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) md.set("tokenizer.ggml.merges", v.merges);
  md.set("tokenizer.ggml.bos_token_id", v.bos_id);
  md.set("tokenizer.ggml.eos_token_id", v.eos_id);
  if (v.unk_id) md.set("tokenizer.ggml.unknown_token_id", *v.unk_id);
  if (v.pad_id) md.set("tokenizer.ggml.padding_token_id", *v.pad_id);
  md.set("tokenizer.ggml.add_bos_token", v.add_bos);
  md.set("tokenizer.ggml.add_eos_token", v.add_eos);
  md.set("tokenizer.chat_template", v.chat_template);
  return md;
}

struct Case {
  const char* model;
  ChatStyle style;
  uint32_t vocab;
  ChatFormat format;
};

class GeneratedVocabTest : public ::testing::TestWithParam<Case> {};

TEST_P(GeneratedVocabTest, LoadsAndRoundTrips) {
  const Case c = GetParam();
  auto v = generate_vocab(c.model, c.style, c.vocab);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  auto spec = tokenizer_spec_from_metadata(metadata_for(*v));
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  auto t = Tokenizer::create(*spec);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->n_vocab(), c.vocab);
  EXPECT_EQ(t->bos(), static_cast<TokenId>(v->bos_id));
  EXPECT_TRUE(t->is_eog(static_cast<TokenId>(v->eos_id)));
  EXPECT_EQ(detect_chat_format(t->chat_template()), c.format);

  // The training text: round trip, and the merges actually compress it.
  const std::string text(vocab_training_text());
  const std::vector<TokenId> ids = t->encode(text, {.add_special = false});
  EXPECT_LT(ids.size(), text.size() / 2);
  // llama3's decode (like llama.cpp's) cleans up " ," " ." " ?" " !" " '": skip texts with those.
  const bool cleans = t->kind() == Tokenizer::Kind::kBpe && v->pre != "qwen2";
  auto cleanup_sensitive = [&](const std::string& s) {
    for (const char* p : {" ,", " .", " ?", " !", " '"}) {
      if (s.find(p) != std::string::npos) return cleans;
    }
    return false;
  };
  if (!cleanup_sensitive(text)) {
    EXPECT_EQ(t->decode(ids), text);
  }

  const std::vector<std::string> alphabet = {"the", " ", "  ", "\n", "\n\n", "a", "Z", "0", "42", "1999", ",",
                                             "-", "\xE4\xBD\xA0", "\xF0\x9F\x98\x80", "e\xCC\x81", "\t", "it", "is",
                                             "\xC3\xA9", "\xD0\x96", "(", ":"};
  std::mt19937 rng(c.vocab);
  for (int iter = 0; iter < 100; ++iter) {
    std::string s;
    const int len = static_cast<int>(rng() % 30);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
    if (cleanup_sensitive(s)) continue;
    EXPECT_EQ(t->decode(t->encode(s, {.add_special = false})), s) << "'" << s << "'";
  }

  // The chat prompt's control tokens are found when parse_special is on (the SPM vocab's
  // [INST] format has none) and render back to the prompt.
  if (t->kind() == Tokenizer::Kind::kBpe) {
    const std::vector<ChatMessage> chat = {{"system", "Be brief."}, {"user", "Hi"}};
    const std::string prompt = apply_chat_template(t->chat_template(), chat, true);
    const std::vector<TokenId> with = t->encode(prompt, {.add_special = false, .parse_special = true});
    const std::vector<TokenId> without = t->encode(prompt, {.add_special = false, .parse_special = false});
    EXPECT_LT(with.size(), without.size()) << prompt;
    EXPECT_EQ(t->decode(with, {.render_special = true}), prompt);
    EXPECT_EQ(t->decode(without), prompt);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, GeneratedVocabTest,
                         ::testing::Values(Case{"llama", ChatStyle::kLlama2, 512, ChatFormat::kLlama2SysBos},
                                           Case{"llama", ChatStyle::kLlama2, 3000, ChatFormat::kLlama2SysBos},
                                           Case{"gpt2", ChatStyle::kLlama3, 600, ChatFormat::kLlama3},
                                           Case{"gpt2", ChatStyle::kLlama3, 4000, ChatFormat::kLlama3},
                                           Case{"gpt2", ChatStyle::kChatML, 600, ChatFormat::kChatML},
                                           Case{"gpt2", ChatStyle::kChatML, 4000, ChatFormat::kChatML}));

TEST(TokenizerGguf, ReadsAGeneratedModelFile) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("lattice_tokenizer_test_" + std::to_string(::getpid()) + ".gguf")).string();
  MakeModelOptions o;
  o.arch = "qwen2";
  o.dim = 64;
  o.layers = 1;
  o.heads = 2;
  o.vocab = 700;
  o.type = "f32";
  o.threads = 1;
  auto made = make_model(o, path);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto t = tokenizer_from_gguf(**file);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->n_vocab(), 700u);
  EXPECT_EQ(t->kind(), Tokenizer::Kind::kBpe);
  EXPECT_EQ(t->pre_tokenizer(), PreTokenizer::kQwen2);
  EXPECT_EQ(t->decode(t->encode("Hello, world! 123")), "Hello, world! 123");
  std::filesystem::remove(path);
}

TEST(TokenizerGguf, MissingOrMistypedKeys) {
  Metadata md;
  EXPECT_EQ(tokenizer_spec_from_metadata(md).status().code(), ErrorCode::kNotFound);
  md.set("tokenizer.ggml.model", "gpt2");
  md.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b"});
  EXPECT_EQ(tokenizer_spec_from_metadata(md).status().code(), ErrorCode::kNotFound);  // no merges
  md.set("tokenizer.ggml.pre", "kimi-k2");  // ... which llama.cpp lets Kimi K2 files omit
  EXPECT_TRUE(tokenizer_spec_from_metadata(md).ok());
  md.erase("tokenizer.ggml.pre");
  md.set("tokenizer.ggml.merges", std::vector<std::string>{"a b"});
  md.set("tokenizer.ggml.scores", std::vector<int32_t>{1, 2});  // wrong element type
  EXPECT_EQ(tokenizer_spec_from_metadata(md).status().code(), ErrorCode::kCorrupt);
  md.erase("tokenizer.ggml.scores");
  md.set("tokenizer.ggml.bos_token_id", uint32_t{99});  // past the vocabulary: dropped
  auto spec = tokenizer_spec_from_metadata(md);
  ASSERT_TRUE(spec.ok());
  EXPECT_FALSE(spec->bos_id.has_value());
}

}  // namespace
}  // namespace lattice::engine
