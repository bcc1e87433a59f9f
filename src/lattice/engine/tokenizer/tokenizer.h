// Tokenizer: text <-> token ids for the two vocabulary kinds GGUF models use, matching
// llama.cpp's behaviour (src/llama-vocab.cpp) so prompts tokenize to the same ids:
//
//   model "llama" (SentencePiece BPE, "SPM"): spaces escaped to U+2581, a space prefixed to
//     each text run that starts the input or follows a special token, pairs merged by the
//     highest token score, pieces without a token fall back to <0xXX> byte tokens.
//   model "gpt2" (byte-level BPE): the text is split by the pre-tokenizer named in
//     tokenizer.ggml.pre (gpt-2, llama3 / llama-bpe, qwen2, ...), each word mapped to the
//     byte-level alphabet and merged in merge-rank order.
//
// In both, special tokens (control, user-defined, unknown) are cut out of the text first,
// longest first; control and unknown ones only when parse_special is set.
//
// A Tokenizer is built from plain data (TokenizerSpec), is immutable after create() and is
// safe to use from many threads at once. Nothing here blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "lattice/core/status.h"

namespace lattice::engine {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

// tokenizer.ggml.token_type values. (Named TokenKind: gguf/vocab_gen.h has its own TokenType.)
enum class TokenKind : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// How a byte-level BPE vocabulary splits text into words before merging.
enum class PreTokenizer {
  kDefault,    // "default" / missing: punctuation runs, GPT-2 words, digit runs, digit triples
  kGpt2,       // "gpt-2", "phi-2", "roberta-bpe", "mpt", "olmo", "jais", ...
  kStarcoder,  // "starcoder", "refact", "command-r", "smollm", ...: single digits, then GPT-2
  kLlama3,     // "llama3", "llama-v3", "llama-bpe", "falcon3", "dbrx", "smaug-bpe", "chatglm-bpe"
  kQwen2,      // "qwen2", "stablelm2", "megrez", "deepseek-r1-qwen": as Llama 3 but single digits
  kDeepseekLlm,    // "deepseek-llm" (DeepSeek LLM, V2): newlines, letter and punctuation runs, CJK, digit runs
  kDeepseekCoder,  // "deepseek-coder": newlines, \p{L} and \p{P} runs, CJK, single digits
  kDeepseek3,      // "deepseek-v3" (DeepSeek V3, V3.1, R1): digit triples, kana/Han runs, then words
  kKimiK2,         // "kimi-k2" (Kimi K2, K2.5): Han runs, non-Han words, digit triples, as llama.cpp runs it
};
// Maps a tokenizer.ggml.pre value; kUnavailable for a name we do not implement.
Result<PreTokenizer> pre_tokenizer_from_name(std::string_view name);

// Splits text into pre-tokenizer words (UTF-8; invalid bytes come back as U+FFFD). The
// concatenation of the words is the decoded text.
std::vector<std::string> pre_tokenize(PreTokenizer pre, std::string_view text);

// Everything a tokenizer is made from: the tokenizer.ggml.* keys of a GGUF file.
struct TokenizerSpec {
  std::string model;  // "llama" (SPM) or "gpt2" (byte-level BPE)
  std::string pre;    // pre-tokenizer name (gpt2 only); empty means "default"
  std::vector<std::string> tokens;
  std::vector<float> scores;            // SPM merge priorities; may be empty (all 0)
  std::vector<int32_t> token_types;     // TokenKind values (tokenizer.ggml.token_type); may be empty (all normal)
  std::vector<std::string> merges;      // gpt2: "left right", rank = index
  // Special ids; unset means llama.cpp's default for the model kind.
  std::optional<TokenId> bos_id, eos_id, unk_id, pad_id, eot_id, eom_id;
  // Fill-in-the-middle pad / repository / file-separator tokens: they end generation too.
  std::optional<TokenId> fim_pad_id, fim_rep_id, fim_sep_id;
  // Unset means llama.cpp's default for the model kind / pre-tokenizer.
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::string chat_template;  // tokenizer.chat_template (Jinja source), may be empty
};

struct EncodeOptions {
  bool add_special = true;     // add BOS/EOS if the vocabulary asks for them
  bool parse_special = false;  // match control tokens ("<|im_start|>") written in the text
};

struct DecodeOptions {
  bool remove_special = true;   // drop a leading BOS / trailing EOS the encoder would add
  bool render_special = false;  // print control tokens' text instead of nothing
};

namespace detail {
// Lets the token map be probed with a string_view without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
}  // namespace detail

class Tokenizer {
 public:
  enum class Kind { kSpm, kBpe };

  // Validates the spec: known model, ids in range, merges of the form "a b", no duplicate
  // token texts, byte tokens for byte fallback. Errors are kInvalidArgument / kUnavailable
  // with a message naming the bad entry.
  static Result<Tokenizer> create(TokenizerSpec spec);

  // llama_tokenize(add_special, parse_special). Invalid UTF-8 never fails: SPM carries the
  // bytes through byte tokens, BPE sees U+FFFD per bad byte (as llama.cpp does).
  std::vector<TokenId> encode(std::string_view text, EncodeOptions options = {}) const;
  // llama_detokenize(remove_special, unparse_special), quirks included: SPM drops the space
  // prefix from the first piece unless a BOS was removed before it; llama-bpe and gpt-2
  // vocabularies clean up " ," " ." " ?" " !" and " 's"-style spaces. So decode(encode(s)) == s
  // for SPM with add_special=false, for qwen2 always, for llama3 unless s has those spaces.
  std::string decode(std::span<const TokenId> ids, DecodeOptions options = {}) const;
  // The bytes one token stands for (may be part of a UTF-8 character). Control and unknown
  // tokens give "" unless render_special. Out-of-range ids give "".
  std::string token_to_piece(TokenId id, bool render_special = false) const;

  size_t n_vocab() const { return tokens_.size(); }
  Kind kind() const { return kind_; }
  PreTokenizer pre_tokenizer() const { return pre_; }
  // The vocabulary entry as stored; "" / kUndefined for ids out of range (ids may come from
  // outside, e.g. an API request).
  std::string_view token_text(TokenId id) const { return valid(id) ? std::string_view(tokens_[id]) : std::string_view(); }
  TokenKind token_kind(TokenId id) const { return valid(id) ? types_[id] : TokenKind::kUndefined; }
  bool valid(TokenId id) const { return id >= 0 && static_cast<size_t>(id) < tokens_.size(); }
  // kNoToken when the text is not one token.
  TokenId find_token(std::string_view text) const;

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId eot() const { return eot_; }
  TokenId unk() const { return unk_; }
  TokenId pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // End of generation: EOS, EOT, EOM, the FIM pad/repo/file-separator tokens and the known
  // end-of-turn tokens (<|eot_id|>, <|im_end|>, ...), as llama.cpp decides it.
  bool is_eog(TokenId id) const { return eog_.count(id) != 0; }
  const std::string& chat_template() const { return chat_template_; }

 private:
  Tokenizer() = default;

  struct Fragment {
    TokenId token = kNoToken;  // a special token, or kNoToken for raw text [begin, end)
    size_t begin = 0, end = 0;
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;

  void encode_spm(std::string_view text, std::vector<TokenId>& out) const;  // spm.cc
  TokenId spm_byte_token(uint8_t byte) const;                               // spm.cc
  void encode_bpe(std::string_view text, std::vector<TokenId>& out) const;  // bpe.cc
  int bpe_rank(std::string_view left, std::string_view right) const;        // bpe.cc
  void bpe_word(const std::string& word, std::vector<TokenId>& out) const;  // bpe.cc

  Kind kind_ = Kind::kSpm;
  PreTokenizer pre_ = PreTokenizer::kDefault;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenKind> types_;
  std::unordered_map<std::string, TokenId, detail::StringHash, std::equal_to<>> token_to_id_;
  std::unordered_map<std::string, int, detail::StringHash, std::equal_to<>> merge_rank_;  // left '\0' right
  std::vector<TokenId> special_by_length_;           // control/user-defined/unknown, longest first
  std::vector<std::string> pieces_;                  // token_to_piece(render_special=true) cache
  std::unordered_set<TokenId> eog_;
  TokenId bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken;
  TokenId unk_ = kNoToken, pad_ = kNoToken;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  bool ignore_merges_ = false, clean_spaces_ = false;
  std::string chat_template_;
};

// Turns a stream of token ids into text that only ever ends on whole UTF-8 characters: a
// character split across tokens (byte tokens, byte-level BPE pieces) is held back until its
// last byte arrives. Not thread-safe; one per generation stream. The tokenizer must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool render_special = false)
      : tokenizer_(&tokenizer), render_special_(render_special) {}
  // Text that became complete with this token (possibly empty).
  std::string push(TokenId id);
  // Whatever is still held back (an incomplete character at the end of the stream).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool render_special_;
  std::string pending_;
};

}  // namespace lattice::engine
